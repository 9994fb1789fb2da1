// The crash line: what the fatal-signal handler (crash_handler.cpp) prints about
// the engine call a thread was in. Async-signal-safe: writes into a caller's fixed
// buffer, no allocation, no locks, no stdio.
#include "engine_host.h"

#include <openreg/dtype_name.h>

#include <signal.h>

#include <cstring>

namespace openreg {

namespace {

// Appends to a fixed buffer; past the end it drops text and remembers it did.
class LineWriter {
 public:
  LineWriter(char* buf, size_t cap) : buf_(buf), cap_(cap) {}
  void put(char c) {
    if (len_ + 2 < cap_) buf_[len_++] = c;  // room kept for "\n" and NUL
    else cut_ = true;
  }
  void put(const char* s) {
    while (s && *s) put(*s++);
  }
  void put_uint(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v);
    while (n) put(digits[--n]);
  }
  void put_int(int64_t v) {
    if (v < 0) {
      put('-');
      put_uint(~static_cast<uint64_t>(v) + 1);
    } else {
      put_uint(static_cast<uint64_t>(v));
    }
  }
  void put_hex(uint64_t v) {
    put("0x");
    char digits[20];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    while (n) put(digits[--n]);
  }
  // Six significant digits, like printf's %g.
  void put_double(double x) {
    if (x != x) return put("nan");
    if (x < 0 || (x == 0 && 1 / x < 0)) {
      put('-');
      x = -x;
    }
    if (x > 1.7976931348623157e308) return put("inf");
    int exp10 = 0;
    if (x != 0) {
      while (x >= 10) x /= 10, ++exp10;
      while (x < 1) x *= 10, --exp10;
    }
    uint64_t d = static_cast<uint64_t>(x * 1e5 + 0.5);  // 6 digits, d.ddddd
    if (d >= 1000000) d /= 10, ++exp10;
    char s[6];
    for (int i = 5; i >= 0; --i) s[i] = static_cast<char>('0' + d % 10), d /= 10;
    int last = 5;  // last significant digit
    while (last > 0 && s[last] == '0') --last;
    if (exp10 >= -4 && exp10 < 6) {
      if (exp10 < 0) {
        put("0.");
        for (int i = -1; i > exp10; --i) put('0');
        for (int i = 0; i <= last; ++i) put(s[i]);
      } else {
        for (int i = 0; i <= exp10; ++i) put(s[i]);
        if (last > exp10) {
          put('.');
          for (int i = exp10 + 1; i <= last; ++i) put(s[i]);
        }
      }
    } else {
      put(s[0]);
      if (last > 0) {
        put('.');
        for (int i = 1; i <= last; ++i) put(s[i]);
      }
      put(exp10 < 0 ? "e-" : "e+");
      if (exp10 > -10 && exp10 < 10) put('0');
      put_uint(static_cast<uint64_t>(exp10 < 0 ? -exp10 : exp10));
    }
  }
  // Ends the line: "..." when text was dropped, then "\n" and NUL. cap >= 8.
  size_t finish() {
    if (cut_) {
      len_ = cap_ - 5;
      for (const char* s = "..."; *s; ++s) buf_[len_++] = *s;
    }
    buf_[len_++] = '\n';
    buf_[len_] = 0;
    return len_;
  }

 private:
  char* buf_;
  size_t cap_;
  size_t len_ = 0;
  bool cut_ = false;
};

constexpr int64_t kMaxItems = 8;  // list items and dimensions shown
constexpr int32_t kMaxDims = 16;

// openreg/dtype_name.h's spelling ("float32", "bfloat16", "bool"), allocation-free.
void put_dtype(LineWriter& w, openreg_dtype d) {
  char name[OPENREG_DTYPE_NAME_MAX];
  openreg_dtype_format(d, name, sizeof name);
  w.put(name);
}

void put_ints(LineWriter& w, const int64_t* items, int64_t count) {
  w.put('[');
  for (int64_t i = 0; items && i < count && i < kMaxItems; ++i) {
    if (i) w.put(", ");
    w.put_int(items[i]);
  }
  if (count > kMaxItems) w.put(", ...");
  w.put(']');
}

// "float32 [5, 7]", then " strides [1, 5]" when not contiguous, " cpu" for a CPU tensor.
void put_tensor(LineWriter& w, const openreg_tensor* t) {
  if (!t) return w.put("None");
  put_dtype(w, t->dtype);
  w.put(' ');
  if (t->ndim < 0 || t->ndim > kMaxDims || (t->ndim > 0 && !t->sizes)) {
    w.put("(ndim ");
    w.put_int(t->ndim);
    return w.put(')');
  }
  put_ints(w, t->sizes, t->ndim);
  bool contiguous = true;
  int64_t expected = 1;
  for (int32_t k = t->ndim; k-- > 0;) {
    if (t->sizes[k] != 1 && t->strides && t->strides[k] != expected) contiguous = false;
    expected *= t->sizes[k];
  }
  if (!contiguous) {
    w.put(" strides ");
    put_ints(w, t->strides, t->ndim);
  }
  if (t->device_index < 0) w.put(" cpu");
}

void put_value(LineWriter& w, const openreg_value& v) {
  switch (v.kind) {
    case OPENREG_VALUE_NONE: return w.put("None");
    case OPENREG_VALUE_TENSOR: return put_tensor(w, v.u.tensor);
    case OPENREG_VALUE_TENSOR_LIST:
      w.put('[');
      for (int64_t i = 0; v.u.tensors.items && i < v.u.tensors.count && i < kMaxItems; ++i) {
        if (i) w.put(", ");
        put_tensor(w, v.u.tensors.items[i]);
      }
      if (v.u.tensors.count > kMaxItems) w.put(", ...");
      return w.put(']');
    case OPENREG_VALUE_INT: return w.put_int(v.u.i);
    case OPENREG_VALUE_DOUBLE: return w.put_double(v.u.d);
    case OPENREG_VALUE_BOOL: return w.put(v.u.i ? "True" : "False");
    case OPENREG_VALUE_INT_LIST: return put_ints(w, v.u.ints.items, v.u.ints.count);
    case OPENREG_VALUE_BOOL_LIST:
      w.put('[');
      for (int64_t i = 0; v.u.ints.items && i < v.u.ints.count && i < kMaxItems; ++i)
        w.put(i ? (v.u.ints.items[i] ? ", True" : ", False") : (v.u.ints.items[i] ? "True" : "False"));
      if (v.u.ints.count > kMaxItems) w.put(", ...");
      return w.put(']');
    case OPENREG_VALUE_DOUBLE_LIST:
      w.put('[');
      for (int64_t i = 0; v.u.doubles.items && i < v.u.doubles.count && i < kMaxItems; ++i) {
        if (i) w.put(", ");
        w.put_double(v.u.doubles.items[i]);
      }
      if (v.u.doubles.count > kMaxItems) w.put(", ...");
      return w.put(']');
    case OPENREG_VALUE_SCALAR:
      switch (v.u.scalar.kind) {
        case OPENREG_SCALAR_INT: return w.put_int(v.u.scalar.v.i);
        case OPENREG_SCALAR_BOOL: return w.put(v.u.scalar.v.i ? "True" : "False");
        case OPENREG_SCALAR_COMPLEX:
          w.put('(');
          w.put_double(v.u.scalar.v.d);
          w.put(v.u.scalar.imag < 0 || (v.u.scalar.imag == 0 && 1 / v.u.scalar.imag < 0) ? "" : "+");
          w.put_double(v.u.scalar.imag);
          return w.put("j)");
        default: return w.put_double(v.u.scalar.v.d);
      }
    case OPENREG_VALUE_STRING:
      w.put('\'');
      for (int64_t i = 0; v.u.str.data && i < v.u.str.length && i < 32; ++i) {
        const char c = v.u.str.data[i];
        w.put(c >= 32 && c < 127 ? c : '?');
      }
      if (v.u.str.length > 32) w.put("...");
      return w.put('\'');
    case OPENREG_VALUE_DTYPE: return put_dtype(w, v.u.dtype);
    case OPENREG_VALUE_GENERATOR: return w.put("generator");
    case OPENREG_VALUE_LAYOUT: w.put("layout "); return w.put_int(v.u.i);
    case OPENREG_VALUE_MEMORY_FORMAT: w.put("memory_format "); return w.put_int(v.u.i);
    case OPENREG_VALUE_DEVICE: w.put("device "); return w.put_int(v.u.i);
    default: w.put("(kind "); w.put_int(v.kind); return w.put(')');
  }
}

}  // namespace

const char* signal_name(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    default: return nullptr;
  }
}

size_t format_crash_line(char* buf, size_t cap, const CrashContext& where, const EngineCallMark& mark) {
  if (cap < 8) return 0;
  LineWriter w(buf, cap);
  w.put("openreg: fatal signal ");
  if (const char* name = signal_name(where.signal)) {
    w.put(name);
  } else {
    w.put_int(where.signal);
  }
  const bool same_thread = where.crash_tid == where.call_tid;
  if (same_thread) {
    w.put(" in engine '");
  } else {
    w.put(" on thread ");
    w.put_int(where.crash_tid);
    w.put(" (outside any engine call) while engine '");
  }
  w.put(mark.engine->name.c_str());
  w.put("' (");
  w.put(mark.engine->path.c_str());
  w.put(same_thread ? ") " : ") was ");
  switch (mark.kind) {
    case EngineCallMark::kInit: w.put("initialising"); break;
    case EngineCallMark::kSupports: w.put("deciding supports() for "); break;
    case EngineCallMark::kRun: w.put("running "); break;
  }
  if (const openreg_call* call = mark.call) {
    w.put(call->op_name ? call->op_name : "(unnamed op)");
    w.put(" (");
    for (int32_t i = 0; call->args && i < call->num_args && i < 32; ++i) {
      if (i) w.put(", ");
      put_value(w, call->args[i]);
    }
    if (call->num_args > 32) w.put(", ...");
    w.put(')');
  }
  if (!same_thread) {
    w.put(" on thread ");
    w.put_int(where.call_tid);
  }
  if (where.has_fault_address) {
    w.put("; fault address ");
    w.put_hex(where.fault_address);
  }
  return w.finish();
}

}  // namespace openreg
