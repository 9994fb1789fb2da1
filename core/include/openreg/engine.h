/*
 * openreg engine ABI — the whole contract between the openreg host (the PyTorch
 * device runtime) and an engine library. Plain C; compiles as C99 and as C++17.
 *
 * An engine is a shared library that exports exactly one symbol,
 * OPENREG_ENGINE_ENTRY_SYMBOL ("openreg_engine_entry"), of type
 * openreg_engine_entry_fn. The host dlopens it (RTLD_NOW | RTLD_LOCAL, never
 * dlclosed), calls the entry with its own ABI version, validates the table it gets
 * back, then calls init() once with the host services table.
 *
 * Conventions used by every declaration below:
 *  - Every struct that crosses the boundary starts with `uint32_t struct_size`,
 *    set by whoever fills the struct. Fields are only ever appended. A reader
 *    accepts a smaller struct (fields past struct_size take their documented
 *    default) and a larger one (it ignores the tail).
 *  - No bool, no enum-typed fields: int32_t with the named constants.
 *  - "borrowed" means: valid for the duration of the call it is passed to, owned by
 *    the caller. Whoever allocates frees.
 *  - Nothing here may throw or abort. Engines catch everything at the boundary and
 *    report a status; they never call abort() or exit().
 *  - [since 1.0] marks when a field or function was introduced; see ABI_CHANGELOG.md.
 */
#ifndef OPENREG_ENGINE_H_
#define OPENREG_ENGINE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- versions */

#define OPENREG_ABI_VERSION_MAJOR 1 /* a mismatch refuses the engine */
#define OPENREG_ABI_VERSION_MINOR 1 /* both sides use min(host, engine) */

/* First field after struct_size of openreg_engine: "OPENREG1" in ASCII. */
#define OPENREG_ENGINE_MAGIC 0x314745524E45504FULL

#define OPENREG_ENGINE_ENTRY_SYMBOL "openreg_engine_entry"

#if defined(_WIN32)
#define OPENREG_ENGINE_EXPORT __declspec(dllexport)
#else
#define OPENREG_ENGINE_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------ status */

typedef int32_t openreg_status;
#define OPENREG_STATUS_OK 0
/* Not an error: "route this call to the next engine of the chain". */
#define OPENREG_STATUS_UNSUPPORTED 1
#define OPENREG_STATUS_INVALID_ARGUMENT 2
#define OPENREG_STATUS_OUT_OF_MEMORY 3
#define OPENREG_STATUS_INTERNAL 4
#define OPENREG_STATUS_NOT_INITIALIZED 5
/* [1.1] Kinds of user error, refining INVALID_ARGUMENT, so that the host raises
 * the Python exception PyTorch raises on CPU for the same input: IndexError (a
 * dimension or index out of range), TypeError, ValueError, NotImplementedError,
 * torch.linalg.LinAlgError. An engine returns them only when negotiated_minor >= 1
 * (a 1.0 host would not know them); INVALID_ARGUMENT stays right for every other
 * user error (RuntimeError). */
#define OPENREG_STATUS_INDEX_ERROR 6
#define OPENREG_STATUS_TYPE_ERROR 7
#define OPENREG_STATUS_VALUE_ERROR 8
#define OPENREG_STATUS_NOT_IMPLEMENTED 9
#define OPENREG_STATUS_LINALG_ERROR 10

/* ------------------------------------------------------------------ dtypes */

/* Same layout and codes as DLPack's DLDataType. */
typedef struct openreg_dtype {
  uint8_t code;   /* OPENREG_DTYPE_CODE_* */
  uint8_t bits;   /* 8, 16, 32, 64 (128 for complex128) */
  uint16_t lanes; /* always 1 in ABI 1.x */
} openreg_dtype;

#define OPENREG_DTYPE_CODE_INT 0
#define OPENREG_DTYPE_CODE_UINT 1
#define OPENREG_DTYPE_CODE_FLOAT 2
#define OPENREG_DTYPE_CODE_BFLOAT 4
#define OPENREG_DTYPE_CODE_COMPLEX 5
#define OPENREG_DTYPE_CODE_BOOL 6

/* ----------------------------------------------------------------- tensors */

/*
 * A strided view of memory, DLPack-compatible (DLTensor without the device
 * struct). Borrowed: the descriptor, its sizes/strides arrays and the memory are
 * valid for the duration of the call only; the engine must not keep pointers.
 * Element address of index (i0..in) is
 *   (char*)data + byte_offset + sum(ik * strides[k]) * (dtype.bits / 8).
 */
typedef struct openreg_tensor {
  uint32_t struct_size;     /* [1.0] sizeof(openreg_tensor) */
  int32_t ndim;             /* [1.0] 0 for a scalar tensor */
  void* data;               /* [1.0] base of the allocation; may be NULL when numel == 0 */
  uint64_t byte_offset;     /* [1.0] offset of element 0 from data, in bytes */
  const int64_t* sizes;     /* [1.0] ndim entries; NULL when ndim == 0 */
  const int64_t* strides;   /* [1.0] ndim entries, in elements (never NULL when ndim > 0) */
  openreg_dtype dtype;      /* [1.0] */
  int32_t device_index;     /* [1.0] openreg device ordinal the memory belongs to */
} openreg_tensor;

/* ---------------------------------------------------------- tagged values */

/* Kinds of openreg_value. Arguments are passed in ATen schema order. */
#define OPENREG_VALUE_NONE 0          /* an absent optional argument */
#define OPENREG_VALUE_TENSOR 1        /* u.tensor */
#define OPENREG_VALUE_TENSOR_LIST 2   /* u.tensors; an item may be NULL (Tensor?[]) */
#define OPENREG_VALUE_INT 3           /* u.i (also SymInt) */
#define OPENREG_VALUE_DOUBLE 4        /* u.d */
#define OPENREG_VALUE_BOOL 5          /* u.i is 0 or 1 */
#define OPENREG_VALUE_INT_LIST 6      /* u.ints */
#define OPENREG_VALUE_SCALAR 7        /* u.scalar (a Python number, with its kind) */
#define OPENREG_VALUE_STRING 8        /* u.str, UTF-8, not NUL-terminated necessarily */
#define OPENREG_VALUE_DTYPE 9         /* u.dtype */
#define OPENREG_VALUE_DOUBLE_LIST 10  /* u.doubles */
#define OPENREG_VALUE_BOOL_LIST 11    /* u.ints, each 0 or 1 */
#define OPENREG_VALUE_GENERATOR 12    /* u.generator: counter-based random stream */
#define OPENREG_VALUE_LAYOUT 13       /* u.i: ATen's c10::Layout numbering (0 = strided) */
#define OPENREG_VALUE_MEMORY_FORMAT 14 /* u.i: ATen's c10::MemoryFormat numbering */
#define OPENREG_VALUE_DEVICE 15       /* u.i: an openreg device index (-1: current) */

#define OPENREG_SCALAR_INT 0     /* u.scalar.i */
#define OPENREG_SCALAR_DOUBLE 1  /* u.scalar.d */
#define OPENREG_SCALAR_BOOL 2    /* u.scalar.i */
#define OPENREG_SCALAR_COMPLEX 3 /* u.scalar.d (real), u.scalar.imag */

typedef struct openreg_value {
  int32_t kind;     /* [1.0] OPENREG_VALUE_* */
  int32_t reserved; /* [1.0] zero */
  union {
    int64_t i;
    double d;
    const openreg_tensor* tensor;
    struct { const openreg_tensor* const* items; int64_t count; } tensors;
    struct { const int64_t* items; int64_t count; } ints;
    struct { const double* items; int64_t count; } doubles;
    struct { const char* data; int64_t length; } str;
    struct { int32_t kind; int32_t reserved; union { int64_t i; double d; } v; double imag; } scalar;
    openreg_dtype dtype;
    /* Draw the random numbers of this call from the stream (seed, offset):
     * the host advances offset between calls, so equal (seed, offset) must give
     * equal numbers on the same engine. */
    struct { uint64_t seed; uint64_t offset; } generator;
  } u;
} openreg_value;

/* ------------------------------------------------------------------- calls */

struct openreg_call;

/*
 * Host callback for outputs whose shape depends on the data (nonzero, unique,
 * ...). Only set when call->flags has OPENREG_CALL_DYNAMIC_OUTPUTS; then every
 * outputs[i] has data == NULL and the engine must call this once per output
 * with the final shape. The host allocates (contiguous) and fills *out, which
 * stays valid until the call returns.
 */
typedef openreg_status (*openreg_alloc_output_fn)(const struct openreg_call* call,
                                                  int32_t index, int32_t ndim,
                                                  const int64_t* sizes,
                                                  openreg_dtype dtype,
                                                  openreg_tensor* out);

#define OPENREG_CALL_DYNAMIC_OUTPUTS 1 /* outputs are sized by the engine */

/*
 * One operator call. Borrowed for the duration of run()/supports().
 *
 * The host allocates every output before the call (shapes come from PyTorch's
 * Meta kernels) and passes them in `outputs`, one per schema return:
 *  - functional ops (aten::add.Tensor): fresh tensors, to be fully written;
 *  - in-place ops (aten::add_.Tensor): outputs[0] aliases args[0];
 *  - out= ops (aten::add.out): outputs alias the `out` arguments, which the host
 *    has already resized to the right shape.
 * Outputs may be non-contiguous (they follow PyTorch's stride rules). An output
 * with ndim == -1 is absent (an undefined tensor in ATen, such as a gradient that
 * was not asked for): write nothing for it. Tensor arguments are usually on the
 * device; a 0-dim CPU tensor (device_index -1) may appear where ATen allows one.
 * Arguments annotated as mutable in the schema (Tensor(a!)) are written in place.
 */
typedef struct openreg_call {
  uint32_t struct_size;           /* [1.0] */
  int32_t flags;                  /* [1.0] OPENREG_CALL_* bits */
  const char* op_name;            /* [1.0] "aten::add.Tensor" (overload after the dot, "" -> no dot) */
  int32_t op_index;               /* [1.0] index of the matching entry in the engine's op table */
  int32_t num_args;               /* [1.0] */
  const openreg_value* args;      /* [1.0] in schema order, kwargs included */
  int32_t num_outputs;            /* [1.0] */
  int32_t reserved;               /* [1.0] zero */
  const openreg_tensor* outputs;  /* [1.0] num_outputs descriptors */
  openreg_alloc_output_fn alloc_output; /* [1.0] NULL unless DYNAMIC_OUTPUTS */
  void* host_call_ctx;            /* [1.0] opaque, for alloc_output */
} openreg_call;

/* ------------------------------------------------------------ host table */

#define OPENREG_LOG_ERROR 0
#define OPENREG_LOG_WARNING 1
#define OPENREG_LOG_INFO 2
#define OPENREG_LOG_DEBUG 3

/* Body of a parallel loop: process [begin, end). Must not throw. */
typedef void (*openreg_parallel_fn)(void* user, int64_t begin, int64_t end);

/*
 * Services the host offers to the engine, passed to init() and valid until
 * release() returns. All function pointers are non-NULL in a 1.0 host; a field
 * past struct_size is absent (treat as NULL). All are callable from any thread.
 */
typedef struct openreg_host {
  uint32_t struct_size;  /* [1.0] */
  int32_t abi_major;     /* [1.0] the host's OPENREG_ABI_VERSION_MAJOR */
  int32_t abi_minor;     /* [1.0] the host's OPENREG_ABI_VERSION_MINOR */
  int32_t reserved;      /* [1.0] zero */
  void* ctx;             /* [1.0] pass back as the first argument of every service */

  /* [1.0] Error sink: the engine calls this before returning a status other than
   * OK, with a human-readable message naming what was wrong. The host copies
   * `message` at once; the engine keeps ownership. Applies to the calling
   * thread's current call. */
  void (*set_error)(void* ctx, openreg_status status, const char* message);

  /* [1.0] Log a message (copied). Shown according to OPENREG_VERBOSE. */
  void (*log)(void* ctx, int32_t level, const char* message);

  /* [1.0] Scratch memory of `bytes` bytes, 64-byte aligned; NULL when out of
   * memory. Freed with scratch_free by the engine (whoever allocates frees: the
   * host allocated it, so the engine hands it back). */
  void* (*scratch_alloc)(void* ctx, uint64_t bytes);
  void (*scratch_free)(void* ctx, void* ptr);

  /* [1.0] Run fn over [begin, end) on the host's intra-op thread pool (ATen's),
   * in chunks of at least `grain` items; returns when every chunk is done. Nested
   * calls run serially. This is how engines use threads: one process, one pool. */
  void (*parallel_for)(void* ctx, int64_t begin, int64_t end, int64_t grain,
                       openreg_parallel_fn fn, void* user);

  /* [1.0] Number of threads parallel_for may use. */
  int32_t (*get_num_threads)(void* ctx);
} openreg_host;

/* ---------------------------------------------------------- capabilities */

/*
 * One entry of the engine's static op table, read once after init(). `name` is
 * the ATen schema name with overload ("aten::addmm", "aten::add.Tensor",
 * "aten::add_.Tensor", "aten::add.out"): each overload is a separate op.
 * `dtypes` lists the dtypes accepted for the op's first tensor argument
 * (num_dtypes == 0: any dtype). Finer cases go through engine->supports.
 * The table and everything it points to are owned by the engine and must stay
 * valid until release().
 */
typedef struct openreg_op_info {
  uint32_t struct_size;        /* [1.0] */
  int32_t num_dtypes;          /* [1.0] */
  const char* name;            /* [1.0] */
  const openreg_dtype* dtypes; /* [1.0] */
} openreg_op_info;

/* openreg_engine.flags */
#define OPENREG_ENGINE_FLAG_CONCURRENT_RUN 1   /* run() may be called from several threads at once */
#define OPENREG_ENGINE_FLAG_HOST_MEMORY 2      /* engine works on host-accessible memory (required by a 1.0 host) */
#define OPENREG_ENGINE_FLAG_ANY_OP 4           /* may be asked for ops outside its table (the reference engine) */

/* ----------------------------------------------------------- engine table */

/*
 * The table an engine returns from its entry point. Owned by the engine and
 * valid for the life of the process (the library is never unloaded).
 *
 * Required (non-NULL): init, release, get_ops, run. Optional (may be NULL):
 * supports, get_proc_address.
 *
 * Threading: the host serializes init, get_ops and release, and calls nothing
 * else before init succeeded or after release. run/supports are called from any
 * thread; concurrently only with OPENREG_ENGINE_FLAG_CONCURRENT_RUN.
 */
typedef struct openreg_engine {
  uint32_t struct_size;   /* [1.0] sizeof(openreg_engine) as the engine was built */
  int32_t abi_major;      /* [1.0] OPENREG_ABI_VERSION_MAJOR the engine was built with */
  int32_t abi_minor;      /* [1.0] OPENREG_ABI_VERSION_MINOR the engine was built with */
  int32_t flags;          /* [1.0] OPENREG_ENGINE_FLAG_* bits */
  uint64_t magic;         /* [1.0] OPENREG_ENGINE_MAGIC */
  const char* name;       /* [1.0] short name, [a-z0-9_]+, e.g. "eigen" */
  const char* version;    /* [1.0] engine's own version, free text, e.g. "1.2.0 (oneDNN 3.0.0)" */
  void* ctx;              /* [1.0] opaque, passed back to every function below */

  /* [1.0] required. Called once, before anything else. `host` is borrowed until
   * release() returns. negotiated_minor = min(host minor, engine minor): the
   * engine must not use host fields newer than that. On failure, report through
   * host->set_error and return a status; the host then refuses the engine and
   * calls nothing else (not even release). */
  openreg_status (*init)(void* ctx, const openreg_host* host, int32_t negotiated_minor);

  /* [1.0] required. Called at most once, at process exit or when the host
   * drops the engine. */
  void (*release)(void* ctx);

  /* [1.0] required. Hands out the op table (see openreg_op_info). */
  openreg_status (*get_ops)(void* ctx, const openreg_op_info** ops, int32_t* count);

  /* [1.0] required. Runs one call (see openreg_call). Returns OK after writing
   * every output; UNSUPPORTED (with a reason through set_error) when it cannot do
   * this particular call, having written nothing; any other status is an error
   * that reaches the user with its message. */
  openreg_status (*run)(void* ctx, const openreg_call* call);

  /* [1.0] optional. Answers, before any output is written, whether run() would
   * accept this call (strides, shapes, dtype combinations). Returns OK or
   * UNSUPPORTED; the reason (through set_error) is shown with OPENREG_VERBOSE.
   * When it is set, the host calls it before every run(): two crossings per call.
   * [1.1] Leave it NULL unless the engine needs it: run() returning UNSUPPORTED
   * before writing any output is the normal way to decline, and costs one
   * crossing. (A 1.0 host and a 1.1 host both call supports when it is set.) */
  openreg_status (*supports)(void* ctx, const openreg_call* call);

  /* [1.0] optional. Engine-specific extensions by name; NULL when unknown. */
  void* (*get_proc_address)(void* ctx, const char* name);
} openreg_engine;

/*
 * The one exported symbol. The host passes its ABI version; the engine returns
 * its table (never NULL on success; NULL only if it cannot work at all, in which
 * case the host reports the library as broken). Must not throw and must be cheap:
 * real set-up belongs in init().
 */
typedef const openreg_engine* (*openreg_engine_entry_fn)(int32_t host_abi_major,
                                                         int32_t host_abi_minor);

/* ---------------------------------------------------------- layout pins */

#if defined(__cplusplus) && __cplusplus >= 201103L
#define OPENREG_STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define OPENREG_STATIC_ASSERT(c, m) _Static_assert(c, m)
#else
#define OPENREG_CAT_(a, b) a##b
#define OPENREG_CAT(a, b) OPENREG_CAT_(a, b)
#define OPENREG_STATIC_ASSERT(c, m) \
  typedef char OPENREG_CAT(openreg_static_assert_, __LINE__)[(c) ? 1 : -1]
#endif

#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
/* Released 1.0 layout on 64-bit platforms: these offsets never change. */
OPENREG_STATIC_ASSERT(sizeof(openreg_dtype) == 4, "openreg_dtype");
OPENREG_STATIC_ASSERT(offsetof(openreg_tensor, data) == 8, "openreg_tensor.data");
OPENREG_STATIC_ASSERT(offsetof(openreg_tensor, dtype) == 40, "openreg_tensor.dtype");
OPENREG_STATIC_ASSERT(sizeof(openreg_tensor) == 48, "openreg_tensor 1.0");
OPENREG_STATIC_ASSERT(sizeof(openreg_value) == 32, "openreg_value 1.0");
OPENREG_STATIC_ASSERT(offsetof(openreg_call, args) == 24, "openreg_call.args");
OPENREG_STATIC_ASSERT(sizeof(openreg_call) == 64, "openreg_call 1.0");
OPENREG_STATIC_ASSERT(offsetof(openreg_host, set_error) == 24, "openreg_host.set_error");
OPENREG_STATIC_ASSERT(sizeof(openreg_host) == 72, "openreg_host 1.0");
OPENREG_STATIC_ASSERT(sizeof(openreg_op_info) == 24, "openreg_op_info 1.0");
OPENREG_STATIC_ASSERT(offsetof(openreg_engine, magic) == 16, "openreg_engine.magic");
OPENREG_STATIC_ASSERT(offsetof(openreg_engine, init) == 48, "openreg_engine.init");
OPENREG_STATIC_ASSERT(sizeof(openreg_engine) == 96, "openreg_engine 1.0");
#endif

/* Smallest struct_size a 1.0 host accepts for the engine table (up to `run`). */
#define OPENREG_ENGINE_MIN_STRUCT_SIZE (offsetof(openreg_engine, run) + sizeof(void*))

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPENREG_ENGINE_H_ */
