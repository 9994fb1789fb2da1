// --mode=support (the coverage table) and --mode=perf (time per call), one row
// at a time, in worker processes.
//
// A worker announces each case before running it and each row once printed. When
// a case crashes the worker, the next one starts at that row and counts the case
// as a crash (FAIL) instead of running it; the crashes are listed under the table.
#include "runner.h"

#include <openreg/sdk/dtype.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace conformance {

namespace {

namespace sdk = openreg::sdk;

struct Progress {
  bool header_done = false;
  int rows_done = 0;                     // rows printed by earlier workers
  std::map<int, std::string> crashed;    // case index -> "crashed (SIGSEGV)"
  std::vector<std::string> crash_notes;  // "op dtype [label] crashed (SIGSEGV)"
};
Progress g_progress;  // the supervisor's; each worker starts from a copy of it (fork)
Reporter* g_reporter = nullptr;

void header_done() {
  std::fflush(stdout);
  g_reporter->send({"header"});
}

// False when case `index` crashed an earlier worker: count it as failed, do not run it.
bool start_case(int index, const std::string& op, const std::string& dtype, const std::string& label) {
  if (g_progress.crashed.count(index)) return false;
  g_reporter->send({"start", std::to_string(index), op, dtype, label});
  return true;
}

void row_done(int row, bool failed) {
  std::fflush(stdout);
  g_reporter->send({"row", std::to_string(row), failed ? "1" : "0"});
}

void print_crash_notes() {
  for (const auto& note : g_progress.crash_notes) std::printf("FAIL: %s\n", note.c_str());
}

int support_mode(const Options& o) {
  const std::vector<openreg_dtype> columns{sdk::dtypes::float32, sdk::dtypes::float64, sdk::dtypes::bfloat16,
                                           sdk::dtypes::float16,  sdk::dtypes::int64,   sdk::dtypes::int32,
                                           sdk::dtypes::bool_};
  const bool md = o.format == "markdown";
  const auto& e = *g_harness.engine;
  if (!g_progress.header_done) {
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
    header_done();
  }
  int failures = 0, row = 0, index = 0;
  for (const auto& [op, dtypes] : advertised(e, o)) {
    const bool printed = row < g_progress.rows_done;  // by an earlier worker: only count its cases
    std::string line = md ? "| `" + op + "` |" : op;
    if (!md) line.resize(std::max<size_t>(line.size(), 44), ' ');
    bool row_failed = false;
    for (auto d : columns) {
      std::string cell;
      bool listed = std::any_of(dtypes.begin(), dtypes.end(), [&](openreg_dtype x) { return sdk::same_dtype(x, d); });
      if (listed) {
        const std::string dname = sdk::dtype_name(d);
        OpCases oc = cases_for(op, d);
        bool dtype_known = std::any_of(oc.dtypes.begin(), oc.dtypes.end(), [&](openreg_dtype x) { return sdk::same_dtype(x, d); });
        if (!oc.known || !dtype_known) {
          cell = "?";
        } else {
          int pass = 0, unsup = 0, fail = 0;
          for (const Case& c : oc.cases) {
            if (c.perf_only) continue;
            const int i = index++;
            if (printed) continue;
            if (!start_case(i, op, dname, c.label)) {
              ++fail;
              continue;
            }
            RunResult r = g_harness.run(op, d, c, case_seed(o.seed, op, dname, c.label));
            if (r.status == RunResult::Pass) ++pass;
            else if (r.status == RunResult::Unsupported) ++unsup;
            else ++fail;
          }
          cell = fail ? "FAIL" : pass == 0 ? "declined" : unsup ? "✓*" : "✓";
          row_failed |= fail > 0;
        }
      }
      if (md) line += " " + cell + " |";
      else {
        cell.resize(std::max<size_t>(cell.size() + (cell.rfind("✓", 0) == 0 ? 2 : 0), 9), ' ');
        line += " " + cell;
      }
    }
    if (!printed) {
      std::printf("%s\n", line.c_str());
      failures += row_failed;
      row_done(row, row_failed);
    }
    ++row;
  }
  if (md && !g_progress.crash_notes.empty()) std::printf("\n");
  print_crash_notes();
  return failures ? 1 : 0;
}

int perf_mode(const Options& o) {
  if (!g_progress.header_done) {
    std::printf("%-40s %-9s %-40s %12s %12s %8s\n", "op", "dtype", "case", "engine us", "aten_ref us", "speedup");
    header_done();
  }
  int row = 0;
  for (const auto& [op, dtypes] : advertised(*g_harness.engine, o)) {
    for (openreg_dtype d : dtypes) {
      OpCases oc = cases_for(op, d);
      if (!oc.known || oc.cases.empty()) continue;
      const int r = row++;  // one case per row: the row number is the case index
      if (r < g_progress.rows_done) continue;
      const Case* pick = nullptr;
      for (const Case& c : oc.cases)
        if (c.perf_only) pick = &c;
      if (!pick) pick = &oc.cases.back();
      double e = 0, ref = 0;
      std::string why;
      const std::string dname = sdk::dtype_name(d);
      if (!start_case(r, op, dname, pick->label)) {
        std::printf("%-40s %-9s %-40s %s\n", op.c_str(), dname.c_str(), pick->label.c_str(),
                    g_progress.crashed[r].c_str());
        row_done(r, true);
        continue;
      }
      if (!g_harness.time(op, d, *pick, case_seed(o.seed, op, dname, pick->label), o.reps, &e, &ref, &why)) {
        std::printf("%-40s %-9s %-40s %s\n", op.c_str(), dname.c_str(), pick->label.c_str(),
                    ("not timed: " + why.substr(0, 80)).c_str());
      } else {
        std::printf("%-40s %-9s %-40s %12.1f %12.1f %7.2fx\n", op.c_str(), dname.c_str(), pick->label.c_str(),
                    e * 1e6, ref * 1e6, ref / e);
      }
      row_done(r, false);
    }
  }
  std::printf("speedup: aten_ref time / engine time (both through the ABI, %d threads)\n",
              g_harness.host.get_num_threads(nullptr));
  print_crash_notes();
  return g_progress.crashed.empty() ? 0 : 1;
}

}  // namespace

int run_table_mode(const Options& o) {
  bool loaded = false, failed = false;
  struct Running {
    int index = -1;
    std::string which;  // "op dtype [label]"
  } running;
  auto on_record = [&](const std::vector<std::string>& f) {
    const std::string& kind = f[0];
    if (kind == "engine") {
      loaded = true;
    } else if (kind == "header") {
      g_progress.header_done = true;
    } else if (kind == "start" && f.size() == 5) {
      running = {std::atoi(f[1].c_str()), f[2] + " " + f[3] + " [" + f[4] + "]"};
    } else if (kind == "row" && f.size() == 3) {
      g_progress.rows_done = std::atoi(f[1].c_str()) + 1;
      failed |= f[2] == "1";
      running = Running{};
    }
  };
  auto work = [&](Reporter& reporter) {
    g_reporter = &reporter;
    const int status = load_engines(o);
    if (status >= 0) return status;
    report_engines(reporter);
    return o.mode == "support" ? support_mode(o) : perf_mode(o);
  };
  for (;;) {
    const WorkerEnd end = run_worker(work, on_record);
    if (!loaded) {
      if (!end.signalled) return end.exit_code;
      std::fprintf(stderr, "openreg-conformance: the worker process died by %s while loading the engines\n",
                   signal_label(end.signal).c_str());
      return 1;
    }
    if (running.index < 0) {
      if (!end.signalled) return end.exit_code || failed ? 1 : 0;
      std::fprintf(stderr, "openreg-conformance: the worker process died by %s outside any case\n",
                   signal_label(end.signal).c_str());
      return 1;
    }
    const std::string how = end.signalled ? "crashed (" + signal_label(end.signal) + ")"
                                          : "ended the process (exit status " + std::to_string(end.exit_code) + ")";
    std::fprintf(stderr, "openreg-conformance: %s %s; going on in a new process\n", running.which.c_str(),
                 how.c_str());
    g_progress.crashed[running.index] = how;
    g_progress.crash_notes.push_back(running.which + " " + how);
    running = Running{};
  }
}

}  // namespace conformance
