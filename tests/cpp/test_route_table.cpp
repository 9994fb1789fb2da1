// openreg::Registry (OPENREG_ENGINE / OPENREG_ENGINE_PATH / OPENREG_FALLBACK
// resolution) and openreg::RouteTable (routing decisions, cache, counters), over the
// fixture engines. FIXTURE_REF_DIR holds a fake reference engine named aten_ref
// (ANY_OP, fills outputs with 42), kept apart from FIXTURE_DIR so that the
// fixtures directory never shadows the real aten_ref.
#include "engine_host.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <thread>

using namespace openreg_test;
using openreg::operator==;  // openreg_dtype lives in the global namespace: no ADL

namespace {

openreg::Registry::Config config(const std::string& spec, bool fallback, bool with_ref_dir = true) {
  openreg::Registry::Config c;
  c.spec = spec;
  c.search_dirs = {fixture_dir()};
  if (with_ref_dir) c.search_dirs.push_back(fixture_ref_dir());
  c.fallback = fallback;
  return c;
}

std::vector<std::string> chain_names(openreg::Registry& r) {
  std::vector<std::string> out;
  for (auto* e : r.chain()) out.push_back(e->name);
  return out;
}

std::vector<std::string> candidate_names(const openreg::Route& route) {
  std::vector<std::string> out;
  for (const auto& c : route.candidates) out.push_back(c.engine->name);
  return out;
}

std::string chain_error(openreg::Registry& r) {
  try {
    r.chain();
  } catch (const openreg::EngineError& e) {
    return e.what();
  }
  ADD_FAILURE() << "chain() succeeded for spec '" << r.config().spec << "'";
  return "";
}

void expect_contains(const std::string& text, const std::string& needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "missing \"" << needle << "\" in: " << text;
}

// --------------------------------------------------------------- registry

TEST(Registry, DiscoverFindsEngineFilesInSearchOrder) {
  openreg::Registry r(config("auto", true), openreg::make_host_services());
  auto found = r.discover();
  std::set<std::string> names;
  for (const auto& f : found) names.insert(f.name);
  EXPECT_TRUE(names.count("fixture_good"));
  EXPECT_TRUE(names.count("fixture_bad_magic"));
  EXPECT_TRUE(names.count("aten_ref"));
  EXPECT_EQ(names.size(), found.size()) << "each name once";
  EXPECT_EQ(r.find_engine_file("fixture_good"), fixture_path("good"));
  EXPECT_EQ(r.find_engine_file("aten_ref"), fixture_ref_dir() + "/libopenreg_engine_aten_ref.so");
  EXPECT_EQ(r.find_engine_file("nope"), "");
}

TEST(Registry, UnknownEngineNameListsAvailableEnginesAndTheVariable) {
  openreg::Registry r(config("nope", true), openreg::make_host_services());
  std::string what = chain_error(r);
  expect_contains(what, "'nope'");
  expect_contains(what, "OPENREG_ENGINE");
  expect_contains(what, "fixture_good");
  expect_contains(what, "aten_ref");
  expect_contains(what, fixture_dir());
  // The failure is remembered: the same error again, no retry.
  EXPECT_EQ(chain_error(r), what);
}

TEST(Registry, UnknownNameLaterInTheChainIsReported) {
  openreg::Registry r(config("fixture_good,nope", true), openreg::make_host_services());
  std::string what = chain_error(r);
  expect_contains(what, "'nope'");
}

TEST(Registry, MissingPathIsAnError) {
  const std::string path = fixture_dir() + "/no/such/libopenreg_engine_x.so";
  openreg::Registry r(config(path, true), openreg::make_host_services());
  std::string what = chain_error(r);
  expect_contains(what, path);
  EXPECT_TRUE(what.find("not a file") != std::string::npos || what.find("no such file") != std::string::npos)
      << "should say the file is missing: " << what;
  expect_contains(what, "fixture_good");  // lists the alternatives
}

TEST(Registry, BrokenEngineInTheChainFailsWithTheLoaderReason) {
  openreg::Registry r(config("fixture_bad_magic", true), openreg::make_host_services());
  std::string what = chain_error(r);
  expect_contains(what, fixture_path("bad_magic"));
  expect_contains(what, "magic");
}

TEST(Registry, CommaChainKeepsItsOrder) {
  openreg::Registry r(config("fixture_good,aten_ref", true), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good", "aten_ref"}))
      << "aten_ref listed and also the fallback: once";
}

TEST(Registry, CommaChainToleratesSpacesAndEmptyItems) {
  openreg::Registry r(config(" fixture_good , ,aten_ref,", false), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good", "aten_ref"}));
}

TEST(Registry, ReferenceFirstThenEngine) {
  openreg::Registry r(config("aten_ref,fixture_good", true), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"aten_ref", "fixture_good"}));
}

TEST(Registry, FallbackAppendsTheReferenceEngine) {
  openreg::Registry r(config("fixture_good", true), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good", "aten_ref"}));
  EXPECT_TRUE(r.chain().back()->any_op());
}

TEST(Registry, StrictModeChainHasNoReference) {
  openreg::Registry r(config("fixture_good", false, /*with_ref_dir=*/false), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good"}));
}

TEST(Registry, FallbackWithoutAReferenceEngineIsAnInstallationError) {
  openreg::Registry r(config("fixture_good", true, /*with_ref_dir=*/false), openreg::make_host_services());
  std::string what = chain_error(r);
  expect_contains(what, "aten_ref");
  expect_contains(what, "not found");
}

TEST(Registry, AutoWithoutOptimisedEnginesIsTheReference) {
  openreg::Registry r(config("auto", true), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"aten_ref"}));
  openreg::Registry empty(config("", false), openreg::make_host_services());
  EXPECT_EQ(chain_names(empty), (std::vector<std::string>{"aten_ref"})) << "empty spec means auto";
}

TEST(Registry, PathSpecLoadsThatLibrary) {
  openreg::Registry r(config(fixture_path("good"), false), openreg::make_host_services());
  ASSERT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good"}));
  EXPECT_EQ(r.chain()[0]->path, fixture_path("good"));
}

TEST(Registry, SameLibraryByNameAndByPathIsOneEngine) {
  openreg::Registry r(config("fixture_good," + fixture_path("good"), false), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good"}));
}

TEST(Registry, ChainIsLoadedOnce) {
  openreg::Registry r(config("fixture_good", true), openreg::make_host_services());
  const auto* first = &r.chain();
  std::vector<openreg::Engine*> engines = r.chain();
  EXPECT_EQ(&r.chain(), first);
  EXPECT_EQ(r.chain(), engines);
}

TEST(Registry, EnginesGetTheRegistrysHostTable) {
  openreg::Registry r(config("fixture_good", false), openreg::make_host_services());
  EXPECT_EQ(r.host()->struct_size, sizeof(openreg_host));
  EXPECT_EQ(r.chain().size(), 1u);
}

// ----------------------------------------------------------- config_from_env

// Saves and restores the OPENREG_* variables a test changes.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }

 private:
  static constexpr const char* kNames[] = {"OPENREG_ENGINE", "OPENREG_ENGINE_PATH", "OPENREG_FALLBACK"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ConfigFromEnv, Defaults) {
  EnvGuard env;
  auto c = openreg::Registry::config_from_env("/opt/openreg/engines");
  EXPECT_EQ(c.spec, "auto");
  EXPECT_EQ(c.search_dirs, (std::vector<std::string>{"/opt/openreg/engines"}));
  EXPECT_TRUE(c.fallback);
  auto no_builtin = openreg::Registry::config_from_env("");
  EXPECT_TRUE(no_builtin.search_dirs.empty());
}

TEST(ConfigFromEnv, ReadsEngineAndPathBeforeTheBuiltinDir) {
  EnvGuard env;
  setenv("OPENREG_ENGINE", "fixture_good,aten_ref", 1);
  setenv("OPENREG_ENGINE_PATH", "/a:/b::/c", 1);
  auto c = openreg::Registry::config_from_env("/builtin");
  EXPECT_EQ(c.spec, "fixture_good,aten_ref");
  EXPECT_EQ(c.search_dirs, (std::vector<std::string>{"/a", "/b", "/c", "/builtin"}));
}

TEST(ConfigFromEnv, FallbackValues) {
  EnvGuard env;
  setenv("OPENREG_FALLBACK", "none", 1);
  EXPECT_FALSE(openreg::Registry::config_from_env("").fallback);
  setenv("OPENREG_FALLBACK", "aten_ref", 1);
  EXPECT_TRUE(openreg::Registry::config_from_env("").fallback);
  setenv("OPENREG_FALLBACK", "", 1);
  EXPECT_TRUE(openreg::Registry::config_from_env("").fallback) << "empty means unset";
}

TEST(ConfigFromEnv, BogusFallbackIsRejected) {
  EnvGuard env;
  setenv("OPENREG_FALLBACK", "bogus", 1);
  try {
    openreg::Registry::config_from_env("");
    FAIL() << "OPENREG_FALLBACK=bogus was accepted";
  } catch (const openreg::EngineError& e) {
    std::string what = e.what();
    expect_contains(what, "OPENREG_FALLBACK='bogus'");
    expect_contains(what, "none");
    expect_contains(what, "aten_ref");
  }
}

TEST(ConfigFromEnv, DrivesARegistry) {
  EnvGuard env;
  setenv("OPENREG_ENGINE", "fixture_good", 1);
  setenv("OPENREG_ENGINE_PATH", fixture_dir().c_str(), 1);
  setenv("OPENREG_FALLBACK", "none", 1);
  openreg::Registry r(openreg::Registry::config_from_env(fixture_ref_dir()), openreg::make_host_services());
  EXPECT_EQ(chain_names(r), (std::vector<std::string>{"fixture_good"}));
}

// ------------------------------------------------------------- route table

class RouteTableTest : public ::testing::Test {
 protected:
  RouteTableTest() : registry_(config("fixture_good", true), openreg::make_host_services()), routes_(registry_) {}
  openreg::Registry registry_;
  openreg::RouteTable routes_;
};

TEST_F(RouteTableTest, AddFloat32GoesToTheEngineThenTheReference) {
  openreg::Route* r = routes_.route("aten::add.Tensor", kFloat32, true);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->op, "aten::add.Tensor");
  EXPECT_TRUE(r->has_dtype);
  EXPECT_TRUE(r->dtype == kFloat32);
  EXPECT_EQ(candidate_names(*r), (std::vector<std::string>{"fixture_good", "aten_ref"}));
  EXPECT_EQ(r->candidates[0].op_index, 0);
  EXPECT_EQ(r->candidates[1].op_index, -2) << "aten_ref takes it as an ANY_OP engine";
  EXPECT_EQ(candidate_names(*routes_.route("aten::add.out", kFloat32, true)),
            (std::vector<std::string>{"fixture_good", "aten_ref"}));
  EXPECT_EQ(routes_.route("aten::add.out", kFloat32, true)->candidates[0].op_index, 1);
}

TEST_F(RouteTableTest, OtherDtypesAndOpsGoToTheReferenceOnly) {
  EXPECT_EQ(candidate_names(*routes_.route("aten::add.Tensor", kFloat64, true)),
            (std::vector<std::string>{"aten_ref"}));
  EXPECT_EQ(candidate_names(*routes_.route("aten::add.Tensor", kInt64, true)),
            (std::vector<std::string>{"aten_ref"}));
  EXPECT_EQ(candidate_names(*routes_.route("aten::mul.Tensor", kFloat32, true)),
            (std::vector<std::string>{"aten_ref"}));
  EXPECT_EQ(candidate_names(*routes_.route("aten::add_.Tensor", kFloat32, true)),
            (std::vector<std::string>{"aten_ref"}))
      << "each overload is a separate op";
}

TEST_F(RouteTableTest, NoTensorArgumentMatchesByNameOnly) {
  openreg::Route* r = routes_.route("aten::add.Tensor", openreg_dtype{}, false);
  EXPECT_FALSE(r->has_dtype);
  EXPECT_EQ(candidate_names(*r), (std::vector<std::string>{"fixture_good", "aten_ref"}));
}

TEST_F(RouteTableTest, DecisionsAreCached) {
  openreg::Route* a = routes_.route("aten::add.Tensor", kFloat32, true);
  EXPECT_EQ(routes_.route("aten::add.Tensor", kFloat32, true), a);
  EXPECT_NE(routes_.route("aten::add.Tensor", kFloat64, true), a);
  EXPECT_NE(routes_.route("aten::add.Tensor", kFloat32, false), a);
  EXPECT_NE(routes_.route("aten::add.out", kFloat32, true), a);
}

TEST_F(RouteTableTest, ConcurrentFirstUseBuildsOneRoute) {
  std::vector<openreg::Route*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] { seen[i] = routes_.route("aten::sub.Tensor", kFloat32, true); });
  }
  for (auto& t : threads) t.join();
  for (auto* r : seen) EXPECT_EQ(r, seen[0]);
}

TEST_F(RouteTableTest, StatsCountCallsPerOpAndEngine) {
  EXPECT_TRUE(routes_.stats().empty());
  openreg::Route* add = routes_.route("aten::add.Tensor", kFloat32, true);
  openreg::Route* add64 = routes_.route("aten::add.Tensor", kFloat64, true);
  openreg::Route* mul = routes_.route("aten::mul.Tensor", kFloat32, true);
  EXPECT_TRUE(routes_.stats().empty()) << "routes alone are not calls";
  // What the device does after each call: bump the serving candidate's counter.
  add->calls[0] += 3;   // fixture_good
  add->calls[1] += 1;   // aten_ref (fixture_good declined once)
  add64->calls[0] += 2; // aten_ref, same op, other dtype: summed per op
  mul->calls[0] += 5;   // aten_ref
  auto s = routes_.stats();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s["aten::add.Tensor"]["fixture_good"], 3u);
  EXPECT_EQ(s["aten::add.Tensor"]["aten_ref"], 3u);
  EXPECT_EQ(s["aten::mul.Tensor"].size(), 1u);
  EXPECT_EQ(s["aten::mul.Tensor"]["aten_ref"], 5u);
  EXPECT_EQ(s["aten::mul.Tensor"].count("fixture_good"), 0u);

  routes_.reset_stats();
  EXPECT_TRUE(routes_.stats().empty());
  EXPECT_EQ(routes_.route("aten::add.Tensor", kFloat32, true), add) << "reset keeps the decisions";
  add->calls[0] += 1;
  EXPECT_EQ(routes_.stats()["aten::add.Tensor"]["fixture_good"], 1u);
}

TEST_F(RouteTableTest, ReferencePathCallsAreCountedWithTheEngines) {
  openreg::Route* ref = routes_.reference_route("aten::view");
  EXPECT_TRUE(ref->candidates.empty()) << "the reference path is not an engine of the chain";
  EXPECT_EQ(routes_.reference_route("aten::view"), ref);
  EXPECT_TRUE(routes_.stats().empty());
  ref->reference_calls += 2;
  openreg::Route* add = routes_.route("aten::add.Tensor", kFloat32, true);
  add->calls[0] += 1;
  routes_.reference_route("aten::add.Tensor")->reference_calls += 4;  // same op, both paths
  auto s = routes_.stats();
  EXPECT_EQ(s["aten::view"].size(), 1u);
  EXPECT_EQ(s["aten::view"][openreg::kReferencePathName], 2u);
  EXPECT_EQ(s["aten::add.Tensor"]["fixture_good"], 1u);
  EXPECT_EQ(s["aten::add.Tensor"][openreg::kReferencePathName], 4u);
  routes_.reset_stats();
  EXPECT_TRUE(routes_.stats().empty());
}

TEST_F(RouteTableTest, RoutedCallsRunOnTheChosenEngine) {
  auto run_first = [&](const char* op, openreg_call& call) {
    openreg::Route* r = routes_.route(op, kFloat32, true);
    EXPECT_FALSE(r->candidates.empty());
    call.op_index = r->candidates[0].op_index;
    std::string msg;
    openreg_status st = openreg::invoke_run(*r->candidates[0].engine, call, &msg);
    if (st == OPENREG_STATUS_OK) r->calls[0]++;
    return st;
  };
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, o[3] = {0, 0, 0};
  View self(a, {3}, {1}, kFloat32), other(b, {3}, {1}, kFloat32), out(o, {3}, {1}, kFloat32);
  AddCall add(self.get(), other.get(), int_scalar(1), out.get());
  ASSERT_EQ(run_first("aten::add.Tensor", add.call), OPENREG_STATUS_OK);
  EXPECT_EQ(std::vector<float>(o, o + 3), (std::vector<float>{11, 22, 33}));
  AddCall mul(self.get(), other.get(), int_scalar(1), out.get());
  mul.call.op_name = "aten::mul.Tensor";
  ASSERT_EQ(run_first("aten::mul.Tensor", mul.call), OPENREG_STATUS_OK);
  EXPECT_EQ(std::vector<float>(o, o + 3), (std::vector<float>{42, 42, 42})) << "the fake aten_ref ran";
  auto s = routes_.stats();
  EXPECT_EQ(s["aten::add.Tensor"]["fixture_good"], 1u);
  EXPECT_EQ(s["aten::mul.Tensor"]["aten_ref"], 1u);
}

TEST(RouteTable, StrictModeLeavesUncoveredOpsWithoutCandidates) {
  openreg::Registry registry(config("fixture_good", false, /*with_ref_dir=*/false), openreg::make_host_services());
  openreg::RouteTable router(registry);
  EXPECT_EQ(candidate_names(*router.route("aten::add.Tensor", kFloat32, true)),
            (std::vector<std::string>{"fixture_good"}));
  openreg::Route* mul = router.route("aten::mul.Tensor", kFloat32, true);
  ASSERT_NE(mul, nullptr);
  EXPECT_TRUE(mul->candidates.empty());
  std::string msg = router.uncovered_message(*mul);
  expect_contains(msg, "aten::mul.Tensor");
  expect_contains(msg, "float32");
  expect_contains(msg, "OPENREG_FALLBACK");
  expect_contains(msg, "fixture_good");  // the engines asked
  // add for float64 is not covered either.
  openreg::Route* add64 = router.route("aten::add.Tensor", kFloat64, true);
  EXPECT_TRUE(add64->candidates.empty());
  expect_contains(router.uncovered_message(*add64), "float64");
  // An uncovered route is cached like any other and has no counters to report.
  EXPECT_EQ(router.route("aten::mul.Tensor", kFloat32, true), mul);
  EXPECT_TRUE(router.stats().empty());
}

TEST(RouteTable, UncoveredMessageWithoutTensorArgument) {
  openreg::Registry registry(config("fixture_good", false, false), openreg::make_host_services());
  openreg::RouteTable router(registry);
  openreg::Route* r = router.route("aten::empty.memory_format", openreg_dtype{}, false);
  EXPECT_TRUE(r->candidates.empty());
  expect_contains(router.uncovered_message(*r), "aten::empty.memory_format");
  expect_contains(router.uncovered_message(*r), "no tensor argument");
}

TEST(RouteTable, RegistryErrorsReachTheCaller) {
  openreg::Registry registry(config("nope", true), openreg::make_host_services());
  openreg::RouteTable router(registry);
  EXPECT_THROW(router.route("aten::add.Tensor", kFloat32, true), openreg::EngineError);
  EXPECT_THROW(router.route("aten::add.Tensor", kFloat32, true), openreg::EngineError) << "and again";
}

}  // namespace
