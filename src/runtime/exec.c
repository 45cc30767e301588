/* exec.c: building the executable of a compiled signature: fusion -> lowering (+ matmul kernels
 * for dots) -> steps and their buffers -> one LLVM module with a typed entry -> disk cache -> ORC
 * (exec_run.c runs it: one call of the entry per run). Kernels write results straight into the
 * caller's result buffers and intermediates into an arena that warm calls reuse; large kernels
 * split their rows over the context's thread pool. A kernel with no compiled form runs as a small
 * function through the reference interpreter.
 */
#include "runtime/exec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>

#include "codegen/core_dot.h"
#include "codegen/disk_cache.h"
#include "codegen/epilogue.h"
#include "codegen/gemm_amx.h"
#include "codegen/gemm_core.h"
#include "codegen/kernel.h"
#include "codegen/stream.h"
#include "codegen/llvm_jit.h"
#include "codegen/matmul.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"
#include "runtime/ffi_call.h"
#include "runtime/pool.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

#define EXEC_PAR_MIN 65536       /* elements below which a kernel runs on the calling thread */
#define EXEC_DOT_PAR_MIN (1 << 20) /* multiply-adds below which a dot runs on the calling thread */
/* Bytes a kernel writes per call from which its stores stream past the cache (codegen/stream.h):
   the L3 of the machines measured (32 MiB), which such an output would not stay in anyway. */
#define EXEC_STREAM_MIN ((size_t)32 << 20)


static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static jit_status oom(void) { return jit_error(JIT_ENOMEM, "jit_call: out of memory building the executable"); }


static void scan_plan_free(scan_plan *sp) {
  if (!sp) return;
  free(sp->xstep);
  free(sp->ystep);
  free(sp->cbytes);
  free(sp->alias);
  free(sp);
}

void exec_free(exec *e) {
  if (!e) return;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    exec_free(e->steps[i].body);
    for (uint32_t j = 0; e->steps[i].bodies && j < e->steps[i].n_bodies; j++) exec_free(e->steps[i].bodies[j]);
    free(e->steps[i].bodies);
    scan_plan_free(e->steps[i].scan);
    free(e->steps[i].bufs);
    free(e->steps[i].epi);
    core_dot_free(e->steps[i].core);
    ir_func_free(e->steps[i].sub);
    ir_fft_plan_free(e->steps[i].fft);
  }
  free(e->steps);
  free(e->bufs);
  free(e->result_alias);
  free(e->arena);
  exec_keep_free(&e->keep, e->n_steps);
  for (int d = 0; d < e->n_devs; d++) {
    free(e->devs[d].arena);
    exec_keep_free(&e->devs[d].keep, e->n_steps);
  }
  free(e->devs);
  pthread_mutex_destroy(&e->dev_mu);
  free(e->name);
  ffi_entry_free(e->cif);
  cg_dylib_free(e->lib);
  free(e);
}

/* ---- building ----------------------------------------------------------------------------------- */

typedef struct builder {
  exec *e;
  const ir_func *f;
  const fz_prog *p;
  int32_t *buf_of;   /* per ref: buffer id (views: their base's), -1 none */
  bool separate_epilogues; /* dots' epilogues stay loop kernels (exported C has no fused form) */
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
    uint32_t nid = 0;
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
  if (!map || !res || !g || (f->mesh && ir_set_mesh(g, f->mesh) != JIT_OK)) goto nomem;
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
    ir_attr attr;
    if (ir_attr_for_copy(g, f, in, &attr) != JIT_OK) ty = UINT32_MAX;
    map[ops[i]] = ty == UINT32_MAX ? IR_NOREF : ir_emit(g, in->op, ty, in->n_args, a, &attr, in->loc);
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
  /* an FFT alone runs its plan (exec_fft.c): a third buffer for its tmp and threads' scratch */
  bool fft = n_ops == 1 && n_reads == 1 && n_writes == 1 && B->f->ins[ops[0]].op == IR_FFT;
  estep *s = add_step(B, ES_INTERP, n_reads + n_writes + fft);
  if (!s) return oom();
  s->n_args = n_reads;
  for (uint32_t i = 0; i < n_reads + n_writes; i++) {
    jit_status st = buf_for(B, i < n_reads ? reads[i] : writes[i - n_reads], &s->bufs[i]);
    if (st != JIT_OK) return st;
  }
  if (fft) {
    size_t bytes = 0;
    const pool *pl = B->e->ctx->pool;
    TRY_RET(exec_fft_plan(B->f, &B->f->ins[ops[0]], pl ? pool_n_threads(pl) : 1, &s->fft, &bytes));
    TRY_RET(add_buf(B, EB_TEMP, 0, bytes, &s->bufs[2]));
  }
  return sub_function(B->f, ops, n_ops, reads, n_reads, writes, n_writes, &s->sub);
}

/* The vector size the matmul tile blocks for: the target's (planning and emission must agree,
   since the tile decides the scratch a dot needs). Without a JIT no dot runs natively. */
static int tile_vec_bytes(const exec *e) {
  return e->ctx->jit ? cg_jit_target(e->ctx->jit)->vector_bytes : 16;
}

static bool core_target(const exec *e);
static bool use_gemm_core(const exec *e, const cg_matmul_desc *d);

/* Whether a dot on the core runs its epilogue as a program (core_dot.h) where it can, rather
   than a generated one: unless TJIT_GEMM_CORE=jit asks for generated epilogues (to compare). */
static bool core_programs(void) {
  const char *env = getenv("TJIT_GEMM_CORE");
  return !env || strcmp(env, "jit") != 0;
}

/* Whether bf16 dots on the core multiply with the target's vdpbf16ps: where this host runs it
   faster than the f32 micro-kernel (gemm_core_pairs_pay), or TJIT_BF16_DOT=pairs asks for it;
   TJIT_BF16_DOT=f32 asks for the f32 micro-kernel (its sums are the generated kernel's bits). */
static bool bf16_dot(const exec *e) {
  const char *env = getenv("TJIT_BF16_DOT");
  if (!e->ctx->jit || !cg_jit_target(e->ctx->jit)->bf16_dot || (env && strcmp(env, "f32") == 0))
    return false;
  return (env && strcmp(env, "pairs") == 0) || gemm_core_pairs_pay();
}

/* Whether bf16 dots on the core multiply with AMX tiles: where the target has amx_bf16 and this
   process may run it (gemm_amx_runs_here), unless TJIT_BF16_DOT asks for f32 or pairs;
   TJIT_BF16_DOT=amx-model runs the AMX core's loops on the tile instructions' C model instead
   (any AVX-512 target; slow: for checking the AMX path on hosts without it). */
static gemm_amx_mode bf16_amx(const exec *e) {
  const char *env = getenv("TJIT_BF16_DOT");
  if (!e->ctx->jit || cg_jit_target(e->ctx->jit)->vector_bytes != 64) return GEMM_AMX_OFF;
  if (env && strcmp(env, "amx-model") == 0) return GEMM_AMX_MODEL;
  if (env && (strcmp(env, "f32") == 0 || strcmp(env, "pairs") == 0)) return GEMM_AMX_OFF;
  return cg_jit_target(e->ctx->jit)->amx_bf16 && gemm_amx_runs_here() ? GEMM_AMX_HW : GEMM_AMX_OFF;
}

/* The dot of kernel ki as a matmul kernel (bufs lhs, rhs, out, scratch), or through the
   interpreter when the emitter has no form for it (bool, u32 and u64 operands; no contracted
   elements, where
   the result is all zeros and the packed loops never run). */
static jit_status add_dot(builder *B, uint32_t ki, ir_ref dot, const cg_epi_plan *epi) {
  const ir_ins *d = &B->f->ins[dot];
  jit_dtype dt = ir_type_of(B->f, d->args[0])->dtype;
  if (!bytes_of(B->f, dot)) return JIT_OK; /* nothing to write */
  cg_matmul_desc desc;
  cg_matmul_desc_from_ir(&desc, B->f, dot, 0, tile_vec_bytes(B->e));
  int64_t nb = 0, m = 0, n = 0, k = 0;
  if (!(ir_dtype_is_int(dt) || ir_dtype_is_float(dt)) || dt == JIT_U32 || dt == JIT_U64 ||
      cg_matmul_shape(&desc, &nb, &m, &n, &k) != JIT_OK || k == 0) {
    jit_error_clear();
    return add_interp(B, &dot, 1, d->args, d->n_args, &dot, 1);
  }
  uint32_t n_epi = epi ? epi->n_reads + epi->reduces : 0; /* a reducing one writes its sums too */
  estep *s = add_step(B, ES_DOT, 4 + n_epi);
  if (!s) return oom();
  if (epi) {
    if (!(s->epi = malloc(sizeof *s->epi))) return oom();
    *s->epi = *epi;
    cg_epi_desc(s->epi, NULL, &desc, tile_vec_bytes(B->e)); /* redescribes the dot */
  }
  desc.bf16_amx = dt == JIT_BF16 ? (int)bf16_amx(B->e) : GEMM_AMX_OFF;
  /* vdpbf16ps stays the fallback of a dot AMX does not fit (gemm_core_amx_fits) */
  desc.bf16_dot = dt == JIT_BF16 && bf16_dot(B->e); /* measures once: only for bf16 dots */
  desc.bf16_cvt = B->e->ctx->jit && cg_jit_target(B->e->ctx->jit)->bf16_dot;
  TRY_RET(buf_for(B, d->args[0], &s->bufs[0]));
  TRY_RET(buf_for(B, d->args[1], &s->bufs[1]));
  for (uint32_t i = 0; i < (epi ? epi->n_reads : 0); i++)
    TRY_RET(buf_for(B, epi->reads[i], &s->bufs[2 + i]));
  if (epi && epi->reduces) TRY_RET(buf_for(B, epi->out, &s->bufs[2 + epi->n_reads]));
  TRY_RET(buf_for(B, epi && !epi->reduces ? epi->root : dot, &s->bufs[2 + n_epi]));
  s->bufs[3 + n_epi] = EXEC_MM_SCRATCH;
  s->dot = dot;
  s->rows = nb * m;
  s->row_work = n * k;
  s->grain = cg_matmul_row_grain(&desc);
  if (s->grain < 1) s->grain = 1;
  s->inline_run = (double)s->rows * (double)s->row_work < EXEC_DOT_PAR_MIN;
  snprintf(s->name, sizeof s->name, "tjit_dot%u", ki);
  size_t mm = exec_align_up(cg_matmul_scratch_bytes(&desc));
  if (mm > B->e->mm_bytes) B->e->mm_bytes = mm;
  gemm_core_plan cp;
  if (use_gemm_core(B->e, &desc) && cg_matmul_core_plan(&desc, &cp)) {
    s->team_bytes = exec_align_up(gemm_core_team_bytes(&cp, (int)jit_dtype_size(dt), &s->team_flags));
    if (core_programs()) TRY_RET(core_dot_build(&desc, s->epi, &s->core));
  } else if (dt == JIT_BF16 && core_target(B->e) && core_programs()) {
    /* bf16 dots run on the core only as programs (no generated code calls its bf16 form); an
       epilogue the programs lack keeps the generated kernel */
    TRY_RET(core_dot_build(&desc, s->epi, &s->core));
    if (s->core)
      s->team_bytes = exec_align_up(gemm_core_team_bytes(core_dot_plan(s->core), 4, &s->team_flags));
  }
  return JIT_OK;
}

/* Kernel ki's dot and kernel ki + 1's sum of an epilogue of it (cg_epi_plan_reduce) as one step,
   where the core runs both as a program (the sum happens in the matmul's store and the [rows, N]
   values between are never stored); *taken false: they stay two steps. */
static jit_status add_reducing_dot(builder *B, uint32_t ki, bool *taken) {
  *taken = false;
  const fz_kernel *k = &B->p->kernels[ki];
  cg_epi_plan epi;
  if (B->separate_epilogues || !core_programs() || !bytes_of(B->f, k->dot) ||
      !cg_epi_plan_reduce(B->p, ki, &epi))
    return JIT_OK;
  cg_matmul_desc desc;
  cg_epi_desc(&epi, NULL, &desc, tile_vec_bytes(B->e));
  int64_t nb = 0, m = 0, n = 0, kk = 0; /* add_dot interprets a dot with nothing to contract */
  if (cg_matmul_shape(&desc, &nb, &m, &n, &kk) != JIT_OK || kk == 0) {
    jit_error_clear();
    return JIT_OK;
  }
  if (!use_gemm_core(B->e, &desc)) return JIT_OK;
  core_dot *probe = NULL; /* the programs may lack one of the ops */
  TRY_RET(core_dot_build(&desc, &epi, &probe));
  if (!probe) return JIT_OK;
  core_dot_free(probe);
  TRY_RET(add_dot(B, ki, k->dot, &epi));
  if (!B->e->steps[B->e->n_steps - 1].core)
    return jit_error(JIT_EINTERNAL, "jit_call: a reducing dot epilogue lost its core");
  *taken = true;
  return JIT_OK;
}

static jit_status add_copy(builder *B, uint32_t src, uint32_t dst, size_t bytes) {
  estep *c = add_step(B, ES_COPY, 2);
  if (!c) return oom();
  c->bufs[0] = src;
  c->bufs[1] = dst;
  c->bytes = bytes;
  return JIT_OK;
}

/* The result buffers of the step si of a SCAN, COND or WHILE at ref v, from bufs[at] on: the
   first live GET of each result is written in place, others (first[k] not) copy it afterwards
   (copy_later_gets); a result nothing reads goes to scratch. *first is malloc'd. */
static jit_status bind_results(builder *B, ir_ref v, uint32_t si, uint32_t at, ir_ref **first) {
  const ir_func *f = B->f;
  const ir_ins *in = &f->ins[v];
  uint32_t nr = ir_body(f, in)->n_results;
  ir_ref *fi = *first = malloc((nr + 1) * sizeof *fi);
  if (!fi) return oom();
  for (uint32_t k = 0; k < nr; k++) fi[k] = IR_NOREF;
  for (ir_ref u = v + 1; u < f->n_ins; u++) {
    const ir_ins *g = &f->ins[u];
    if (g->op != IR_GET || g->args[0] != v || B->p->cls[u] != FZ_MAT) continue;
    uint32_t k = (uint32_t)g->attr.axis;
    if (fi[k] == IR_NOREF) fi[k] = u;
  }
  for (uint32_t k = 0; k < nr; k++) {
    if (fi[k] != IR_NOREF) {
      TRY_RET(buf_for(B, fi[k], &B->e->steps[si].bufs[at + k]));
    } else {
      ir_type t;
      size_t bytes = 0;
      ir_result_type(f, in, k, &t);
      array_byte_size(t.dtype, t.rank, t.dims, &bytes);
      TRY_RET(add_buf(B, EB_TEMP, 0, bytes, &B->e->steps[si].bufs[at + k]));
    }
  }
  return JIT_OK;
}

/* The copies from step si's result buffers (from bufs[at]) to the GETs bind_results did not
   place. */
static jit_status copy_later_gets(builder *B, ir_ref v, uint32_t si, uint32_t at, const ir_ref *first) {
  const ir_func *f = B->f;
  for (ir_ref u = v + 1; u < f->n_ins; u++) {
    const ir_ins *g = &f->ins[u];
    if (g->op != IR_GET || g->args[0] != v || B->p->cls[u] != FZ_MAT) continue;
    uint32_t k = (uint32_t)g->attr.axis, dst = 0;
    if (first[k] == u) continue;
    TRY_RET(buf_for(B, u, &dst));
    TRY_RET(add_copy(B, B->e->steps[si].bufs[at + k], dst, bytes_of(f, u)));
  }
  return JIT_OK;
}

/* A body's own executable; what building it cost counts as B's nested work. */
static jit_status build_body(builder *B, const ir_func *b, exec **out) {
  exec_stats bs = {0};
  jit_status st = exec_build(B->e->ctx, b, out, &bs);
  B->e->nested.codegen_ms += bs.codegen_ms;
  B->e->nested.llvm_ms += bs.llvm_ms;
  B->e->nested.load_ms += bs.load_ms;
  B->e->nested.n_kernels += bs.n_kernels;
  B->e->nested.n_native += bs.n_native;
  B->e->nested.disk_cache_hits += bs.disk_cache_hits;
  B->e->nested.disk_cache_lookups += bs.disk_cache_lookups;
  return st;
}

/* The scan at ref v as a step: its body compiled into an executable of its own, run once per
   step on the step's slices (carries alternate between two scratch sets). It reads its operands'
   buffers and writes its GETs' (a result nothing reads goes to scratch). */
static jit_status add_scan(builder *B, ir_ref v) {
  const ir_func *f = B->f;
  const ir_ins *in = &f->ins[v];
  const ir_func *b = ir_scan_body(f, in);
  uint32_t na = in->n_args, nr = b->n_results, nc = in->attr.scan.n_carry;
  estep *s = add_step(B, ES_SCAN, na + nr + 2 * nc);
  if (!s) return oom();
  uint32_t si = B->e->n_steps - 1;
  s->n_args = na;
  scan_plan *sp = calloc(1, sizeof *sp);
  if (!sp) return oom();
  s->scan = sp;
  sp->n_consts = in->attr.scan.n_consts;
  sp->n_carry = nc;
  sp->n_results = nr;
  sp->length = in->attr.scan.length;
  sp->reverse = in->attr.scan.reverse;
  sp->xstep = calloc(na + 1, sizeof *sp->xstep);
  sp->ystep = calloc(nr + 1, sizeof *sp->ystep);
  sp->cbytes = calloc(nc + 1, sizeof *sp->cbytes);
  sp->alias = calloc(nc + 1, sizeof *sp->alias);
  if (!sp->xstep || !sp->ystep || !sp->cbytes || !sp->alias) return oom();
  for (uint32_t i = 0; i < nc; i++) sp->cbytes[i] = bytes_of(f, in->args[sp->n_consts + i]);
  for (uint32_t i = 0; i < nc; i++) {
    sp->alias[i] = -1;
    for (uint32_t k = nc; k < nr && sp->alias[i] < 0 && sp->cbytes[i]; k++) {
      bool taken = false;
      for (uint32_t j = 0; j < i; j++) taken |= sp->alias[j] == (int32_t)k;
      if (!taken && b->results[k] == b->results[i]) sp->alias[i] = (int32_t)k;
    }
  }
  for (uint32_t i = 0; i < na; i++) {
    TRY_RET(buf_for(B, in->args[i], &s->bufs[i]));
    if (i >= sp->n_consts + nc) sp->xstep[i] = bytes_of(b, i);
  }
  for (uint32_t k = nc; k < nr; k++) sp->ystep[k] = bytes_of(b, b->results[k]);
  ir_ref *first = NULL;
  jit_status st = bind_results(B, v, si, na, &first);
  for (uint32_t i = 0; i < 2 * nc && st == JIT_OK; i++)
    st = add_buf(B, EB_TEMP, 0, bytes_of(f, in->args[sp->n_consts + i % nc]),
                 &B->e->steps[si].bufs[na + nr + i]);
  snprintf(B->e->steps[si].name, sizeof B->e->steps[si].name, "tjit_scan%u", si);
  if (st == JIT_OK) st = build_body(B, b, &B->e->steps[si].body);
  if (st == JIT_OK) B->e->steps[si].body->n_invariant = sp->n_consts;
  if (st == JIT_OK) st = copy_later_gets(B, v, si, na, first);
  free(first);
  return st;
}

/* A COND or WHILE at ref v as a step (run by exec_control.c): each body compiled into an
   executable of its own. bufs: the operands, the results, and for a WHILE one scratch set of
   carries the body writes before they are copied back into the results. */
static jit_status add_control(builder *B, ir_ref v) {
  const ir_func *f = B->f;
  const ir_ins *in = &f->ins[v];
  uint32_t na = in->n_args, nr = ir_body(f, in)->n_results, nb = ir_n_bodies(in);
  bool is_while = in->op == IR_WHILE;
  estep *s = add_step(B, is_while ? ES_WHILE : ES_COND, na + nr + (is_while ? nr : 0));
  if (!s) return oom();
  uint32_t si = B->e->n_steps - 1;
  s->n_args = na;
  s->n_consts = is_while ? in->attr.cond.n_consts : 0;
  s->n_bodies = nb;
  if (!(s->bodies = calloc(nb, sizeof *s->bodies))) return oom();
  snprintf(s->name, sizeof s->name, "tjit_%s%u", is_while ? "while" : "cond", si);
  for (uint32_t i = 0; i < na; i++) TRY_RET(buf_for(B, in->args[i], &s->bufs[i]));
  ir_ref *first = NULL;
  jit_status st = bind_results(B, v, si, na, &first);
  for (uint32_t k = 0; is_while && k < nr && st == JIT_OK; k++)
    st = add_buf(B, EB_TEMP, 0, bytes_of(f, in->args[in->attr.cond.n_consts + k]),
                 &B->e->steps[si].bufs[na + nr + k]);
  for (uint32_t j = 0; j < nb && st == JIT_OK; j++)
    st = build_body(B, ir_body_at(f, in, j), &B->e->steps[si].bodies[j]);
  if (st == JIT_OK) st = copy_later_gets(B, v, si, na, first);
  free(first);
  return st;
}

/* Adds the steps of the scans before ref `before` not added yet (*next: the first ref to look at). */
static jit_status add_scans_before(builder *B, ir_ref before, ir_ref *next) {
  for (; *next < before && *next < B->f->n_ins; (*next)++)
    if (B->p->cls[*next] == FZ_SCAN)
      TRY_RET(B->f->ins[*next].op == IR_SCAN ? add_scan(B, *next) : add_control(B, *next));
  return JIT_OK;
}

/* The written buffers of lf whose stores may stream (bit k: bufs[k]): when it writes
   EXEC_STREAM_MIN bytes or more, those it does not read back (a row too long for a row scratch
   array keeps a value in its output row, lower.c). Kernels bound by their math stream too: W1
   measured the same both ways, and the bandwidth they leave is the other core's. */
static uint64_t stream_candidates(const ir_func *f, const lp_func *lf) {
  if (lf->n_bufs > 64) return 0;
  size_t written = 0;
  uint64_t mask = 0;
  for (uint32_t i = lf->n_reads; i < lf->n_bufs; i++) {
    written += bytes_of(f, lf->buf_refs[i]);
    mask |= (uint64_t)1 << i;
  }
  if (written < EXEC_STREAM_MIN) return 0;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    const lp_ins *in = &lf->ins[i];
    if (in->op == LP_LOAD && in->buf >= 0 && in->buf < 64) mask &= ~((uint64_t)1 << in->buf);
  }
  return mask;
}

/* Lowers every kernel into lfs[] (NULL: interpreted or nothing to loop) and makes the steps. */
static jit_status make_steps(builder *B, lp_func **lfs) {
  jit_status st = JIT_OK;
  const fz_prog *p = B->p;
  ir_ref next_scan = 0;
  for (uint32_t ki = 0; ki < p->n_kernels; ki++) {
    const fz_kernel *k = &p->kernels[ki];
    TRY(add_scans_before(B, k->root, &next_scan));
    if (k->dot != IR_NOREF && k->root == k->dot) {
      bool taken;
      TRY(add_reducing_dot(B, ki, &taken));
      if (taken) { /* kernel ki + 1 is in the dot's step: neither is lowered */
        ki++;
        continue;
      }
    }
    st = lp_lower(p, ki, B->e->ctx->jit && cg_jit_target(B->e->ctx->jit)->fma, &lfs[ki]);
    if (st == JIT_EUNSUPPORTED) {
      jit_error_clear(); /* not a failure of the call: the interpreter runs this kernel */
      /* the whole kernel through the interpreter (its dot, if any, with it) */
      TRY(add_interp(B, k->ops, k->n_ops, k->reads, k->n_reads, k->writes, k->n_writes));
      continue;
    }
    TRY(st);
    /* the dot first; its elementwise epilogue, if any, runs in the matmul's store when it can,
       else as the loop kernel reading the dot's buffer */
    if (k->dot != IR_NOREF) {
      cg_epi_plan epi;
      bool fuse = lfs[ki] && !B->separate_epilogues && bytes_of(B->f, k->dot) &&
                  cg_epi_plan_make(p, ki, &epi);
      TRY(add_dot(B, ki, k->dot, fuse ? &epi : NULL));
      if (fuse && B->e->n_steps && B->e->steps[B->e->n_steps - 1].epi) {
        lp_free(lfs[ki]);
        lfs[ki] = NULL;
      }
    }
    lp_func *lf = lfs[ki];
    if (!lf) continue;
    estep *s = add_step(B, ES_KERNEL, lf->n_bufs);
    if (!s) TRY(oom());
    for (uint32_t i = 0; i < lf->n_bufs; i++) TRY(buf_for(B, lf->buf_refs[i], &s->bufs[i]));
    s->rows = lf->n_rows;
    s->row_work = lf->row_work;
    s->inline_run = (double)s->rows * (double)s->row_work < EXEC_PAR_MIN;
    snprintf(s->name, sizeof s->name, "%s", lf->name);
    s->kernel = ki;
    if (!s->inline_run) lf->stream_mask = s->stream_mask = stream_candidates(B->f, lf);
  }
  TRY(add_scans_before(B, B->f->n_ins, &next_scan));
  return JIT_OK;
fail:
  return st;
}

/* Buffers for params and results (results are written in place when a kernel makes them). */
static jit_status assign_buffers(builder *B) {
  const ir_func *f = B->f;
  const fz_prog *p = B->p;
  uint32_t id = 0;
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
    uint32_t src = 0;
    TRY_RET(buf_for(B, v, &src));
    const ebuf *b = &B->e->bufs[src];
    if (b->kind == EB_RESULT && b->index == r) continue;
    size_t n = bytes_of(f, v);
    if (!n) continue;
    uint32_t dst = 0;
    TRY_RET(add_buf(B, EB_RESULT, r, n, &dst));
    TRY_RET(add_copy(B, src, dst, n));
  }
  return JIT_OK;
}

void exec_buffer_lifetimes(const exec *e, uint32_t *first, uint32_t *last) {
  for (uint32_t b = 0; b < e->n_bufs; b++) first[b] = UINT32_MAX, last[b] = 0;
  for (uint32_t i = 0; i < e->n_steps; i++)
    for (uint32_t k = 0; k < e->steps[i].n_bufs; k++) {
      uint32_t b = e->steps[i].bufs[k];
      if (b == EXEC_MM_SCRATCH) continue;
      if (first[b] == UINT32_MAX) first[b] = i;
      last[b] = i;
    }
}

/* Places the intermediates in the arena: two share bytes when no step uses both (live from the
   first step that touches one to the last). Largest first, each at the lowest offset free of the
   buffers already placed whose lifetimes overlap. Then the matmul scratch blocks, one per thread
   that may run a dot at once. */
static jit_status pack_scratch(exec *e) {
  jit_status st = JIT_OK;
  uint32_t n = e->n_bufs;
  uint32_t *first = malloc((n ? n : 1) * sizeof *first), *last = malloc((n ? n : 1) * sizeof *last);
  uint32_t *order = malloc((n ? n : 1) * sizeof *order), *placed = malloc((n ? n : 1) * sizeof *placed);
  if (!first || !last || !order || !placed) {
    st = oom();
    goto done;
  }
  exec_buffer_lifetimes(e, first, last);
  uint32_t nt = 0, np = 0;
  for (uint32_t b = 0; b < n; b++)
    if (e->bufs[b].kind == EB_TEMP && first[b] != UINT32_MAX) order[nt++] = b;
  for (uint32_t i = 1; i < nt; i++) /* by size, decreasing (insertion sort: few buffers) */
    for (uint32_t j = i; j > 0 && e->bufs[order[j]].bytes > e->bufs[order[j - 1]].bytes; j--) {
      uint32_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  e->scratch_bytes = 0;
  for (uint32_t i = 0; i < nt; i++) {
    ebuf *b = &e->bufs[order[i]];
    size_t size = exec_align_up(b->bytes), off = 0;
    if (size < b->bytes) {
      st = oom();
      goto done;
    }
    for (bool moved = true; moved;) {
      moved = false;
      for (uint32_t j = 0; j < np; j++) {
        const ebuf *o = &e->bufs[placed[j]];
        size_t osize = exec_align_up(o->bytes);
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
  /* matmul scratch: as many blocks as threads the widest dot is split over */
  int nth = e->ctx && e->ctx->pool ? pool_n_threads(e->ctx->pool) : 1;
  e->mm_threads = 0;
  e->team_bytes = 0;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    if (s->kind != ES_DOT) continue;
    int64_t pieces = (s->rows + s->grain - 1) / s->grain;
    int t = s->inline_run ? 1 : pieces < nth ? (int)pieces : nth;
    if (t > e->mm_threads) e->mm_threads = t;
    if (t > 1 && s->team_bytes > e->team_bytes) e->team_bytes = s->team_bytes;
  }
  e->arena_bytes = e->scratch_bytes;
  if (e->mm_threads) {
    if (e->mm_bytes > (SIZE_MAX - e->arena_bytes - e->team_bytes) / (size_t)e->mm_threads) {
      st = oom();
      goto done;
    }
    e->arena_bytes += (size_t)e->mm_threads * e->mm_bytes + e->team_bytes;
  }
done:
  free(first);
  free(last);
  free(order);
  free(placed);
  return st;
}

/* A scan step gets a native loop when its body has a native entry to call. */
static bool scan_has_loop(const estep *s) { return s->kind == ES_SCAN && s->body && s->body->entry; }
/* A cond or while step gets a native function when every body has a native entry to call. */
static bool control_has_loop(const estep *s) {
  if (s->kind != ES_COND && s->kind != ES_WHILE) return false;
  for (uint32_t j = 0; j < s->n_bodies; j++)
    if (!s->bodies[j] || !s->bodies[j]->entry) return false;
  return true;
}

static jit_status mark_streams(const exec *e, LLVMModuleRef m);

/* Part 0: the loop kernels, the scan loops and the entry, which declares the matmul kernels it
   calls; parts 1..: one matmul kernel each. Their text depends only on f (names are kernel
   indices), as the disk cache key needs. */
/* A matmul part's pipeline: CG_MATMUL_PIPELINE (matmul.h), unless the context asks for none. */
static const char *dot_part_pipeline(int ctx_level) {
  return ctx_level < 1 ? cg_default_pipeline(ctx_level) : CG_MATMUL_PIPELINE;
}

/* Whether the precompiled core (gemm_core.h) may run this context's dots: the target and host
   have FMA, unless TJIT_GEMM_CORE=0 asks for generated kernels (to compare them). */
static bool core_target(const exec *e) {
  const char *env = getenv("TJIT_GEMM_CORE");
  if ((env && strcmp(env, "0") == 0) || e->ctx->opt_level < 1) return false;
  return cg_jit_target(e->ctx->jit)->fma && gemm_core_runs_here(tile_vec_bytes(e));
}

/* Whether f32/f64 dot d runs on the core rather than a generated kernel: core_target, and d has
   the core's form (32-byte vectors, one stride per index group). */
static bool use_gemm_core(const exec *e, const cg_matmul_desc *d) {
  gemm_core_plan cp;
  return core_target(e) && cg_matmul_core_plan(d, &cp);
}

/* Loop kernels go into up to n_threads modules, so that LLVM optimizes and emits them on as many
   threads (exec_compile.c): where the dots need no generated code, LLVM's time is all in the loop
   kernels (W8: 32 ms for its four, of 47 loop IR instructions in all: LLVM's work is in the
   vectorized, unrolled loops each kernel becomes); W6's one kernel takes ~9 ms, its entry ~3.
   Each module costs LLVM ~1.5 ms of fixed work (on its own thread), and the entry calls kernels
   of other modules without inlining them (a few ns a call). group[i] is lfs[i]'s module (0 holds
   the entry); returns how many. Heaviest kernels first into the lightest group, so the split
   depends only on the kernels and the thread count. */
enum { KERNEL_WEIGHT = 32, ENTRY_WEIGHT = 32 /* in loop IR instructions */ };

static int loop_groups(const exec *e, lp_func *const *lfs, uint32_t n, int *group) {
  int64_t load[EXEC_MAX_COMPILE_THREADS] = {ENTRY_WEIGHT};
  for (uint32_t i = 0; i < n; i++) group[i] = lfs[i] ? -1 : 0; /* -1: not placed yet */
  /* a small kernel the entry calls on its own thread stays in the entry's module, to be inlined
     there (W7's x + 1 lost 60 ns a call to the call) */
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    if (s->kind == ES_KERNEL && s->inline_run && s->kernel < n && group[s->kernel] == -1) {
      group[s->kernel] = 0;
      load[0] += KERNEL_WEIGHT + lfs[s->kernel]->n_ins;
    }
  }
  uint32_t count = 0;
  for (uint32_t i = 0; i < n; i++) count += group[i] == -1;
  int g = e->ctx->n_threads < EXEC_MAX_COMPILE_THREADS ? e->ctx->n_threads : EXEC_MAX_COMPILE_THREADS;
  if ((uint32_t)g > count + 1) g = (int)count + 1; /* the entry is the first module's work */
  if (g < 2 || count == 0) {
    for (uint32_t i = 0; i < n; i++) group[i] = 0;
    return 1;
  }
  for (uint32_t done = 0; done < count; done++) {
    uint32_t big = n;
    for (uint32_t i = 0; i < n; i++) /* the heaviest kernel not yet placed */
      if (group[i] == -1 && (big == n || lfs[i]->n_ins > lfs[big]->n_ins)) big = i;
    int light = 0;
    for (int j = 1; j < g; j++)
      if (load[j] < load[light]) light = j;
    load[light] += KERNEL_WEIGHT + lfs[big]->n_ins;
    group[big] = light;
  }
  return g;
}

/* Kernels with the same code (a layer's ops repeated, a forward op and the same op in the
   backward pass: 12 of W10's 66) are compiled once: the steps of the later ones run the first
   one's function (they are renamed to it). uniq[i] is lfs[i], or NULL for a repeat. */
static void share_kernels(exec *e, lp_func *const *lfs, uint32_t n, lp_func **uniq) {
  for (uint32_t i = 0; i < n; i++) {
    uniq[i] = lfs[i];
    for (uint32_t j = 0; j < i && lfs[i]; j++) {
      if (!uniq[j] || !lp_same_code(lfs[i], uniq[j])) continue;
      uniq[i] = NULL;
      for (uint32_t k = 0; k < e->n_steps; k++)
        if (e->steps[k].kind == ES_KERNEL && e->steps[k].kernel == i)
          snprintf(e->steps[k].name, sizeof e->steps[k].name, "%s", uniq[j]->name);
      break;
    }
  }
}

static jit_status build_parts(const exec *e, const ir_func *f, lp_func **lfs, uint32_t n,
                              exec_part **out, int *n_out) {
  jit_status st = JIT_OK;
  int *group = malloc((n ? n : 1) * sizeof *group);
  lp_func **sub = calloc(n ? n : 1, sizeof *sub);
  exec_part *parts = NULL;
  if (!group || !sub) {
    free(group);
    free(sub);
    return oom();
  }
  int ng = loop_groups(e, lfs, n, group);
  int np = ng;
  for (uint32_t i = 0; i < e->n_steps; i++) np += e->steps[i].kind == ES_DOT && !e->steps[i].core;
  parts = calloc((size_t)np, sizeof *parts);
  if (!parts) TRY(oom());
  for (int i = 0; i < np; i++)
    if (!(parts[i].c = LLVMContextCreate())) TRY(oom());
  LLVMContextRef c0 = parts[0].c;
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c0, 0), i64 = LLVMInt64TypeInContext(c0);
  LLVMTypeRef kty = LLVMFunctionType(LLVMVoidTypeInContext(c0), (LLVMTypeRef[]){ptr, i64, i64}, 3, 0);
  for (int g = 0; g < ng; g++) {
    exec_part *p = &parts[g];
    p->name = f->name ? f->name : "fn";
    for (uint32_t i = 0; i < n; i++) {
      sub[i] = group[i] == g ? lfs[i] : NULL;
      if (g > 0 && sub[i] && p->name == parts[0].name) p->name = lfs[i]->name;
    }
    p->pipeline = cg_default_pipeline(e->ctx->opt_level);
    p->after_optimize = mark_streams;
    TRY(lp_emit_llvm(sub, n, p->c, p->name, &p->m));
  }
  for (uint32_t i = 0; i < n; i++) /* the entry calls small kernels directly: declared in part 0 */
    if (lfs[i] && group[i] != 0 && !LLVMAddFunction(parts[0].m, lfs[i]->name, kty)) TRY(oom());
  int k = ng;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    if (s->kind != ES_DOT || s->core) continue;
    exec_part *p = &parts[k++];
    p->name = s->name;
    p->pipeline = dot_part_pipeline(e->ctx->opt_level);
    if (!(p->m = LLVMModuleCreateWithNameInContext(s->name, p->c))) TRY(oom());
    cg_matmul_desc d;
    if (s->epi) cg_epi_desc(s->epi, p->m, &d, tile_vec_bytes(e));
    else cg_matmul_desc_from_ir(&d, f, s->dot, 0, tile_vec_bytes(e));
    if (use_gemm_core(e, &d)) TRY(cg_matmul_core_emit(p->m, s->name, &d));
    else TRY(cg_matmul_emit(p->m, s->name, &d));
    if (!LLVMAddFunction(parts[0].m, s->name, kty)) TRY(oom()); /* defined by part k */
  }
  for (uint32_t i = 0; i < e->n_steps; i++)
    if (scan_has_loop(&e->steps[i])) TRY(exec_emit_scan_loop(&e->steps[i], parts[0].m));
    else if (control_has_loop(&e->steps[i])) TRY(exec_emit_control(&e->steps[i], e, parts[0].m));
  TRY(exec_emit_entry(e, parts[0].m));
  free(group);
  free(sub);
  *out = parts;
  *n_out = np;
  return JIT_OK;
fail:
  free(group);
  free(sub);
  exec_parts_free(parts, np);
  return st;
}

/* build_parts of the kernels share_kernels leaves: what compile compiles and a dump prints. */
static jit_status build_shared_parts(exec *e, const ir_func *f, lp_func *const *lfs, uint32_t n,
                                     exec_part **out, int *n_out) {
  lp_func **uniq = malloc((n ? n : 1) * sizeof *uniq);
  if (!uniq) return oom();
  share_kernels(e, lfs, n, uniq);
  jit_status st = build_parts(e, f, uniq, n, out, n_out);
  free(uniq);
  return st;
}

static bool has_native(const exec *e) {
  for (uint32_t i = 0; i < e->n_steps; i++)
    if (e->steps[i].kind == ES_KERNEL || (e->steps[i].kind == ES_DOT && !e->steps[i].core) ||
        scan_has_loop(&e->steps[i]) ||
        control_has_loop(&e->steps[i]))
      return true;
  return false;
}

/* Makes the stores of each streaming kernel streaming, in the optimized module. */
static jit_status mark_streams(const exec *e, LLVMModuleRef m) {
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    LLVMValueRef fn = s->stream_mask ? LLVMGetNamedFunction(m, s->name) : NULL;
    if (fn && !LLVMIsDeclaration(fn)) /* in this part */
      TRY_RET(cg_stream_stores(m, s->name, s->stream_mask, NULL));
  }
  return JIT_OK;
}

/* Builds the parts, takes their objects from the disk cache or compiles (and stores) them, loads
   them into one JITDylib and binds the entry and every kernel step to its function. */
static jit_status compile(exec *e, const ir_func *f, lp_func **lfs, uint32_t n, exec_stats *stats) {
  jit_status st = JIT_OK;
  cg_jit *jit = e->ctx->jit;
  if (!has_native(e)) return JIT_OK;
  if (!jit) return jit_error(JIT_EINTERNAL, "jit_call: no JIT in a context with opt_level %d", e->ctx->opt_level);
  double t0 = now_ms();
  exec_part *parts = NULL;
  int np = 0;
  const void **objs = NULL;
  size_t *lens = NULL;
  uint64_t pt = prof_begin();
  TRY(build_shared_parts(e, f, lfs, n, &parts, &np));
  prof_end(pt, "compile", "llvm module", 1, &(prof_arg){"modules", NULL, np});
  double t1 = now_ms();
  TRY(exec_compile_parts(e, parts, np, stats));
  double t2 = now_ms();
  pt = prof_begin();
  objs = malloc((size_t)np * sizeof *objs);
  lens = malloc((size_t)np * sizeof *lens);
  if (!objs || !lens) TRY(oom());
  for (int i = 0; i < np; i++) objs[i] = parts[i].obj, lens[i] = parts[i].len;
  TRY(cg_add_objects(jit, objs, lens, np, &e->lib));
  for (uint32_t i = 0; i < e->n_steps; i++) {
    estep *s = &e->steps[i];
    if (s->kind != ES_KERNEL && s->kind != ES_DOT && !scan_has_loop(s) && !control_has_loop(s)) continue;
    if (s->core) continue; /* no generated code */
    void *fn = NULL;
    TRY(cg_lookup(e->lib, s->name, &fn));
    if (s->kind == ES_SCAN) memcpy(&s->loop, &fn, sizeof fn);
    else if (s->kind == ES_COND || s->kind == ES_WHILE) memcpy(&s->native, &fn, sizeof fn);
    else s->fn = (kernel_fn)fn;
  }
  if (e->n_params + e->n_results + 1 <= FFI_ENTRY_MAX_ARGS) {
    void *fn = NULL;
    TRY(cg_lookup(e->lib, EXEC_ENTRY_NAME, &fn));
    TRY(ffi_entry_prepare((int)(e->n_params + e->n_results + 1), &e->cif));
    /* ISO C has no object -> function pointer cast; POSIX (dlsym) guarantees it works */
    memcpy(&e->entry, &fn, sizeof fn);
  }
  prof_end(pt, "compile", "load", 1, &(prof_arg){"fn", e->name, 0});
  stats->codegen_ms += t1 - t0;
  stats->load_ms += now_ms() - t2;
  stats->llvm_ms += now_ms() - t1;
fail:
  free(objs);
  free(lens);
  exec_parts_free(parts, np);
  return st;
}

static void free_lowered(fz_prog *p, lp_func **lfs) {
  if (lfs)
    for (uint32_t i = 0; p && i < p->n_kernels; i++) lp_free(lfs[i]);
  free(lfs);
  fz_prog_free(p);
}

/* Fusion, lowering, steps and the results that reuse donated params' buffers: everything but
   the machine code. */
static jit_status plan(jit_ctx *ctx, const ir_func *f, uint64_t donate, bool separate_epilogues,
                       exec **out, fz_prog **pp, lp_func ***lfsp) {
  jit_status st = JIT_OK;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  builder B = {0};
  exec *e = calloc(1, sizeof *e);
  if (!e) return oom();
  pthread_mutex_init(&e->dev_mu, NULL);
  e->ctx = ctx;
  e->n_params = f->n_params;
  e->n_results = f->n_results;
  atomic_flag_clear(&e->busy);
  if (!(e->name = strdup(f->name ? f->name : "fn"))) TRY(oom());
  uint64_t pt = prof_begin();
  TRY(ir_fuse(f, &p));
  prof_end(pt, "compile", "fusion", 1, &(prof_arg){"kernels", NULL, p->n_kernels});
  pt = prof_begin();
  B.e = e;
  B.f = f;
  B.p = p;
  B.separate_epilogues = separate_epilogues;
  B.buf_of = malloc((f->n_ins ? f->n_ins : 1) * sizeof *B.buf_of);
  lfs = calloc(p->n_kernels ? p->n_kernels : 1, sizeof *lfs);
  if (!B.buf_of || !lfs) TRY(oom());
  for (uint32_t i = 0; i < f->n_ins; i++) B.buf_of[i] = -1;
  TRY(assign_buffers(&B));
  TRY(make_steps(&B, lfs));
  TRY(add_copies(&B));
  TRY(exec_plan_donations(e, f, lfs, donate));
  TRY(pack_scratch(e));
  prof_end(pt, "compile", "lowering", 1, &(prof_arg){"steps", NULL, e->n_steps});
  free(B.buf_of);
  *out = e;
  *pp = p;
  *lfsp = lfs;
  return JIT_OK;
fail:
  free_lowered(p, lfs);
  free(B.buf_of);
  exec_free(e);
  return st;
}

jit_status exec_plan_for_c(jit_ctx *ctx, const ir_func *f, exec **out, fz_prog **p,
                           lp_func ***lfs) {
  if (ir_func_has_complex(f))
    return jit_error(JIT_EUNSUPPORTED, "export C: @%s has complex values, which the C export does "
                                       "not take yet", f->name ? f->name : "fn");
  return plan(ctx, f, 0, true, out, p, lfs);
}

void exec_plan_free(exec *e, fz_prog *p, lp_func **lfs) {
  free_lowered(p, lfs);
  exec_free(e);
}

jit_status exec_build(jit_ctx *ctx, const ir_func *f, exec **out, exec_stats *stats) {
  return exec_build_donating(ctx, f, 0, out, stats);
}

/* A function with complex values compiles as its real expansion (complex_expand.c), tidied by
   the pipeline: fusion and codegen only ever see real code. Params and results keep their
   bytes, so the executable runs on the complex function's buffers. */
static jit_status real_copy(const ir_func *f, ir_func **out) {
  ir_func *g = ir_func_clone(f);
  if (!g) return oom();
  jit_status st = ir_expand_complex(g);
  if (st == JIT_OK) st = ir_optimize(g, 0, false);
  if (st != JIT_OK) ir_func_free(g);
  *out = st == JIT_OK ? g : NULL;
  return st;
}

static jit_status build_complex(jit_ctx *ctx, const ir_func *f, uint64_t donate, exec **out,
                                exec_stats *stats) {
  ir_func *g = NULL;
  jit_status st = real_copy(f, &g);
  if (st == JIT_OK) st = exec_build_donating(ctx, g, donate, out, stats);
  ir_func_free(g);
  return st;
}

jit_status exec_build_donating(jit_ctx *ctx, const ir_func *f, uint64_t donate, exec **out,
                               exec_stats *stats) {
  if (ir_func_has_complex(f)) return build_complex(ctx, f, donate, out, stats);
  jit_status st = JIT_OK;
  double t0 = now_ms();
  memset(stats, 0, sizeof *stats);
  *out = NULL;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  exec *e = NULL;
  TRY(plan(ctx, f, donate, false, &e, &p, &lfs));
  stats->n_kernels = (int)p->n_kernels;
  for (uint32_t i = 0; i < e->n_steps; i++)
    stats->n_native += e->steps[i].kind == ES_KERNEL || e->steps[i].kind == ES_DOT;
  /* the scan bodies were built inside plan(): their LLVM time is LLVM time, not codegen */
  stats->codegen_ms = now_ms() - t0 - e->nested.llvm_ms;
  TRY(compile(e, f, lfs, p->n_kernels, stats));
  stats->llvm_ms += e->nested.llvm_ms;
  stats->load_ms += e->nested.load_ms;
  stats->disk_cache_lookups += e->nested.disk_cache_lookups;
  stats->n_kernels += e->nested.n_kernels;
  stats->n_native += e->nested.n_native;
  stats->disk_cache_hits += e->nested.disk_cache_hits;
  *out = e;
  e = NULL;
fail:
  free_lowered(p, lfs);
  exec_free(e);
  return st;
}

/* ---- dumps ------------------------------------------------------------------------------------- */

jit_status exec_dump(jit_ctx *ctx, const ir_func *f, unsigned stage, FILE *out) {
  if (ir_func_has_complex(f)) { /* what runs: the real expansion (see build_complex) */
    ir_func *g = NULL;
    jit_status st = real_copy(f, &g);
    if (st == JIT_OK) st = exec_dump(ctx, g, stage, out);
    ir_func_free(g);
    return st;
  }
  jit_status st = JIT_OK;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  exec *e = NULL;
  exec_part *parts = NULL;
  int np = 0;
  if (stage == JIT_DUMP_FUSED) {
    TRY(ir_fuse(f, &p));
    st = fz_print(p, out);
    goto fail;
  }
  TRY(plan(ctx, f, 0, false, &e, &p, &lfs));
  if (stage == JIT_DUMP_C) {
    TRY(lp_emit_c_prelude(out));
    for (uint32_t i = 0; i < p->n_kernels; i++) {
      const fz_kernel *k = &p->kernels[i];
      char name[32];
      bool mm = false;
      snprintf(name, sizeof name, "tjit_dot%u", i);
      for (uint32_t s = 0; s < e->n_steps; s++)
        mm |= e->steps[s].kind == ES_DOT && strcmp(e->steps[s].name, name) == 0;
      if (k->dot != IR_NOREF && mm)
        fprintf(out, "/* k%u: dot %%%u is the matmul kernel %s (LLVM IR only) */\n", i, k->dot, name);
      else if (k->dot != IR_NOREF)
        fprintf(out, "/* k%u: dot %%%u runs in the interpreter */\n", i, k->dot);
      if (lfs[i]) TRY(lp_emit_c(lfs[i], out));
      else if (k->dot == IR_NOREF) fprintf(out, "/* k%u runs in the interpreter */\n", i);
      fputc('\n', out);
    }
    goto fail;
  }
  TRY(build_shared_parts(e, f, lfs, p->n_kernels, &parts, &np)); /* as compile builds them */
  for (int i = 0; i < np; i++) {
    if (ctx && ctx->jit) {
      TRY(cg_optimize_pipeline(ctx->jit, parts[i].m, parts[i].pipeline));
      if (parts[i].after_optimize) TRY(parts[i].after_optimize(e, parts[i].m));
    }
    char *text = cg_module_text(parts[i].m);
    if (!text) TRY(oom());
    fputs(text, out);
    free(text);
  }
  for (uint32_t i = 0; i < e->n_steps; i++)
    if (e->steps[i].core) core_dot_print(e->steps[i].core, e->steps[i].name, out);
fail:
  exec_parts_free(parts, np);
  free_lowered(p, lfs);
  exec_free(e);
  if (st == JIT_OK && ferror(out)) st = jit_error(JIT_EIO, "jit_fn_dump: write failed");
  return st;
}
