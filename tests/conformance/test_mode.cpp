// --mode=test: one GoogleTest case per op x dtype x input case, run in worker
// processes so that a case that crashes one is a FAIL and the run goes on.
//
// The worker (test_worker) runs the GoogleTest cases and sends records to the
// supervisor (run_test_mode), which tallies them, turns a crash into a FAIL of the
// case running, and prints the summary:
//   engine <name> <version> <path> <reference name>   (once the engines loaded)
//   nocase <op> <dtype>          registered <number of cases>
//   start <case index> <op> <dtype> <label>           result <case index> <status> <note>
// Case indices follow registration order, the same in every worker.
#include "runner.h"

#include <openreg/sdk/dtype.hpp>

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace conformance {

namespace {

namespace sdk = openreg::sdk;

struct Tally {
  int pass = 0, fail = 0, unsupported = 0;
  bool no_case = false;
  std::string note;  // a crash, else the first unsupported reason or weak-case note
};
std::map<std::pair<std::string, std::string>, Tally> g_tally;
Reporter* g_reporter = nullptr;  // the worker's channel to the supervisor

const char* status_word(RunResult::Status s) {
  switch (s) {
    case RunResult::Pass: return "pass";
    case RunResult::Fail: return "fail";
    case RunResult::Unsupported: return "unsupported";
    case RunResult::Error: return "error";
  }
  return "error";
}

class CaseTest : public ::testing::Test {
 public:
  CaseTest(int index, std::string op, openreg_dtype dtype, Case c, uint64_t seed)
      : index_(index), op_(std::move(op)), dtype_(dtype), case_(std::move(c)), seed_(seed) {}
  void TestBody() override {
    const std::string dname = sdk::dtype_name(dtype_);
    g_reporter->send({"start", std::to_string(index_), op_, dname, case_.label});
    RunResult r = g_harness.run(op_, dtype_, case_, seed_);
    const std::string note = r.weak                                  ? "weak case: " + r.weak_note
                             : r.status == RunResult::Unsupported ? r.message
                                                                  : "";
    g_reporter->send({"result", std::to_string(index_), status_word(r.status), note});
    switch (r.status) {
      case RunResult::Pass: break;
      case RunResult::Unsupported: GTEST_SKIP() << "unsupported: " << r.message;
      case RunResult::Fail:
        ADD_FAILURE() << op_ << " " << dname << " [" << case_.label << "]: " << r.message;
        break;
      case RunResult::Error:
        ADD_FAILURE() << "conformance suite bug for " << op_ << " [" << case_.label << "]: " << r.message;
        break;
    }
  }

 private:
  int index_;
  std::string op_;
  openreg_dtype dtype_;
  Case case_;
  uint64_t seed_;
};

// A GoogleTest name part: letters and digits, '_' for the rest.
std::string sanitize(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

// Registers the cases not in `done`; returns how many cases there are in all.
int register_tests(const Options& o, const std::set<int>& done) {
  int index = 0;
  for (const auto& [op, dtypes] : advertised(*g_harness.engine, o)) {
    for (openreg_dtype d : dtypes) {
      const std::string dname = sdk::dtype_name(d);
      OpCases oc = cases_for(op, d);
      if (!oc.known) {
        g_reporter->send({"nocase", op, dname});
        continue;
      }
      for (const Case& c : oc.cases) {
        if (c.perf_only) continue;
        const int i = index++;
        if (done.count(i)) continue;
        const uint64_t seed = case_seed(o.seed, op, dname, c.label);
        ::testing::RegisterTest(sanitize(op).c_str(), (dname + "__" + sanitize(c.label)).c_str(), nullptr,
                                c.label.c_str(), __FILE__, __LINE__,
                                [=]() -> ::testing::Test* { return new CaseTest(i, op, d, c, seed); });
      }
    }
  }
  return index;
}

struct EngineInfo {
  std::string name, version, path, reference;
};

void print_summary(const Options& o, const EngineInfo& info, const std::vector<std::string>& crashes,
                   bool* no_case_seen, bool* failed) {
  std::printf("\nopenreg conformance: %s %s vs %s (%s)\n", info.name.c_str(), info.version.c_str(),
              info.reference.c_str(), info.path.c_str());
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
  for (const auto& c : crashes) std::printf("FAIL: %s\n", c.c_str());
  const std::string crashed = crashes.empty() ? "" : " (" + std::to_string(crashes.size()) + " case(s) crashed)";
  std::printf("summary: %d pass, %d FAIL%s, %d unsupported, %d no case (pass*: some input cases declined)\n", pass,
              fail, crashed.c_str(), unsup, nocase);
  *no_case_seen = nocase > 0;
  *failed = fail > 0;
  if (nocase && !o.strict) std::printf("note: ops without a case are not verified (--strict makes them fail)\n");
}

int test_worker(const Options& o, const std::set<int>& done, Reporter& reporter) {
  g_reporter = &reporter;
  const int status = load_engines(o);
  if (status >= 0) return status;
  report_engines(reporter);
  const int cases = register_tests(o, done);
  reporter.send({"registered", std::to_string(cases)});
  return cases > static_cast<int>(done.size()) ? RUN_ALL_TESTS() : 0;
}

}  // namespace

int run_test_mode(const Options& o) {
  EngineInfo info;
  bool loaded = false;
  int cases = 0;
  std::set<int> done;                 // cases with a result, or that crashed
  std::vector<std::string> crashes;   // "op dtype [label] crashed (SIGSEGV)"
  struct Running {
    int index = -1;
    std::string op, dtype, label;
  } running;
  auto on_record = [&](const std::vector<std::string>& f) {
    const std::string& kind = f[0];
    if (kind == "engine" && f.size() == 5) {
      info = {f[1], f[2], f[3], f[4]};
      loaded = true;
    } else if (kind == "nocase" && f.size() == 3) {
      g_tally[{f[1], f[2]}].no_case = true;
    } else if (kind == "registered" && f.size() == 2) {
      cases = std::atoi(f[1].c_str());
    } else if (kind == "start" && f.size() == 5) {
      running = {std::atoi(f[1].c_str()), f[2], f[3], f[4]};
    } else if (kind == "result" && f.size() == 4 && running.index == std::atoi(f[1].c_str())) {
      Tally& t = g_tally[{running.op, running.dtype}];
      if (f[2] == "pass") ++t.pass;
      else if (f[2] == "unsupported") ++t.unsupported;
      else ++t.fail;
      if (t.note.empty()) t.note = f[3];
      done.insert(running.index);
      running = Running{};
    }
  };
  int exit_code = 0;
  for (;;) {
    const WorkerEnd end = run_worker([&](Reporter& r) { return test_worker(o, done, r); }, on_record);
    if (!loaded) {  // the engines did not load: explained already, unless by the signal's line
      if (!end.signalled) return end.exit_code;
      std::fprintf(stderr, "openreg-conformance: the test process died by %s while loading the engines\n",
                   signal_label(end.signal).c_str());
      return 1;
    }
    if (running.index < 0) {
      if (end.signalled) {
        std::fprintf(stderr, "openreg-conformance: the test process died by %s outside any case\n",
                     signal_label(end.signal).c_str());
        exit_code = 1;
      } else {
        exit_code = end.exit_code;
      }
      break;
    }
    // The case running took the worker down: it fails, the next worker skips it.
    const std::string how = end.signalled ? "crashed (" + signal_label(end.signal) + ")"
                                          : "ended the process (exit status " + std::to_string(end.exit_code) + ")";
    const std::string which = running.op + " " + running.dtype + " [" + running.label + "]";
    Tally& t = g_tally[{running.op, running.dtype}];
    ++t.fail;
    t.note = how + " in case '" + running.label + "'";
    crashes.push_back(which + " " + how);
    std::printf("[  CRASHED ] %s %s; the remaining cases run in a new process\n", which.c_str(), how.c_str());
    done.insert(running.index);
    running = Running{};
  }
  bool no_case = false, failed = false;
  print_summary(o, info, crashes, &no_case, &failed);
  if (!cases && !no_case) {
    std::fprintf(stderr, "openreg-conformance: no op of %s matches --op\n", info.name.c_str());
    return 1;
  }
  std::fflush(stdout);
  return exit_code || failed || !crashes.empty() || (o.strict && no_case) ? 1 : 0;
}

}  // namespace conformance
