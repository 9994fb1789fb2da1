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
#include "harness.h"

#include <openreg/sdk/dtype.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

namespace {

using namespace conformance;
namespace sdk = openreg::sdk;

struct Options {
  std::string engine, reference, mode = "test", format = "text";
  std::vector<std::string> ops;
  bool strict = false;
  int threads = 0, reps = 5;
  uint64_t seed = 20261121;
  std::map<std::string, Tolerance> tolerances;
};

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

std::string sanitize(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

// What the engine advertises: op -> dtypes to test.
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

// ----------------------------------------------------------------- results

struct Tally {
  int pass = 0, fail = 0, unsupported = 0;
  bool no_case = false;
  std::string note;  // first unsupported reason or weak-case note
};
std::map<std::pair<std::string, std::string>, Tally> g_tally;
Harness g_harness;

class CaseTest : public ::testing::Test {
 public:
  CaseTest(std::string op, openreg_dtype dtype, Case c, uint64_t seed)
      : op_(std::move(op)), dtype_(dtype), case_(std::move(c)), seed_(seed) {}
  void TestBody() override {
    Tally& t = g_tally[{op_, sdk::dtype_name(dtype_)}];
    RunResult r = g_harness.run(op_, dtype_, case_, seed_);
    if (r.weak && t.note.empty()) t.note = "weak case: " + r.weak_note;
    switch (r.status) {
      case RunResult::Pass: ++t.pass; break;
      case RunResult::Unsupported:
        ++t.unsupported;
        if (t.note.empty()) t.note = r.message;
        GTEST_SKIP() << "unsupported: " << r.message;
      case RunResult::Fail:
        ++t.fail;
        ADD_FAILURE() << op_ << " " << sdk::dtype_name(dtype_) << " [" << case_.label << "]: " << r.message;
        break;
      case RunResult::Error:
        ++t.fail;
        ADD_FAILURE() << "conformance suite bug for " << op_ << " [" << case_.label << "]: " << r.message;
        break;
    }
  }

 private:
  std::string op_;
  openreg_dtype dtype_;
  Case case_;
  uint64_t seed_;
};

uint64_t case_seed(uint64_t seed, const std::string& op, const std::string& dtype, const std::string& label) {
  uint64_t h = seed ^ 1469598103934665603ULL;
  for (const std::string* s : {&op, &dtype, &label})
    for (char ch : *s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  return h;
}

int register_tests(const Options& o) {
  int registered = 0;
  for (const auto& [op, dtypes] : advertised(*g_harness.engine, o)) {
    for (openreg_dtype d : dtypes) {
      const std::string dname = sdk::dtype_name(d);
      OpCases oc = cases_for(op, d);
      if (!oc.known) {
        g_tally[{op, dname}].no_case = true;
        continue;
      }
      for (const Case& c : oc.cases) {
        if (c.perf_only) continue;
        const uint64_t seed = case_seed(o.seed, op, dname, c.label);
        ::testing::RegisterTest(sanitize(op).c_str(), (dname + "__" + sanitize(c.label)).c_str(), nullptr,
                                c.label.c_str(), __FILE__, __LINE__,
                                [=]() -> ::testing::Test* { return new CaseTest(op, d, c, seed); });
        ++registered;
      }
    }
  }
  return registered;
}

void print_summary(const Options& o, bool* no_case_seen) {
  std::printf("\nopenreg conformance: %s %s vs %s (%s)\n", g_harness.engine->name.c_str(),
              g_harness.engine->version.c_str(), g_harness.reference->name.c_str(), g_harness.engine->path.c_str());
  std::printf("%-44s %-9s %-12s %s\n", "op", "dtype", "result", "detail");
  int pass = 0, fail = 0, unsup = 0, nocase = 0;
  for (const auto& [key, t] : g_tally) {
    std::string result;
    if (t.no_case) {
      result = "no case";
      ++nocase;
    } else if (t.fail) {
      result = "FAIL";
      ++fail;
    } else if (t.pass == 0 && t.unsupported) {
      result = "unsupported";
      ++unsup;
    } else if (t.pass) {
      result = t.unsupported ? "pass*" : "pass";
      ++pass;
    } else {
      continue;  // filtered out by --gtest_filter
    }
    std::string detail = t.no_case ? "the suite has no case family for this op (tests/conformance/cases.cpp)"
                                   : std::to_string(t.pass) + " passed, " + std::to_string(t.fail) + " failed, " +
                                         std::to_string(t.unsupported) + " unsupported";
    if (!t.note.empty()) detail += "; " + t.note.substr(0, 160);
    std::printf("%-44s %-9s %-12s %s\n", key.first.c_str(), key.second.c_str(), result.c_str(), detail.c_str());
  }
  std::printf("summary: %d pass, %d FAIL, %d unsupported, %d no case (pass*: some input cases declined)\n", pass,
              fail, unsup, nocase);
  *no_case_seen = nocase > 0;
  if (nocase && !o.strict) std::printf("note: ops without a case are not verified (--strict makes them fail)\n");
}

// ------------------------------------------------------------ support / perf

int support_mode(const Options& o) {
  const std::vector<openreg_dtype> columns{sdk::dtypes::float32, sdk::dtypes::float64, sdk::dtypes::bfloat16,
                                           sdk::dtypes::float16,  sdk::dtypes::int64,   sdk::dtypes::int32,
                                           sdk::dtypes::bool_};
  const bool md = o.format == "markdown";
  const auto& e = *g_harness.engine;
  if (md) {
    std::printf("### %s\n\n%s, ABI %d.%d. ✓ served; ✓* served for some input cases (declines others); "
                "declined: advertised but every case declined; FAIL: disagrees with aten_ref; ? no case to check.\n\n",
                e.name.c_str(), e.version.c_str(), e.table->abi_major, e.table->abi_minor);
    std::printf("| op |");
    for (auto d : columns) std::printf(" %s |", sdk::dtype_name(d).c_str());
    std::printf("\n|---|");
    for (size_t i = 0; i < columns.size(); ++i) std::printf("---|");
    std::printf("\n");
  } else {
    std::printf("%-44s", "op");
    for (auto d : columns) std::printf(" %-9s", sdk::dtype_name(d).c_str());
    std::printf("\n");
  }
  int failures = 0;
  for (const auto& [op, dtypes] : advertised(e, o)) {
    std::string row = md ? "| `" + op + "` |" : op;
    if (!md) row.resize(std::max<size_t>(row.size(), 44), ' ');
    for (auto d : columns) {
      std::string cell;
      bool listed = std::any_of(dtypes.begin(), dtypes.end(), [&](openreg_dtype x) { return sdk::same_dtype(x, d); });
      if (listed) {
        OpCases oc = cases_for(op, d);
        bool dtype_known = std::any_of(oc.dtypes.begin(), oc.dtypes.end(), [&](openreg_dtype x) { return sdk::same_dtype(x, d); });
        if (!oc.known || !dtype_known) {
          cell = "?";
        } else {
          int pass = 0, unsup = 0, fail = 0;
          for (const Case& c : oc.cases) {
            if (c.perf_only) continue;
            RunResult r = g_harness.run(op, d, c, case_seed(o.seed, op, sdk::dtype_name(d), c.label));
            if (r.status == RunResult::Pass) ++pass;
            else if (r.status == RunResult::Unsupported) ++unsup;
            else ++fail;
          }
          cell = fail ? "FAIL" : pass == 0 ? "declined" : unsup ? "✓*" : "✓";
          failures += fail > 0;
        }
      }
      if (md) row += " " + cell + " |";
      else {
        cell.resize(std::max<size_t>(cell.size() + (cell.rfind("✓", 0) == 0 ? 2 : 0), 9), ' ');
        row += " " + cell;
      }
    }
    std::printf("%s\n", row.c_str());
  }
  return failures ? 1 : 0;
}

int perf_mode(const Options& o) {
  std::printf("%-40s %-9s %-40s %12s %12s %8s\n", "op", "dtype", "case", "engine us", "aten_ref us", "speedup");
  for (const auto& [op, dtypes] : advertised(*g_harness.engine, o)) {
    for (openreg_dtype d : dtypes) {
      OpCases oc = cases_for(op, d);
      if (!oc.known || oc.cases.empty()) continue;
      const Case* pick = nullptr;
      for (const Case& c : oc.cases)
        if (c.perf_only) pick = &c;
      if (!pick) pick = &oc.cases.back();
      double e = 0, r = 0;
      std::string why;
      const std::string dname = sdk::dtype_name(d);
      if (!g_harness.time(op, d, *pick, case_seed(o.seed, op, dname, pick->label), o.reps, &e, &r, &why)) {
        std::printf("%-40s %-9s %-40s %s\n", op.c_str(), dname.c_str(), pick->label.c_str(),
                    ("not timed: " + why.substr(0, 80)).c_str());
        continue;
      }
      std::printf("%-40s %-9s %-40s %12.1f %12.1f %7.2fx\n", op.c_str(), dname.c_str(), pick->label.c_str(), e * 1e6,
                  r * 1e6, r / e);
    }
  }
  std::printf("speedup: aten_ref time / engine time (both through the ABI, %d threads)\n",
              g_harness.host.get_num_threads(nullptr));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  g_harness.host = make_pool_host(threads);
  g_harness.tolerance_overrides = o.tolerances;
  const std::string engine_path = resolve_engine(o.engine, "engine");
  const std::string reference_path = resolve_engine(o.reference.empty() ? "aten_ref" : o.reference, "reference engine");
  std::unique_ptr<openreg::Engine> engine, reference;
  try {
    reference = openreg::load_engine(reference_path, &g_harness.host);
    engine = openreg::load_engine(engine_path, &g_harness.host);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "openreg-conformance: %s\n", e.what());
    return 2;
  }
  if (!reference->any_op()) {
    std::fprintf(stderr, "openreg-conformance: the reference '%s' is not aten_ref (it does not take any op)\n",
                 reference_path.c_str());
    return 2;
  }
  g_harness.engine = engine.get();
  g_harness.reference = reference.get();
  if (engine->ops.empty()) {
    std::fprintf(stderr, "openreg-conformance: engine %s advertises no ops%s; nothing to compare\n",
                 engine->name.c_str(), engine->any_op() ? " (it takes any op: it is a reference engine)" : "");
    return engine->any_op() ? 0 : 1;
  }

  if (o.mode == "support") return support_mode(o);
  if (o.mode == "perf") return perf_mode(o);

  const int registered = register_tests(o);
  int rc = registered ? RUN_ALL_TESTS() : 0;
  bool no_case = false;
  print_summary(o, &no_case);
  if (!registered && !no_case) {
    std::fprintf(stderr, "openreg-conformance: no op of %s matches --op\n", engine->name.c_str());
    return 1;
  }
  if (o.strict && no_case) rc = 1;
  std::fflush(stdout);
  // Engines are never unloaded; skip static destructors of libtorch (aten_ref).
  std::_Exit(rc ? 1 : 0);
}
