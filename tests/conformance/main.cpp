// openreg-conformance: compares an engine with the reference engine (aten_ref),
// op by op, through the ABI.
//
//   openreg-conformance --engine=<name|path> [--op=<filter>] [--mode=test|support|perf]
//                       [--reference=<path>] [--strict] [--tolerance=<op>[:<dtype>]=<rtol>,<atol>]
//                       [--format=text|markdown] [--threads=N] [--reps=N] [--seed=N]
//                       [GoogleTest flags]
//
// test (default): one GoogleTest case per op x dtype x input case for every op the
//   engine advertises. Unsupported combinations are skipped and reported, never
//   failed. Ops the suite has no case family for are reported as "no case" (failed
//   with --strict). Exit status 0 when nothing failed.
// support: the coverage table (what the engine serves, per op and dtype).
// perf: time per call of the engine and of aten_ref on the largest case of each op.
//
// Every mode runs its cases in a worker process (isolation.h): a case that crashes
// it is reported as a FAIL naming the signal, and a new worker goes on after it.
#include "runner.h"

#include <openreg/sdk/dtype.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>

namespace conformance {

Harness g_harness;

namespace {

namespace sdk = openreg::sdk;

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "openreg-conformance: %s\n", message.c_str());
  std::fprintf(stderr,
               "usage: openreg-conformance --engine=<name|path> [--op=<filter>[,<filter>...]] "
               "[--mode=test|support|perf] [--reference=<path to libopenreg_engine_aten_ref.so>] [--strict] "
               "[--tolerance=<op>[:<dtype>]=<rtol>,<atol>] [--format=text|markdown] [--threads=N] [--reps=N] "
               "[--seed=N]\n");
  std::exit(2);
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) { return a.substr(std::string(flag).size()); };
    if (starts_with(a, "--engine=")) o.engine = value("--engine=");
    else if (starts_with(a, "--reference=")) o.reference = value("--reference=");
    else if (starts_with(a, "--op=")) o.ops = split(value("--op="), ',');
    else if (starts_with(a, "--mode=")) o.mode = value("--mode=");
    else if (starts_with(a, "--format=")) o.format = value("--format=");
    else if (a == "--strict") o.strict = true;
    else if (starts_with(a, "--threads=")) o.threads = std::atoi(value("--threads=").c_str());
    else if (starts_with(a, "--reps=")) o.reps = std::max(1, std::atoi(value("--reps=").c_str()));
    else if (starts_with(a, "--seed=")) o.seed = std::strtoull(value("--seed=").c_str(), nullptr, 10);
    else if (starts_with(a, "--tolerance=")) {
      std::string v = value("--tolerance=");
      auto eq = v.rfind('='), comma = v.rfind(',');
      if (eq == std::string::npos || comma == std::string::npos || comma < eq)
        usage_error("--tolerance takes <op>[:<dtype>]=<rtol>,<atol>, got '" + v + "'");
      Tolerance t{std::atof(v.substr(eq + 1, comma - eq - 1).c_str()), std::atof(v.substr(comma + 1).c_str())};
      o.tolerances[v.substr(0, eq)] = t;
    } else if (starts_with(a, "--gtest_") || a == "--help" || a == "-h") {
      if (a == "--help" || a == "-h") usage_error("help");
    } else {
      usage_error("unknown argument '" + a + "'");
    }
  }
  if (o.engine.empty()) usage_error("--engine is required (an engine name such as eigen, or a path to its .so)");
  if (o.mode != "test" && o.mode != "support" && o.mode != "perf") usage_error("--mode is test, support or perf");
  if (o.format != "text" && o.format != "markdown") usage_error("--format is text or markdown");
  return o;
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

bool is_file(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

// Engine name -> library, searched like the device does (OPENREG_ENGINE_PATH first),
// then in the package's lib folder (installed: openreg/bin/.. -> openreg/lib) and
// the build tree's engine folder.
std::string resolve_engine(const std::string& spec, const std::string& what) {
  if (spec.find('/') != std::string::npos || (spec.size() > 3 && spec.compare(spec.size() - 3, 3, ".so") == 0)) {
    if (!is_file(spec)) usage_error(what + " library '" + spec + "' does not exist or is not readable");
    return spec;
  }
  openreg::Registry::Config config;
  try {
    config = openreg::Registry::config_from_env(self_dir() + "/../lib");
  } catch (const std::exception& e) {
    usage_error(e.what());
  }
#ifdef OPENREG_CONFORMANCE_ENGINE_DIR
  config.search_dirs.push_back(OPENREG_CONFORMANCE_ENGINE_DIR);
#endif
  openreg::Registry registry(config, openreg::make_host_services());
  std::string path = registry.find_engine_file(spec);
  if (path.empty()) {
    std::string searched, found;
    for (const auto& d : config.search_dirs) searched += (searched.empty() ? "" : ", ") + d;
    for (const auto& f : registry.discover()) found += (found.empty() ? "" : ", ") + f.name;
    usage_error("no " + what + " named '" + spec + "' (looked for libopenreg_engine_" + spec + ".so in " + searched +
                "; found: " + (found.empty() ? "none" : found) + "). Pass a path, or add its folder to OPENREG_ENGINE_PATH");
  }
  return path;
}

bool op_selected(const Options& o, const std::string& op) {
  if (o.ops.empty()) return true;
  for (const auto& f : o.ops)
    if (op.find(f) != std::string::npos) return true;
  return false;
}

}  // namespace

std::vector<std::pair<std::string, std::vector<openreg_dtype>>> advertised(const openreg::Engine& e, const Options& o) {
  std::vector<std::pair<std::string, std::vector<openreg_dtype>>> out;
  std::vector<const openreg::OpEntry*> entries;
  for (const auto& kv : e.ops) entries.push_back(&kv.second);
  std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const auto* entry : entries) {
    if (!op_selected(o, entry->name)) continue;
    std::vector<openreg_dtype> dts = entry->dtypes;
    if (dts.empty()) dts = natural_dtypes(entry->name);  // "any dtype": the family's natural set
    if (dts.empty()) dts = {sdk::dtypes::float32};
    out.emplace_back(entry->name, dts);
  }
  return out;
}

uint64_t case_seed(uint64_t seed, const std::string& op, const std::string& dtype, const std::string& label) {
  uint64_t h = seed ^ 1469598103934665603ULL;
  for (const std::string* s : {&op, &dtype, &label})
    for (char ch : *s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  return h;
}

namespace {
std::unique_ptr<openreg::Engine> g_engine, g_reference;  // never unloaded
}  // namespace

int load_engines(const Options& o) {
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  g_harness.host = make_pool_host(threads);
  g_harness.tolerance_overrides = o.tolerances;
  try {
    g_reference = openreg::load_engine(o.reference_path, &g_harness.host);
    g_engine = openreg::load_engine(o.engine_path, &g_harness.host);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "openreg-conformance: %s\n", e.what());
    return 2;
  }
  if (!g_reference->any_op()) {
    std::fprintf(stderr, "openreg-conformance: the reference '%s' is not aten_ref (it does not take any op)\n",
                 o.reference_path.c_str());
    return 2;
  }
  g_harness.engine = g_engine.get();
  g_harness.reference = g_reference.get();
  if (g_engine->ops.empty()) {
    std::fprintf(stderr, "openreg-conformance: engine %s advertises no ops%s; nothing to compare\n",
                 g_engine->name.c_str(), g_engine->any_op() ? " (it takes any op: it is a reference engine)" : "");
    return g_engine->any_op() ? 0 : 1;
  }
  return -1;
}

void report_engines(Reporter& reporter) {
  reporter.send({"engine", g_engine->name, g_engine->version, g_engine->path, g_reference->name});
}

}  // namespace conformance

int main(int argc, char** argv) {
  using namespace conformance;
  Options o = parse_options(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  o.engine_path = resolve_engine(o.engine, "engine");
  o.reference_path = resolve_engine(o.reference.empty() ? "aten_ref" : o.reference, "reference engine");
  // Nothing has loaded an engine or started a thread yet: the modes fork their workers from here.
  return o.mode == "test" ? run_test_mode(o) : run_table_mode(o);
}
