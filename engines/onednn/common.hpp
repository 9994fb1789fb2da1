// Shared pieces of the oneDNN engine: the dnnl engine, per-thread streams, memory
// descriptors built from openreg tensors (their real strides), the primitive
// cache, execution with a user-managed scratchpad taken from the host, and
// strided-loop helpers for the ops oneDNN has no primitive for.
#pragma once

#include <openreg/sdk.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onednn_engine {

namespace sdk = openreg::sdk;
using dnnl::memory;
using dt = dnnl::memory::data_type;

// "onednn engine: primitive cache N entries, H hits, M misses".
std::string cache_summary();

// Set once by init(); used by every kernel.
dnnl::engine& cpu();
const sdk::Host& host();

// Elementwise ops below this many elements run in a plain loop on the calling
// thread (no thread start-up, no primitive); ATen uses the same grain.
constexpr int64_t kSmall = 32768;

// ---------------------------------------------------------------- dtypes

inline bool is_f32(openreg_dtype d) { return sdk::same_dtype(d, sdk::dtypes::float32); }
inline bool is_bf16(openreg_dtype d) { return sdk::same_dtype(d, sdk::dtypes::bfloat16); }
inline bool is_f16(openreg_dtype d) { return sdk::same_dtype(d, sdk::dtypes::float16); }
// float32 / bfloat16 map to oneDNN types; anything else is declined.
dt dnnl_dt(openreg_dtype d, const char* what);

// ------------------------------------------------------ memory descriptors

memory::dims dims_of(const sdk::Tensor& t);     // 0-dim -> {1}
memory::dims strides_of(const sdk::Tensor& t);  // 0-dim -> {1}
bool has_zero_stride(const sdk::Tensor& t);     // an expanded (broadcast) view
// A descriptor with the tensor's own sizes and strides (no copy ever needed).
memory::desc md_of(const sdk::Tensor& t);
memory::desc md_of(const sdk::Tensor& t, const memory::dims& dims, const memory::dims& strides);
inline memory make_mem(const memory::desc& md, void* p) { return memory(md, cpu(), p); }
inline memory make_mem(const sdk::Tensor& t, const memory::desc& md) { return memory(md, cpu(), t.bytes()); }
// True if the tensor's elements are one dense block in some order of its dims.
bool is_dense(const sdk::Tensor& t);

// ------------------------------------------------------------ cache key

// The fields of a primitive's cache key as raw bytes (no number formatting; no
// heap allocation below kInline bytes): built on every call, so kept cheap.
class Key {
 public:
  explicit Key(const char* op) : op_(op) { put(op, std::strlen(op) + 1); }
  Key& add(int64_t v) { return put(&v, sizeof v); }
  Key& add(double v) { return put(&v, sizeof v); }
  Key& add(const char* v) { return put(v, std::strlen(v) + 1); }
  Key& add(const memory::dims& d) {
    add(static_cast<int64_t>(d.size()));
    return put(d.data(), d.size() * sizeof(memory::dim));
  }
  Key& add(const sdk::Tensor& t);  // dtype, sizes, strides (or "none" when undefined)
  Key& add_raw(const void* p, size_t n) { return put(p, n); }
  std::string_view bytes() const { return heap_.empty() ? std::string_view(buf_, n_) : std::string_view(heap_); }
  const char* op() const { return op_; }

 private:
  static constexpr size_t kInline = 448;
  Key& put(const void* p, size_t n) {
    if (heap_.empty() && n_ + n <= kInline) {
      std::memcpy(buf_ + n_, p, n);
      n_ += n;
    } else {
      if (heap_.empty()) heap_.assign(buf_, n_);
      heap_.append(static_cast<const char*>(p), n);
    }
    return *this;
  }
  const char* op_;
  size_t n_ = 0;
  char buf_[kInline];
  std::string heap_;
};

// ------------------------------------------------------- primitive cache

// A mutex-protected LRU map from a key to a cached object (primitives, their
// descriptors, reorders). The object is shared: a hit hands out a shared_ptr,
// so an entry evicted while another thread runs it stays alive. A hit
// allocates nothing.
class Cache {
 public:
  static Cache& get();
  std::shared_ptr<void> find_or_make(const Key& key, const std::function<std::shared_ptr<void>()>& make);
  uint64_t hits() const;
  uint64_t misses() const;
  size_t size() const;
  void clear();
};

// The OpenMP thread count this thread's primitives are created and run with.
int current_threads();

// Primitives are keyed by the thread count too: oneDNN sizes some kernels
// (reductions over threads) when the primitive is created.
template <class T, class Make>
std::shared_ptr<T> cached(Key key, Make&& make) {
  key.add(static_cast<int64_t>(current_threads()));
  return std::static_pointer_cast<T>(
      Cache::get().find_or_make(key, [&]() -> std::shared_ptr<void> { return std::make_shared<T>(make()); }));
}

// Sets this thread's OpenMP thread count (oneDNN's runtime is OpenMP) for the
// scope of one call, and restores it: torch's own CPU ops on this thread read
// the same setting. Scopes nest (the kernel wrapper's, then matmul's or
// convolution's by FLOPs); the outermost one records the host's count, which
// the inner ones' threads_for read: the host's count is the OpenMP setting,
// which the outer scope has already lowered (a 512x128 @ 128x128 matmul ran on
// one thread at torch.set_num_threads(2), its 64K-element tensors giving the
// wrapper's scope one thread).
class Threads {
 public:
  explicit Threads(int n);
  ~Threads();
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;

 private:
  int prev_;
  int prev_budget_;
};

// Threads for a call doing `work` units, `grain` units per thread at least:
// 1 below the grain (no thread start-up on tiny inputs), else up to the host's
// count (as it was outside every Threads scope).
int threads_for(double work, double grain);
// Grains: elements for memory-bound ops (ATen's 32768), FLOPs for conv/matmul.
// For memory-bound primitives a second thread only pays off past ~64K
// elements (256 KB of float32, L2-resident): measured on the training step,
// where 64K-element batch norm/pool/relu calls ran 4-8x faster on one thread
// when the two cores were shared with another process.
// A conv/matmul thread gets at least 8 MFLOP (~80 us on one AVX-512 core), so a
// second thread comes from 16 MFLOP: after a parallel region, libgomp's idle team thread spins for
// milliseconds, taking the core the Python thread enqueues from. One 9.4 MFLOP
// convolution on two threads made the digits CNN's whole training step 1.6x
// slower at torch.set_num_threads(2) (grain 4e6 vs 8e6, rounds alternating in
// one process: 0.55-0.62x of the time with 8e6; other models 0.97-1.05x). A
// matmul grain of 2e6 instead was neutral on the transformer models and LSTM at
// 2 threads (0.97-1.02x of the step time, in one process).
constexpr double kFlopGrain = 8e6;
constexpr double kMemGrain = 65536;

// Primitive attributes with a user-managed scratchpad (taken from the host's
// scratch per call, so concurrent runs of one cached primitive never share it).
dnnl::primitive_attr base_attr();

// The arguments of one primitive execution: a short array, not a hash map.
class Args {
 public:
  Args(std::initializer_list<std::pair<int, memory>> args) {
    for (const auto& a : args) emplace(a.first, a.second);
  }
  void emplace(int id, memory m) {
    if (n_ == kMax) sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: too many primitive arguments");
    ids_[n_] = id;
    mems_[n_++] = std::move(m);
  }
  int size() const { return n_; }
  int id(int i) const { return ids_[i]; }
  dnnl_memory_t mem(int i) const { return mems_[i].get(); }

 private:
  static constexpr int kMax = 16;
  int n_ = 0;
  std::array<int, kMax> ids_{};
  std::array<memory, kMax> mems_;
};

// Runs `p` on this thread's stream (with the thread count of the enclosing
// Threads scope), adding a scratchpad of `pd`'s size from the host.
void execute(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, Args args);


// Scratch buffers that live for one call, taken from a per-thread arena of
// 64-byte aligned blocks that stay allocated between calls: a fresh 25 MB
// buffer per call costs page faults (a reorder of 32x64x56x56 took 7.8 ms into
// fresh memory, 1.8 ms into reused memory). Scopes nest (LIFO): each Buffers
// hands its blocks back when it goes out of scope.
class Buffers {
 public:
  Buffers();
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  void* alloc(size_t bytes);
  float* floats(int64_t n) { return static_cast<float*>(alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4)); }

 private:
  size_t mark_;
};

// `p` (laid out as `user`) as a memory of layout `want`, reordered into a
// scratch buffer of `b` if the layouts differ.
memory stage_in(Buffers& b, const memory::desc& user, void* p, const memory::desc& want);

// A tensor as oneDNN sees it: its own memory and strides, or, for expanded
// views (stride 0, e.g. the gradient of x.sum()), which oneDNN descriptors
// cannot express, a dense row-major copy in b's scratch.
struct View {
  void* p;
  memory::desc md;
};
View view_of(Buffers& b, const sdk::Tensor& t);

// Row-major dense descriptor.
memory::desc plain_md(const memory::dims& dims, dt type);

// A reorder between two descriptors, cached.
void reorder(const memory::desc& from, void* src, const memory::desc& to, void* dst);

// ------------------------------------------------------------ loops

// Reads tensor element i (flat index in its shape) etc. are too slow; the strided
// helpers of the SDK (for_each_row) are used instead. These wrap the common
// dtype dispatch for float32/bfloat16 kernels that compute in float.
template <class F>
void dispatch_float(openreg_dtype d, const char* what, F&& f) {
  sdk::dispatch<float, sdk::bfloat16>(d, what, std::forward<F>(f));
}

// Elementwise loops (map1, map2): loops.hpp.
bool same_dense(const sdk::Tensor& out, const sdk::Tensor& a);

// Copies a small per-channel vector (any float dtype, any stride) into float.
void to_float_vec(const sdk::Tensor& t, float* out);
// Writes a float vector into a 1-d (or flat-contiguous) tensor of any float dtype.
void from_float_vec(const float* in, const sdk::Tensor& t);

// Requires that all listed tensors have `d` as dtype (declines otherwise).
void require_dtype(const sdk::Call& call, openreg_dtype d, std::initializer_list<sdk::Tensor> ts);

}  // namespace onednn_engine
