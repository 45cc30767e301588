/* passes.h: the optimization passes (one file each) and the pipeline that runs them.
 * Every pass has one signature: it rewrites f in place (typically by rebuilding it through the
 * builder and ir_func_replace) and returns JIT_OK or a status with the last error set. */
#ifndef TJIT_PASSES_H
#define TJIT_PASSES_H

#include "ir/ir.h"

#define PASS_DEF(_)               \
  _(canonicalize, CANONICALIZE)   \
  _(cse, CSE)                     \
  _(hoist, HOIST)                 \
  _(dce, DCE)                     \
  _(windows, WINDOWS)             \
  _(depthwise, DEPTHWISE)         \
  _(conv_layout, CONV_LAYOUT)     \
  _(reduce_split, REDUCE_SPLIT)

typedef enum pass_id {
#define PASS_ENUM(name, NAME) PASS_##NAME,
  PASS_DEF(PASS_ENUM)
#undef PASS_ENUM
  PASS_COUNT
} pass_id;

#define PASS_PROTO(name, NAME) jit_status pass_##name(ir_func *f);
PASS_DEF(PASS_PROTO)
#undef PASS_PROTO

/* pipeline.c */
extern const char *const pass_names[PASS_COUNT];
/* The whole optimization pipeline. Bit (1 << PASS_X) of disabled skips pass X; $TJIT_DISABLE_PASSES
   (comma-separated names) adds to it. verify: run ir_verify after every pass. */
jit_status ir_optimize(ir_func *f, unsigned disabled, bool verify);
/* One pass by name ("cse"), for tjit-opt; JIT_EINVAL for an unknown name. */
jit_status ir_run_pass(ir_func *f, const char *name, bool verify);

/* How a pass rebuilds f (shared by the passes): begin makes an empty function with f's name,
   f's types at the same ty indices and f's params, and sets map[p] = p for each param (map has
   f->n_ins entries); the pass then emits the rest, recording map[old ref] = new ref. end sets
   the results to map[f's results] and replaces f by nf, or frees nf and returns JIT_ENOMEM
   if any emit failed. Both name the pass in the last error. */
ir_func   *pass_rebuild_begin(const ir_func *f, ir_ref *map, const char *pass);
jit_status pass_rebuild_end(ir_func *f, ir_func *nf, const ir_ref *map, const char *pass);
/* in's operands through map (old ref -> new) into *buf, grown to *cap as needed; false (nf->oom
   set) when out of memory. For passes that copy a function instruction by instruction. */
bool pass_map_args(ir_func *nf, const ir_ins *in, const ir_ref *map, ir_ref **buf, uint32_t *cap);
/* The rebuild of a pass that rewrites some instructions one by one: when want selects any, f is
   rebuilt with the others copied as they are (attributes and bodies kept, as dce copies) and
   each selected one replaced by rewrite's value (operands mapped already, args[k] = operand k
   in nf; the value must have the instruction's type). IR_NOREF from rewrite fails the pass:
   JIT_ENOMEM when nf ran out of memory, else JIT_EINTERNAL (a type rule refused, as reported
   through pass_emit_inferred). f is untouched when nothing is selected. */
typedef bool (*pass_select_fn)(const ir_func *f, const ir_ins *in);
typedef ir_ref (*pass_rewrite_fn)(ir_func *nf, const ir_func *f, const ir_ins *in, const ir_ref *args);
jit_status pass_rewrite_each(ir_func *f, const char *pass, pass_select_fn want, pass_rewrite_fn rewrite);
/* Emits op into nf with the type its rule infers (n <= 3 operands; ops whose type is declared
   excepted), the remat tag of attr kept; IR_NOREF with the rule's reason in the last error
   (JIT_EINTERNAL, naming pass) or on OOM. Accepts IR_NOREF operands (and returns IR_NOREF), so
   that a chain of emits needs one check at its end. */
ir_ref pass_emit_inferred(ir_func *nf, const char *pass, ir_op op, uint32_t n, const ir_ref *args,
                          const ir_attr *attr, ir_loc loc);

/* conv_layout.c: lhs of CONV instruction in (in nf; its spatial dim i at dim spatial[i]) padded
   with zeros as the conv pads it (with edges; without, the conv keeps its pads), lhs dilation as
   interior padding; lhs itself when nothing is to pad. IR_NOREF (with the reason, naming pass)
   on failure or for an IR_NOREF lhs. */
ir_ref pass_conv_pad_lhs(ir_func *nf, const char *pass, const ir_ins *in, ir_ref lhs, const int *spatial,
                         bool edges);

/* complex_expand.c: not a pass of the pipeline (it changes param and result types): rewrites f,
   holding complex values, into the equivalent real function whose complex params and results
   are (re, im) pair arrays of shape S ++ [2] (the host layout). The interpreter runs it on a
   copy before evaluating, the compiler after partitioning and before fusion. A no-op on a
   function without complex values. JIT_EUNSUPPORTED (an op without an expansion, a complex
   value of the maximum rank), JIT_ENOMEM. */
jit_status ir_expand_complex(ir_func *f);
bool ir_func_has_complex(const ir_func *f); /* f or one of its bodies has a complex type */

/* vmap.c: not a pass of the pipeline but the batching transformation jit_vmap runs. Emits into
   dst the batched version of body: args[i] (refs in dst) are body's params with the batch dim
   (size batch) inserted at in_axes[i], or -1 for an unbatched param of body's exact type.
   results[i] receives body's result i batched at out_axes[i] (0..rank; negatives normalized by
   the caller). Emitted instructions carry the locations of the body instructions they come
   from; the moves of inputs and results carry loc. On failure returns the status with
   "op at file:line: reason" in the last error (JIT_EUNSUPPORTED for an op without a batching
   rule, JIT_ESHAPE when a batched value would exceed the maximum rank). */
jit_status ir_vmap_into(ir_func *dst, const ir_func *body, const ir_ref *args, const int *in_axes,
                        int64_t batch, const int *out_axes, ir_ref *results, ir_loc loc);

/* grad.c: value_and_grad as an IR transformation (called while tracing; not a pipeline pass).
   Emits body's forward pass into dst once (param i mapped to args[i]) and its reverse-mode
   derivative: results = [loss, n_aux aux values, one gradient per set bit of wrt_mask in param
   order], refs in dst. Result 0 must be a float scalar (JIT_ESHAPE / JIT_EDTYPE), wrt params
   floats (JIT_EDTYPE); checkpointed (attr.remat) values are recomputed, not kept. Backward
   instructions carry the location of their forward instruction; loc is for the rest. */
jit_status ir_value_and_grad_into(ir_func *dst, const ir_func *body, const ir_ref *args,
                                  uint64_t wrt_mask, uint32_t n_aux, ir_ref *results, ir_loc loc);
/* The same with the params to differentiate selected by wrt[0..body->n_params) (any number of
   them: a scan's rule differentiates its step over all its operands). */
jit_status ir_value_and_grad_sel(ir_func *dst, const ir_func *body, const ir_ref *args,
                                 const bool *wrt, uint32_t n_aux, ir_ref *results, ir_loc loc);
/* grad_scan.c: SCAN's reverse-mode rule, for grad.c. Emits into dst the backward (reverse
   direction) scan of src's scan instruction `in`: ops are in's operands as dst refs, fwd_scan
   the dst ref of its forward scan, a SCAN whose body returns what in's body returns; its body is
   replaced by one that also stacks the residuals the backward scan reads (extra ys after the
   step's own: its GETs stay valid). ct_results[k] is the cotangent of result k (IR_NOREF: zero).
   ct_ops[i] receives the cotangent of operand i (IR_NOREF for non-float operands). */
jit_status ir_scan_vjp(ir_func *dst, const ir_func *src, const ir_ins *in, const ir_ref *ops,
                       ir_ref fwd_scan, const ir_ref *ct_results, ir_ref *ct_ops, ir_loc loc);
/* A body's VJP as a loss (grad_scan.c): a function of b's first n_in params then one cotangent
   per result of b, returning sum(r_k * ct_k) over b's float results as an f32 scalar, then b's
   results; its gradient is b's VJP. NULL with *st set on failure. */
ir_func *ir_vjp_loss_of(const ir_func *b, uint32_t n_in, ir_loc loc, jit_status *st);
/* grad_cond.c: COND's reverse-mode rule, for grad.c: a backward COND on the same index whose
   branch k recomputes branch k's forward from the args and applies its VJP (remat: nothing of
   the forward branch is kept). ops: in's operands as dst refs; ct_results[k]: the cotangent of
   result k (IR_NOREF: zero); ct_ops[i] receives operand i's (IR_NOREF: none). */
jit_status ir_cond_vjp(ir_func *dst, const ir_func *src, const ir_ins *in, const ir_ref *ops,
                       const ir_ref *ct_results, ir_ref *ct_ops, ir_loc loc);
/* The largest remat tag in f (0: none): a new tag for f is this + 1. */
uint32_t ir_remat_max_tag(const ir_func *f);

/* fusion.c: not a pass of the pipeline either (it does not rewrite f): partitions the optimized
   f into kernels for codegen (codegen/kernel.h); *out refers to f, which must outlive it. */
struct fz_prog;
jit_status ir_fuse(const ir_func *f, struct fz_prog **out);

/* partition.c (issue 6): sharding propagation and SPMD partitioning. From the global f (not
   changed) and the shardings of its args (NULL entries: unconstrained; all on one mesh), chooses
   a sharding for every value and writes the per-device program: the same function for every
   device of the mesh, on local (per-shard) shapes, with the collectives (ir_coll) that the
   shardings require. The runtime lays each arg out as param_shardings[i] says (resharding when it
   differs from the arg's), runs `local` on every device and assembles results by
   result_shardings. */
struct jit_mesh;
struct jit_sharding;
typedef struct ir_spmd {
  ir_func *local;                         /* owned */
  struct jit_mesh *mesh;                  /* a counted reference */
  uint32_t n_params, n_results;
  struct jit_sharding **param_shardings;  /* n_params counted references */
  struct jit_sharding **result_shardings; /* n_results counted references */
  struct jit_sharding **value_shardings;  /* per value of local (n_values): the split of the
                                             global value it is a block of; NULL: replicated */
  uint32_t n_values;
  uint64_t comm_bytes;   /* per run: bytes the collectives read from other devices' buffers,
                            summed over devices (what a shared-memory exchange moves) */
} ir_spmd;
jit_status ir_partition(const ir_func *f, struct jit_mesh *mesh,
                        struct jit_sharding *const *arg_shardings, ir_spmd **out);
void       ir_spmd_free(ir_spmd *p);      /* NULL is a no-op */
/* The JIT_DUMP_PARTITIONED text: the local function, each split value followed by the global
   value's spec (`{"x,_"}`); the mesh is in the function's header. */
jit_status ir_spmd_print(const ir_spmd *p, FILE *out);
/* The oracle of partitioned execution: interprets p->local on every device of p->mesh in
   lockstep, the collectives exchanging values between them. args[d][i] / results[d][i] are the
   local buffers of param / result i on the device at mesh position d. */
jit_status ir_interp_spmd(const ir_spmd *p, const void *const *const *args,
                          void *const *const *results);

#endif /* TJIT_PASSES_H */
