/* transport.c: the shared-memory transport: the device threads of this process meet in the
 * groups of an ir/collectives.c world, each reading the others' operands in place. */
#include "runtime/transport.h"

#include <stdlib.h>

#include "ir/collectives.h"
#include "runtime/error.h"

typedef struct shm_transport {
  coll_transport base;
  coll_world *world;
} shm_transport;

static jit_status shm_run(coll_transport *t, int device, ir_op op, const ir_coll *c,
                          const ir_type *in_t, const void *in, void *out) {
  return coll_world_run(((shm_transport *)t)->world, device, op, c, in_t, in, out);
}
static void shm_abort(coll_transport *t) { coll_world_abort(((shm_transport *)t)->world); }
static void shm_reset(coll_transport *t) { coll_world_reset(((shm_transport *)t)->world); }
static void shm_free(coll_transport *t) {
  coll_world_free(((shm_transport *)t)->world);
  free(t);
}

static const coll_transport_ops shm_ops = {"shared memory", shm_run, shm_abort, shm_reset,
                                          shm_free};

jit_status coll_transport_shm_new(const ir_mesh *m, coll_transport **out) {
  *out = NULL;
  shm_transport *t = calloc(1, sizeof *t);
  if (!t) return jit_error(JIT_ENOMEM, "collectives: out of memory");
  jit_status st = coll_world_new(m, &t->world);
  if (st != JIT_OK) {
    free(t);
    return st;
  }
  t->base.ops = &shm_ops;
  *out = &t->base;
  return JIT_OK;
}
