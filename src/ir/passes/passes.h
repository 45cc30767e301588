/* passes.h: the optimization passes (one file each) and the pipeline that runs them.
 * Every pass has one signature: it rewrites f in place (typically by rebuilding it through the
 * builder and ir_func_replace) and returns JIT_OK or a status with the last error set. */
#ifndef TJIT_PASSES_H
#define TJIT_PASSES_H

#include "ir/ir.h"

#define PASS_DEF(_)               \
  _(canonicalize, CANONICALIZE)   \
  _(cse, CSE)                     \
  _(dce, DCE)

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

#endif /* TJIT_PASSES_H */
