/* mpi_link.h: what every exchange between the ranks of a distributed context shares: its own
 * communicator, the sequence number of the collective operation under way (part of every tag, so
 * that a message left over from a failed call never matches a later one), the bound on any wait
 * for another rank, and the failure another rank reported during the current operation. */
#ifndef TJIT_MPI_LINK_H
#define TJIT_MPI_LINK_H

#ifdef TJIT_MPI
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tjit.h"

/* Tags: bits 20..29 the operation's sequence number (mod 1024), bits 0..19 what the message is.
   Collectives use 1 + axes * n_devices + group (< LINK_TAG_COLL_END); the rest are below. */
#define LINK_TAG_COLL_END 0xFFFF0
#define LINK_TAG_BEGIN 0xFFFF1  /* a call's opening record (status, program hash) */
#define LINK_TAG_END 0xFFFF2    /* a call's closing record (status) */
#define LINK_TAG_FAILED 0xFFFF3 /* a rank failed the operation: don't wait for it */
#define LINK_TAG_DATA 0xFFFF4   /* gathers of arrays */
#define LINK_MSG_MAX 480        /* bytes of a failure message carried between ranks */

typedef struct mpi_link {
  MPI_Comm comm;            /* a duplicate of MPI_COMM_WORLD: tjit's messages never meet others' */
  int rank, size;
  double timeout_s;         /* bound on every wait for another rank; <= 0: none */
  _Atomic uint64_t seq;     /* the collective operation under way (every rank counts alike) */
  _Atomic uint64_t bytes_sent; /* payload bytes this rank posted to others, for benchmarks */
  atomic_int failed_rank;   /* -1, or the rank that reported failing the current operation */
  int failed_status;        /* its status and message, written before failed_rank is set */
  char failed_msg[LINK_MSG_MAX];
  pthread_mutex_t mu;       /* guards failed_* writes and the graveyard */
  void **graveyard;         /* send buffers of requests abandoned by a timeout: freed at close */
  int n_graveyard, cap_graveyard;
} mpi_link;

/* Duplicates MPI_COMM_WORLD (collective over it); the timeout from $TJIT_COLLECTIVE_TIMEOUT_S
   (a number of seconds > 0; default 300). MPI must be initialized. */
jit_status mpi_link_open(mpi_link **out);
void mpi_link_close(mpi_link *l); /* NULL is a no-op */
/* The tag of message kind `what` in the current operation. */
static inline int mpi_link_tag(const mpi_link *l, int what) {
  return (int)((atomic_load(&l->seq) & 1023u) << 20) | what;
}
/* Starts the next operation: a new sequence number, no failure known. */
void mpi_link_next(mpi_link *l);
/* Waits for n requests, the first n_recv receives and the rest sends of send_buf; peer[i] is
   request i's rank (for messages). On failure every request is cancelled and completed, except
   sends that cannot be: those are abandoned with send_buf, which then belongs to the link (freed
   at close; *abandoned true) instead of the caller. Fails
   - JIT_EIO naming the first rank still missing when the timeout passes;
   - with the reported status when another rank reports failing the operation;
   - JIT_EINTERNAL (COLL_ABORTED_MSG) when *local_abort becomes true (may be NULL).
   `what` says what was awaited, for messages. */
jit_status mpi_link_wait(mpi_link *l, int n, MPI_Request *req, const int *peer, int n_recv,
                         void *send_buf, bool *abandoned, const atomic_bool *local_abort,
                         const char *what);
/* Sends `bytes` of send (heap memory, abandoned as mpi_link_wait says) to every other rank and
   receives each one's message into recv[r] (recv_bytes[r] bytes; recv[rank] is ignored), with
   tag kind `kind`. */
jit_status mpi_link_exchange(mpi_link *l, int kind, void *send, int bytes, void *const *recv,
                             const int *recv_bytes, bool *abandoned, const char *what);
/* Tells every other rank that this one failed the current operation (status, message), so that
   their waits end at once; never waits itself. */
void mpi_link_report_failure(mpi_link *l, jit_status st, const char *msg);
/* The failure another rank reported during the current operation, if any (polls the messages). */
bool mpi_link_peer_failed(mpi_link *l, int *rank, jit_status *st, const char **msg);
#endif /* TJIT_MPI */

#endif /* TJIT_MPI_LINK_H */
