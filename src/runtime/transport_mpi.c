/* transport_mpi.c: the transport of a mesh whose devices are spread over processes (MPI ranks).
 * The members of a group that run in this process meet in shared memory (ir/collectives.c); the
 * first of them trades their operands with the group's other processes over MPI (non-blocking
 * point to point, one tag per group, so the groups of different axes never wait for each other);
 * then every member computes its result from all operands in mesh position order (coll_eval).
 * Results are therefore bit for bit those of one process running every device, whatever the
 * layout. Cost: each process sends its members' operands once to every other process of the
 * group (an all-gather); reductions are folded on the receiving side, in order. Waits poll with
 * a deadline and watch for other ranks' failures (runtime/mpi_link.h), so they end. */
#ifdef TJIT_MPI
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "ir/collectives.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"
#include "runtime/mpi_link.h"
#include "runtime/transport.h"

typedef struct mpi_transport {
  coll_transport base;
  coll_world *world; /* this process's members of each group */
  mpi_link *link;    /* the communicator, tags, deadline and peers' failures */
  bool own_link;     /* made by coll_transport_mpi_new (else the context's) */
  atomic_bool aborted; /* a device of this process failed: the leaders stop waiting */
  int rank;
  int n_devices;
  int *process;      /* per mesh position: the rank that runs it */
} mpi_transport;

static jit_status mpi_failed(int rc, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  return jit_error(JIT_EINTERNAL, "collectives (mpi): %s: %s", what, text);
}

/* The leader's part: the operands of the group's members (in position order) into ins, those of
   other processes received into *recv. local[k] is the k-th member this process runs. A send
   abandoned by a failed wait leaves *send NULL (the link keeps the buffer). what: for messages. */
static jit_status trade(mpi_transport *t, int tag, int n, const int *devices,
                        const void *const *local, size_t bytes, const void **ins,
                        unsigned char **recv, unsigned char **send, const char *what) {
  int n_local = 0, n_remote = 0;
  for (int q = 0; q < n; q++) n_local += t->process[devices[q]] == t->rank;
  n_remote = n - n_local;
  if (bytes * (size_t)(n_local > n_remote ? n_local : n_remote) > INT_MAX)
    return jit_error(JIT_EUNSUPPORTED, "collectives (mpi): %zu-byte operands exceed one message",
                     bytes);
  *send = malloc((size_t)n_local * bytes + 1);
  *recv = malloc((size_t)n_remote * bytes + 1);
  MPI_Request *req = calloc((size_t)2 * (size_t)n + 1, sizeof *req);
  int *peers = calloc((size_t)n + 1, sizeof *peers); /* the other processes, in position order */
  int *req_peer = calloc((size_t)2 * (size_t)n + 1, sizeof *req_peer); /* per request */
  if (!*send || !*recv || !req || !peers || !req_peer) {
    free(req);
    free(peers);
    free(req_peer);
    return jit_error(JIT_ENOMEM, "collectives (mpi): out of memory");
  }
  int n_peers = 0;
  for (int q = 0, k = 0; q < n; q++) {
    int r = t->process[devices[q]];
    if (r == t->rank) {
      memcpy(*send + (size_t)k * bytes, local[k], bytes);
      ins[q] = local[k++];
      continue;
    }
    bool seen = false;
    for (int i = 0; i < n_peers; i++) seen |= peers[i] == r;
    if (!seen) peers[n_peers++] = r;
  }
  /* a peer's members arrive as one message, in position order: their slots follow each other */
  int n_req = 0, rc = MPI_SUCCESS;
  size_t off = 0;
  for (int i = 0; i < n_peers && rc == MPI_SUCCESS; i++) {
    int count = 0;
    for (int q = 0; q < n; q++)
      if (t->process[devices[q]] == peers[i]) ins[q] = *recv + off + (size_t)count++ * bytes;
    rc = MPI_Irecv(*recv + off, (int)((size_t)count * bytes), MPI_BYTE, peers[i], tag,
                   t->link->comm, &req[n_req++]);
    off += (size_t)count * bytes;
  }
  int n_recv = n_req;
  for (int i = 0; i < n_peers && rc == MPI_SUCCESS; i++) {
    rc = MPI_Isend(*send, (int)((size_t)n_local * bytes), MPI_BYTE, peers[i], tag,
                   t->link->comm, &req[n_req++]);
    atomic_fetch_add(&t->link->bytes_sent, (uint64_t)n_local * bytes);
  }
  jit_status st = JIT_OK;
  if (rc != MPI_SUCCESS) {
    st = mpi_failed(rc, "exchanging operands");
  } else {
    for (int i = 0; i < n_req; i++) req_peer[i] = peers[i < n_recv ? i : i - n_recv];
    bool abandoned = false;
    st = mpi_link_wait(t->link, n_req, req, req_peer, n_recv, *send, &abandoned, &t->aborted,
                       what);
    if (abandoned) *send = NULL;
  }
  free(req_peer);
  free(req);
  free(peers);
  return st;
}

static jit_status mpi_run(coll_transport *base, int device, ir_op op, const ir_coll *c,
                          const ir_type *in_t, const void *in, void *out) {
  mpi_transport *t = (mpi_transport *)base;
  if (!c) return jit_error(JIT_EINVAL, "collectives: attributes are NULL");
  coll_group *g;
  int group, pos, member, devices[JIT_MAX_DEVICES];
  jit_status st = coll_world_group(t->world, device, c->axes, &g, &group, &pos, &member);
  if (st != JIT_OK) return st;
  int n = coll_world_group_devices(t->world, c->axes, group, devices);
  if ((st = coll_check(n, pos, op, c, in_t)) != JIT_OK) return st;
  if (coll_is_local(op)) return coll_eval(n, pos, op, c, in_t, in, NULL, out);
  bool all_here = true;
  for (int q = 0; q < n; q++) all_here &= t->process[devices[q]] == t->rank;
  if (all_here) return coll_run(g, member, op, c, in_t, in, out); /* member == pos: shared memory */
  size_t bytes = (size_t)ir_type_numel(in_t) * jit_dtype_size(in_t->dtype);
  const void **ins = NULL;
  unsigned char *recv = NULL, *send = NULL;
  coll_group_publish(g, member, in);
  if (!coll_group_barrier(g)) return jit_error(JIT_EINTERNAL, COLL_ABORTED_MSG);
  if (member == 0) { /* the leader: the others wait at the next barrier, reading no slot */
    ins = calloc((size_t)n, sizeof *ins);
    const void *local[JIT_MAX_DEVICES];
    int n_local = 0;
    for (int q = 0; q < n; q++)
      if (t->process[devices[q]] == t->rank) {
        local[n_local] = coll_group_published(g)[n_local];
        n_local++;
      }
    /* < LINK_TAG_COLL_END, checked when t was made */
    int tag = mpi_link_tag(t->link, 1 + (int)c->axes * t->n_devices + group);
    char what[96];
    snprintf(what, sizeof what, "collectives (mpi): %s over axes 0x%x of device %d",
             ir_op_name[op], c->axes, device);
    st = ins ? trade(t, tag, n, devices, local, bytes, ins, &recv, &send, what)
             : jit_error(JIT_ENOMEM, "collectives (mpi): out of memory");
    coll_group_publish(g, 0, st == JIT_OK ? (const void *)ins : NULL);
  }
  if (!coll_group_barrier(g)) st = jit_error(JIT_EINTERNAL, COLL_ABORTED_MSG);
  const void *const *all = st == JIT_OK ? coll_group_published(g)[0] : NULL;
  if (st == JIT_OK && !all)
    st = jit_error(JIT_EINTERNAL, "collectives (mpi): the exchange of device %d's group failed",
                   device);
  if (st == JIT_OK) st = coll_eval(n, pos, op, c, in_t, in, all, out);
  /* nobody returns (and reuses its operand) before everyone has read the operands */
  if (!coll_group_barrier(g) && st == JIT_OK) st = jit_error(JIT_EINTERNAL, COLL_ABORTED_MSG);
  free(ins);
  free(recv);
  free(send);
  return st;
}

static void mpi_abort(coll_transport *base) {
  mpi_transport *t = (mpi_transport *)base;
  atomic_store(&t->aborted, true);
  coll_world_abort(t->world);
}
static void mpi_reset(coll_transport *base) {
  mpi_transport *t = (mpi_transport *)base;
  atomic_store(&t->aborted, false);
  coll_world_reset(t->world);
}
static void mpi_free(coll_transport *base) {
  mpi_transport *t = (mpi_transport *)base;
  coll_world_free(t->world);
  if (t->own_link) mpi_link_close(t->link);
  free(t->process);
  free(t);
}

static const coll_transport_ops mpi_ops = {"mpi", mpi_run, mpi_abort, mpi_reset, mpi_free};

/* Both constructors: link is the context's, or NULL to open one (collective over the world). */
static jit_status transport_new(const ir_mesh *m, const int *process, mpi_link *link,
                                coll_transport **out) {
  *out = NULL;
  int inited = 0, level = 0;
  MPI_Initialized(&inited);
  if (!inited) return jit_error(JIT_EINVAL, "collectives (mpi): MPI is not initialized");
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return jit_error(JIT_EUNSUPPORTED, "collectives (mpi): MPI was initialized without "
                     "MPI_THREAD_MULTIPLE (device threads call it concurrently)");
  int64_t n = ir_mesh_group(m, (1u << m->n_axes) - 1);
  if (n < 1 || n > JIT_MAX_DEVICES) return jit_error(JIT_EINVAL, "collectives (mpi): bad mesh");
  if ((int64_t)(1 << m->n_axes) * n + 1 >= LINK_TAG_COLL_END)
    return jit_error(JIT_EUNSUPPORTED, "collectives (mpi): a mesh of %lld devices and %d axes "
                     "needs more message tags than tjit reserves", (long long)n, m->n_axes);
  mpi_transport *t = calloc(1, sizeof *t);
  bool *here = calloc((size_t)n, sizeof *here);
  if (t) t->process = malloc((size_t)n * sizeof *t->process);
  if (!t || !here || !t->process) {
    if (t) free(t->process);
    free(t);
    free(here);
    return jit_error(JIT_ENOMEM, "collectives (mpi): out of memory");
  }
  t->base.ops = &mpi_ops;
  atomic_init(&t->aborted, false);
  t->n_devices = (int)n;
  jit_status st = JIT_OK;
  if (link) {
    t->link = link;
  } else {
    st = mpi_link_open(&t->link);
    t->own_link = st == JIT_OK;
  }
  t->rank = t->link ? t->link->rank : 0;
  for (int d = 0; d < n && st == JIT_OK; d++) {
    if (process[d] < 0 || process[d] >= t->link->size)
      st = jit_error(JIT_EINVAL, "collectives (mpi): device %d's process %d is not a rank of %d",
                     d, process[d], t->link->size);
    t->process[d] = process[d];
    here[d] = process[d] == t->rank;
  }
  if (st == JIT_OK) st = coll_world_new_local(m, here, &t->world);
  free(here);
  if (st != JIT_OK) {
    mpi_free(&t->base);
    return st;
  }
  *out = &t->base;
  return JIT_OK;
}

jit_status coll_transport_mpi_new(const ir_mesh *m, const int *process, coll_transport **out) {
  return transport_new(m, process, NULL, out);
}

jit_status coll_transport_mpi_new_link(const ir_mesh *m, const int *process, struct mpi_link *link,
                                       coll_transport **out) {
  return transport_new(m, process, link, out);
}
#endif /* TJIT_MPI */
