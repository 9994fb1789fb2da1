// mm: a straightforward blocked loop, threaded over rows of the output through
// the host's thread pool (never a thread pool of the engine's own).
#include <algorithm>
#include <vector>

#include "ops.h"

namespace my_engine {

void check_mm(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), b = call.tensor(1);
  OPENREG_SDK_REQUIRE(a.dim() == 2 && b.dim() == 2, "mm: 2-d inputs only");
  OPENREG_SDK_REQUIRE(sdk::same_dtype(a.dtype(), b.dtype()), "mm: mixed dtypes");
}

void mm(const sdk::Call& call) {
  check_mm(call);
  sdk::Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  OPENREG_SDK_CHECK(b.size(0) == K, "mm: shapes ", a.describe(), " and ", b.describe(), " cannot be multiplied");
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  float* C = out.data<float>();
  const int64_t as0 = a.stride(0), as1 = a.stride(1), bs0 = b.stride(0), bs1 = b.stride(1);
  const int64_t cs0 = out.stride(0), cs1 = out.stride(1);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K * N));
  call.host().parallel_for(0, M, grain, [&](int64_t row_begin, int64_t row_end) {
    std::vector<float> acc(static_cast<size_t>(N));
    for (int64_t i = row_begin; i < row_end; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float aik = A[i * as0 + k * as1];
        const float* brow = B + k * bs0;
        for (int64_t j = 0; j < N; ++j) acc[static_cast<size_t>(j)] += aik * brow[j * bs1];
      }
      for (int64_t j = 0; j < N; ++j) C[i * cs0 + j * cs1] = acc[static_cast<size_t>(j)];
    }
  });
}

}  // namespace my_engine
