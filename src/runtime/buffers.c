/* buffers.c: size-classed reuse of array buffers. Classes are powers of two up to 2 MiB and
 * multiples of 2 MiB above, so a block fits any request of its class; big blocks are 2 MiB
 * aligned and advised to transparent huge pages (unless $TJIT_HUGE_PAGES=0). The cache is
 * bounded; sanitizer builds cache nothing, so that use-after-free stays visible. */
#include "runtime/buffers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/error.h"

enum { POOL_SLOTS = 64 };
#define HUGE_PAGE ((size_t)2 << 20)
#define SMALL_ALIGN ((size_t)64)
#define POOL_MAX_CACHED ((size_t)1 << 30) /* cached bytes kept at most */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POOL_CACHES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define POOL_CACHES 0
#endif
#endif
#ifndef POOL_CACHES
#define POOL_CACHES 1
#endif

typedef struct slot {
  void *block;
  size_t cap;
  uint64_t stamp; /* when it was given back: the oldest goes first when the cache is full */
} slot;

struct buf_pool {
  atomic_int refs;
  pthread_mutex_t lock;
  slot slots[POOL_SLOTS];
  int n_slots;
  size_t cached;    /* bytes in slots */
  uint64_t clock;
};

jit_status buf_pool_create(buf_pool **out) {
  buf_pool *p = calloc(1, sizeof *p);
  if (!p || pthread_mutex_init(&p->lock, NULL) != 0) {
    free(p);
    return jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory");
  }
  atomic_init(&p->refs, 1);
  *out = p;
  return JIT_OK;
}

void buf_pool_retain(buf_pool *p) { atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed); }

void buf_pool_release(buf_pool *p) {
  if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
  for (int i = 0; i < p->n_slots; i++) free(p->slots[i].block);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

/* The class size of a request; 0 when rounding would overflow. */
static size_t class_of(size_t bytes) {
  if (bytes > SIZE_MAX - HUGE_PAGE) return 0;
  if (bytes >= HUGE_PAGE) return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
  size_t c = SMALL_ALIGN;
  while (c < bytes) c <<= 1;
  return c;
}

/* Advises the pages of [p, p + n) to transparent huge pages (MADV_HUGEPAGE; p page-aligned),
   unless $TJIT_HUGE_PAGES is 0. Warm calls then stream through fewer TLB entries (W1-W3 3-11%
   faster on the Emerald Rapids VM); but where the kernel's THP defrag setting is `madvise`
   (Debian's default) the first touch of advised memory may wait for the kernel to compact
   memory: a first call there took 13-165 ms for W3's 64 MiB output, 25-29 ms unadvised. */
static void advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
  const char *want = getenv("TJIT_HUGE_PAGES"); /* read each time: a pool miss is rare */
  if (!want || strcmp(want, "0") != 0) madvise(p, n, MADV_HUGEPAGE); /* failure is harmless */
#else
  (void)p, (void)n;
#endif
}

static void *fresh_block(size_t cap) {
  void *b = NULL;
  if (posix_memalign(&b, cap >= HUGE_PAGE ? HUGE_PAGE : SMALL_ALIGN, cap) != 0) return NULL;
  if (cap >= HUGE_PAGE) advise_huge(b, cap);
  return b;
}

void *buf_pool_get(buf_pool *p, size_t bytes, size_t *cap) {
  size_t c = class_of(bytes ? bytes : 1);
  if (c == 0) return NULL;
  *cap = c;
  if (POOL_CACHES) {
    pthread_mutex_lock(&p->lock);
    for (int i = p->n_slots; i-- > 0;) {
      if (p->slots[i].cap != c) continue;
      void *b = p->slots[i].block;
      p->cached -= c;
      p->slots[i] = p->slots[--p->n_slots];
      pthread_mutex_unlock(&p->lock);
      return b;
    }
    pthread_mutex_unlock(&p->lock);
  }
  return fresh_block(c);
}

void buf_pool_put(buf_pool *p, void *block, size_t cap) {
  if (!block) return;
  if (!POOL_CACHES || cap > POOL_MAX_CACHED) {
    free(block);
    return;
  }
  void *evicted[POOL_SLOTS];
  int n_evicted = 0;
  pthread_mutex_lock(&p->lock);
  /* Make room: drop the oldest blocks until this one fits in both bounds. */
  while (p->n_slots == POOL_SLOTS || p->cached + cap > POOL_MAX_CACHED) {
    int oldest = 0;
    for (int i = 1; i < p->n_slots; i++)
      if (p->slots[i].stamp < p->slots[oldest].stamp) oldest = i;
    evicted[n_evicted++] = p->slots[oldest].block;
    p->cached -= p->slots[oldest].cap;
    p->slots[oldest] = p->slots[--p->n_slots];
  }
  p->slots[p->n_slots++] = (slot){.block = block, .cap = cap, .stamp = ++p->clock};
  p->cached += cap;
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < n_evicted; i++) free(evicted[i]); /* outside the lock: free may munmap */
}

bool buf_pool_caches(void) { return POOL_CACHES; }
