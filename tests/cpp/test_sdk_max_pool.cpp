// openreg/sdk/max_pool.hpp: the 2x2 stride-2 vector walk, and the row loop of other
// windows (window_row), at each vector width they use
// (4 and 8 floats; the AVX-512 build walks 8 too) against window_max, ATen's one-window
// rule (the row loop: against ATen's loop written out below), which the conformance
// suite checks against torch CPU through both engines. The
// walk is called directly, without a target clone: GCC lowers the wider vectors to this
// build's instructions, so the 8-float shuffles run on any x86-64 (the engines' own runs
// use the CPU's widest). Values are 0..3 with NaN in some places: most windows hold ties,
// and NaN in each of a window's four places.
#include <openreg/sdk/max_pool.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using openreg::sdk::max_pool::Dense2x2;
using openreg::sdk::max_pool::window_max;

struct Shape {
  int64_t planes, H, W;
};

// Planes [b, e) through walk<N>; false when the width does not fit OW. Checks every
// output of the range and that the rest stays unwritten.
template <int N>
bool walk_matches_rule(const Shape& s, int64_t b, int64_t e, unsigned seed) {
  const int64_t OH = s.H / 2, OW = s.W / 2;
  std::vector<float> x(static_cast<size_t>(s.planes * s.H * s.W));
  std::mt19937 rng(seed);
  for (float& v : x) v = rng() % 9 == 0 ? NAN : static_cast<float>(rng() % 4);
  const size_t outs = static_cast<size_t>(s.planes * OH * OW);
  std::vector<float> y(outs, -7.0f);
  std::vector<int64_t> ind(outs, -7);
  const Dense2x2 a{x.data(), y.data(), ind.data(), s.H, s.W, OH, OW};
  if (!openreg::sdk::max_pool::detail::walk<N>(a, b, e)) return false;
  for (int64_t p = 0; p < s.planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const size_t o = static_cast<size_t>((p * OH + oh) * OW + ow);
        SCOPED_TRACE(::testing::Message() << "N " << N << ", " << s.planes << "x" << s.H << "x" << s.W << ", planes ["
                                          << b << ", " << e << "), output (" << p << ", " << oh << ", " << ow << ")");
        if (p < b || p >= e) {
          EXPECT_EQ(y[o], -7.0f);
          EXPECT_EQ(ind[o], -7);
          continue;
        }
        float m;
        int64_t k;
        window_max(&x[static_cast<size_t>(p * s.H * s.W + 2 * oh * s.W + 2 * ow)], s.W, s.W, m, k);
        if (std::isnan(m)) EXPECT_TRUE(std::isnan(y[o]));
        else EXPECT_EQ(y[o], m);
        EXPECT_EQ(ind[o], 2 * oh * s.W + 2 * ow + k);
      }
  return true;
}

// Planes narrower than a vector (the digits CNN's 8x8 and 4x4), a count of windows
// that leaves an odd half at the end, odd heights (the last row in no window), wide rows.
const Shape kShapes[] = {{3, 8, 8}, {5, 4, 4}, {7, 2, 4}, {2, 5, 16}, {1, 3, 32}, {4, 9, 40},
                         {3, 16, 16}, {6, 4, 12}, {2, 6, 64}, {1, 2, 16}, {3, 7, 24}};

template <int N>
void check_width() {
  int walked = 0;
  unsigned seed = 1;
  for (const Shape& s : kShapes)
    for (int64_t b : {int64_t(0), int64_t(1)}) {
      const int64_t e = s.planes - b;
      if (e <= b) continue;
      if (walk_matches_rule<N>(s, b, e, seed++)) ++walked;
      else EXPECT_NE((s.W / 2) % (N / 2), 0) << "walk<" << N << "> declined " << s.W << "-wide planes";
    }
  EXPECT_GT(walked, 4);
}

TEST(SdkMaxPool, Walk4MatchesWindowRule) { check_width<4>(); }
TEST(SdkMaxPool, Walk8MatchesWindowRule) { check_width<8>(); }

// window_max itself on hand-made windows (rows 0 1 / 2 3 of a 2-wide plane).
TEST(SdkMaxPool, WindowRule) {
  auto run = [](std::vector<float> w, float want, int64_t at) {
    float m;
    int64_t k;
    window_max(w.data(), 2, 2, m, k);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(m));
    else EXPECT_EQ(m, want);
    EXPECT_EQ(k, at);
  };
  run({1, 2, 3, 4}, 4, 3);
  run({4, 3, 2, 1}, 4, 0);
  run({2, 5, 5, 1}, 5, 1);         // a tie: the first maximum
  run({1, NAN, 9, 2}, NAN, 1);     // a NaN wins over greater values
  run({NAN, 1, NAN, 2}, NAN, 2);   // the last NaN
  run({-INFINITY, -INFINITY, -INFINITY, -INFINITY}, -INFINITY, 0);
}

// ATen's max pool of one plane, written out: per output, the window's rows then
// columns; a greater value or a NaN takes over; the index is h * W + w.
void reference_plane(const openreg::sdk::max_pool::PlaneWindows& g, const float* x, float* y, int64_t* ind) {
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      float m = -INFINITY;
      int64_t at = -1;
      for (int64_t i = 0; i < g.kH; ++i)
        for (int64_t j = 0; j < g.kW; ++j) {
          const int64_t h = oh * g.sH - g.pH + i * g.dH, w = ow * g.sW - g.pW + j * g.dW;
          if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
          const float v = x[h * g.W + w];
          if (at < 0 || v > m || std::isnan(v)) {
            m = v;
            at = h * g.W + w;
          }
        }
      y[oh * g.OW + ow] = m;
      ind[oh * g.OW + ow] = at;
    }
}

// Windows of the row loop: ResNet's 3x3 stride 2 padding 1, stride 1, dilation, a
// 1-wide kernel, stride 3 (a column at a time), output rows shorter than a vector and
// not a multiple of one.
template <int N>
void check_row_loop() {
  using openreg::sdk::max_pool::PlaneWindows;
  struct Window {
    int64_t H, W, kH, kW, sH, sW, pH, pW, dH, dW;
  };
  const Window windows[] = {{9, 40, 3, 3, 2, 2, 1, 1, 1, 1}, {7, 37, 3, 3, 1, 1, 1, 1, 1, 1},
                            {8, 24, 2, 3, 1, 1, 1, 1, 2, 3}, {5, 13, 3, 1, 2, 1, 0, 0, 1, 1},
                            {6, 30, 3, 3, 3, 3, 0, 0, 1, 1}, {4, 6, 2, 2, 1, 2, 1, 1, 1, 1},
                            {5, 19, 2, 4, 2, 2, 1, 2, 2, 1}};
  std::mt19937 rng(5);
  for (const Window& w : windows) {
    const int64_t OH = (w.H + 2 * w.pH - w.dH * (w.kH - 1) - 1) / w.sH + 1;
    const int64_t OW = (w.W + 2 * w.pW - w.dW * (w.kW - 1) - 1) / w.sW + 1;
    const PlaneWindows g{w.H, w.W, OH, OW, w.kH, w.kW, w.sH, w.sW, w.pH, w.pW, w.dH, w.dW, w.W, OW, 1, OW, 1};
    std::vector<float> x(static_cast<size_t>(w.H * w.W));
    for (float& v : x) v = rng() % 9 == 0 ? NAN : static_cast<float>(rng() % 4);
    std::vector<float> want(static_cast<size_t>(OH * OW)), mbuf(static_cast<size_t>(OW));
    std::vector<int64_t> want_i(want.size());
    std::vector<int32_t> ibuf(static_cast<size_t>(OW));
    reference_plane(g, x.data(), want.data(), want_i.data());
    for (int64_t oh = 0; oh < OH; ++oh) {
      openreg::sdk::max_pool::detail::window_row<N>(g, x.data(), oh, mbuf.data(), ibuf.data());
      for (int64_t ow = 0; ow < OW; ++ow) {
        SCOPED_TRACE(::testing::Message() << "N " << N << ", " << w.H << "x" << w.W << " k" << w.kH << "x" << w.kW
                                          << " s" << w.sH << "x" << w.sW << " p" << w.pH << "x" << w.pW << " d" << w.dH
                                          << "x" << w.dW << ", output (" << oh << ", " << ow << ")");
        const float m = want[static_cast<size_t>(oh * OW + ow)];
        if (std::isnan(m)) EXPECT_TRUE(std::isnan(mbuf[static_cast<size_t>(ow)]));
        else EXPECT_EQ(mbuf[static_cast<size_t>(ow)], m);
        EXPECT_EQ(ibuf[static_cast<size_t>(ow)], want_i[static_cast<size_t>(oh * OW + ow)]);
      }
    }
  }
}

TEST(SdkMaxPool, RowLoop4MatchesAtensLoop) { check_row_loop<4>(); }
TEST(SdkMaxPool, RowLoop8MatchesAtensLoop) { check_row_loop<8>(); }

}  // namespace
