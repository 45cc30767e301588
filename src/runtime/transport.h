/* transport.h: how the device threads of a partitioned program meet at its collectives: one
 * interface, several transports. The first is shared memory between the devices of this process
 * (ir/collectives.c); a distributed context adds one that also crosses processes (MPI). */
#ifndef TJIT_TRANSPORT_H
#define TJIT_TRANSPORT_H

#include "ir/collectives.h" /* COLL_ABORTED_MSG: how every transport reports a peer's failure */
#include "ir/ir.h"

typedef struct coll_transport coll_transport;

/* Every transport gives ir_coll's semantics exactly and deterministically: reductions fold in
   mesh position order with the interpreter's rounding, so that results do not depend on the
   transport, the timing or how the devices are spread over processes. */
typedef struct coll_transport_ops {
  const char *name; /* for messages: "shared memory", "mpi" */
  /* The part of collective op (ALL_REDUCE .. AXIS_INDEX) of device `device` (a mesh position this
     process runs), as coll_world_run: it returns when the device's result is in `out`. */
  jit_status (*run)(coll_transport *t, int device, ir_op op, const ir_coll *c,
                    const ir_type *in_t, const void *in, void *out);
  void (*abort)(coll_transport *t); /* a device failed: every wait fails at once */
  void (*reset)(coll_transport *t); /* with no device inside: ready for the next run */
  void (*free)(coll_transport *t);  /* with no device inside */
} coll_transport_ops;

struct coll_transport {
  const coll_transport_ops *ops;
};

/* Shared memory between the threads of this process that run the devices of mesh m. */
jit_status coll_transport_shm_new(const ir_mesh *m, coll_transport **out);

#ifdef TJIT_MPI
/* Crosses processes: device d of mesh m runs in MPI rank process[d] (n_devices entries); this
   process runs those of its own rank. Every rank makes it for the same mesh and process map (a
   collective call: it duplicates MPI_COMM_WORLD). MPI must be initialized with
   MPI_THREAD_MULTIPLE: the device threads call it concurrently. */
jit_status coll_transport_mpi_new(const ir_mesh *m, const int *process, coll_transport **out);
/* The same over a distributed context's link (runtime/mpi_link.h): not collective; its waits
   end on the link's deadline and on the failures other ranks report. */
struct mpi_link;
jit_status coll_transport_mpi_new_link(const ir_mesh *m, const int *process, struct mpi_link *link,
                                       coll_transport **out);
#endif

static inline jit_status coll_transport_run(coll_transport *t, int device, ir_op op,
                                            const ir_coll *c, const ir_type *in_t, const void *in,
                                            void *out) {
  return t->ops->run(t, device, op, c, in_t, in, out);
}
static inline void coll_transport_abort(coll_transport *t) { t->ops->abort(t); }
static inline void coll_transport_reset(coll_transport *t) { t->ops->reset(t); }
static inline void coll_transport_free(coll_transport *t) { /* NULL is a no-op */
  if (t) t->ops->free(t);
}

#endif /* TJIT_TRANSPORT_H */
