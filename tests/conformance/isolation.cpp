// The worker process and its pipe (see isolation.h).
#include "isolation.h"

#include "engine_host.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace conformance {

void Reporter::send(const std::vector<std::string>& fields) {
  std::string record;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) record += '\t';
    for (char c : fields[i]) record += (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
  }
  if (record.size() > PIPE_BUF - 1) record.resize(PIPE_BUF - 1);
  record += '\n';
  const char* p = record.data();
  size_t left = record.size();
  while (left) {
    ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(3);  // the supervisor is gone: nobody to report to
    p += n;
    left -= static_cast<size_t>(n);
  }
}

WorkerEnd run_worker(const std::function<int(Reporter&)>& work,
                     const std::function<void(const std::vector<std::string>&)>& on_record) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("openreg-conformance: pipe");
    std::exit(2);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("openreg-conformance: fork");
    std::exit(2);
  }
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed supervisor (ctest's timeout) takes the worker along
    if (getppid() != parent) std::_Exit(3);
    Reporter reporter(fds[1]);
    const int code = work(reporter);
    std::fflush(stdout);
    std::fflush(stderr);
    // Engines are never unloaded; skip static destructors of libtorch (aten_ref).
    std::_Exit(code);
  }
  close(fds[1]);
  std::string pending;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, end;
    while ((end = pending.find('\n', start)) != std::string::npos) {
      std::vector<std::string> fields;
      size_t a = start;
      for (;;) {
        size_t tab = pending.find('\t', a);
        if (tab == std::string::npos || tab > end) tab = end;
        fields.push_back(pending.substr(a, tab - a));
        if (tab == end) break;
        a = tab + 1;
      }
      on_record(fields);
      start = end + 1;
    }
    pending.erase(0, start);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  WorkerEnd end;
  if (WIFSIGNALED(status)) {
    end.signalled = true;
    end.signal = WTERMSIG(status);
  } else {
    end.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return end;
}

std::string signal_label(int signal) {
  const char* name = openreg::signal_name(signal);
  return name ? name : "signal " + std::to_string(signal);
}

}  // namespace conformance
