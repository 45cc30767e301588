/* main.c: tjit-bench: measures the floors, then checks and times each workload (cold in fresh
 * child processes, warm in this one) and prints a table, optionally also as JSON. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#ifndef TJIT_BENCH_BUILD_TYPE
#define TJIT_BENCH_BUILD_TYPE "unknown"
#endif

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *bench_alloc(size_t bytes) {
  void *p = NULL;
  return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- options ------------------------------------------------------------------------------------ */
typedef struct options {
  const char *json;         /* --json FILE */
  const char *only;         /* --only W1,W4 */
  int quick;                /* --quick */
  int reps, warmups;        /* --reps / --warmups; 0: chosen per workload */
  int no_cold;              /* --no-cold: skip the child processes */
  int opt_level;            /* --opt-level: jit_ctx_opts.opt_level (0 runs the interpreter) */
  const char *child;        /* --child ID: this process is a cold run of workload ID */
  const char *peers;        /* --peers PYTHON: also time the workloads' bench/peers scripts */
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tjit-bench [--quick] [--only W1,W4] [--json FILE] [--reps N] [--warmups N]\n"
          "                  [--no-cold] [--opt-level 0..3] [--peers PYTHON]\n"
          "Measures the machine's floors (triad bandwidth, FMA peak), then checks each workload of\n"
          "shared/bench/WORKLOADS.md against a float64 reference and times it: cold in fresh child\n"
          "processes (empty, then warm disk cache), warm in this process. --peers PYTHON also runs\n"
          "the JAX version of the workloads that have one (bench/peers) with that interpreter.\n"
          "See bench/README.md.\n");
}

static int selected(const options *o, const char *id) {
  if (!o->only) return 1;
  size_t n = strlen(id);
  for (const char *p = o->only; *p;) {
    while (*p == ',' || *p == ' ') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    if ((size_t)(e - p) == n && strncasecmp(p, id, n) == 0) return 1;
    p = e;
  }
  return 0;
}

/* ---- one workload set up in this process ----------------------------------------------------------- */
typedef struct wl_inst {
  const workload *w;
  jit_ctx *ctx;
  jit_fn *fn;
  void *host[WL_MAX_ARGS];   /* float32, or int32 for an arg with an int_range */
  jit_array *args[WL_MAX_ARGS];
  jit_array **slices;   /* chain workloads: slice t of args[1] */
  int64_t n_slices;
} wl_inst;

static void inst_free(wl_inst *in) {
  for (int64_t t = 0; t < in->n_slices; t++) jit_array_free(in->slices[t]);
  free(in->slices);
  for (int i = 0; i < WL_MAX_ARGS; i++) {
    jit_array_free(in->args[i]);
    free(in->host[i]);
  }
  jit_fn_free(in->fn);
  jit_ctx_destroy(in->ctx);
  memset(in, 0, sizeof *in);
}

/* Context, data and arrays (not the function: compiling it is part of cold). */
static int inst_setup(const workload *w, int opt_level, wl_inst *in, double *ctx_ms, char *err,
                      size_t errlen) {
  memset(in, 0, sizeof *in);
  in->w = w;
  jit_ctx_opts co = jit_ctx_opts_default();
  co.opt_level = opt_level;
  co.n_devices = w->devices;
  co.n_threads = w->threads;
  double t0 = bench_now();
  jit_status st = jit_ctx_create(&co, &in->ctx);
  if (ctx_ms) *ctx_ms = (bench_now() - t0) * 1e3;
  if (st != JIT_OK) goto fail;
  for (int i = 0; i < w->n_args; i++) {
    int64_t n = wl_numel(w->args[i].rank, w->args[i].shape);
    in->host[i] = bench_alloc((size_t)n * sizeof(float));
    if (!in->host[i]) {
      snprintf(err, errlen, "out of memory for argument %d", i);
      inst_free(in);
      return -1;
    }
    wl_fill(w, i, in->host[i]);
    const wl_arg *a = &w->args[i];
    jit_dtype dt = a->int_range > 0 ? JIT_I32 : a->complex_pairs ? JIT_C64 : a->bf16 ? JIT_BF16 : JIT_F32;
    uint16_t *bits = a->bf16 ? bench_alloc((size_t)n * sizeof(uint16_t)) : NULL;
    if (a->bf16 && !bits) {
      snprintf(err, errlen, "out of memory for argument %d", i);
      inst_free(in);
      return -1;
    }
    for (int64_t k = 0; bits && k < n; k++) bits[k] = wl_bf16_bits(((float *)in->host[i])[k]);
    st = jit_array_from_host(in->ctx, dt, a->rank - (a->complex_pairs ? 1 : 0), a->shape,
                             bits ? (void *)bits : in->host[i], &in->args[i]);
    free(bits);
    if (st != JIT_OK) goto fail;
  }
  if (w->mesh > 0) { /* placed once, before any timing, as a user's data would be */
    jit_mesh *m = NULL;
    const int64_t size = w->mesh;
    const char *name = "x";
    st = jit_mesh_create(in->ctx, 1, &size, &name, NULL, &m);
    for (int i = 0; i < w->n_args && st == JIT_OK; i++) {
      if (!w->specs[i]) continue;
      jit_sharding *sh = NULL;
      jit_array *placed = NULL;
      st = jit_sharding_create(m, w->specs[i], &sh);
      if (st == JIT_OK) st = jit_device_put(in->args[i], sh, &placed);
      jit_sharding_free(sh);
      if (st == JIT_OK) {
        jit_array_free(in->args[i]);
        in->args[i] = placed;
      }
    }
    jit_mesh_free(m);
    if (st != JIT_OK) goto fail;
  }
  if (w->chain) { /* the per-call slices, made here so that no call pays for them */
    const wl_arg *x = &w->args[1];
    int64_t n = x->shape[0], per = wl_numel(x->rank - 1, x->shape + 1);
    in->slices = calloc((size_t)(n ? n : 1), sizeof *in->slices);
    if (!in->slices) {
      snprintf(err, errlen, "out of memory for the slices");
      inst_free(in);
      return -1;
    }
    in->n_slices = n;
    for (int64_t t = 0; t < n && st == JIT_OK; t++)
      st = jit_array_from_host(in->ctx, JIT_F32, x->rank - 1, x->shape + 1, (float *)in->host[1] + t * per,
                               &in->slices[t]);
    if (st != JIT_OK) goto fail;
  }
  return 0;
fail:
  snprintf(err, errlen, "%s: %s", jit_status_str(st), jit_last_error());
  inst_free(in);
  return -1;
}

static int inst_compile(wl_inst *in, char *err, size_t errlen) {
  jit_fn_opts o = {.name = in->w->name, .n_args = in->w->n_args, .n_results = wl_n_results(in->w),
                   .donate_mask = in->w->donate_mask};
  jit_status st = jit_compile(in->ctx, in->w->trace, NULL, &o, &in->fn);
  if (st == JIT_OK) return 0;
  snprintf(err, errlen, "jit_compile: %s: %s", jit_status_str(st), jit_last_error());
  return -1;
}

static int donated(const workload *w, int i) { return i < 64 && ((w->donate_mask >> i) & 1); }

/* One jit_call; *sec is its wall time (the results are freed outside the timed region, or kept in
   keep[0..n_results-1] when keep is not NULL). Result i of a donated arg i becomes that arg for
   the next call: keep[i] then only borrows it. */
static int inst_call(wl_inst *in, double *sec, jit_array **keep, char *err, size_t errlen) {
  jit_array *y[WL_MAX_RESULTS] = {NULL};
  double t0 = bench_now();
  jit_status st = JIT_OK;
  if (in->w->chain) {
    jit_array *a[WL_MAX_ARGS];
    memcpy(a, in->args, sizeof a);
    for (int64_t t = 0; t < in->n_slices && st == JIT_OK; t++) {
      a[1] = in->slices[t];
      st = jit_call(in->fn, a, y);
      if (a[0] != in->args[0]) jit_array_free(a[0]);
      a[0] = y[0];
    }
    if (st != JIT_OK && a[0] != in->args[0]) jit_array_free(a[0]);
  } else {
    st = jit_call(in->fn, in->args, y);
  }
  *sec = bench_now() - t0;
  if (st != JIT_OK) {
    snprintf(err, errlen, "jit_call: %s: %s", jit_status_str(st), jit_last_error());
    return -1;
  }
  for (int i = 0; i < WL_MAX_RESULTS; i++) {
    if (keep) keep[i] = y[i];
    if (donated(in->w, i)) { /* the arg was deleted by the call: its handle is freed here */
      jit_array_free(in->args[i]);
      in->args[i] = y[i];
    } else if (!keep) {
      jit_array_free(y[i]);
    }
  }
  return 0;
}

/* The args of the first call (a chain's first slice in place of args[1]). */
static jit_array *const *chain_args(wl_inst *in) {
  static jit_array *a[WL_MAX_ARGS];
  memcpy(a, in->args, sizeof a);
  if (in->w->chain && in->n_slices) a[1] = in->slices[0];
  return a;
}

/* ---- child: one cold call in a fresh process ------------------------------------------------------- */
typedef struct cold_result {
  int ok;
  int runs;                 /* fresh processes measured; the fields are the lowest over them */
  double compile_ms;        /* jit_precompile: trace + passes + codegen + LLVM + load */
  double cold_ms, ctx_ms;   /* cold_ms: compile + the first call, as a user's first jit_call */
  jit_fn_stats stats;
  char err[512];
} cold_result;

static int child_main(const char *id, int opt_level) {
  const workload *w = NULL;
  for (int i = 0; i < bench_n_workloads; i++)
    if (strcmp(bench_workloads[i].id, id) == 0) w = &bench_workloads[i];
  if (!w || w->na) {
    printf("error no runnable workload %s\n", id);
    return 2;
  }
  wl_inst in;
  char err[512];
  double ctx_ms = 0, call_s = 0;
  if (inst_setup(w, opt_level, &in, &ctx_ms, err, sizeof err) != 0) {
    printf("error %s\n", err);
    return 1;
  }
  double t0 = bench_now(), t1 = t0;
  jit_status st = JIT_OK;
  if (inst_compile(&in, err, sizeof err) != 0 ||
      ((st = jit_precompile(in.fn, chain_args(&in))) != JIT_OK &&
       snprintf(err, sizeof err, "jit_precompile: %s: %s", jit_status_str(st), jit_last_error())) ||
      ((t1 = bench_now()), inst_call(&in, &call_s, NULL, err, sizeof err) != 0)) {
    printf("error %s\n", err);
    inst_free(&in);
    return 1;
  }
  double cold_ms = (bench_now() - t0) * 1e3, compile_ms = (t1 - t0) * 1e3;
  jit_fn_stats s;
  memset(&s, 0, sizeof s);
  jit_fn_stats_get(in.fn, &s);
  printf("ok compile_ms=%.6f cold_ms=%.6f ctx_ms=%.6f trace_ms=%.6f passes_ms=%.6f codegen_ms=%.6f llvm_ms=%.6f "
         "n_kernels=%d disk_cache_hits=%llu\n",
         compile_ms, cold_ms, ctx_ms, s.trace_ms, s.passes_ms, s.codegen_ms, s.llvm_ms, s.n_kernels,
         (unsigned long long)s.disk_cache_hits);
  inst_free(&in);
  return 0;
}

/* fork + execvp of argv[0] with argv (TJIT_CACHE_DIR=cache_dir for it unless NULL); the first
   len - 1 bytes of its stdout into buf (the rest is read and dropped). Returns 0 with its wait
   status in *status, or -1 with err set. */
static int run_capture(char *const *argv, const char *cache_dir, char *buf, size_t len,
                       int *status, char *err, size_t errlen) {
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    if (cache_dir) setenv("TJIT_CACHE_DIR", cache_dir, 1);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t used = 0;
  for (;;) {
    char drop[256];
    int full = used == len - 1;
    ssize_t k = read(fds[0], full ? drop : buf + used, full ? sizeof drop : len - 1 - used);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    if (!full) used += (size_t)k;
  }
  buf[used] = '\0';
  close(fds[0]);
  *status = 0;
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return 0;
}

/* This program re-run with `--child ID`, TJIT_CACHE_DIR=cache_dir; reads its one line. */
static void run_child(const char *id, int opt_level, const char *cache_dir, cold_result *r) {
  memset(r, 0, sizeof *r);
  char level[16], buf[1024];
  snprintf(level, sizeof level, "%d", opt_level);
  char *argv[] = {"/proc/self/exe", "--child", (char *)id, "--opt-level", level, NULL};
  int status = 0;
  if (run_capture(argv, cache_dir, buf, sizeof buf, &status, r->err, sizeof r->err) != 0) return;
  unsigned long long hits = 0;
  if (sscanf(buf, "ok compile_ms=%lf cold_ms=%lf ctx_ms=%lf trace_ms=%lf passes_ms=%lf "
                  "codegen_ms=%lf llvm_ms=%lf n_kernels=%d disk_cache_hits=%llu",
             &r->compile_ms, &r->cold_ms, &r->ctx_ms, &r->stats.trace_ms, &r->stats.passes_ms,
             &r->stats.codegen_ms, &r->stats.llvm_ms, &r->stats.n_kernels, &hits) == 9 &&
      WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r->stats.disk_cache_hits = hits;
    r->ok = 1;
    return;
  }
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  if (strncmp(buf, "error ", 6) == 0) snprintf(r->err, sizeof r->err, "%.500s", buf + 6);
  else if (WIFSIGNALED(status)) snprintf(r->err, sizeof r->err, "child killed by signal %d", WTERMSIG(status));
  else snprintf(r->err, sizeof r->err, "child exited with status %d", WEXITSTATUS(status));
}

/* Folds run c into best: the lowest of each time; the first failure is kept when none succeeded. */
static void cold_keep_lowest(cold_result *best, const cold_result *c) {
  if (!c->ok) {
    if (!best->ok && !best->err[0]) memcpy(best->err, c->err, sizeof best->err);
    return;
  }
  if (!best->ok) {
    int runs = best->runs;
    *best = *c;
    best->runs = runs + 1;
    return;
  }
  best->runs++;
  best->compile_ms = fmin(best->compile_ms, c->compile_ms);
  best->cold_ms = fmin(best->cold_ms, c->cold_ms);
  best->ctx_ms = fmin(best->ctx_ms, c->ctx_ms);
  best->stats.trace_ms = fmin(best->stats.trace_ms, c->stats.trace_ms);
  best->stats.passes_ms = fmin(best->stats.passes_ms, c->stats.passes_ms);
  best->stats.codegen_ms = fmin(best->stats.codegen_ms, c->stats.codegen_ms);
  best->stats.llvm_ms = fmin(best->stats.llvm_ms, c->stats.llvm_ms);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static int dir_has_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n > 0;
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
}

/* ---- a peer's run of one workload (bench/peers/SCRIPT under --peers PYTHON) ---- */
typedef struct peer_result {
  int ok, cold_runs, reps;
  char name[16], version[32], backend[16];
  double cold_ms;           /* the lowest over cold_runs fresh processes */
  double warm_median_ms, warm_min_ms, loss;
  char err[256];
  /* a second library the script timed in the same process (W12, W9: numpy; W1-W3: torch) */
  char second_name[16], second_version[32];
  double second_warm_median_ms, second_warm_min_ms;
} peer_result;

/* The number after "key": in a one-line JSON object, or NAN. */
static double json_number(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(line, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The string after "key": into out, or "?". */
static void json_string(const char *line, const char *key, char *out, size_t len) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  const char *p = strstr(line, pat);
  size_t n = p ? strcspn(p + strlen(pat), "\"") : 0;
  snprintf(out, len, "%.*s", p ? (int)n : 1, p ? p + strlen(pat) : "?");
}

/* The peer script, fresh processes as tjit's cold runs: the first also times warm calls. */
static void run_peer(const workload *w, const options *o, peer_result *p) {
  memset(p, 0, sizeof *p);
  char script[512], reps[16], warmups[16];
  snprintf(script, sizeof script, "%s/%s", TJIT_BENCH_PEERS_DIR, w->peer);
  snprintf(reps, sizeof reps, "%d", o->reps > 0 ? o->reps : o->quick ? 10 : 20);
  snprintf(warmups, sizeof warmups, "%d", o->warmups > 0 ? o->warmups : 3);
  int runs = o->quick ? 2 : 3;
  progress("%s peer %s x%d...", w->id, w->peer, runs);
  for (int k = 0; k < runs; k++) {
    char *argv[] = {(char *)o->peers, script, "--reps", reps, "--warmups", warmups,
                    k ? "--cold-only" : NULL, NULL};
    char buf[1024];
    int status = 0;
    if (run_capture(argv, NULL, buf, sizeof buf, &status, p->err, sizeof p->err) != 0) break;
    double cold = json_number(buf, "cold_ms");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !isfinite(cold)) {
      buf[strcspn(buf, "\n")] = '\0';
      snprintf(p->err, sizeof p->err, "%s exited with status %d%s%.150s", w->peer,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf[0] ? ": " : " (see stderr)", buf);
      p->ok = 0;
      break;
    }
    if (k == 0) {
      json_string(buf, "peer", p->name, sizeof p->name);
      json_string(buf, "version", p->version, sizeof p->version);
      json_string(buf, "backend", p->backend, sizeof p->backend);
      p->warm_median_ms = json_number(buf, "warm_median_ms");
      p->warm_min_ms = json_number(buf, "warm_min_ms");
      p->loss = json_number(buf, "loss");
      p->reps = (int)json_number(buf, "reps");
      json_string(buf, "second_name", p->second_name, sizeof p->second_name);
      json_string(buf, "second_version", p->second_version, sizeof p->second_version);
      p->second_warm_median_ms = json_number(buf, "second_warm_median_ms");
      p->second_warm_min_ms = json_number(buf, "second_warm_min_ms");
      p->cold_ms = cold;
      p->ok = 1;
    }
    p->cold_ms = fmin(p->cold_ms, cold);
    p->cold_runs = k + 1;
  }
  progress(" %s\n", p->ok ? "done" : p->err);
}

/* What the signature's bf16 dots on the precompiled core multiply with (AMX tiles, vdpbf16ps or
   the f32 kernel, as TJIT_BF16_DOT and the host decide), read off its LLVM-stage dump, which
   names each core dot's kind: "; <kernel>: bf16 (<kind>) dot [...]". */
static void bf16_dots_of(const wl_inst *in, char *out, size_t n) {
  char *text = NULL;
  size_t len = 0;
  FILE *ms = open_memstream(&text, &len);
  snprintf(out, n, "not on the core");
  if (!ms) return;
  jit_status st = jit_fn_dump(in->fn, in->args, JIT_DUMP_LLVM, ms);
  fclose(ms);
  const char *k = st == JIT_OK && text ? strstr(text, ": bf16 (") : NULL;
  const char *end = k ? strstr(k, ") dot") : NULL;
  if (end) snprintf(out, n, "%.*s", (int)(end - k - 8), k + 8);
  free(text);
}

/* ---- the parent's run of one workload -------------------------------------------------------------- */
typedef struct wl_result {
  const workload *w;
  enum { ST_NA, ST_ERROR, ST_FAIL, ST_OK } status;
  char msg[512];
  double rel_err;
  double first_ms;          /* this process's first call (trace + compile + run) */
  double scalar_result;     /* the first call's last rank-0 result (W10: the loss) */
  char check_msg[512];      /* what a workload's own check measured */
  char bf16_dots[64];       /* a bf16 workload: what its dots on the core multiply with */
  cold_result cold, cold_disk;
  int disk_cache_filled;    /* the first child left files in its cache dir */
  double warm_median_s, warm_min_s;
  int reps, warmups;
  double rate;              /* GB/s or GFLOP/s at the median */
  double pct_floor;         /* of triad(2 threads) or FMA peak(2 threads); < 0: none */
  double floor_near;        /* that floor again, the higher of it just before and just after
                               the timed calls (floors_again) */
  double pct_near;          /* of floor_near; < 0: none */
  jit_fn_stats stats;       /* this process's function after the timed calls */
  peer_result peer;         /* --peers: the same workload in the peer's script */
} wl_result;

static double rel_error(const float *y, const double *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)y[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void run_workload(const workload *w, const options *o, const floor_result *fl,
                         wl_result *r) {
  memset(r, 0, sizeof *r);
  r->w = w;
  r->pct_floor = r->pct_near = -1;
  if (w->na) {
    r->status = ST_NA;
    snprintf(r->msg, sizeof r->msg, "%s", w->na);
    return;
  }
  r->status = ST_ERROR;
  wl_inst in;
  jit_array *y[WL_MAX_RESULTS] = {NULL};
  float *got = NULL;
  double *ref = NULL;
  double *times = NULL;
  char dir[256] = "";
  progress("%s %s: first call and check...", w->id, w->name);
  if (inst_setup(w, o->opt_level, &in, NULL, r->msg, sizeof r->msg) != 0) goto done;
  double sec = 0;
  if (inst_compile(&in, r->msg, sizeof r->msg) != 0) goto done;
  if (inst_call(&in, &sec, y, r->msg, sizeof r->msg) != 0) goto done;
  r->first_ms = sec * 1e3;
  if (w->bf16_results) bf16_dots_of(&in, r->bf16_dots, sizeof r->bf16_dots);

  /* ---- check every result against float64 before timing anything; rel.err is the worst ---- */
  int nres = wl_n_results(w);
  int64_t total = 0, offsets[WL_MAX_RESULTS];
  for (int k = 0; k < nres; k++) {
    offsets[k] = total;
    total += wl_numel(w->out_rank[k], w->out_shape[k]);
  }
  got = bench_alloc((size_t)total * sizeof(float));
  ref = w->check ? NULL : bench_alloc((size_t)total * sizeof(double));
  if (!got || (!w->check && !ref)) {
    snprintf(r->msg, sizeof r->msg, "out of memory for the check");
    goto done;
  }
  for (int k = 0; k < nres; k++) {
    int64_t n = wl_numel(w->out_rank[k], w->out_shape[k]);
    int cx = w->complex_results >> k & 1; /* c64: its float pairs are the declared last dim */
    int bf = w->bf16_results >> k & 1;
    int rank = w->out_rank[k] - (cx ? 1 : 0);
    if (!y[k] || jit_array_rank(y[k]) != rank ||
        memcmp(jit_array_shape(y[k]), w->out_shape[k], sizeof(int64_t) * (size_t)rank) != 0 ||
        jit_array_dtype(y[k]) != (cx ? JIT_C64 : bf ? JIT_BF16 : JIT_F32)) {
      snprintf(r->msg, sizeof r->msg, "result %d has the wrong type (rank %d, dtype %s)", k,
               y[k] ? jit_array_rank(y[k]) : -1, y[k] ? jit_dtype_name(jit_array_dtype(y[k])) : "none");
      r->status = ST_FAIL;
      goto done;
    }
    /* a bf16 result lands in the upper half of its float slots, widened from the back */
    jit_status st = jit_array_to_host(y[k], got + offsets[k], (size_t)n * (bf ? 2 : sizeof(float)));
    for (int64_t i = n - 1; bf && st == JIT_OK && i >= 0; i--)
      got[offsets[k] + i] = wl_bf16_float(((const uint16_t *)(got + offsets[k]))[i]);
    if (st != JIT_OK) {
      snprintf(r->msg, sizeof r->msg, "jit_array_to_host: %s", jit_last_error());
      goto done;
    }
    if (w->out_rank[k] == 0) r->scalar_result = got[offsets[k]];
  }
  int worst = 0;
  if (w->check) {
    const float *res[WL_MAX_RESULTS];
    for (int k = 0; k < nres; k++) res[k] = got + offsets[k];
    r->rel_err = w->check((const void *const *)in.host, res, r->check_msg, sizeof r->check_msg);
  } else {
    w->reference((const float *const *)in.host, ref);
    r->rel_err = 0;
    for (int k = 0; k < nres; k++) {
      double e = rel_error(got + offsets[k], ref + offsets[k], wl_numel(w->out_rank[k], w->out_shape[k]));
      if (!(e <= r->rel_err)) { /* NaN sticks */
        r->rel_err = e;
        worst = k;
      }
    }
  }
  for (int k = 0; k < WL_MAX_RESULTS; k++) {
    if (!donated(w, k)) jit_array_free(y[k]); /* a donated arg's result is in.args[k] now */
    y[k] = NULL;
  }
  free(got);
  free(ref);
  got = NULL;
  ref = NULL;
  if (!(r->rel_err < w->tol)) {
    r->status = ST_FAIL;
    if (w->check)
      snprintf(r->msg, sizeof r->msg, "relative error %.3g exceeds %.0e (%.400s): not timed",
               r->rel_err, w->tol, r->check_msg);
    else
      snprintf(r->msg, sizeof r->msg, "relative error %.3g (result %d) exceeds %.0e: not timed",
               r->rel_err, worst, w->tol);
    goto done;
  }

  /* ---- cold: fresh processes, each cold one with a new empty cache dir, the cold+disk ones with
     the first one's; the lowest of each figure is kept (as PEERS.md reports peers' cold times),
     since a fresh process's first touch of memory costs what the host makes it cost ---- */
  if (!o->no_cold) {
    int runs = o->quick ? 2 : 3;
    progress(" cold x%d...", runs);
    for (int k = 0; k < runs; k++) {
      char kdir[sizeof dir];
      const char *tmp = getenv("TMPDIR");
      snprintf(kdir, sizeof kdir, "%s/tjit-bench-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", w->id);
      if (!mkdtemp(kdir)) {
        snprintf(r->msg, sizeof r->msg, "mkdtemp %s: %s", kdir, strerror(errno));
        goto done;
      }
      cold_result c;
      run_child(w->id, o->opt_level, kdir, &c);
      if (k == 0) {
        memcpy(dir, kdir, sizeof dir);
        r->disk_cache_filled = dir_has_entries(dir);
      } else {
        nftw(kdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
      }
      cold_keep_lowest(&r->cold, &c);
    }
    progress(" cold with disk cache x%d...", runs);
    for (int k = 0; k < runs; k++) {
      cold_result c;
      run_child(w->id, o->opt_level, dir, &c);
      cold_keep_lowest(&r->cold_disk, &c);
    }
  }

  /* ---- warm ---- */
  int warmups = o->warmups > 0 ? o->warmups : 3;
  progress(" warm-up...");
  if (inst_call(&in, &sec, NULL, r->msg, sizeof r->msg) != 0) goto done;
  int reps;
  if (o->quick && sec > 1.0) {
    /* The interpreter (or a slow machine): keep --quick to minutes, not hours. */
    if (o->warmups <= 0) warmups = 1;
    reps = 3;
  } else {
    double budget = o->quick ? 0.25 : 1.0; /* seconds of timed calls beyond the minimum */
    int lo = o->quick ? 10 : 20, hi = o->quick ? 200 : 1000;
    if (w->kind == FLOOR_LATENCY) hi *= 10; /* a µs call: many samples cost nothing */
    reps = sec > 0 ? (int)fmin(hi, fmax(lo, budget / sec)) : hi;
  }
  if (o->reps > 0) reps = o->reps;
  for (int i = 1; i < warmups; i++)
    if (inst_call(&in, &sec, NULL, r->msg, sizeof r->msg) != 0) goto done;
  progress(" %d timed calls...", reps);
  bool bytes = w->kind == FLOOR_BYTES;
  int floor_threads = w->kind == FLOOR_FLOPS_1T ? 1 : 2;
  if (w->kind != FLOOR_LATENCY) r->floor_near = floors_again(fl, bytes, floor_threads);
  times = calloc((size_t)reps, sizeof(double));
  if (!times) {
    snprintf(r->msg, sizeof r->msg, "out of memory");
    goto done;
  }
  for (int i = 0; i < reps; i++)
    if (inst_call(&in, &times[i], NULL, r->msg, sizeof r->msg) != 0) goto done;
  if (w->kind != FLOOR_LATENCY)
    r->floor_near = fmax(r->floor_near, floors_again(fl, bytes, floor_threads));
  qsort(times, (size_t)reps, sizeof(double), cmp_double);
  r->reps = reps;
  r->warmups = warmups;
  r->warm_min_s = times[0];
  r->warm_median_s = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
  if (w->kind == FLOOR_BYTES) {
    r->rate = w->amount / r->warm_median_s / 1e9;
    r->pct_floor = 100.0 * r->rate / fl->triad_gbs[1];
  } else if (w->kind == FLOOR_FLOPS || w->kind == FLOOR_FLOPS_1T) {
    r->rate = w->amount / r->warm_median_s / 1e9;
    r->pct_floor = 100.0 * r->rate / fl->fma_gflops[w->kind == FLOOR_FLOPS ? 1 : 0];
  }
  if (r->pct_floor >= 0 && r->floor_near > 0) r->pct_near = 100.0 * r->rate / r->floor_near;
  jit_fn_stats_get(in.fn, &r->stats);
  r->status = ST_OK;
  r->msg[0] = '\0';
done:
  progress(" %s\n", r->status == ST_OK ? "done" : r->msg);
  if (dir[0]) nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  free(times);
  free(got);
  free(ref);
  for (int k = 0; k < WL_MAX_RESULTS; k++)
    if (!donated(w, k)) jit_array_free(y[k]); /* a donated one is in.args[k], freed below */
  inst_free(&in);
}

/* run_workload in a forked copy of this process, so that a crash inside the library (a backend
   being written) costs one row, not the whole run. Nothing of tjit exists in this process yet. */
static void run_isolated(const workload *w, const options *o, const floor_result *fl,
                         wl_result *r) {
  if (w->na) {
    run_workload(w, o, fl, r);
    return;
  }
  memset(r, 0, sizeof *r);
  r->w = w;
  r->pct_floor = r->pct_near = -1;
  r->status = ST_ERROR;
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(r->msg, sizeof r->msg, "pipe: %s", strerror(errno));
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(r->msg, sizeof r->msg, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    wl_result mine;
    run_workload(w, o, fl, &mine);
    const char *p = (const char *)&mine;
    for (size_t done = 0; done < sizeof mine;) {
      ssize_t k = write(fds[1], p + done, sizeof mine - done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(1);
      done += (size_t)k;
    }
    exit(0); /* not _exit: a leak checker (ASan builds) runs at exit and covers this workload */
  }
  close(fds[1]);
  wl_result got;
  size_t len = 0;
  while (len < sizeof got) {
    ssize_t k = read(fds[0], (char *)&got + len, sizeof got - len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    len += (size_t)k;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (len == sizeof got) {
    *r = got; /* the same program image: r->w points into the same table */
    return;
  }
  if (WIFSIGNALED(status)) {
    snprintf(r->msg, sizeof r->msg, "crashed with signal %d (%s); the progress line on stderr "
             "says in which step", WTERMSIG(status), strsignal(WTERMSIG(status)));
    progress("\n");
  } else {
    snprintf(r->msg, sizeof r->msg, "the run exited with status %d", WEXITSTATUS(status));
  }
}

/* ---- output ------------------------------------------------------------------------------------------ */
typedef struct machine {
  char date[64];
  char cpu[128];
  long cores;
  double mem_gib;
  char host[256];
  char load[64];            /* /proc/loadavg's 1-minute figure at start: others on the machine */
  char target[128];         /* what codegen targets (jit_ctx_target: TJIT_CPU, TJIT_VECTOR_WIDTH) */
  int vector_bits;          /* the target's "N-bit vectors"; 0: not said */
} machine;

static void machine_info(machine *m) {
  memset(m, 0, sizeof *m);
  time_t now = time(NULL);
  strftime(m->date, sizeof m->date, "%Y-%m-%d %H:%M %Z", localtime(&now));
  snprintf(m->cpu, sizeof m->cpu, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  if (f) {
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "model name", 10) == 0) {
        char *c = strchr(line, ':');
        if (c) {
          c += 1 + (c[1] == ' ');
          c[strcspn(c, "\n")] = '\0';
          snprintf(m->cpu, sizeof m->cpu, "%s", c);
        }
        break;
      }
    fclose(f);
  }
  f = fopen("/proc/loadavg", "r");
  double l1 = 0;
  if (f) {
    if (fscanf(f, "%lf", &l1) == 1) snprintf(m->load, sizeof m->load, "%.2f", l1);
    fclose(f);
  }
  m->cores = sysconf(_SC_NPROCESSORS_ONLN);
  m->mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1 << 30);
  struct utsname u;
  if (uname(&u) == 0) snprintf(m->host, sizeof m->host, "%.64s %.64s %.64s", u.sysname, u.release, u.machine);
  jit_ctx_opts co = jit_ctx_opts_default();
  jit_ctx *ctx = NULL;
  if (jit_ctx_create(&co, &ctx) == JIT_OK) snprintf(m->target, sizeof m->target, "%s", jit_ctx_target(ctx));
  else snprintf(m->target, sizeof m->target, "none: %.100s", jit_last_error());
  jit_ctx_destroy(ctx);
  /* The floors are measured with the target's vectors: with TJIT_CPU=x86-64-v3 on an AVX-512
     machine the code can reach the AVX2 peak, not the AVX-512 one. */
  const char *bits = strstr(m->target, "-bit vectors");
  if (bits) {
    while (bits > m->target && bits[-1] >= '0' && bits[-1] <= '9') bits--;
    m->vector_bits = atoi(bits);
  }
}

/* "12.3 ms" or "4.56 µs"; "-" for a negative value. */
static const char *fmt_time(char *buf, size_t len, double sec) {
  if (sec < 0) snprintf(buf, len, "-");
  else if (sec < 1e-3) snprintf(buf, len, "%.2f us", sec * 1e6);
  else if (sec < 0.1) snprintf(buf, len, "%.2f ms", sec * 1e3);
  else snprintf(buf, len, "%.0f ms", sec * 1e3);
  return buf;
}

/* Which engine ran the calls, from the functions' statistics. */
static const char *engine(const wl_result *rs, int n) {
  int seen = 0, native = 0;
  for (int i = 0; i < n; i++)
    if (rs[i].status == ST_OK) {
      seen = 1;
      if (rs[i].stats.n_kernels > 0 || rs[i].stats.llvm_ms > 0 || rs[i].cold.stats.n_kernels > 0)
        native = 1;
    }
  if (!seen) return "unknown (no workload ran)";
  return native ? "native kernels" : "reference interpreter (n_kernels = 0 and llvm_ms = 0 everywhere)";
}

static void print_table(FILE *f, const machine *m, const options *o, const floor_result *fl,
                        const wl_result *rs, int n) {
  fprintf(f, "tjit-bench  %s\n", m->date);
  fprintf(f, "machine     %s, %ld cores, %.1f GiB, %s; load average %s at start\n", m->cpu,
          m->cores, m->mem_gib, m->host, m->load[0] ? m->load : "?");
  fprintf(f, "target      %s\n", m->target);
  fprintf(f, "build       %s, opt_level %d, mode %s, engine: %s\n", TJIT_BENCH_BUILD_TYPE,
          o->opt_level, o->quick ? "--quick" : "full", engine(rs, n));
  fprintf(f, "\nfloors (this run)                                      1 thread   2 threads\n");
  fprintf(f, "  triad a=b+s*c, %-7s 3 x %.0f MiB, GB/s (best)       %7.1f    %7.1f\n",
          fl->triad_isa, fl->triad_mib, fl->triad_gbs[0], fl->triad_gbs[1]);
  fprintf(f, "  FMA peak, %-8s x %d accumulators, GFLOP/s         %7.1f    %7.1f\n", fl->fma_isa,
          fl->fma_accumulators, fl->fma_gflops[0], fl->fma_gflops[1]);
  fprintf(f, "\n%-3s %-14s %-8s %9s %9s %9s %9s %10s %10s %5s %14s %7s %7s\n", "id",
          "workload", "rel.err", "compile", "+disk", "1st call", "+disk", "warm med", "warm min",
          "reps", "rate", "%floor", "%near");
  int no_disk = 0, notes = 0;
  for (int i = 0; i < n; i++) {
    const wl_result *r = &rs[i];
    fprintf(f, "%-3s %-14s ", r->w->id, r->w->name);
    if (r->status == ST_NA) {
      fprintf(f, "n/a (%s)\n", r->msg);
      continue;
    }
    if (r->status != ST_OK) {
      if (r->status == ST_FAIL) fprintf(f, "FAIL %s\n", r->msg);
      else fprintf(f, "ERROR %s\n", r->msg);
      continue;
    }
    char a[32], b[32], c[32], d[32], ca[32], cb[32], rate[32], pct[16], near[16];
    char bdisk[40], cbdisk[40];
    fmt_time(ca, sizeof ca, r->cold.ok ? r->cold.compile_ms / 1e3 : -1);
    fmt_time(cb, sizeof cb, r->cold_disk.ok ? r->cold_disk.compile_ms / 1e3 : -1);
    fmt_time(a, sizeof a, r->cold.ok ? r->cold.cold_ms / 1e3 : -1);
    fmt_time(b, sizeof b, r->cold_disk.ok ? r->cold_disk.cold_ms / 1e3 : -1);
    snprintf(bdisk, sizeof bdisk, "%s%s", b, r->cold_disk.ok && !r->disk_cache_filled ? "*" : "");
    snprintf(cbdisk, sizeof cbdisk, "%s%s", cb, r->cold_disk.ok && !r->disk_cache_filled ? "*" : "");
    if (r->cold_disk.ok && !r->disk_cache_filled) no_disk = 1;
    if (r->w->kind == FLOOR_BYTES) snprintf(rate, sizeof rate, "%.2f GB/s", r->rate);
    else if (r->w->kind == FLOOR_FLOPS || r->w->kind == FLOOR_FLOPS_1T)
      snprintf(rate, sizeof rate, "%.2f GFLOP/s", r->rate);
    else snprintf(rate, sizeof rate, "latency");
    if (r->pct_floor >= 0) snprintf(pct, sizeof pct, "%.1f%%", r->pct_floor);
    else snprintf(pct, sizeof pct, "-");
    if (r->pct_near >= 0) snprintf(near, sizeof near, "%.1f%%", r->pct_near);
    else snprintf(near, sizeof near, "-");
    fprintf(f, "%-8.1e %9s %9s %9s %9s %10s %10s %5d %14s %7s %7s\n", r->rel_err, ca, cbdisk, a,
            bdisk, fmt_time(c, sizeof c, r->warm_median_s), fmt_time(d, sizeof d, r->warm_min_s),
            r->reps, rate, pct, near);
    if (!r->cold.ok && !o->no_cold) fprintf(f, "    cold run failed: %s\n", r->cold.err);
    if (!r->cold_disk.ok && !o->no_cold) fprintf(f, "    cold+disk run failed: %s\n", r->cold_disk.err);
    if (r->w->note) notes = 1;
  }
  if (no_disk)
    fprintf(f, "* no disk cache yet: the first cold process left TJIT_CACHE_DIR empty, so cold+disk "
               "is a second cold run\n");
  if (notes)
    for (int i = 0; i < n; i++)
      if (rs[i].w->note && rs[i].status != ST_NA) fprintf(f, "note: %s\n", rs[i].w->note);
  for (int i = 0; i < n; i++)
    if (rs[i].status == ST_OK && rs[i].check_msg[0])
      fprintf(f, "%s check: %s\n", rs[i].w->id, rs[i].check_msg);
  for (int i = 0; i < n; i++)
    if (rs[i].status == ST_OK && rs[i].bf16_dots[0])
      fprintf(f, "%s: bf16 dots by %s\n", rs[i].w->id, rs[i].bf16_dots);
  for (int i = 0; i < n; i++) {
    const wl_result *r = &rs[i];
    if (r->status != ST_OK || !o->peers || !r->w->peer) continue;
    const peer_result *p = &r->peer;
    if (!p->ok) {
      fprintf(f, "%s peer: %s\n", r->w->id, p->err);
      continue;
    }
    fprintf(f, "%s in %s %s (%s), same run: warm med %.2f ms, min %.2f ms (%d reps); cold (jit + "
               "first call) %.0f ms, lowest of %d processes",
            r->w->id, p->name, p->version, p->backend, p->warm_median_ms, p->warm_min_ms, p->reps,
            p->cold_ms, p->cold_runs);
    if (isfinite(p->loss)) fprintf(f, "; loss %.6f (tjit %.6f)", p->loss, r->scalar_result);
    fprintf(f, "\n");
    if (r->cold.ok)
      fprintf(f, "%s tjit / %s: warm median %.2fx, cold %.2fx (below 1: tjit is faster)\n", r->w->id,
              p->name, r->warm_median_s * 1e3 / p->warm_median_ms, r->cold.cold_ms / p->cold_ms);
    if (isfinite(p->second_warm_median_ms)) {
      double best = fmin(p->second_warm_median_ms, p->warm_median_ms);
      fprintf(f, "%s in %s %s, same run: warm med %.2f ms, min %.2f ms; tjit / best of %s and "
                 "%s: warm median %.2fx\n", r->w->id, p->second_name, p->second_version,
              p->second_warm_median_ms, p->second_warm_min_ms, p->second_name, p->name,
              r->warm_median_s * 1e3 / best);
    }
  }
  const wl_result *vm = NULL, *hand = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(rs[i].w->id, "W6") == 0 && rs[i].status == ST_OK) vm = &rs[i];
    if (strcmp(rs[i].w->id, "W6b") == 0 && rs[i].status == ST_OK) hand = &rs[i];
  }
  if (vm && hand)
    fprintf(f, "W6 / W6b (jit_vmap / batched by hand), warm median: %.2fx (target: within 1.5x)\n",
            vm->warm_median_s / hand->warm_median_s);
  const wl_result *scan = NULL, *steps = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(rs[i].w->id, "W5") == 0 && rs[i].status == ST_OK) scan = &rs[i];
    if (strcmp(rs[i].w->id, "W5s") == 0 && rs[i].status == ST_OK) steps = &rs[i];
  }
  if (scan && steps)
    fprintf(f, "W5s / W5 (1000 jit_calls of one step / one jit_scan), warm median: %.2fx\n",
            steps->warm_median_s / scan->warm_median_s);
  const wl_result *w9 = NULL, *w9x1 = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(rs[i].w->id, "W9") == 0 && rs[i].status == ST_OK) w9 = &rs[i];
    if (strcmp(rs[i].w->id, "W9x1") == 0 && rs[i].status == ST_OK) w9x1 = &rs[i];
  }
  if (w9 && w9x1)
    fprintf(f, "W9x1 / W9 (1 device / 2 devices), warm median: %.2fx (target: >= 1.8x)\n",
            w9x1->warm_median_s / w9->warm_median_s);
  for (int i = 0; i < n; i++)
    if (rs[i].status == ST_OK && rs[i].w->mesh > 0)
      fprintf(f, "%s: collectives move %.1f MiB per call between devices\n", rs[i].w->id,
              (double)rs[i].stats.comm_bytes / (1024.0 * 1024.0));
  fprintf(f, "compile: a fresh process's jit_precompile (trace + passes + codegen + LLVM + load), "
             "empty / warm disk cache;\n1st call: compile + the first jit_call (its output's fresh "
             "pages included); both the lowest over %s fresh processes\n",
          o->quick ? "2" : "3");
  fprintf(f, "%%floor: bytes workloads against triad (2 threads), FLOP workloads against FMA peak "
             "(2 threads; W5, a sequential loop, against 1 thread's); W7 is latency only\n");
  fprintf(f, "%%near: against the same floor measured again just before and just after the "
             "workload's timed calls (the higher), as a shared host's speed moves over minutes\n");
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* JSON numbers cannot be NaN or infinite. */
static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fprintf(f, "null");
}

static void json_cold(FILE *f, const char *key, const cold_result *c) {
  fprintf(f, ",\n      ");
  json_str(f, key);
  if (!c->ok) {
    fprintf(f, ": {\"ok\": false, \"error\": ");
    json_str(f, c->err);
    fprintf(f, "}");
    return;
  }
  fprintf(f, ": {\"ok\": true, \"runs\": %d, \"compile_ms\": ", c->runs);
  json_num(f, c->compile_ms);
  fprintf(f, ", \"ms\": ");
  json_num(f, c->cold_ms);
  fprintf(f, ", \"ctx_ms\": ");
  json_num(f, c->ctx_ms);
  fprintf(f, ", \"trace_ms\": ");
  json_num(f, c->stats.trace_ms);
  fprintf(f, ", \"passes_ms\": ");
  json_num(f, c->stats.passes_ms);
  fprintf(f, ", \"codegen_ms\": ");
  json_num(f, c->stats.codegen_ms);
  fprintf(f, ", \"llvm_ms\": ");
  json_num(f, c->stats.llvm_ms);
  fprintf(f, ", \"n_kernels\": %d, \"disk_cache_hits\": %llu}", c->stats.n_kernels,
          (unsigned long long)c->stats.disk_cache_hits);
}

static int write_json(const char *path, const machine *m, const options *o,
                      const floor_result *fl, const wl_result *rs, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  static const char *status[] = {"n/a", "error", "fail", "ok"};
  fprintf(f, "{\n  \"date\": ");
  json_str(f, m->date);
  fprintf(f, ",\n  \"machine\": {\"cpu\": ");
  json_str(f, m->cpu);
  fprintf(f, ", \"cores\": %ld, \"mem_gib\": %.1f, \"os\": ", m->cores, m->mem_gib);
  json_str(f, m->host);
  fprintf(f, ", \"loadavg_at_start\": ");
  json_str(f, m->load);
  fprintf(f, ", \"target\": ");
  json_str(f, m->target);
  fprintf(f, "},\n  \"build_type\": ");
  json_str(f, TJIT_BENCH_BUILD_TYPE);
  fprintf(f, ",\n  \"opt_level\": %d,\n  \"mode\": \"%s\",\n  \"engine\": ", o->opt_level,
          o->quick ? "quick" : "full");
  json_str(f, engine(rs, n));
  fprintf(f, ",\n  \"floors\": {\"triad_bytes_convention\": \"12 bytes per element: read b, read c, "
             "write a; write-allocate not counted\", \"triad_array_mib\": %.0f, "
             "\"triad_isa\": \"%s\", \"triad_gbs\": [%.3f, %.3f], "
             "\"triad_median_gbs\": [%.3f, %.3f], "
             "\"fma_isa\": \"%s\", \"fma_accumulators\": %d, \"fma_gflops\": [%.3f, %.3f]},\n",
          fl->triad_mib, fl->triad_isa, fl->triad_gbs[0], fl->triad_gbs[1], fl->triad_median[0],
          fl->triad_median[1], fl->fma_isa, fl->fma_accumulators, fl->fma_gflops[0],
          fl->fma_gflops[1]);
  fprintf(f, "  \"workloads\": [");
  for (int i = 0; i < n; i++) {
    const wl_result *r = &rs[i];
    fprintf(f, "%s\n    {\"id\": \"%s\", \"name\": \"%s\", \"status\": \"%s\"", i ? "," : "",
            r->w->id, r->w->name, status[r->status]);
    if (r->msg[0]) {
      fprintf(f, ", \"message\": ");
      json_str(f, r->msg);
    }
    if (r->w->note) {
      fprintf(f, ", \"note\": ");
      json_str(f, r->w->note);
    }
    if (r->bf16_dots[0]) {
      fprintf(f, ", \"bf16_dots\": ");
      json_str(f, r->bf16_dots);
    }
    const char *kind = r->w->kind == FLOOR_BYTES           ? "bytes"
                       : r->w->kind == FLOOR_FLOPS      ? "flops"
                       : r->w->kind == FLOOR_FLOPS_1T ? "flops_1_thread"
                                                        : "latency";
    fprintf(f, ", \"floor_kind\": \"%s\", \"floor_amount\": %.0f", kind, r->w->amount);
    if (r->status == ST_OK || r->status == ST_FAIL) {
      fprintf(f, ", \"rel_err\": ");
      json_num(f, r->rel_err);
      fprintf(f, ", \"tol\": %.0e", r->w->tol);
    }
    if (r->status == ST_OK) {
      fprintf(f, ", \"first_call_ms\": ");
      json_num(f, r->first_ms);
      if (!o->no_cold) {
        json_cold(f, "cold", &r->cold);
        json_cold(f, "cold_disk_cache", &r->cold_disk);
        fprintf(f, ", \"disk_cache_filled\": %s", r->disk_cache_filled ? "true" : "false");
      }
      fprintf(f, ",\n      \"warm_median_ms\": ");
      json_num(f, r->warm_median_s * 1e3);
      fprintf(f, ", \"warm_min_ms\": ");
      json_num(f, r->warm_min_s * 1e3);
      fprintf(f, ", \"reps\": %d, \"warmups\": %d", r->reps, r->warmups);
      if (r->w->mesh > 0)
        fprintf(f, ", \"devices\": %d, \"comm_bytes\": %llu", r->w->mesh,
                (unsigned long long)r->stats.comm_bytes);
      if (r->check_msg[0]) {
        fprintf(f, ", \"check\": ");
        json_str(f, r->check_msg);
      }
      if (o->peers && r->w->peer) {
        const peer_result *p = &r->peer;
        fprintf(f, ",\n      \"peer\": {\"ok\": %s", p->ok ? "true" : "false");
        if (p->ok) {
          fprintf(f, ", \"name\": ");
          json_str(f, p->name);
          fprintf(f, ", \"version\": ");
          json_str(f, p->version);
          fprintf(f, ", \"backend\": ");
          json_str(f, p->backend);
          fprintf(f, ", \"cold_ms\": ");
          json_num(f, p->cold_ms);
          fprintf(f, ", \"cold_runs\": %d, \"warm_median_ms\": ", p->cold_runs);
          json_num(f, p->warm_median_ms);
          fprintf(f, ", \"warm_min_ms\": ");
          json_num(f, p->warm_min_ms);
          fprintf(f, ", \"reps\": %d, \"loss\": ", p->reps);
          json_num(f, p->loss);
        } else {
          fprintf(f, ", \"error\": ");
          json_str(f, p->err);
        }
        fprintf(f, "}");
      }
      if (r->pct_floor >= 0) {
        fprintf(f, ", \"rate\": ");
        json_num(f, r->rate);
        fprintf(f, ", \"rate_unit\": \"%s\", \"pct_floor\": ", r->w->kind == FLOOR_BYTES ? "GB/s" : "GFLOP/s");
        json_num(f, r->pct_floor);
        if (r->pct_near >= 0) {
          fprintf(f, ", \"floor_near\": ");
          json_num(f, r->floor_near);
          fprintf(f, ", \"pct_floor_near\": ");
          json_num(f, r->pct_near);
        }
      }
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  options o = {0};
  o.opt_level = jit_ctx_opts_default().opt_level;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--child") == 0 && i + 1 < argc) o.child = argv[++i];
    else if (strcmp(a, "--opt-level") == 0 && i + 1 < argc) o.opt_level = atoi(argv[++i]);
    else if (strcmp(a, "--quick") == 0) o.quick = 1;
    else if (strcmp(a, "--no-cold") == 0) o.no_cold = 1;
    else if (strcmp(a, "--json") == 0 && i + 1 < argc) o.json = argv[++i];
    else if (strcmp(a, "--only") == 0 && i + 1 < argc) o.only = argv[++i];
    else if (strcmp(a, "--peers") == 0 && i + 1 < argc) o.peers = argv[++i];
    else if (strcmp(a, "--reps") == 0 && i + 1 < argc) o.reps = atoi(argv[++i]);
    else if (strcmp(a, "--warmups") == 0 && i + 1 < argc) o.warmups = atoi(argv[++i]);
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "tjit-bench: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (o.child) return child_main(o.child, o.opt_level);
  if (o.only) {
    /* every listed id must exist */
    for (const char *p = o.only; *p;) {
      while (*p == ',' || *p == ' ') p++;
      const char *e = p;
      while (*e && *e != ',') e++;
      int found = e == p;
      for (int i = 0; i < bench_n_workloads && !found; i++)
        found = strlen(bench_workloads[i].id) == (size_t)(e - p) &&
                strncasecmp(p, bench_workloads[i].id, (size_t)(e - p)) == 0;
      if (!found) {
        fprintf(stderr, "tjit-bench: --only: no workload '%.*s' (W1..W14, see WORKLOADS.md)\n", (int)(e - p), p);
        return 2;
      }
      p = e;
    }
  }

  machine m;
  machine_info(&m);
  floor_result fl;
  progress("floors: triad and FMA peak...");
  if (floors_measure(o.quick ? 5 : 10, m.vector_bits, &fl) != 0) {
    fprintf(stderr, "\ntjit-bench: cannot measure the floors (out of memory?)\n");
    return 1;
  }
  progress(" %.1f / %.1f GB/s, %.0f / %.0f GFLOP/s\n", fl.triad_gbs[0], fl.triad_gbs[1],
           fl.fma_gflops[0], fl.fma_gflops[1]);

  /* Static, not malloc'd: the forked runs exit from inside the loop below, where a leak checker
     would count a heap array as lost. */
  static wl_result rs[32];
  if (bench_n_workloads > (int)(sizeof rs / sizeof rs[0])) return 1;
  int n = 0, failed = 0;
  for (int i = 0; i < bench_n_workloads; i++) {
    if (!selected(&o, bench_workloads[i].id)) continue;
    run_isolated(&bench_workloads[i], &o, &fl, &rs[n]);
    if (o.peers && bench_workloads[i].peer && rs[n].status == ST_OK)
      run_peer(&bench_workloads[i], &o, &rs[n].peer);
    if (rs[n].status == ST_FAIL || rs[n].status == ST_ERROR) failed = 1;
    n++;
  }
  printf("\n");
  print_table(stdout, &m, &o, &fl, rs, n);
  if (o.json && write_json(o.json, &m, &o, &fl, rs, n) != 0) {
    fprintf(stderr, "tjit-bench: cannot write %s: %s\n", o.json, strerror(errno));
    failed = 1;
  }
  return failed;
}
