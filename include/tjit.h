/* tjit.h: JAX's programming model for C programs. The one public header.
 *
 * A host program describes array code once, by calling the tracing API from a trace function;
 * tjit records the calls into an SSA IR, optimizes it, and runs each (shape, dtype, static-arg)
 * signature. Results of a compiled signature are cached: a warm call traces nothing.
 *
 *   static void layer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
 *     r[0] = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));   // relu(x @ w + b)
 *   }
 *   ...
 *   jit_ctx *ctx;   jit_ctx_create(NULL, &ctx);
 *   jit_fn *f;      jit_fn_opts o = {.name = "layer", .n_args = 3, .n_results = 1};
 *   jit_compile(ctx, layer, NULL, &o, &f);
 *   jit_array *args[3] = {x, w, b}, *y;              // made by jit_array_from_host
 *   if (jit_call(f, args, &y) != JIT_OK) fprintf(stderr, "%s\n", jit_last_error());
 *   jit_fn_dump(f, NULL, JIT_DUMP_TRACED | JIT_DUMP_OPTIMIZED, stdout);
 *   jit_array_to_host(y, out, sizeof out);
 *   jit_array_free(y); jit_fn_free(f); jit_ctx_destroy(ctx);
 *
 * Conventions: every fallible call returns a jit_status (JIT_OK = 0) and leaves a message for
 * jit_last_error(); whoever creates a handle frees it; the library never aborts or prints on its
 * own. Errors inside a trace are sticky: the first failing op records its error on the trace,
 * later ops return an invalid value (id 0), and jit_call returns the error.
 */
#ifndef TJIT_H
#define TJIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default) /* the library hides everything this header does not name */
#endif

/* ---- status codes: _(name, message) ------------------------------------------------------- */
#define JIT_STATUS_DEF(_)                                          \
  _(JIT_OK, "ok")                                                  \
  _(JIT_EINVAL, "invalid argument")                                \
  _(JIT_ESHAPE, "shape mismatch")                                  \
  _(JIT_EDTYPE, "dtype mismatch")                                  \
  _(JIT_ESHARDING, "sharding mismatch")                            \
  _(JIT_ECOMPILE, "compilation failed")                            \
  _(JIT_ENOMEM, "out of memory")                                   \
  _(JIT_EIO, "i/o error")                                          \
  _(JIT_EUNSUPPORTED, "unsupported")                               \
  _(JIT_EINTERNAL, "internal error")

typedef enum jit_status {
#define JIT_STATUS_ENUM(name, msg) name,
  JIT_STATUS_DEF(JIT_STATUS_ENUM)
#undef JIT_STATUS_ENUM
} jit_status;

/* ---- dtypes: _(name, text, bytes) ------------------------------------------------------------
   bf16 and f16 are stored as 16-bit values and computed in f32. */
#define JIT_DTYPE_DEF(_) \
  _(JIT_BOOL, "bool", 1) \
  _(JIT_I8, "i8", 1)     \
  _(JIT_U8, "u8", 1)     \
  _(JIT_I32, "i32", 4)   \
  _(JIT_I64, "i64", 8)   \
  _(JIT_F16, "f16", 2)   \
  _(JIT_BF16, "bf16", 2) \
  _(JIT_F32, "f32", 4)   \
  _(JIT_F64, "f64", 8)   \
  _(JIT_U32, "u32", 4)   \
  _(JIT_U64, "u64", 8)   \
  _(JIT_C64, "c64", 8)   \
  _(JIT_C128, "c128", 16)
/* Values never renumber. C64 and C128 are complex: on the host, (re, im) pairs of float /
   double, as C99's float complex and double complex. */

typedef enum jit_dtype {
#define JIT_DTYPE_ENUM(name, text, bytes) name,
  JIT_DTYPE_DEF(JIT_DTYPE_ENUM)
#undef JIT_DTYPE_ENUM
} jit_dtype;

#define JIT_MAX_RANK 8 /* arrays and traced values have at most this many dimensions */

typedef struct jit_ctx jit_ctx;           /* devices, worker threads, compile cache */
typedef struct jit_array jit_array;       /* an array on one device or sharded over a mesh */
typedef struct jit_mesh jit_mesh;         /* devices arranged in a named n-d grid */
typedef struct jit_sharding jit_sharding; /* a mesh + one partition entry per array dim */
typedef struct jit_fn jit_fn;             /* a jitted function and its per-signature cache */
typedef struct jit_trace jit_trace;       /* the recorder handed to a trace function */
typedef struct jit_val { uint32_t id; } jit_val; /* an SSA value while tracing; id 0 = invalid */

/* Every traced function, and every function handed to a transformation, has this type.
   The numbers of args and results are fixed when the function is registered. */
typedef void (*jit_trace_fn)(jit_trace *t, const jit_val *args, jit_val *results, void *user);

/* ---- context, devices, errors ----------------------------------------------------------------- */
typedef struct jit_ctx_opts {
  int n_devices;          /* virtual CPU devices; 0: $TJIT_DEVICES, else 1 */
  int n_threads;          /* worker threads; 0: number of cores */
  const char *cache_dir;  /* persistent compiled-code cache; NULL: $TJIT_CACHE_DIR, else none */
  int opt_level;          /* 0..3; start from jit_ctx_opts_default(), which sets 3 */
  int distributed;        /* 1: this process is one rank of an MPI job (mpirun, srun); 0:
                             $TJIT_DISTRIBUTED, else a single process. See "processes" below. */
} jit_ctx_opts;
jit_ctx_opts jit_ctx_opts_default(void);
jit_status   jit_ctx_create(const jit_ctx_opts *opts /* NULL: defaults */, jit_ctx **out);
void         jit_ctx_destroy(jit_ctx *ctx);
int          jit_device_count(const jit_ctx *ctx);        /* all devices, all processes */
/* What the context's code is generated for, e.g. "znver3, 256-bit vectors (host)": the host's
   CPU unless $TJIT_CPU names another x86-64 CPU or level (x86-64-v2, x86-64-v3, x86-64-v4,
   skylake-avx512, sapphirerapids, znver4, ...; one this host cannot execute makes
   jit_ctx_create fail), and its widest vectors unless $TJIT_VECTOR_WIDTH (128, 256, 512) asks
   for narrower ones. Both are part of every compiled signature's disk-cache key. */
const char  *jit_ctx_target(const jit_ctx *ctx);
const char  *jit_status_str(jit_status s);
const char  *jit_last_error(void);                        /* this thread's last failure */
size_t       jit_dtype_size(jit_dtype d);                 /* 0 for an unknown dtype */
const char  *jit_dtype_name(jit_dtype d);                 /* "f32"; "?" for an unknown dtype */

/* ---- arrays ------------------------------------------------------------------------------------ */
jit_status jit_array_from_host(jit_ctx *ctx, jit_dtype dt, int rank, const int64_t *shape,
                               const void *data, jit_array **out);   /* copies data */
jit_status jit_array_to_host(const jit_array *a, void *dst, size_t dst_bytes); /* gathers shards */
int            jit_array_rank(const jit_array *a);
const int64_t *jit_array_shape(const jit_array *a);
jit_dtype      jit_array_dtype(const jit_array *a);
size_t         jit_array_nbytes(const jit_array *a);   /* bytes of the whole array on the host */
void           jit_array_free(jit_array *a);
/* NumPy .npy files. Save writes format 1.0 in C order (a sharded array: its gathered global
   value); bf16 is written as ml_dtypes does ('<V2'). Load reads formats 1.0-3.0, little- and
   big-endian descrs, and Fortran-order data (transposed into C order); a malformed, truncated or
   unsupported file is refused with a message naming the file and what is wrong. */
jit_status jit_array_save_npy(const jit_array *a, const char *path);
jit_status jit_array_load_npy(jit_ctx *ctx, const char *path, jit_array **out);

/* ---- mesh, sharding, placement -----------------------------------------------------------------
   A partition spec has one entry per array dimension, separated by commas: `_` = not sharded,
   a mesh axis name = sharded over that axis, `x+y` = sharded over axes x and y together. */
jit_status jit_mesh_create(jit_ctx *ctx, int n_axes, const int64_t *axis_sizes,
                           const char *const *axis_names, const int *device_ids /* NULL: 0.. */,
                           jit_mesh **out);
void       jit_mesh_free(jit_mesh *m);
jit_status jit_sharding_create(const jit_mesh *m, const char *spec, jit_sharding **out);
void       jit_sharding_free(jit_sharding *s);
jit_status jit_device_put(const jit_array *a, const jit_sharding *s, jit_array **out); /* committed */
jit_status jit_array_visualize(const jit_array *a, FILE *out);

/* ---- processes (MPI) ---------------------------------------------------------------------------
   In a distributed context every rank calls jit_ctx_create collectively (MPI is initialized with
   MPI_THREAD_MULTIPLE if the program has not done it, and finalized with the last such context);
   n_devices is per process, device ids are global (rank r owns n_devices ids from r * n_devices)
   and a mesh may span every rank's devices. Every jit_call is collective: each rank calls the same
   function with the same signature; each runs the devices it owns. jit_array_to_host of an array
   on several processes' devices is collective too (every rank gets the whole array), and so is
   jit_device_put of such an array; an array on one process's devices is that process's alone. A rank that fails a call makes every rank's call
   fail naming it; $TJIT_COLLECTIVE_TIMEOUT_S (default 300) bounds every wait for another rank. */
int jit_process_index(const jit_ctx *ctx);   /* this rank, 0 when not distributed */
int jit_process_count(const jit_ctx *ctx);   /* 1 when not distributed */
/* jax.make_array_from_process_local_data: this process's part of a global array, laid out as
   the sharding's shards that this process's devices hold, in device order (each distinct block
   once: replicas on this process's devices share it). rank is the array's rank. */
jit_status jit_array_from_process_local(const jit_sharding *s, jit_dtype dt, int rank,
                                        const int64_t *global_shape, const void *local_data,
                                        size_t local_bytes, jit_array **out);

/* ---- jitted functions -------------------------------------------------------------------------- */
typedef struct jit_fn_opts {
  const char *name;         /* used in dumps and errors */
  int n_args, n_results;
  uint64_t donate_mask;     /* bit i: args[i]'s buffer may be reused for a result; the array
                               is deleted by the call (README "Donation") */
} jit_fn_opts;
jit_status jit_compile(jit_ctx *ctx, jit_trace_fn fn, void *user, const jit_fn_opts *opts,
                       jit_fn **out);   /* registers; compiles lazily per signature */
jit_status jit_call(jit_fn *f, jit_array *const *args, jit_array **results);
/* static args: bytes that are part of the cache key and visible to the trace function */
jit_status jit_call_static(jit_fn *f, const void *static_args, size_t static_len,
                           jit_array *const *args, jit_array **results);
const void *jit_trace_static_args(jit_trace *t, size_t *len);
/* ahead of time (JAX's f.lower(args).compile()): compiles the signature args select, without
   running it; JIT_OK at once when it is already compiled. Counted in stats like a call. */
jit_status jit_precompile(jit_fn *f, jit_array *const *args);
jit_status jit_precompile_static(jit_fn *f, const void *static_args, size_t static_len,
                                 jit_array *const *args);
void        jit_fn_free(jit_fn *f);

/* ---- inspection and timing --------------------------------------------------------------------- */
enum { JIT_DUMP_TRACED = 1, JIT_DUMP_OPTIMIZED = 2, JIT_DUMP_PARTITIONED = 4,
       JIT_DUMP_FUSED = 8, JIT_DUMP_C = 16, JIT_DUMP_LLVM = 32 };
/* dumps the last compiled signature of f (or the one args select, if args != NULL) */
jit_status jit_fn_dump(jit_fn *f, jit_array *const *args, unsigned what, FILE *out);

typedef struct jit_fn_stats {
  uint64_t calls, cache_hits, cache_misses, disk_cache_hits; /* calls: jit_call + jit_precompile */
  int      n_signatures, n_kernels;
  double   trace_ms, passes_ms, codegen_ms, llvm_ms;  /* summed over compiled signatures */
  double   last_call_us;                              /* wall time of the last jit_call */
  uint64_t peak_bytes;  /* live intermediate bytes at the peak of the last compiled signature
                           (results included, args and results written over donated args
                           excluded), over its compiled steps (the optimized IR's order at
                           opt_level 0) */
  uint64_t comm_bytes;  /* per call of the last compiled signature, when partitioned: the bytes its
                           collectives read from other devices' buffers, summed over devices */
  uint64_t kept_bytes;  /* held now by the cached signatures between calls: the packed copies of
                           dot operands that come back call after call (a weight passed again as
                           the same jit_array is not packed again), at most 256 MiB a signature;
                           freed with the jit_fn or when its signature is evicted */
} jit_fn_stats;
jit_status jit_fn_stats_get(const jit_fn *f, jit_fn_stats *out);

/* jax.profiler.trace: a Chrome trace-event JSON (opens in Perfetto / chrome://tracing) with the
   compile phases, each kernel per worker and device thread, collectives and copies. One profile
   runs at a time and records every thread of the process; stop writes it to path (on JIT_EIO the
   profile keeps running). $TJIT_PROFILE=file.json profiles the whole process instead. */
jit_status jit_profile_start(jit_ctx *ctx);
jit_status jit_profile_stop(jit_ctx *ctx, const char *path);
/* AOT export: the signature args select, as standalone C: DIR/NAME.c and DIR/NAME.h (NAME: the
   function's name), declaring int NAME(void *const *args, void *const *results) on dense C-order
   host data of the signature's dtypes and shapes (the header lists them); it returns 0 and is
   safe to call from several threads at once. Builds with cc -O2 -march=native alone; needs
   neither tjit nor LLVM. A partitioned signature, a scan or a kernel tjit interprets is
   JIT_EUNSUPPORTED (README "Exporting C"). */
jit_status jit_fn_export_c(jit_fn *f, jit_array *const *args, const char *dir);

/* ---- ops (while tracing) -----------------------------------------------------------------------
   Binary elementwise ops follow NumPy broadcasting. Operand dtypes must match, except that a
   scalar made by jit_scalar takes the other operand's dtype (a weak type; a weak result that
   reaches a function result becomes f32). Each op is a macro that records the caller's
   file:line (through jit_trace_at) and calls the function of the same name; (jit_add)(t, a, b)
   calls the function directly, with no location. */
typedef enum { JIT_EQ, JIT_NE, JIT_LT, JIT_LE, JIT_GT, JIT_GE } jit_cmp_op;

/* Sets the source location the next op records, and returns t. */
jit_trace *jit_trace_at(jit_trace *t, const char *file, int line);

jit_val jit_scalar(jit_trace *t, double v);
jit_val jit_full(jit_trace *t, jit_dtype dt, int rank, const int64_t *shape, double v);
jit_val jit_iota(jit_trace *t, jit_dtype dt, int rank, const int64_t *shape, int dim);

jit_val jit_neg(jit_trace *t, jit_val x);
jit_val jit_abs(jit_trace *t, jit_val x);
jit_val jit_exp(jit_trace *t, jit_val x);
jit_val jit_log(jit_trace *t, jit_val x);
jit_val jit_sqrt(jit_trace *t, jit_val x);
jit_val jit_rsqrt(jit_trace *t, jit_val x);
jit_val jit_tanh(jit_trace *t, jit_val x);
jit_val jit_logistic(jit_trace *t, jit_val x);
jit_val jit_sin(jit_trace *t, jit_val x);
jit_val jit_cos(jit_trace *t, jit_val x);
jit_val jit_erf(jit_trace *t, jit_val x);
jit_val jit_floor(jit_trace *t, jit_val x);
jit_val jit_relu(jit_trace *t, jit_val x);
jit_val jit_log1p(jit_trace *t, jit_val x);
jit_val jit_expm1(jit_trace *t, jit_val x);
jit_val jit_ceil(jit_trace *t, jit_val x);
jit_val jit_round(jit_trace *t, jit_val x);        /* to nearest, ties to even (jnp.round) */
jit_val jit_sign(jit_trace *t, jit_val x);         /* lax.sign: NaN -> NaN, -0 -> -0 */
jit_val jit_erf_inv(jit_trace *t, jit_val x);
jit_val jit_is_finite(jit_trace *t, jit_val x);    /* -> bool */
jit_val jit_not(jit_trace *t, jit_val x);          /* bool: logical; integers: bitwise */
/* complex (as jnp: a real operand is its own real part and conjugate, its imag part is 0) */
jit_val jit_real(jit_trace *t, jit_val x);         /* c64 -> f32, c128 -> f64 */
jit_val jit_imag(jit_trace *t, jit_val x);
jit_val jit_conj(jit_trace *t, jit_val x);

jit_val jit_add(jit_trace *t, jit_val a, jit_val b);
jit_val jit_sub(jit_trace *t, jit_val a, jit_val b);
jit_val jit_mul(jit_trace *t, jit_val a, jit_val b);
jit_val jit_div(jit_trace *t, jit_val a, jit_val b);
jit_val jit_max(jit_trace *t, jit_val a, jit_val b);
jit_val jit_min(jit_trace *t, jit_val a, jit_val b);
jit_val jit_pow(jit_trace *t, jit_val a, jit_val b);
jit_val jit_complex(jit_trace *t, jit_val re, jit_val im); /* f32 -> c64, f64 -> c128 */
jit_val jit_rem(jit_trace *t, jit_val a, jit_val b);   /* fmod / truncated remainder (lax.rem) */
jit_val jit_atan2(jit_trace *t, jit_val a, jit_val b);
jit_val jit_and(jit_trace *t, jit_val a, jit_val b);   /* bool and integers */
jit_val jit_or(jit_trace *t, jit_val a, jit_val b);
jit_val jit_xor(jit_trace *t, jit_val a, jit_val b);
/* integers; an amount outside [0, bits) gives 0 (left, logical) or the sign fill (arithmetic) */
jit_val jit_shift_left(jit_trace *t, jit_val a, jit_val b);
jit_val jit_shift_right_logical(jit_trace *t, jit_val a, jit_val b);
jit_val jit_shift_right_arithmetic(jit_trace *t, jit_val a, jit_val b);
jit_val jit_clamp(jit_trace *t, jit_val lo, jit_val x, jit_val hi);   /* lax.clamp */

jit_val jit_cmp(jit_trace *t, jit_cmp_op op, jit_val a, jit_val b);   /* -> bool */
jit_val jit_select(jit_trace *t, jit_val pred, jit_val a, jit_val b);
jit_val jit_convert(jit_trace *t, jit_val x, jit_dtype dt);
jit_val jit_reshape(jit_trace *t, jit_val x, int rank, const int64_t *shape);
jit_val jit_transpose(jit_trace *t, jit_val x, const int *perm);
jit_val jit_broadcast_to(jit_trace *t, jit_val x, int rank, const int64_t *shape);
jit_val jit_slice(jit_trace *t, jit_val x, const int64_t *start, const int64_t *limit,
                  const int64_t *stride /* NULL: 1 */);
jit_val jit_concat(jit_trace *t, int n, const jit_val *xs, int axis);
/* lax.pad: lo/hi/interior per dim (NULL interior: 0); negative lo/hi crop */
jit_val jit_pad(jit_trace *t, jit_val x, jit_val pad_value /* scalar */, const int64_t *lo,
                const int64_t *hi, const int64_t *interior);
jit_val jit_rev(jit_trace *t, jit_val x, int n_axes, const int *axes);          /* lax.rev */
/* x[idx] along axis (jnp.take with JAX's indexing semantics): result shape
   x.shape[:axis] + idx.shape + x.shape[axis+1:]; idx is any integer dtype; negative entries
   count from the end; entries still out of range are clamped */
jit_val jit_take(jit_trace *t, jit_val x, jit_val idx, int axis);
/* jnp.take_along_axis: idx has x's rank; other dims broadcast as in NumPy; clamped as jit_take */
jit_val jit_take_along_axis(jit_trace *t, jit_val x, jit_val idx, int axis);
/* x.at[idx].add(u) / x.at[idx].set(u) along axis: u has jit_take(x, idx, axis)'s shape;
   duplicate indices add up (add) or one of them wins (set); out-of-range entries are dropped */
jit_val jit_scatter_add(jit_trace *t, jit_val x, jit_val idx, jit_val updates, int axis);
jit_val jit_scatter_set(jit_trace *t, jit_val x, jit_val idx, jit_val updates, int axis);
/* lax.dynamic_slice / dynamic_update_slice: one integer scalar start per dim of x; starts are
   clamped so that the window lies inside x */
jit_val jit_dynamic_slice(jit_trace *t, jit_val x, const jit_val *start, const int64_t *sizes);
jit_val jit_dynamic_update_slice(jit_trace *t, jit_val x, jit_val update, const jit_val *start);
jit_val jit_reduce_sum(jit_trace *t, jit_val x, int n_axes, const int *axes);
jit_val jit_reduce_max(jit_trace *t, jit_val x, int n_axes, const int *axes);
jit_val jit_reduce_min(jit_trace *t, jit_val x, int n_axes, const int *axes);
jit_val jit_reduce_prod(jit_trace *t, jit_val x, int n_axes, const int *axes);
jit_val jit_reduce_and(jit_trace *t, jit_val x, int n_axes, const int *axes);   /* bool: all */
jit_val jit_reduce_or(jit_trace *t, jit_val x, int n_axes, const int *axes);    /* bool: any */
/* index of the first maximum (minimum) along axis; NaN counts as the maximum (and minimum),
   as jnp.argmax; the axis is removed */
jit_val jit_argmax(jit_trace *t, jit_val x, int axis, jit_dtype index_dtype);
jit_val jit_argmin(jit_trace *t, jit_val x, int axis, jit_dtype index_dtype);
/* lax.cumsum & co.: inclusive, along axis, from the end when reverse != 0 */
jit_val jit_cumsum(jit_trace *t, jit_val x, int axis, int reverse);
jit_val jit_cumprod(jit_trace *t, jit_val x, int axis, int reverse);
jit_val jit_cummax(jit_trace *t, jit_val x, int axis, int reverse);
jit_val jit_cummin(jit_trace *t, jit_val x, int axis, int reverse);
/* lax.sort: n operands of one shape, sorted together along axis by the first n_keys of them
   (lexicographically), ascending, stable; NaNs last. out[i] is xs[i] reordered. */
void jit_sort(jit_trace *t, int n, const jit_val *xs, int axis, int n_keys, jit_val *out);
/* lax.top_k along the last axis: the k largest, largest first, ties by lower index; i32 indices */
void jit_top_k(jit_trace *t, jit_val x, int k, jit_val *values, jit_val *indices);
jit_val jit_matmul(jit_trace *t, jit_val a, jit_val b);   /* NumPy matmul semantics */
jit_val jit_dot_general(jit_trace *t, jit_val a, jit_val b,
                        int n_batch, const int *a_batch, const int *b_batch,
                        int n_contract, const int *a_contract, const int *b_contract);
int            jit_val_rank(jit_trace *t, jit_val x);       /* -1 for an invalid value */
const int64_t *jit_val_shape(jit_trace *t, jit_val x);      /* NULL for an invalid value */
jit_dtype      jit_val_dtype(jit_trace *t, jit_val x);
void           jit_trace_fail(jit_trace *t, const char *message);

/* random numbers (jax.random, bit for bit, jax_threefry_partitionable's layout). Keys are u32[2]
   values, as jax.random.PRNGKey(seed) returns: {seed >> 32, seed & 0xffffffff}. */
jit_val jit_random_key(jit_trace *t, uint64_t seed);                   /* u32[2] */
jit_val jit_random_split(jit_trace *t, jit_val key, int64_t n);        /* u32[n,2] */
jit_val jit_random_fold_in(jit_trace *t, jit_val key, jit_val data);   /* data: integer scalar */
jit_val jit_random_bits(jit_trace *t, jit_val key, jit_dtype dt /* JIT_U32, JIT_U64 */,
                        int rank, const int64_t *shape);
/* jax.random.uniform in [lo, hi): the same floats as JAX, bit for bit */
jit_val jit_random_uniform(jit_trace *t, jit_val key, jit_dtype dt, int rank, const int64_t *shape,
                           double lo, double hi);
/* jax.random.normal: within 2 ulp of JAX's values (it goes through erf_inv) */
jit_val jit_random_normal(jit_trace *t, jit_val key, jit_dtype dt, int rank, const int64_t *shape);
jit_val jit_random_bernoulli(jit_trace *t, jit_val key, double p, int rank, const int64_t *shape);
/* lax.conv_general_dilated. Specs name the dims as JAX's dimension_numbers do, e.g.
   "NHWC", "HWIO", "NHWC" (N batch, C feature, I/O kernel in/out features, other letters spatial);
   n spatial dims = rank - 2; NULL strides/dilations: 1; NULL pads: 0 */
jit_val jit_conv(jit_trace *t, jit_val lhs, jit_val rhs, const int64_t *strides,
                 const int64_t *pad_lo, const int64_t *pad_hi, const int64_t *lhs_dilation,
                 const int64_t *rhs_dilation, const char *lhs_spec, const char *rhs_spec,
                 const char *out_spec, int64_t feature_group_count);
/* lax.reduce_window (max-pool, avg-pool as sum / count): window, strides per dim (NULL: 1),
   pads per dim (NULL: 0), init = the kind's identity */
typedef enum { JIT_WINDOW_SUM, JIT_WINDOW_MAX, JIT_WINDOW_MIN } jit_window_kind;
jit_val jit_reduce_window(jit_trace *t, jit_val x, jit_window_kind kind, const int64_t *window,
                          const int64_t *strides, const int64_t *pad_lo, const int64_t *pad_hi);
/* lax.fft over the last n_dims (1..3) dims: FFT/IFFT complex -> complex, RFFT real -> complex
   (last dim n/2+1), IRFFT complex -> real of the given lengths (the operand's last dims; for
   IRFFT the last is lengths[n_dims-1]/2+1). IFFT and IRFFT divide by the product of lengths. */
typedef enum { JIT_FFT, JIT_IFFT, JIT_RFFT, JIT_IRFFT } jit_fft_type;
jit_val jit_fft(jit_trace *t, jit_val x, jit_fft_type type, int n_dims, const int64_t *lengths);

/* ---- transformations (while tracing) ----------------------------------------------------------- */
/* vmap: fn traced on one slice; in_axes[i] = -1: args[i] is not batched */
void jit_vmap(jit_trace *t, jit_trace_fn fn, void *user,
              int n_args, const jit_val *args, const int *in_axes,
              int n_results, jit_val *results, const int *out_axes);
/* value_and_grad: fn's result 0 is a scalar loss, results 1..n_aux are aux outputs.
   results = [loss, aux..., one gradient per set bit of wrt_mask, in arg order] */
void jit_value_and_grad(jit_trace *t, jit_trace_fn fn, void *user,
                        int n_args, const jit_val *args, uint64_t wrt_mask,
                        int n_aux, jit_val *results);
/* scan: body(carry..., x_t...) -> (new carry..., y_t...); xs are sliced along axis 0 */
typedef void (*jit_scan_fn)(jit_trace *t, const jit_val *carry, const jit_val *x,
                            jit_val *new_carry, jit_val *y, void *user);
void jit_scan(jit_trace *t, jit_scan_fn body, void *user,
              int n_carry, const jit_val *init, int n_xs, const jit_val *xs, int64_t length,
              int reverse, jit_val *final_carry, int n_ys, jit_val *ys);
/* checkpoint (remat): fn's intermediates are recomputed in the backward pass, not stored */
void jit_checkpoint(jit_trace *t, jit_trace_fn fn, void *user,
                    int n_args, const jit_val *args, int n_results, jit_val *results);
/* sharding inside a traced function */
jit_val jit_with_sharding_constraint(jit_trace *t, jit_val x, const jit_sharding *s);
/* shard_map: fn sees per-shard blocks; collectives name mesh axes */
void jit_shard_map(jit_trace *t, jit_trace_fn fn, void *user, const jit_mesh *m,
                   int n_args, const jit_val *args, const char *const *in_specs,
                   int n_results, jit_val *results, const char *const *out_specs);
jit_val jit_psum(jit_trace *t, jit_val x, const char *axis);
jit_val jit_pmean(jit_trace *t, jit_val x, const char *axis);
jit_val jit_all_gather(jit_trace *t, jit_val x, const char *axis, int dim);
jit_val jit_axis_index(jit_trace *t, const char *axis);

/* ---- control flow (while tracing) ------------------------------------------------------------ */
/* lax.cond: pred is a bool scalar; each branch is traced once on the same args and must
   return results of the same types. lax.switch: index is an integer scalar, clamped to
   [0, n_branches). */
void jit_cond(jit_trace *t, jit_val pred, jit_trace_fn true_fn, jit_trace_fn false_fn, void *user,
              int n_args, const jit_val *args, int n_results, jit_val *results);
void jit_switch(jit_trace *t, jit_val index, int n_branches, const jit_trace_fn *branches,
                void *user, int n_args, const jit_val *args, int n_results, jit_val *results);
/* lax.while_loop: cond_fn(carry...) -> results[0], a bool scalar; body_fn(carry...) -> carry... */
void jit_while(jit_trace *t, jit_trace_fn cond_fn, jit_trace_fn body_fn, void *user,
               int n_carry, const jit_val *init, jit_val *final_carry);
/* lax.fori_loop with static bounds: body(i, carry...) -> carry...; a scan, so differentiable */
typedef void (*jit_fori_fn)(jit_trace *t, jit_val i, const jit_val *carry, jit_val *new_carry,
                            void *user);
void jit_fori_loop(jit_trace *t, int64_t lower, int64_t upper, jit_fori_fn body, void *user,
                   int n_carry, const jit_val *init, jit_val *final_carry);

/* ---- location-capturing macros -------------------------------------------------------------- */
#ifndef TJIT_NO_LOC_MACROS
#define JIT__AT(t) jit_trace_at((t), __FILE__, __LINE__)
/* Variadic, so that arguments holding commas (compound literals) pass through whole. */
#define jit_scalar(t, ...) jit_scalar(JIT__AT(t), __VA_ARGS__)
#define jit_full(t, ...) jit_full(JIT__AT(t), __VA_ARGS__)
#define jit_iota(t, ...) jit_iota(JIT__AT(t), __VA_ARGS__)
#define jit_neg(t, ...) jit_neg(JIT__AT(t), __VA_ARGS__)
#define jit_abs(t, ...) jit_abs(JIT__AT(t), __VA_ARGS__)
#define jit_exp(t, ...) jit_exp(JIT__AT(t), __VA_ARGS__)
#define jit_log(t, ...) jit_log(JIT__AT(t), __VA_ARGS__)
#define jit_sqrt(t, ...) jit_sqrt(JIT__AT(t), __VA_ARGS__)
#define jit_rsqrt(t, ...) jit_rsqrt(JIT__AT(t), __VA_ARGS__)
#define jit_tanh(t, ...) jit_tanh(JIT__AT(t), __VA_ARGS__)
#define jit_logistic(t, ...) jit_logistic(JIT__AT(t), __VA_ARGS__)
#define jit_sin(t, ...) jit_sin(JIT__AT(t), __VA_ARGS__)
#define jit_cos(t, ...) jit_cos(JIT__AT(t), __VA_ARGS__)
#define jit_erf(t, ...) jit_erf(JIT__AT(t), __VA_ARGS__)
#define jit_floor(t, ...) jit_floor(JIT__AT(t), __VA_ARGS__)
#define jit_relu(t, ...) jit_relu(JIT__AT(t), __VA_ARGS__)
#define jit_log1p(t, ...) jit_log1p(JIT__AT(t), __VA_ARGS__)
#define jit_expm1(t, ...) jit_expm1(JIT__AT(t), __VA_ARGS__)
#define jit_ceil(t, ...) jit_ceil(JIT__AT(t), __VA_ARGS__)
#define jit_round(t, ...) jit_round(JIT__AT(t), __VA_ARGS__)
#define jit_sign(t, ...) jit_sign(JIT__AT(t), __VA_ARGS__)
#define jit_erf_inv(t, ...) jit_erf_inv(JIT__AT(t), __VA_ARGS__)
#define jit_is_finite(t, ...) jit_is_finite(JIT__AT(t), __VA_ARGS__)
#define jit_not(t, ...) jit_not(JIT__AT(t), __VA_ARGS__)
#define jit_real(t, ...) jit_real(JIT__AT(t), __VA_ARGS__)
#define jit_imag(t, ...) jit_imag(JIT__AT(t), __VA_ARGS__)
#define jit_conj(t, ...) jit_conj(JIT__AT(t), __VA_ARGS__)
#define jit_complex(t, ...) jit_complex(JIT__AT(t), __VA_ARGS__)
#define jit_add(t, ...) jit_add(JIT__AT(t), __VA_ARGS__)
#define jit_sub(t, ...) jit_sub(JIT__AT(t), __VA_ARGS__)
#define jit_mul(t, ...) jit_mul(JIT__AT(t), __VA_ARGS__)
#define jit_div(t, ...) jit_div(JIT__AT(t), __VA_ARGS__)
#define jit_max(t, ...) jit_max(JIT__AT(t), __VA_ARGS__)
#define jit_min(t, ...) jit_min(JIT__AT(t), __VA_ARGS__)
#define jit_pow(t, ...) jit_pow(JIT__AT(t), __VA_ARGS__)
#define jit_rem(t, ...) jit_rem(JIT__AT(t), __VA_ARGS__)
#define jit_atan2(t, ...) jit_atan2(JIT__AT(t), __VA_ARGS__)
#define jit_and(t, ...) jit_and(JIT__AT(t), __VA_ARGS__)
#define jit_or(t, ...) jit_or(JIT__AT(t), __VA_ARGS__)
#define jit_xor(t, ...) jit_xor(JIT__AT(t), __VA_ARGS__)
#define jit_shift_left(t, ...) jit_shift_left(JIT__AT(t), __VA_ARGS__)
#define jit_shift_right_logical(t, ...) jit_shift_right_logical(JIT__AT(t), __VA_ARGS__)
#define jit_shift_right_arithmetic(t, ...) jit_shift_right_arithmetic(JIT__AT(t), __VA_ARGS__)
#define jit_clamp(t, ...) jit_clamp(JIT__AT(t), __VA_ARGS__)
#define jit_cmp(t, ...) jit_cmp(JIT__AT(t), __VA_ARGS__)
#define jit_select(t, ...) jit_select(JIT__AT(t), __VA_ARGS__)
#define jit_convert(t, ...) jit_convert(JIT__AT(t), __VA_ARGS__)
#define jit_reshape(t, ...) jit_reshape(JIT__AT(t), __VA_ARGS__)
#define jit_transpose(t, ...) jit_transpose(JIT__AT(t), __VA_ARGS__)
#define jit_broadcast_to(t, ...) jit_broadcast_to(JIT__AT(t), __VA_ARGS__)
#define jit_slice(t, ...) jit_slice(JIT__AT(t), __VA_ARGS__)
#define jit_concat(t, ...) jit_concat(JIT__AT(t), __VA_ARGS__)
#define jit_pad(t, ...) jit_pad(JIT__AT(t), __VA_ARGS__)
#define jit_rev(t, ...) jit_rev(JIT__AT(t), __VA_ARGS__)
#define jit_take(t, ...) jit_take(JIT__AT(t), __VA_ARGS__)
#define jit_take_along_axis(t, ...) jit_take_along_axis(JIT__AT(t), __VA_ARGS__)
#define jit_scatter_add(t, ...) jit_scatter_add(JIT__AT(t), __VA_ARGS__)
#define jit_scatter_set(t, ...) jit_scatter_set(JIT__AT(t), __VA_ARGS__)
#define jit_dynamic_slice(t, ...) jit_dynamic_slice(JIT__AT(t), __VA_ARGS__)
#define jit_dynamic_update_slice(t, ...) jit_dynamic_update_slice(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_sum(t, ...) jit_reduce_sum(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_max(t, ...) jit_reduce_max(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_min(t, ...) jit_reduce_min(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_prod(t, ...) jit_reduce_prod(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_and(t, ...) jit_reduce_and(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_or(t, ...) jit_reduce_or(JIT__AT(t), __VA_ARGS__)
#define jit_argmax(t, ...) jit_argmax(JIT__AT(t), __VA_ARGS__)
#define jit_argmin(t, ...) jit_argmin(JIT__AT(t), __VA_ARGS__)
#define jit_cumsum(t, ...) jit_cumsum(JIT__AT(t), __VA_ARGS__)
#define jit_cumprod(t, ...) jit_cumprod(JIT__AT(t), __VA_ARGS__)
#define jit_cummax(t, ...) jit_cummax(JIT__AT(t), __VA_ARGS__)
#define jit_cummin(t, ...) jit_cummin(JIT__AT(t), __VA_ARGS__)
#define jit_sort(t, ...) jit_sort(JIT__AT(t), __VA_ARGS__)
#define jit_top_k(t, ...) jit_top_k(JIT__AT(t), __VA_ARGS__)
#define jit_matmul(t, ...) jit_matmul(JIT__AT(t), __VA_ARGS__)
#define jit_dot_general(t, ...) jit_dot_general(JIT__AT(t), __VA_ARGS__)
#define jit_vmap(t, ...) jit_vmap(JIT__AT(t), __VA_ARGS__)
#define jit_value_and_grad(t, ...) jit_value_and_grad(JIT__AT(t), __VA_ARGS__)
#define jit_scan(t, ...) jit_scan(JIT__AT(t), __VA_ARGS__)
#define jit_checkpoint(t, ...) jit_checkpoint(JIT__AT(t), __VA_ARGS__)
#define jit_with_sharding_constraint(t, ...) jit_with_sharding_constraint(JIT__AT(t), __VA_ARGS__)
#define jit_shard_map(t, ...) jit_shard_map(JIT__AT(t), __VA_ARGS__)
#define jit_psum(t, ...) jit_psum(JIT__AT(t), __VA_ARGS__)
#define jit_pmean(t, ...) jit_pmean(JIT__AT(t), __VA_ARGS__)
#define jit_all_gather(t, ...) jit_all_gather(JIT__AT(t), __VA_ARGS__)
#define jit_axis_index(t, ...) jit_axis_index(JIT__AT(t), __VA_ARGS__)
#define jit_cond(t, ...) jit_cond(JIT__AT(t), __VA_ARGS__)
#define jit_switch(t, ...) jit_switch(JIT__AT(t), __VA_ARGS__)
#define jit_while(t, ...) jit_while(JIT__AT(t), __VA_ARGS__)
#define jit_fori_loop(t, ...) jit_fori_loop(JIT__AT(t), __VA_ARGS__)
#define jit_trace_fail(t, ...) jit_trace_fail(JIT__AT(t), __VA_ARGS__)
#define jit_random_key(t, ...) jit_random_key(JIT__AT(t), __VA_ARGS__)
#define jit_random_split(t, ...) jit_random_split(JIT__AT(t), __VA_ARGS__)
#define jit_random_fold_in(t, ...) jit_random_fold_in(JIT__AT(t), __VA_ARGS__)
#define jit_random_bits(t, ...) jit_random_bits(JIT__AT(t), __VA_ARGS__)
#define jit_random_uniform(t, ...) jit_random_uniform(JIT__AT(t), __VA_ARGS__)
#define jit_random_normal(t, ...) jit_random_normal(JIT__AT(t), __VA_ARGS__)
#define jit_random_bernoulli(t, ...) jit_random_bernoulli(JIT__AT(t), __VA_ARGS__)
#define jit_conv(t, ...) jit_conv(JIT__AT(t), __VA_ARGS__)
#define jit_reduce_window(t, ...) jit_reduce_window(JIT__AT(t), __VA_ARGS__)
#define jit_fft(t, ...) jit_fft(JIT__AT(t), __VA_ARGS__)
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* TJIT_H */
