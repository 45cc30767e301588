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

/* true when this allocation is the one to fail */
static bool should_fail(void) {
  pthread_once(&env_once, read_env);
  long k = atomic_fetch_add(&counted, 1) + 1;
  if (k != atomic_load(&fail_at)) return false;
  atomic_store(&fired, true);
  return true;
}

void *tjit_fault_malloc(size_t n) { return should_fail() ? NULL : malloc(n); }
void *tjit_fault_calloc(size_t n, size_t size) { return should_fail() ? NULL : calloc(n, size); }
void *tjit_fault_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n); }
char *tjit_fault_strdup(const char *s) { return should_fail() ? NULL : strdup(s); }
char *tjit_fault_strndup(const char *s, size_t n) { return should_fail() ? NULL : strndup(s, n); }

int tjit_fault_posix_memalign(void **p, size_t align, size_t n) {
  return should_fail() ? ENOMEM : posix_memalign(p, align, n);
}

FILE *tjit_fault_open_memstream(char **buf, size_t *len) {
  if (should_fail()) {
    errno = ENOMEM;
    return NULL;
  }
  return open_memstream(buf, len);
}
#endif
