/* distributed.c: a context spanning MPI ranks: joining the job (MPI initialized here unless the
 * program did it, finalized with the last context that did), global device ids, and the
 * agreement that makes every jit_call collective: before it runs, the ranks trade their local
 * status and a hash of the program each is about to run (a rank that failed, or runs another
 * program, is named before any collective starts); after, they trade the outcome. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/runtime.h"
#include "runtime/transport.h"
#ifdef TJIT_MPI
#include "runtime/mpi_link.h"
#endif

int jit_process_index(const jit_ctx *ctx) { return ctx ? ctx->process_index : 0; }
int jit_process_count(const jit_ctx *ctx) { return ctx ? ctx->process_count : 1; }

bool mesh_all_local(const jit_mesh *m) {
  for (int i = 0; i < m->n_devices; i++)
    if (!ctx_device_local(m->ctx, m->device_ids[i])) return false;
  return true;
}

int mesh_process(const jit_mesh *m) {
  int p = m->device_ids[0] / m->ctx->n_local_devices;
  for (int i = 1; i < m->n_devices; i++)
    if (m->device_ids[i] / m->ctx->n_local_devices != p) return -1;
  return p;
}

jit_status mesh_read_access(const jit_mesh *m, const char *who, bool *collective) {
  int p = m->ctx ? mesh_process(m) : 0;
  *collective = p < 0;
  if (p >= 0 && p != m->ctx->process_index)
    return jit_error(JIT_EINVAL, "%s: the array lives on devices of process %d only: only that "
                     "process can read it (an array on several processes' devices is read by all "
                     "of them together)", who, p);
  return JIT_OK;
}

static bool env_distributed(void) {
  const char *s = getenv("TJIT_DISTRIBUTED");
  return s && strcmp(s, "1") == 0;
}

uint64_t dist_program_hash(const ir_func *f) {
  char *buf = NULL;
  size_t len = 0;
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  FILE *m = open_memstream(&buf, &len);
  if (!m) return 0;
  jit_status st = ir_print(f, m);
  fclose(m);
  for (size_t i = 0; st == JIT_OK && buf && i < len; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
  free(buf);
  return st == JIT_OK ? h : 0;
}

#ifndef TJIT_MPI
jit_status dist_open(jit_ctx *ctx, int distributed) {
  ctx->n_local_devices = ctx->n_devices;
  ctx->process_index = 0;
  ctx->process_count = 1;
  if (distributed || env_distributed())
    return jit_error(JIT_EUNSUPPORTED, "jit_ctx_create: a distributed context needs tjit built "
                     "with MPI (-DTJIT_MPI=ON, Debian: libopenmpi-dev openmpi-bin)");
  return JIT_OK;
}
void dist_close(jit_ctx *ctx) { (void)ctx; }
jit_status dist_call_begin(jit_ctx *ctx, const char *fn_name, jit_status st, uint64_t key,
                           uint64_t program) {
  (void)ctx, (void)fn_name, (void)key, (void)program;
  return st;
}
jit_status dist_call_end(jit_ctx *ctx, const char *fn_name, jit_status st) {
  (void)ctx, (void)fn_name;
  return st;
}
void dist_report_failure(jit_ctx *ctx, jit_status st) { (void)ctx, (void)st; }
uint64_t dist_bytes_sent(const jit_ctx *ctx) {
  (void)ctx;
  return 0;
}
jit_status dist_transport_new(jit_ctx *ctx, const jit_mesh *mesh, const ir_mesh *im,
                              struct coll_transport **out) {
  (void)ctx, (void)mesh, (void)im, (void)out;
  return jit_error(JIT_EINTERNAL, "collectives: no MPI in this build");
}
jit_status dist_exchange(jit_ctx *ctx, void *send, size_t bytes, void *const *recv,
                         const size_t *recv_bytes, bool *send_kept, const char *what) {
  (void)ctx, (void)send, (void)bytes, (void)recv, (void)recv_bytes;
  *send_kept = false;
  return jit_error(JIT_EINTERNAL, "%s: no MPI in this build", what);
}
#else
#include <pthread.h>

struct dist {
  mpi_link *link;
  pthread_mutex_t call_mu; /* recursive: one collective operation at a time (a call's own
                              resharding of args exchanges too) */
  bool initialized_mpi;    /* this context called MPI_Init_thread */
};

/* MPI can be initialized once per process: the contexts that did it share it, and the last one
   finalizes it. */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static int mpi_users; /* contexts alive that initialized MPI (or found it initialized by one) */

static jit_status init_mpi(bool *we_did) {
  jit_status st = JIT_OK;
  int inited = 0, finalized = 0, level = 0;
  *we_did = false;
  pthread_mutex_lock(&mpi_mu);
  MPI_Finalized(&finalized);
  MPI_Initialized(&inited);
  if (finalized) {
    st = jit_error(JIT_EINVAL, "jit_ctx_create: MPI was already finalized in this process");
  } else if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level) != MPI_SUCCESS)
      st = jit_error(JIT_EINTERNAL, "jit_ctx_create: MPI_Init_thread failed");
    else *we_did = true;
  } else if (mpi_users > 0) {
    *we_did = true; /* initialized by another context of ours: share it */
  }
  if (st == JIT_OK) {
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
      st = jit_error(JIT_EUNSUPPORTED, "jit_ctx_create: MPI gives thread level %d, not "
                     "MPI_THREAD_MULTIPLE (initialize it with MPI_Init_thread, or let tjit)", level);
  }
  if (st == JIT_OK && *we_did) mpi_users++;
  if (st != JIT_OK && *we_did && mpi_users == 0) MPI_Finalize();
  if (st != JIT_OK) *we_did = false;
  pthread_mutex_unlock(&mpi_mu);
  return st;
}

static void release_mpi(void) {
  pthread_mutex_lock(&mpi_mu);
  if (--mpi_users == 0) MPI_Finalize();
  pthread_mutex_unlock(&mpi_mu);
}

jit_status dist_open(jit_ctx *ctx, int distributed) {
  jit_status st = JIT_OK;
  ctx->n_local_devices = ctx->n_devices;
  ctx->process_index = 0;
  ctx->process_count = 1;
  if (!distributed && !env_distributed()) return JIT_OK;
  struct dist *d = calloc(1, sizeof *d);
  if (!d) return jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory");
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&d->call_mu, &attr);
  pthread_mutexattr_destroy(&attr);
  ctx->dist = d;
  TRY(init_mpi(&d->initialized_mpi));
  TRY(mpi_link_open(&d->link));
  ctx->process_index = d->link->rank;
  ctx->process_count = d->link->size;
  /* device ids assume every rank runs as many devices: check, on every rank alike */
  int *counts = calloc((size_t)d->link->size, sizeof *counts);
  if (!counts) TRY(jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory"));
  MPI_Allgather(&ctx->n_devices, 1, MPI_INT, counts, 1, MPI_INT, d->link->comm);
  for (int r = 0; r < d->link->size && st == JIT_OK; r++)
    if (counts[r] != ctx->n_devices)
      st = jit_error(JIT_EINVAL, "jit_ctx_create: process %d has %d devices and process %d has "
                     "%d: every process of a distributed context must have as many", 0, counts[0],
                     r, counts[r]);
  free(counts);
  TRY(st);
  if ((int64_t)ctx->n_devices * d->link->size > JIT_MAX_DEVICES)
    TRY(jit_error(JIT_EINVAL, "jit_ctx_create: %d processes of %d devices exceed %d devices",
                  d->link->size, ctx->n_devices, JIT_MAX_DEVICES));
  ctx->n_devices *= d->link->size;
  return JIT_OK;
fail:
  dist_close(ctx);
  ctx->process_index = 0;
  ctx->process_count = 1;
  return st;
}

void dist_close(jit_ctx *ctx) {
  struct dist *d = ctx->dist;
  if (!d) return;
  mpi_link_close(d->link);
  if (d->initialized_mpi) release_mpi();
  pthread_mutex_destroy(&d->call_mu);
  free(d);
  ctx->dist = NULL;
}

typedef struct call_record { /* what a rank says at a call's opening and closing */
  int32_t status;
  int32_t relayed; /* the failure is another rank's, passed on */
  uint64_t key, program;
  char fn[64];
  char msg[LINK_MSG_MAX];
} call_record;

/* Trades rec with every rank into all[size] (all[rank] = rec). */
static jit_status trade_records(jit_ctx *ctx, int kind, const call_record *rec, call_record *all,
                                const char *what) {
  mpi_link *l = ctx->dist->link;
  call_record *send = malloc(sizeof *send);
  void **recv = calloc((size_t)l->size, sizeof *recv);
  int *bytes = calloc((size_t)l->size, sizeof *bytes);
  if (!send || !recv || !bytes) {
    free(send);
    free(recv);
    free(bytes);
    return jit_error(JIT_ENOMEM, "%s: out of memory", what);
  }
  *send = *rec;
  for (int r = 0; r < l->size; r++) recv[r] = &all[r], bytes[r] = (int)sizeof *all;
  bool kept = false;
  jit_status st = mpi_link_exchange(l, kind, send, (int)sizeof *send, recv, bytes, &kept, what);
  all[l->rank] = *rec;
  if (!kept) free(send);
  free(recv);
  free(bytes);
  return st;
}

static void fill_record(call_record *rec, const char *fn_name, jit_status st, bool relayed) {
  memset(rec, 0, sizeof *rec);
  rec->status = (int32_t)st;
  rec->relayed = relayed;
  snprintf(rec->fn, sizeof rec->fn, "%s", fn_name ? fn_name : "");
  if (st != JIT_OK) snprintf(rec->msg, sizeof rec->msg, "%s", jit_last_error());
}

/* The failure to report: the first rank's own failure, else the first relayed one; -1: none. */
static int first_failure(const call_record *all, int n) {
  int relayed = -1;
  for (int r = 0; r < n; r++) {
    if (all[r].status == JIT_OK) continue;
    if (!all[r].relayed) return r;
    if (relayed < 0) relayed = r;
  }
  return relayed;
}

static jit_status status_of(int32_t s) {
  return s > JIT_OK && s <= JIT_EINTERNAL ? (jit_status)s : JIT_EINTERNAL;
}

/* A call's outcome on this rank from every rank's record: its own failure as it is, else the
   failure of the rank that failed first, named. */
static jit_status agree(jit_ctx *ctx, const char *fn_name, const call_record *all, jit_status st,
                        const char *own_msg) {
  int me = ctx->process_index, n = ctx->process_count, r = first_failure(all, n);
  if (r < 0) return JIT_OK;
  if (st != JIT_OK && (r == me || !all[me].relayed)) return jit_error(st, "%s", own_msg);
  return jit_error(status_of(all[r].status), "jit_call: %s: process %d failed: %.*s", fn_name, r,
                   (int)sizeof all[r].msg - 1, all[r].msg);
}

/* Names the first rank that would run another program than rank 0, before anything runs. */
static jit_status check_same_program(const char *fn_name, const call_record *all, int n) {
  for (int r = 1; r < n; r++) {
    const call_record *a = &all[0], *b = &all[r];
    if (strncmp(a->fn, b->fn, sizeof a->fn) != 0)
      return jit_error(JIT_EINVAL, "jit_call: %s: process 0 calls %.63s but process %d calls "
                       "%.63s: every process must make the same calls in the same order", fn_name,
                       a->fn, r, b->fn);
    if (a->key != b->key || a->program != b->program)
      return jit_error(JIT_EINVAL, "jit_call: %s: process %d calls it with another signature "
                       "than process 0 (%s %016llx, not %016llx): every process must pass the "
                       "same dtypes, shapes, shardings and static args", fn_name, r,
                       a->key != b->key ? "key" : "program",
                       (unsigned long long)(a->key != b->key ? b->key : b->program),
                       (unsigned long long)(a->key != b->key ? a->key : a->program));
  }
  return JIT_OK;
}

jit_status dist_call_begin(jit_ctx *ctx, const char *fn_name, jit_status st, uint64_t key,
                           uint64_t program) {
  struct dist *d = ctx->dist;
  if (!d) return st;
  call_record rec, *all = NULL;
  char *own = NULL;
  fill_record(&rec, fn_name, st, false);
  rec.key = key;
  rec.program = program;
  pthread_mutex_lock(&d->call_mu);
  mpi_link_next(d->link);
  all = calloc((size_t)ctx->process_count, sizeof *all);
  own = strdup(rec.msg);
  char what[128];
  snprintf(what, sizeof what, "jit_call: %s: the opening of the call", fn_name);
  jit_status out = !all || !own ? jit_error(JIT_ENOMEM, "jit_call: %s: out of memory", fn_name)
                                : trade_records(ctx, LINK_TAG_BEGIN, &rec, all, what);
  bool traded = out == JIT_OK;
  if (out == JIT_OK) out = agree(ctx, fn_name, all, st, own);
  if (out == JIT_OK) out = check_same_program(fn_name, all, ctx->process_count);
  int r = -1;
  jit_status pst = JIT_OK;
  const char *msg = NULL;
  if (out == JIT_OK && mpi_link_peer_failed(d->link, &r, &pst, &msg))
    out = jit_error(pst, "jit_call: %s: process %d failed: %s", fn_name, r, msg);
  /* a rank that arrives late learns that this one gave up instead of waiting in turn */
  if (!traded) dist_report_failure(ctx, out);
  free(all);
  free(own);
  if (out != JIT_OK) pthread_mutex_unlock(&d->call_mu);
  return out;
}

jit_status dist_call_end(jit_ctx *ctx, const char *fn_name, jit_status st) {
  struct dist *d = ctx->dist;
  if (!d) return st;
  int r = -1;
  jit_status pst;
  const char *msg;
  bool relayed = st != JIT_OK && (mpi_link_peer_failed(d->link, &r, &pst, &msg) ||
                                  strstr(jit_last_error(), COLL_ABORTED_MSG));
  call_record rec, *all = calloc((size_t)ctx->process_count, sizeof *all);
  fill_record(&rec, fn_name, st, relayed);
  char what[128];
  snprintf(what, sizeof what, "jit_call: %s: the closing of the call", fn_name);
  jit_status out = !all ? jit_error(JIT_ENOMEM, "jit_call: %s: out of memory", fn_name)
                        : trade_records(ctx, LINK_TAG_END, &rec, all, what);
  if (out == JIT_OK) out = agree(ctx, fn_name, all, st, rec.msg);
  free(all);
  pthread_mutex_unlock(&d->call_mu);
  return out;
}

void dist_report_failure(jit_ctx *ctx, jit_status st) {
  /* a failure another rank reported is known to every rank already */
  if (ctx->dist && atomic_load(&ctx->dist->link->failed_rank) < 0)
    mpi_link_report_failure(ctx->dist->link, st, jit_last_error());
}

uint64_t dist_bytes_sent(const jit_ctx *ctx) {
  return ctx->dist ? atomic_load(&ctx->dist->link->bytes_sent) : 0;
}

jit_status dist_transport_new(jit_ctx *ctx, const jit_mesh *mesh, const ir_mesh *im,
                              struct coll_transport **out) {
  int process[JIT_MAX_DEVICES];
  for (int p = 0; p < mesh->n_devices; p++)
    process[p] = mesh->device_ids[p] / ctx->n_local_devices;
  return coll_transport_mpi_new_link(im, process, ctx->dist->link, out);
}

jit_status dist_exchange(jit_ctx *ctx, void *send, size_t bytes, void *const *recv,
                         const size_t *recv_bytes, bool *send_kept, const char *what) {
  struct dist *d = ctx->dist;
  *send_kept = false;
  int n = ctx->process_count;
  int *ib = calloc((size_t)n, sizeof *ib);
  if (!ib) return jit_error(JIT_ENOMEM, "%s: out of memory", what);
  jit_status st = JIT_OK;
  for (int r = 0; r < n && st == JIT_OK; r++) {
    size_t b = r == ctx->process_index ? bytes : recv_bytes[r];
    if (b > INT_MAX) st = jit_error(JIT_EUNSUPPORTED, "%s: %zu bytes exceed one MPI message", what, b);
    ib[r] = (int)b;
  }
  if (st == JIT_OK) {
    pthread_mutex_lock(&d->call_mu);
    mpi_link_next(d->link);
    st = mpi_link_exchange(d->link, LINK_TAG_DATA, send, ib[ctx->process_index], recv, ib,
                           send_kept, what);
    if (st != JIT_OK) mpi_link_report_failure(d->link, st, jit_last_error());
    pthread_mutex_unlock(&d->call_mu);
  }
  free(ib);
  return st;
}
#endif /* TJIT_MPI */
