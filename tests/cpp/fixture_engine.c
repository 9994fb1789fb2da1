/*
 * Fixture engines for the host-layer tests. One C99 source, compiled once per
 * fixture with exactly one FIXTURE_* definition (see CMakeLists.txt):
 *
 *   FIXTURE_GOOD            valid engine "fixture_good": aten::add.Tensor and
 *                           aten::add.out for float32, with a real strided,
 *                           broadcasting kernel (also the "partial engine" of the
 *                           Python strict-mode tests, so it must compute correctly)
 *   FIXTURE_NO_ENTRY        a shared library without openreg_engine_entry
 *   FIXTURE_NULL_TABLE      the entry returns NULL
 *   FIXTURE_BAD_MAGIC       wrong magic number
 *   FIXTURE_BAD_MAJOR       abi_major = OPENREG_ABI_VERSION_MAJOR + 1
 *   FIXTURE_SMALL_STRUCT    struct_size = 16
 *   FIXTURE_NULL_RUN        run == NULL
 *   FIXTURE_INIT_FAILS      init reports INTERNAL "fixture: device not found"
 *   FIXTURE_NO_HOST_MEMORY  flags = 0
 *   FIXTURE_OLDER_MINOR     struct_size = OPENREG_ENGINE_MIN_STRUCT_SIZE, abi_minor 0;
 *                           the (absent) supports/get_proc_address slots hold 0x1
 *   FIXTURE_NEWER_MINOR     abi_minor = host minor + 1, struct_size = sizeof + 32
 *   FIXTURE_WIDE_OPS        op table entries of a future, larger openreg_op_info
 *                           (struct_size 40): the host must step by struct_size
 *   FIXTURE_FAKE_REF        fake reference engine "aten_ref" (ANY_OP, no table)
 *                           whose run fills every output with 42; routing tests only
 *   FIXTURE_CRASHES         "fixture_crashes": fixture_good whose kernels crash on
 *                           some inputs, for the crash-attribution tests. Both inputs
 *                           4-D: aten::add.out writes through NULL (SIGSEGV on the
 *                           calling thread), aten::add.Tensor does so on a thread of
 *                           its own (like an engine's OpenMP team). Both inputs 5-D:
 *                           unbounded recursion (a stack overflow). Both 6-D: abort()
 *                           (what glibc does on heap corruption). Other inputs: correct.
 *
 * Every fixture that loads exports, through get_proc_address, counters the tests
 * read: "fixture_init_count", "fixture_release_count", "fixture_run_count",
 * "fixture_negotiated_minor" (int32_t*). FIXTURE_OLDER_MINOR cannot (its table
 * has no get_proc_address field).
 */
#include <openreg/engine.h>

#include <stdio.h>
#include <string.h>
#if defined(FIXTURE_CRASHES)
#include <pthread.h>
#include <stdlib.h>
#endif

/* --------------------------------------------------------------- settings */

#if defined(FIXTURE_GOOD)
#define FX_NAME "fixture_good"
#elif defined(FIXTURE_NO_ENTRY)
#define FX_NAME "fixture_no_entry"
#elif defined(FIXTURE_NULL_TABLE)
#define FX_NAME "fixture_null_table"
#elif defined(FIXTURE_BAD_MAGIC)
#define FX_NAME "fixture_bad_magic"
#elif defined(FIXTURE_BAD_MAJOR)
#define FX_NAME "fixture_bad_major"
#elif defined(FIXTURE_SMALL_STRUCT)
#define FX_NAME "fixture_small_struct"
#elif defined(FIXTURE_NULL_RUN)
#define FX_NAME "fixture_null_run"
#elif defined(FIXTURE_INIT_FAILS)
#define FX_NAME "fixture_init_fails"
#elif defined(FIXTURE_NO_HOST_MEMORY)
#define FX_NAME "fixture_no_host_memory"
#elif defined(FIXTURE_OLDER_MINOR)
#define FX_NAME "fixture_older_minor"
#elif defined(FIXTURE_NEWER_MINOR)
#define FX_NAME "fixture_newer_minor"
#elif defined(FIXTURE_WIDE_OPS)
#define FX_NAME "fixture_wide_ops"
#elif defined(FIXTURE_FAKE_REF)
#define FX_NAME "aten_ref"
#elif defined(FIXTURE_CRASHES)
#define FX_NAME "fixture_crashes"
#else
#error "define exactly one FIXTURE_* macro"
#endif

#define FX_VERSION "0.1.0 (" FX_NAME " test fixture)"
/* Some fixtures leave functions out of their table on purpose. */
#define FX_MAYBE_UNUSED __attribute__((unused))
#define FX_MAX_DIMS 8

/* ------------------------------------------------------------------ state */

static const openreg_host* g_host = NULL;
static int32_t g_init_count = 0;
static int32_t g_release_count = 0;
static int32_t g_run_count = 0;
static int32_t g_negotiated_minor = -1;

static openreg_status fx_error(openreg_status status, const char* message) {
  if (g_host && g_host->set_error) g_host->set_error(g_host->ctx, status, message);
  return status;
}

static openreg_status fx_init(void* ctx, const openreg_host* host, int32_t negotiated_minor) {
  (void)ctx;
  g_init_count++;
#if defined(FIXTURE_INIT_FAILS)
  g_host = host;
  (void)negotiated_minor;
  if (host && host->set_error) {
    host->set_error(host->ctx, OPENREG_STATUS_INTERNAL, "fixture: device not found");
  }
  g_host = NULL;
  return OPENREG_STATUS_INTERNAL;
#else
  if (!host || host->struct_size < offsetof(openreg_host, log) || !host->set_error) {
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  if (host->abi_major != OPENREG_ABI_VERSION_MAJOR) {
    host->set_error(host->ctx, OPENREG_STATUS_INVALID_ARGUMENT, "fixture: host ABI major mismatch");
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  g_host = host;
  g_negotiated_minor = negotiated_minor;
  return OPENREG_STATUS_OK;
#endif
}

static void fx_release(void* ctx) {
  (void)ctx;
  g_release_count++;
  g_host = NULL;
}

/* --------------------------------------------------------------- op table */

FX_MAYBE_UNUSED static const openreg_dtype k_float32 = {OPENREG_DTYPE_CODE_FLOAT, 32, 1};

#if defined(FIXTURE_WIDE_OPS)
/* What an op table looks like when built against a later minor whose
 * openreg_op_info gained 16 bytes of fields: the array stride is 40 bytes. */
typedef struct wide_op_info {
  openreg_op_info base;
  uint64_t added_later[2];
} wide_op_info;
static const wide_op_info k_ops[2] = {
    {{sizeof(wide_op_info), 1, "aten::add.Tensor", &k_float32}, {0, 0}},
    {{sizeof(wide_op_info), 1, "aten::add.out", &k_float32}, {0, 0}},
};
#define FX_NUM_OPS 2
#elif defined(FIXTURE_FAKE_REF)
#define FX_NUM_OPS 0
#else
static const openreg_op_info k_ops[2] = {
    {sizeof(openreg_op_info), 1, "aten::add.Tensor", &k_float32},
    {sizeof(openreg_op_info), 1, "aten::add.out", &k_float32},
};
#define FX_NUM_OPS 2
#endif

static openreg_status fx_get_ops(void* ctx, const openreg_op_info** ops, int32_t* count) {
  (void)ctx;
#if FX_NUM_OPS == 0
  *ops = NULL;
#else
  *ops = (const openreg_op_info*)(const void*)k_ops;
#endif
  *count = FX_NUM_OPS;
  return OPENREG_STATUS_OK;
}

/* ------------------------------------------------------ strided iteration */

static int is_dtype(openreg_dtype d, uint8_t code, uint8_t bits) {
  return d.code == code && d.bits == bits && d.lanes == 1;
}

static char* base_of(const openreg_tensor* t) {
  return t->data ? (char*)t->data + t->byte_offset : NULL;
}

/* Strides (in elements) of `in` broadcast to the shape of `out`, right-aligned:
 * a missing leading dimension or a dimension of size 1 gets stride 0. */
FX_MAYBE_UNUSED static openreg_status broadcast_strides(const openreg_tensor* in,
                                                        const openreg_tensor* out, const char* what,
                                                        int64_t* strides) {
  int32_t k, lead;
  char msg[160];
  if (in->ndim < 0 || in->ndim > out->ndim) {
    snprintf(msg, sizeof msg, "fixture: %s has %d dimensions, more than the output's %d", what,
             (int)in->ndim, (int)out->ndim);
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, msg);
  }
  lead = out->ndim - in->ndim;
  for (k = 0; k < out->ndim; ++k) {
    if (k < lead) {
      strides[k] = 0;
    } else if (in->sizes[k - lead] == out->sizes[k]) {
      strides[k] = in->sizes[k - lead] == 1 ? 0 : in->strides[k - lead];
    } else if (in->sizes[k - lead] == 1) {
      strides[k] = 0;
    } else {
      snprintf(msg, sizeof msg,
               "fixture: %s of size %lld at dimension %d does not broadcast to the output size %lld",
               what, (long long)in->sizes[k - lead], (int)(k - lead), (long long)out->sizes[k]);
      return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, msg);
    }
  }
  return OPENREG_STATUS_OK;
}

static int64_t numel_of(const openreg_tensor* t) {
  int64_t n = 1;
  int32_t k;
  for (k = 0; k < t->ndim; ++k) n *= t->sizes[k];
  return n;
}

/* ---------------------------------------------------------- add (float32) */

#if !defined(FIXTURE_FAKE_REF)

typedef struct add_plan {
  const openreg_tensor* out;
  const openreg_tensor* self;
  const openreg_tensor* other;
  int other_is_scalar; /* 0-dim `other` of a non-float32 dtype, read as one value */
  float other_value;
  float alpha;
} add_plan;

/* Everything run() checks before writing; shared with supports(). */
static openreg_status plan_add(const openreg_call* call, add_plan* plan) {
  const openreg_value* a;
  char msg[200];
  if (!call || call->struct_size < offsetof(openreg_call, outputs) + sizeof(void*)) {
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, "fixture: malformed call");
  }
  if (call->flags & OPENREG_CALL_DYNAMIC_OUTPUTS) {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: add has no dynamic outputs");
  }
  if (call->num_args < 3 || call->num_outputs < 1 || !call->args || !call->outputs) {
    snprintf(msg, sizeof msg, "fixture: %s expects >= 3 arguments and 1 output, got %d and %d",
             call->op_name ? call->op_name : "add", (int)call->num_args, (int)call->num_outputs);
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, msg);
  }
  a = call->args;
  if (a[0].kind != OPENREG_VALUE_TENSOR || !a[0].u.tensor || a[1].kind != OPENREG_VALUE_TENSOR ||
      !a[1].u.tensor) {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: add expects (Tensor self, Tensor other, ...)");
  }
  plan->out = &call->outputs[0];
  plan->self = a[0].u.tensor;
  plan->other = a[1].u.tensor;
  if (plan->out->ndim < 0) {
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, "fixture: add's output is absent");
  }
  if (plan->out->ndim > FX_MAX_DIMS) {
    snprintf(msg, sizeof msg, "fixture: output has %d dimensions; this engine handles at most %d",
             (int)plan->out->ndim, FX_MAX_DIMS);
    return fx_error(OPENREG_STATUS_UNSUPPORTED, msg);
  }
  if (!is_dtype(plan->out->dtype, OPENREG_DTYPE_CODE_FLOAT, 32) ||
      !is_dtype(plan->self->dtype, OPENREG_DTYPE_CODE_FLOAT, 32)) {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: add supports float32 self and output only");
  }
  plan->other_is_scalar = 0;
  plan->other_value = 0.0f;
  if (!is_dtype(plan->other->dtype, OPENREG_DTYPE_CODE_FLOAT, 32)) {
    const char* p = base_of(plan->other);
    if (plan->other->ndim != 0 || !p) {
      return fx_error(OPENREG_STATUS_UNSUPPORTED,
                      "fixture: add supports a float32 `other`, or a 0-dim float32/float64/int64 one");
    }
    if (is_dtype(plan->other->dtype, OPENREG_DTYPE_CODE_FLOAT, 64)) {
      double v;
      memcpy(&v, p, sizeof v);
      plan->other_value = (float)v;
    } else if (is_dtype(plan->other->dtype, OPENREG_DTYPE_CODE_INT, 64)) {
      int64_t v;
      memcpy(&v, p, sizeof v);
      plan->other_value = (float)v;
    } else {
      return fx_error(OPENREG_STATUS_UNSUPPORTED,
                      "fixture: a 0-dim `other` must be float32, float64 or int64");
    }
    plan->other_is_scalar = 1;
  }
  if (a[2].kind != OPENREG_VALUE_SCALAR) {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: alpha must be a Scalar");
  }
  if (a[2].u.scalar.kind == OPENREG_SCALAR_INT) {
    plan->alpha = (float)a[2].u.scalar.v.i;
  } else if (a[2].u.scalar.kind == OPENREG_SCALAR_DOUBLE) {
    plan->alpha = (float)a[2].u.scalar.v.d;
  } else {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: alpha must be an int or a float");
  }
  if (call->num_args >= 4 && a[3].kind == OPENREG_VALUE_TENSOR && a[3].u.tensor &&
      !is_dtype(a[3].u.tensor->dtype, OPENREG_DTYPE_CODE_FLOAT, 32)) {
    return fx_error(OPENREG_STATUS_UNSUPPORTED, "fixture: add.out supports a float32 `out` only");
  }
  return OPENREG_STATUS_OK;
}

static openreg_status run_add(const openreg_call* call) {
  add_plan plan;
  int64_t s_str[FX_MAX_DIMS], o_str[FX_MAX_DIMS], idx[FX_MAX_DIMS];
  int64_t n, i, off_out = 0, off_s = 0, off_o = 0;
  int32_t nd, k;
  char *out, *self, *other;
  openreg_status st;
  memset(&plan, 0, sizeof plan);
  st = plan_add(call, &plan);
  if (st != OPENREG_STATUS_OK) return st;
  nd = plan.out->ndim;
  st = broadcast_strides(plan.self, plan.out, "self", s_str);
  if (st != OPENREG_STATUS_OK) return st;
  if (!plan.other_is_scalar) {
    st = broadcast_strides(plan.other, plan.out, "other", o_str);
    if (st != OPENREG_STATUS_OK) return st;
  }
  n = numel_of(plan.out);
  if (n == 0) return OPENREG_STATUS_OK;
  out = base_of(plan.out);
  self = base_of(plan.self);
  other = base_of(plan.other);
  if (!out || !self || !other) {
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, "fixture: NULL data for a non-empty tensor");
  }
  for (k = 0; k < nd; ++k) idx[k] = 0;
  for (i = 0; i < n; ++i) {
    float s, o, r;
    memcpy(&s, self + off_s * 4, 4);
    if (plan.other_is_scalar) {
      o = plan.other_value;
    } else {
      memcpy(&o, other + off_o * 4, 4);
    }
    r = s + plan.alpha * o;
    memcpy(out + off_out * 4, &r, 4);
    /* odometer over the output's shape, innermost dimension fastest */
    for (k = nd - 1; k >= 0; --k) {
      if (++idx[k] < plan.out->sizes[k]) {
        off_out += plan.out->strides[k];
        off_s += s_str[k];
        if (!plan.other_is_scalar) off_o += o_str[k];
        break;
      }
      off_out -= (plan.out->sizes[k] - 1) * plan.out->strides[k];
      off_s -= (plan.out->sizes[k] - 1) * s_str[k];
      if (!plan.other_is_scalar) off_o -= (plan.out->sizes[k] - 1) * o_str[k];
      idx[k] = 0;
    }
  }
  return OPENREG_STATUS_OK;
}

#if defined(FIXTURE_CRASHES)

/* Read through a volatile pointer, so the compiler cannot see the NULL and turn
 * the store into a trap instruction (SIGILL instead of SIGSEGV). */
static int* volatile g_null = NULL;

static void* crash_on_own_thread(void* arg) {
  (void)arg;
  *g_null = 1;
  return NULL;
}

/* Frames the compiler cannot fold into a loop; g_host is never NULL here. */
static int overflow_stack(volatile char* previous) {
  volatile char frame[1024];
  frame[0] = previous ? previous[0] : 1;
  frame[1] = 0;
  if (!g_host) return frame[0];
  return overflow_stack(frame) + frame[1];
}

static void crash_if_asked(const openreg_call* call) {
  const openreg_tensor *self, *other;
  if (call->num_args < 2 || call->args[0].kind != OPENREG_VALUE_TENSOR ||
      call->args[1].kind != OPENREG_VALUE_TENSOR || !call->args[0].u.tensor || !call->args[1].u.tensor) {
    return;
  }
  self = call->args[0].u.tensor;
  other = call->args[1].u.tensor;
  if (self->ndim == 6 && other->ndim == 6) {
    abort();
  } else if (self->ndim == 5 && other->ndim == 5) {
    (void)overflow_stack(NULL);
  } else if (self->ndim == 4 && other->ndim == 4) {
    if (strcmp(call->op_name, "aten::add.out") == 0) {
      *g_null = 1;
    } else {
      pthread_t worker;
      if (pthread_create(&worker, NULL, crash_on_own_thread, NULL) == 0) pthread_join(worker, NULL);
    }
  }
}

#endif

FX_MAYBE_UNUSED static openreg_status fx_run(void* ctx, const openreg_call* call) {
  (void)ctx;
  if (!g_host) return OPENREG_STATUS_NOT_INITIALIZED;
  g_run_count++;
#if defined(FIXTURE_CRASHES)
  crash_if_asked(call);
#endif
  return run_add(call);
}

FX_MAYBE_UNUSED static openreg_status fx_supports(void* ctx, const openreg_call* call) {
  add_plan plan;
  int64_t strides[FX_MAX_DIMS];
  openreg_status st;
  (void)ctx;
  if (!g_host) return OPENREG_STATUS_NOT_INITIALIZED;
  memset(&plan, 0, sizeof plan);
  st = plan_add(call, &plan);
  if (st == OPENREG_STATUS_OK) st = broadcast_strides(plan.self, plan.out, "self", strides);
  if (st == OPENREG_STATUS_OK && !plan.other_is_scalar) {
    st = broadcast_strides(plan.other, plan.out, "other", strides);
  }
  /* supports() only answers OK or UNSUPPORTED */
  return st == OPENREG_STATUS_OK ? OPENREG_STATUS_OK : OPENREG_STATUS_UNSUPPORTED;
}

#else /* FIXTURE_FAKE_REF */

/* Fills every present output with 42 (float32/float64/int32/int64). */
static openreg_status fill_42(const openreg_tensor* t) {
  int64_t idx[FX_MAX_DIMS], n, i, off = 0;
  int32_t k, nd = t->ndim;
  char* p = base_of(t);
  if (nd < 0) return OPENREG_STATUS_OK; /* absent output */
  if (nd > FX_MAX_DIMS) return fx_error(OPENREG_STATUS_UNSUPPORTED, "fake aten_ref: too many dimensions");
  n = numel_of(t);
  if (n == 0) return OPENREG_STATUS_OK;
  if (!p) return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, "fake aten_ref: NULL output");
  for (k = 0; k < nd; ++k) idx[k] = 0;
  for (i = 0; i < n; ++i) {
    char* e = p + off * (t->dtype.bits / 8);
    if (is_dtype(t->dtype, OPENREG_DTYPE_CODE_FLOAT, 32)) {
      float v = 42.0f;
      memcpy(e, &v, sizeof v);
    } else if (is_dtype(t->dtype, OPENREG_DTYPE_CODE_FLOAT, 64)) {
      double v = 42.0;
      memcpy(e, &v, sizeof v);
    } else if (is_dtype(t->dtype, OPENREG_DTYPE_CODE_INT, 32)) {
      int32_t v = 42;
      memcpy(e, &v, sizeof v);
    } else if (is_dtype(t->dtype, OPENREG_DTYPE_CODE_INT, 64)) {
      int64_t v = 42;
      memcpy(e, &v, sizeof v);
    } else {
      return fx_error(OPENREG_STATUS_UNSUPPORTED, "fake aten_ref: unsupported output dtype");
    }
    for (k = nd - 1; k >= 0; --k) {
      if (++idx[k] < t->sizes[k]) {
        off += t->strides[k];
        break;
      }
      off -= (t->sizes[k] - 1) * t->strides[k];
      idx[k] = 0;
    }
  }
  return OPENREG_STATUS_OK;
}

FX_MAYBE_UNUSED static openreg_status fx_run(void* ctx, const openreg_call* call) {
  int32_t i;
  (void)ctx;
  if (!g_host) return OPENREG_STATUS_NOT_INITIALIZED;
  g_run_count++;
  if (!call || (call->num_outputs > 0 && !call->outputs)) {
    return fx_error(OPENREG_STATUS_INVALID_ARGUMENT, "fake aten_ref: malformed call");
  }
  for (i = 0; i < call->num_outputs; ++i) {
    openreg_status st = fill_42(&call->outputs[i]);
    if (st != OPENREG_STATUS_OK) return st;
  }
  return OPENREG_STATUS_OK;
}

#define fx_supports NULL

#endif /* FIXTURE_FAKE_REF */

FX_MAYBE_UNUSED static void* fx_get_proc_address(void* ctx, const char* name) {
  (void)ctx;
  if (!name) return NULL;
  if (strcmp(name, "fixture_init_count") == 0) return &g_init_count;
  if (strcmp(name, "fixture_release_count") == 0) return &g_release_count;
  if (strcmp(name, "fixture_run_count") == 0) return &g_run_count;
  if (strcmp(name, "fixture_negotiated_minor") == 0) return &g_negotiated_minor;
  return NULL;
}

/* ------------------------------------------------------------ the table */

#if defined(FIXTURE_NO_HOST_MEMORY)
#define FX_FLAGS 0
#elif defined(FIXTURE_FAKE_REF)
#define FX_FLAGS (OPENREG_ENGINE_FLAG_HOST_MEMORY | OPENREG_ENGINE_FLAG_ANY_OP)
#else
#define FX_FLAGS OPENREG_ENGINE_FLAG_HOST_MEMORY
#endif

#if defined(FIXTURE_BAD_MAGIC)
#define FX_MAGIC 0x0123456789ABCDEFULL
#else
#define FX_MAGIC OPENREG_ENGINE_MAGIC
#endif

#if defined(FIXTURE_BAD_MAJOR)
#define FX_MAJOR (OPENREG_ABI_VERSION_MAJOR + 1)
#else
#define FX_MAJOR OPENREG_ABI_VERSION_MAJOR
#endif

#if defined(FIXTURE_NULL_RUN)
#define FX_RUN NULL
#else
#define FX_RUN fx_run
#endif

#if defined(FIXTURE_OLDER_MINOR)

/* A 1.0-minimum table: the fields past `run` do not exist for this engine. The
 * table lives inside a larger zeroed buffer whose bytes where `supports` and
 * `get_proc_address` would be hold 0x1, so a host that reads past struct_size
 * calls address 0x1 and crashes. */
static union {
  openreg_engine table;
  unsigned char bytes[sizeof(openreg_engine) + 64];
} g_storage;

static void poison_slot(size_t offset) {
  uintptr_t garbage = 0x1;
  memcpy(g_storage.bytes + offset, &garbage, sizeof garbage);
}

FX_MAYBE_UNUSED static const openreg_engine* fx_table(void) {
  openreg_engine* t = &g_storage.table;
  memset(&g_storage, 0, sizeof g_storage);
  t->struct_size = (uint32_t)OPENREG_ENGINE_MIN_STRUCT_SIZE;
  t->abi_major = OPENREG_ABI_VERSION_MAJOR;
  t->abi_minor = 0;
  t->flags = FX_FLAGS;
  t->magic = FX_MAGIC;
  t->name = FX_NAME;
  t->version = FX_VERSION;
  t->ctx = NULL;
  t->init = fx_init;
  t->release = fx_release;
  t->get_ops = fx_get_ops;
  t->run = fx_run;
  poison_slot(offsetof(openreg_engine, supports));
  poison_slot(offsetof(openreg_engine, get_proc_address));
  return t;
}

#elif defined(FIXTURE_NEWER_MINOR)

/* A table from a later minor: two fields appended that this host does not know. */
typedef struct newer_engine {
  openreg_engine base;
  void* (*added_in_a_later_minor)(void* ctx);
  uint64_t more[3];
} newer_engine;

static const newer_engine g_newer = {
    {sizeof(openreg_engine) + 32, OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR + 1,
     FX_FLAGS, FX_MAGIC, FX_NAME, FX_VERSION, NULL, fx_init, fx_release, fx_get_ops, FX_RUN,
     fx_supports, fx_get_proc_address},
    NULL,
    {0xDEADBEEFDEADBEEFULL, 0xDEADBEEFDEADBEEFULL, 0xDEADBEEFDEADBEEFULL}};

typedef char newer_engine_is_32_bytes_longer[sizeof(newer_engine) == sizeof(openreg_engine) + 32 ? 1 : -1];

FX_MAYBE_UNUSED static const openreg_engine* fx_table(void) { return &g_newer.base; }

#else

#if defined(FIXTURE_SMALL_STRUCT)
#define FX_STRUCT_SIZE 16
#else
#define FX_STRUCT_SIZE sizeof(openreg_engine)
#endif

static const openreg_engine g_table = {FX_STRUCT_SIZE, FX_MAJOR, OPENREG_ABI_VERSION_MINOR,
                                       FX_FLAGS, FX_MAGIC, FX_NAME, FX_VERSION, NULL,
                                       fx_init, fx_release, fx_get_ops, FX_RUN,
                                       fx_supports, fx_get_proc_address};

FX_MAYBE_UNUSED static const openreg_engine* fx_table(void) { return &g_table; }

#endif

/* -------------------------------------------------------------- exports */

#if defined(FIXTURE_NO_ENTRY)

/* Looks like an engine, but exports the wrong name. */
OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry_v0(int32_t host_abi_major,
                                                                     int32_t host_abi_minor);
OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry_v0(int32_t host_abi_major,
                                                                     int32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return fx_table();
}

#else

OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t host_abi_major,
                                                                  int32_t host_abi_minor);
OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t host_abi_major,
                                                                  int32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
#if defined(FIXTURE_NULL_TABLE)
  return NULL;
#else
  return fx_table();
#endif
}

#endif
