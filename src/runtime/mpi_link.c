/* mpi_link.c: waits between ranks that end: every wait polls its requests (MPI_Test) against a
 * deadline and against the failures other ranks report, so that a rank that fails or never
 * arrives makes the others fail with a message naming it instead of hanging in MPI_Waitall. */
#ifdef TJIT_MPI
#include "runtime/mpi_link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/collectives.h" /* COLL_ABORTED_MSG */
#include "runtime/error.h"

#define DEFAULT_TIMEOUT_S 300.0

typedef struct failure_note { /* what LINK_TAG_FAILED carries */
  int32_t rank, status;
  char msg[LINK_MSG_MAX];
} failure_note;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static jit_status env_timeout(double *out) {
  const char *s = getenv("TJIT_COLLECTIVE_TIMEOUT_S");
  *out = DEFAULT_TIMEOUT_S;
  if (!s) return JIT_OK;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !(v > 0) || v > 1e9)
    return jit_error(JIT_EINVAL, "jit_ctx_create: TJIT_COLLECTIVE_TIMEOUT_S='%s' is not a number "
                     "of seconds > 0", s);
  *out = v;
  return JIT_OK;
}

jit_status mpi_link_open(mpi_link **out) {
  *out = NULL;
  double timeout = 0;
  jit_status st = env_timeout(&timeout);
  if (st != JIT_OK) return st;
  void *attr = NULL;
  int has_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &has_ub);
  if (!has_ub || *(int *)attr < (1023 << 20 | 0xFFFFF))
    return jit_error(JIT_EUNSUPPORTED, "jit_ctx_create: this MPI's largest tag (%d) is below the "
                     "2^30 - 1 tjit needs", has_ub ? *(int *)attr : 0);
  mpi_link *l = calloc(1, sizeof *l);
  if (!l) return jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory");
  l->timeout_s = timeout;
  atomic_init(&l->seq, 0);
  atomic_init(&l->bytes_sent, 0);
  atomic_init(&l->failed_rank, -1);
  pthread_mutex_init(&l->mu, NULL);
  MPI_Comm_rank(MPI_COMM_WORLD, &l->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &l->size);
  if (MPI_Comm_dup(MPI_COMM_WORLD, &l->comm) != MPI_SUCCESS) {
    pthread_mutex_destroy(&l->mu);
    free(l);
    return jit_error(JIT_EINTERNAL, "jit_ctx_create: MPI_Comm_dup failed");
  }
  *out = l;
  return JIT_OK;
}

void mpi_link_close(mpi_link *l) {
  if (!l) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&l->comm); /* the program may have finalized MPI first */
  for (int i = 0; i < l->n_graveyard; i++) free(l->graveyard[i]);
  free(l->graveyard);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

void mpi_link_next(mpi_link *l) {
  atomic_fetch_add(&l->seq, 1);
  atomic_store(&l->failed_rank, -1);
}

/* Keeps buf until close (a send MPI may still read). Out of memory: the buffer leaks, which beats
   freeing memory MPI may read. */
static void bury(mpi_link *l, void *buf) {
  pthread_mutex_lock(&l->mu);
  bool known = false;
  for (int i = 0; i < l->n_graveyard; i++) known |= l->graveyard[i] == buf;
  if (!known && l->n_graveyard == l->cap_graveyard) {
    int cap = l->cap_graveyard ? 2 * l->cap_graveyard : 8;
    void **g = realloc(l->graveyard, (size_t)cap * sizeof *g);
    if (g) l->graveyard = g, l->cap_graveyard = cap;
  }
  if (!known && l->n_graveyard < l->cap_graveyard) l->graveyard[l->n_graveyard++] = buf;
  pthread_mutex_unlock(&l->mu);
}

static void note_failure(mpi_link *l, int rank, int status, const char *msg) {
  pthread_mutex_lock(&l->mu);
  if (atomic_load(&l->failed_rank) < 0) {
    l->failed_status = status;
    snprintf(l->failed_msg, sizeof l->failed_msg, "%s", msg);
    atomic_store(&l->failed_rank, rank);
  }
  pthread_mutex_unlock(&l->mu);
}

bool mpi_link_peer_failed(mpi_link *l, int *rank, jit_status *st, const char **msg) {
  if (atomic_load(&l->failed_rank) < 0) {
    int flag = 0;
    MPI_Message m;
    MPI_Status status;
    /* a matched probe: two threads polling at once cannot both receive one note */
    MPI_Improbe(MPI_ANY_SOURCE, mpi_link_tag(l, LINK_TAG_FAILED), l->comm, &flag, &m, &status);
    if (flag) {
      failure_note note;
      memset(&note, 0, sizeof note);
      MPI_Mrecv(&note, (int)sizeof note, MPI_BYTE, &m, MPI_STATUS_IGNORE);
      note.msg[sizeof note.msg - 1] = '\0';
      int s = note.status > JIT_OK && note.status <= JIT_EINTERNAL ? note.status : JIT_EINTERNAL;
      note_failure(l, status.MPI_SOURCE, s, note.msg);
    }
  }
  int r = atomic_load(&l->failed_rank);
  if (r < 0) return false;
  *rank = r;
  *st = (jit_status)l->failed_status;
  *msg = l->failed_msg;
  return true;
}

void mpi_link_report_failure(mpi_link *l, jit_status st, const char *msg) {
  failure_note *note = calloc(1, sizeof *note);
  if (!note) return; /* the others then wait for their timeout */
  note->rank = l->rank;
  note->status = (int32_t)st;
  snprintf(note->msg, sizeof note->msg, "%s", msg);
  for (int r = 0; r < l->size; r++) {
    MPI_Request req;
    if (r == l->rank) continue;
    if (MPI_Isend(note, (int)sizeof *note, MPI_BYTE, r, mpi_link_tag(l, LINK_TAG_FAILED), l->comm,
                  &req) == MPI_SUCCESS)
      MPI_Request_free(&req); /* small: sent eagerly; the buffer stays until close */
  }
  bury(l, note);
}

/* Ends every request still pending after a failure: receives are cancelled and completed; a send
   that does not complete at once is let go, its buffer kept by the link. */
static void abandon(mpi_link *l, int n, MPI_Request *req, int n_recv, void *send_buf,
                    bool *abandoned) {
  for (int i = 0; i < n; i++) {
    if (req[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&req[i]);
    if (i < n_recv) {
      MPI_Wait(&req[i], MPI_STATUS_IGNORE);
    } else {
      int done = 0;
      MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
      if (!done) {
        MPI_Request_free(&req[i]);
        *abandoned = true;
      }
    }
  }
  if (*abandoned) bury(l, send_buf);
}

jit_status mpi_link_wait(mpi_link *l, int n, MPI_Request *req, const int *peer, int n_recv,
                         void *send_buf, bool *abandoned, const atomic_bool *local_abort,
                         const char *what) {
  *abandoned = false;
  double start = now_s();
  for (long spin = 0;; spin++) {
    int missing = -1;
    for (int i = 0; i < n; i++) {
      if (req[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        abandon(l, n, req, n_recv, send_buf, abandoned);
        return jit_error(JIT_EINTERNAL, "%s: MPI_Test failed", what);
      }
      if (!done && missing < 0) missing = peer[i];
    }
    if (missing < 0) return JIT_OK;
    int rank = -1;
    jit_status st = JIT_OK;
    const char *msg = NULL;
    if (local_abort && atomic_load(local_abort)) {
      abandon(l, n, req, n_recv, send_buf, abandoned);
      return jit_error(JIT_EINTERNAL, COLL_ABORTED_MSG);
    }
    if ((spin & 63) == 0 && mpi_link_peer_failed(l, &rank, &st, &msg)) {
      abandon(l, n, req, n_recv, send_buf, abandoned);
      return jit_error(st, "%s: process %d failed: %s", what, rank, msg);
    }
    if (l->timeout_s > 0 && (spin & 63) == 0 && now_s() - start > l->timeout_s) {
      abandon(l, n, req, n_recv, send_buf, abandoned);
      return jit_error(JIT_EIO, "%s: waited %g s for process %d, which has not arrived "
                       "(TJIT_COLLECTIVE_TIMEOUT_S)", what, l->timeout_s, missing);
    }
    /* spin briefly for latency, then sleep: the ranks of one host share its cores */
    if (spin > 2000) nanosleep(&(struct timespec){0, 50000}, NULL);
  }
}

jit_status mpi_link_exchange(mpi_link *l, int kind, void *send, int bytes, void *const *recv,
                             const int *recv_bytes, bool *abandoned, const char *what) {
  *abandoned = false;
  int n = 2 * (l->size - 1), k = 0;
  MPI_Request *req = malloc((size_t)(n + 1) * sizeof *req);
  int *peer = malloc((size_t)(n + 1) * sizeof *peer);
  if (!req || !peer) {
    free(req);
    free(peer);
    return jit_error(JIT_ENOMEM, "%s: out of memory", what);
  }
  int tag = mpi_link_tag(l, kind), rc = MPI_SUCCESS;
  for (int r = 0; r < l->size; r++) {
    if (r == l->rank) continue;
    peer[k] = r;
    rc |= MPI_Irecv(recv[r], recv_bytes[r], MPI_BYTE, r, tag, l->comm, &req[k++]);
  }
  for (int r = 0; r < l->size; r++) {
    if (r == l->rank) continue;
    peer[k] = r;
    rc |= MPI_Isend(send, bytes, MPI_BYTE, r, tag, l->comm, &req[k++]);
    atomic_fetch_add(&l->bytes_sent, (uint64_t)bytes);
  }
  jit_status st = rc != MPI_SUCCESS
                      ? jit_error(JIT_EINTERNAL, "%s: posting MPI messages failed", what)
                      : mpi_link_wait(l, n, req, peer, l->size - 1, send, abandoned, NULL, what);
  free(req);
  free(peer);
  return st;
}
#endif /* TJIT_MPI */
