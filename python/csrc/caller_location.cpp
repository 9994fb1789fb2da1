// The Python line that enqueued an op, for the asynchronous error it may raise later.
//
// Called for every enqueued op, usually with the GIL released (torch's bindings drop it
// around the dispatch), so it may neither take the GIL nor allocate Python objects. On
// CPython 3.11 it reads the calling thread's own frame chain, which cannot change while
// that thread is inside this call; on other versions it answers only when the thread
// holds the GIL (then through the public API). Frames of torch's own Python files are
// skipped: the user's line is the one worth naming.
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define OPENREG_FRAME_WALK 1
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "caller_location.h"

namespace openreg_python {

namespace {

constexpr int kMaxDepth = 32;

// File names, interned for the life of the process (errors point at them).
const std::string* intern(std::string_view name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_map<std::string_view, const std::string*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names->find(name);
  if (it != names->end()) return it->second;
  const auto* stored = new std::string(name);
  names->emplace(std::string_view(*stored), stored);
  return stored;
}

// The file name's characters, if readable without allocating (ASCII names).
bool ascii_name(PyObject* filename, std::string_view* out) {
  if (!filename || !PyUnicode_Check(filename) || !PyUnicode_IS_COMPACT_ASCII(filename)) return false;
  *out = std::string_view(static_cast<const char*>(PyUnicode_DATA(filename)),
                          static_cast<size_t>(PyUnicode_GET_LENGTH(filename)));
  return true;
}

bool is_torch_internal(std::string_view file) {
  return file.find("/torch/") != std::string_view::npos || file.find("/openreg/") != std::string_view::npos ||
         file.rfind("<frozen", 0) == 0;
}

#ifdef OPENREG_FRAME_WALK
// What one frame position resolves to, cached per thread: every op pays for this, and
// both the file test and the line-table walk cost more than the rest of the lookup.
// An entry is trusted only for the same code object, file object, first line and size
// (a freed code object's address may be reused).
struct Resolved {
  const PyCodeObject* code = nullptr;
  const PyObject* filename = nullptr;
  int first_line = 0;
  Py_ssize_t size = 0;
  int lasti = -1;
  const std::string* file = nullptr;  // null: a torch or openreg file, skipped
  int line = 0;
};
constexpr size_t kCacheSlots = 512;
thread_local Resolved t_cache[kCacheSlots];

const Resolved& resolve(PyCodeObject* code, int lasti) {
  const size_t slot = ((reinterpret_cast<uintptr_t>(code) >> 4) ^ static_cast<uintptr_t>(lasti) * 2654435761u) %
                      kCacheSlots;
  Resolved& r = t_cache[slot];
  if (r.code == code && r.lasti == lasti && r.filename == code->co_filename &&
      r.first_line == code->co_firstlineno && r.size == Py_SIZE(code)) {
    return r;
  }
  r = Resolved{code, code->co_filename, code->co_firstlineno, Py_SIZE(code), lasti, nullptr, 0};
  std::string_view name;
  if (ascii_name(code->co_filename, &name) && !is_torch_internal(name)) {
    r.file = intern(name);
    r.line = PyCode_Addr2Line(code, lasti * static_cast<int>(sizeof(_Py_CODEUNIT)));
  }
  return r;
}

bool frame_walk(const std::string** file, int* line) {
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (!ts || !ts->cframe) return false;
  int depth = 0;
  for (_PyInterpreterFrame* f = ts->cframe->current_frame; f && depth < kMaxDepth; f = f->previous, ++depth) {
    PyCodeObject* code = f->f_code;
    if (!code || _PyFrame_IsIncomplete(f)) continue;
    const Resolved& r = resolve(code, _PyInterpreterFrame_LASTI(f));
    if (!r.file) continue;
    *file = r.file;
    *line = r.line;
    return true;
  }
  return false;
}
#endif

bool public_walk(const std::string** file, int* line) {
  if (!PyGILState_Check()) return false;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  for (int depth = 0; frame && depth < kMaxDepth; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    std::string_view name;
    const bool found = ascii_name(code->co_filename, &name) && !is_torch_internal(name);
    if (found) {
      *file = intern(name);
      *line = PyFrame_GetLineNumber(frame);
    }
    Py_DECREF(code);
    PyFrameObject* back = found ? nullptr : PyFrame_GetBack(frame);
    Py_DECREF(frame);
    if (found) return true;
    frame = back;
  }
  Py_XDECREF(frame);
  return false;
}

}  // namespace

void caller_location(const std::string** file, int* line) {
  if (!Py_IsInitialized()) return;
#ifdef OPENREG_FRAME_WALK
  if (frame_walk(file, line)) return;
#endif
  public_walk(file, line);
}

}  // namespace openreg_python
