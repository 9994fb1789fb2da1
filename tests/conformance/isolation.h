// Crash isolation for the conformance suite: the cases run in a worker process
// that reports to the supervising one (this one) through a pipe, so a case that
// crashes the worker is reported, and a new worker carries on after it.
//
// The worker is forked before anything starts threads (the harness's pool, the
// engines' own): fork is only safe from a single-threaded process, and the
// supervisor stays one, loading no engine.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace conformance {

// Worker side: one record (a list of fields) per message to the supervisor.
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  // Tabs and newlines inside fields become spaces; a record is cut to fit one
  // atomic pipe write.
  void send(const std::vector<std::string>& fields);

 private:
  int fd_;
};

struct WorkerEnd {
  bool signalled = false;
  int signal = 0;     // when signalled
  int exit_code = 0;  // otherwise
};

// Forks a worker running `work` (its return value is the worker's exit status;
// it never returns into the caller) and hands each record it sends to `on_record`
// as it arrives. Returns when the worker has ended.
WorkerEnd run_worker(const std::function<int(Reporter&)>& work,
                     const std::function<void(const std::vector<std::string>&)>& on_record);

// "SIGSEGV", or "signal N" for signals without a name here.
std::string signal_label(int signal);

}  // namespace conformance
