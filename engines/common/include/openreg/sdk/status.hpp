// openreg engine SDK: errors and the status guard.
//
// Kernels report problems by throwing sdk::Error (or calling sdk::fail /
// sdk::unsupported / OPENREG_SDK_CHECK); sdk::guard catches everything at the ABI
// boundary, hands the message to the host's set_error and returns the status.
// Nothing escapes into the host, as engine.h requires.
#pragma once

#include <openreg/engine.h>

#include <new>
#include <type_traits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace openreg {
namespace sdk {

// Concatenates anything streamable: str("dim ", 3, " of ", name).
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (void)(out << ... << parts);
  return out.str();
}

// An error with the ABI status it maps to.
class Error : public std::runtime_error {
 public:
  Error(openreg_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  openreg_status status() const noexcept { return status_; }

 private:
  openreg_status status_;
};

// Throws an error with `status`; the message should say what was wrong and what to do.
[[noreturn]] inline void fail(openreg_status status, const std::string& message) {
  throw Error(status, message);
}

// "Not this call; route it to the next engine." Must be thrown before any output
// is written: the next engine starts from the same inputs.
[[noreturn]] inline void unsupported(const std::string& reason) {
  throw Error(OPENREG_STATUS_UNSUPPORTED, reason);
}

// Runs `body` (returning void or openreg_status) and turns whatever it throws
// into a status plus a message for host->set_error. noexcept: safe at the ABI.
template <class Body>
openreg_status guard(const openreg_host* host, Body&& body) noexcept {
  openreg_status status = OPENREG_STATUS_OK;
  const char* fixed = nullptr;
  std::string message;
  try {
    if constexpr (std::is_same_v<decltype(body()), void>) {
      body();
    } else {
      status = body();
    }
    return status;
  } catch (const Error& e) {
    status = e.status();
    try { message = e.what(); } catch (...) { fixed = "openreg engine: error (message lost: out of memory)"; }
  } catch (const std::bad_alloc&) {
    status = OPENREG_STATUS_OUT_OF_MEMORY;
    fixed = "openreg engine: out of host memory";
  } catch (const std::exception& e) {
    status = OPENREG_STATUS_INTERNAL;
    try { message = e.what(); } catch (...) { fixed = "openreg engine: internal error"; }
  } catch (...) {
    status = OPENREG_STATUS_INTERNAL;
    fixed = "openreg engine: unknown exception";
  }
  if (host && host->set_error) host->set_error(host->ctx, status, fixed ? fixed : message.c_str());
  return status;
}

}  // namespace sdk
}  // namespace openreg

// OPENREG_SDK_CHECK(cond, parts...): INVALID_ARGUMENT with the streamed parts when
// cond is false. OPENREG_SDK_REQUIRE(cond, parts...): UNSUPPORTED instead (the
// call moves on to the next engine).
#define OPENREG_SDK_CHECK(cond, ...)                                                   \
  do {                                                                                 \
    if (!(cond)) ::openreg::sdk::fail(OPENREG_STATUS_INVALID_ARGUMENT,                 \
                                      ::openreg::sdk::str(__VA_ARGS__));               \
  } while (0)
#define OPENREG_SDK_REQUIRE(cond, ...)                                                 \
  do {                                                                                 \
    if (!(cond)) ::openreg::sdk::unsupported(::openreg::sdk::str(__VA_ARGS__));        \
  } while (0)
