// openreg::load_engine and invoke_run/invoke_supports against the fixture
// engines, plus the host services table (make_host_services).
#include "engine_host.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <thread>

using namespace openreg_test;
using openreg::operator==;  // openreg_dtype lives in the global namespace: no ADL

namespace {

openreg_host& host() {
  static openreg_host h = openreg::make_host_services();
  return h;
}

// One loaded instance per fixture for the whole test program (engines are never
// unloaded; loading twice would call init twice on the same library).
openreg::Engine& loaded(const std::string& fixture) {
  static std::map<std::string, std::unique_ptr<openreg::Engine>> cache;
  auto& slot = cache[fixture];
  if (!slot) slot = openreg::load_engine(fixture_path(fixture), &host());
  return *slot;
}

// The EngineError message of load_engine(path), or "" (and a failure) when it loads.
std::string load_error(const std::string& path) {
  try {
    openreg::load_engine(path, &host());
  } catch (const openreg::EngineError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "load_engine threw a non-EngineError: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << path << " loaded, but should have been refused";
  return "";
}

int32_t* counter(const openreg::Engine& e, const char* name) {
  auto gpa = e.get_proc_address_fn();
  if (!gpa) return nullptr;
  return static_cast<int32_t*>(gpa(e.table->ctx, name));
}

const float kSentinel = -12345.0f;

std::vector<float> iota_floats(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// Runs add through invoke_run and checks every output element against a plain
// loop: out[i] = self[b(i)] + alpha * other[b(i)].
void expect_add(const openreg::Engine& engine, const View& self, const View& other, double alpha,
                bool alpha_is_int, const View& out, bool out_variant = false) {
  AddCall c(self.get(), other.get(), alpha_is_int ? int_scalar(static_cast<int64_t>(alpha)) : double_scalar(alpha),
            out.get(), out_variant);
  std::string msg;
  ASSERT_EQ(openreg::invoke_run(engine, c.call, &msg), OPENREG_STATUS_OK) << msg;
  const float a = static_cast<float>(alpha);
  for_each_index(out.sizes(), [&](const std::vector<int64_t>& idx) {
    float s = self.at<float>(broadcast_index(self.sizes(), idx));
    float o = other.at<float>(broadcast_index(other.sizes(), idx));
    float expected = s + a * o;
    ASSERT_FLOAT_EQ(out.at<float>(idx), expected) << "at flat output offset " << out.offset(idx);
  });
}

// ----------------------------------------------------------- broken engines

struct BrokenCase {
  const char* fixture;                 // file libopenreg_engine_fixture_<fixture>.so
  std::vector<std::string> reasons;    // all must appear in what()
};

std::ostream& operator<<(std::ostream& os, const BrokenCase& c) { return os << c.fixture; }

class BrokenFixture : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenFixture, RefusedWithPathAndSpecificReason) {
  const BrokenCase& c = GetParam();
  const std::string path = fixture_path(c.fixture);
  ASSERT_TRUE(std::ifstream(path).good()) << path << " was not built";
  std::string what = load_error(path);
  EXPECT_NE(what.find(path), std::string::npos) << "the error should name the library: " << what;
  for (const auto& reason : c.reasons) {
    EXPECT_NE(what.find(reason), std::string::npos) << "missing \"" << reason << "\" in: " << what;
  }
  // Refusing twice gives the same answer (nothing was half-registered).
  EXPECT_EQ(load_error(path), what);
}

INSTANTIATE_TEST_SUITE_P(
    Loader, BrokenFixture,
    ::testing::Values(
        BrokenCase{"no_entry", {"entry symbol", "openreg_engine_entry", "not an openreg engine"}},
        BrokenCase{"null_table", {"returned no engine table"}},
        BrokenCase{"bad_magic", {"magic", "0x123456789abcdef"}},
        BrokenCase{"bad_major", {"ABI 2.", "major", "ABI 1."}},
        BrokenCase{"small_struct", {"too small", "struct_size 16"}},
        BrokenCase{"null_run", {"'run' is NULL"}},
        BrokenCase{"init_fails", {"init failed", "INTERNAL", "fixture: device not found"}},
        BrokenCase{"no_host_memory", {"HOST_MEMORY"}},
        BrokenCase{"throws_in_entry", {"entry point threw"}},
        BrokenCase{"throws_in_init", {"init failed", "threw"}}),
    [](const ::testing::TestParamInfo<BrokenCase>& info) { return std::string(info.param.fixture); });

TEST(Loader, NonexistentPathIsDlopenFailure) {
  const std::string path = fixture_dir() + "/libopenreg_engine_does_not_exist.so";
  std::string what = load_error(path);
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_NE(what.find("dlopen failed"), std::string::npos) << what;
}

TEST(Loader, TextFileIsDlopenFailure) {
  const std::string path = ::testing::TempDir() + "/libopenreg_engine_text_file.so";
  {
    std::ofstream f(path);
    f << "this is not a shared library\n";
  }
  std::string what = load_error(path);
  std::remove(path.c_str());
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_NE(what.find("dlopen failed"), std::string::npos) << what;
}

TEST(Loader, DirectoryIsDlopenFailure) {
  std::string what = load_error(fixture_dir());
  EXPECT_NE(what.find("dlopen failed"), std::string::npos) << what;
}

TEST(Loader, InitFailureCallsNothingElse) {
  // "On failure ... the host then refuses the engine and calls nothing else (not
  // even release)". Look inside the fixture through its own entry point.
  const std::string path = fixture_path("init_fails");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<openreg_engine_entry_fn>(dlsym(handle, OPENREG_ENGINE_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const openreg_engine* table = entry(OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR);
  ASSERT_NE(table, nullptr);
  auto count = [&](const char* name) { return *static_cast<int32_t*>(table->get_proc_address(table->ctx, name)); };
  const int32_t inits = count("fixture_init_count");

  std::string first = load_error(path);
  std::string second = load_error(path);
  EXPECT_EQ(first, second);
  EXPECT_EQ(count("fixture_init_count"), inits + 2);
  EXPECT_EQ(count("fixture_release_count"), 0) << "release() after a failed init";
  EXPECT_EQ(count("fixture_run_count"), 0);
  EXPECT_EQ(openreg::take_thread_error(), "") << "the init error must not leak into the next call";
}

// ------------------------------------------------------------- good engine

TEST(GoodEngine, LoadsAndDescribesItself) {
  openreg::Engine& e = loaded("good");
  EXPECT_EQ(e.name, "fixture_good");
  EXPECT_NE(e.version.find("0.1.0"), std::string::npos) << e.version;
  EXPECT_EQ(e.path, fixture_path("good"));
  EXPECT_EQ(e.negotiated_minor, OPENREG_ABI_VERSION_MINOR);
  EXPECT_EQ(e.table_size, sizeof(openreg_engine));
  EXPECT_FALSE(e.any_op());
  EXPECT_NE(e.supports_fn(), nullptr);
  EXPECT_NE(e.get_proc_address_fn(), nullptr);
  int32_t* minor = counter(e, "fixture_negotiated_minor");
  ASSERT_NE(minor, nullptr);
  EXPECT_EQ(*minor, OPENREG_ABI_VERSION_MINOR) << "init() must receive the negotiated minor";
  EXPECT_EQ(e.get_proc_address_fn()(e.table->ctx, "no_such_extension"), nullptr);
}

TEST(GoodEngine, ListsItsOps) {
  openreg::Engine& e = loaded("good");
  ASSERT_EQ(e.ops.size(), 2u);
  ASSERT_TRUE(e.ops.count("aten::add.Tensor"));
  ASSERT_TRUE(e.ops.count("aten::add.out"));
  const auto& add = e.ops.at("aten::add.Tensor");
  EXPECT_EQ(add.index, 0);
  ASSERT_EQ(add.dtypes.size(), 1u);
  EXPECT_TRUE(add.dtypes[0] == kFloat32);
  EXPECT_EQ(e.ops.at("aten::add.out").index, 1);

  EXPECT_EQ(e.find("aten::add.Tensor", kFloat32, true), 0);
  EXPECT_EQ(e.find("aten::add.out", kFloat32, true), 1);
  EXPECT_EQ(e.find("aten::add.Tensor", kFloat64, true), -1);
  EXPECT_EQ(e.find("aten::add.Tensor", kFloat64, false), 0) << "no dtype to check: the op decides";
  EXPECT_EQ(e.find("aten::mul.Tensor", kFloat32, true), -1) << "not ANY_OP: unknown ops are -1";
}

TEST(GoodEngine, InitIsCalledOncePerLoad) {
  openreg::Engine& e = loaded("good");
  int32_t* inits = counter(e, "fixture_init_count");
  int32_t* releases = counter(e, "fixture_release_count");
  ASSERT_NE(inits, nullptr);
  ASSERT_NE(releases, nullptr);
  int32_t before = *inits;
  auto again = openreg::load_engine(fixture_path("good"), &host());
  EXPECT_EQ(*inits, before + 1);
  EXPECT_EQ(*releases, 0) << "the host never releases during loading";
  EXPECT_EQ(again->table, e.table) << "the same library (dlopen handle) gives the same table";
}

TEST(GoodEngine, AddContiguous) {
  auto a = iota_floats(6, -2.5f, 0.75f), b = iota_floats(6, 10.0f, -1.25f);
  std::vector<float> o(6, kSentinel);
  View self(a.data(), {2, 3}, {3, 1}, kFloat32), other(b.data(), {2, 3}, {3, 1}, kFloat32),
      out(o.data(), {2, 3}, {3, 1}, kFloat32);
  expect_add(loaded("good"), self, other, 1, true, out);
  EXPECT_FLOAT_EQ(o[0], -2.5f + 10.0f);
  EXPECT_FLOAT_EQ(o[5], (-2.5f + 5 * 0.75f) + (10.0f - 5 * 1.25f));
}

TEST(GoodEngine, AddWithIntAndDoubleAlpha) {
  auto a = iota_floats(5, 1.0f, 1.0f), b = iota_floats(5, 0.5f, 0.25f);
  std::vector<float> o(5, kSentinel);
  View self(a.data(), {5}, {1}, kFloat32), other(b.data(), {5}, {1}, kFloat32), out(o.data(), {5}, {1}, kFloat32);
  expect_add(loaded("good"), self, other, 3, true, out);
  EXPECT_FLOAT_EQ(o[0], 1.0f + 3 * 0.5f);
  expect_add(loaded("good"), self, other, -0.5, false, out);
  EXPECT_FLOAT_EQ(o[4], 5.0f - 0.5f * 1.5f);
}

TEST(GoodEngine, AddBroadcastsTrailingVector) {
  auto a = iota_floats(6, 0.0f, 1.0f), b = std::vector<float>{100.0f, 200.0f, 300.0f};
  std::vector<float> o(6, kSentinel);
  View self(a.data(), {2, 3}, {3, 1}, kFloat32), other(b.data(), {3}, {1}, kFloat32),
      out(o.data(), {2, 3}, {3, 1}, kFloat32);
  expect_add(loaded("good"), self, other, 1, true, out);
  EXPECT_EQ(o, (std::vector<float>{100, 201, 302, 103, 204, 305}));
}

TEST(GoodEngine, AddBroadcastsBothSides) {
  // [4,1,3] + [5,1] -> [4,5,3]
  auto a = iota_floats(12, -6.0f, 0.5f), b = iota_floats(5, 1000.0f, 10.0f);
  std::vector<float> o(60, kSentinel);
  View self(a.data(), {4, 1, 3}, {3, 3, 1}, kFloat32), other(b.data(), {5, 1}, {1, 1}, kFloat32),
      out(o.data(), {4, 5, 3}, {15, 3, 1}, kFloat32);
  expect_add(loaded("good"), self, other, 2, true, out);
  EXPECT_FLOAT_EQ(o[3 * 15 + 4 * 3 + 2], (-6.0f + 11 * 0.5f) + 2 * 1040.0f);
}

TEST(GoodEngine, AddBroadcastsExpandedStrideZeroInput) {
  // `self` is an expanded view: size 4 with stride 0 along dim 0.
  auto a = std::vector<float>{1, 2, 3}, b = iota_floats(12, 0.0f, 1.0f);
  std::vector<float> o(12, kSentinel);
  View self(a.data(), {4, 3}, {0, 1}, kFloat32), other(b.data(), {4, 3}, {3, 1}, kFloat32),
      out(o.data(), {4, 3}, {3, 1}, kFloat32);
  expect_add(loaded("good"), self, other, 1, true, out);
  EXPECT_FLOAT_EQ(o[11], 3.0f + 11.0f);
}

TEST(GoodEngine, AddIntoTransposedOutputWithTransposedInput) {
  // out is a [3,4] transpose of a [4,3] buffer; other is transposed too.
  auto a = iota_floats(12, 0.0f, 1.0f), b = iota_floats(12, 0.0f, 100.0f);
  std::vector<float> o(12, kSentinel);
  View self(a.data(), {3, 4}, {4, 1}, kFloat32), other(b.data(), {3, 4}, {1, 3}, kFloat32),
      out(o.data(), {3, 4}, {1, 3}, kFloat32);
  expect_add(loaded("good"), self, other, 1, true, out);
  // out[i][j] lives at o[i + 3*j]
  EXPECT_FLOAT_EQ(o[1 + 3 * 2], a[1 * 4 + 2] + b[1 + 3 * 2]);
  for (float v : o) EXPECT_NE(v, kSentinel);
}

TEST(GoodEngine, AddIntoStridedOutputWithByteOffsetLeavesGapsAlone) {
  // Every other element of a buffer, starting at element 3: byte_offset 12, stride 2.
  auto a = iota_floats(8, 1.0f, 1.0f), b = iota_floats(4, 0.5f, 0.5f);
  std::vector<float> o(16, kSentinel);
  View self(a.data(), {4}, {2}, kFloat32, /*byte_offset=*/4),  // a[1], a[3], a[5], a[7]
      other(b.data(), {4}, {1}, kFloat32), out(o.data(), {4}, {2}, kFloat32, /*byte_offset=*/12);
  expect_add(loaded("good"), self, other, 1, true, out);
  for (int i = 0; i < 16; ++i) {
    bool written = i >= 3 && i <= 9 && (i - 3) % 2 == 0;
    if (written) {
      EXPECT_FLOAT_EQ(o[i], a[1 + (i - 3)] + b[(i - 3) / 2]) << i;
    } else {
      EXPECT_EQ(o[i], kSentinel) << "element " << i << " is outside the output view";
    }
  }
}

TEST(GoodEngine, AddOutVariantWritesTheOutArgument) {
  auto a = iota_floats(4, 1.0f, 1.0f), b = iota_floats(4, 10.0f, 10.0f);
  std::vector<float> o(4, kSentinel);
  View self(a.data(), {2, 2}, {2, 1}, kFloat32), other(b.data(), {2, 2}, {2, 1}, kFloat32),
      out(o.data(), {2, 2}, {2, 1}, kFloat32);
  expect_add(loaded("good"), self, other, 1, true, out, /*out_variant=*/true);
  EXPECT_EQ(o, (std::vector<float>{11, 22, 33, 44}));
}

TEST(GoodEngine, AddInPlaceOutputAliasingSelf) {
  auto a = iota_floats(6, 1.0f, 1.0f), b = std::vector<float>{0.5f, 0.25f, 0.125f};
  View self(a.data(), {2, 3}, {3, 1}, kFloat32), other(b.data(), {3}, {1}, kFloat32),
      out(a.data(), {2, 3}, {3, 1}, kFloat32);
  AddCall c(self.get(), other.get(), int_scalar(2), out.get());
  std::string msg;
  ASSERT_EQ(openreg::invoke_run(loaded("good"), c.call, &msg), OPENREG_STATUS_OK) << msg;
  EXPECT_EQ(a, (std::vector<float>{2, 2.5f, 3.25f, 5, 5.5f, 6.25f}));
}

TEST(GoodEngine, AddZeroDimOtherOnCpuOfEveryAcceptedDtype) {
  auto a = iota_floats(4, 1.0f, 1.0f);
  std::vector<float> o(4, kSentinel);
  View self(a.data(), {4}, {1}, kFloat32), out(o.data(), {4}, {1}, kFloat32);
  double d = 0.25;
  int64_t i = -3;
  float f = 7.5f;
  struct Case {
    void* data;
    openreg_dtype dtype;
    float value;
  } cases[] = {{&d, kFloat64, 0.25f}, {&i, kInt64, -3.0f}, {&f, kFloat32, 7.5f}};
  for (const Case& c : cases) {
    View other(c.data, {}, {}, c.dtype, 0, /*device_index=*/-1);
    AddCall call(self.get(), other.get(), int_scalar(2), out.get());
    std::string msg;
    ASSERT_EQ(openreg::invoke_run(loaded("good"), call.call, &msg), OPENREG_STATUS_OK)
        << openreg::dtype_name(c.dtype) << ": " << msg;
    for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(o[k], a[k] + 2 * c.value) << openreg::dtype_name(c.dtype);
  }
}

TEST(GoodEngine, AddZeroDimEverything) {
  float a = 1.5f, b = 2.25f, o = kSentinel;
  View self(&a, {}, {}, kFloat32), other(&b, {}, {}, kFloat32), out(&o, {}, {}, kFloat32);
  expect_add(loaded("good"), self, other, 2, true, out);
  EXPECT_FLOAT_EQ(o, 6.0f);
}

TEST(GoodEngine, AddEmptyOutputWritesNothing) {
  View self(nullptr, {0, 3}, {3, 1}, kFloat32), other(nullptr, {0, 3}, {3, 1}, kFloat32),
      out(nullptr, {0, 3}, {3, 1}, kFloat32);
  AddCall c(self.get(), other.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_run(loaded("good"), c.call, &msg), OPENREG_STATUS_OK) << msg;
}

TEST(GoodEngine, AddEightDimensions) {
  std::vector<int64_t> sizes(8, 2);
  auto a = iota_floats(256, 0.0f, 1.0f), b = iota_floats(2, 0.5f, 0.25f);
  std::vector<float> o(256, kSentinel);
  View self(a.data(), sizes, contiguous_strides(sizes), kFloat32), other(b.data(), {2}, {1}, kFloat32),
      out(o.data(), sizes, contiguous_strides(sizes), kFloat32);
  AddCall c(self.get(), other.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_supports(loaded("good"), c.call, &msg), OPENREG_STATUS_OK) << msg;
  expect_add(loaded("good"), self, other, 1, true, out);
}

TEST(GoodEngine, SupportsDeclinesMoreThanEightDimensions) {
  std::vector<int64_t> sizes(9, 1);
  float a = 1, b = 2, o = kSentinel;
  View self(&a, sizes, contiguous_strides(sizes), kFloat32), other(&b, sizes, contiguous_strides(sizes), kFloat32),
      out(&o, sizes, contiguous_strides(sizes), kFloat32);
  AddCall c(self.get(), other.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_supports(loaded("good"), c.call, &msg), OPENREG_STATUS_UNSUPPORTED);
  EXPECT_NE(msg.find("9 dimensions"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8"), std::string::npos) << msg;
  EXPECT_EQ(o, kSentinel);
  // run() declines the same way, having written nothing.
  msg.clear();
  EXPECT_EQ(openreg::invoke_run(loaded("good"), c.call, &msg), OPENREG_STATUS_UNSUPPORTED);
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(o, kSentinel);
}

TEST(GoodEngine, UnsupportedDtypesAreDeclinedWithAReason) {
  double da[3] = {1, 2, 3}, db[3] = {4, 5, 6}, dout[3] = {0, 0, 0};
  int64_t ia[3] = {1, 2, 3};
  float fa[3] = {1, 2, 3}, fout[3] = {kSentinel, kSentinel, kSentinel};
  View d_self(da, {3}, {1}, kFloat64), d_other(db, {3}, {1}, kFloat64), d_out(dout, {3}, {1}, kFloat64);
  View i_other(ia, {3}, {1}, kInt64), f_self(fa, {3}, {1}, kFloat32), f_out(fout, {3}, {1}, kFloat32);
  int32_t bad32 = 1;
  View i32_scalar(&bad32, {}, {}, kInt32, 0, -1);

  struct Case {
    const char* what;
    const View* self;
    const View* other;
    const View* out;
  } cases[] = {
      {"float64 tensors", &d_self, &d_other, &d_out},
      {"1-dim int64 other", &f_self, &i_other, &f_out},
      {"0-dim int32 other", &f_self, &i32_scalar, &f_out},
  };
  for (const Case& c : cases) {
    AddCall call(c.self->get(), c.other->get(), int_scalar(1), c.out->get());
    std::string msg;
    EXPECT_EQ(openreg::invoke_run(loaded("good"), call.call, &msg), OPENREG_STATUS_UNSUPPORTED) << c.what;
    EXPECT_NE(msg.find("fixture:"), std::string::npos) << c.what << ": " << msg;
    msg.clear();
    EXPECT_EQ(openreg::invoke_supports(loaded("good"), call.call, &msg), OPENREG_STATUS_UNSUPPORTED) << c.what;
    EXPECT_FALSE(msg.empty()) << c.what;
  }
  EXPECT_EQ(dout[0], 0.0);
  EXPECT_EQ(fout[0], kSentinel);

  // A complex alpha is declined too.
  openreg_value alpha{};
  alpha.kind = OPENREG_VALUE_SCALAR;
  alpha.u.scalar.kind = OPENREG_SCALAR_COMPLEX;
  AddCall call(f_self.get(), f_self.get(), alpha, f_out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_run(loaded("good"), call.call, &msg), OPENREG_STATUS_UNSUPPORTED);
  EXPECT_NE(msg.find("alpha"), std::string::npos) << msg;
}

TEST(GoodEngine, ShapeMismatchIsInvalidArgument) {
  float a[3] = {1, 2, 3}, b[2] = {1, 2}, o[3] = {kSentinel, kSentinel, kSentinel};
  View self(a, {3}, {1}, kFloat32), other(b, {2}, {1}, kFloat32), out(o, {3}, {1}, kFloat32);
  AddCall call(self.get(), other.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_run(loaded("good"), call.call, &msg), OPENREG_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("broadcast"), std::string::npos) << msg;
  EXPECT_EQ(o[0], kSentinel);
}

TEST(GoodEngine, ErrorMessageDoesNotLeakIntoTheNextCall) {
  double d = 1;
  float a = 1, o = 0;
  View self(&d, {}, {}, kFloat64), out(&o, {}, {}, kFloat32), fself(&a, {}, {}, kFloat32);
  AddCall bad(self.get(), self.get(), int_scalar(1), out.get());
  std::string msg;
  ASSERT_EQ(openreg::invoke_run(loaded("good"), bad.call, &msg), OPENREG_STATUS_UNSUPPORTED);
  AddCall good(fself.get(), fself.get(), int_scalar(1), out.get());
  std::string msg2;
  EXPECT_EQ(openreg::invoke_run(loaded("good"), good.call, &msg2), OPENREG_STATUS_OK);
  EXPECT_EQ(msg2, "") << "OK leaves the message alone";
  EXPECT_EQ(openreg::take_thread_error(), "");
  EXPECT_FLOAT_EQ(o, 2.0f);
}

// ------------------------------------------------------ version negotiation

TEST(OlderMinor, LoadsWithoutOptionalFunctionsAndRuns) {
  openreg::Engine& e = loaded("older_minor");
  EXPECT_EQ(e.name, "fixture_older_minor");
  EXPECT_EQ(e.negotiated_minor, 0);
  EXPECT_EQ(e.table_size, OPENREG_ENGINE_MIN_STRUCT_SIZE);
  // The slots past struct_size hold 0x1: the host must not treat them as functions.
  EXPECT_EQ(e.supports_fn(), nullptr);
  EXPECT_EQ(e.get_proc_address_fn(), nullptr);

  auto a = iota_floats(6, 1.0f, 1.0f), b = std::vector<float>{10, 20, 30};
  std::vector<float> o(6, kSentinel);
  View self(a.data(), {2, 3}, {3, 1}, kFloat32), other(b.data(), {3}, {1}, kFloat32),
      out(o.data(), {2, 3}, {3, 1}, kFloat32);
  AddCall c(self.get(), other.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_supports(e, c.call, &msg), OPENREG_STATUS_OK) << "no supports(): assume yes";
  expect_add(e, self, other, 1, true, out);
  EXPECT_EQ(o, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(NewerMinor, LoadsNegotiatesHostMinorIgnoresTailAndRuns) {
  openreg::Engine& e = loaded("newer_minor");
  EXPECT_EQ(e.name, "fixture_newer_minor");
  EXPECT_EQ(e.table->abi_minor, OPENREG_ABI_VERSION_MINOR + 1);
  EXPECT_EQ(e.negotiated_minor, OPENREG_ABI_VERSION_MINOR);
  EXPECT_EQ(e.table_size, sizeof(openreg_engine) + 32);
  EXPECT_NE(e.supports_fn(), nullptr);
  int32_t* minor = counter(e, "fixture_negotiated_minor");
  ASSERT_NE(minor, nullptr);
  EXPECT_EQ(*minor, OPENREG_ABI_VERSION_MINOR) << "init() got min(host, engine)";

  auto a = iota_floats(4, 0.5f, 0.5f), b = iota_floats(4, -1.0f, -1.0f);
  std::vector<float> o(4, kSentinel);
  View self(a.data(), {4}, {1}, kFloat32), other(b.data(), {4}, {1}, kFloat32), out(o.data(), {4}, {1}, kFloat32);
  expect_add(e, self, other, 0.5, false, out);
}

// An op table from an engine whose openreg_op_info is larger than this host's
// (fields appended in a later minor): entries are struct_size bytes apart.
TEST(WideOpInfo, OpTableIsWalkedWithTheEnginesStructSize) {
  std::unique_ptr<openreg::Engine> e;
  try {
    e = openreg::load_engine(fixture_path("wide_ops"), &host());
  } catch (const openreg::EngineError& err) {
    FAIL() << "a larger openreg_op_info must be accepted (readers ignore the tail): " << err.what();
  }
  ASSERT_EQ(e->ops.size(), 2u);
  EXPECT_TRUE(e->ops.count("aten::add.Tensor"));
  EXPECT_TRUE(e->ops.count("aten::add.out"));
  EXPECT_EQ(e->find("aten::add.out", kFloat32, true), 1);
}

// ------------------------------------------------------- throwing engines

TEST(ThrowingEngine, ExceptionAcrossTheBoundaryBecomesInternal) {
  openreg::Engine& e = loaded("throws");
  EXPECT_EQ(e.name, "fixture_throws");
  float a = 1, o = kSentinel;
  View t(&a, {}, {}, kFloat32), out(&o, {}, {}, kFloat32);
  AddCall c(t.get(), t.get(), int_scalar(1), out.get());
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::string msg;
    EXPECT_EQ(openreg::invoke_run(e, c.call, &msg), OPENREG_STATUS_INTERNAL);
    EXPECT_NE(msg.find("kernel exploded"), std::string::npos) << msg;
    EXPECT_NE(msg.find("threw"), std::string::npos) << "say that the engine misbehaved: " << msg;
  }
  EXPECT_EQ(openreg::take_thread_error(), "");
  std::string msg;
  EXPECT_EQ(openreg::invoke_supports(e, c.call, &msg), OPENREG_STATUS_OK) << "no supports(): assume yes";
}

TEST(ThrowingEngine, NonStdExceptionBecomesInternal) {
  openreg::Engine& e = loaded("throws_non_std");
  float a = 1, o = kSentinel;
  View t(&a, {}, {}, kFloat32), out(&o, {}, {}, kFloat32);
  AddCall c(t.get(), t.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_run(e, c.call, &msg), OPENREG_STATUS_INTERNAL);
  EXPECT_NE(msg.find("exception"), std::string::npos) << msg;
}

TEST(ThrowingEngine, GuardedEngineReportsInternal) {
  openreg::Engine& e = loaded("throws_guarded");
  EXPECT_EQ(e.name, "fixture_throws_guarded");
  float a = 1, o = kSentinel;
  View t(&a, {}, {}, kFloat32), out(&o, {}, {}, kFloat32);
  AddCall c(t.get(), t.get(), int_scalar(1), out.get());
  std::string msg;
  EXPECT_EQ(openreg::invoke_run(e, c.call, &msg), OPENREG_STATUS_INTERNAL);
  EXPECT_EQ(msg, "fixture: kernel exploded") << "the engine's own message, untouched";
}

TEST(ThrowingEngine, ThrowOnAnotherThreadIsContained) {
  openreg::Engine& e = loaded("throws");
  float a = 1, o = kSentinel;
  View t(&a, {}, {}, kFloat32), out(&o, {}, {}, kFloat32);
  AddCall c(t.get(), t.get(), int_scalar(1), out.get());
  openreg_status st = OPENREG_STATUS_OK;
  std::string msg;
  std::thread th([&] { st = openreg::invoke_run(e, c.call, &msg); });
  th.join();
  EXPECT_EQ(st, OPENREG_STATUS_INTERNAL);
  EXPECT_NE(msg.find("kernel exploded"), std::string::npos) << msg;
}

// ------------------------------------------------------------ host services

TEST(HostServices, TableIsCompleteAndVersioned) {
  openreg_host h = openreg::make_host_services();
  EXPECT_EQ(h.struct_size, sizeof(openreg_host));
  EXPECT_EQ(h.abi_major, OPENREG_ABI_VERSION_MAJOR);
  EXPECT_EQ(h.abi_minor, OPENREG_ABI_VERSION_MINOR);
  EXPECT_EQ(h.reserved, 0);
  EXPECT_NE(h.set_error, nullptr);
  EXPECT_NE(h.log, nullptr);
  EXPECT_NE(h.scratch_alloc, nullptr);
  EXPECT_NE(h.scratch_free, nullptr);
  EXPECT_NE(h.parallel_for, nullptr);
  EXPECT_NE(h.get_num_threads, nullptr);
  EXPECT_GE(h.get_num_threads(h.ctx), 1);
}

TEST(HostServices, SetErrorIsThreadLocalAndTakenOnce) {
  openreg_host h = openreg::make_host_services();
  h.set_error(h.ctx, OPENREG_STATUS_INTERNAL, "boom on main");
  std::string other_thread;
  std::thread th([&] { other_thread = openreg::take_thread_error(); });
  th.join();
  EXPECT_EQ(other_thread, "") << "another thread's error must not be visible";
  EXPECT_EQ(openreg::take_thread_error(), "boom on main");
  EXPECT_EQ(openreg::take_thread_error(), "") << "taking clears it";
  h.set_error(h.ctx, OPENREG_STATUS_INTERNAL, nullptr);
  EXPECT_EQ(openreg::take_thread_error(), "");
}

TEST(HostServices, SetErrorCopiesTheMessage) {
  openreg_host h = openreg::make_host_services();
  char buf[] = "transient message";
  h.set_error(h.ctx, OPENREG_STATUS_INVALID_ARGUMENT, buf);
  std::memset(buf, 'x', sizeof buf - 1);
  EXPECT_EQ(openreg::take_thread_error(), "transient message");
}

TEST(HostServices, ScratchIsAlignedAndUsable) {
  openreg_host h = openreg::make_host_services();
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{1000}, uint64_t{1} << 20}) {
    void* p = h.scratch_alloc(h.ctx, bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    if (bytes) std::memset(p, 0xAB, bytes);
    h.scratch_free(h.ctx, p);
  }
}

TEST(HostServices, ScratchAllocOfAnImpossibleSizeReturnsNull) {
  // "NULL when out of memory". Sizes near UINT64_MAX must not wrap around to a
  // small allocation (which the engine would then overrun).
  openreg_host h = openreg::make_host_services();
  for (uint64_t bytes : {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() - 62}) {
    void* p = h.scratch_alloc(h.ctx, bytes);
    EXPECT_EQ(p, nullptr) << "scratch_alloc(" << bytes << ") returned a (small) buffer instead of NULL";
    if (p) h.scratch_free(h.ctx, p);
  }
}

TEST(HostServices, ParallelForCoversTheRangeOnce) {
  openreg_host h = openreg::make_host_services();
  struct Acc {
    std::vector<int> hits;
  } acc{std::vector<int>(100, 0)};
  auto body = [](void* user, int64_t begin, int64_t end) {
    auto* a = static_cast<Acc*>(user);
    for (int64_t i = begin; i < end; ++i) a->hits[static_cast<size_t>(i)]++;
  };
  h.parallel_for(h.ctx, 10, 90, 7, body, &acc);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(acc.hits[i], (i >= 10 && i < 90) ? 1 : 0) << i;
  h.parallel_for(h.ctx, 5, 5, 1, body, &acc);  // empty range: no call
  h.parallel_for(h.ctx, 7, 3, 1, body, &acc);
  EXPECT_EQ(acc.hits[5], 0);
}

TEST(HostServices, LogDoesNotCrash) {
  openreg_host h = openreg::make_host_services();
  h.log(h.ctx, OPENREG_LOG_DEBUG, "debug line (hidden unless OPENREG_VERBOSE>=2)");
  h.log(h.ctx, OPENREG_LOG_INFO, nullptr);
}

TEST(HostNames, StatusAndDtypeNames) {
  EXPECT_STREQ(openreg::status_name(OPENREG_STATUS_OK), "OK");
  EXPECT_STREQ(openreg::status_name(OPENREG_STATUS_UNSUPPORTED), "UNSUPPORTED");
  EXPECT_STREQ(openreg::status_name(OPENREG_STATUS_INTERNAL), "INTERNAL");
  EXPECT_STREQ(openreg::status_name(1234), "UNKNOWN_STATUS");
  EXPECT_EQ(openreg::dtype_name(kFloat32), "float32");
  EXPECT_EQ(openreg::dtype_name(kFloat64), "float64");
  EXPECT_EQ(openreg::dtype_name(kInt64), "int64");
  EXPECT_EQ(openreg::dtype_name(kBool), "bool");
  EXPECT_EQ(openreg::dtype_name({OPENREG_DTYPE_CODE_BFLOAT, 16, 1}), "bfloat16");
  EXPECT_EQ(openreg::dtype_name({OPENREG_DTYPE_CODE_UINT, 8, 1}), "uint8");
  EXPECT_EQ(openreg::dtype_name({OPENREG_DTYPE_CODE_COMPLEX, 64, 1}), "complex64");
  EXPECT_EQ(openreg::dtype_name({OPENREG_DTYPE_CODE_FLOAT, 32, 4}), "float32x4");
}

}  // namespace
