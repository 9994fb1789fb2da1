// What the modes of openreg-conformance share: the options, the engines under
// comparison, and the ops and cases to run.
//
// Every mode runs its cases in worker processes (isolation.h): main() resolves the
// engine paths and hands over before anything loads an engine or starts a thread;
// each worker loads the engines itself (load_engines).
#pragma once

#include "harness.h"
#include "isolation.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace conformance {

struct Options {
  std::string engine, reference, mode = "test", format = "text";
  std::string engine_path, reference_path;  // resolved from engine and reference
  std::vector<std::string> ops;
  bool strict = false;
  int threads = 0, reps = 5;
  uint64_t seed = 20261121;
  std::map<std::string, Tolerance> tolerances;
};

// The worker's engines and pool (load_engines fills it).
extern Harness g_harness;

// The thread pool, then both engines, into g_harness. Returns -1 when ready, else
// the exit status to stop with (the reason is printed).
int load_engines(const Options& o);
// The "engine <name> <version> <path> <reference name>" record, once the engines loaded.
void report_engines(Reporter& reporter);

// What the engine advertises and --op selects: op -> dtypes to test, by op name.
std::vector<std::pair<std::string, std::vector<openreg_dtype>>> advertised(const openreg::Engine& e,
                                                                           const Options& o);
uint64_t case_seed(uint64_t seed, const std::string& op, const std::string& dtype, const std::string& label);

int run_test_mode(const Options& o);   // test_mode.cpp
int run_table_mode(const Options& o);  // table_modes.cpp: --mode=support and --mode=perf

}  // namespace conformance
