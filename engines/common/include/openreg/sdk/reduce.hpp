// Engine SDK: sums over outer dims (bias gradients, batch statistics), the
// reduction a per-output loop does worst: each output walks a column of the
// input with a large stride, missing the cache on every element.
//
// sum_outer<T>() serves a reduction when the kept elements of the input form
// one contiguous run (element stride 1) and so do the outputs: [N, C] summed
// over N, [B, S, C] over (0, 1). It adds whole rows of the run into per-column
// accumulators instead, unit stride, which the compiler vectorises; threads
// split the run into column blocks. Rows are summed in float in blocks of
// kRowBlock, and the blocks in double, so a long column loses no more than
// ATen's own float sums, built for `isa` (vector_isa.hpp: the engine's cap).
// Returns false (and writes nothing) for other layouts.
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/vector_isa.hpp>

#include <algorithm>
#include <array>
#include <vector>

namespace openreg {
namespace sdk {

template <class T>
bool sum_outer(const Host& host, const Tensor& x, const Tensor& out, const std::vector<bool>& reduced, bool keepdim,
               double scale, VectorIsa isa = cpu_vector_isa()) {
  const int64_t nd = x.dim();
  const int64_t xes = x.element_size(), oes = out.element_size();
  // Kept dims (x and out byte strides) and reduced dims (x byte strides).
  Shape kshape, rshape;
  std::array<Operand, 2> kept{Operand{x.bytes(), {}}, Operand{out.bytes(), {}}};
  std::array<Operand, 1> red{Operand{x.bytes(), {}}};
  int64_t od = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      rshape.push_back(x.size(d));
      red[0].byte_strides.push_back(x.stride(d) * xes);
      if (keepdim) ++od;
    } else {
      kshape.push_back(x.size(d));
      kept[0].byte_strides.push_back(x.stride(d) * xes);
      kept[1].byte_strides.push_back(out.stride(od++) * oes);
    }
  }
  if (kshape.empty() || rshape.empty()) return false;
  detail::coalesce(kshape, kept);
  if (kshape.size() != 1 || kept[0].byte_strides[0] != xes || kept[1].byte_strides[0] != oes) return false;
  const int64_t cols = kshape[0];
  if (cols < 8) return false;  // too narrow to vectorise along: the per-output loop does as well
  detail::coalesce(rshape, red);
  const int64_t nrows = numel_of(rshape);

  constexpr int64_t kRowBlock = 64;
  constexpr int64_t kColBlock = 256;  // accumulators that stay in L1
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, nrows));
  const int64_t nblocks = (cols + kColBlock - 1) / kColBlock;
  host.parallel_for(0, nblocks, std::max<int64_t>(1, grain / kColBlock), [&](int64_t b, int64_t e) {
    run_vectorised(isa, [&]() OPENREG_SDK_ROW_LAMBDA {
      float part[kColBlock];
      double total[kColBlock];
      for (int64_t blk = b; blk < e; ++blk) {
        const int64_t c0 = blk * kColBlock, n = std::min(kColBlock, cols - c0);
        std::fill(total, total + n, 0.0);
        // Walk the reduced rows with an odometer over rshape.
        Shape index(rshape.size(), 0);
        const char* row = x.bytes() + c0 * xes;
        for (int64_t r0 = 0; r0 < nrows; r0 += kRowBlock) {
          std::fill(part, part + n, 0.0f);
          const int64_t r1 = std::min(nrows, r0 + kRowBlock);
          for (int64_t r = r0; r < r1; ++r) {
            const T* v = reinterpret_cast<const T*>(row);
            for (int64_t c = 0; c < n; ++c) part[c] += static_cast<float>(v[c]);
            for (size_t d = index.size(); d-- > 0;) {
              row += red[0].byte_strides[d];
              if (++index[d] < rshape[d]) break;
              row -= rshape[d] * red[0].byte_strides[d];
              index[d] = 0;
            }
          }
          for (int64_t c = 0; c < n; ++c) total[c] += part[c];
        }
        T* o = reinterpret_cast<T*>(out.bytes()) + c0;
        for (int64_t c = 0; c < n; ++c) o[c] = static_cast<T>(static_cast<float>(total[c] * scale));
      }
    });
  });
  return true;
}

}  // namespace sdk
}  // namespace openreg
