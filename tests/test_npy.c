/* test_npy.c: .npy save and load: files numpy wrote (tests/npy, made by make_fixtures.py), round
 * trips of every dtype and ranks 0..4, sharded arrays, and every truncation and many corruptions
 * of valid files, each of which must be refused with a status (the test also runs under ASan). */
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

#include "ir/ir.h"
#include "tjit.h"

static jit_ctx *ctx;
static char tmp_dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/tjit_npy_XXXXXX");
  if (!mkdtemp(tmp_dir)) return -1;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = 2;
  o.n_threads = 2;
  return jit_ctx_create(&o, &ctx) == JIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  jit_ctx_destroy(ctx);
  rmdir(tmp_dir);
  return 0;
}

static void tmp_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", tmp_dir, name);
}

static void fixture_path(char *buf, size_t n, const char *name) {
  const char *src = getenv("TJIT_SOURCE_DIR");
  snprintf(buf, n, "%s/tests/npy/%s", src ? src : ".", name);
}

static unsigned char *read_bytes(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void expect_msg(const char *want) {
  const char *got = jit_last_error();
  if (!strstr(got, want)) {
    print_error("last error \"%s\" does not contain \"%s\"\n", got, want);
    fail();
  }
}

static jit_array *load_ok(const char *path) {
  jit_array *a = NULL;
  jit_status st = jit_array_load_npy(ctx, path, &a);
  if (st != JIT_OK) print_error("%s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  assert_non_null(a);
  return a;
}

/* a's values as doubles (16-bit floats decoded). */
static double *values(const jit_array *a, size_t *n) {
  size_t nb = jit_array_nbytes(a), es = jit_dtype_size(jit_array_dtype(a));
  unsigned char *raw = malloc(nb ? nb : 1);
  assert_int_equal(jit_array_to_host(a, raw, nb), JIT_OK);
  *n = nb / es;
  double *v = malloc((*n ? *n : 1) * sizeof *v);
  for (size_t i = 0; i < *n; i++) v[i] = ir_load_f64(jit_array_dtype(a), raw, (int64_t)i);
  free(raw);
  return v;
}

/* The 2x3 array every numeric fixture holds: arange(6) - 2 (u8: arange(6), bool: arange(6) % 2). */
static void expect_fixture_values(const jit_array *a, jit_dtype dt) {
  assert_int_equal(jit_array_dtype(a), dt);
  assert_int_equal(jit_array_rank(a), 2);
  assert_int_equal(jit_array_shape(a)[0], 2);
  assert_int_equal(jit_array_shape(a)[1], 3);
  size_t n;
  double *v = values(a, &n);
  assert_int_equal(n, 6);
  for (size_t i = 0; i < 6; i++) {
    double want = dt == JIT_BOOL ? (double)(i % 2) : dt == JIT_U8 ? (double)i : (double)i - 2;
    assert_true(v[i] == want);
  }
  free(v);
}

/* ---- files numpy wrote ------------------------------------------------------------------------- */
static void test_numpy_fixtures(void **state) {
  (void)state;
  static const struct {
    const char *file;
    jit_dtype dt;
    bool byte_identical; /* save of the loaded array writes exactly numpy's bytes */
  } cases[] = {
      {"bool.npy", JIT_BOOL, true},  {"i8.npy", JIT_I8, true},     {"u8.npy", JIT_U8, true},
      {"i32.npy", JIT_I32, true},    {"i64.npy", JIT_I64, true},   {"f16.npy", JIT_F16, true},
      {"bf16.npy", JIT_BF16, true},  {"f32.npy", JIT_F32, true},   {"f64.npy", JIT_F64, true},
      {"f64_big_endian.npy", JIT_F64, false}, {"i32_big_endian.npy", JIT_I32, false},
      {"f32_fortran.npy", JIT_F32, false},    {"f32_v2.npy", JIT_F32, false},
      {"f32_v3.npy", JIT_F32, false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char path[1024], out[1024];
    fixture_path(path, sizeof path, cases[c].file);
    jit_array *a = load_ok(path);
    expect_fixture_values(a, cases[c].dt);
    tmp_path(out, sizeof out, "resave.npy");
    assert_int_equal(jit_array_save_npy(a, out), JIT_OK);
    if (cases[c].byte_identical) {
      size_t n1, n2;
      unsigned char *want = read_bytes(path, &n1), *got = read_bytes(out, &n2);
      assert_non_null(want);
      assert_non_null(got);
      if (n1 != n2 || memcmp(want, got, n1) != 0) print_error("%s: saved bytes differ\n", cases[c].file);
      assert_int_equal(n1, n2);
      assert_memory_equal(want, got, n1);
      free(want);
      free(got);
    }
    jit_array *b = load_ok(out);
    expect_fixture_values(b, cases[c].dt);
    jit_array_free(b);
    jit_array_free(a);
    unlink(out);
  }

  char path[1024];
  fixture_path(path, sizeof path, "f64_scalar.npy");
  jit_array *s = load_ok(path);
  assert_int_equal(jit_array_rank(s), 0);
  double v = 0;
  assert_int_equal(jit_array_to_host(s, &v, sizeof v), JIT_OK);
  assert_true(v == 7.5);
  jit_array_free(s);

  fixture_path(path, sizeof path, "f32_empty.npy");
  jit_array *e = load_ok(path);
  assert_int_equal(jit_array_rank(e), 2);
  assert_int_equal(jit_array_shape(e)[0], 0);
  assert_int_equal(jit_array_shape(e)[1], 3);
  assert_int_equal(jit_array_nbytes(e), 0);
  jit_array_free(e);

  jit_array *u = NULL;
  fixture_path(path, sizeof path, "u16_unsupported.npy");
  assert_int_equal(jit_array_load_npy(ctx, path, &u), JIT_EUNSUPPORTED);
  assert_null(u);
  expect_msg("u16_unsupported.npy");
  expect_msg("no dtype for NumPy's '<u2'");
}

/* ---- round trips ----------------------------------------------------------------------------------- */
static void round_trip(jit_dtype dt, int rank, const int64_t *shape, uint64_t seed) {
  size_t es = jit_dtype_size(dt), n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
  unsigned char *data = malloc(n * es + 1);
  for (size_t i = 0; i < n * es; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = (unsigned char)(seed >> 56);
  }
  if (dt == JIT_BOOL)
    for (size_t i = 0; i < n; i++) data[i] &= 1;
  jit_array *a = NULL, *b = NULL;
  assert_int_equal(jit_array_from_host(ctx, dt, rank, shape, data, &a), JIT_OK);
  char path[1024];
  tmp_path(path, sizeof path, "round.npy");
  assert_int_equal(jit_array_save_npy(a, path), JIT_OK);
  size_t flen;
  unsigned char *file = read_bytes(path, &flen);
  assert_non_null(file);
  assert_int_equal((flen - n * es) % 64, 0); /* header padded as numpy pads it */
  free(file);
  b = load_ok(path);
  assert_int_equal(jit_array_dtype(b), dt);
  assert_int_equal(jit_array_rank(b), rank);
  for (int i = 0; i < rank; i++) assert_int_equal(jit_array_shape(b)[i], shape[i]);
  unsigned char *back = malloc(n * es + 1);
  assert_int_equal(jit_array_to_host(b, back, n * es), JIT_OK);
  assert_memory_equal(back, data, n * es);
  free(back);
  free(data);
  jit_array_free(a);
  jit_array_free(b);
  unlink(path);
}

static void test_round_trip_every_dtype_and_rank(void **state) {
  (void)state;
  static const int64_t shapes[][4] = {{0}, {5}, {3, 4}, {2, 0, 3}, {2, 3, 1, 5}};
  static const int64_t empty_dims[][4] = {{0}, {0}, {0, 7}, {4, 3, 0}, {1, 0, 2, 2}};
  for (int dt = JIT_BOOL; dt <= JIT_F64; dt++)
    for (int rank = 0; rank <= 4; rank++) {
      round_trip((jit_dtype)dt, rank, shapes[rank], (uint64_t)(dt * 10 + rank));
      round_trip((jit_dtype)dt, rank, empty_dims[rank], 1);
    }
}

static void test_save_sharded_gathers(void **state) {
  (void)state;
  const int64_t mesh_shape[1] = {2}, shape[2] = {4, 3};
  const char *names[1] = {"x"};
  float v[12];
  for (int i = 0; i < 12; i++) v[i] = (float)i * 0.5f - 1.0f;
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  jit_array *host = NULL, *sharded = NULL;
  assert_int_equal(jit_mesh_create(ctx, 1, mesh_shape, names, NULL, &m), JIT_OK);
  assert_int_equal(jit_sharding_create(m, "x, _", &s), JIT_OK);
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, shape, v, &host), JIT_OK);
  assert_int_equal(jit_device_put(host, s, &sharded), JIT_OK);
  char path[1024];
  tmp_path(path, sizeof path, "sharded.npy");
  assert_int_equal(jit_array_save_npy(sharded, path), JIT_OK);
  jit_array *b = load_ok(path);
  float back[12];
  assert_int_equal(jit_array_to_host(b, back, sizeof back), JIT_OK);
  assert_memory_equal(back, v, sizeof v);
  jit_array_free(b);
  jit_array_free(sharded);
  jit_array_free(host);
  jit_sharding_free(s);
  jit_mesh_free(m);
  unlink(path);
}

/* ---- refusals ------------------------------------------------------------------------------------ */
/* Writes a version-major file whose header is text (unpadded) followed by data_len bytes of 0x3f. */
static void write_npy(const char *path, int major, const char *text, size_t data_len) {
  size_t hl = strlen(text), pre = major == 1 ? 10 : 12;
  unsigned char *buf = calloc(1, pre + hl + data_len + 1);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + pre, text, hl);
  memset(buf + pre + hl, 0x3f, data_len);
  write_bytes(path, buf, pre + hl + data_len);
  free(buf);
}

/* Loads a file made by write_npy: want is JIT_OK (the array is checked and freed) or the refusal
   expected, whose message must name the file and contain msg. */
static void expect_load(int major, const char *text, size_t data_len, jit_status want,
                        const char *msg) {
  char path[1024];
  tmp_path(path, sizeof path, "bad.npy");
  write_npy(path, major, text, data_len);
  jit_array *a = (jit_array *)&a; /* must be reset to NULL on failure */
  jit_status st = jit_array_load_npy(ctx, path, &a);
  if (st != want) print_error("header %s: got %s (%s)\n", text, jit_status_str(st), jit_last_error());
  assert_int_equal(st, want);
  if (want == JIT_OK) {
    assert_int_equal(jit_array_nbytes(a), data_len);
    jit_array_free(a);
  } else {
    assert_null(a);
    expect_msg("bad.npy");
    expect_msg(msg);
  }
  unlink(path);
}

static void test_malformed_files(void **state) {
  (void)state;
  /* the start of a header for f32 in C order */
#define F32 "{'descr': '<f4', 'fortran_order': False, "
  const char *good = F32 "'shape': (2, 3), }\n";
  const struct {
    int major;
    const char *header;
    size_t data_len;
    jit_status want;
    const char *message;
  } cases[] = {
      {1, good, 24, JIT_OK, ""},
      {1, good, 23, JIT_EIO, "data is 23 bytes; the header's f32 shape needs 24"},
      {4, good, 24, JIT_EUNSUPPORTED, "format version 4.0"},
      {2, good, 24, JIT_OK, ""},
      {1, "{'descr': '<f4', 'shape': (2, 3), }", 24, JIT_EINVAL, "needs the keys"},
      {1, F32 "'shape': (2, 3), 'x': 1}", 24, JIT_EINVAL, "unknown key"},
      {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
       JIT_EINVAL, "repeated key"},
      {1, "{'descr': '<f4', 'fortran_order': maybe, 'shape': (2,)}", 8, JIT_EINVAL,
       "'fortran_order' is not True or False"},
      {1, F32 "'shape': (2, -3)}", 24, JIT_EINVAL, "not a non-negative integer"},
      {1, F32 "'shape': (4611686018427387904, 4)}", 24, JIT_EINVAL, "byte size overflows"},
      {1, F32 "'shape': (99999999999999999999,)}", 24, JIT_EINVAL, "overflows int64"},
      {1, F32 "'shape': (1000000, 1000000)}", 24, JIT_EIO, "needs 4000000000000"},
      {1, F32 "'shape': (1,1,1,1,1,1,1,1,1)}", 4, JIT_EUNSUPPORTED, "rank above"},
      {1, F32 "'shape': (2, 3}", 24, JIT_EINVAL, "tuple is not closed"},
      {1, "{'descr': 'hello', 'fortran_order': False, 'shape': (2,)}", 8, JIT_EINVAL,
       "'hello' is not a NumPy type string"},
      {1, "{'descr': '<U10', 'fortran_order': False, 'shape': (2,)}", 80, JIT_EUNSUPPORTED,
       "no dtype for NumPy's '<U10'"},
      {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8,
       JIT_EUNSUPPORTED, "structured dtypes"},
      {1, F32 "'shape': (2,)} junk", 8, JIT_EINVAL, "text after the dict"},
      {1, "['descr']", 8, JIT_EINVAL, "not a dict"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_load(cases[i].major, cases[i].header, cases[i].data_len, cases[i].want,
                cases[i].message);
#undef F32

  char path[1024];
  tmp_path(path, sizeof path, "bad.npy");
  write_bytes(path, "\x93NUMPX\x01\x00", 8);
  jit_array *a = NULL;
  assert_int_equal(jit_array_load_npy(ctx, path, &a), JIT_EINVAL);
  expect_msg("bad magic");
  unlink(path);
  assert_int_equal(jit_array_load_npy(ctx, path, &a), JIT_EIO);
  expect_msg("cannot open");
  assert_int_equal(jit_array_load_npy(NULL, path, &a), JIT_EINVAL);
  assert_int_equal(jit_array_load_npy(ctx, NULL, &a), JIT_EINVAL);
  assert_int_equal(jit_array_load_npy(ctx, path, NULL), JIT_EINVAL);
  assert_int_equal(jit_array_save_npy(NULL, path), JIT_EINVAL);
  jit_array *x = NULL;
  const int64_t one = 1;
  float f = 1;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, &one, &f, &x), JIT_OK);
  assert_int_equal(jit_array_save_npy(x, NULL), JIT_EINVAL);
  assert_int_equal(jit_array_save_npy(x, "/nonexistent-dir/x.npy"), JIT_EIO);
  expect_msg("cannot create");
  jit_array_free(x);
}

/* Every prefix of a valid file, and random byte changes in its preamble and header: each load
   returns a status; one that succeeds gives a consistent array. */
static void corrupt_variants(const unsigned char *file, size_t len, size_t header_end,
                             uint64_t seed) {
  char path[1024];
  tmp_path(path, sizeof path, "corrupt.npy");
  for (size_t cut = 0; cut < len; cut++) {
    write_bytes(path, file, cut);
    jit_array *a = NULL;
    jit_status st = jit_array_load_npy(ctx, path, &a);
    if (st == JIT_OK) print_error("a file cut to %zu of %zu bytes loaded\n", cut, len);
    assert_int_not_equal(st, JIT_OK);
    assert_null(a);
    expect_msg("corrupt.npy");
    unlink(path); /* rewriting a file in place makes ext4 flush it (auto_da_alloc): seconds */
  }
  unsigned char *buf = malloc(len);
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(buf, file, len);
    int flips = 1 + iter % 3;
    for (int k = 0; k < flips; k++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t pos = (size_t)(seed >> 33) % header_end;
      unsigned char b = (unsigned char)(seed >> 20);
      /* half the time a character the header grammar cares about, to get past the first check */
      static const char interesting[] = "{}(),:' 0123456789<>|TFVfiub\n\0";
      if (iter & 1) b = (unsigned char)interesting[(seed >> 12) % (sizeof interesting - 1)];
      buf[pos] = b;
    }
    write_bytes(path, buf, len);
    jit_array *a = NULL;
    jit_status st = jit_array_load_npy(ctx, path, &a);
    if (st == JIT_OK) {
      assert_non_null(a);
      size_t nb = jit_array_nbytes(a);
      assert_true(nb <= len);
      unsigned char *tmp = malloc(nb ? nb : 1);
      assert_int_equal(jit_array_to_host(a, tmp, nb), JIT_OK);
      free(tmp);
      jit_array_free(a);
    } else {
      assert_null(a);
      assert_true(st == JIT_EIO || st == JIT_EINVAL || st == JIT_EUNSUPPORTED);
      expect_msg("corrupt.npy");
    }
    unlink(path);
  }
  free(buf);
}

static void test_corrupt_and_truncated(void **state) {
  (void)state;
  static const char *const files[] = {"f32.npy", "f32_v3.npy", "bf16.npy", "f32_fortran.npy",
                                      "f64_big_endian.npy"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    fixture_path(path, sizeof path, files[i]);
    size_t len;
    unsigned char *file = read_bytes(path, &len);
    assert_non_null(file);
    jit_array *a = load_ok(path);
    size_t header_end = len - jit_array_nbytes(a);
    jit_array_free(a);
    corrupt_variants(file, len, header_end, i + 1);
    free(file);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_numpy_fixtures),
      cmocka_unit_test(test_round_trip_every_dtype_and_rank),
      cmocka_unit_test(test_save_sharded_gathers),
      cmocka_unit_test(test_malformed_files),
      cmocka_unit_test(test_corrupt_and_truncated),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
