/* export_c.c: jit_fn_export_c: a compiled signature as standalone C (NAME.c, NAME.h): the steps
 * exec_build plans (loop kernels through emit_c.c with the JIT's inline math, dots through
 * emit_c_matmul.c, copies), run in order by `int NAME(void *const *args, void *const *results)`
 * on per-call intermediates, optionally split over NAME_THREADS pthreads.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"
#include "runtime/runtime.h"

static const char who[] = "jit_fn_export_c";

/* Splitting rows over threads: a job runs fn on [lo, hi) of a range. */
static const char parallel[] =
    "#if @M@_THREADS > 1\n"
    "#include <pthread.h>\n"
    "#endif\n"
    "typedef int (*tjit_range_fn)(void *ctx, int64_t lo, int64_t hi);\n"
    "typedef struct tjit_job { tjit_range_fn fn; void *ctx; int64_t lo, hi; int st; } tjit_job;\n"
    "static inline void *tjit_job_run(void *p) {\n"
    "  tjit_job *j = p;\n"
    "  j->st = j->fn(j->ctx, j->lo, j->hi);\n"
    "  return NULL;\n"
    "}\n"
    "/* fn over [0, n) in up to @M@_THREADS pieces when n has grain * 2 or more; 0 or a failure */\n"
    "static inline int tjit_parallel(tjit_range_fn fn, void *ctx, int64_t n, int64_t grain) {\n"
    "#if @M@_THREADS > 1\n"
    "  int nt = @M@_THREADS;\n"
    "  if (grain < 1) grain = 1;\n"
    "  if (n / grain < nt) nt = (int)(n / grain);\n"
    "  if (nt > 1) {\n"
    "    tjit_job jobs[@M@_THREADS];\n"
    "    pthread_t th[@M@_THREADS];\n"
    "    int started[@M@_THREADS] = {0}, st = 0;\n"
    "    for (int t = 0; t < nt; t++)\n"
    "      jobs[t] = (tjit_job){fn, ctx, n * t / nt / grain * grain, t + 1 == nt ? n : n * (t + 1) / nt / grain * grain, 0};\n"
    "    for (int t = 1; t < nt; t++) started[t] = pthread_create(&th[t], NULL, tjit_job_run, &jobs[t]) == 0;\n"
    "    tjit_job_run(&jobs[0]);\n"
    "    for (int t = 1; t < nt; t++) {\n"
    "      if (started[t]) pthread_join(th[t], NULL);\n"
    "      else tjit_job_run(&jobs[t]);\n"
    "      st |= jobs[t].st;\n"
    "    }\n"
    "    return st | jobs[0].st;\n"
    "  }\n"
    "#endif\n"
    "  (void)grain;\n"
    "  return fn(ctx, 0, n);\n"
    "}\n"
    "typedef struct tjit_kcall { void (*k)(void *const *, int64_t, int64_t); void *const *bufs; } tjit_kcall;\n"
    "static inline int tjit_kernel_rows(void *p, int64_t lo, int64_t hi) {\n"
    "  const tjit_kcall *c = p;\n"
    "  c->k(c->bufs, lo, hi);\n"
    "  return 0;\n"
    "}\n";

static void put_macro_text(FILE *out, const char *text, const char *macro) {
  for (const char *p = text; *p;) {
    if (strncmp(p, "@M@", 3) == 0) {
      fputs(macro, out);
      p += 3;
    } else {
      fputc(*p++, out);
    }
  }
}

/* The C identifier for f's name: other characters become '_', a leading digit gets one. */
static void c_name(const char *name, char *buf, size_t n, char *upper) {
  size_t k = 0;
  if (isdigit((unsigned char)name[0]) && k + 1 < n) buf[k++] = '_';
  for (const char *p = name; *p && k + 1 < n; p++)
    buf[k++] = isalnum((unsigned char)*p) ? *p : '_';
  buf[k] = 0;
  for (size_t i = 0; i <= k; i++) upper[i] = (char)toupper((unsigned char)buf[i]);
}

/* One operand's dims of a dot as a tjit_grp initializer (row-major strides of t). */
static void put_grp(FILE *out, const ir_type *t, const int *dims, int n) {
  int64_t str[IR_MAX_RANK];
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    str[d] = s;
    s *= t->dims[d];
  }
  fprintf(out, "{%d, {", n);
  for (int i = 0; i < n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)t->dims[dims[i]]);
  fputs(n ? "}, {" : "0}, {", out);
  for (int i = 0; i < n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)str[dims[i]]);
  fputs(n ? "}}" : "0}}", out);
}

/* The free dims of an operand: neither batch nor contracted, in order. */
static int free_dims(const ir_type *t, const uint8_t *batch, const uint8_t *contract, int nb,
                     int nc, int *out) {
  int n = 0;
  for (int d = 0; d < t->rank; d++) {
    bool used = false;
    for (int i = 0; i < nb; i++) used |= batch[i] == d;
    for (int i = 0; i < nc; i++) used |= contract[i] == d;
    if (!used) out[n++] = d;
  }
  return n;
}

static int64_t prod(const ir_type *t, const int *dims, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= t->dims[dims[i]];
  return p;
}

/* Step si (a dot: lhs, rhs, out, scratch) as a call of tjit_dot_f32/f64. */
static jit_status put_dot(FILE *out, const ir_func *f, const estep *s, const char *macro) {
  const ir_ins *in = &f->ins[s->dot];
  const ir_type *lt = ir_type_of(f, in->args[0]), *rt = ir_type_of(f, in->args[1]);
  const ir_dot_dims *dd = &in->attr.dot;
  if (in->op != IR_DOT)
    return jit_error(JIT_EUNSUPPORTED, "%s: %s: a %s has no exported C form yet", who, f->name,
                     ir_op_name[in->op]);
  if (lt->dtype != JIT_F32 && lt->dtype != JIT_F64)
    return jit_error(JIT_EUNSUPPORTED, "%s: %s: a %s matmul has no exported C form (f32, f64 only)",
                     who, f->name, jit_dtype_name(lt->dtype));
  int lb[IR_MAX_RANK], lk[IR_MAX_RANK], rb[IR_MAX_RANK], rk[IR_MAX_RANK], lm[IR_MAX_RANK], rn[IR_MAX_RANK];
  int nb = dd->n_batch, nc = dd->n_contract;
  for (int i = 0; i < nb; i++) lb[i] = dd->lhs_batch[i], rb[i] = dd->rhs_batch[i];
  for (int i = 0; i < nc; i++) lk[i] = dd->lhs_contract[i], rk[i] = dd->rhs_contract[i];
  int nm = free_dims(lt, dd->lhs_batch, dd->lhs_contract, nb, nc, lm);
  int nn = free_dims(rt, dd->rhs_batch, dd->rhs_contract, nb, nc, rn);
  fprintf(out, "  {\n    static const tjit_dot d0 = {0, 0, 0, %lld, %lld, %lld, %lld,\n      ",
          (long long)prod(lt, lb, nb), (long long)prod(lt, lm, nm), (long long)prod(rt, rn, nn),
          (long long)prod(lt, lk, nc));
  put_grp(out, lt, lb, nb);
  fputs(", ", out);
  put_grp(out, lt, lm, nm);
  fputs(", ", out);
  put_grp(out, lt, lk, nc);
  fputs(",\n      ", out);
  put_grp(out, rt, rb, nb);
  fputs(", ", out);
  put_grp(out, rt, rk, nc);
  fputs(", ", out);
  put_grp(out, rt, rn, nn);
  const char *sfx = lt->dtype == JIT_F64 ? "f64" : "f32";
  fprintf(out, "};\n    tjit_dot d = d0;\n    d.lhs = b[%u];\n    d.rhs = b[%u];\n    d.out = b[%u];\n"
          "    if (tjit_parallel(tjit_dot_rows_%s, &d, d.M, TJIT_MC)) goto fail;\n  }\n",
          s->bufs[0], s->bufs[1], s->bufs[2], sfx);
  (void)macro;
  return JIT_OK;
}

static void put_signature(FILE *out, const ir_func *f) {
  char ty[160];
  fputs("   args:\n", out);
  for (uint32_t i = 0; i < f->n_params; i++) {
    ir_format_type(ir_type_of(f, i), ty, sizeof ty);
    fprintf(out, "     args[%u]     %s\n", i, ty);
  }
  fputs("   results:\n", out);
  for (uint32_t i = 0; i < f->n_results; i++) {
    ir_format_type(ir_type_of(f, f->results[i]), ty, sizeof ty);
    fprintf(out, "     results[%u]  %s\n", i, ty);
  }
}

static jit_status write_header(const char *path, const char *name, const char *macro,
                               const ir_func *f) {
  FILE *out = fopen(path, "w");
  if (!out) return jit_error(JIT_EIO, "%s: cannot create %s: %s", who, path, strerror(errno));
  fprintf(out, "/* %s.h: the signature of tjit function '%s' exported as standalone C (%s.c).\n", name,
          f->name, name);
  fputs("   Every pointer is dense C-order (row-major) host memory of these dtypes and shapes:\n", out);
  put_signature(out, f);
  fprintf(out, "   %s returns 0, or 1 when out of memory for its intermediates. It keeps no state, so\n"
          "   several threads may call it at once. Build: cc -O2 -march=native -c %s.c\n"
          "   (-D%s_THREADS=n -pthread splits large kernels and matmuls over n threads). */\n",
          name, name, macro);
  fprintf(out, "#ifndef %s_H\n#define %s_H\n\nint %s(void *const *args, void *const *results);\n\n#endif\n",
          macro, macro, name);
  bool bad = ferror(out) != 0;
  if (fclose(out) != 0 || bad) return jit_error(JIT_EIO, "%s: writing %s failed", who, path);
  return JIT_OK;
}

static jit_status check_steps(const exec *e, const ir_func *f) {
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    if (s->kind == ES_SCAN || s->kind == ES_COND || s->kind == ES_WHILE)
      return jit_error(JIT_EUNSUPPORTED, "%s: %s: the signature has a %s, which exported C does "
                       "not run yet", who, f->name, s->kind == ES_SCAN ? "scan" : s->kind == ES_COND
                       ? "cond" : "while loop");
    if (s->kind == ES_INTERP)
      return jit_error(JIT_EUNSUPPORTED, "%s: %s: kernel of '%s' has no compiled form (the JIT "
                       "interprets it), so it has no C form", who, f->name,
                       s->sub && s->sub->n_ins ? ir_op_name[s->sub->ins[s->sub->n_ins - 1].op] : "?");
  }
  return JIT_OK;
}

static jit_status write_source(const char *path, const char *name, const char *macro,
                               const ir_func *f, const exec *e, const fz_prog *p, lp_func **lfs) {
  jit_status st = JIT_OK;
  FILE *out = fopen(path, "w");
  if (!out) return jit_error(JIT_EIO, "%s: cannot create %s: %s", who, path, strerror(errno));
  fprintf(out, "/* %s.c: tjit function '%s' as standalone C, written by jit_fn_export_c (see %s.h).\n"
          "   Kernels are tjit's fused loop kernels; transcendentals are tjit's inline polynomials. */\n",
          name, f->name, name);
  fprintf(out, "#include \"%s.h\"\n#include <stdlib.h>\n", name);
  fprintf(out, "#ifndef %s_THREADS\n#define %s_THREADS 1\n#endif\n", macro, macro);
  TRY(lp_emit_c_prelude(out));
  TRY(lp_emit_c_math(out));
  TRY(lp_emit_c_matmul(out));
  put_macro_text(out, parallel, macro);
  fputs("static inline int tjit_dot_rows_f32(void *d, int64_t lo, int64_t hi) { return tjit_dot_f32(d, lo, hi); }\n"
        "static inline int tjit_dot_rows_f64(void *d, int64_t lo, int64_t hi) { return tjit_dot_f64(d, lo, hi); }\n\n",
        out);
  for (uint32_t k = 0; k < p->n_kernels; k++)
    if (lfs[k]) TRY(lp_emit_c_kernel(lfs[k], true, out));
  fprintf(out, "\nint %s(void *const *args, void *const *results) {\n", name);
  fputs("  static const unsigned char empty[64];\n  (void)empty;\n", out);
  if (e->scratch_bytes)
    fprintf(out, "  unsigned char *scratch = tjit_alloc(%zuu);\n  if (!scratch) return 1;\n",
            e->scratch_bytes);
  else
    fputs("  unsigned char *scratch = NULL;\n", out);
  fprintf(out, "  void *const b[%u] = {\n", e->n_bufs ? e->n_bufs : 1);
  for (uint32_t i = 0; i < e->n_bufs; i++) {
    const ebuf *eb = &e->bufs[i];
    if (!eb->bytes) fputs("    (void *)empty", out);
    else if (eb->kind == EB_PARAM) fprintf(out, "    args[%u]", eb->index);
    else if (eb->kind == EB_RESULT) fprintf(out, "    results[%u]", eb->index);
    else fprintf(out, "    scratch + %zu", eb->off);
    fputs(",\n", out);
  }
  if (!e->n_bufs) fputs("    NULL,\n", out);
  fputs("  };\n  (void)b;\n  (void)args;\n  (void)results;\n", out);
  for (uint32_t i = 0; i < e->n_steps; i++) {
    const estep *s = &e->steps[i];
    if (s->kind == ES_COPY) {
      fprintf(out, "  memcpy(b[%u], b[%u], %zuu);\n", s->bufs[1], s->bufs[0], s->bytes);
    } else if (s->kind == ES_DOT) {
      TRY(put_dot(out, f, s, macro));
    } else if (s->kind == ES_KERNEL) {
      fprintf(out, "  {\n    void *const k[%u] = {", s->n_bufs ? s->n_bufs : 1);
      for (uint32_t k = 0; k < s->n_bufs; k++) fprintf(out, "%sb[%u]", k ? ", " : "", s->bufs[k]);
      /* rows in pieces of about 64K elements, as the runtime splits them */
      int64_t grain = s->row_work > 0 ? 65536 / s->row_work : 1;
      fprintf(out, "%s};\n    tjit_kcall c = {%s, k};\n    tjit_parallel(tjit_kernel_rows, &c, %lld, %lld);\n  }\n",
              s->n_bufs ? "" : "NULL", s->name, (long long)s->rows, (long long)(grain > 0 ? grain : 1));
    }
  }
  fputs("  free(scratch);\n  return 0;\n", out);
  fputs("  goto fail;\nfail:\n  free(scratch);\n  return 1;\n}\n", out);
fail:
  if (ferror(out) && st == JIT_OK) st = jit_error(JIT_EIO, "%s: writing %s failed", who, path);
  if (fclose(out) != 0 && st == JIT_OK) st = jit_error(JIT_EIO, "%s: writing %s failed", who, path);
  return st;
}

jit_status jit_fn_export_c(jit_fn *f, jit_array *const *args, const char *dir) {
  jit_status st = JIT_OK;
  if (!f) return jit_error(JIT_EINVAL, "%s: f is NULL", who);
  if (!dir) return jit_error(JIT_EINVAL, "%s: %s: dir is NULL", who, f->name);
  jit_sig *s = NULL;
  if ((st = fn_signature(f, args, who, &s)) != JIT_OK) return st;
  if (s->spmd) {
    sig_unref(s);
    return jit_error(JIT_EUNSUPPORTED, "%s: %s: the signature is partitioned over a mesh; export "
                     "the unsharded signature (uncommitted args, no sharding constraints)", who, f->name);
  }
  char name[64], macro[64];
  c_name(f->name, name, sizeof name, macro);
  size_t n = strlen(dir) + strlen(name) + 4;
  char *cpath = malloc(n), *hpath = malloc(n);
  exec *e = NULL;
  fz_prog *p = NULL;
  lp_func **lfs = NULL;
  if (!cpath || !hpath) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  snprintf(cpath, n, "%s/%s.c", dir, name);
  snprintf(hpath, n, "%s/%s.h", dir, name);
  TRY(exec_plan_for_c(f->ctx, s->optimized, &e, &p, &lfs));
  TRY(check_steps(e, s->optimized));
  TRY(write_header(hpath, name, macro, s->optimized));
  TRY(write_source(cpath, name, macro, s->optimized, e, p, lfs));
fail:
  if (e) exec_plan_free(e, p, lfs);
  free(cpath);
  free(hpath);
  sig_unref(s);
  return st;
}
