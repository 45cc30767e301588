/* exec_run.c: running a built executable (exec.c builds it): the intermediates arena, the C
 * step loop that the profile and the interpreter fallbacks use, a step's rows split over the
 * thread pool (a dot's threads sharing a team's packed rhs), scan steps, and the entry call.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/core_dot.h"
#include "codegen/gemm_core.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/exec_internal.h"
#include "runtime/ffi_call.h"
#include "runtime/pool.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

/* ---- running ---------------------------------------------------------------------------------- */

typedef struct rows_job {
  const exec *e;
  const estep *s;
  void *const *bufs;
  unsigned char *mm;  /* ES_DOT: thread 0's scratch block; thread i's is i blocks further */
  size_t mm_bytes;
  void *team;         /* ES_DOT on the core: the team area its threads share, or NULL */
  atomic_llong next;  /* ES_KERNEL: the first row no thread has taken yet */
  int64_t chunk;      /* ES_KERNEL: rows a thread takes at a time */
} rows_job;

/* A kernel's rows are taken in chunks, about ROW_CHUNKS per thread, rather than split in equal
   halves: a core that runs slower for the call (a busy hyperthread sibling, another process, a
   lower clock) then takes fewer of them instead of making the others wait. Any row may run on any
   thread (a row's results do not depend on which), so results are the same either way. */
#define ROW_CHUNKS 8

/* ---- the profile's kernel events ---------------------------------------------------------------- */

/* The bytes of a step's buffers (what it reads and writes, scratch excluded): a profile's "bytes". */
static int64_t step_bytes(const exec *e, const estep *s) {
  if (s->kind == ES_COPY) return (int64_t)s->bytes;
  int64_t n = 0;
  for (uint32_t k = 0; k < s->n_bufs; k++)
    if (s->bufs[k] != EXEC_MM_SCRATCH) n += (int64_t)e->bufs[s->bufs[k]].bytes;
  return n;
}

/* Records a step's run (or the rows lo..hi of it that this thread ran) as "function:symbol"
   ("function:copy", "function:interp" for steps with no symbol). */
static void prof_step(uint64_t t0, const exec *e, const estep *s, int64_t lo, int64_t hi) {
  if (!t0) return;
  char name[96], own[32];
  /* a kernel that runs another's function (share_kernels) keeps its own name here, the one the
     fused dump shows */
  snprintf(own, sizeof own, "tjit_k%u", s->kernel);
  snprintf(name, sizeof name, "%s:%s", e->name,
           s->kind == ES_COPY     ? "copy"
           : s->kind == ES_INTERP ? "interp"
           : s->kind == ES_KERNEL ? own
                                  : s->name);
  int64_t bytes = step_bytes(e, s);
  if (s->rows > 0 && hi - lo < s->rows) bytes = (int64_t)((double)bytes * (double)(hi - lo) / (double)s->rows);
  prof_arg a[2] = {{"rows", NULL, hi - lo}, {"bytes", NULL, bytes}};
  prof_end(t0, s->kind == ES_COPY ? "copy" : "kernel", name, 2, a);
}

/* Whether s's streamed stores may run on these buffers: they are aligned to their size only
   when the buffers they write start EXEC_ALIGN-aligned (a scan body's slice may not). */
static bool streams_aligned(const estep *s, void *const *bufs) {
  uintptr_t low = 0;
  for (uint32_t k = 0; k < s->n_bufs && k < 64; k++)
    if (s->stream_mask >> k & 1) low |= (uintptr_t)bufs[k];
  return (low & (EXEC_ALIGN - 1)) == 0;
}

/* A streaming kernel's buffers as it may run on them (kb): each streamed buffer that is not
   EXEC_ALIGN-aligned (a scan's slice) replaced by an aligned copy of it (copies[k], which the
   caller copies back and frees; taken from the buffer, since the kernel need not write every
   byte). False: out of memory (nothing left allocated). */
static bool aligned_copies(const exec *e, const estep *s, void *const *bufs, void **kb,
                           void **copies) {
  for (uint32_t k = 0; k < s->n_bufs; k++) {
    kb[k] = bufs[k];
    copies[k] = NULL;
    size_t bytes = e->bufs[s->bufs[k]].bytes;
    if (!(s->stream_mask >> k & 1) || ((uintptr_t)bufs[k] & (EXEC_ALIGN - 1)) == 0 || !bytes)
      continue;
    copies[k] = aligned_alloc(EXEC_ALIGN, exec_align_up(bytes));
    if (!copies[k]) {
      for (uint32_t q = 0; q < k; q++) free(copies[q]);
      return false;
    }
    kb[k] = memcpy(copies[k], bufs[k], bytes);
  }
  return true;
}

static void run_rows(void *arg, int ith, int nth) {
  rows_job *j = arg;
  const estep *s = j->s;
  uint64_t t0 = prof_begin();
  if (t0 && ith > 0) prof_name_thread("worker", ith);
  if (s->kind == ES_KERNEL) {
    int64_t done = 0;
    for (;;) {
      int64_t lo = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
      if (lo >= s->rows) break;
      int64_t hi = s->rows - lo < j->chunk ? s->rows : lo + j->chunk;
      s->fn(j->bufs, lo, hi);
      done += hi - lo;
    }
    if (done) prof_step(t0, j->e, s, 0, done); /* a thread that came late ran none */
    return;
  }
  /* a dot: one contiguous range per thread, in whole grains */
  int64_t pieces = (s->rows + s->grain - 1) / s->grain;
  int64_t lo = pieces * ith / nth * s->grain, hi = pieces * (ith + 1) / nth * s->grain;
  if (hi > s->rows) hi = s->rows;
  if (lo >= hi) return;
  void *kb[4 + CG_EPI_MAX_READS];
  for (uint32_t k = 0; k + 1 < s->n_bufs; k++) kb[k] = j->bufs[k];
  kb[s->n_bufs - 1] = j->mm + (size_t)ith * j->mm_bytes;
  if (j->team) gemm_core_join_team(j->team);
  if (s->core) core_dot_run(s->core, kb, lo, hi);
  else s->fn(kb, lo, hi);
  if (j->team) gemm_core_join_team(NULL);
  prof_step(t0, j->e, s, lo, hi);
}

static void *alloc_arena(size_t n);
static void run_step(exec_rt *rt, uint32_t i, void *const *bufs);

/* Prepares rt for a run of e: its intermediates arena (e's own when free, else a fresh one that
   *own says to free). false: out of memory (recorded). */
bool exec_rt_begin(exec *e, exec_rt *rt, void **arena, bool *own) {
  static _Alignas(64) unsigned char empty[64];
  *rt = (exec_rt){NULL, NULL, empty, run_step, e, JIT_OK, 0, false, NULL};
  *arena = NULL;
  *own = false;
  if (!e->arena_bytes) return true;
  if (!atomic_flag_test_and_set_explicit(&e->busy, memory_order_acquire)) {
    if (!e->arena) e->arena = alloc_arena(e->arena_bytes);
    *arena = e->arena;
    rt->keep = *arena ? &e->keep : NULL;
    if (!*arena) atomic_flag_clear_explicit(&e->busy, memory_order_release);
  }
  if (!*arena) {
    /* another thread runs this signature: a fresh arena for this call */
    *arena = alloc_arena(e->arena_bytes);
    *own = true;
    if (!*arena) {
      jit_error(JIT_ENOMEM, "jit_call: out of memory (%zu bytes of intermediates)", e->arena_bytes);
      return false;
    }
  }
  rt->scratch = *arena;
  rt->mm_scratch = (unsigned char *)*arena + e->scratch_bytes;
  return true;
}

void exec_rt_end(exec *e, void *arena, bool own) {
  if (own) free(arena);
  else if (arena) atomic_flag_clear_explicit(&e->busy, memory_order_release);
}

static _Atomic uint64_t scan_calls; /* numbers every run of a scan step */

static jit_status run_in_call(exec *e, const void *const *args, void *const *results,
                              uint64_t scan_call, const uint64_t *arg_ids);

/* Where a carry with an alias (scan_plan.alias) ended: its result's slice of the last step. */
static const void *last_slice(const scan_plan *sp, void *const *bufs, uint32_t na, uint32_t i) {
  int64_t t = sp->reverse ? 0 : sp->length - 1;
  return (const unsigned char *)bufs[na + sp->alias[i]] + (size_t)t * sp->ystep[sp->alias[i]];
}

/* A scan step: the body's executable once per step, on pointers into the operands and results;
   the carries start as copies of the inits and alternate between the two scratch sets (a carry
   with an alias: between the slices of its result). */
static jit_status run_scan(const estep *s, void *const *bufs) {
  const scan_plan *sp = s->scan;
  uint64_t call = atomic_fetch_add_explicit(&scan_calls, 1, memory_order_relaxed) + 1;
  uint32_t na = s->n_args, nr = sp->n_results, nc = sp->n_carry, c0 = sp->n_consts;
  jit_status st = JIT_OK;
  const void *small_a[16];
  void *small_r[16], *small_c[16];
  const void **a = na > 16 ? malloc(na * sizeof *a) : small_a;
  void **r = nr > 16 ? malloc(nr * sizeof *r) : small_r;
  void **cur = 2 * nc > 16 ? malloc(2 * nc * sizeof *cur) : small_c;
  if (!a || !r || !cur) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    goto done;
  }
  void **nxt = cur + nc;
  for (uint32_t i = 0; i < nc; i++) {
    cur[i] = bufs[na + nr + i];
    nxt[i] = bufs[na + nr + nc + i];
    memcpy(cur[i], bufs[c0 + i], sp->cbytes[i]);
  }
  if (s->loop && sp->length > 0) { /* one native call runs every step */
    exec_rt brt;
    void *arena;
    bool own;
    if (!exec_rt_begin(s->body, &brt, &arena, &own)) {
      st = JIT_ENOMEM;
      goto done;
    }
    brt.scan_call = call;
    s->loop(bufs, bufs + na, bufs + na + nr, s->body->entry, &brt);
    exec_rt_end(s->body, arena, own);
    st = brt.status;
    for (uint32_t i = 0; i < nc && st == JIT_OK; i++) /* after an odd count, set 1 is current */
      memcpy(bufs[na + i], sp->alias[i] >= 0 ? last_slice(sp, bufs, na, i)
                           : sp->length % 2 ? nxt[i] : cur[i], sp->cbytes[i]);
    goto done;
  }
  for (uint32_t i = 0; i < na; i++) a[i] = bufs[i];
  for (int64_t step = 0; step < sp->length && st == JIT_OK; step++) {
    int64_t t = sp->reverse ? sp->length - 1 - step : step;
    for (uint32_t i = 0; i < nc; i++) a[c0 + i] = cur[i];
    for (uint32_t i = c0 + nc; i < na; i++) a[i] = (const unsigned char *)bufs[i] + (size_t)t * sp->xstep[i];
    for (uint32_t k = 0; k < nr; k++)
      r[k] = k < nc ? nxt[k] : (void *)((unsigned char *)bufs[na + k] + (size_t)t * sp->ystep[k]);
    for (uint32_t i = 0; i < nc; i++)
      if (sp->alias[i] >= 0) r[i] = r[sp->alias[i]]; /* results i and alias[i]: one buffer */
    st = run_in_call(s->body, a, r, call, NULL);
    for (uint32_t i = 0; i < nc; i++) {
      if (sp->alias[i] >= 0) { /* the slice just written is the next step's carry */
        cur[i] = r[i];
        continue;
      }
      void *x = cur[i];
      cur[i] = nxt[i];
      nxt[i] = x;
    }
  }
  for (uint32_t i = 0; i < nc && st == JIT_OK; i++)
    memcpy(bufs[na + i], cur[i], sp->cbytes[i]);
done:
  if (a != small_a) free(a);
  if (r != small_r) free(r);
  if (cur != small_c) free(cur);
  return st;
}

/* What heads a kept team area: the scan call, or the contents (jit_array serial), and the rhs
   buffer it was packed for. */
typedef struct team_tag {
  uint64_t scan_call, contents;
  const void *rhs;
} team_tag;

/* The most bytes of kept team areas (packed copies of rhs) one executable holds, its devices'
   included; a dot that finds no room packs as it would without. */
#define EXEC_KEEP_MAX ((size_t)256 << 20)

void exec_keep_free(exec_keep *k, uint32_t n_steps) {
  for (uint32_t i = 0; k->slot && i < n_steps; i++) free(k->slot[i].area);
  free(k->slot);
  k->slot = NULL;
}

size_t exec_kept_bytes(const exec *e) {
  size_t n = atomic_load(&((exec *)e)->keep_bytes);
  for (uint32_t i = 0; i < e->n_steps; i++) {
    if (e->steps[i].body) n += exec_kept_bytes(e->steps[i].body);
    for (uint32_t j = 0; e->steps[i].bodies && j < e->steps[i].n_bodies; j++)
      n += exec_kept_bytes(e->steps[i].bodies[j]);
  }
  return n;
}

/* Step k's kept area, made (n bytes after its tag) if there is none and room; NULL: none. */
static void *keep_area(exec *e, keep_slot *k, size_t n) {
  if (k->area) return k->area;
  if (atomic_fetch_add(&e->keep_bytes, n) + n > EXEC_KEEP_MAX) {
    atomic_fetch_sub(&e->keep_bytes, n);
    return NULL;
  }
  if (!(k->area = alloc_arena(EXEC_ALIGN + n))) {
    atomic_fetch_sub(&e->keep_bytes, n);
    return NULL;
  }
  memset(k->area, 0, EXEC_ALIGN); /* a tag of no call and no contents (from 1) */
  return k->area;
}

/* The team area dot step i runs with on nth threads in this run, its claims ready. Where this
   run may keep areas (exec_rt.keep: it owns the executable's arena, or runs a device) and the
   step's rhs is one of a scan's consts (W5's weights) or a param whose contents the caller
   named (exec_run_ids: W4's; a device's block of one, W9's) and has named before, the step's
   own area, on one thread too: its packed rhs stays valid for the rest of the scan call, or
   for the next runs on the same contents, which then pack nothing (arrays are immutable, so a
   serial names its bytes). A param's area is made only when an array comes back: a first call
   (a cold start) or a loop that passes new arrays each time (training that replaces its
   weights) pays for no more fresh memory than before. Else, split over threads, the arena's
   shared area, claims zeroed; else NULL (no team). */
static void *team_area(exec_rt *rt, uint32_t i, void *const *bufs, int nth) {
  exec *e = rt->e;
  const estep *s = &e->steps[i];
  exec_keep *k = rt->keep;
  uint32_t rb = s->bufs[1];
  bool param = rb < e->n_bufs && e->bufs[rb].kind == EB_PARAM;
  uint64_t contents = param && !rt->scan_call && rt->arg_ids ? rt->arg_ids[e->bufs[rb].index] : 0;
  bool scan_const = rt->scan_call && param && e->bufs[rb].index < e->n_invariant;
  if (k && (scan_const || contents) && !k->slot) k->slot = calloc(e->n_steps, sizeof *k->slot);
  if (k && k->slot) {
    keep_slot *ks = &k->slot[i];
    bool again = false;
    if (contents) {
      again = ks->area || ks->seen == contents;
      ks->seen = contents;
    }
    team_tag *tag = scan_const || again ? keep_area(e, ks, s->team_bytes) : NULL;
    if (tag) {
      void *area = (unsigned char *)tag + EXEC_ALIGN;
      team_tag now = {rt->scan_call, contents, bufs[1]};
      if (tag->scan_call != now.scan_call || tag->contents != now.contents || tag->rhs != now.rhs) {
        memset(area, 0, s->team_flags);
        *tag = now;
      }
      return area;
    }
  }
  if (nth < 2 || s->team_bytes > e->team_bytes) return NULL;
  void *area = (unsigned char *)rt->mm_scratch + (size_t)e->mm_threads * e->mm_bytes;
  memset(area, 0, s->team_flags);
  return area;
}

/* Set while a device thread runs its program: every kernel stays on that thread (the devices
   are the parallelism), nested scan bodies included. */
static _Thread_local bool serial_thread;

/* A step the entry does not run itself: split over the pool, or interpreted. */
static void run_step(exec_rt *rt, uint32_t i, void *const *bufs) {
  exec *e = rt->e;
  const estep *s = &e->steps[i];
  if (rt->status != JIT_OK) return;
  if (s->kind == ES_SCAN) {
    uint64_t t0 = prof_begin();
    rt->status = run_scan(s, bufs);
    prof_step(t0, e, s, 0, s->scan->length); /* its rows: the steps */
    return;
  }
  if (s->kind == ES_COND || s->kind == ES_WHILE) {
    uint64_t t0 = prof_begin();
    rt->status = s->kind == ES_COND ? exec_run_cond(s, bufs) : exec_run_while(e, s, bufs);
    prof_step(t0, e, s, 0, 0);
    return;
  }
  if (s->kind == ES_INTERP && s->fft) {
    uint64_t t0 = prof_begin();
    pool *pl = e->ctx->pool;
    exec_run_fft(s, bufs, pl, serial_thread || !pl ? 1 : pool_n_threads(pl));
    prof_step(t0, e, s, 0, 0);
    return;
  }
  if (s->kind == ES_INTERP) {
    const void *small_a[16];
    void *small_r[16];
    const void **a = small_a;
    void **r = small_r;
    uint32_t na = s->n_args, nr = s->n_bufs - s->n_args;
    if ((na > 16 && !(a = malloc(na * sizeof *a))) || (nr > 16 && !(r = malloc(nr * sizeof *r)))) {
      rt->status = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    } else {
      for (uint32_t k = 0; k < na; k++) a[k] = bufs[k];
      for (uint32_t k = 0; k < nr; k++) r[k] = bufs[na + k];
      uint64_t t0 = prof_begin();
      rt->status = ir_interp(s->sub, a, r);
      prof_step(t0, e, s, 0, 0);
    }
    if (a != small_a) free(a);
    if (r != small_r) free(r);
    return;
  }
  if (s->rows <= 0) return;
  pool *pl = e->ctx->pool;
  int nth = pl ? pool_n_threads(pl) : 1;
  int64_t pieces = s->kind == ES_DOT ? (s->rows + s->grain - 1) / s->grain : s->rows;
  if (nth > pieces) nth = (int)pieces;
  if (s->kind == ES_DOT && nth > e->mm_threads) nth = e->mm_threads;
  if (s->inline_run || serial_thread) nth = 1;
  void *kb[64], *copies[64]; /* set by aligned_copies, only where a stream needs them */
  bool realign = s->kind == ES_KERNEL && s->stream_mask && !streams_aligned(s, bufs);
  if (realign && !aligned_copies(e, s, bufs, kb, copies)) {
    rt->status = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    return;
  }
  rows_job j = {e, s, realign ? kb : bufs, rt->mm_scratch, e->mm_bytes, NULL, 0, s->rows};
  if (nth > 1 && s->kind == ES_KERNEL)
    j.chunk = (s->rows + nth * ROW_CHUNKS - 1) / (nth * ROW_CHUNKS);
  if (s->kind == ES_DOT && s->team_bytes) j.team = team_area(rt, i, bufs, nth);
  if (nth > 1) pool_run(pl, run_rows, &j, nth);
  else run_rows(&j, 0, 1);
  for (uint32_t k = 0; realign && k < s->n_bufs; k++)
    if (copies[k]) {
      memcpy(bufs[k], copies[k], e->bufs[s->bufs[k]].bytes);
      free(copies[k]);
    }
}

/* The steps from C, for an executable with no entry (nothing compiled, or too many params). */
static void run_steps(exec *e, exec_rt *rt, const void *const *args, void *const *results) {
  void *small[64], **ptr = small;
  if (e->n_bufs > 64 && !(ptr = malloc(e->n_bufs * sizeof *ptr))) {
    rt->status = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    return;
  }
  for (uint32_t i = 0; i < e->n_bufs; i++) {
    const ebuf *b = &e->bufs[i];
    void *q = b->kind == EB_PARAM ? (void *)args[b->index]
              : b->kind == EB_RESULT ? results[b->index]
                                     : (unsigned char *)rt->scratch + b->off;
    ptr[i] = b->bytes && q ? q : rt->empty;
  }
  for (uint32_t i = 0; i < e->n_steps && rt->status == JIT_OK; i++) {
    const estep *s = &e->steps[i];
    uint64_t t0 = prof_begin();
    if (s->kind == ES_COPY) {
      if (ptr[s->bufs[1]] != ptr[s->bufs[0]]) /* a scan's carry and its alias (scan_plan) */
        memcpy(ptr[s->bufs[1]], ptr[s->bufs[0]], s->bytes);
      prof_step(t0, e, s, 0, 0);
      continue;
    }
    void *kb_small[32], **kb = kb_small;
    if (s->n_bufs > 32 && !(kb = malloc(s->n_bufs * sizeof *kb))) {
      rt->status = jit_error(JIT_ENOMEM, "jit_call: out of memory");
      break;
    }
    for (uint32_t k = 0; k < s->n_bufs; k++)
      kb[k] = s->bufs[k] == EXEC_MM_SCRATCH ? rt->mm_scratch : ptr[s->bufs[k]];
    if (s->inline_run && !s->core) {
      s->fn(kb, 0, s->rows);
      prof_step(t0, e, s, 0, s->rows);
    } else {
      run_step(rt, i, kb);
    }
    if (kb != kb_small) free(kb);
  }
  if (ptr != small) free(ptr);
}

/* Not advised to huge pages: a first call would fault them in (buffers.c says what that costs);
   64-byte aligned, the advice this had was refused (EINVAL) all along. */
static void *alloc_arena(size_t n) {
  void *p = NULL;
  return posix_memalign(&p, EXEC_ALIGN, n ? n : 1) == 0 ? p : NULL;
}

/* One run of e with rt prepared (rt_begin). While a profile records, the steps run from the C
   loop instead of the entry, so that each kernel, the small ones the entry calls directly too,
   is timed. */
static void run_prepared(exec *e, exec_rt *rt, const void *const *args, void *const *results) {
  if (e->entry && !atomic_load_explicit(&prof_active, memory_order_relaxed)) {
    void *p[FFI_ENTRY_MAX_ARGS];
    uint32_t np = e->n_params, nr = e->n_results;
    for (uint32_t i = 0; i < np; i++) p[i] = (void *)args[i];
    for (uint32_t i = 0; i < nr; i++) p[np + i] = results[i];
    p[np + nr] = rt;
    ffi_entry_call(e->cif, e->entry, p);
  } else {
    run_steps(e, rt, args, results);
  }
}

/* A run of e; scan_call: the scan call whose step it is (exec_rt.scan_call), 0: none; arg_ids:
   exec_rt.arg_ids. */
static jit_status run_in_call(exec *e, const void *const *args, void *const *results,
                              uint64_t scan_call, const uint64_t *arg_ids) {
  exec_rt rt;
  void *arena;
  bool own;
  if (!exec_rt_begin(e, &rt, &arena, &own)) return JIT_ENOMEM;
  rt.scan_call = scan_call;
  rt.arg_ids = arg_ids;
  run_prepared(e, &rt, args, results);
  exec_rt_end(e, arena, own);
  return rt.status;
}

jit_status exec_run(exec *e, const void *const *args, void *const *results) {
  return run_in_call(e, args, results, 0, NULL);
}

jit_status exec_run_ids(exec *e, const void *const *args, const uint64_t *arg_ids,
                        void *const *results) {
  return run_in_call(e, args, results, 0, arg_ids);
}

jit_status exec_run_device(exec *e, int device, int n_devices, const void *const *args,
                           const uint64_t *arg_ids, void *const *results) {
  static _Alignas(64) unsigned char empty[64];
  if (device < 0 || device >= n_devices)
    return jit_error(JIT_EINVAL, "jit_call: device %d of %d", device, n_devices);
  pthread_mutex_lock(&e->dev_mu);
  if (e->n_devs < n_devices) {
    exec_device *a = realloc(e->devs, (size_t)n_devices * sizeof *a);
    if (a) {
      for (int d = e->n_devs; d < n_devices; d++) a[d] = (exec_device){NULL, {NULL}};
      e->devs = a;
      e->n_devs = n_devices;
    }
  }
  exec_device *dev = device < e->n_devs ? &e->devs[device] : NULL;
  pthread_mutex_unlock(&e->dev_mu);
  /* a device's state is its own: device jobs of one context run one at a time */
  if (!dev || (e->arena_bytes && !dev->arena && !(dev->arena = alloc_arena(e->arena_bytes))))
    return jit_error(JIT_ENOMEM, "jit_call: out of memory (%zu bytes of intermediates)", e->arena_bytes);
  exec_rt rt = {dev->arena ? dev->arena : empty, NULL, empty, run_step, e, JIT_OK, 0, &dev->keep,
                arg_ids};
  if (dev->arena) rt.mm_scratch = (unsigned char *)dev->arena + e->scratch_bytes;
  bool was = serial_thread;
  serial_thread = true;
  run_prepared(e, &rt, args, results);
  serial_thread = was;
  return rt.status;
}
