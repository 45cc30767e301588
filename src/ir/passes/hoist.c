/* hoist.c: loop-invariant code motion for scans: work in a scan's body that depends only on its
 * consts (and constants) is computed once before the loop and enters the body as a new const.
 *
 * What it does: per SCAN, marks the body's invariant values (const params, constants, and ops
 * whose operands are all invariant; nested scans stay inside). Invariant ops are copied in front
 * of the scan, operands mapped to the scan's const operands; those the loop still reads become
 * consts of a rebuilt body, after the old consts. Like XLA's while-loop LICM, an op that makes
 * more elements than it reads (a broadcast) moves only when a moved op needs it: fused into the
 * loop's kernels it costs nothing, hoisted it would be read from memory on every step. Constants
 * stay too (a splat costs nothing).
 * Needs: verified f (bodies are optimized first by the pipeline). Keeps: locations, order.
 * Cost: O(instructions of f and its bodies); f is rebuilt when some scan has invariant work.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

static bool movable(ir_op op) {
  return op != IR_PARAM && op != IR_CONST && op != IR_IOTA && op != IR_SCAN && op != IR_GET &&
         op < IR_ALL_REDUCE; /* collectives stay where the partitioner put them */
}

/* An op that writes more elements than it reads. */
static bool inflating(const ir_func *b, ir_ref r) {
  const ir_ins *in = &b->ins[r];
  int64_t read = 0;
  for (uint32_t k = 0; k < in->n_args; k++) read += ir_type_numel(ir_type_of(b, in->args[k]));
  return ir_type_numel(ir_type_of(b, r)) > read;
}

/* inv[r]: body value r is the same on every step; moved[r]: it is computed before the loop
   (see the top of the file). Returns whether anything moves. */
static bool mark_invariant(const ir_func *b, uint32_t n_consts, bool *inv, bool *moved) {
  for (uint32_t r = 0; r < b->n_ins; r++) {
    const ir_ins *in = &b->ins[r];
    if (r < b->n_params) {
      inv[r] = r < n_consts;
      continue;
    }
    inv[r] = in->op != IR_SCAN && in->op != IR_GET && (movable(in->op) || in->op == IR_CONST ||
                                                       in->op == IR_IOTA);
    for (uint32_t k = 0; k < in->n_args && inv[r]; k++) inv[r] = inv[in->args[k]];
  }
  bool any = false;
  for (uint32_t r = b->n_ins; r-- > b->n_params;) { /* users first: used[] is known */
    const ir_ins *in = &b->ins[r];
    moved[r] = moved[r] /* a moved op reads it */ ||
               (inv[r] && movable(in->op) && !inflating(b, r));
    moved[r] = moved[r] && inv[r] && movable(in->op);
    if (!moved[r]) continue;
    any = true;
    for (uint32_t k = 0; k < in->n_args; k++) moved[in->args[k]] = true;
  }
  for (uint32_t r = 0; r < b->n_params; r++) moved[r] = false;
  return any;
}

/* Emits into nf (the rebuilt parent) the scan at ref s of f with its invariant work in front. */
static jit_status hoist_scan(const ir_func *f, ir_ref s, ir_func *nf, ir_ref *map) {
  const ir_ins *in = &f->ins[s];
  const ir_func *b = ir_scan_body(f, in);
  uint32_t c0 = in->attr.scan.n_consts, n = b->n_ins;
  jit_status st = JIT_OK;
  bool *inv = calloc(n + 1, sizeof *inv), *needed = calloc(n + 1, sizeof *needed);
  bool *moved = calloc(n + 1, sizeof *moved);
  ir_ref *outer = malloc((n + 1) * sizeof *outer), *bmap = malloc((n + 1) * sizeof *bmap);
  ir_ref *ops = malloc((in->n_args + n + b->n_results + 1) * sizeof *ops);
  ir_func *nb = NULL;
  if (!inv || !needed || !moved || !outer || !bmap || !ops) goto nomem;
  bool any = mark_invariant(b, c0, inv, moved);
  /* invariant movable values read by the loop (a variant op or a body result) */
  uint32_t n_new = 0;
  for (uint32_t r = b->n_params; r < n; r++) {
    const ir_ins *bi = &b->ins[r];
    if (moved[r]) continue;
    for (uint32_t k = 0; k < bi->n_args; k++)
      if (moved[bi->args[k]]) needed[bi->args[k]] = true;
  }
  for (uint32_t k = 0; k < b->n_results; k++)
    if (moved[b->results[k]]) needed[b->results[k]] = true;
  for (uint32_t r = 0; r < n; r++) n_new += needed[r];
  ir_attr a = in->attr;
  if (!any || !n_new) { /* nothing worth moving: the scan as it was, with a copy of its body */
    if (ir_attr_for_copy(nf, f, in, &a) != JIT_OK) goto nomem;
    for (uint32_t k = 0; k < in->n_args; k++) ops[k] = map[in->args[k]];
    map[s] = ir_emit(nf, IR_SCAN, in->ty, in->n_args, ops, &a, in->loc);
    goto done;
  }
  /* the invariant work, in front of the loop */
  for (uint32_t r = 0; r < n; r++) {
    outer[r] = IR_NOREF;
    if (r < c0) outer[r] = map[in->args[r]];
    if (r < b->n_params || !inv[r] || (!moved[r] && b->ins[r].op != IR_CONST &&
                                       b->ins[r].op != IR_IOTA))
      continue;
    const ir_ins *bi = &b->ins[r];
    for (uint32_t k = 0; k < bi->n_args; k++) ops[k] = outer[bi->args[k]];
    ir_ty ty = ir_type_intern(nf, ir_type_of(b, r));
    outer[r] = ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, bi->op, ty, bi->n_args, ops, &bi->attr, bi->loc);
    if (outer[r] == IR_NOREF) goto nomem;
  }
  /* the new body: old consts, the hoisted values, carries, xs */
  nb = ir_func_new(b->name);
  if (!nb) goto nomem;
  for (uint32_t p = 0; p < c0; p++) bmap[p] = ir_emit_param(nb, ir_type_intern(nb, ir_type_of(b, p)));
  for (uint32_t r = 0; r < n; r++)
    if (needed[r]) bmap[r] = ir_emit_param(nb, ir_type_intern(nb, ir_type_of(b, r)));
  for (uint32_t p = c0; p < b->n_params; p++)
    bmap[p] = ir_emit_param(nb, ir_type_intern(nb, ir_type_of(b, p)));
  for (uint32_t r = b->n_params; r < n; r++) {
    const ir_ins *bi = &b->ins[r];
    if (needed[r] || moved[r]) continue; /* a new param, or moved out */
    ir_attr ba;
    if (ir_attr_for_copy(nb, b, bi, &ba) != JIT_OK) goto nomem;
    for (uint32_t k = 0; k < bi->n_args; k++) ops[k] = bmap[bi->args[k]];
    ir_ty ty = ir_type_intern(nb, ir_type_of(b, r));
    bmap[r] = ty == UINT32_MAX ? IR_NOREF : ir_emit(nb, bi->op, ty, bi->n_args, ops, &ba, bi->loc);
    if (bmap[r] == IR_NOREF) goto nomem;
  }
  for (uint32_t k = 0; k < b->n_results; k++) ops[k] = bmap[b->results[k]];
  if (nb->oom || ir_set_results(nb, b->n_results, ops) != JIT_OK) goto nomem;
  /* the scan: old consts, hoisted values, then its carries and xs */
  uint32_t m = 0;
  for (uint32_t k = 0; k < c0; k++) ops[m++] = map[in->args[k]];
  for (uint32_t r = 0; r < n; r++)
    if (needed[r]) ops[m++] = outer[r];
  for (uint32_t k = c0; k < in->n_args; k++) ops[m++] = map[in->args[k]];
  a.scan.n_consts = c0 + n_new;
  ir_func *owned = nb;
  nb = NULL;
  if (ir_add_body(nf, owned, &a.scan.body) != JIT_OK) goto nomem;
  map[s] = ir_emit(nf, IR_SCAN, in->ty, m, ops, &a, in->loc);
  goto done;
nomem:
  st = jit_error(JIT_ENOMEM, "hoist: out of memory");
done:
  ir_func_free(nb);
  free(inv);
  free(needed);
  free(moved);
  free(outer);
  free(bmap);
  free(ops);
  return st;
}

jit_status pass_hoist(ir_func *f) {
  bool any = false;
  for (uint32_t i = f->n_params; i < f->n_ins && !any; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->op != IR_SCAN) continue;
    const ir_func *b = ir_scan_body(f, in);
    bool *inv = calloc(b->n_ins + 1, sizeof *inv), *moved = calloc(b->n_ins + 1, sizeof *moved);
    if (inv && moved) any = mark_invariant(b, in->attr.scan.n_consts, inv, moved);
    free(inv);
    free(moved);
    if (!inv || !moved) return jit_error(JIT_ENOMEM, "hoist: out of memory");
  }
  if (!any) return JIT_OK;
  jit_status st = JIT_OK;
  ir_ref *map = malloc(f->n_ins * sizeof *map), *args = NULL;
  uint32_t cap = 0;
  ir_func *nf = map ? pass_rebuild_begin(f, map, "hoist") : NULL;
  if (!nf) {
    free(map);
    return map ? JIT_ENOMEM : jit_error(JIT_ENOMEM, "hoist: out of memory");
  }
  for (uint32_t i = f->n_params; i < f->n_ins && st == JIT_OK; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->op == IR_SCAN) {
      st = hoist_scan(f, i, nf, map);
      continue;
    }
    if (!ir_grow((void **)&args, &cap, in->n_args + 1, sizeof *args)) {
      st = jit_error(JIT_ENOMEM, "hoist: out of memory");
      break;
    }
    for (uint32_t k = 0; k < in->n_args; k++) args[k] = map[in->args[k]];
    map[i] = ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
  }
  free(args);
  if (st != JIT_OK) {
    ir_func_free(nf);
    free(map);
    return st;
  }
  st = pass_rebuild_end(f, nf, map, "hoist");
  free(map);
  return st;
}
