// The kernels of my_engine, one file per op family.
#pragma once

#include <openreg/sdk.hpp>

namespace my_engine {
namespace sdk = openreg::sdk;

// ops_elementwise.cpp
void add(const sdk::Call& call);       // aten::add.Tensor and aten::add_.Tensor(self, other, *, alpha=1)
void mul(const sdk::Call& call);       // aten::mul.Tensor(self, other)
void relu(const sdk::Call& call);      // aten::relu(self)

// ops_matmul.cpp
void mm(const sdk::Call& call);        // aten::mm(self, mat2)
void check_mm(const sdk::Call& call);  // declines what mm does not handle, before the call
}  // namespace my_engine
