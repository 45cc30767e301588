/* test_profile.c: the profiler: a matmul + elementwise function and a sharded call over 2 devices
 * profiled, the Chrome trace-event JSON parsed back (every compile phase, kernels on the workers
 * and device threads with rows and bytes, collectives and copies, the host's jit_call spans with
 * hit or miss; durations non-negative, spans nested per thread), names escaped, misuse of
 * start/stop refused with a message, and $TJIT_PROFILE writing the file at the last destroy. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/json.h"
#include "support/placement.h"
#include "tjit.h"

static jit_ctx *ctx_of(int devices, int threads) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = threads;
  jit_ctx *c = NULL;
  assert_int_equal(jit_ctx_create(&o, &c), JIT_OK);
  return c;
}

static jit_array *filled(jit_ctx *c, int rank, const int64_t *shape, float v) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *h = malloc((size_t)n * sizeof *h);
  for (int64_t i = 0; i < n; i++) h[i] = v + (float)(i % 7) * 0.125f;
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(c, JIT_F32, rank, shape, h, &a), JIT_OK);
  free(h);
  return a;
}

static void layer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
}

static void scaled_sum(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int axes[1] = {0};
  r[0] = jit_reduce_sum(t, jit_mul(t, a[0], jit_scalar(t, 2.0)), 1, axes);
}

/* per device: its block of x scaled by its index along "x" (axis_index: a collective with no
   operand) */
static void indexed_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_mul(t, a[0], jit_convert(t, jit_axis_index(t, "x"), JIT_F32));
}

static void indexed(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const char *in[1] = {"x,_"}, *out[1] = {"x,_"};
  jit_shard_map(t, indexed_body, NULL, user, 1, a, in, 1, r, out);
}

static char *temp_path(const char *tag) {
  char *p = malloc(128);
  snprintf(p, 128, "/tmp/tjit_test_profile_%s_%d.json", tag, (int)getpid());
  return p;
}

/* ---- reading the trace back ---------------------------------------------------------------------- */

typedef struct ev {
  const char *name, *cat;
  double ts, dur;
  int tid;
  const js_val *args;
} ev;

typedef struct trace {
  js_val *root;
  ev *evs;
  size_t n;
  int tids[256];      /* thread_name metadata: tid -> index in names */
  const char *names[256];
  int n_names;
} trace;

static const char *thread_name(const trace *t, int tid) {
  for (int i = 0; i < t->n_names; i++)
    if (t->tids[i] == tid) return t->names[i];
  return NULL;
}

static double num(const js_val *v, const char *key) {
  const js_val *x = js_get(v, key);
  assert_non_null(x);
  assert_int_equal(x->kind, JS_NUM);
  return x->num;
}

static const char *str(const js_val *v, const char *key) {
  const js_val *x = js_get(v, key);
  assert_non_null(x);
  assert_int_equal(x->kind, JS_STR);
  return x->str;
}

/* Parses the file and checks the format's invariants every event must keep. */
static trace load_trace(const char *path) {
  trace t = {0};
  char *text = js_read_file(path);
  assert_non_null(text);
  const char *err = NULL;
  t.root = js_parse(text, &err);
  if (!t.root) fail_msg("%s: invalid JSON: %s", path, err);
  free(text);
  const js_val *arr = js_get(t.root, "traceEvents");
  assert_non_null(arr);
  assert_int_equal(arr->kind, JS_ARR);
  assert_non_null(js_get(js_get(t.root, "otherData"), "dropped_events"));
  t.evs = calloc(arr->n + 1, sizeof *t.evs);
  for (size_t i = 0; i < arr->n; i++) {
    const js_val *e = &arr->items[i];
    const char *ph = str(e, "ph");
    num(e, "pid");
    int tid = (int)num(e, "tid");
    if (strcmp(ph, "M") == 0) {
      if (strcmp(str(e, "name"), "thread_name") == 0 && t.n_names < 256) {
        t.tids[t.n_names] = tid;
        t.names[t.n_names++] = str(js_get(e, "args"), "name");
      }
      continue;
    }
    if (strcmp(ph, "X") != 0) continue;
    ev *x = &t.evs[t.n++];
    x->name = str(e, "name");
    x->cat = str(e, "cat");
    x->ts = num(e, "ts");
    x->dur = num(e, "dur");
    x->tid = tid;
    x->args = js_get(e, "args");
    assert_non_null(x->args);
    assert_true(x->ts >= 0);
    assert_true(x->dur >= 0);
  }
  return t;
}

static void free_trace(trace *t) {
  js_free(t->root);
  free(t->evs);
}

static int by_tid_ts(const void *a, const void *b) {
  const ev *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
  return x->dur > y->dur ? -1 : x->dur < y->dur; /* the enclosing span first */
}

/* On each thread, spans either nest or follow each other: never overlap partly. */
static void assert_nested(trace *t) {
  ev *s = malloc((t->n + 1) * sizeof *s);
  memcpy(s, t->evs, t->n * sizeof *s);
  qsort(s, t->n, sizeof *s, by_tid_ts);
  const ev *stack[64];
  int depth = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (i > 0 && s[i].tid != s[i - 1].tid) depth = 0;
    while (depth > 0 && stack[depth - 1]->ts + stack[depth - 1]->dur <= s[i].ts) depth--;
    if (depth > 0 && s[i].ts + s[i].dur > stack[depth - 1]->ts + stack[depth - 1]->dur + 1e-9)
      fail_msg("thread %d: %s [%f, +%f] overlaps %s [%f, +%f] without nesting", s[i].tid, s[i].name,
               s[i].ts, s[i].dur, stack[depth - 1]->name, stack[depth - 1]->ts, stack[depth - 1]->dur);
    assert_true(depth < 64);
    stack[depth++] = &s[i];
  }
  free(s);
}

static int count(const trace *t, const char *cat, const char *name) {
  int n = 0;
  for (size_t i = 0; i < t->n; i++)
    if ((!cat || strcmp(t->evs[i].cat, cat) == 0) && (!name || strcmp(t->evs[i].name, name) == 0)) n++;
  return n;
}

/* Events of cat whose name starts with prefix, on a thread whose name starts with role. */
static int count_on(const trace *t, const char *cat, const char *prefix, const char *role) {
  int n = 0;
  for (size_t i = 0; i < t->n; i++) {
    const ev *e = &t->evs[i];
    const char *tn = thread_name(t, e->tid);
    assert_non_null(tn); /* every thread with events is named */
    if (strcmp(e->cat, cat) == 0 && strncmp(e->name, prefix, strlen(prefix)) == 0 &&
        strncmp(tn, role, strlen(role)) == 0)
      n++;
  }
  return n;
}

static const ev *find(const trace *t, const char *cat, const char *name, const char *key,
                      const char *val) {
  for (size_t i = 0; i < t->n; i++) {
    const ev *e = &t->evs[i];
    if (strcmp(e->cat, cat) || strcmp(e->name, name)) continue;
    const js_val *a = js_get(e->args, key);
    if (!val || (a && a->kind == JS_STR && strcmp(a->str, val) == 0)) return e;
  }
  return NULL;
}

/* ---- the tests ----------------------------------------------------------------------------------- */

/* One compiled and one warm call of `layer` (its dot split over the workers), and calls of
   `indexed` (a shard_map reading axis_index) and `scaled_sum` (an all_reduce) on an array
   sharded over 2 devices. */
static void run_workload(jit_ctx *c) {
  int64_t xs[2] = {256, 256}, bs[1] = {256};
  jit_array *x = filled(c, 2, xs, 0.5f), *w = filled(c, 2, xs, -0.25f), *b = filled(c, 1, bs, 1.0f);
  jit_fn *f = NULL, *g = NULL;
  jit_fn_opts o = {.name = "layer", .n_args = 3, .n_results = 1};
  assert_int_equal(jit_compile(c, layer, NULL, &o, &f), JIT_OK);
  jit_array *args[3] = {x, w, b}, *y = NULL;
  for (int k = 0; k < 2; k++) {
    assert_int_equal(jit_call(f, args, &y), JIT_OK);
    jit_array_free(y);
  }
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  jit_array *xsh = pl_put_rows(c, x, 2, &m, &s);
  jit_fn_opts io = {.name = "indexed", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, indexed, m, &io, &g), JIT_OK);
  assert_int_equal(jit_call(g, &xsh, &y), JIT_OK);
  jit_array_free(y);
  jit_fn_free(g);
  jit_fn_opts go = {.name = "scaled_sum", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, scaled_sum, NULL, &go, &g), JIT_OK);
  assert_int_equal(jit_call(g, &xsh, &y), JIT_OK);
  float host[256];
  assert_int_equal(jit_array_to_host(y, host, sizeof host), JIT_OK);
  jit_array_free(y);
  jit_array_free(xsh);
  jit_sharding_free(s);
  jit_mesh_free(m);
  jit_fn_free(f);
  jit_fn_free(g);
  jit_array_free(x);
  jit_array_free(w);
  jit_array_free(b);
}

static void check_workload(trace *t) {
  assert_nested(t);
  /* the host's calls: two of layer (a miss, then a hit), one of scaled_sum */
  assert_int_equal(count(t, "jit_call", "jit_call layer"), 2);
  assert_non_null(find(t, "jit_call", "jit_call layer", "cache", "miss"));
  assert_non_null(find(t, "jit_call", "jit_call layer", "cache", "hit"));
  assert_int_equal(count(t, "jit_call", "jit_call scaled_sum"), 1);
  const ev *cl = find(t, "compile", "compile layer", "fn", "layer");
  assert_non_null(cl);
  assert_string_equal(str(cl->args, "signature"), "(f32[256,256], f32[256,256], f32[256])");
  /* every phase of both compiles */
  static const char *const phases[] = {"trace", "fusion", "lowering", "llvm module",
                                       "llvm optimize", "llvm emit", "load"};
  for (size_t i = 0; i < sizeof phases / sizeof *phases; i++)
    if (count(t, "compile", phases[i]) < 2) fail_msg("fewer than 2 '%s' events", phases[i]);
  assert_int_equal(count(t, "compile", "partition"), 2); /* indexed, scaled_sum */
  static const char *const passes[] = {"canonicalize", "cse", "hoist", "dce"};
  for (size_t i = 0; i < sizeof passes / sizeof *passes; i++)
    if (count(t, "pass", passes[i]) < 2) fail_msg("fewer than 2 '%s' pass events", passes[i]);
  /* layer's dot is split over the workers; each piece has its rows and bytes */
  assert_true(count_on(t, "kernel", "layer:tjit_dot", "worker") >= 2);
  assert_true(count_on(t, "kernel", "layer:tjit_dot", "host") >= 2);
  for (size_t i = 0; i < t->n; i++) {
    if (strcmp(t->evs[i].cat, "kernel") || strncmp(t->evs[i].name, "layer:", 6)) continue;
    assert_true(num(t->evs[i].args, "rows") > 0);
    assert_true(num(t->evs[i].args, "bytes") > 0);
  }
  /* the sharded call: device 1's program and its collective on device 1's thread, device 0's
     on the host's; the copies that laid x out and gathered the result */
  assert_int_equal(count_on(t, "device", "scaled_sum", "device 1"), 1);
  assert_int_equal(count_on(t, "device", "scaled_sum", "host"), 1);
  assert_true(count_on(t, "collective", "", "device 1") >= 1);
  assert_true(count_on(t, "collective", "", "host") >= 1);
  assert_true(count_on(t, "kernel", "scaled_sum:", "device 1") >= 1);
  assert_int_equal(count(t, "collective", "axis_index"), 2); /* one per device */
  assert_int_equal(count(t, "copy", "device_put"), 1);
  assert_true(count(t, "copy", "gather to host") + count(t, "copy", "lay out args") >= 1);
}

static void test_profile_workload(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(2, 2);
  char *path = temp_path("workload");
  assert_int_equal(jit_profile_start(c), JIT_OK);
  run_workload(c);
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  trace t = load_trace(path);
  check_workload(&t);
  /* nothing is recorded once stopped: a new profile starts empty */
  free_trace(&t);
  assert_int_equal(jit_profile_start(c), JIT_OK);
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  t = load_trace(path);
  assert_int_equal(t.n, 0);
  free_trace(&t);
  unlink(path);
  free(path);
  jit_ctx_destroy(c);
}

static void test_profile_misuse(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(1, 1), *d = ctx_of(1, 1);
  char *path = temp_path("misuse");
  assert_int_equal(jit_profile_stop(c, path), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "jit_profile_stop: no profile is running"));
  assert_int_equal(jit_profile_start(NULL), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "ctx is NULL"));
  assert_int_equal(jit_profile_start(c), JIT_OK);
  assert_int_equal(jit_profile_start(c), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "a profile is already running (started on this jit_ctx)"));
  assert_int_equal(jit_profile_start(d), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "started on another jit_ctx"));
  assert_int_equal(jit_profile_stop(d, path), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "started on another jit_ctx"));
  assert_int_equal(jit_profile_stop(c, NULL), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "path is NULL"));
  /* a path that cannot be written: JIT_EIO, and the profile keeps running */
  assert_int_equal(jit_profile_stop(c, "/nonexistent-dir/x/profile.json"), JIT_EIO);
  assert_non_null(strstr(jit_last_error(), "cannot write '/nonexistent-dir/x/profile.json'"));
  assert_non_null(strstr(jit_last_error(), "keeps running"));
  assert_int_equal(jit_profile_start(c), JIT_EINVAL);
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  assert_int_equal(jit_profile_stop(c, path), JIT_EINVAL);
  /* destroying the context a profile runs on ends it */
  assert_int_equal(jit_profile_start(d), JIT_OK);
  jit_ctx_destroy(d);
  assert_int_equal(jit_profile_stop(c, path), JIT_EINVAL);
  assert_int_equal(jit_profile_start(c), JIT_OK);
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  unlink(path);
  free(path);
  jit_ctx_destroy(c);
}

static void negate(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_neg(t, a[0]);
}

/* Function names reach the file as valid JSON strings whatever bytes they hold. */
static void test_profile_escapes_names(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(1, 1);
  char *path = temp_path("escapes");
  const char *name = "we\"ird\\na\nme\t\x01\xff\xc3\xa9";
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = name, .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, negate, NULL, &o, &f), JIT_OK);
  int64_t shape[1] = {8};
  jit_array *x = filled(c, 1, shape, 1.0f), *y = NULL;
  assert_int_equal(jit_profile_start(c), JIT_OK);
  assert_int_equal(jit_call(f, &x, &y), JIT_OK);
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  trace t = load_trace(path);
  /* the invalid byte 0xff becomes U+FFFD; everything else round-trips */
  const char *want = "we\"ird\\na\nme\t\x01\xef\xbf\xbd\xc3\xa9";
  const ev *call = NULL;
  for (size_t i = 0; i < t.n; i++)
    if (strcmp(t.evs[i].cat, "jit_call") == 0) call = &t.evs[i];
  assert_non_null(call);
  assert_string_equal(str(call->args, "fn"), want);
  free_trace(&t);
  unlink(path);
  free(path);
  jit_array_free(x);
  jit_array_free(y);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

/* Past $TJIT_PROFILE_MAX_EVENTS events a thread keeps counting what it drops; the file says so. */
static void test_profile_drops_past_the_cap(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(1, 1);
  char *path = temp_path("cap");
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "negate", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, negate, NULL, &o, &f), JIT_OK);
  int64_t shape[1] = {8};
  jit_array *x = filled(c, 1, shape, 1.0f), *y = NULL;
  setenv("TJIT_PROFILE_MAX_EVENTS", "5", 1);
  assert_int_equal(jit_profile_start(c), JIT_OK);
  unsetenv("TJIT_PROFILE_MAX_EVENTS");
  for (int i = 0; i < 20; i++) {
    assert_int_equal(jit_call(f, &x, &y), JIT_OK);
    jit_array_free(y);
  }
  assert_int_equal(jit_profile_stop(c, path), JIT_OK);
  trace t = load_trace(path);
  assert_int_equal(t.n, 5);
  double dropped = num(js_get(t.root, "otherData"), "dropped_events");
  assert_true(dropped >= 35); /* 20 calls of 2 events at least (the call and its kernel) */
  const js_val *arr = js_get(t.root, "traceEvents");
  int marks = 0;
  for (size_t i = 0; i < arr->n; i++)
    if (strcmp(str(&arr->items[i], "ph"), "i") == 0) {
      assert_string_equal(str(&arr->items[i], "name"), "events dropped");
      assert_true(num(js_get(&arr->items[i], "args"), "count") == dropped);
      marks++;
    }
  assert_int_equal(marks, 1);
  free_trace(&t);
  unlink(path);
  free(path);
  jit_array_free(x);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

/* $TJIT_PROFILE: the first context starts the profile, the last one destroyed writes it. */
static void test_profile_env(void **state) {
  (void)state;
  char *path = temp_path("env");
  unlink(path);
  setenv("TJIT_PROFILE", path, 1);
  jit_ctx *c = ctx_of(2, 2), *d = ctx_of(1, 1);
  assert_int_equal(jit_profile_start(c), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "TJIT_PROFILE="));
  assert_int_equal(jit_profile_stop(c, path), JIT_EINVAL);
  run_workload(c);
  jit_ctx_destroy(c);
  assert_int_equal(access(path, F_OK), -1); /* d is still alive */
  jit_ctx_destroy(d);
  unsetenv("TJIT_PROFILE");
  trace t = load_trace(path);
  check_workload(&t);
  free_trace(&t);
  unlink(path);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_profile_workload),
      cmocka_unit_test(test_profile_misuse),
      cmocka_unit_test(test_profile_escapes_names),
      cmocka_unit_test(test_profile_drops_past_the_cap),
      cmocka_unit_test(test_profile_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
