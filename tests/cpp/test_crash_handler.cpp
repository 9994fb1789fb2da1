// The fatal-signal handler (core/src/engine/crash_handler.cpp): the line it
// formats, and, in death tests against fixture_crashes, that a crash inside an
// engine call names the engine and the call, and the process still dies of it.
#include "engine_host.h"
#include "test_util.h"

#include <openreg/sdk/dtype.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using namespace openreg_test;

namespace {

openreg::Engine fake_engine() {
  openreg::Engine e;
  e.name = "fake";
  e.path = "/opt/engines/libopenreg_engine_fake.so";
  return e;
}

openreg::CrashContext same_thread(int signal = SIGSEGV) {
  openreg::CrashContext where;
  where.signal = signal;
  where.crash_tid = where.call_tid = 42;
  return where;
}

std::string line_for(const openreg_call* call, openreg::EngineCallMark::Kind kind,
                     const openreg::CrashContext& where = same_thread(), size_t cap = 4096) {
  const openreg::Engine engine = fake_engine();
  openreg::EngineCallMark mark(engine, call, kind);
  std::vector<char> buf(cap);
  const size_t n = openreg::format_crash_line(buf.data(), cap, where, mark);
  EXPECT_EQ(buf[n], '\0');
  return std::string(buf.data(), n);
}

openreg_call call_of(const char* op, const std::vector<openreg_value>& args) {
  openreg_call c{};
  c.struct_size = sizeof(openreg_call);
  c.op_name = op;
  c.num_args = static_cast<int32_t>(args.size());
  c.args = args.data();
  return c;
}

openreg_value of_kind(int32_t kind) {
  openreg_value v{};
  v.kind = kind;
  return v;
}

// A 0-dim tensor of `dtype` as the only argument: the line shows "(<dtype> [])".
std::string dtype_in_line(openreg_dtype dtype) {
  float data = 0;
  View t(&data, {}, {}, dtype);
  std::vector<openreg_value> args{tensor_value(t.get())};
  openreg_call c = call_of("aten::x", args);
  const std::string line = line_for(&c, openreg::EngineCallMark::kRun);
  const size_t open = line.find(" running aten::x (") + 18;
  return line.substr(open, line.find(" [])", open) - open);
}

TEST(CrashLine, NamesEngineOpAndEveryArgumentKind) {
  float data[6] = {};
  View plain(data, {2, 3}, {3, 1}, kFloat32);
  View transposed(data, {3, 2}, {1, 3}, openreg_dtype{OPENREG_DTYPE_CODE_BFLOAT, 16, 1});
  View cpu_scalar(data, {}, {}, kInt64, 0, -1);
  const openreg_tensor* list[] = {plain.get(), nullptr};
  const int64_t ints[] = {1, -2};
  const int64_t bools[] = {1, 0};
  const double doubles[] = {1.5, -2};
  std::vector<openreg_value> args;
  args.push_back(tensor_value(plain.get()));
  args.push_back(tensor_value(transposed.get()));
  args.push_back(tensor_value(cpu_scalar.get()));
  args.push_back(of_kind(OPENREG_VALUE_NONE));
  openreg_value v = of_kind(OPENREG_VALUE_INT);
  v.u.i = -3;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_DOUBLE);
  v.u.d = 0.5;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_BOOL);
  v.u.i = 1;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_INT_LIST);
  v.u.ints.items = ints;
  v.u.ints.count = 2;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_BOOL_LIST);
  v.u.ints.items = bools;
  v.u.ints.count = 2;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_DOUBLE_LIST);
  v.u.doubles.items = doubles;
  v.u.doubles.count = 2;
  args.push_back(v);
  args.push_back(int_scalar(7));
  args.push_back(double_scalar(1e-7));
  v = of_kind(OPENREG_VALUE_SCALAR);
  v.u.scalar.kind = OPENREG_SCALAR_BOOL;
  v.u.scalar.v.i = 0;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_SCALAR);
  v.u.scalar.kind = OPENREG_SCALAR_COMPLEX;
  v.u.scalar.v.d = 1;
  v.u.scalar.imag = -2;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_STRING);
  v.u.str.data = "floor and more";
  v.u.str.length = 5;  // not NUL-terminated: only the length counts
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_DTYPE);
  v.u.dtype = openreg_dtype{OPENREG_DTYPE_CODE_FLOAT, 16, 1};
  args.push_back(v);
  args.push_back(of_kind(OPENREG_VALUE_GENERATOR));
  v = of_kind(OPENREG_VALUE_MEMORY_FORMAT);
  v.u.i = 2;
  args.push_back(v);
  v = of_kind(OPENREG_VALUE_TENSOR_LIST);
  v.u.tensors.items = list;
  v.u.tensors.count = 2;
  args.push_back(v);
  openreg_call c = call_of("aten::everything.overload", args);

  EXPECT_EQ(line_for(&c, openreg::EngineCallMark::kRun),
            "openreg: fatal signal SIGSEGV in engine 'fake' (/opt/engines/libopenreg_engine_fake.so) running "
            "aten::everything.overload (float32 [2, 3], bfloat16 [3, 2] strides [1, 3], int64 [] cpu, None, -3, "
            "0.5, True, [1, -2], [True, False], [1.5, -2], 7, 1e-07, False, (1-2j), 'floor', float16, generator, "
            "memory_format 2, [float32 [2, 3], None])\n");
}

TEST(CrashLine, SaysWhichThreadAndWhatTheEngineWasDoing) {
  openreg::CrashContext where;
  where.signal = SIGBUS;
  where.crash_tid = 7;
  where.call_tid = 5;
  where.has_fault_address = true;
  where.fault_address = 0x10;
  std::vector<openreg_value> none;
  openreg_call c = call_of("aten::relu", none);
  EXPECT_EQ(line_for(&c, openreg::EngineCallMark::kSupports, where),
            "openreg: fatal signal SIGBUS on thread 7 (outside any engine call) while engine 'fake' "
            "(/opt/engines/libopenreg_engine_fake.so) was deciding supports() for aten::relu () on thread 5; "
            "fault address 0x10\n");
  EXPECT_EQ(line_for(nullptr, openreg::EngineCallMark::kInit, same_thread(SIGABRT)),
            "openreg: fatal signal SIGABRT in engine 'fake' (/opt/engines/libopenreg_engine_fake.so) initialising\n");
  EXPECT_NE(line_for(&c, openreg::EngineCallMark::kRun, same_thread(SIGUSR1)).find("fatal signal " +
                                                                                   std::to_string(SIGUSR1) + " in"),
            std::string::npos);
}

TEST(CrashLine, DtypesAreSpelledLikeTheSdk) {
  for (int code : {OPENREG_DTYPE_CODE_INT, OPENREG_DTYPE_CODE_UINT, OPENREG_DTYPE_CODE_FLOAT,
                   OPENREG_DTYPE_CODE_BFLOAT, OPENREG_DTYPE_CODE_COMPLEX, OPENREG_DTYPE_CODE_BOOL, 9}) {
    for (int bits : {8, 16, 32, 64, 128}) {
      for (int lanes : {1, 4}) {
        const openreg_dtype d{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
        EXPECT_EQ(dtype_in_line(d), openreg::sdk::dtype_name(d));
      }
    }
  }
}

TEST(CrashLine, DoublesPrintLikePrintfG) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double x : {0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 1e-4, 9.99e-5, 1e-7, 3.14159265, -2.5e-5, 100.0, 123456.0,
                   999999.0, 999999.7, 1234567.0, 1e5, 1e15, 1e300, 1e-300, 6.02214076e23, inf, -inf}) {
    char want[64];
    std::snprintf(want, sizeof want, "%g", x);
    openreg_value v = of_kind(OPENREG_VALUE_DOUBLE);
    v.u.d = x;
    std::vector<openreg_value> args{v};
    openreg_call c = call_of("aten::x", args);
    EXPECT_NE(line_for(&c, openreg::EngineCallMark::kRun).find("aten::x (" + std::string(want) + ")"),
              std::string::npos)
        << want;
  }
  openreg_value v = of_kind(OPENREG_VALUE_DOUBLE);
  v.u.d = std::nan("");
  std::vector<openreg_value> args{v};
  openreg_call c = call_of("aten::x", args);
  EXPECT_NE(line_for(&c, openreg::EngineCallMark::kRun).find("aten::x (nan)"), std::string::npos);
}

TEST(CrashLine, LongCallsAreCutToTheBuffer) {
  std::vector<int64_t> ints(20);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>(i);
  openreg_value v = of_kind(OPENREG_VALUE_INT_LIST);
  v.u.ints.items = ints.data();
  v.u.ints.count = static_cast<int64_t>(ints.size());
  std::vector<openreg_value> args(40, v);
  openreg_call c = call_of("aten::long", args);
  const std::string full = line_for(&c, openreg::EngineCallMark::kRun, same_thread(), 1 << 16);
  EXPECT_NE(full.find("aten::long ([0, 1, 2, 3, 4, 5, 6, 7, ...], "), std::string::npos) << full;
  EXPECT_NE(full.find("[0, 1, 2, 3, 4, 5, 6, 7, ...], ...)\n"), std::string::npos) << "at most 32 arguments";
  for (size_t cap : {8, 64, 200}) {
    const std::string cut = line_for(&c, openreg::EngineCallMark::kRun, same_thread(), cap);
    EXPECT_EQ(cut.size(), cap - 1);
    EXPECT_EQ(cut.substr(cut.size() - 4), "...\n");
    EXPECT_EQ(cut.substr(0, cut.size() - 4), full.substr(0, cut.size() - 4));
  }
}

// --------------------------------------------------------------- death tests

// Each death test runs in a fresh process (threadsafe style re-executes the test
// binary), so the handler is installed there, over whatever that process set up.
class CrashHandlerDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

openreg_host& host() {
  static openreg_host h = openreg::make_host_services();
  return h;
}

// aten::add on fixture_crashes with both inputs of `dims` dimensions of size 2.
void run_add(size_t dims, bool out_variant) {
  static std::unique_ptr<openreg::Engine> engine = openreg::load_engine(fixture_path("crashes"), &host());
  const std::vector<int64_t> sizes(dims, 2);
  std::vector<float> a(static_cast<size_t>(numel(sizes)), 1.0f), b(a), out(a);
  View va(a.data(), sizes, contiguous_strides(sizes), kFloat32);
  View vb(b.data(), sizes, contiguous_strides(sizes), kFloat32);
  View vo(out.data(), sizes, contiguous_strides(sizes), kFloat32);
  AddCall c(va.get(), vb.get(), int_scalar(1), vo.get(), out_variant);
  std::string msg;
  if (openreg::invoke_run(*engine, c.call, &msg) != OPENREG_STATUS_OK) std::fprintf(stderr, "add failed: %s\n", msg.c_str());
}

TEST_F(CrashHandlerDeathTest, SegfaultInKernelNamesEngineAndCall) {
  EXPECT_EXIT(run_add(4, true), ::testing::KilledBySignal(SIGSEGV),
              "^openreg: fatal signal SIGSEGV in engine 'fixture_crashes' \\([^)]*/"
              "libopenreg_engine_fixture_crashes\\.so\\) running aten::add\\.out \\(float32 \\[2, 2, 2, 2\\], "
              "float32 \\[2, 2, 2, 2\\], 1, float32 \\[2, 2, 2, 2\\]\\); fault address 0x0\n$");
}

TEST_F(CrashHandlerDeathTest, SegfaultOnTheEnginesOwnThreadNamesTheRunningCall) {
  EXPECT_EXIT(run_add(4, false), ::testing::KilledBySignal(SIGSEGV),
              "^openreg: fatal signal SIGSEGV on thread [0-9]+ \\(outside any engine call\\) while engine "
              "'fixture_crashes' \\([^)]*\\) was running aten::add\\.Tensor \\(float32 \\[2, 2, 2, 2\\], "
              "float32 \\[2, 2, 2, 2\\], 1\\) on thread [0-9]+; fault address 0x0\n$");
}

TEST_F(CrashHandlerDeathTest, StackOverflowIsReportedFromTheAlternateStack) {
  EXPECT_EXIT(run_add(5, false), ::testing::KilledBySignal(SIGSEGV),
              "^openreg: fatal signal SIGSEGV in engine 'fixture_crashes' .* running aten::add\\.Tensor "
              "\\(float32 \\[2, 2, 2, 2, 2\\], float32 \\[2, 2, 2, 2, 2\\], 1\\); fault address 0x[0-9a-f]+\n$");
}

TEST_F(CrashHandlerDeathTest, AbortInKernelIsNamedAndStillAborts) {
  EXPECT_EXIT(run_add(6, true), ::testing::KilledBySignal(SIGABRT),
              "^openreg: fatal signal SIGABRT in engine 'fixture_crashes' .* running aten::add\\.out "
              "\\(float32 \\[2, 2, 2, 2, 2, 2\\], .*\\)\n$");
}

TEST_F(CrashHandlerDeathTest, CrashOutsideEngineCallsPrintsNothing) {
  EXPECT_EXIT(
      {
        run_add(2, true);  // loads the engine (installs the handler), runs a call that returns
        raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "^$");
}

void previous_handler(int) {
  const char text[] = "previous handler ran\n";
  ssize_t ignored = write(STDERR_FILENO, text, sizeof text - 1);
  (void)ignored;
  _exit(7);
}

TEST_F(CrashHandlerDeathTest, ChainsToTheHandlerInstalledBefore) {
  EXPECT_EXIT(
      {
        signal(SIGSEGV, previous_handler);  // like faulthandler, installed before the first engine loads
        run_add(4, true);
      },
      ::testing::ExitedWithCode(7),
      "^openreg: fatal signal SIGSEGV in engine 'fixture_crashes' [^\n]*\nprevious handler ran\n$");
}

// An engine call made inside another (supports, then run); the crash comes after
// the inner one returned.
void crash_after_nested_call() {
  openreg::install_crash_handler();
  const openreg::Engine engine = fake_engine();
  std::vector<openreg_value> none;
  openreg_call outer = call_of("aten::outer", none);
  openreg_call inner = call_of("aten::inner", none);
  openreg::EngineCallMark outer_mark(engine, &outer, openreg::EngineCallMark::kRun);
  { openreg::EngineCallMark inner_mark(engine, &inner, openreg::EngineCallMark::kSupports); }
  raise(SIGSEGV);
}

TEST_F(CrashHandlerDeathTest, NestedCallsRestoreTheOuterCall) {
  EXPECT_EXIT(crash_after_nested_call(), ::testing::KilledBySignal(SIGSEGV),
      "^openreg: fatal signal SIGSEGV in engine 'fake' \\(/opt/engines/libopenreg_engine_fake\\.so\\) running "
      "aten::outer \\(\\)\n$");
}

}  // namespace
