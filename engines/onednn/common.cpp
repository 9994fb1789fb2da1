// Implementation of common.hpp: descriptors, the LRU primitive cache, execution.
#include "common.hpp"

#include "data_placement.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <numeric>

namespace onednn_engine {

dt dnnl_dt(openreg_dtype d, const char* what) {
  if (is_f32(d)) return dt::f32;
  if (is_bf16(d)) return dt::bf16;
  sdk::unsupported(sdk::str(what, ": dtype ", sdk::dtype_name(d), " is not served by the oneDNN engine"));
}

memory::dims dims_of(const sdk::Tensor& t) {
  if (t.dim() == 0) return {1};
  return memory::dims(t.sizes().begin(), t.sizes().end());
}

memory::dims strides_of(const sdk::Tensor& t) {
  if (t.dim() == 0) return {1};
  return memory::dims(t.strides().begin(), t.strides().end());
}

bool has_zero_stride(const sdk::Tensor& t) {
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.stride(i) == 0 && t.size(i) > 1) return true;
  return false;
}

memory::desc md_of(const sdk::Tensor& t, const memory::dims& dims, const memory::dims& strides) {
  // Size-1 dims may carry any stride in ATen (even 0); oneDNN wants a sane one.
  memory::dims st = strides;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] == 1 && st[i] == 0) st[i] = 1;
  return memory::desc(dims, dnnl_dt(t.dtype(), "tensor"), st);
}

memory::desc md_of(const sdk::Tensor& t) { return md_of(t, dims_of(t), strides_of(t)); }

memory::desc plain_md(const memory::dims& dims, dt type) {
  memory::dims st(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) st[i - 1] = st[i] * std::max<memory::dim>(dims[i], 1);
  return memory::desc(dims, type, st);
}

bool is_dense(const sdk::Tensor& t) {
  const int64_t n = t.dim();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) < t.stride(b); });
  int64_t expected = 1;
  for (int64_t i : order) {
    if (t.size(i) == 1) continue;
    if (t.stride(i) != expected) return false;
    expected *= t.size(i);
  }
  return true;
}

Key& Key::add(const sdk::Tensor& t) {
  if (!t.defined()) return add(static_cast<int64_t>(-1));
  const openreg_dtype d = t.dtype();
  const int64_t head = (static_cast<int64_t>(d.code) << 40) | (static_cast<int64_t>(d.bits) << 24) |
                       (static_cast<int64_t>(d.lanes) << 8) | t.dim();
  add(head);
  put(t.sizes().begin(), static_cast<size_t>(t.dim()) * sizeof(int64_t));
  return put(t.strides().begin(), static_cast<size_t>(t.dim()) * sizeof(int64_t));
}

// ------------------------------------------------------------- cache

namespace {
struct CacheImpl {
  using Entry = std::pair<std::string, std::shared_ptr<void>>;
  mutable std::mutex mutex;
  std::list<Entry> lru;  // front: most recent
  // Keys view the strings of the list's entries (list nodes never move).
  std::unordered_map<std::string_view, std::list<Entry>::iterator> map;
  size_t capacity = 2048;
  std::atomic<uint64_t> hits{0}, misses{0};
};
CacheImpl& impl() {
  static CacheImpl* c = new CacheImpl();  // never destroyed: may be used at exit
  return *c;
}
}  // namespace

Cache& Cache::get() {
  static Cache c;
  return c;
}

std::shared_ptr<void> Cache::find_or_make(const Key& k, const std::function<std::shared_ptr<void>()>& make) {
  CacheImpl& c = impl();
  const std::string_view key = k.bytes();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      c.lru.splice(c.lru.begin(), c.lru, it->second);
      ++c.hits;
      return it->second->second;
    }
  }
  // Create outside the lock (primitive creation takes ~0.1-1 ms); a racing
  // thread may create the same entry, the first one inserted wins.
  std::shared_ptr<void> made = make();
  std::lock_guard<std::mutex> lock(c.mutex);
  ++c.misses;
  auto it = c.map.find(key);
  if (it != c.map.end()) return it->second->second;
  host().log(OPENREG_LOG_DEBUG, "onednn: primitive cache miss #" + std::to_string(c.misses.load()) + ": " + k.op());
  c.lru.emplace_front(std::string(key), made);
  c.map[std::string_view(c.lru.front().first)] = c.lru.begin();
  while (c.lru.size() > c.capacity) {
    c.map.erase(std::string_view(c.lru.back().first));
    c.lru.pop_back();
  }
  return made;
}

uint64_t Cache::hits() const { return impl().hits; }
uint64_t Cache::misses() const { return impl().misses; }
size_t Cache::size() const {
  std::lock_guard<std::mutex> lock(impl().mutex);
  return impl().lru.size();
}
void Cache::clear() {
  std::lock_guard<std::mutex> lock(impl().mutex);
  impl().map.clear();
  impl().lru.clear();
}

// ------------------------------------------------------------- arena

namespace {
struct Block {
  void* p = nullptr;
  size_t size = 0;
};
struct Arena {
  std::vector<Block> blocks;
  size_t top = 0;
  ~Arena() {
    for (auto& b : blocks) std::free(b.p);
  }
};
Arena& arena() {
  thread_local Arena a;
  return a;
}
// Blocks above this size are given back when their scope ends.
constexpr size_t kKeepBytes = size_t(512) << 20;
}  // namespace

Buffers::Buffers() : mark_(arena().top) {}

Buffers::~Buffers() {
  Arena& a = arena();
  for (size_t i = mark_; i < a.top; ++i) {
    if (a.blocks[i].size > kKeepBytes) {
      std::free(a.blocks[i].p);
      a.blocks[i] = Block{};
    }
  }
  a.top = mark_;
}

void* Buffers::alloc(size_t bytes) {
  Arena& a = arena();
  if (a.top == a.blocks.size()) a.blocks.emplace_back();
  Block& b = a.blocks[a.top];
  if (b.size < bytes) {
    std::free(b.p);
    b = Block{};
    const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, rounded);
    if (!b.p) sdk::fail(OPENREG_STATUS_OUT_OF_MEMORY, sdk::str("onednn: scratch allocation of ", bytes, " bytes failed"));
    b.size = rounded;
  }
  ++a.top;
  return b.p;
}

// ----------------------------------------------------------- execution

dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

int current_threads() { return omp_get_max_threads(); }

namespace {
// The host's thread count when this thread's outermost Threads scope opened; 0 outside.
thread_local int t_budget = 0;
int host_threads() { return t_budget > 0 ? t_budget : host().num_threads(); }
}  // namespace

Threads::Threads(int n) : prev_(omp_get_max_threads()), prev_budget_(t_budget) {
  if (t_budget == 0) t_budget = std::max(1, host().num_threads());
  note_scope_threads(n > 0 ? n : prev_);
  if (n > 0 && n != prev_) omp_set_num_threads(n);
}
Threads::~Threads() {
  if (omp_get_max_threads() != prev_) omp_set_num_threads(prev_);
  t_budget = prev_budget_;
}

int threads_for(double work, double grain) {
  const int n = std::max(1, host_threads());
  if (work < grain) return 1;
  return std::max(1, std::min(n, static_cast<int>(work / grain)));
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu());
  return s;
}

void execute(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, Args args) {
  const memory::desc spd = pd.scratchpad_desc();
  const size_t bytes = spd.get_size();
  Buffers scratch;
  if (bytes) args.emplace(DNNL_ARG_SCRATCHPAD, memory(spd, cpu(), scratch.alloc(bytes)));
  // The C call: the C++ one converts an unordered_map into this array per call.
  std::array<dnnl_exec_arg_t, 17> raw;
  for (int i = 0; i < args.size(); ++i) raw[static_cast<size_t>(i)] = dnnl_exec_arg_t{args.id(i), args.mem(i)};
  dnnl::stream& s = thread_stream();
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), s.get(), args.size(), raw.data()),
                          "could not execute a primitive");
  s.wait();
}

namespace {
struct ReorderEntry {
  dnnl::reorder::primitive_desc pd;
  dnnl::reorder prim;
};
}  // namespace

void reorder(const memory::desc& from, void* src, const memory::desc& to, void* dst) {
  Key k("reorder");
  k.add(from.dims()).add(static_cast<int64_t>(from.data_type()));
  // The full descriptor (blocking included) identifies the layout.
  k.add_raw(&from.data, sizeof(from.data));
  k.add_raw(&to.data, sizeof(to.data));
  auto e = cached<ReorderEntry>(k, [&] {
    dnnl::primitive_attr a = base_attr();
    dnnl::reorder::primitive_desc pd(cpu(), from, cpu(), to, a);
    return ReorderEntry{pd, dnnl::reorder(pd)};
  });
  execute(e->prim, e->pd, {{DNNL_ARG_FROM, memory(from, cpu(), src)}, {DNNL_ARG_TO, memory(to, cpu(), dst)}});
}

memory stage_in(Buffers& b, const memory::desc& user, void* p, const memory::desc& want) {
  if (user == want) return memory(want, cpu(), p);
  void* q = b.alloc(want.get_size());
  reorder(user, p, want, q);
  return memory(want, cpu(), q);
}

View view_of(Buffers& b, const sdk::Tensor& t) {
  if (!has_zero_stride(t)) return View{t.bytes(), md_of(t)};
  const memory::desc md = plain_md(dims_of(t), dnnl_dt(t.dtype(), "tensor"));
  void* q = b.alloc(md.get_size());
  sdk::Shape shape = sdk::shape_of(t);
  sdk::Operand dst;
  dst.base = static_cast<char*>(q);
  dst.byte_strides.assign(shape.size(), 0);
  int64_t st = t.element_size();
  for (size_t i = shape.size(); i-- > 0;) {
    dst.byte_strides[i] = st;
    st *= shape[i];
  }
  const int64_t es = t.element_size();
  sdk::for_each_row(host(), shape, std::array<sdk::Operand, 2>{dst, sdk::operand(t, shape)},
                    [es](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], static_cast<size_t>(es));
                    });
  return View{q, md};
}

// ------------------------------------------------------------ loops

bool same_dense(const sdk::Tensor& out, const sdk::Tensor& a) {
  if (out.dim() != a.dim() || !out.is_contiguous() || !a.is_contiguous()) return false;
  for (int64_t i = 0; i < out.dim(); ++i)
    if (out.size(i) != a.size(i)) return false;
  return true;
}

void to_float_vec(const sdk::Tensor& t, float* out) {
  const int64_t n = t.numel();
  const int64_t st = t.dim() == 1 ? t.stride(0) : 1;
  OPENREG_SDK_REQUIRE(t.dim() <= 1 || t.is_contiguous(), "a non-contiguous multi-dim parameter tensor");
  sdk::dispatch<float, double, sdk::bfloat16, sdk::float16>(t.dtype(), "per-channel vector", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = reinterpret_cast<const T*>(t.bytes());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i * st]);
  });
}

void from_float_vec(const float* in, const sdk::Tensor& t) {
  const int64_t n = t.numel();
  // Statistics tensors are either 1-d or keep-dim shapes with one non-1 size
  // pattern; they are contiguous as the host allocates them, but honour the
  // innermost stride of a 1-d view.
  const int64_t st = t.dim() == 1 ? t.stride(0) : 1;
  OPENREG_SDK_REQUIRE(t.dim() <= 1 || t.is_contiguous(), "a non-contiguous multi-dim statistics output");
  sdk::dispatch<float, double, sdk::bfloat16, sdk::float16>(t.dtype(), "per-channel vector", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = reinterpret_cast<T*>(t.bytes());
    for (int64_t i = 0; i < n; ++i) p[i * st] = static_cast<T>(in[i]);
  });
}

void require_dtype(const sdk::Call& call, openreg_dtype d, std::initializer_list<sdk::Tensor> ts) {
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    OPENREG_SDK_REQUIRE(sdk::same_dtype(t.dtype(), d), call.op_name(), ": mixed dtypes (", sdk::dtype_name(t.dtype()),
                        " with ", sdk::dtype_name(d), ")");
  }
}

}  // namespace onednn_engine
