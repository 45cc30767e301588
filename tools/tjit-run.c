/* tjit-run: compiles IR text (a TJIT_DUMP file or jit_fn_dump output, traced or optimized) and
 * runs it on .npy or seeded random inputs, as XLA's run_hlo_module: a dump becomes a reproduction. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ir/ir.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "tjit.h"
#include "tool_io.h"
#include "trace/trace.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: tjit-run [options] FILE\n"
          "Compiles the IR function in FILE (what TJIT_DUMP writes, or jit_fn_dump's text: the\n"
          "traced or optimized stage), runs it, and prints cold and warm times with its stats.\n"
          "  --in A.npy B.npy ...  one .npy input per param, in order\n"
          "  --random SEED         seeded random inputs instead (floats in [-1,1), ints in [-8,8],\n"
          "                        u8 in [0,16], bool 0/1)\n"
          "  --out A.npy ...       write the results, one file per result\n"
          "  --out-dir DIR         write the results as DIR/out0.npy, DIR/out1.npy, ...\n"
          "  --iters N             warm calls to time (default 10; the median is printed)\n"
          "  --compile-only        compile the signature (jit_precompile) and print where the\n"
          "                        time went; run nothing\n"
          "  --check               compare with the reference interpreter, print each result's\n"
          "                        max error\n"
          "  --tol X               with --check: exit 1 when an error exceeds X (the error is\n"
          "                        |got - want| / max(1, |want|))\n"
          "  --stage traced|optimized  the section of a multi-stage dump (default: optimized if\n"
          "                        present, else traced)\n"
          "  --func NAME           the function, when the section holds several\n"
          "  --devices N, --threads N, --opt-level N   the jit_ctx's options (IR with\n"
          "                        `sharding` ops runs over devices 0..n-1 of its mesh; --devices\n"
          "                        defaults to the mesh's size)\n"
          "Exit status: 0 ok, 1 a failure (or --tol exceeded), 2 a usage error.\n");
}

typedef struct options {
  const char *path;
  const char **in, **out; /* n_in / n_out file names (pointers into argv) */
  int n_in, n_out;
  const char *out_dir;
  bool random, check, compile_only;
  unsigned long long seed;
  int iters;
  double tol;            /* < 0: none */
  const char *stage, *func;
  jit_ctx_opts ctx;
} options;

static bool parse_int_arg(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* Returns 0, or 2 after printing the usage problem. */
static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->iters = 10;
  o->tol = -1;
  o->ctx = jit_ctx_opts_default();
  o->in = calloc((size_t)argc, sizeof *o->in);
  o->out = calloc((size_t)argc, sizeof *o->out);
  if (!o->in || !o->out) return fprintf(stderr, "tjit-run: out of memory\n"), 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    long v;
    if (strcmp(a, "--in") == 0 || strcmp(a, "--out") == 0) {
      bool in = a[2] == 'i';
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
        if (in) o->in[o->n_in++] = argv[++i];
        else o->out[o->n_out++] = argv[++i];
      }
      if (in ? o->n_in == 0 : o->n_out == 0)
        return fprintf(stderr, "tjit-run: %s needs at least one file\n", a), 2;
    } else if (strcmp(a, "--random") == 0 && has_value) {
      char *end;
      errno = 0;
      o->seed = strtoull(argv[++i], &end, 0);
      if (errno || *end || end == argv[i])
        return fprintf(stderr, "tjit-run: --random needs an integer seed, not '%s'\n", argv[i]), 2;
      o->random = true;
    } else if (strcmp(a, "--out-dir") == 0 && has_value) {
      o->out_dir = argv[++i];
    } else if (strcmp(a, "--iters") == 0 && has_value) {
      if (!parse_int_arg(argv[++i], 0, 1000000, &v))
        return fprintf(stderr, "tjit-run: --iters needs a count 0..1000000\n"), 2;
      o->iters = (int)v;
    } else if (strcmp(a, "--compile-only") == 0) {
      o->compile_only = true;
    } else if (strcmp(a, "--check") == 0) {
      o->check = true;
    } else if (strcmp(a, "--tol") == 0 && has_value) {
      char *end;
      o->tol = strtod(argv[++i], &end);
      if (*end || end == argv[i] || !(o->tol >= 0))
        return fprintf(stderr, "tjit-run: --tol needs a number >= 0\n"), 2;
    } else if (strcmp(a, "--stage") == 0 && has_value) {
      o->stage = argv[++i];
    } else if (strcmp(a, "--func") == 0 && has_value) {
      o->func = argv[++i];
    } else if ((strcmp(a, "--devices") == 0 || strcmp(a, "--threads") == 0 ||
                strcmp(a, "--opt-level") == 0) && has_value) {
      if (!parse_int_arg(argv[++i], a[2] == 'o' ? 0 : 1, a[2] == 'o' ? 3 : 4096, &v))
        return fprintf(stderr, "tjit-run: bad value '%s' for %s\n", argv[i], a), 2;
      if (a[2] == 'd') o->ctx.n_devices = (int)v;
      else if (a[2] == 't') o->ctx.n_threads = (int)v;
      else o->ctx.opt_level = (int)v;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr, "tjit-run: unknown option '%s' (or its value is missing)\n", a);
      return usage(stderr), 2;
    } else if (o->path) {
      return fprintf(stderr, "tjit-run: more than one IR file ('%s' and '%s')\n", o->path, a), 2;
    } else {
      o->path = a;
    }
  }
  if (!o->path) return fprintf(stderr, "tjit-run: no IR file given\n"), usage(stderr), 2;
  if (o->random == (o->n_in > 0))
    return fprintf(stderr, "tjit-run: give either --in FILES or --random SEED\n"), 2;
  if (o->n_out && o->out_dir)
    return fprintf(stderr, "tjit-run: give --out or --out-dir, not both\n"), 2;
  if (o->tol >= 0 && !o->check) return fprintf(stderr, "tjit-run: --tol needs --check\n"), 2;
  if (o->compile_only && (o->check || o->n_out || o->out_dir))
    return fprintf(stderr, "tjit-run: --compile-only runs nothing: no --check or --out\n"), 2;
  return 0;
}

/* ---- the IR ------------------------------------------------------------------------------------- */

/* The end of the line starting at i (the index of its '\n', or len). */
static size_t line_end(const char *text, size_t len, size_t i) {
  const char *eol = memchr(text + i, '\n', len - i);
  return eol ? (size_t)(eol - text) : len;
}

/* Whether line is a "// @NAME STAGE" header, and then STAGE. */
static bool stage_header(const char *line, size_t n, const char **stage, size_t *stage_n) {
  if (n < 4 || memcmp(line, "// @", 4) != 0) return false;
  const char *sp = memchr(line + 4, ' ', n - 4);
  *stage = sp ? sp + 1 : line + n;
  *stage_n = (size_t)(line + n - *stage);
  return true;
}

static bool runnable_stage(const char *s) {
  return strcmp(s, "traced") == 0 || strcmp(s, "optimized") == 0;
}

/* jit_fn_dump separates stages with "// @NAME STAGE" lines. Blanks every line outside the chosen
   stage's section (keeping newlines, so that parse errors give the file's line numbers); a file
   without such lines (a TJIT_DUMP_DIR file) is one section. Returns false after a message. */
static bool select_stage(char *text, size_t len, const char *path, const char *want) {
  bool any = false, has_opt = false;
  const char *st;
  size_t sn;
  for (size_t i = 0; i < len; i = line_end(text, len, i) + 1)
    if (stage_header(text + i, line_end(text, len, i) - i, &st, &sn)) {
      any = true;
      has_opt |= sn == 9 && memcmp(st, "optimized", 9) == 0;
    }
  const char *chosen = want ? want : has_opt ? "optimized" : "traced";
  if (!runnable_stage(chosen)) {
    fprintf(stderr, "%s: --stage %s: tjit-run runs the traced or optimized stage (later stages "
                    "are not IR it can compile)\n", path, chosen);
    return false;
  }
  if (!any) return true;
  bool inside = false, found = false;
  for (size_t i = 0; i < len; i = line_end(text, len, i) + 1) {
    size_t end = line_end(text, len, i);
    bool header = stage_header(text + i, end - i, &st, &sn);
    if (header) {
      inside = sn == strlen(chosen) && memcmp(st, chosen, sn) == 0;
      found |= inside;
    }
    if (header || !inside) memset(text + i, ' ', end - i);
  }
  if (!found) fprintf(stderr, "%s: no '%s' stage in this dump\n", path, chosen);
  return found;
}

/* The function to run: --func's, else the only one. NULL after a message. */
static ir_func *choose_func(ir_func **fs, uint32_t n, const char *path, const char *want) {
  if (!want && n == 1) return fs[0];
  for (uint32_t i = 0; want && i < n; i++)
    if (strcmp(fs[i]->name, want) == 0) return fs[i];
  fprintf(stderr, "%s: %s; functions:", path,
          want ? "no such function" : "several functions, choose one with --func");
  for (uint32_t i = 0; i < n; i++) fprintf(stderr, " @%s", fs[i]->name);
  fprintf(stderr, "\n");
  return NULL;
}

/* The meshes g's `sharding` and `shard_map` ops name (in g and its bodies), each handed to fn. */
static void for_each_mesh(const ir_func *g, void (*fn)(jit_mesh *m, void *arg), void *arg) {
  for (uint32_t r = 0; r < g->n_ins; r++) {
    const ir_ins *in = &g->ins[r];
    if (in->op == IR_SHARDING) fn(in->attr.sharding->mesh, arg);
    if (in->op == IR_SHARD_MAP)
      for (uint32_t k = 0; k < in->n_args + in->attr.smap.n_out; k++)
        fn(in->attr.smap.specs[k]->mesh, arg);
  }
  for (uint32_t b = 0; b < g->n_bodies; b++) for_each_mesh(g->bodies[b], fn, arg);
}

static void count_devices(jit_mesh *m, void *arg) {
  int *n = arg;
  if (m->n_devices > *n) *n = m->n_devices;
}

/* A mesh read from text names no context: it becomes one over ctx's devices 0..n-1 (the ids
   the parser gave it), as the program that dumped it used them. */
static void adopt_mesh(jit_mesh *m, void *ctx) { m->ctx = ctx; }

/* ---- inputs and outputs ------------------------------------------------------------------------ */

static const char *type_text(const ir_type *t, char *buf, size_t n) {
  ir_format_type(t, buf, n);
  return buf;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A random array of type t: values every dtype holds exactly, small enough that sums and
   products of a few of them stay in range. */
static jit_status random_array(jit_ctx *ctx, const ir_type *t, uint64_t *rng, jit_array **out) {
  size_t n = 1, es = jit_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) n *= (size_t)t->dims[d];
  void *buf = malloc(n * es + 1);
  if (!buf) return JIT_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = splitmix(rng);
    double v;
    if (t->dtype == JIT_BOOL) v = (double)(r & 1);
    else if (t->dtype == JIT_U8) v = (double)(r % 17);
    else if (ir_dtype_is_int(t->dtype)) v = (double)(r % 17) - 8;
    else v = (double)(r >> 11) * 0x1p-52 - 1.0;
    ir_store_f64(t->dtype, buf, (int64_t)i, v);
  }
  jit_status st = jit_array_from_host(ctx, t->dtype, t->rank, t->dims, buf, out);
  free(buf);
  return st;
}

/* The args: each .npy file, checked against its param's type, or random arrays. */
static bool make_inputs(jit_ctx *ctx, const ir_func *g, const options *o, jit_array **args) {
  if (!o->random && o->n_in != (int)g->n_params) {
    fprintf(stderr, "tjit-run: @%s takes %u inputs; %d .npy files were given\n", g->name,
            g->n_params, o->n_in);
    return false;
  }
  uint64_t rng = o->seed;
  for (uint32_t i = 0; i < g->n_params; i++) {
    const ir_type *want = ir_type_of(g, i);
    char a[160], b[160];
    if (o->random) {
      if (random_array(ctx, want, &rng, &args[i]) != JIT_OK) {
        fprintf(stderr, "tjit-run: input %u (%s): %s\n", i, type_text(want, a, sizeof a),
                jit_last_error());
        return false;
      }
      continue;
    }
    if (jit_array_load_npy(ctx, o->in[i], &args[i]) != JIT_OK) {
      fprintf(stderr, "tjit-run: input %u: %s\n", i, jit_last_error());
      return false;
    }
    ir_type got = {.dtype = jit_array_dtype(args[i]), .rank = jit_array_rank(args[i])};
    for (int d = 0; d < got.rank; d++) got.dims[d] = jit_array_shape(args[i])[d];
    if (!ir_type_equal(&got, want)) {
      fprintf(stderr, "tjit-run: input %u (%s) is %s; @%s's param %%%u is %s\n", i, o->in[i],
              type_text(&got, a, sizeof a), g->name, i, type_text(want, b, sizeof b));
      return false;
    }
  }
  return true;
}

static bool write_outputs(const ir_func *g, const options *o, jit_array **res) {
  if (o->out_dir && mkdir(o->out_dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "tjit-run: cannot create %s: %s\n", o->out_dir, strerror(errno));
    return false;
  }
  for (uint32_t k = 0; k < g->n_results && (o->n_out || o->out_dir); k++) {
    char path[4096];
    if (o->n_out) snprintf(path, sizeof path, "%s", o->out[k]);
    else snprintf(path, sizeof path, "%s/out%u.npy", o->out_dir, k);
    if (jit_array_save_npy(res[k], path) != JIT_OK) {
      fprintf(stderr, "tjit-run: result %u: %s\n", k, jit_last_error());
      return false;
    }
    printf("result %u -> %s\n", k, path);
  }
  return true;
}

/* ---- running and checking ---------------------------------------------------------------------- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A duration in ms as text, in us below a millisecond (warm calls of small functions). */
static const char *fmt_ms(double ms, char *buf, size_t n) {
  if (ms < 1.0) snprintf(buf, n, "%.2f us", ms * 1e3);
  else snprintf(buf, n, "%.3f ms", ms);
  return buf;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void free_arrays(jit_array **a, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    jit_array_free(a[i]);
    a[i] = NULL;
  }
}

/* Times o->iters warm calls and prints the median, min and max. */
static bool time_warm(jit_fn *f, const ir_func *g, const options *o, jit_array **args,
                      jit_array **scratch) {
  if (o->iters == 0) return true;
  double *t = malloc((size_t)o->iters * sizeof *t);
  if (!t) return false;
  for (int i = 0; i < o->iters; i++) {
    double t0 = now_ms();
    jit_status st = jit_call(f, args, scratch);
    t[i] = now_ms() - t0;
    free_arrays(scratch, g->n_results);
    if (st != JIT_OK) {
      fprintf(stderr, "tjit-run: warm call %d: %s\n", i, jit_last_error());
      free(t);
      return false;
    }
  }
  qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
  double median = o->iters % 2 ? t[o->iters / 2] : (t[o->iters / 2 - 1] + t[o->iters / 2]) / 2;
  char a[32], b[32], c[32];
  printf("warm  %s  (median of %d calls; min %s, max %s)\n", fmt_ms(median, a, sizeof a),
         o->iters, fmt_ms(t[0], b, sizeof b), fmt_ms(t[o->iters - 1], c, sizeof c));
  free(t);
  return true;
}

/* The interpreter's results on the same args, compared element by element (as doubles: 16-bit
   floats decoded, NaN equal to NaN). Returns false on a failure or when an error exceeds tol. */
static bool check_results(const ir_func *g, const options *o, jit_array **args, jit_array **res) {
  bool ok = true;
  void **in = calloc(g->n_params + 1, sizeof *in), **want = calloc(g->n_results, sizeof *want),
       **got = calloc(g->n_results, sizeof *got);
  if (!in || !want || !got) {
    fprintf(stderr, "tjit-run: --check: out of memory\n");
    ok = false;
    goto done;
  }
  for (uint32_t i = 0; i < g->n_params && ok; i++) {
    size_t nb = jit_array_nbytes(args[i]);
    in[i] = malloc(nb + 1);
    ok = in[i] && jit_array_to_host(args[i], in[i], nb) == JIT_OK;
  }
  for (uint32_t k = 0; k < g->n_results && ok; k++) {
    size_t nb = jit_array_nbytes(res[k]);
    want[k] = malloc(nb + 1);
    got[k] = malloc(nb + 1);
    ok = want[k] && got[k] && jit_array_to_host(res[k], got[k], nb) == JIT_OK;
  }
  if (!ok) {
    fprintf(stderr, "tjit-run: --check: %s\n", jit_last_error());
    goto done;
  }
  if (ir_interp(g, (const void *const *)in, want) != JIT_OK) {
    fprintf(stderr, "tjit-run: --check: the interpreter failed: %s\n", jit_last_error());
    ok = false;
    goto done;
  }
  for (uint32_t k = 0; k < g->n_results; k++) {
    const ir_type *t = ir_type_of(g, g->results[k]);
    int64_t n = 1, worst = -1;
    for (int d = 0; d < t->rank; d++) n *= t->dims[d];
    double max_abs = 0, max_err = 0;
    for (int64_t i = 0; i < n; i++) {
      double w = ir_load_f64(t->dtype, want[k], i), v = ir_load_f64(t->dtype, got[k], i);
      if ((isnan(w) && isnan(v)) || w == v) continue;
      double abs_err = isnan(w) || isnan(v) ? INFINITY : fabs(v - w);
      double err = isinf(abs_err) ? INFINITY : abs_err / fmax(1.0, fabs(w));
      if (isnan(err)) err = INFINITY; /* inf - inf */
      if (abs_err > max_abs || isnan(abs_err)) max_abs = isnan(abs_err) ? INFINITY : abs_err;
      if (err > max_err || worst < 0) {
        max_err = err;
        worst = i;
      }
    }
    char ty[160];
    printf("check result %u %s: max abs error %.3g, max error %.3g", k,
           type_text(t, ty, sizeof ty), max_abs, max_err);
    if (worst >= 0) printf(" (element %lld)", (long long)worst);
    bool over = o->tol >= 0 && max_err > o->tol;
    printf("%s\n", over ? "  EXCEEDS --tol" : "");
    if (over) ok = false;
  }
done:
  for (uint32_t i = 0; in && i < g->n_params; i++) free(in[i]);
  for (uint32_t k = 0; want && got && k < g->n_results; k++) {
    free(want[k]);
    free(got[k]);
  }
  free(in);
  free(want);
  free(got);
  return ok;
}

/* Compiles g, runs it cold and warm, writes and checks the results. */
static int run(const ir_func *g, const options *o) {
  int rc = 1;
  jit_ctx *ctx = NULL;
  jit_fn *f = NULL;
  jit_array **args = calloc(g->n_params + 1, sizeof *args);
  jit_array **res = calloc(g->n_results, sizeof *res), **scratch = calloc(g->n_results, sizeof *res);
  if (!args || !res || !scratch) goto done;
  jit_ctx_opts co = o->ctx;
  int mesh_devices = 0;
  for_each_mesh(g, count_devices, &mesh_devices);
  if (co.n_devices == 0 && mesh_devices > 0) co.n_devices = mesh_devices;
  if (jit_ctx_create(&co, &ctx) != JIT_OK) {
    fprintf(stderr, "tjit-run: %s\n", jit_last_error());
    goto done;
  }
  if (mesh_devices > jit_device_count(ctx)) {
    fprintf(stderr, "tjit-run: @%s's sharding needs %d devices; the context has %d\n", g->name,
            mesh_devices, jit_device_count(ctx));
    goto done;
  }
  for_each_mesh(g, adopt_mesh, ctx);
  if (o->n_out && o->n_out != (int)g->n_results) {
    fprintf(stderr, "tjit-run: @%s returns %u results; %d --out files were given\n", g->name,
            g->n_results, o->n_out);
    goto done;
  }
  if (!make_inputs(ctx, g, o, args)) goto done;
  jit_fn_opts fo = {.name = g->name, .n_args = (int)g->n_params, .n_results = (int)g->n_results};
  /* trace_replay only reads g: the cast drops a const that jit_trace_fn's void * cannot carry */
  if (jit_compile(ctx, trace_replay, (void *)g, &fo, &f) != JIT_OK) {
    fprintf(stderr, "tjit-run: %s\n", jit_last_error());
    goto done;
  }
  double t0 = now_ms();
  if (o->compile_only) {
    if (jit_precompile(f, args) != JIT_OK) {
      fprintf(stderr, "tjit-run: %s\n", jit_last_error());
      goto done;
    }
    jit_fn_stats s;
    jit_fn_stats_get(f, &s);
    printf("@%s: compile %.3f ms  (jit_precompile: trace %.3f  passes %.3f  codegen %.3f  llvm "
           "%.3f ms; kernels %d)\n",
           g->name, now_ms() - t0, s.trace_ms, s.passes_ms, s.codegen_ms, s.llvm_ms, s.n_kernels);
    rc = 0;
    goto done;
  }
  if (jit_call(f, args, res) != JIT_OK) {
    fprintf(stderr, "tjit-run: %s\n", jit_last_error());
    goto done;
  }
  double cold = now_ms() - t0;
  jit_fn_stats s;
  jit_fn_stats_get(f, &s);
  printf("@%s: %u args, %u results, %d threads, %d devices\n", g->name, g->n_params, g->n_results,
         ctx->n_threads, jit_device_count(ctx));
  printf("cold  %.3f ms  (compile + first call)\n", cold);
  if (!time_warm(f, g, o, args, scratch)) goto done;
  printf("stats kernels %d  trace %.3f ms  passes %.3f ms  codegen %.3f ms  llvm %.3f ms  "
         "peak %llu bytes\n",
         s.n_kernels, s.trace_ms, s.passes_ms, s.codegen_ms, s.llvm_ms,
         (unsigned long long)s.peak_bytes);
  if (!write_outputs(g, o, res)) goto done;
  if (o->check && !check_results(g, o, args, res)) goto done;
  rc = 0;
done:
  if (args) free_arrays(args, g->n_params);
  if (res) free_arrays(res, g->n_results);
  free(args);
  free(res);
  free(scratch);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  int rc = parse_args(argc, argv, &o);
  char *text = NULL;
  ir_func **funcs = NULL;
  uint32_t n_funcs = 0;
  if (rc) goto done;
  rc = 1;
  FILE *in = fopen(o.path, "rb");
  if (!in) {
    fprintf(stderr, "tjit-run: cannot open '%s': %s\n", o.path, strerror(errno));
    goto done;
  }
  size_t len = 0;
  text = tool_read_all(in, &len);
  fclose(in);
  if (!text) {
    fprintf(stderr, "tjit-run: cannot read '%s'\n", o.path);
    goto done;
  }
  if (!select_stage(text, len, o.path, o.stage)) goto done;
  if (ir_parse(text, len, &funcs, &n_funcs) != JIT_OK) {
    fprintf(stderr, "%s:%s\n", o.path, jit_last_error());
    goto done;
  }
  const ir_func *g = choose_func(funcs, n_funcs, o.path, o.func);
  if (g) rc = run(g, &o);
done:
  for (uint32_t i = 0; i < n_funcs; i++) ir_func_free(funcs[i]);
  free(funcs);
  free(text);
  free(o.in);
  free(o.out);
  return rc;
}
