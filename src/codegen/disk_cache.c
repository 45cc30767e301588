/* disk_cache.c: object files on disk keyed by SHA-256, written atomically (temp file, rename)
 * and validated fully on read; every failure is a miss, never a failed compile. */
#include "codegen/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/llvm_jit.h"
#include "runtime/error.h"

#define HDR_SIZE 88
#define MAGIC "TJITOBJ"          /* 8 bytes with its NUL */
#define TMP_PREFIX ".tmp-"
#define TMP_STALE_SEC 3600       /* a temp file this old belongs to a process that died */
/* The key text's prefix: every field that changes the machine code besides the module. */
#define KEY_FMT "tjit-objcache %d\ncpu %s\nfeatures %s\nvector-bits %d\nllvm %s\nopt %d\n\n"
#define EVICT_TARGET(limit) ((limit) / 10 * 9)

struct cg_disk_cache {
  char *dir;
  int dirfd;                  /* DIR, opened once: every entry is reached through it, so the
                                 directory checked for trust is the one read (-1: unusable) */
  bool debug;                 /* TJIT_DEBUG_CACHE=1: say why each miss and failed put happened */
  _Atomic uint64_t limit;     /* bytes; 0 = unbounded */
  pthread_mutex_t mu;         /* guards scanned, total and eviction */
  bool scanned;               /* total holds a scan of dir (done at the first put, not at open,
                                 so that a process that only hits never lists the directory) */
  uint64_t total;             /* bytes of entries in dir as this process knows them */
};

/* ---- SHA-256 (FIPS 180-4) ----------------------------------------------------------------------- */

typedef struct sha256 {
  uint32_t h[8];
  uint8_t buf[64];
  size_t nbuf;
  uint64_t nbytes;
} sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] +
                  w[i];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha_init(sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->nbuf = 0;
  s->nbytes = 0;
}

static void sha_update(sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->nbytes += n;
  if (s->nbuf) {
    size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += take;
    p += take;
    n -= take;
    if (s->nbuf < 64) return;
    sha_block(s->h, s->buf);
    s->nbuf = 0;
  }
  for (; n >= 64; p += 64, n -= 64) sha_block(s->h, p);
  memcpy(s->buf, p, n);
  s->nbuf = n;
}

static void sha_final(sha256 *s, uint8_t out[32]) {
  uint64_t bits = s->nbytes * 8;
  uint8_t pad[72] = {0x80};
  size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
  for (int i = 0; i < 8; i++) pad[npad + i] = (uint8_t)(bits >> (56 - 8 * i));
  sha_update(s, pad, npad + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(s->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)s->h[i];
  }
}

void cg_sha256(const void *data, size_t n, uint8_t out[32]) {
  sha256 s;
  sha_init(&s);
  sha_update(&s, data, n);
  sha_final(&s, out);
}

/* ---- helpers ------------------------------------------------------------------------------------ */

static void dbg(const cg_disk_cache *c, const char *fmt, ...) JIT_PRINTF(2, 3);
static void dbg(const cg_disk_cache *c, const char *fmt, ...) {
  if (!c->debug) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("tjit cache: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Header layout: magic[8] version:u32 hdr_size:u32 key[32] len:u64 sum[32]. */
static void header_encode(uint8_t h[HDR_SIZE], const uint8_t key[32], uint64_t len,
                          const uint8_t sum[32]) {
  memcpy(h, MAGIC, 8);
  put_u32(h + 8, CG_DISK_CACHE_FORMAT);
  put_u32(h + 12, HDR_SIZE);
  memcpy(h + 16, key, 32);
  put_u64(h + 48, len);
  memcpy(h + 56, sum, 32);
}

static void hex(const uint8_t hash[32], char out[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  out[64] = 0;
}

static bool is_entry_name(const char *name) {
  for (int i = 0; i < 64; i++) {
    char ch = name[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return name[64] == 0;
}

static bool read_full(int fd, void *buf, size_t n, off_t off) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return true;
}

static bool write_full(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

/* mkdir -p with mode 0700; true when DIR exists as a directory afterwards. */
static bool make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p) return false;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      free(p);
      return false;
    }
    *s = '/';
  }
  bool ok = mkdir(p, 0700) == 0 || errno == EEXIST;
  free(p);
  struct stat st;
  return ok && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- trust -------------------------------------------------------------------------------------
   The cache holds code this process will run, so it trusts only what no other user can have
   written: a directory owned by this user and writable by nobody else, holding regular files
   owned by this user and writable by nobody else (docs/CACHE.md). The checksum and key hash then
   catch corruption and mix-ups, not attackers: anyone who can write an entry can also write a
   matching checksum, which is why ownership is checked first. */

static bool dir_trusted(const cg_disk_cache *c) {
  struct stat st;
  if (c->dirfd < 0) return false; /* already said why at open */
  if (fstat(c->dirfd, &st) != 0) {
    dbg(c, "refusing %s: fstat: %s", c->dir, strerror(errno));
    return false;
  }
  if (st.st_uid != geteuid()) {
    dbg(c, "refusing %s: owned by uid %u, not by this user (uid %u); compiling instead", c->dir,
        (unsigned)st.st_uid, (unsigned)geteuid());
    return false;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    dbg(c, "refusing %s: writable by group or others (mode %03o); compiling instead", c->dir,
        (unsigned)(st.st_mode & 0777));
    return false;
  }
  return true;
}

/* Why an opened entry must not be loaded, or NULL when it may be. */
static const char *entry_untrusted(const struct stat *st) {
  if (!S_ISREG(st->st_mode)) return "not a regular file";
  if (st->st_uid != geteuid()) return "owned by another user (refused)";
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others (refused)";
  return NULL;
}

/* ---- open / key --------------------------------------------------------------------------------- */

jit_status cg_disk_cache_open(const char *dir, cg_disk_cache **out) {
  *out = NULL;
  if (!dir || !*dir) return JIT_OK;
  cg_disk_cache *c = calloc(1, sizeof *c);
  if (!c) return jit_error(JIT_ENOMEM, "disk cache: out of memory");
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--; /* "dir/" and "dir" name the same entries */
  c->dir = strndup(dir, n);
  if (!c->dir || pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c->dir);
    free(c);
    return jit_error(JIT_ENOMEM, "disk cache: out of memory");
  }
  const char *d = getenv("TJIT_DEBUG_CACHE");
  c->debug = d && *d && strcmp(d, "0") != 0;
  uint64_t limit = CG_DISK_CACHE_DEFAULT_LIMIT;
  const char *mb = getenv("TJIT_CACHE_MAX_MB");
  if (mb && *mb) {
    char *end;
    unsigned long long v = strtoull(mb, &end, 10);
    if (*end == 0 && v < (1ull << 40)) limit = (uint64_t)v << 20;
    else dbg(c, "ignoring TJIT_CACHE_MAX_MB=%s", mb);
  }
  atomic_store(&c->limit, limit);
  c->dirfd = -1;
  if (!make_dirs(c->dir))
    dbg(c, "cannot create %s: %s (every lookup will miss)", c->dir, strerror(errno));
  else if ((c->dirfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    dbg(c, "cannot open %s: %s (every lookup will miss)", c->dir, strerror(errno));
  else
    (void)dir_trusted(c); /* says at once, under TJIT_DEBUG_CACHE, when the dir is refused */
  *out = c;
  return JIT_OK;
}

void cg_disk_cache_close(cg_disk_cache *c) {
  if (!c) return;
  if (c->dirfd >= 0) close(c->dirfd);
  pthread_mutex_destroy(&c->mu);
  free(c->dir);
  free(c);
}

void cg_disk_cache_set_limit(cg_disk_cache *c, uint64_t bytes) {
  if (c) atomic_store(&c->limit, bytes);
}

jit_status cg_disk_cache_key(const cg_jit *jit, const char *module_text, char **key,
                             size_t *key_len) {
  *key = NULL;
  *key_len = 0;
  const char *cpu = jit ? cg_jit_cpu(jit) : "-", *feat = jit ? cg_jit_features(jit) : "-";
  const char *ver = jit ? cg_llvm_version() : "-";
  int opt = jit ? cg_jit_opt_level(jit) : -1;
  int vbits = jit ? cg_jit_target(jit)->vector_bytes * 8 : 0;
  int n = snprintf(NULL, 0, KEY_FMT, CG_DISK_CACHE_FORMAT, cpu, feat, vbits, ver, opt);
  size_t mlen = strlen(module_text);
  if (n < 0 || mlen > SIZE_MAX - (size_t)n - 1) return jit_error(JIT_ENOMEM, "disk cache: key too large");
  char *k = malloc((size_t)n + mlen + 1);
  if (!k) return jit_error(JIT_ENOMEM, "disk cache: out of memory");
  snprintf(k, (size_t)n + 1, KEY_FMT, CG_DISK_CACHE_FORMAT, cpu, feat, vbits, ver, opt);
  memcpy(k + n, module_text, mlen + 1);
  *key = k;
  *key_len = (size_t)n + mlen;
  return JIT_OK;
}

bool cg_disk_cache_entry_path(const cg_disk_cache *c, const char *key_text, size_t key_len,
                              char *buf, size_t n) {
  if (!c) return false;
  uint8_t h[32];
  char name[65];
  cg_sha256(key_text, key_len, h);
  hex(h, name);
  int w = snprintf(buf, n, "%s/%s", c->dir, name);
  return w > 0 && (size_t)w < n;
}

/* ---- get ---------------------------------------------------------------------------------------- */

bool cg_disk_cache_get(cg_disk_cache *c, const char *key_text, size_t key_len, void **obj,
                       size_t *len) {
  *obj = NULL;
  *len = 0;
  if (!c) return false;
  uint8_t key[32], hdr[HDR_SIZE], sum[32];
  char name[65];
  cg_sha256(key_text, key_len, key);
  hex(key, name);
  void *data = NULL;
  int fd = -1;
  const char *why = NULL;
  if (!dir_trusted(c)) {
    dbg(c, "miss %s: no usable cache directory", name);
    return false;
  }
  /* No symlinks (entries are only ever our own files) and no blocking on a FIFO planted there.
     Everything below reads this one descriptor: what was checked is what gets loaded. */
  fd = openat(c->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) dbg(c, "miss %s: open: %s", name, strerror(errno));
    else dbg(c, "miss %s", name);
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    why = "fstat failed";
    goto miss;
  }
  if ((why = entry_untrusted(&st))) goto miss;
  if ((uint64_t)st.st_size < HDR_SIZE || !read_full(fd, hdr, HDR_SIZE, 0)) {
    why = "truncated header";
    goto miss;
  }
  uint64_t plen = get_u64(hdr + 48);
  if (memcmp(hdr, MAGIC, 8) != 0) why = "bad magic";
  else if (get_u32(hdr + 8) != CG_DISK_CACHE_FORMAT) why = "other format version";
  else if (get_u32(hdr + 12) != HDR_SIZE) why = "bad header size";
  else if (memcmp(hdr + 16, key, 32) != 0) why = "key hash mismatch";
  else if (plen == 0 || plen > CG_DISK_CACHE_MAX_OBJECT) why = "bad payload length";
  else if (plen != (uint64_t)st.st_size - HDR_SIZE) why = "payload length != file size - header";
  if (why) goto miss;
  data = malloc((size_t)plen);
  if (!data) {
    why = "out of memory";
    goto miss;
  }
  if (!read_full(fd, data, (size_t)plen, HDR_SIZE)) {
    why = "short read";
    goto miss;
  }
  /* The checksum is of the bytes in memory, the ones handed to LLVM, not of the file. */
  cg_sha256(data, (size_t)plen, sum);
  if (memcmp(sum, hdr + 56, 32) != 0) {
    why = "payload checksum mismatch";
    goto miss;
  }
  (void)futimens(fd, NULL); /* mark recently used, for eviction; failure only skews the order */
  close(fd);
  dbg(c, "hit %s (%llu bytes)", name, (unsigned long long)plen);
  *obj = data;
  *len = (size_t)plen;
  return true;
miss:
  dbg(c, "miss %s: %s (the next put replaces it)", name, why);
out:
  if (fd >= 0) close(fd);
  free(data);
  return false;
}

/* ---- eviction ----------------------------------------------------------------------------------- */

typedef struct entry {
  char name[65];
  uint64_t bytes;
  struct timespec mtime;
} entry;

static int by_mtime(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Lists dir's entries into *es (sorted oldest first) and their total; removes stale temp files.
   Called with c->mu held. False when the directory cannot be listed or memory runs out. */
static bool scan(cg_disk_cache *c, entry **es, size_t *n, uint64_t *total) {
  *es = NULL;
  *n = 0;
  *total = 0;
  int fd = dup(c->dirfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    dbg(c, "cannot list %s: %s", c->dir, strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  rewinddir(d); /* the duplicate shares its offset with every earlier listing */
  size_t cap = 0;
  bool ok = true;
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    bool tmp = strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
    if (!tmp && !is_entry_name(de->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (tmp) {
      if (now - st.st_mtime > TMP_STALE_SEC) (void)unlinkat(dirfd(d), de->d_name, 0);
      continue;
    }
    if (*n == cap) {
      size_t ncap = cap ? 2 * cap : 64;
      entry *g = realloc(*es, ncap * sizeof *g);
      if (!g) {
        ok = false;
        break;
      }
      *es = g;
      cap = ncap;
    }
    entry *e = &(*es)[(*n)++];
    memcpy(e->name, de->d_name, 65);
    e->bytes = (uint64_t)st.st_size;
    e->mtime = st.st_mtim;
    *total += e->bytes;
  }
  closedir(d);
  if (!ok) {
    free(*es);
    *es = NULL;
    *n = 0;
    return false;
  }
  if (*n > 1) qsort(*es, *n, sizeof **es, by_mtime);
  return true;
}

/* Accounts for ADDED new bytes and evicts the oldest entries if the bound is exceeded. */
static void account(cg_disk_cache *c, uint64_t added) {
  uint64_t limit = atomic_load(&c->limit);
  pthread_mutex_lock(&c->mu);
  entry *es = NULL;
  size_t n = 0;
  if (!c->scanned) {
    /* The first put of this process: learn what is already there (our entry included). */
    if (scan(c, &es, &n, &c->total)) c->scanned = true;
    free(es);
    es = NULL;
  } else {
    c->total += added;
  }
  if (c->scanned && limit && c->total > limit) {
    uint64_t total = 0;
    if (scan(c, &es, &n, &total)) {
      size_t removed = 0;
      for (size_t i = 0; i < n && total > EVICT_TARGET(limit); i++) {
        if (unlinkat(c->dirfd, es[i].name, 0) == 0) {
          total -= es[i].bytes;
          removed++;
        }
      }
      dbg(c, "evicted %zu entries, %llu bytes left (limit %llu)", removed,
          (unsigned long long)total, (unsigned long long)limit);
      c->total = total;
    }
    free(es);
  }
  pthread_mutex_unlock(&c->mu);
}

/* ---- put ---------------------------------------------------------------------------------------- */

/* Creates a fresh temp file in the cache directory, 0600, named into tmp; -1 on failure. The
   name needs only be unique among live writers: O_EXCL refuses one that exists. */
static int tmp_create(cg_disk_cache *c, char tmp[64]) {
  static _Atomic uint64_t seq;
  for (int attempt = 0; attempt < 16; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tmp, 64, TMP_PREFIX "%ld-%llu-%09ld", (long)getpid(),
             (unsigned long long)atomic_fetch_add(&seq, 1), (long)ts.tv_nsec);
    int fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

bool cg_disk_cache_put(cg_disk_cache *c, const char *key_text, size_t key_len, const void *obj,
                       size_t len) {
  if (!c) return false;
  if (!obj || len == 0 || len > CG_DISK_CACHE_MAX_OBJECT) {
    dbg(c, "not storing an object of %zu bytes", len);
    return false;
  }
  /* Code stored where others can write could be swapped before it is loaded back. */
  uint8_t key[32], sum[32], hdr[HDR_SIZE];
  char name[65], tmp[64];
  cg_sha256(key_text, key_len, key);
  cg_sha256(obj, len, sum);
  hex(key, name);
  header_encode(hdr, key, len, sum);
  if (!dir_trusted(c)) {
    dbg(c, "put %s: not stored (no usable cache directory)", name);
    return false;
  }
  bool ok = false;
  int fd = tmp_create(c, tmp);
  if (fd < 0) {
    dbg(c, "put %s: cannot create a temp file in %s: %s", name, c->dir, strerror(errno));
    return false;
  }
  if (!write_full(fd, hdr, HDR_SIZE) || !write_full(fd, obj, len)) {
    dbg(c, "put %s: write: %s", name, strerror(errno));
    goto out;
  }
  /* No fsync: it cost a cold compile up to 40 ms per entry, and an entry torn by a crash before
     its data reached the disk fails the checksum on read, which is a miss (recompiled), not a
     wrong load. */
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    dbg(c, "put %s: close: %s", name, strerror(errno));
    goto out;
  }
  if (renameat(c->dirfd, tmp, c->dirfd, name) != 0) {
    dbg(c, "put %s: rename: %s", name, strerror(errno));
    goto out;
  }
  ok = true;
  dbg(c, "put %s (%zu bytes)", name, len);
out:
  if (fd >= 0) close(fd);
  if (!ok) (void)unlinkat(c->dirfd, tmp, 0);
  if (ok) account(c, HDR_SIZE + (uint64_t)len);
  return ok;
}
