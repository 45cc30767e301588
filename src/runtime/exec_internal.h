/* exec_internal.h: the executable's structures, shared by exec.c (building), exec_run.c (running,
 * the C step loop) and exec_entry.c (the signature's typed LLVM entry that runs the same steps
 * natively). */
#ifndef TJIT_RUNTIME_EXEC_INTERNAL_H
#define TJIT_RUNTIME_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Core.h>

#include "ir/ir.h"
#include "runtime/exec.h"

#define TRY_RET(expr)                        \
  do {                                       \
    jit_status try_ret_ = (expr);            \
    if (try_ret_ != JIT_OK) return try_ret_; \
  } while (0)

struct cg_dylib;
struct cg_epi_plan;
struct ffi_entry;

#define EXEC_ALIGN 64
static inline size_t exec_align_up(size_t n) { return (n + EXEC_ALIGN - 1) & ~(size_t)(EXEC_ALIGN - 1); }
/* A step's buffer id that stands for the running thread's matmul scratch block. */
#define EXEC_MM_SCRATCH UINT32_MAX

typedef void (*kernel_fn)(void *const *bufs, int64_t row_begin, int64_t row_end);

typedef enum { EB_PARAM, EB_RESULT, EB_TEMP } eb_kind;

typedef struct ebuf {
  uint8_t kind;   /* eb_kind */
  uint32_t index; /* EB_PARAM, EB_RESULT: which */
  size_t off;     /* EB_TEMP: offset in the intermediates arena */
  size_t bytes;
} ebuf;

typedef enum { ES_KERNEL, ES_DOT, ES_INTERP, ES_COPY, ES_SCAN, ES_COND, ES_WHILE } es_kind;

/* An ES_SCAN step's shape: counts, the bytes one step advances each x and y by, carry sizes. */
typedef struct scan_plan {
  uint32_t n_consts, n_carry, n_results;
  int64_t length;
  bool reverse;
  size_t *xstep;  /* per operand: bytes per step (0 for consts and carries) */
  size_t *ystep;  /* per result: bytes per step (0 for carries) */
  size_t *cbytes; /* per carry: its bytes */
  int32_t *alias; /* per carry: the stacked result (>= n_carry) the body returns the same value
                     as, or -1. Step t writes such a carry straight into that result's slice t
                     and step t + 1 reads it from there (an RNN's h, returned as carry and as
                     output), so it is neither copied into the slice nor kept apart */
} scan_plan;

/* tjit_scanN(ops, outs, carries, entry, rt): all steps of a scan in one native loop. ops are
   the scan's operand buffers, outs its result buffers, carries two sets of n_carry buffers
   (step s reads set s % 2 and writes the other; set 0 holds the inits). Each step calls the
   body's entry (entry, of the body's signature) with the body's exec_rt. A carry with an alias
   lives in that result's slices instead (its init still in set 0). */
typedef void (*scan_loop_fn)(void *const *ops, void *const *outs, void *const *carries,
                             void (*entry)(void), void *rt);

/* tjit_condN / tjit_whileN(bufs, entries, rts): a cond step calls the entry of the branch its
   (clamped) index picks; a while step calls the predicate's and the body's entries until the
   predicate is false or a run fails (rts[j]->status). bufs as estep.bufs; entries[j] and
   rts[j]: body j's entry and its exec_rt. */
typedef void (*control_fn)(void *const *bufs, void (*const *entries)(void), void *const *rts);

/* What one runner keeps of an ES_DOT step between runs. */
typedef struct keep_slot {
  void *area;      /* the step's own team area, its rhs kept packed over the steps of one scan
                      call (a scan's const) or over the runs on the same contents (a param of
                      known contents); NULL: none yet */
  uint64_t seen;   /* the contents of the param rhs the last run named (0: none) */
} keep_slot;

/* The team areas one runner keeps packed (exec_rt.keep): the owner of e->arena's, or a device's
   in exec_run_device. */
typedef struct exec_keep {
  keep_slot *slot; /* [n_steps], made on first use (NULL: none yet) */
} exec_keep;

/* A device's own state in exec_run_device: one run per device at a time. */
typedef struct exec_device {
  void *arena;     /* made on its first run */
  exec_keep keep;
} exec_device;

typedef struct estep {
  uint8_t kind;       /* es_kind */
  bool inline_run;    /* ES_KERNEL, ES_DOT: small, runs on the calling thread, called directly */
  uint32_t *bufs;     /* buffer ids: kernel: its bufs; dot: lhs, rhs, out, EXEC_MM_SCRATCH;
                         interp: args then results; copy: src, dst; cond: its operands then
                         results; while: its operands, results, then a set of carries; scan: its operands, its
                         results (a GET's buffer, or scratch), then two sets of carry buffers */
  uint32_t n_bufs, n_args;
  kernel_fn fn;       /* ES_KERNEL, ES_DOT */
  uint64_t stream_mask; /* ES_KERNEL: bit k: bufs[k] is written past the cache (fn's stores to
                         it may be streaming: fn runs only on EXEC_ALIGN-aligned such buffers) */
  char name[32];      /* ES_KERNEL, ES_DOT: the function's symbol */
  uint32_t kernel;    /* ES_KERNEL: the fused kernel (index into the lowered functions) */
  int64_t rows, row_work; /* rows of a whole call; work per row (elements, or MACs of a dot) */
  int64_t grain;      /* ES_DOT: rows per piece when split over threads */
  struct core_dot *core; /* ES_DOT: run on the precompiled core with its epilogue as a program
                         (codegen/core_dot.h), no generated kernel; NULL: s->fn */
  size_t team_bytes, team_flags; /* ES_DOT on the core: the bytes of its team area (shared by
                         the threads it is split over, or its kept area) and of the claims in it
                         (gemm_core.h); 0: none */
  ir_ref dot;         /* ES_DOT: the dot instruction of the function built from */
  struct cg_epi_plan *epi; /* ES_DOT: its fused elementwise epilogue (bufs lhs, rhs, the
                         epilogue's reads, out, scratch), or NULL */
  ir_func *sub;       /* ES_INTERP: the kernel as a function */
  struct ir_fft_plan *fft; /* ES_INTERP of one FFT: its plan, run by exec_run_fft; bufs: the
                         operand, the result, then the plan's tmp and one scratch per thread */
  struct exec *body;  /* ES_SCAN: the loop body's own executable, run once per step */
  struct scan_plan *scan; /* ES_SCAN: counts and per-step strides */
  scan_loop_fn loop;  /* ES_SCAN whose body has an entry: the native loop over all steps */
  size_t bytes;       /* ES_COPY */
  struct exec **bodies; /* ES_COND: one executable per branch; ES_WHILE: predicate, body */
  uint32_t n_bodies, n_consts; /* ES_COND, ES_WHILE; ES_WHILE: its loop invariants */
  control_fn native;  /* ES_COND, ES_WHILE whose bodies have entries: the step as one native
                         function calling them (see control_fn); NULL: exec_run per body run */
} estep;

struct exec {
  jit_ctx *ctx;
  char *name;           /* the function's name (the profile's kernel events carry it) */
  uint32_t n_params, n_results;
  ebuf *bufs;
  uint32_t n_bufs;
  estep *steps;
  uint32_t n_steps;
  size_t scratch_bytes; /* intermediates (a multiple of EXEC_ALIGN) */
  size_t mm_bytes;      /* one thread's matmul scratch (a multiple of EXEC_ALIGN); 0: no dot */
  int mm_threads;       /* matmul scratch blocks after the intermediates */
  size_t team_bytes;    /* the largest team area of a dot split over threads, after the blocks */
  uint32_t n_invariant; /* a scan body's: its leading params (the scan's consts) are the same
                           buffers, unchanged, in every step of one scan call */
  size_t arena_bytes;   /* scratch_bytes + mm_threads * mm_bytes + team_bytes */
  void *arena;          /* allocated by the first run that owns it, kept for the next */
  exec_keep keep;       /* the owner of arena's kept team areas */
  _Atomic size_t keep_bytes; /* of the kept team areas, this runner's and the devices' */
  exec_stats nested;    /* what building the scan bodies' executables cost */
  atomic_flag busy;     /* a run is using arena */
  pthread_mutex_t dev_mu; /* guards growing devs */
  exec_device *devs;    /* exec_run_device: each device's own */
  int n_devs;
  int32_t *result_alias; /* per result: the donated param whose buffer it is written into, or -1
                         (exec_donate.c); the caller passes that param's pointer as the result's */
  struct cg_dylib *lib;
  void (*entry)(void);  /* the typed entry (NULL: the steps run from the C loop) */
  struct ffi_entry *cif;
};

/* What a run hands its entry as the last argument; the entry reads the first four fields. */
typedef struct exec_rt {
  void *scratch;      /* the intermediates arena of this run */
  void *mm_scratch;   /* thread 0's matmul scratch block of this run */
  void *empty;        /* stands for buffers of zero bytes */
  void (*step)(struct exec_rt *rt, uint32_t step, void *const *bufs); /* runs a step that is
                         split over threads or interpreted */
  exec *e;
  jit_status status;  /* the first failure of a step */
  uint64_t scan_call; /* a scan body's run: which scan call (0: not a body); kept team areas
                         packed in the same call are reused */
  exec_keep *keep;    /* the kept team areas this run may use: e->keep when its scratch is
                         e->arena (held through e->busy), its device's in a device run; NULL:
                         none (a fresh arena) */
  const uint64_t *arg_ids; /* exec_run_ids: the params' contents (0: unknown); NULL: none known */
} exec_rt;

/* Frees k's areas (n_steps of them) and arrays. */
void exec_keep_free(exec_keep *k, uint32_t n_steps);

/* Prepares rt for a run of e (its arena: e's own when free, else a fresh one that *own says to
   free; false: out of memory, recorded) and releases it. */
bool exec_rt_begin(exec *e, exec_rt *rt, void **arena, bool *own);
void exec_rt_end(exec *e, void *arena, bool own);

/* Per buffer: the first and last step that uses it (first UINT32_MAX: none), n_bufs each. */
void exec_buffer_lifetimes(const exec *e, uint32_t *first, uint32_t *last);

struct lp_func;
/* Decides which results live in the buffers of the params that donate (bit p) marks, and
   redirects the stores of kernels that update such a buffer in place (exec_donate.c). Runs after
   the steps are made, before the module is built. */
jit_status exec_plan_donations(exec *e, const ir_func *f, struct lp_func *const *lfs, uint64_t donate);

struct fz_prog;
/* The buffers and steps of f as exec_build plans them, with every dot's epilogue left as a loop
   kernel, and without machine code: what runtime/export_c.c prints as C. */
jit_status exec_plan_for_c(jit_ctx *ctx, const ir_func *f, exec **out, struct fz_prog **p,
                           struct lp_func ***lfs);
void exec_plan_free(exec *e, struct fz_prog *p, struct lp_func **lfs);

/* The entry's symbol. */
#define EXEC_ENTRY_NAME "tjit_entry"

/* Adds `void tjit_entry(ptr param0, .., ptr result0, .., ptr rt)` to m: runs e's steps in order,
   calling inline kernels (already in m) directly and the rest through rt->step. */
jit_status exec_emit_entry(const exec *e, LLVMModuleRef m);
/* exec_control.c: an ES_COND step runs the branch its index operand (clamped) chooses; an
   ES_WHILE step runs its body while its predicate holds. bufs as estep.bufs says. */
jit_status exec_run_cond(const estep *s, void *const *bufs);
jit_status exec_run_while(const exec *e, const estep *s, void *const *bufs);
/* Adds step s's (an ES_COND's or ES_WHILE's) native function, named s->name, to m; e is the
   executable s belongs to (its buffer sizes). */
jit_status exec_emit_control(const estep *s, const exec *e, LLVMModuleRef m);

/* exec_fft.c: an ES_INTERP step of one FFT runs its plan's passes, each split over up to nth
   threads of pool pl (NULL or nth 1: on this thread). */
struct pool;
void exec_run_fft(const estep *s, void *const *bufs, struct pool *pl, int nth);
/* The plan of FFT instruction `in` of f, and the bytes of the scratch buffer its step appends
   (tmp, then n_threads blocks, each EXEC_ALIGN-aligned). */
jit_status exec_fft_plan(const ir_func *f, const ir_ins *in, int n_threads, struct ir_fft_plan **plan,
                         size_t *scratch_bytes);

/* Adds step s's (an ES_SCAN's) loop, named s->name, to m. */
jit_status exec_emit_scan_loop(const estep *s, LLVMModuleRef m);

/* One module of a signature's code (exec_compile.c): the loop kernels and the entry, or one
   matmul kernel, each in an LLVMContext of its own so that parts compile on separate threads. */
typedef struct exec_part {
  LLVMContextRef c; /* owned, with m */
  LLVMModuleRef m;
  const char *name; /* for the profile: the module's name */
  const char *pipeline; /* the pass pipeline that optimizes this part (static text) */
  jit_status (*after_optimize)(const exec *e, LLVMModuleRef m); /* or NULL */
  void *obj;        /* the object: from the disk cache or compiled (malloc'd) */
  size_t len;
  char *key;        /* disk-cache key (NULL: the context has no disk cache) */
  size_t key_len;
  bool hit;         /* obj came from the disk cache */
  jit_status st;    /* the part's compile status and message (set by whichever thread ran it) */
  char msg[512];
} exec_part;
enum { EXEC_MAX_COMPILE_THREADS = 16 };
/* Looks every part up in the disk cache and compiles the rest (optimize, after_optimize, emit,
   store) on up to ctx->n_threads threads, the caller's among them. On failure, the first failed
   part's status and message. */
jit_status exec_compile_parts(const exec *e, exec_part *parts, int n, exec_stats *stats);
/* Frees the parts' modules, contexts, keys and objects, then the array. */
void exec_parts_free(exec_part *parts, int n);

#endif /* TJIT_RUNTIME_EXEC_INTERNAL_H */
