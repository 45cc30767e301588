/* exec.c: the executable of a compiled signature: fusion -> lowering -> one LLVM module -> ORC,
 * then steps over buffers. Kernels write results straight into the caller's result buffers and
 * intermediates into a scratch arena that warm calls reuse; large kernels split their rows over
 * the context's thread pool. A kernel with no compiled form (and every dot, until matmul
 * codegen exists) runs as a small function through the reference interpreter.
 */
#include "runtime/exec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <llvm-c/Core.h>

#include "codegen/kernel.h"
#include "codegen/llvm_jit.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"
#include "runtime/pool.h"
#include "runtime/runtime.h"

#define EXEC_PAR_MIN 65536   /* elements below which a kernel runs on the calling thread */
#define EXEC_ALIGN 64
#define EXEC_HUGE (2u << 20) /* scratch this large is advised to transparent huge pages */

#define TRY_RET(expr)                 \
  do {                                \
    jit_status try_ret_ = (expr);     \
    if (try_ret_ != JIT_OK) return try_ret_; \
  } while (0)

typedef void (*kernel_fn)(void *const *bufs, int64_t row_begin, int64_t row_end);

typedef enum { EB_PARAM, EB_RESULT, EB_TEMP } eb_kind;

typedef struct ebuf {
  uint8_t kind;   /* eb_kind */
  uint32_t index; /* EB_PARAM, EB_RESULT: which */
  size_t off;     /* EB_TEMP: offset in the scratch arena */
  size_t bytes;
} ebuf;

typedef enum { ES_KERNEL, ES_INTERP, ES_COPY } es_kind;

typedef struct estep {
  uint8_t kind;       /* es_kind */
  uint32_t *bufs;     /* buffer ids: kernel: its bufs; interp: args then results; copy: src, dst */
  uint32_t n_bufs, n_args;
  kernel_fn fn;       /* ES_KERNEL */
  char name[32];
  int64_t rows, row_work;
  ir_func *sub;       /* ES_INTERP: the kernel as a function */
  size_t bytes;       /* ES_COPY */
} estep;

struct exec {
  jit_ctx *ctx;
  ebuf *bufs;
  uint32_t n_bufs;
  estep *steps;
  uint32_t n_steps;
  size_t scratch_bytes;
  void *scratch;      /* allocated by the first run that owns it, kept for the next */
  atomic_flag busy;   /* a run is using scratch */
  cg_dylib *lib;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static jit_status oom(void) { return jit_error(JIT_ENOMEM, "jit_call: out of memory building the executable"); }

void exec_free(exec *e) {
  if (!e) return;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    free(e->steps[i].bufs);
    ir_func_free(e->steps[i].sub);
  }
  free(e->steps);
  free(e->bufs);
  free(e->scratch);
  cg_dylib_free(e->lib);
  free(e);
}

/* ---- building ----------------------------------------------------------------------------------- */

typedef struct builder {
  exec *e;
  const ir_func *f;
  const fz_prog *p;
  int32_t *buf_of;   /* per ref: buffer id (views: their base's), -1 none */
  uint32_t cap_bufs, cap_steps;
} builder;

static jit_status add_buf(builder *B, uint8_t kind, uint32_t index, size_t bytes, uint32_t *id) {
  exec *e = B->e;
  if (e->n_bufs == B->cap_bufs) {
    uint32_t cap = B->cap_bufs ? 2 * B->cap_bufs : 16;
    ebuf *g = realloc(e->bufs, cap * sizeof *g);
    if (!g) return oom();
    e->bufs = g;
    B->cap_bufs = cap;
  }
  ebuf *b = &e->bufs[e->n_bufs];
  memset(b, 0, sizeof *b);
  b->kind = kind;
  b->index = index;
  b->bytes = bytes;
  *id = e->n_bufs++;
  return JIT_OK;
}

static size_t bytes_of(const ir_func *f, ir_ref v) {
  const ir_type *t = ir_type_of(f, v);
  size_t n = 0;
  array_byte_size(t->dtype, t->rank, t->dims, &n); /* the verifier checked the size */
  return n;
}

static estep *add_step(builder *B, uint8_t kind, uint32_t n_bufs) {
  exec *e = B->e;
  if (e->n_steps == B->cap_steps) {
    uint32_t cap = B->cap_steps ? 2 * B->cap_steps : 8;
    estep *g = realloc(e->steps, cap * sizeof *g);
    if (!g) return NULL;
    e->steps = g;
    B->cap_steps = cap;
  }
  estep *s = &e->steps[e->n_steps];
  memset(s, 0, sizeof *s);
  s->bufs = malloc((n_bufs ? n_bufs : 1) * sizeof *s->bufs);
  if (!s->bufs) return NULL;
  s->kind = kind;
  s->n_bufs = n_bufs;
  e->n_steps++;
  return s;
}

/* The buffer of a materialized value, made on first use (dot results that are not returned). */
static jit_status buf_for(builder *B, ir_ref v, uint32_t *id) {
  ir_ref b = B->p->base[v];
  if (B->buf_of[b] < 0) {
    uint32_t nid;
    jit_status st = add_buf(B, EB_TEMP, 0, bytes_of(B->f, b), &nid);
    if (st != JIT_OK) return st;
    B->buf_of[b] = (int32_t)nid;
  }
  *id = (uint32_t)B->buf_of[b];
  return JIT_OK;
}

/* ops of f (increasing) as a function of `reads` returning `writes`: what the interpreter runs
   for a kernel with no compiled form. */
static jit_status sub_function(const ir_func *f, const ir_ref *ops, uint32_t n_ops,
                               const ir_ref *reads, uint32_t n_reads, const ir_ref *writes,
                               uint32_t n_writes, ir_func **out) {
  jit_status st = JIT_OK;
  ir_ref *map = malloc((f->n_ins ? f->n_ins : 1) * sizeof *map);
  ir_ref *res = malloc((n_writes ? n_writes : 1) * sizeof *res);
  ir_func *g = ir_func_new(f->name);
  if (!map || !res || !g) goto nomem;
  for (uint32_t i = 0; i < n_reads; i++) {
    ir_ty ty = ir_type_intern(g, ir_type_of(f, reads[i]));
    if (ty == UINT32_MAX) goto nomem;
    map[reads[i]] = ir_emit_param(g, ty);
  }
  for (uint32_t i = 0; i < n_ops; i++) {
    const ir_ins *in = &f->ins[ops[i]];
    ir_ref args[64], *a = args;
    if (in->n_args > 64 && !(a = malloc(in->n_args * sizeof *a))) goto nomem;
    for (uint32_t k = 0; k < in->n_args; k++) a[k] = map[in->args[k]];
    ir_ty ty = ir_type_intern(g, ir_type_of(f, ops[i]));
    map[ops[i]] = ty == UINT32_MAX ? IR_NOREF : ir_emit(g, in->op, ty, in->n_args, a, &in->attr, in->loc);
    if (a != args) free(a);
  }
  for (uint32_t i = 0; i < n_writes; i++) res[i] = map[writes[i]];
  if (g->oom || ir_set_results(g, n_writes, res) != JIT_OK) goto nomem;
  free(map);
  free(res);
  *out = g;
  return JIT_OK;
nomem:
  st = oom();
  free(map);
  free(res);
  ir_func_free(g);
  return st;
}

static jit_status add_interp(builder *B, const ir_ref *ops, uint32_t n_ops, const ir_ref *reads,
                             uint32_t n_reads, const ir_ref *writes, uint32_t n_writes) {
  estep *s = add_step(B, ES_INTERP, n_reads + n_writes);
  if (!s) return oom();
  s->n_args = n_reads;
  for (uint32_t i = 0; i < n_reads + n_writes; i++) {
    jit_status st = buf_for(B, i < n_reads ? reads[i] : writes[i - n_reads], &s->bufs[i]);
    if (st != JIT_OK) return st;
  }
  return sub_function(B->f, ops, n_ops, reads, n_reads, writes, n_writes, &s->sub);
}

/* Lowers every kernel into lfs[] (NULL: interpreted or nothing to loop) and makes the steps. */
static jit_status make_steps(builder *B, lp_func **lfs) {
  jit_status st = JIT_OK;
  const fz_prog *p = B->p;
  for (uint32_t ki = 0; ki < p->n_kernels; ki++) {
    const fz_kernel *k = &p->kernels[ki];
    if (k->dot != IR_NOREF) {
      const ir_ins *d = &B->f->ins[k->dot];
      TRY(add_interp(B, &k->dot, 1, d->args, d->n_args, &k->dot, 1));
    }
    st = lp_lower(p, ki, &lfs[ki]);
    if (st == JIT_EUNSUPPORTED) {
      /* the whole kernel through the interpreter (its dot, if any, with it) */
      if (k->dot != IR_NOREF) {
        free(B->e->steps[B->e->n_steps - 1].bufs);
        ir_func_free(B->e->steps[B->e->n_steps - 1].sub);
        B->e->n_steps--;
      }
      TRY(add_interp(B, k->ops, k->n_ops, k->reads, k->n_reads, k->writes, k->n_writes));
      continue;
    }
    TRY(st);
    lp_func *lf = lfs[ki];
    if (!lf) continue;
    estep *s = add_step(B, ES_KERNEL, lf->n_bufs);
    if (!s) TRY(oom());
    for (uint32_t i = 0; i < lf->n_bufs; i++) TRY(buf_for(B, lf->buf_refs[i], &s->bufs[i]));
    s->rows = lf->n_rows;
    s->row_work = lf->row_work;
    snprintf(s->name, sizeof s->name, "%s", lf->name);
  }
  return JIT_OK;
fail:
  return st;
}

/* Buffers for params and results (results are written in place when a kernel makes them). */
static jit_status assign_buffers(builder *B) {
  const ir_func *f = B->f;
  const fz_prog *p = B->p;
  uint32_t id;
  for (uint32_t i = 0; i < f->n_params; i++) {
    TRY_RET(add_buf(B, EB_PARAM, i, bytes_of(f, i), &id));
    B->buf_of[i] = (int32_t)id;
  }
  for (uint32_t r = 0; r < f->n_results; r++) {
    ir_ref v = f->results[r];
    if (p->cls[v] != FZ_MAT || B->buf_of[v] >= 0) continue;
    TRY_RET(add_buf(B, EB_RESULT, r, bytes_of(f, v), &id));
    B->buf_of[v] = (int32_t)id;
  }
  return JIT_OK;
}

/* Results not written in place (params, views, a value returned twice) are copied at the end. */
static jit_status add_copies(builder *B) {
  const ir_func *f = B->f;
  for (uint32_t r = 0; r < f->n_results; r++) {
    ir_ref v = f->results[r];
    uint32_t src;
    TRY_RET(buf_for(B, v, &src));
    const ebuf *b = &B->e->bufs[src];
    if (b->kind == EB_RESULT && b->index == r) continue;
    size_t n = bytes_of(f, v);
    if (!n) continue;
    uint32_t dst;
    TRY_RET(add_buf(B, EB_RESULT, r, n, &dst));
    estep *s = add_step(B, ES_COPY, 2);
    if (!s) return oom();
    s->bufs[0] = src;
    s->bufs[1] = dst;
    s->bytes = n;
  }
  return JIT_OK;
}

/* Places the intermediates in the scratch arena: two share bytes when no step uses both (live
   from the first step that touches one to the last). Largest first, each at the lowest offset
   free of the buffers already placed whose lifetimes overlap. */
static jit_status pack_scratch(exec *e) {
  jit_status st = JIT_OK;
  uint32_t n = e->n_bufs;
  uint32_t *first = malloc((n ? n : 1) * sizeof *first), *last = malloc((n ? n : 1) * sizeof *last);
  uint32_t *order = malloc((n ? n : 1) * sizeof *order), *placed = malloc((n ? n : 1) * sizeof *placed);
  if (!first || !last || !order || !placed) {
    st = oom();
    goto done;
  }
  for (uint32_t b = 0; b < n; b++) first[b] = UINT32_MAX, last[b] = 0;
  for (uint32_t i = 0; i < e->n_steps; i++)
    for (uint32_t k = 0; k < e->steps[i].n_bufs; k++) {
      uint32_t b = e->steps[i].bufs[k];
      if (first[b] == UINT32_MAX) first[b] = i;
      last[b] = i;
    }
  uint32_t nt = 0, np = 0;
  for (uint32_t b = 0; b < n; b++)
    if (e->bufs[b].kind == EB_TEMP) order[nt++] = b;
  for (uint32_t i = 1; i < nt; i++) /* by size, decreasing (insertion sort: few buffers) */
    for (uint32_t j = i; j > 0 && e->bufs[order[j]].bytes > e->bufs[order[j - 1]].bytes; j--) {
      uint32_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  e->scratch_bytes = 0;
  for (uint32_t i = 0; i < nt; i++) {
    ebuf *b = &e->bufs[order[i]];
    size_t size = (b->bytes + EXEC_ALIGN - 1) & ~(size_t)(EXEC_ALIGN - 1), off = 0;
    if (size < b->bytes) {
      st = oom();
      goto done;
    }
    for (bool moved = true; moved;) {
      moved = false;
      for (uint32_t j = 0; j < np; j++) {
        const ebuf *o = &e->bufs[placed[j]];
        size_t osize = (o->bytes + EXEC_ALIGN - 1) & ~(size_t)(EXEC_ALIGN - 1);
        bool overlap_time = first[order[i]] <= last[placed[j]] && first[placed[j]] <= last[order[i]];
        if (overlap_time && off < o->off + osize && o->off < off + size) {
          off = o->off + osize;
          moved = true;
        }
      }
    }
    b->off = off;
    if (off > SIZE_MAX - size) {
      st = oom();
      goto done;
    }
    if (off + size > e->scratch_bytes) e->scratch_bytes = off + size;
    placed[np++] = order[i];
  }
done:
  free(first);
  free(last);
  free(order);
  free(placed);
  return st;
}

/* Compiles lfs into one module and binds each kernel step to its function. */
static jit_status compile(builder *B, lp_func **lfs, uint32_t n, double *codegen_ms,
                          double *llvm_ms) {
  jit_status st = JIT_OK;
  exec *e = B->e;
  cg_jit *jit = e->ctx->jit;
  bool any = false;
  for (uint32_t i = 0; i < n; i++) any |= lfs[i] != NULL;
  if (!any) return JIT_OK;
  if (!jit) return jit_error(JIT_EINTERNAL, "jit_call: no JIT in a context with opt_level %d", e->ctx->opt_level);
  double t0 = now_ms();
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = NULL;
  void *obj = NULL;
  size_t len = 0;
  TRY(lp_emit_llvm(lfs, n, c, B->f->name, &m));
  double t1 = now_ms();
  TRY(cg_optimize(jit, m));
  TRY(cg_emit_object(jit, m, &obj, &len));
  TRY(cg_add_object(jit, obj, len, &e->lib));
  for (uint32_t i = 0; i < e->n_steps; i++) {
    estep *s = &e->steps[i];
    if (s->kind != ES_KERNEL) continue;
    void *fn = NULL;
    TRY(cg_lookup(e->lib, s->name, &fn));
    s->fn = (kernel_fn)fn;
  }
  *codegen_ms += t1 - t0;
  *llvm_ms += now_ms() - t1;
fail:
  free(obj);
  if (m) LLVMDisposeModule(m);
  LLVMContextDispose(c);
  return st;
}

jit_status exec_build(jit_ctx *ctx, const ir_func *f, exec **out, exec_stats *stats) {
  jit_status st = JIT_OK;
  double t0 = now_ms();
  memset(stats, 0, sizeof *stats);
  *out = NULL;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  builder B = {0};
  exec *e = calloc(1, sizeof *e);
  if (!e) return oom();
  e->ctx = ctx;
  atomic_flag_clear(&e->busy);
  TRY(ir_fuse(f, &p));
  B.e = e;
  B.f = f;
  B.p = p;
  B.buf_of = malloc((f->n_ins ? f->n_ins : 1) * sizeof *B.buf_of);
  lfs = calloc(p->n_kernels ? p->n_kernels : 1, sizeof *lfs);
  if (!B.buf_of || !lfs) TRY(oom());
  for (uint32_t i = 0; i < f->n_ins; i++) B.buf_of[i] = -1;
  TRY(assign_buffers(&B));
  TRY(make_steps(&B, lfs));
  TRY(add_copies(&B));
  TRY(pack_scratch(e));
  stats->n_kernels = (int)p->n_kernels;
  for (uint32_t i = 0; i < p->n_kernels; i++) stats->n_native += lfs[i] != NULL;
  stats->codegen_ms = now_ms() - t0;
  TRY(compile(&B, lfs, p->n_kernels, &stats->codegen_ms, &stats->llvm_ms));
  *out = e;
  e = NULL;
fail:
  if (lfs)
    for (uint32_t i = 0; p && i < p->n_kernels; i++) lp_free(lfs[i]);
  free(lfs);
  free(B.buf_of);
  fz_prog_free(p);
  exec_free(e);
  return st;
}

/* ---- running ---------------------------------------------------------------------------------- */

typedef struct rows_job {
  kernel_fn fn;
  void *const *bufs;
  int64_t rows;
} rows_job;

static void run_rows(void *arg, int ith, int nth) {
  const rows_job *j = arg;
  int64_t lo = j->rows * ith / nth, hi = j->rows * (ith + 1) / nth;
  if (lo < hi) j->fn(j->bufs, lo, hi);
}

static void *alloc_scratch(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, EXEC_ALIGN, n ? n : 1) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  if (n >= EXEC_HUGE) madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

static jit_status run_kernel(exec *e, const estep *s, void *const *ptr) {
  void *small[32], **kb = small;
  if (s->rows <= 0) return JIT_OK;
  if (s->n_bufs > 32 && !(kb = malloc(s->n_bufs * sizeof *kb)))
    return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  for (uint32_t i = 0; i < s->n_bufs; i++) kb[i] = ptr[s->bufs[i]];
  pool *pl = e->ctx->pool;
  int nth = pl ? pool_n_threads(pl) : 1;
  if (nth > s->rows) nth = (int)s->rows;
  if (nth > 1 && s->rows * s->row_work >= EXEC_PAR_MIN) {
    rows_job j = {s->fn, kb, s->rows};
    pool_run(pl, run_rows, &j, nth);
  } else {
    s->fn(kb, 0, s->rows);
  }
  if (kb != small) free(kb);
  return JIT_OK;
}

jit_status exec_run(exec *e, const void *const *args, void *const *results) {
  static _Alignas(64) unsigned char empty[64];
  jit_status st = JIT_OK;
  void *small[64], **ptr = small;
  void *scratch = NULL;
  bool own = false;
  if (e->n_bufs > 64 && !(ptr = malloc(e->n_bufs * sizeof *ptr)))
    return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  if (e->scratch_bytes) {
    if (!atomic_flag_test_and_set_explicit(&e->busy, memory_order_acquire)) {
      if (!e->scratch) e->scratch = alloc_scratch(e->scratch_bytes);
      scratch = e->scratch;
      if (!scratch) atomic_flag_clear_explicit(&e->busy, memory_order_release);
    }
    if (!scratch) {
      /* another thread runs this signature: fresh intermediates for this call */
      scratch = alloc_scratch(e->scratch_bytes);
      own = true;
      if (!scratch) {
        st = jit_error(JIT_ENOMEM, "jit_call: out of memory (%zu bytes of intermediates)", e->scratch_bytes);
        goto done;
      }
    }
  }
  for (uint32_t i = 0; i < e->n_bufs; i++) {
    const ebuf *b = &e->bufs[i];
    void *q = b->kind == EB_PARAM ? (void *)args[b->index]
              : b->kind == EB_RESULT ? results[b->index]
                                     : (unsigned char *)scratch + b->off;
    ptr[i] = b->bytes && q ? q : empty;
  }
  for (uint32_t i = 0; i < e->n_steps && st == JIT_OK; i++) {
    const estep *s = &e->steps[i];
    switch (s->kind) {
    case ES_KERNEL: st = run_kernel(e, s, ptr); break;
    case ES_COPY: memcpy(ptr[s->bufs[1]], ptr[s->bufs[0]], s->bytes); break;
    case ES_INTERP: {
      const void *small_a[16];
      void *small_r[16];
      const void **a = small_a;
      void **r = small_r;
      uint32_t na = s->n_args, nr = s->n_bufs - s->n_args;
      if ((na > 16 && !(a = malloc(na * sizeof *a))) || (nr > 16 && !(r = malloc(nr * sizeof *r)))) {
        st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
      } else {
        for (uint32_t k = 0; k < na; k++) a[k] = ptr[s->bufs[k]];
        for (uint32_t k = 0; k < nr; k++) r[k] = ptr[s->bufs[na + k]];
        st = ir_interp(s->sub, a, r);
      }
      if (a != small_a) free(a);
      if (r != small_r) free(r);
      break;
    }
    }
  }
done:
  if (own) free(scratch);
  else if (scratch) atomic_flag_clear_explicit(&e->busy, memory_order_release);
  if (ptr != small) free(ptr);
  return st;
}

/* ---- dumps ------------------------------------------------------------------------------------- */

jit_status exec_dump(jit_ctx *ctx, const ir_func *f, unsigned stage, FILE *out) {
  jit_status st = JIT_OK;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  LLVMContextRef c = NULL;
  LLVMModuleRef m = NULL;
  TRY(ir_fuse(f, &p));
  if (stage == JIT_DUMP_FUSED) {
    st = fz_print(p, out);
    goto fail;
  }
  lfs = calloc(p->n_kernels ? p->n_kernels : 1, sizeof *lfs);
  if (!lfs) TRY(oom());
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    st = lp_lower(p, i, &lfs[i]);
    if (st == JIT_EUNSUPPORTED) st = JIT_OK;
    TRY(st);
  }
  if (stage == JIT_DUMP_C) {
    TRY(lp_emit_c_prelude(out));
    for (uint32_t i = 0; i < p->n_kernels; i++) {
      const fz_kernel *k = &p->kernels[i];
      if (k->dot != IR_NOREF) fprintf(out, "/* k%u: dot %%%u runs in the interpreter */\n", i, k->dot);
      if (lfs[i]) TRY(lp_emit_c(lfs[i], out));
      else if (k->dot == IR_NOREF) fprintf(out, "/* k%u runs in the interpreter */\n", i);
      fputc('\n', out);
    }
    goto fail;
  }
  c = LLVMContextCreate();
  TRY(lp_emit_llvm(lfs, p->n_kernels, c, f->name, &m));
  if (ctx && ctx->jit) TRY(cg_optimize(ctx->jit, m));
  char *text = cg_module_text(m);
  if (!text) TRY(oom());
  fputs(text, out);
  free(text);
fail:
  if (m) LLVMDisposeModule(m);
  if (c) LLVMContextDispose(c);
  if (lfs)
    for (uint32_t i = 0; i < p->n_kernels; i++) lp_free(lfs[i]);
  free(lfs);
  fz_prog_free(p);
  if (st == JIT_OK && ferror(out)) st = jit_error(JIT_EIO, "jit_fn_dump: write failed");
  return st;
}
