/* test_cache_trust.c: the disk cache loads only what this user wrote: a cache directory others can
 * write, entries of another user or writable by others, entries whose checksum or key do not
 * match are refused with a TJIT_DEBUG_CACHE message, and jit_call compiles instead, correctly. */
#define _GNU_SOURCE /* mkdtemp, setenv */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tjit.h"

#define HDR 88         /* the entry header's size (codegen/disk_cache.h) */
#define OTHER_UID 12345 /* a user that is not us (the chown cases run only as root) */

/* r0 = 3 x^2 + 1 */
static void poly(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_mul(t, jit_mul(t, a[0], a[0]), jit_scalar(t, 3)), jit_scalar(t, 1));
}

typedef struct run_result {
  uint64_t disk_hits;
  char log[4096]; /* what the library wrote on stderr during the run */
} run_result;

/* One context on DIR calls poly on n floats, checks the values and reports its disk hits and what
   it printed. */
static run_result run(const char *dir, int64_t n) {
  run_result r = {0};
  char log_path[] = "/tmp/tjit-trust-log-XXXXXX";
  int log_fd = mkstemp(log_path);
  assert_true(log_fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  assert_true(saved >= 0);
  assert_int_equal(dup2(log_fd, 2), 2);

  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 1;
  o.cache_dir = dir;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "poly", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, poly, NULL, &fo, &f), JIT_OK);
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i - 3;
  jit_array *a = NULL, *res = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, &n, x, &a), JIT_OK);
  jit_status st = jit_call(f, &a, &res);
  if (st != JIT_OK) fail_msg("jit_call: %s", jit_last_error());
  assert_int_equal(jit_array_to_host(res, y, (size_t)n * sizeof *y), JIT_OK);
  for (int64_t i = 0; i < n; i++) assert_true(y[i] == 3 * x[i] * x[i] + 1);
  jit_fn_stats s;
  assert_int_equal(jit_fn_stats_get(f, &s), JIT_OK);
  r.disk_hits = s.disk_cache_hits;
  jit_array_free(res);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  free(x);
  free(y);

  fflush(stderr);
  assert_int_equal(dup2(saved, 2), 2);
  close(saved);
  ssize_t got = pread(log_fd, r.log, sizeof r.log - 1, 0);
  r.log[got > 0 ? got : 0] = 0;
  close(log_fd);
  unlink(log_path);
  return r;
}

/* The one entry in DIR (a signature of poly is one object file), into path. */
static void the_entry(const char *dir, char *path, size_t n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int found = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strlen(de->d_name) != 64) continue;
    snprintf(path, n, "%s/%s", dir, de->d_name);
    found++;
  }
  closedir(d);
  assert_int_equal(found, 1);
}

static void flip_byte(const char *path, long off) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char b;
  assert_int_equal(pread(fd, &b, 1, off), 1);
  b ^= 0x01;
  assert_int_equal(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

static void expect_refused(const char *dir, const char *why) {
  run_result r = run(dir, 16);
  assert_int_equal(r.disk_hits, 0); /* compiled, and the values were right (run checks them) */
  if (!strstr(r.log, why)) fail_msg("expected '%s' in the cache's messages:\n%s", why, r.log);
}

static void expect_hit(const char *dir) {
  run_result r = run(dir, 16);
  if (r.disk_hits != 1) fail_msg("expected a disk hit in %s; the cache said:\n%s", dir, r.log);
}

typedef struct fixture {
  char dir[64];
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  if (!fx) return -1;
  strcpy(fx->dir, "/tmp/tjit-trust-XXXXXX");
  if (!mkdtemp(fx->dir)) return -1; /* 0700, ours */
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  DIR *d = opendir(fx->dir);
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
      if (de->d_name[0] != '.' || strlen(de->d_name) > 2) unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
  }
  rmdir(fx->dir);
  free(fx);
  return 0;
}

/* The baseline every case starts from: a first run stores, a second loads. */
static void warm(const char *dir) {
  assert_int_equal(run(dir, 16).disk_hits, 0);
  expect_hit(dir);
}

static void test_directory_writable_by_others(void **state) {
  fixture *fx = *state;
  warm(fx->dir);
  const mode_t modes[2] = {0702 /* o+w */, 0720 /* g+w */};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(chmod(fx->dir, modes[i]), 0);
    expect_refused(fx->dir, "writable by group or others");
    assert_int_equal(chmod(fx->dir, 0700), 0);
    expect_hit(fx->dir); /* the same, untouched entry is trusted again */
  }
  /* A world-writable directory with the sticky bit (as /tmp) is still one others can fill. */
  assert_int_equal(chmod(fx->dir, 01777), 0);
  expect_refused(fx->dir, "writable by group or others");
  assert_int_equal(chmod(fx->dir, 0700), 0);
}

static void test_directory_of_another_user(void **state) {
  fixture *fx = *state;
  if (geteuid() != 0) skip();
  warm(fx->dir);
  assert_int_equal(chown(fx->dir, OTHER_UID, OTHER_UID), 0);
  expect_refused(fx->dir, "not by this user");
  assert_int_equal(chown(fx->dir, 0, 0), 0);
  expect_hit(fx->dir);
}

static void test_flipped_byte(void **state) {
  fixture *fx = *state;
  warm(fx->dir);
  char path[160];
  the_entry(fx->dir, path, sizeof path);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  flip_byte(path, HDR + (long)(st.st_size - HDR) / 2); /* inside the machine code */
  expect_refused(fx->dir, "payload checksum mismatch");
  expect_hit(fx->dir); /* the refused run compiled and replaced the entry */
}

static void test_valid_entry_of_another_key(void **state) {
  fixture *fx = *state;
  char other[64];
  strcpy(other, "/tmp/tjit-trust-other-XXXXXX");
  assert_non_null(mkdtemp(other));
  warm(fx->dir);
  assert_int_equal(run(other, 32).disk_hits, 0); /* another signature: another key */
  char mine[160], theirs[160];
  the_entry(fx->dir, mine, sizeof mine);
  the_entry(other, theirs, sizeof theirs);
  /* A whole, self-consistent entry (its checksum matches its payload) under the wrong name. */
  assert_int_equal(rename(theirs, mine), 0);
  assert_int_equal(rmdir(other), 0);
  expect_refused(fx->dir, "key hash mismatch");
  expect_hit(fx->dir);
}

static void test_entry_of_another_user(void **state) {
  fixture *fx = *state;
  if (geteuid() != 0) skip();
  warm(fx->dir);
  char path[160];
  the_entry(fx->dir, path, sizeof path);
  assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
  expect_refused(fx->dir, "owned by another user");
  expect_hit(fx->dir); /* replaced by an entry of ours */
}

static void test_entry_writable_by_others(void **state) {
  fixture *fx = *state;
  warm(fx->dir);
  char path[160];
  the_entry(fx->dir, path, sizeof path);
  assert_int_equal(chmod(path, 0646), 0);
  expect_refused(fx->dir, "writable by group or others");
  expect_hit(fx->dir);
}

int main(void) {
  setenv("TJIT_DEBUG_CACHE", "1", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_directory_writable_by_others, setup, teardown),
      cmocka_unit_test_setup_teardown(test_directory_of_another_user, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flipped_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(test_valid_entry_of_another_key, setup, teardown),
      cmocka_unit_test_setup_teardown(test_entry_of_another_user, setup, teardown),
      cmocka_unit_test_setup_teardown(test_entry_writable_by_others, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
