// openreg engine SDK: everything an engine written in C++ needs, header-only.
//   status.hpp   sdk::Error, sdk::guard (exceptions -> statuses), OPENREG_SDK_CHECK
//   dtype.hpp    dtype constants and names, bfloat16/float16, sdk::dispatch
//   call.hpp     sdk::Call (typed argument access), sdk::Tensor, sdk::Host
//   strided.hpp  broadcasting, sdk::for_each_row, unary_map / binary_map
//   engine.hpp   sdk::EngineDef: the op table and the openreg_engine table
//   rnn.hpp      the fused LSTM/GRU cell kernels, sdk::rnn::register_ops
// Not included: optim.hpp, group_norm.hpp and max_pool.hpp (the optimizer step, group
// norm, 2x2 max pooling), which an engine includes in the one file that compiles their
// kernels.
//   vector_isa.hpp  run_vectorised: a loop run from an AVX2 or AVX-512 clone
//   tensor_ops.hpp, indexing.hpp  kernels shared by every engine (fill_, tril, cat, gather, index, ...)
//   prelu.hpp    _prelu_kernel and its backward
// Only the C header openreg/engine.h is the ABI; these helpers are compiled into
// each engine, so engines built with different SDK versions coexist.
#pragma once

#include <openreg/engine.h>
#include <openreg/sdk/call.hpp>
#include <openreg/sdk/dtype.hpp>
#include <openreg/sdk/engine.hpp>
#include <openreg/sdk/reduce.hpp>
#include <openreg/sdk/rnn.hpp>
#include <openreg/sdk/indexing.hpp>
#include <openreg/sdk/prelu.hpp>
#include <openreg/sdk/tensor_ops.hpp>
#include <openreg/sdk/status.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/vector_isa.hpp>
