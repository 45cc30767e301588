/* pool.c: the fork-join thread pool of pool.h. One job slot per pool (callers serialised by a
 * mutex); workers spin briefly for the next job, then sleep on a condition variable. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/error.h"
#include "runtime/pool.h"

/* How long a worker (or a waiting caller) polls before it sleeps. A futex wake-up costs ~70 µs on
   this kind of VM, so jobs less than this apart skip it; bounded so that an idle pool gives its
   core back quickly and two pools on two cores do not starve each other. Measured in time, not
   pause instructions, since a pause takes 10 to 140 cycles depending on the CPU. */
#ifndef SPIN_NS
#define SPIN_NS 50000
#endif

#define JOB_NTH_BITS 16 /* job word = seq << JOB_NTH_BITS | nth */

typedef struct worker {
  struct pool *p;
  int ith;      /* 1..n_threads-1 */
  pthread_t tid;
} worker;

struct pool {
  int n_threads;
  int n_started;            /* workers whose thread exists (all of them once created) */
  worker *workers;          /* n_threads - 1 entries; workers[i].ith = i + 1 */
  pthread_mutex_t run_mu;   /* the job slot: held by the one pool_run in progress */
  pthread_mutex_t mu;       /* pairs with wake and done; guards no data of its own */
  pthread_cond_t wake;      /* idle workers sleep here */
  pthread_cond_t done;      /* the job's caller sleeps here until pending is 0 */
  uint64_t seq;             /* jobs published so far; under run_mu */
  _Atomic uint64_t job;     /* latest job: seq << JOB_NTH_BITS | nth; 0 = none yet */
  pool_fn fn;               /* the latest job's body and argument: written only while no */
  void *arg;                /*   worker runs a job, read only by workers with ith < nth */
  _Atomic int pending;      /* workers that have not finished the current job */
  _Atomic int n_sleeping;   /* workers inside the wake wait (Dekker pair with job) */
  _Atomic int caller_sleeping; /* the caller is inside the done wait (pair with pending) */
  _Atomic bool stop;        /* pool_destroy: workers leave their loop */
  int inits;                /* which of run_mu, mu, wake, done were initialised (bits 0..3) */
};

/* The pool whose job this thread is running (a worker: its own pool, always): a nested pool_run
   on it would wait on the job slot its own job holds, so it runs inline instead. */
static _Thread_local const pool *running_in;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Polls ready(p) for up to SPIN_NS; true as soon as it holds. The clock is read every 16 polls. */
static bool spin_until(pool *p, bool (*ready)(pool *p, void *x), void *x) {
  int64_t deadline = 0;
  for (unsigned i = 0;; i++) {
    if (ready(p, x)) return true;
    if ((i & 15) == 0) {
      int64_t t = now_ns();
      if (deadline == 0) deadline = t + SPIN_NS;
      else if (t >= deadline) return false;
    }
    cpu_relax();
  }
}

static bool job_ready(pool *p, void *seen) {
  return atomic_load_explicit(&p->job, memory_order_acquire) != *(uint64_t *)seen ||
         atomic_load_explicit(&p->stop, memory_order_relaxed);
}

/* The job word after `seen`, or `seen` when the pool stops. */
static uint64_t wait_job(pool *p, uint64_t seen) {
  uint64_t j;
  if (spin_until(p, job_ready, &seen)) {
    j = atomic_load_explicit(&p->job, memory_order_acquire);
    return atomic_load_explicit(&p->stop, memory_order_relaxed) ? seen : j;
  }
  pthread_mutex_lock(&p->mu);
  /* Announced before the check (both seq_cst): a publisher that reads n_sleeping == 0 stored its
     job word before our check in the total order, so the check sees it. */
  atomic_fetch_add(&p->n_sleeping, 1);
  while ((j = atomic_load(&p->job)) == seen && !atomic_load(&p->stop))
    pthread_cond_wait(&p->wake, &p->mu);
  atomic_fetch_sub(&p->n_sleeping, 1);
  pthread_mutex_unlock(&p->mu);
  return j;
}

static void *worker_main(void *wp) {
  worker *w = wp;
  pool *p = w->p;
  running_in = p;
  uint64_t seen = 0;
  for (;;) {
    uint64_t j = wait_job(p, seen);
    if (j == seen) break;
    seen = j;
    int nth = (int)(j & ((1u << JOB_NTH_BITS) - 1));
    if (w->ith >= nth) continue; /* not needed: the job may be replaced under us, read nothing */
    p->fn(p->arg, w->ith, nth);
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

static bool job_done(pool *p, void *unused) {
  return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

static void wait_done(pool *p) {
  if (spin_until(p, job_done, NULL)) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeping, 1);
  while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done, &p->mu);
  atomic_store(&p->caller_sleeping, 0);
  pthread_mutex_unlock(&p->mu);
}

void pool_run(pool *p, pool_fn fn, void *arg, int nth) {
  if (nth > p->n_threads) nth = p->n_threads;
  if (nth <= 1) {
    fn(arg, 0, 1);
    return;
  }
  if (running_in == p) {
    for (int i = 0; i < nth; i++) fn(arg, i, nth);
    return;
  }
  pthread_mutex_lock(&p->run_mu);
  p->fn = fn;
  p->arg = arg;
  atomic_store_explicit(&p->pending, nth - 1, memory_order_relaxed);
  p->seq++;
  atomic_store(&p->job, p->seq << JOB_NTH_BITS | (uint64_t)nth); /* releases fn, arg, pending */
  if (atomic_load(&p->n_sleeping) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
  }
  const pool *outer = running_in;
  running_in = p;
  fn(arg, 0, nth);
  running_in = outer;
  wait_done(p);
  pthread_mutex_unlock(&p->run_mu);
}

int pool_n_threads(const pool *p) { return p ? p->n_threads : 0; }

/* Stops and joins the started workers, then frees everything that was initialised. */
void pool_destroy(pool *p) {
  if (!p) return;
  if (p->n_started > 0) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].tid, NULL);
  }
  if (p->inits & 8) pthread_cond_destroy(&p->done);
  if (p->inits & 4) pthread_cond_destroy(&p->wake);
  if (p->inits & 2) pthread_mutex_destroy(&p->mu);
  if (p->inits & 1) pthread_mutex_destroy(&p->run_mu);
  free(p->workers);
  free(p);
}

jit_status pool_create(int n_threads, pool **out) {
  jit_status st = JIT_OK;
  if (!out) return jit_error(JIT_EINVAL, "pool_create: out is NULL");
  *out = NULL;
  if (n_threads < 1 || n_threads > POOL_MAX_THREADS)
    return jit_error(JIT_EINVAL, "pool_create: n_threads is %d (must be 1..%d)", n_threads,
                     POOL_MAX_THREADS);
  pool *p = calloc(1, sizeof *p);
  if (!p) return jit_error(JIT_ENOMEM, "pool_create: out of memory");
  p->n_threads = n_threads;
  atomic_init(&p->job, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->n_sleeping, 0);
  atomic_init(&p->caller_sleeping, 0);
  atomic_init(&p->stop, false);
  if (pthread_mutex_init(&p->run_mu, NULL) != 0) goto no_sync;
  p->inits |= 1;
  if (pthread_mutex_init(&p->mu, NULL) != 0) goto no_sync;
  p->inits |= 2;
  if (pthread_cond_init(&p->wake, NULL) != 0) goto no_sync;
  p->inits |= 4;
  if (pthread_cond_init(&p->done, NULL) != 0) goto no_sync;
  p->inits |= 8;
  if (n_threads > 1) {
    p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
    if (!p->workers) TRY(jit_error(JIT_ENOMEM, "pool_create: out of memory"));
    /* Workers start with every signal blocked, so that the host's handlers run on its threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = 0;
    for (int i = 0; i < n_threads - 1 && err == 0; i++) {
      p->workers[i].p = p;
      p->workers[i].ith = i + 1;
      err = pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]);
      if (err == 0) p->n_started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
      TRY(jit_error(JIT_EINTERNAL, "pool_create: cannot start worker %d of %d (error %d)",
                    p->n_started + 1, n_threads - 1, err));
  }
  *out = p;
  return JIT_OK;
no_sync:
  st = jit_error(JIT_EINTERNAL, "pool_create: cannot create a mutex or condition variable");
fail:
  pool_destroy(p);
  return st;
}

void pool_chunks_init(pool_chunks *c, int64_t begin, int64_t end, int64_t chunk) {
  atomic_init(&c->next, begin);
  c->end = end;
  c->chunk = chunk < 1 ? 1 : chunk;
}

bool pool_chunk_next(pool_chunks *c, int64_t *lo, int64_t *hi) {
  /* The early check keeps `next` from growing on every call once the range is exhausted. */
  if (atomic_load_explicit(&c->next, memory_order_relaxed) >= c->end) return false;
  int64_t l = atomic_fetch_add_explicit(&c->next, c->chunk, memory_order_relaxed);
  if (l >= c->end) return false;
  *lo = l;
  *hi = c->end - l < c->chunk ? c->end : l + c->chunk;
  return true;
}
