// Materialising cases into memory, running them through the ABI, and checking.
#include "harness.h"

#include <openreg/sdk/dtype.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace conformance {

namespace sdk = openreg::sdk;

constexpr uint8_t kGuardByte = 0xA5;   // gaps and guard zones of outputs
constexpr uint8_t kUnwritten = 0xFF;   // output elements before the call (NaN for floats)
constexpr size_t kGuard = 64;          // guard zone on each side of every buffer

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Gapped: return "strided+offset";
    case Layout::Expanded: return "expanded";
  }
  return "?";
}

std::string shape_str(const Shape& s) {
  if (s.empty()) return "0-dim";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

Tolerance default_tolerance(openreg_dtype d) {
  if (d.code == OPENREG_DTYPE_CODE_BFLOAT) return {1.6e-2, 1e-2};
  if (d.code == OPENREG_DTYPE_CODE_FLOAT && d.bits == 16) return {1e-3, 1e-3};
  if (d.code == OPENREG_DTYPE_CODE_FLOAT && d.bits == 32) return {1.3e-6, 1e-5};
  if (d.code == OPENREG_DTYPE_CODE_FLOAT && d.bits == 64) return {1e-7, 1e-7};
  return {0, 0};  // integers and bool: exact
}

Tolerance Harness::tolerance(const std::string& op, openreg_dtype dtype, const Case& c) const {
  auto it = tolerance_overrides.find(op + ":" + sdk::dtype_name(dtype));
  if (it == tolerance_overrides.end()) it = tolerance_overrides.find(op);
  if (it != tolerance_overrides.end()) return it->second;
  Tolerance t = default_tolerance(dtype);
  t.rtol *= c.tol_scale;
  t.atol *= c.tol_scale;
  return t;
}

// ------------------------------------------------------------- element I/O

static bool is_floating(openreg_dtype d) {
  return d.code == OPENREG_DTYPE_CODE_FLOAT || d.code == OPENREG_DTYPE_CODE_BFLOAT;
}

static double load(openreg_dtype d, const uint8_t* p) {
  return sdk::dispatch_all(d, "load", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, p, sizeof v);
    return sdk::to_double(v);
  });
}

static void store(openreg_dtype d, uint8_t* p, double x) {
  sdk::dispatch_all(d, "store", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    if constexpr (std::is_same_v<T, sdk::bfloat16> || std::is_same_v<T, sdk::float16>) {
      v = T(static_cast<float>(x));
    } else if constexpr (std::is_same_v<T, bool>) {
      v = x != 0;
    } else {
      v = static_cast<T>(x);
    }
    std::memcpy(p, &v, sizeof v);
  });
}

// ----------------------------------------------------------------- buffers

// One tensor's memory: [guard][storage][guard], data 64-byte aligned.
struct Buffer {
  openreg_dtype dtype{};
  Shape sizes, strides;
  int64_t offset = 0;            // in elements, from data to element 0
  int64_t storage_elems = 0;
  uint8_t* alloc = nullptr;
  size_t alloc_bytes = 0;
  openreg_tensor desc{};
  uint8_t gap_byte = kGuardByte;  // what the storage bytes between elements hold

  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(alloc); }

  int64_t esize() const { return dtype.bits / 8; }
  uint8_t* data() const { return alloc + kGuard; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  // Byte offsets (from data) of every element, in logical row-major order; made
  // once by finish() (the shape and strides are fixed from then on): the harness
  // walks a buffer's elements several times a case (fill, guards, compare).
  const std::vector<int64_t>& element_bytes() const { return elem_bytes_; }
  void finish(int32_t device_index) {
    int64_t max_index = offset;
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 0) empty = true;
      max_index += (sizes[d] - 1) * std::max<int64_t>(strides[d], 0);
    }
    storage_elems = empty ? offset : max_index + 1;
    size_t payload = static_cast<size_t>(storage_elems * esize());
    alloc_bytes = (kGuard + payload + kGuard + 63) / 64 * 64;
    alloc = static_cast<uint8_t*>(std::aligned_alloc(64, alloc_bytes));
    if (!alloc) throw std::bad_alloc();
    std::memset(alloc, kGuardByte, alloc_bytes);
    desc.struct_size = sizeof(openreg_tensor);
    desc.ndim = static_cast<int32_t>(sizes.size());
    desc.data = data();
    desc.byte_offset = static_cast<uint64_t>(offset * esize());
    desc.sizes = sizes.empty() ? nullptr : sizes.data();
    desc.strides = strides.empty() ? nullptr : strides.data();
    desc.dtype = dtype;
    desc.device_index = device_index;
    list_element_bytes();
  }

 private:
  std::vector<int64_t> elem_bytes_;

  // An odometer over the logical index that carries the byte offset along.
  void list_element_bytes() {
    const int64_t n = numel();
    elem_bytes_.clear();
    elem_bytes_.reserve(static_cast<size_t>(n));
    const size_t nd = sizes.size();
    Shape idx(nd, 0);
    int64_t off = offset * esize();
    for (int64_t k = 0; k < n; ++k) {
      elem_bytes_.push_back(off);
      for (size_t d = nd; d-- > 0;) {
        if (++idx[d] < sizes[d]) {
          off += strides[d] * esize();
          break;
        }
        off -= (sizes[d] - 1) * strides[d] * esize();
        idx[d] = 0;
      }
    }
  }
};

static void layout_strides(Layout layout, const Shape& s, Shape* strides, int64_t* offset) {
  const size_t n = s.size();
  strides->assign(n, 0);
  *offset = 0;
  auto row_major = [&](const std::vector<size_t>& order) {  // order: outermost first
    int64_t st = 1;
    for (size_t k = order.size(); k-- > 0;) {
      (*strides)[order[k]] = st;
      st *= std::max<int64_t>(s[order[k]], 1);
    }
  };
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  switch (layout) {
    case Layout::Contiguous: row_major(order); break;
    case Layout::Transposed:
      if (n >= 2) std::swap(order[n - 1], order[n - 2]);
      row_major(order);
      break;
    case Layout::Gapped: {
      int64_t st = 2;
      for (size_t k = n; k-- > 0;) {
        (*strides)[k] = st;
        st = st * std::max<int64_t>(s[k], 1) + 3;
      }
      *offset = 5;
      break;
    }
    case Layout::Expanded:
      row_major(order);
      if (n >= 1) (*strides)[0] = 0;
      break;
  }
}

namespace {

// The memory of one call: argument buffers (inputs and out= outputs) plus the
// outputs of a functional op.
struct CallMemory {
  std::vector<std::unique_ptr<Buffer>> tensors;   // per Case::tensors
  std::vector<std::unique_ptr<Buffer>> outputs;   // functional outputs (owned here)
  std::vector<openreg_value> values;
  std::vector<std::vector<const openreg_tensor*>> lists;
  std::vector<openreg_tensor> out_descs;
  openreg_call call{};
};

std::unique_ptr<Buffer> make_input(const TensorSpec& spec, std::mt19937_64& rng) {
  auto b = std::make_unique<Buffer>();
  b->dtype = spec.dtype;
  b->sizes = spec.shape;
  layout_strides(spec.layout, spec.shape, &b->strides, &b->offset);
  b->finish(0);
  // Gaps hold junk (NaN for floats), so a kernel reading them produces garbage.
  std::memset(b->data(), kUnwritten, static_cast<size_t>(b->storage_elems * b->esize()));
  b->gap_byte = kUnwritten;
  std::uniform_real_distribution<double> any(-2, 2), pos(0.25, 3), unit(0.02, 0.98);
  std::uniform_int_distribution<int64_t> iany(-5, 5), ipos(1, 5), bit(0, 1);
  std::uniform_int_distribution<int64_t> index(0, std::max<int64_t>(spec.hi - 1, 0));
  const bool fl = is_floating(spec.dtype);
  const bool boolean = spec.dtype.code == OPENREG_DTYPE_CODE_BOOL;
  const bool unsig = spec.dtype.code == OPENREG_DTYPE_CODE_UINT;
  for (int64_t off : b->element_bytes()) {
    double v;
    if (boolean) v = static_cast<double>(bit(rng));
    else if (spec.domain == Domain::Index) v = static_cast<double>(index(rng));
    else if (fl) v = spec.domain == Domain::Positive ? pos(rng) : spec.domain == Domain::Unit ? unit(rng) : any(rng);
    else if (spec.domain == Domain::Positive || unsig) v = static_cast<double>(ipos(rng));
    else v = static_cast<double>(iany(rng));
    store(spec.dtype, b->data() + off, v);
  }
  return b;
}

std::unique_ptr<Buffer> make_output(openreg_dtype dtype, const Shape& shape, Layout layout) {
  auto b = std::make_unique<Buffer>();
  b->dtype = dtype;
  b->sizes = shape;
  layout_strides(layout, shape, &b->strides, &b->offset);
  b->finish(0);
  for (int64_t off : b->element_bytes()) std::memset(b->data() + off, kUnwritten, static_cast<size_t>(b->esize()));
  return b;
}

// Builds the openreg_call for `c` over `mem` (whose tensors are already made).
void build_call(const std::string& op, const Case& c, CallMemory& mem, const std::vector<int>& skip_args) {
  mem.values.clear();
  mem.lists.clear();
  mem.lists.reserve(c.args.size());
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (std::find(skip_args.begin(), skip_args.end(), static_cast<int>(i)) != skip_args.end()) continue;
    const Arg& a = c.args[i];
    openreg_value v{};
    v.kind = a.kind;
    switch (a.kind) {
      case OPENREG_VALUE_TENSOR: v.u.tensor = &mem.tensors[static_cast<size_t>(a.tensor)]->desc; break;
      case OPENREG_VALUE_TENSOR_LIST: {
        mem.lists.emplace_back();
        for (int t : a.tensors) mem.lists.back().push_back(t < 0 ? nullptr : &mem.tensors[static_cast<size_t>(t)]->desc);
        v.u.tensors.items = mem.lists.back().data();
        v.u.tensors.count = static_cast<int64_t>(mem.lists.back().size());
        break;
      }
      case OPENREG_VALUE_INT:
      case OPENREG_VALUE_BOOL:
      case OPENREG_VALUE_LAYOUT:
      case OPENREG_VALUE_MEMORY_FORMAT:
      case OPENREG_VALUE_DEVICE: v.u.i = a.i; break;
      case OPENREG_VALUE_DOUBLE: v.u.d = a.d; break;
      case OPENREG_VALUE_INT_LIST:
      case OPENREG_VALUE_BOOL_LIST:
        v.u.ints.items = a.ints.data();
        v.u.ints.count = static_cast<int64_t>(a.ints.size());
        break;
      case OPENREG_VALUE_DOUBLE_LIST:
        v.u.doubles.items = a.doubles.data();
        v.u.doubles.count = static_cast<int64_t>(a.doubles.size());
        break;
      case OPENREG_VALUE_SCALAR:
        v.u.scalar.kind = a.scalar_kind;
        if (a.scalar_kind == OPENREG_SCALAR_DOUBLE) v.u.scalar.v.d = a.d;
        else v.u.scalar.v.i = a.i;
        break;
      case OPENREG_VALUE_STRING:
        v.u.str.data = a.str.data();
        v.u.str.length = static_cast<int64_t>(a.str.size());
        break;
      case OPENREG_VALUE_DTYPE: v.u.dtype = a.dtype; break;
      default: break;
    }
    mem.values.push_back(v);
  }
  mem.call = openreg_call{};
  mem.call.struct_size = sizeof(openreg_call);
  mem.call.op_name = op.c_str();
  mem.call.op_index = -1;
  mem.call.num_args = static_cast<int32_t>(mem.values.size());
  mem.call.args = mem.values.data();
}

// DYNAMIC_OUTPUTS on the reference: it allocates every output it produces.
struct DynamicCtx {
  std::vector<std::unique_ptr<Buffer>>* outputs;
};

openreg_status alloc_dynamic(const openreg_call* call, int32_t index, int32_t ndim, const int64_t* sizes,
                             openreg_dtype dtype, openreg_tensor* out) {
  auto* ctx = static_cast<DynamicCtx*>(call->host_call_ctx);
  if (index < 0 || index >= call->num_outputs) return OPENREG_STATUS_INVALID_ARGUMENT;
  auto b = make_output(dtype, Shape(sizes, sizes + ndim), Layout::Contiguous);
  *out = b->desc;
  (*ctx->outputs)[static_cast<size_t>(index)] = std::move(b);
  return OPENREG_STATUS_OK;
}

// Runs the functional form on the reference with DYNAMIC_OUTPUTS: outputs get
// the reference's shapes and dtypes.
openreg_status run_reference_dynamic(const Harness& h, const std::string& op, const Case& c, CallMemory& mem,
                                     const std::vector<int>& skip_args, int num_outputs, std::string* why) {
  build_call(op, c, mem, skip_args);
  mem.outputs.clear();
  mem.outputs.resize(static_cast<size_t>(num_outputs));
  mem.out_descs.assign(static_cast<size_t>(num_outputs), openreg_tensor{});
  for (auto& d : mem.out_descs) {
    d.struct_size = sizeof(openreg_tensor);
    d.ndim = -1;
  }
  DynamicCtx ctx{&mem.outputs};
  mem.call.flags = OPENREG_CALL_DYNAMIC_OUTPUTS;
  mem.call.num_outputs = num_outputs;
  mem.call.outputs = mem.out_descs.data();
  mem.call.alloc_output = alloc_dynamic;
  mem.call.host_call_ctx = &ctx;
  openreg_status st = openreg::invoke_run(*h.reference, mem.call, why);
  mem.call.alloc_output = nullptr;
  mem.call.host_call_ctx = nullptr;
  mem.call.flags = 0;
  return st;
}

uint64_t mix(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Inputs for one side (engine or reference): the same seed gives the same bytes.
void make_inputs(const Case& c, uint64_t seed, CallMemory& mem) {
  mem.tensors.clear();
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    std::mt19937_64 rng(mix(seed, i));
    mem.tensors.push_back(make_input(c.tensors[i], rng));
  }
}

// The other side's inputs: the same bytes as make_inputs with the same seed gives,
// copied rather than drawn again (drawing them is most of the harness's own time).
void copy_inputs(const CallMemory& from, CallMemory& to) {
  to.tensors.clear();
  for (const auto& src : from.tensors) {
    auto b = std::make_unique<Buffer>();
    b->dtype = src->dtype;
    b->sizes = src->sizes;
    b->strides = src->strides;
    b->offset = src->offset;
    b->finish(src->desc.device_index);
    std::memcpy(b->alloc, src->alloc, src->alloc_bytes);
    b->gap_byte = src->gap_byte;
    to.tensors.push_back(std::move(b));
  }
}

struct Prepared {
  CallMemory ref, eng;
  std::vector<Buffer*> ref_out, eng_out;   // per output (nullptr: absent)
};

// Reference first: it decides output shapes and values. Returns false with *why
// (and *status) when the reference itself refuses the case: a bug in the case.
bool prepare(const Harness& h, const std::string& op, const Case& c, uint64_t seed, Prepared& p,
             std::string* why) {
  // out= ops: the functional twin sizes the out arguments first.
  Case sized = c;
  if (!c.out_args.empty()) {
    CallMemory twin;
    make_inputs(c, seed, twin);
    openreg_status st = run_reference_dynamic(h, c.twin, c, twin, c.out_args,
                                              static_cast<int>(c.out_args.size()), why);
    if (st != OPENREG_STATUS_OK) {
      *why = "the reference rejected the functional twin " + c.twin + ": " + *why;
      return false;
    }
    for (size_t k = 0; k < c.out_args.size(); ++k) {
      const Buffer* b = twin.outputs[k].get();
      TensorSpec& spec = sized.tensors[static_cast<size_t>(c.args[static_cast<size_t>(c.out_args[k])].tensor)];
      spec.shape = b ? b->sizes : Shape{0};
      if (b) spec.dtype = b->dtype;
      spec.layout = c.strided_outputs ? Layout::Gapped : Layout::Contiguous;
    }
  }
  make_inputs(sized, seed, p.ref);
  copy_inputs(p.ref, p.eng);
  auto aliased = [&](CallMemory& m, std::vector<Buffer*>& outs) {
    outs.clear();
    m.out_descs.clear();
    std::vector<int> ins = c.inplace_arg >= 0 ? std::vector<int>{c.inplace_arg} : c.out_args;
    for (int a : ins) {
      Buffer* b = m.tensors[static_cast<size_t>(c.args[static_cast<size_t>(a)].tensor)].get();
      // Output elements start "unwritten" for out= (in-place keeps its input values).
      if (c.inplace_arg < 0)
        for (int64_t off : b->element_bytes()) std::memset(b->data() + off, kUnwritten, static_cast<size_t>(b->esize()));
      outs.push_back(b);
      m.out_descs.push_back(b->desc);
    }
    build_call(op, c, m, {});
    m.call.num_outputs = static_cast<int32_t>(m.out_descs.size());
    m.call.outputs = m.out_descs.data();
  };
  if (c.inplace_arg >= 0 || !c.out_args.empty()) {
    aliased(p.ref, p.ref_out);
    aliased(p.eng, p.eng_out);
    openreg_status st = openreg::invoke_run(*h.reference, p.ref.call, why);
    if (st != OPENREG_STATUS_OK) {
      *why = "the reference rejected this case (" + std::string(openreg::status_name(st)) + "): " + *why;
      return false;
    }
    return true;
  }
  openreg_status st = run_reference_dynamic(h, op, c, p.ref, {}, c.num_outputs, why);
  if (st != OPENREG_STATUS_OK) {
    *why = "the reference rejected this case (" + std::string(openreg::status_name(st)) + "): " + *why;
    return false;
  }
  p.ref_out.clear();
  p.eng_out.clear();
  p.eng.outputs.clear();
  p.eng.out_descs.clear();
  for (auto& b : p.ref.outputs) {
    p.ref_out.push_back(b.get());
    if (b) {
      p.eng.outputs.push_back(make_output(b->dtype, b->sizes, c.strided_outputs ? Layout::Gapped : Layout::Contiguous));
      p.eng.out_descs.push_back(p.eng.outputs.back()->desc);
      p.eng_out.push_back(p.eng.outputs.back().get());
    } else {
      openreg_tensor absent{};
      absent.struct_size = sizeof(openreg_tensor);
      absent.ndim = -1;
      p.eng.out_descs.push_back(absent);
      p.eng_out.push_back(nullptr);
    }
  }
  build_call(op, c, p.eng, {});
  p.eng.call.num_outputs = static_cast<int32_t>(p.eng.out_descs.size());
  p.eng.call.outputs = p.eng.out_descs.data();
  return true;
}

// Bytes of a buffer that are not elements must still hold what they held: the
// guard pattern outside the storage, the gap pattern between elements.
std::string check_guards(const Buffer& b, const std::string& what) {
  std::vector<uint8_t> is_elem(b.alloc_bytes, 0);
  for (int64_t off : b.element_bytes())
    std::memset(is_elem.data() + kGuard + static_cast<size_t>(off), 1, static_cast<size_t>(b.esize()));
  const size_t storage_end = kGuard + static_cast<size_t>(b.storage_elems * b.esize());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < b.alloc_bytes; ++i) {
    if (is_elem[i]) continue;
    uint8_t want = (i >= kGuard && i < storage_end) ? b.gap_byte : kGuardByte;
    if (b.alloc[i] != want) {
      if (!bad) first = i;
      ++bad;
    }
  }
  if (!bad) return "";
  std::ostringstream out;
  out << "wrote " << bad << " byte(s) outside the elements of " << what << " (first at byte "
      << static_cast<long long>(first) - static_cast<long long>(kGuard) - b.offset * b.esize()
      << " relative to element 0; sizes " << shape_str(b.sizes) << ", strides " << shape_str(b.strides)
      << "): the kernel ignores the tensor's strides, offset or size";
  return out.str();
}

std::string compare(const Buffer& ref, const Buffer& eng, int index, Tolerance tol, bool* weak, std::string* weak_note) {
  std::ostringstream out;
  if (ref.sizes != eng.sizes) {
    out << "output " << index << " has shape " << shape_str(eng.sizes) << ", reference " << shape_str(ref.sizes);
    return out.str();
  }
  const auto& re = ref.element_bytes();
  const auto& ee = eng.element_bytes();
  const bool fl = is_floating(ref.dtype);
  size_t bad = 0, zeros = 0;
  double max_abs = 0;
  std::string first;
  for (size_t k = 0; k < re.size(); ++k) {
    double r = load(ref.dtype, ref.data() + re[k]);
    double e = load(eng.dtype, eng.data() + ee[k]);
    if (r == 0) ++zeros;
    bool ok;
    if (fl && (std::isnan(r) || std::isnan(e))) ok = std::isnan(r) && std::isnan(e);
    else if (fl && (std::isinf(r) || std::isinf(e))) ok = r == e;
    else ok = std::fabs(e - r) <= tol.atol + tol.rtol * std::fabs(r);
    if (!ok) {
      if (!bad) {
        std::ostringstream f;
        f << "element " << k << ": engine " << e << ", reference " << r;
        first = f.str();
      }
      ++bad;
      if (!std::isnan(e - r)) max_abs = std::max(max_abs, std::fabs(e - r));
    }
  }
  if (re.size() >= 16 && zeros * 10 >= re.size() * 9) {
    *weak = true;
    *weak_note = "reference output " + std::to_string(index) + " is " +
                 std::to_string(100 * zeros / re.size()) + "% zeros: this case checks little";
  }
  if (!bad) return "";
  out << bad << " of " << re.size() << " elements of output " << index << " differ from the reference (rtol "
      << tol.rtol << ", atol " << tol.atol << "; max abs diff " << max_abs << "; first: " << first << ")";
  return out.str();
}

}  // namespace

RunResult Harness::run(const std::string& op, openreg_dtype dtype, const Case& c, uint64_t seed) {
  RunResult result;
  Prepared p;
  std::string why;
  if (!prepare(*this, op, c, seed, p, &why)) {
    result.status = RunResult::Error;
    result.message = why;
    return result;
  }
  const int32_t index = engine->find(op, dtype, true);
  p.eng.call.op_index = index < 0 ? -1 : index;

  // Snapshot the inputs the engine must not touch.
  std::vector<std::vector<uint8_t>> before;
  std::vector<int> watched;
  for (size_t i = 0; i < p.eng.tensors.size(); ++i) {
    bool is_output = std::find(c.mutated.begin(), c.mutated.end(), static_cast<int>(i)) != c.mutated.end();
    for (Buffer* o : p.eng_out) is_output |= o == p.eng.tensors[i].get();
    if (is_output) continue;
    watched.push_back(static_cast<int>(i));
    const Buffer& b = *p.eng.tensors[i];
    before.emplace_back(b.alloc, b.alloc + b.alloc_bytes);
  }
  std::vector<std::vector<uint8_t>> outputs_before;
  for (Buffer* o : p.eng_out) outputs_before.emplace_back(o ? std::vector<uint8_t>(o->alloc, o->alloc + o->alloc_bytes) : std::vector<uint8_t>());

  if (engine->supports_fn()) {
    openreg_status st = openreg::invoke_supports(*engine, p.eng.call, &why);
    if (st == OPENREG_STATUS_UNSUPPORTED) {
      result.status = RunResult::Unsupported;
      result.message = "supports(): " + why;
      return result;
    }
    if (st != OPENREG_STATUS_OK) {
      result.status = RunResult::Fail;
      result.message = std::string("supports() returned ") + openreg::status_name(st) + ": " + why;
      return result;
    }
  }
  openreg_status st = openreg::invoke_run(*engine, p.eng.call, &why);
  if (st == OPENREG_STATUS_UNSUPPORTED) {
    result.status = RunResult::Unsupported;
    result.message = "run(): " + why;
    for (size_t k = 0; k < p.eng_out.size(); ++k) {
      if (p.eng_out[k] && std::memcmp(p.eng_out[k]->alloc, outputs_before[k].data(), outputs_before[k].size()) != 0) {
        result.status = RunResult::Fail;
        result.message = "run() returned UNSUPPORTED after writing output " + std::to_string(k) +
                         " (the next engine would start from corrupted memory)";
      }
    }
    return result;
  }
  if (st != OPENREG_STATUS_OK) {
    result.status = RunResult::Fail;
    result.message = std::string("run() returned ") + openreg::status_name(st) + ": " + why;
    return result;
  }
  std::vector<std::string> problems;
  for (size_t w = 0; w < watched.size(); ++w) {
    const Buffer& b = *p.eng.tensors[static_cast<size_t>(watched[w])];
    if (std::memcmp(b.alloc, before[w].data(), before[w].size()) != 0)
      problems.push_back("modified input tensor " + std::to_string(watched[w]) + " (" + shape_str(b.sizes) +
                         "), which is not an output of this op");
  }
  const Tolerance tol = tolerance(op, dtype, c);
  for (size_t k = 0; k < p.eng_out.size(); ++k) {
    if (!p.eng_out[k] || !p.ref_out[k]) {
      if (!p.ref_out[k] != !p.eng_out[k]) problems.push_back("output " + std::to_string(k) + " presence differs");
      continue;
    }
    std::string g = check_guards(*p.eng_out[k], "output " + std::to_string(k));
    if (!g.empty()) problems.push_back(g);
    if (std::find(c.skip_outputs.begin(), c.skip_outputs.end(), static_cast<int>(k)) != c.skip_outputs.end()) continue;
    std::string d = compare(*p.ref_out[k], *p.eng_out[k], static_cast<int>(k), tol, &result.weak, &result.weak_note);
    if (!d.empty()) problems.push_back(d);
  }
  for (int t : c.mutated) {
    const Buffer& e = *p.eng.tensors[static_cast<size_t>(t)];
    const Buffer& r = *p.ref.tensors[static_cast<size_t>(t)];
    std::string g = check_guards(e, "in-place argument tensor " + std::to_string(t));
    if (!g.empty()) problems.push_back(g);
    std::string d = compare(r, e, 100 + t, tol, &result.weak, &result.weak_note);
    if (!d.empty()) problems.push_back("(in-place argument, tensor " + std::to_string(t) + ") " + d);
  }
  if (!problems.empty()) {
    result.status = RunResult::Fail;
    for (const auto& s : problems) result.message += (result.message.empty() ? "" : "\n") + s;
  }
  return result;
}

bool Harness::time(const std::string& op, openreg_dtype dtype, const Case& c, uint64_t seed, int reps,
                   double* engine_s, double* reference_s, std::string* why) {
  Prepared p;
  if (!prepare(*this, op, c, seed, p, why)) return false;
  const int32_t index = engine->find(op, dtype, true);
  p.eng.call.op_index = index < 0 ? -1 : index;
  auto measure = [&](const openreg::Engine& e, const openreg_call& call, double* out) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      openreg_status st = openreg::invoke_run(e, call, why);
      auto t1 = std::chrono::steady_clock::now();
      if (st != OPENREG_STATUS_OK) return false;
      if (r) t.push_back(std::chrono::duration<double>(t1 - t0).count());  // first run: warm-up
    }
    std::sort(t.begin(), t.end());
    *out = t[t.size() / 2];
    return true;
  };
  // The reference's functional call sized its outputs dynamically; time it on the
  // engine's (preallocated) call memory instead, which is equivalent for aten_ref.
  if (!measure(*engine, p.eng.call, engine_s)) return false;
  return measure(*reference, p.eng.call, reference_s);
}

// --------------------------------------------------------------- thread pool

namespace {

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t begin, int64_t end, int64_t grain, openreg_parallel_fn fn, void* user) {
    if (begin >= end) return;
    thread_local bool inside = false;
    const int64_t n = end - begin;
    int64_t chunks = std::min<int64_t>(size(), (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
    if (inside || chunks <= 1 || workers_.empty()) {
      fn(user, begin, end);
      return;
    }
    std::lock_guard<std::mutex> one_at_a_time(run_mu_);
    const int64_t step = (n + chunks - 1) / chunks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = [=](int64_t k) {
        int64_t b = begin + k * step, e = std::min(end, b + step);
        if (b < e) fn(user, b, e);
      };
      next_ = 1;  // chunk 0 is the caller's
      total_ = chunks;
      done_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    inside = true;
    job_(0);
    inside = false;
    std::unique_lock<std::mutex> lock(mu_);
    ++done_;
    while (next_ < total_) {  // help with what the workers have not taken
      int64_t k = next_++;
      lock.unlock();
      job_(k);
      lock.lock();
      ++done_;
    }
    done_cv_.wait(lock, [&] { return done_ == total_; });
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (generation_ != seen && next_ < total_); });
      if (stop_) return;
      while (next_ < total_) {
        int64_t k = next_++;
        lock.unlock();
        job_(k);
        lock.lock();
        if (++done_ == total_) done_cv_.notify_all();
      }
      seen = generation_;
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void(int64_t)> job_;
  int64_t next_ = 0, total_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool* g_pool = nullptr;

void pool_parallel_for(void*, int64_t begin, int64_t end, int64_t grain, openreg_parallel_fn fn, void* user) {
  g_pool->run(begin, end, grain, fn, user);
}
int32_t pool_threads(void*) { return g_pool->size(); }

}  // namespace

openreg_host make_pool_host(int threads) {
  static Pool pool(std::max(threads, 1));
  g_pool = &pool;
  openreg_host host = openreg::make_host_services();
  host.parallel_for = pool_parallel_for;
  host.get_num_threads = pool_threads;
  return host;
}

}  // namespace conformance
