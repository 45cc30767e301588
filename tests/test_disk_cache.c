/* test_disk_cache.c: the on-disk object cache: round trips, hits across processes, every kind of
 * damaged entry is a miss and is replaced, racing writers, unwritable dirs, eviction, LLVM end to end. */
#define _GNU_SOURCE /* mkdtemp, setenv, nftw */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <llvm-c/Core.h>

#include "codegen/disk_cache.h"
#include "codegen/llvm_jit.h"

#define HDR 88 /* the file header's size (disk_cache.h) */

/* ---- helpers ------------------------------------------------------------------------------------ */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

typedef struct fixture {
  char root[64]; /* a fresh directory per test, removed afterwards */
  char dir[128]; /* the cache directory inside it (not created: open must do it) */
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  if (!fx) return -1;
  strcpy(fx->root, "/tmp/tjit-dc-XXXXXX");
  if (!mkdtemp(fx->root)) return -1;
  snprintf(fx->dir, sizeof fx->dir, "%s/a/b/cache", fx->root);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  char p[160];
  snprintf(p, sizeof p, "%s/a/b/cache", fx->root);
  chmod(p, 0700); /* in case a test failed while the dir was read-only */
  nftw(fx->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(fx);
  return 0;
}

/* Payloads that check themselves: the length and every byte follow from the first 8 bytes, so a
   torn, mixed or truncated payload cannot pass. */
static size_t payload_len(uint64_t seed) { return 4096 + (size_t)(seed % 61) * 997; }

static uint8_t *payload_make(uint64_t seed, size_t *len) {
  *len = payload_len(seed);
  uint8_t *p = malloc(*len);
  if (!p) return NULL;
  memcpy(p, &seed, 8);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 8; i < *len; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = (uint8_t)x;
  }
  return p;
}

static bool payload_ok(const void *obj, size_t len) {
  if (len < 8) return false;
  uint64_t seed;
  memcpy(&seed, obj, 8);
  size_t n;
  uint8_t *want = payload_make(seed, &n);
  bool ok = want && n == len && memcmp(want, obj, n) == 0;
  free(want);
  return ok;
}

static void entry_path(cg_disk_cache *c, const char *key, char *buf, size_t n) {
  assert_true(cg_disk_cache_entry_path(c, key, strlen(key), buf, n));
}

static bool get_str(cg_disk_cache *c, const char *key, void **obj, size_t *len) {
  return cg_disk_cache_get(c, key, strlen(key), obj, len);
}

static bool put_str(cg_disk_cache *c, const char *key, const void *obj, size_t len) {
  return cg_disk_cache_put(c, key, strlen(key), obj, len);
}

static size_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (size_t)st.st_size : (size_t)-1;
}

/* ---- SHA-256 ------------------------------------------------------------------------------------ */

static void check_sha(const void *data, size_t n, const char *hex) {
  uint8_t h[32];
  char got[65];
  cg_sha256(data, n, h);
  for (int i = 0; i < 32; i++) snprintf(got + 2 * i, 3, "%02x", h[i]);
  assert_string_equal(got, hex);
}

static void test_sha256(void **state) {
  (void)state;
  /* FIPS 180-4 examples; the 56-byte one pads into a second block. */
  check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *s56 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(s56, strlen(s56), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  char *m = malloc(1000000);
  assert_non_null(m);
  memset(m, 'a', 1000000);
  check_sha(m, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(m);
}

/* ---- basic use ---------------------------------------------------------------------------------- */

static void test_round_trip(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  assert_non_null(c);
  struct stat st;
  assert_int_equal(stat(fx->dir, &st), 0); /* created with its parents */
  assert_true(S_ISDIR(st.st_mode));
  void *obj = (void *)&obj;
  size_t len = 99, n1, n2;
  assert_false(get_str(c, "k1", &obj, &len));
  assert_null(obj);
  assert_int_equal(len, 0);
  uint8_t *p1 = payload_make(1, &n1), *p2 = payload_make(2, &n2);
  assert_true(put_str(c, "k1", p1, n1));
  assert_true(get_str(c, "k1", &obj, &len));
  assert_int_equal(len, n1);
  assert_memory_equal(obj, p1, n1);
  free(obj);
  char path[256];
  entry_path(c, "k1", path, sizeof path);
  assert_int_equal(file_size(path), HDR + n1);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 077, 0); /* others cannot plant code */
  /* Another key misses; a key that differs in its last byte too. */
  assert_false(get_str(c, "k2", &obj, &len));
  assert_false(cg_disk_cache_get(c, "k1", 1, &obj, &len)); /* "k" */
  /* A later put replaces the entry. */
  assert_true(put_str(c, "k1", p2, n2));
  assert_true(get_str(c, "k1", &obj, &len));
  assert_int_equal(len, n2);
  assert_memory_equal(obj, p2, n2);
  free(obj);
  /* Nothing else is left in the directory (no temp files). */
  int files = 0;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", fx->dir);
  FILE *ls = popen(cmd, "r");
  assert_non_null(ls);
  assert_int_equal(fscanf(ls, "%d", &files), 1);
  pclose(ls);
  assert_int_equal(files, 1);
  /* Empty and oversized objects are not stored. */
  assert_false(put_str(c, "k3", p1, 0));
  assert_false(put_str(c, "k3", NULL, 5));
  assert_false(get_str(c, "k3", &obj, &len));
  /* A trailing slash names the same cache. */
  char slash[160];
  snprintf(slash, sizeof slash, "%s//", fx->dir);
  cg_disk_cache *c2 = NULL;
  assert_int_equal(cg_disk_cache_open(slash, &c2), JIT_OK);
  assert_true(get_str(c2, "k1", &obj, &len));
  free(obj);
  cg_disk_cache_close(c2);
  cg_disk_cache_close(c);
  free(p1);
  free(p2);
}

static void test_no_cache(void **state) {
  (void)state;
  cg_disk_cache *c = (cg_disk_cache *)(uintptr_t)1;
  assert_int_equal(cg_disk_cache_open(NULL, &c), JIT_OK);
  assert_null(c);
  c = (cg_disk_cache *)(uintptr_t)1;
  assert_int_equal(cg_disk_cache_open("", &c), JIT_OK);
  assert_null(c);
  void *obj = (void *)&obj;
  size_t len = 3;
  assert_false(get_str(NULL, "k", &obj, &len));
  assert_null(obj);
  assert_false(put_str(NULL, "k", "x", 1));
  char buf[8];
  assert_false(cg_disk_cache_entry_path(NULL, "k", 1, buf, sizeof buf));
  cg_disk_cache_set_limit(NULL, 1);
  cg_disk_cache_close(NULL);
}

static void test_key_text(void **state) {
  (void)state;
  char *k0 = NULL, *k1 = NULL, *k2 = NULL, *k3 = NULL;
  size_t n0, n1, n2, n3;
  assert_int_equal(cg_disk_cache_key(NULL, "define void @f()", &k0, &n0), JIT_OK);
  assert_int_equal(n0, strlen(k0));
  assert_non_null(strstr(k0, "tjit-objcache 1\n"));
  assert_string_equal(k0 + n0 - strlen("define void @f()"), "define void @f()");
  cg_jit *j2 = NULL, *j3 = NULL;
  assert_int_equal(cg_jit_create(2, &j2), JIT_OK);
  assert_int_equal(cg_jit_create(3, &j3), JIT_OK);
  assert_int_equal(cg_disk_cache_key(j2, "M", &k1, &n1), JIT_OK);
  assert_int_equal(cg_disk_cache_key(j3, "M", &k2, &n2), JIT_OK);
  assert_int_equal(cg_disk_cache_key(j2, "N", &k3, &n3), JIT_OK);
  assert_non_null(strstr(k1, cg_jit_cpu(j2)));
  assert_non_null(strstr(k1, cg_jit_features(j2)));
  assert_non_null(strstr(k1, cg_llvm_version()));
  assert_false(n1 == n2 && memcmp(k1, k2, n1) == 0); /* opt level is part of the key */
  assert_false(n1 == n3 && memcmp(k1, k3, n1) == 0);
  free(k0), free(k1), free(k2), free(k3);
  cg_jit_destroy(j2);
  cg_jit_destroy(j3);
}

/* ---- processes ---------------------------------------------------------------------------------- */

/* Runs fn(arg) in a child process and returns its exit code (fn's result). The child never
   returns into cmocka. */
static int in_child(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(fn(arg));
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int child_hit(void *arg) {
  const char *dir = arg;
  cg_disk_cache *c = NULL;
  if (cg_disk_cache_open(dir, &c) != JIT_OK || !c) return 2;
  void *obj = NULL;
  size_t len = 0, n;
  int rc = 0;
  if (!get_str(c, "shared", &obj, &len)) rc = 3;
  else if (!payload_ok(obj, len) || len != payload_len(7)) rc = 4;
  free(obj);
  uint8_t *p = payload_make(8, &n);
  if (!rc && (!p || !put_str(c, "from-child", p, n))) rc = 5;
  free(p);
  cg_disk_cache_close(c);
  return rc;
}

static void test_second_process(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  size_t n;
  uint8_t *p = payload_make(7, &n);
  assert_true(put_str(c, "shared", p, n));
  assert_int_equal(in_child(child_hit, fx->dir), 0);
  void *obj = NULL;
  size_t len = 0;
  assert_true(get_str(c, "from-child", &obj, &len));
  assert_true(payload_ok(obj, len));
  assert_int_equal(len, payload_len(8));
  free(obj);
  free(p);
  cg_disk_cache_close(c);
}

typedef struct racer {
  const char *dir;
  uint64_t seed0;
} racer;

/* 200 rounds of put then get on one key shared with another process. Every get must hit (a
   rename leaves a whole entry in place at every moment) and hold one writer's whole payload. */
static int child_race(void *arg) {
  const racer *r = arg;
  cg_disk_cache *c = NULL;
  if (cg_disk_cache_open(r->dir, &c) != JIT_OK || !c) return 2;
  int bad = 0;
  for (int i = 0; i < 200 && bad < 100; i++) {
    size_t n, len = 0;
    uint8_t *p = payload_make(r->seed0 + (uint64_t)i, &n);
    void *obj = NULL;
    if (!p || !put_str(c, "raced", p, n)) bad++;
    if (!get_str(c, "raced", &obj, &len) || !payload_ok(obj, len)) bad++;
    free(obj);
    free(p);
  }
  cg_disk_cache_close(c);
  return bad;
}

static void test_racing_processes(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK); /* creates the dir first */
  racer r[2] = {{fx->dir, 1000}, {fx->dir, 5000}};
  fflush(NULL);
  pid_t pids[2];
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) _exit(child_race(&r[i]));
  }
  /* Meanwhile the parent reads until both are done: any hit must be one writer's whole payload. */
  int parent_bad = 0, parent_hits = 0, reads = 0, running = 2;
  while (running > 0) {
    void *obj = NULL;
    size_t len = 0;
    reads++;
    if (get_str(c, "raced", &obj, &len)) {
      parent_hits++;
      if (!payload_ok(obj, len)) parent_bad++;
    }
    free(obj);
    for (int i = 0; i < 2; i++) {
      int status = 0;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      assert_true(WIFEXITED(status));
      assert_int_equal(WEXITSTATUS(status), 0);
      pids[i] = 0;
      running--;
    }
  }
  assert_int_equal(parent_bad, 0);
  void *obj = NULL;
  size_t len = 0;
  assert_true(get_str(c, "raced", &obj, &len));
  assert_true(payload_ok(obj, len));
  uint64_t seed;
  memcpy(&seed, obj, 8);
  assert_true(seed == 1199 || seed == 5199); /* the last put of one of them */
  free(obj);
  print_message("[ info ] the parent read %d whole entries (of %d reads) while two processes raced\n",
                parent_hits, reads);
  cg_disk_cache_close(c);
}

/* ---- damaged entries ---------------------------------------------------------------------------- */

typedef enum {
  DMG_EMPTY,
  DMG_SHORT_HEADER,
  DMG_SHORT_PAYLOAD,
  DMG_EXTRA_BYTE,
  DMG_FLIP_PAYLOAD,
  DMG_FLIP_KEY,
  DMG_FLIP_SUM,
  DMG_MAGIC,
  DMG_VERSION,
  DMG_HUGE_LEN,
  DMG_OTHER_KEY, /* a valid entry of another key, renamed to this key's name */
  DMG_N
} damage;

static void patch(const char *path, long off, const void *bytes, size_t n) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

static void flip(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  int ch = fgetc(f);
  assert_true(ch != EOF);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  fputc(ch ^ 0x10, f);
  fclose(f);
}

static void apply(damage d, cg_disk_cache *c, const char *path, size_t n) {
  switch (d) {
  case DMG_EMPTY: assert_int_equal(truncate(path, 0), 0); break;
  case DMG_SHORT_HEADER: assert_int_equal(truncate(path, HDR - 1), 0); break;
  case DMG_SHORT_PAYLOAD: assert_int_equal(truncate(path, (off_t)(HDR + n - 1)), 0); break;
  case DMG_EXTRA_BYTE: {
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
    break;
  }
  case DMG_FLIP_PAYLOAD: flip(path, HDR + (long)n / 2); break;
  case DMG_FLIP_KEY: flip(path, 16 + 5); break;
  case DMG_FLIP_SUM: flip(path, 56 + 31); break;
  case DMG_MAGIC: patch(path, 0, "ELF\177", 4); break;
  case DMG_VERSION: patch(path, 8, "\x63", 1); break;
  case DMG_HUGE_LEN: patch(path, 48 + 7, "\x7f", 1); break;
  case DMG_OTHER_KEY: {
    size_t m;
    uint8_t *q = payload_make(42, &m);
    assert_true(put_str(c, "other", q, m));
    char other[256];
    entry_path(c, "other", other, sizeof other);
    assert_int_equal(rename(other, path), 0);
    free(q);
    break;
  }
  case DMG_N: break;
  }
}

static void test_damaged_entries(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  char path[256];
  entry_path(c, "victim", path, sizeof path);
  for (int d = 0; d < DMG_N; d++) {
    size_t n, len = 0;
    uint8_t *p = payload_make(100 + (uint64_t)d, &n);
    void *obj = NULL;
    assert_true(put_str(c, "victim", p, n));
    assert_true(get_str(c, "victim", &obj, &len));
    free(obj);
    apply((damage)d, c, path, n);
    obj = (void *)&obj;
    if (get_str(c, "victim", &obj, &len)) fail_msg("damage %d was loaded", d);
    assert_null(obj);
    assert_int_equal(len, 0);
    /* The next put (the recompile) replaces it. */
    assert_true(put_str(c, "victim", p, n));
    assert_true(get_str(c, "victim", &obj, &len));
    assert_int_equal(len, n);
    assert_memory_equal(obj, p, n);
    free(obj);
    free(p);
  }
  /* A FIFO (a blocking open would hang) and a symlink to a valid copy are misses, and are
     replaced by the next put. */
  char copy[300];
  snprintf(copy, sizeof copy, "%s.copy", path);
  assert_int_equal(rename(path, copy), 0);
  assert_int_equal(symlink(copy, path), 0);
  void *obj = NULL;
  size_t len = 0;
  assert_false(get_str(c, "victim", &obj, &len));
  assert_int_equal(unlink(path), 0);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_false(get_str(c, "victim", &obj, &len));
  assert_true(put_str(c, "victim", "xyz", 3));
  assert_true(get_str(c, "victim", &obj, &len));
  assert_int_equal(len, 3);
  free(obj);
  /* A directory where the entry should be: a miss, not a crash. */
  assert_int_equal(unlink(path), 0);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_false(get_str(c, "victim", &obj, &len));
  assert_int_equal(rmdir(path), 0);
  cg_disk_cache_close(c);
}

/* ---- unwritable directories and TJIT_DEBUG_CACHE ------------------------------------------------ */

typedef struct quiet_arg {
  const char *dir, *log;
  bool debug;
} quiet_arg;

/* Misses and failed puts in DIR with stderr sent to LOG. 0 when nothing was loaded or stored. */
static int child_unwritable(void *arg) {
  const quiet_arg *q = arg;
  if (!freopen(q->log, "w", stderr)) return 2;
  if (q->debug) setenv("TJIT_DEBUG_CACHE", "1", 1);
  else unsetenv("TJIT_DEBUG_CACHE");
  cg_disk_cache *c = NULL;
  if (cg_disk_cache_open(q->dir, &c) != JIT_OK || !c) return 3;
  void *obj = NULL;
  size_t len = 0;
  int rc = 0;
  if (put_str(c, "k", "object", 6)) rc = 4;
  if (get_str(c, "k", &obj, &len)) rc = 5;
  free(obj);
  cg_disk_cache_close(c);
  fflush(stderr); /* the child leaves through _exit, which flushes nothing */
  return rc;
}

static long log_size(const char *log, const char *needle) {
  FILE *f = fopen(log, "r");
  if (!f) return -1;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  if (needle && !strstr(buf, needle)) return -2;
  return (long)n;
}

/* Old entries still hit in a read-only dir, puts fail quietly, and an unreadable dir misses. */
static int child_read_only(void *arg) {
  const char *dir = arg;
  if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 2;
  cg_disk_cache *c = NULL;
  if (cg_disk_cache_open(dir, &c) != JIT_OK || !c) return 3;
  size_t n, len = 0;
  uint8_t *p = payload_make(3, &n);
  void *obj = NULL;
  int rc = 0;
  if (!p || !put_str(c, "old", p, n)) rc = 4;
  else if (chmod(dir, 0500) != 0) rc = 5;
  else if (!get_str(c, "old", &obj, &len) || !payload_ok(obj, len)) rc = 6;
  else if (put_str(c, "new", p, n)) rc = 7;
  else if (chmod(dir, 0000) != 0) rc = 8;
  else if (get_str(c, "old", &obj, &len)) rc = 9;
  (void)chmod(dir, 0700);
  free(obj);
  free(p);
  cg_disk_cache_close(c);
  return rc;
}

static void test_unwritable(void **state) {
  fixture *fx = *state;
  /* A cache "directory" below a regular file cannot exist, even for root. */
  char file[128], dir[160], log[128];
  snprintf(file, sizeof file, "%s/plain", fx->root);
  snprintf(dir, sizeof dir, "%s/plain/cache", fx->root);
  snprintf(log, sizeof log, "%s/stderr.txt", fx->root);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  quiet_arg q = {dir, log, false};
  assert_int_equal(in_child(child_unwritable, &q), 0);
  assert_int_equal(log_size(log, NULL), 0); /* the library prints nothing unless asked */
  q.debug = true;
  assert_int_equal(in_child(child_unwritable, &q), 0);
  assert_true(log_size(log, "tjit cache: cannot create") > 0);
  assert_true(log_size(log, "tjit cache: put") > 0);

  /* A read-only directory, in a child that is not root (permission bits do not bind root). */
  if (geteuid() == 0) {
    const char *below[3] = {"", "/a", "/a/b"};
    for (int i = 0; i < 3; i++) {
      char sub[160];
      snprintf(sub, sizeof sub, "%s%s", fx->root, below[i]);
      if (i) assert_int_equal(mkdir(sub, 0700), 0);
      assert_int_equal(chown(sub, 65534, 65534), 0);
    }
  }
  assert_int_equal(in_child(child_read_only, fx->dir), 0);
}

/* ---- eviction ----------------------------------------------------------------------------------- */

static void set_age(cg_disk_cache *c, const char *key, time_t age) {
  char path[256];
  entry_path(c, key, path, sizeof path);
  struct timespec ts[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static bool present(cg_disk_cache *c, const char *key) {
  char path[256];
  entry_path(c, key, path, sizeof path);
  return access(path, F_OK) == 0;
}

static void test_eviction(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  cg_disk_cache_set_limit(c, 0);
  uint8_t obj[1000];
  memset(obj, 5, sizeof obj);
  const size_t entry = HDR + sizeof obj;
  char key[8];
  for (int i = 0; i < 6; i++) {
    snprintf(key, sizeof key, "e%d", i);
    assert_true(put_str(c, key, obj, sizeof obj));
    set_age(c, key, 1000 - i * 10); /* e0 oldest */
  }
  /* Files that are not entries: a stale and a fresh temp file, and a stranger. */
  char path[256];
  const char *names[3] = {".tmp-stale1", ".tmp-fresh1", "README"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", fx->dir, names[i]);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/.tmp-stale1", fx->dir);
  struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
  /* A hit makes e0 the most recently used. */
  void *got = NULL;
  size_t len = 0;
  assert_true(get_str(c, "e0", &got, &len));
  free(got);
  /* Room for 5 entries: the 7th put evicts down to 90%, i.e. 4 entries: e1, e2, e3 go. */
  cg_disk_cache_set_limit(c, 5 * entry + 100);
  assert_true(put_str(c, "e6", obj, sizeof obj));
  assert_true(present(c, "e0"));
  assert_false(present(c, "e1"));
  assert_false(present(c, "e2"));
  assert_false(present(c, "e3"));
  assert_true(present(c, "e4"));
  assert_true(present(c, "e5"));
  assert_true(present(c, "e6"));
  snprintf(path, sizeof path, "%s/.tmp-stale1", fx->dir);
  assert_int_equal(access(path, F_OK), -1);
  snprintf(path, sizeof path, "%s/.tmp-fresh1", fx->dir);
  assert_int_equal(access(path, F_OK), 0);
  snprintf(path, sizeof path, "%s/README", fx->dir);
  assert_int_equal(access(path, F_OK), 0);
  /* Under the limit again: a put evicts nothing. */
  assert_true(put_str(c, "e7", obj, sizeof obj));
  assert_true(present(c, "e4"));
  assert_true(present(c, "e7"));
  cg_disk_cache_close(c);
}

/* ---- threads sharing one handle ----------------------------------------------------------------- */

typedef struct thr_arg {
  cg_disk_cache *c;
  int id, bad;
} thr_arg;

static void *thr_main(void *p) {
  thr_arg *a = p;
  char key[16];
  for (int i = 0; i < 40; i++) {
    /* Half the keys are shared by all threads, half are the thread's own. */
    if (i % 2) snprintf(key, sizeof key, "t%d-%d", a->id, i);
    else snprintf(key, sizeof key, "shared-%d", i % 4);
    size_t n, len = 0;
    uint8_t *q = payload_make((uint64_t)(a->id * 1000 + i), &n);
    void *obj = NULL;
    if (!q || !put_str(a->c, key, q, n)) a->bad++;
    if (!get_str(a->c, key, &obj, &len) || !payload_ok(obj, len)) a->bad++;
    free(obj);
    free(q);
  }
  return NULL;
}

static void test_threads(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  cg_disk_cache_set_limit(c, 1u << 20); /* eviction runs concurrently with gets too */
  pthread_t t[4];
  thr_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (thr_arg){c, i, 0};
    assert_int_equal(pthread_create(&t[i], NULL, thr_main, &a[i]), 0);
  }
  int bad = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    bad += a[i].bad;
  }
  /* Eviction keeps at least 14 of the largest entries, so it never reaches one just written. */
  assert_int_equal(bad, 0);
  cg_disk_cache_close(c);
}

/* ---- end to end with LLVM ----------------------------------------------------------------------- */

/* int64_t answer(int64_t x) { return x * 6 + 0; } built afresh in its own context. */
static LLVMModuleRef build_answer(LLVMContextRef ctx) {
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("answer", ctx);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMValueRef fn = LLVMAddFunction(m, "answer", LLVMFunctionType(i64, &i64, 1, 0));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
  LLVMBuildRet(b, LLVMBuildMul(b, LLVMGetParam(fn, 0), LLVMConstInt(i64, 6, 0), "r"));
  LLVMDisposeBuilder(b);
  return m;
}

/* One "compile" as the executor does it: key from the unoptimized text, the cache, else LLVM. */
static void compile_cached(cg_disk_cache *c, bool expect_hit, char **key_out, size_t *key_len) {
  cg_jit *jit = NULL;
  assert_int_equal(cg_jit_create(2, &jit), JIT_OK);
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = build_answer(ctx);
  char *text = cg_module_text(m);
  assert_non_null(text);
  char *key = NULL;
  size_t klen = 0;
  assert_int_equal(cg_disk_cache_key(jit, text, &key, &klen), JIT_OK);
  free(text);
  void *obj = NULL;
  size_t len = 0;
  bool hit = cg_disk_cache_get(c, key, klen, &obj, &len);
  assert_int_equal(hit, expect_hit);
  if (!hit) {
    assert_int_equal(cg_optimize(jit, m), JIT_OK);
    assert_int_equal(cg_emit_object(jit, m, &obj, &len), JIT_OK);
    assert_true(cg_disk_cache_put(c, key, klen, obj, len));
  }
  cg_dylib *lib = NULL;
  void *fp = NULL;
  assert_int_equal(cg_add_object(jit, obj, len, &lib), JIT_OK);
  assert_int_equal(cg_lookup(lib, "answer", &fp), JIT_OK);
  assert_int_equal(((int64_t(*)(int64_t))(uintptr_t)fp)(7), 42);
  free(obj);
  cg_dylib_free(lib);
  LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
  cg_jit_destroy(jit);
  *key_out = key;
  *key_len = klen;
}

static int child_llvm_hit(void *arg) {
  /* cmocka asserts in the child would longjmp into the parent's copy of the runner; the child
     only checks that a fresh process finds the entry and loads it. */
  const char *dir = arg;
  cg_disk_cache *c = NULL;
  cg_jit *jit = NULL;
  if (cg_disk_cache_open(dir, &c) != JIT_OK || cg_jit_create(2, &jit) != JIT_OK) return 2;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = build_answer(ctx);
  char *text = cg_module_text(m), *key = NULL;
  size_t klen = 0, len = 0;
  void *obj = NULL, *fp = NULL;
  cg_dylib *lib = NULL;
  int rc = 0;
  if (!text || cg_disk_cache_key(jit, text, &key, &klen) != JIT_OK) rc = 3;
  else if (!cg_disk_cache_get(c, key, klen, &obj, &len)) rc = 4;
  else if (cg_add_object(jit, obj, len, &lib) != JIT_OK || cg_lookup(lib, "answer", &fp) != JIT_OK) rc = 5;
  else if (((int64_t(*)(int64_t))(uintptr_t)fp)(-2) != -12) rc = 6;
  free(text), free(key), free(obj);
  cg_dylib_free(lib);
  LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
  cg_jit_destroy(jit);
  cg_disk_cache_close(c);
  return rc;
}

static void test_llvm_end_to_end(void **state) {
  fixture *fx = *state;
  cg_disk_cache *c = NULL;
  assert_int_equal(cg_disk_cache_open(fx->dir, &c), JIT_OK);
  char *k1 = NULL, *k2 = NULL;
  size_t n1 = 0, n2 = 0;
  compile_cached(c, false, &k1, &n1); /* cold: compiles and stores */
  compile_cached(c, true, &k2, &n2);  /* a fresh JIT and module: same key, loads the object */
  assert_int_equal(n1, n2);
  assert_memory_equal(k1, k2, n1);
  free(k2);
  assert_int_equal(in_child(child_llvm_hit, fx->dir), 0);
  /* A corrupt object behind a valid-looking entry is never reached: flip the payload. */
  char path[256];
  assert_true(cg_disk_cache_entry_path(c, k1, n1, path, sizeof path));
  flip(path, HDR + 20);
  compile_cached(c, false, &k2, &n2); /* miss, recompiles and replaces */
  free(k2);
  compile_cached(c, true, &k2, &n2);
  free(k1);
  free(k2);
  cg_disk_cache_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256),
      cmocka_unit_test(test_no_cache),
      cmocka_unit_test(test_key_text),
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_second_process, setup, teardown),
      cmocka_unit_test_setup_teardown(test_racing_processes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_entries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unwritable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_llvm_end_to_end, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
