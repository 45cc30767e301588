/* runtime.h: the runtime's internal structures (context, arrays, jitted functions and their
 * signature cache) and the prototypes shared between src/runtime/ files, grouped by file. */
#ifndef TJIT_RUNTIME_H
#define TJIT_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "ir/mesh_spec.h" /* JIT_MAX_DEVICES */
#include "tjit.h"

#define JIT_MAX_FN_ARGS 64    /* n_args of a jit_fn: 0..JIT_MAX_FN_ARGS */
#define JIT_MAX_FN_RESULTS 64 /* n_results of a jit_fn: 1..JIT_MAX_FN_RESULTS */
#define JIT_ARRAY_ALIGN 64    /* every array buffer starts on a cache line (and AVX-512 vector) */
/* Compiled signatures a context keeps (over all its functions) unless TJIT_MAX_SIGNATURES says
   otherwise. A tiny signature costs ~90 KB (IR, executable, code pages), a large one a few hundred:
   1024 bounds a context at ~100-300 MB of them while staying far above the working set of a
   program that does not recompile for every new shape. docs/CACHE.md. */
#define JIT_DEFAULT_MAX_SIGNATURES 1024

/* ---- context (ctx.c) --------------------------------------------------------------------------- */
struct pool;
struct cg_jit;
struct cg_disk_cache;
struct jit_sig;
struct dist;
struct jit_ctx {
  int n_devices;     /* virtual CPU devices of every process (global ids 0..n_devices-1), >= 1 */
  int n_local_devices; /* those this process runs: ids process_index * n_local_devices on */
  int process_index, process_count; /* this MPI rank and the ranks (0 and 1: one process) */
  struct dist *dist; /* the MPI side of a distributed context (distributed.c); NULL: one process */
  int n_threads;     /* worker threads of the pool, >= 1 */
  char *cache_dir;   /* owned copy; NULL: no persistent cache */
  int opt_level;     /* 0..3 */
  struct pool *pool; /* n_threads workers (the caller is one), started with the context */
  struct cg_jit *jit;/* the LLJIT every signature's kernels load into; NULL at opt_level 0 */
  struct cg_disk_cache *disk; /* objects on disk in cache_dir; NULL: none (or opt_level 0) */
  struct buf_pool *buffers;   /* freed array buffers kept for reuse (runtime/buffers.h) */
  struct pool *devices;       /* one thread per device, started by the first partitioned call */
  pthread_mutex_t devices_mu; /* guards starting them */
  char target[96];            /* what jit_ctx_target says: the CPU and vector width codegen uses */
  /* The LRU bound on compiled signatures (sig_lru.c). Lock order: sigs_mu, then a jit_fn's mu;
     nothing holding a jit_fn's mu takes sigs_mu. */
  pthread_mutex_t sigs_mu;    /* guards sigs and n_sigs */
  struct jit_sig *sigs;       /* every cached signature of every jit_fn, linked by lru_prev/next */
  int n_sigs;
  _Atomic int max_sigs;       /* the bound: $TJIT_MAX_SIGNATURES or JIT_DEFAULT_MAX_SIGNATURES;
                                 0: none */
  _Atomic uint64_t sig_clock; /* ticks once per call: signatures' last_use stamps */
};
/* The device threads (ctx->n_local_devices of them, the caller being the first's), started on first
   use: a partitioned program runs device d on thread d, each device needing its own thread since
   a collective waits for all of its group. */
jit_status ctx_device_threads(jit_ctx *ctx, struct pool **out);

/* ---- processes (distributed.c) -------------------------------------------------------------------
   A distributed context is one of several MPI ranks'; every jit_call on it is collective: the
   ranks agree on it (dist_call_begin) before any collective runs, and on its outcome after
   (dist_call_end), so that a rank that fails or never arrives makes every rank fail naming it. */
/* Joins the MPI job when opts or $TJIT_DISTRIBUTED ask (collective): ctx->n_devices becomes
   global, ctx->n_local_devices the option's count. Otherwise one process. */
jit_status dist_open(jit_ctx *ctx, int distributed);
void dist_close(jit_ctx *ctx); /* collective; NULL dist is a no-op */
static inline bool ctx_device_local(const jit_ctx *ctx, int device_id) {
  return device_id / ctx->n_local_devices == ctx->process_index;
}
bool mesh_all_local(const jit_mesh *m); /* every device of m is this process's */
/* The process that owns every device of m, or -1 when they belong to several. */
int mesh_process(const jit_mesh *m);
/* Reading a committed array on mesh m (who names the entry): *collective is false when this
   process holds every block, true when the blocks span processes (every rank reads together);
   JIT_EINVAL when another process alone holds them. */
jit_status mesh_read_access(const jit_mesh *m, const char *who, bool *collective);
/* Hash of what a signature runs (its optimized IR), compared between ranks before a call. */
uint64_t dist_program_hash(const ir_func *f);
/* The opening of a collective call: takes the context's call lock, exchanges this rank's local
   status (and message) and the signature's key and program hashes. On success the caller runs the
   call, then calls dist_call_end; on failure (this rank's own, another's, different programs,
   a rank that never arrived) the call is over and the lock released. */
jit_status dist_call_begin(jit_ctx *ctx, const char *fn_name, jit_status st, uint64_t key,
                           uint64_t program);
/* The closing: exchanges the run's status; returns st or the failure of the rank that failed
   first (named), and releases the lock. */
jit_status dist_call_end(jit_ctx *ctx, const char *fn_name, jit_status st);
/* This rank failed the current call (st, jit_last_error()): other ranks stop waiting for it. */
void dist_report_failure(jit_ctx *ctx, jit_status st);
/* The collectives' transport of a mesh spanning several processes (not collective). */
struct coll_transport;
jit_status dist_transport_new(jit_ctx *ctx, const jit_mesh *mesh, const ir_mesh *im,
                              struct coll_transport **out);
/* Every rank sends `bytes` of send (heap memory: it may be kept by the link if a peer never
   arrives; *send_kept then says the caller must not free it) and receives each other rank's into
   recv[r] (recv_bytes[r]); collective, with the call lock. */
jit_status dist_exchange(jit_ctx *ctx, void *send, size_t bytes, void *const *recv,
                         const size_t *recv_bytes, bool *send_kept, const char *what);

/* Payload bytes this rank has sent to others through ctx (0 when not distributed): what a
   benchmark reports as communication. */
uint64_t dist_bytes_sent(const jit_ctx *ctx);

/* ---- arrays (array.c) -------------------------------------------------------------------------- */
struct jit_array {
  jit_ctx *ctx;
  jit_dtype dtype;
  int rank;
  int64_t shape[JIT_MAX_RANK]; /* entries past rank are 0 */
  void *data;                  /* dense row-major, JIT_ARRAY_ALIGN-aligned; NULL iff committed */
  size_t nbytes;               /* numel * dtype size */
  struct buf_pool *pool;       /* a counted reference to where data goes back when freed */
  size_t cap;                  /* data's block size in that pool (>= nbytes) */
  /* Placement (runtime/sharding.h). Uncommitted (jit_array_from_host, jit_call results): sharding
     and shards NULL, the value in data on device 0. Committed (jit_device_put): data NULL. */
  struct jit_sharding *sharding; /* a counted reference; NULL: uncommitted */
  void **shards;               /* one buffer per mesh device (mesh order), each row-major of
                                  sharding_shard_shape, the device's block at its origin */
  size_t shard_nbytes;         /* bytes of each shard buffer */
  struct buf_pool *shard_pool; /* a counted reference to where shards go back (NULL: free()) */
  size_t shard_cap;            /* each shard's block size in that pool */
  uint64_t bytes_moved;        /* bytes jit_device_put copied between devices to make this array */
  uint64_t serial;             /* the contents' identity (data's, or the shards'), unique in the
                                  process (0: not named): arrays are immutable, and a donated one
                                  is deleted, its buffers taken by a new array with a serial of
                                  its own */
  char donated_to[48];         /* non-empty: donated to a call of this function, and deleted (no
                                  data, no shards); only jit_array_free may still take it */
};

/* A serial no array has had (jit_array.serial), for a new array's contents. */
uint64_t array_next_serial(void);
/* Byte size of dt[shape]; false when the product overflows size_t. Shape must be validated. */
bool array_byte_size(jit_dtype dt, int rank, const int64_t *shape, size_t *out);
/* An array of type t with uninitialized contents: how the executor makes its outputs.
   t must be a valid type (as the verifier guarantees for IR results). */
jit_status array_new_type(jit_ctx *ctx, const ir_type *t, jit_array **out);
/* The ir_type of an array (for the tracer's param types and the cache key). */
void array_type(const jit_array *a, ir_type *out);
/* JIT_EINVAL naming a as donated when it was: what every entry but jit_array_free checks. */
jit_status array_check_live(const jit_array *a, const char *who);
/* A new uncommitted array of type t (of donor's byte size) that takes donor's buffer, as a result
   written in place over a donated arg; donor keeps no buffer. Donor must be uncommitted. */
jit_status array_adopt(jit_array *donor, const ir_type *t, jit_array **out);
/* Marks a as donated to fn_name and gives back whatever buffers it still holds. */
void array_delete_donated(jit_array *a, const char *fn_name);

/* ---- signature cache (cache.c) ------------------------------------------------------------------
   One entry per compiled signature of a jit_fn, keyed by every arg's (dtype, rank, shape) and the
   static bytes. An entry's key and code do not change after insertion; it is counted (refs): the
   cache holds one reference, and each call running it another, taken under the jit_fn's lock, so
   that an entry evicted (sig_lru.c) or dropped while a call runs it is freed by its last user. */
typedef struct jit_sig {
  struct jit_sig *next;       /* hash chain */
  uint64_t hash;
  int index;                  /* the jit_fn's compile count when it was made: sigN in dump names */
  struct jit_fn *fn;          /* the owner, whose cache an eviction removes it from */
  atomic_int refs;            /* the cache's reference + one per call using it */
  _Atomic uint64_t last_use;  /* ctx->sig_clock at its last call: the LRU order */
  struct jit_sig *lru_prev, *lru_next; /* in ctx->sigs while admitted (guarded by ctx->sigs_mu) */
  bool admitted;              /* in ctx->sigs (guarded by ctx->sigs_mu) */
  int n_args;
  ir_type *arg_types;         /* n_args (malloc'd) */
  struct jit_sharding **arg_shardings; /* n_args counted references (NULL: uncommitted), or NULL
                                 when no arg is committed: part of the key */
  unsigned char *static_bytes;/* static_len bytes (malloc'd; NULL when static_len is 0) */
  size_t static_len;
  ir_func *traced;            /* as the tracer produced it, kept for dumps */
  ir_func *optimized;         /* what runs (through the interpreter at opt_level 0) */
  struct exec *exe;           /* the compiled executable (opt_level > 0); of spmd->local when
                                 partitioned */
  struct ir_spmd *spmd;       /* the per-device program when the signature is partitioned */
  struct coll_transport *world; /* its devices' collectives */
  uint64_t program_hash;      /* dist_program_hash of optimized, in a distributed context */
  double trace_ms, passes_ms;
} jit_sig;

typedef struct sig_cache {
  jit_sig **buckets;          /* n_buckets chains; n_buckets is 0 or a power of two */
  size_t n_buckets;
  jit_sig **order;            /* every entry in insertion order (index ascending, for "last") */
  int n, cap;
  int next_index;             /* entries ever inserted: the next one's index */
} sig_cache;

/* Hash of a call's key, computed from the args themselves so that a warm lookup allocates nothing. */
uint64_t sig_hash(int n_args, jit_array *const *args, const void *static_args, size_t static_len);
jit_sig *sig_cache_find(const sig_cache *c, uint64_t hash, int n_args, jit_array *const *args,
                        const void *static_args, size_t static_len);
/* A new entry holding a copy of the key (traced/optimized NULL), not yet inserted. */
jit_status sig_new(uint64_t hash, int n_args, jit_array *const *args, const void *static_args,
                   size_t static_len, jit_sig **out);
void sig_free(jit_sig *s);
/* Drops a reference; the last one frees s (its executable and code memory). NULL is a no-op. */
void sig_unref(jit_sig *s);
/* Inserts s (taking the reference it was made with) and sets s->index; on failure s is still the
   caller's. */
jit_status sig_cache_insert(sig_cache *c, jit_sig *s);
/* Unlinks s from c, keeping the order of the others; the cache's reference is now the caller's. */
void sig_cache_remove(sig_cache *c, jit_sig *s);
/* Drops the cache's reference to every entry. */
void sig_cache_free(sig_cache *c);

/* ---- the LRU bound over a context's signatures (sig_lru.c) ---------------------------------------
   Every signature a jit_fn caches is admitted into its context's list; when the list is longer
   than ctx->max_sigs, the least recently called signatures of any function are removed from their
   caches and unreferenced, so their code memory goes back to LLVM once no call runs them. */
/* $TJIT_MAX_SIGNATURES (a whole number >= 0; 0: no bound) into ctx->max_sigs. */
jit_status sig_lru_init(jit_ctx *ctx);
/* Admits s, freshly inserted in its jit_fn's cache, and evicts past the bound (never s itself).
   The caller holds no jit_fn's mu. */
void sig_lru_admit(jit_ctx *ctx, jit_sig *s);
/* Marks s as used now. Lock-free: the hot path of a warm call. */
void sig_lru_touch(jit_ctx *ctx, jit_sig *s);
/* Takes every signature of f out of the list (jit_fn_free, before its cache goes). */
void sig_lru_forget(jit_ctx *ctx, const struct jit_fn *f);
/* Sets the bound (0: none) and evicts down to it; for tests. Returns the previous bound. */
int sig_lru_set_max(jit_ctx *ctx, int max);

struct exec_stats;
/* ---- partitioned calls (spmd_call.c) ----------------------------------------------------------
   A signature is partitioned when an arg is committed or the function pins a sharding: its
   optimized IR goes through ir_partition over that mesh. */
/* The mesh of a call: the first committed arg's, else the first `sharding` or `shard_map` op's
   in g; NULL when none exists. JIT_ESHARDING when such an op names another mesh than the args,
   JIT_EINVAL when its mesh belongs to another context than ctx. */
jit_status spmd_choose_mesh(const jit_ctx *ctx, const char *fn_name, int n_args,
                            jit_array *const *args, const ir_func *g, struct jit_mesh **out);
/* Partitions s->optimized over mesh into s->spmd, s->world and (opt_level > 0) s->exe, whose
   results may reuse the buffers of the params donate marks (exec_build_donating). */
jit_status spmd_compile(jit_ctx *ctx, jit_sig *s, jit_array *const *args, struct jit_mesh *mesh,
                        uint64_t donate, struct exec_stats *stats);
/* Runs a partitioned signature: lays the args out, runs every device's program on its device
   thread, returns committed results. A result the executable writes over a donated param takes
   that arg's shards when they are its own per-device buffers of the right size, else a copy of
   the param's blocks. On failure frees what it made. *consumed: the run began (donated args'
   buffers may be overwritten or handed over). */
jit_status spmd_run(jit_ctx *ctx, const jit_sig *s, int n_args, jit_array *const *args,
                    int n_results, jit_array **results, bool *consumed);

/* ---- jitted functions (fn.c) ------------------------------------------------------------------- */
struct jit_fn {
  jit_ctx *ctx;
  jit_trace_fn fn;
  void *user;
  char *name;                 /* owned copy */
  int n_args, n_results;
  uint64_t donate_mask;
  pthread_mutex_t mu;         /* guards cache and stats; held only briefly (never while compiling or
                                 running), and no other lock is taken while it is held */
  pthread_mutex_t compile_mu; /* held while a miss traces and compiles: one compile of f at a time */
  sig_cache cache;
  jit_fn_stats stats;
};

/* The signature args select (no static bytes), compiled now when it is new; counted in stats as
   a jit_precompile is, with a reference the caller drops (sig_unref). who names the caller in
   messages. */
jit_status fn_signature(jit_fn *f, jit_array *const *args, const char *who, jit_sig **out);

/* Validation shared by jit_call_static and jit_fn_dump: f's args each non-NULL and from f's ctx. */
jit_status fn_check_args(const jit_fn *f, jit_array *const *args, const char *who);

/* ---- compile logs (compile_log.c) -------------------------------------------------------------- */
bool log_compiles_on(void);    /* $TJIT_LOG_COMPILES is set (and not 0) */
bool explain_misses_on(void);  /* $TJIT_EXPLAIN_CACHE_MISSES is set (and not 0) */
/* s's key as `(f32[64,256], f32[8]{mesh[x=2] "x"}) static 4 bytes`. */
void sig_describe(const jit_sig *s, FILE *out);
/* One stderr line for a freshly compiled signature: key, phase times, kernels, disk cache. */
void log_compile(const jit_fn *f, const jit_sig *s, const struct exec_stats *es);
/* One stderr line for a miss of f (nothing when f has no signature yet): which parts of the key
   differ from the nearest cached signature's. Caller holds f->mu. */
void explain_miss(const jit_fn *f, jit_array *const *args, const void *static_args,
                  size_t static_len);

/* ---- dumps (dump.c) ------------------------------------------------------------------------------ */
/* Prints the stages of s that what selects under `// @name stage` headers. Caller holds f->mu. */
jit_status dump_sig(const jit_fn *f, const jit_sig *s, unsigned what, FILE *out);
/* $TJIT_DUMP / $TJIT_DUMP_DIR on a freshly compiled signature; never fails the call. */
void dump_env(const jit_fn *f, const jit_sig *s);

#endif /* TJIT_RUNTIME_H */
