/* collectives.h: the collectives of partitioned programs between the devices (threads) of one
 * process, through shared memory, with exactly ir_coll's semantics (src/ir/ir.h): how the SPMD
 * interpreter's devices meet, and the runtime's in-process transport (runtime/transport.h). */
#ifndef TJIT_COLLECTIVES_H
#define TJIT_COLLECTIVES_H

#include "ir/ir.h"

/* n members (device threads) that meet at collectives; each knows its position 0..n-1. */
typedef struct coll_group coll_group;

jit_status coll_group_new(int n, coll_group **out); /* JIT_EINVAL for n < 1, JIT_ENOMEM */
void       coll_group_free(coll_group *g);          /* NULL is a no-op; no member may be inside */

/* Member p's part of collective op (ALL_REDUCE .. AXIS_INDEX) with attributes c over operand
   `in` of type in_t (ignored by AXIS_INDEX); writes the member's result to `out`, a dense
   row-major buffer of the result type. Every member of g must make the same call (same op, c
   and in_t), each from its own thread; it returns when every member is done reading the others'
   operands. Deterministic: reductions fold in position order 0..n-1 with the interpreter's
   rounding, whatever the timing. */
jit_status coll_run(coll_group *g, int p, ir_op op, const ir_coll *c, const ir_type *in_t,
                    const void *in, void *out);

/* The collective semantics alone, for a transport that brings the operands together itself:
   member p's result of op over ins[0..n-1], every member's operand in position order (ins may be
   NULL for AXIS_INDEX and SHARD_SLICE, which read only `in`). Checks as coll_run does. */
jit_status coll_eval(int n, int p, ir_op op, const ir_coll *c, const ir_type *in_t, const void *in,
                     const void *const *ins, void *out);
/* coll_eval's checks alone (what every member can check before any wait, so all fail alike). */
jit_status coll_check(int n, int p, ir_op op, const ir_coll *c, const ir_type *in_t);
/* AXIS_INDEX and SHARD_SLICE: a member computes them alone, without meeting the others. */
static inline bool coll_is_local(ir_op op) { return op == IR_AXIS_INDEX || op == IR_SHARD_SLICE; }
/* The meeting coll_run is made of, for transports that add steps between its barriers: member p
   publishes ptr in its slot; barrier returns when every member has arrived (false: the group was
   aborted); published reads the slots (read them between two barriers). */
void coll_group_publish(coll_group *g, int p, const void *ptr);
bool coll_group_barrier(coll_group *g);
const void *const *coll_group_published(const coll_group *g);

/* A world: the devices of a mesh (row-major positions 0..n-1) and, made on first use, the
   groups every axes mask splits them into. A collective over axes `c->axes` meets the devices
   that share the coordinates off those axes (ir_coll's groups). */
typedef struct coll_world coll_world;
jit_status coll_world_new(const ir_mesh *m, coll_world **out);
/* A world of which this process runs only the devices d with here[d] (n_devices entries, copied):
   its groups meet those members only (a transport joins them to the others). */
jit_status coll_world_new_local(const ir_mesh *m, const bool *here, coll_world **out);
void       coll_world_free(coll_world *w); /* NULL is a no-op; no device may be inside */
int        coll_world_devices(const coll_world *w);
/* Device `device`'s group for the axes of mask: its index *group, the device's position *pos in
   it, and its group *g of this process's members, where it is member *member (= *pos when this
   process runs every device). Made on first use. */
jit_status coll_world_group(coll_world *w, int device, unsigned mask, coll_group **g, int *group,
                            int *pos, int *member);
/* The devices of group `group` of mask, in position order; returns how many. */
int coll_world_group_devices(const coll_world *w, unsigned mask, int group, int *devices);
/* Device (mesh position) `device`'s part of a collective, in a world of every device: coll_run in
   its group. SHARD_SLICE needs no partner and does not wait. */
jit_status coll_world_run(coll_world *w, int device, ir_op op, const ir_coll *c,
                          const ir_type *in_t, const void *in, void *out);
/* A device that fails calls abort: every collective waiting or still to come fails at once
   (JIT_EINTERNAL) instead of waiting forever for it. reset (with no device inside) readies the
   world for the next run. */
void coll_world_abort(coll_world *w);
/* The message of a collective that failed because another device aborted: a run reports the
   device that failed first, not the peers it released. */
#define COLL_ABORTED_MSG "collectives: another device of the group failed first"
void coll_world_reset(coll_world *w);

#endif /* TJIT_COLLECTIVES_H */
