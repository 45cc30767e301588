/* fault_inject.c: the counter behind fault_inject.h (built only with TJIT_FAULT_INJECTION). One
 * process-wide count, so that a harness failing allocation 1, 2, 3, ... of a program in turn sees
 * the same numbering on every run of a single-threaded program. $TJIT_TEST_FAIL_ALLOC=N fails the
 * N-th allocation of the process (until a harness re-arms). */
#include "runtime/fault_inject.h"

#ifdef TJIT_FAULT_INJECTION
/* the header was force-included before this file's first line: the real functions from here on */
#undef malloc
#undef calloc
#undef realloc
#undef strdup
#undef strndup
#undef posix_memalign
#undef open_memstream
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

static atomic_long counted;   /* allocations since arming */
static atomic_long fail_at;   /* the one to fail; 0: none */
static atomic_bool fired;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* the distinct call sites (return addresses into the library) counted so far */
enum { MAX_SITES = 8192 };
static const void *sites[MAX_SITES];
static size_t n_sites;
static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;

static void note_site(const void *site) {
  pthread_mutex_lock(&sites_mu);
  size_t i = 0;
  while (i < n_sites && sites[i] != site) i++;
  if (i == n_sites && n_sites < MAX_SITES) sites[n_sites++] = site;
  pthread_mutex_unlock(&sites_mu);
}

size_t tjit_fault_sites(void) {
  pthread_mutex_lock(&sites_mu);
  size_t n = n_sites;
  pthread_mutex_unlock(&sites_mu);
  return n;
}

static void read_env(void) {
  const char *e = getenv("TJIT_TEST_FAIL_ALLOC");
  if (e && *e) atomic_store(&fail_at, atol(e));
}

void tjit_fault_arm(long n) {
  pthread_once(&env_once, read_env); /* so that the environment cannot override an arm later */
  atomic_store(&counted, 0);
  atomic_store(&fired, false);
  atomic_store(&fail_at, n);
}

long tjit_fault_count(void) { return atomic_load(&counted); }
bool tjit_fault_fired(void) { return atomic_load(&fired); }

/* true when this allocation, made at site, is the one to fail */
static bool should_fail(const void *site) {
  pthread_once(&env_once, read_env);
  note_site(site);
  long k = atomic_fetch_add(&counted, 1) + 1;
  if (k != atomic_load(&fail_at)) return false;
  atomic_store(&fired, true);
  return true;
}

/* (in a wrapper: its caller, the library's call site, is the site) */
#define FAIL_HERE() should_fail(__builtin_return_address(0))

void *tjit_fault_malloc(size_t n) { return FAIL_HERE() ? NULL : malloc(n); }
void *tjit_fault_calloc(size_t n, size_t size) { return FAIL_HERE() ? NULL : calloc(n, size); }
void *tjit_fault_realloc(void *p, size_t n) { return FAIL_HERE() ? NULL : realloc(p, n); }
char *tjit_fault_strdup(const char *s) { return FAIL_HERE() ? NULL : strdup(s); }
char *tjit_fault_strndup(const char *s, size_t n) { return FAIL_HERE() ? NULL : strndup(s, n); }

int tjit_fault_posix_memalign(void **p, size_t align, size_t n) {
  return FAIL_HERE() ? ENOMEM : posix_memalign(p, align, n);
}

FILE *tjit_fault_open_memstream(char **buf, size_t *len) {
  if (FAIL_HERE()) {
    errno = ENOMEM;
    return NULL;
  }
  return open_memstream(buf, len);
}
#endif
