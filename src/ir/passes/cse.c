/* cse.c: common-subexpression elimination by hash-based value numbering: an instruction that
 * computes what an earlier one already computes is replaced by the earlier one.
 *
 * What it does: rebuilds the function front to back. Each instruction, with its operands
 * already remapped, is looked up in a hash table keyed by (op, ty, operand refs, the attribute
 * fields its op uses); a hit maps it to the earlier value, a miss emits it and enters it.
 * Commutative ops (IR_COMM) key on their operands sorted, so add(a, b) meets add(b, a).
 * CONST values compare by bit pattern: NaN meets NaN (same payload), -0.0 never meets 0.0.
 * Only the attribute fields the op uses are compared (ir_attr's other fields, and slice
 * entries past the rank, may hold anything), plus the remat tag of every op: a checkpointed
 * value recomputed in the backward pass must not merge back into its forward value.
 * Needs: operands refer to earlier refs; types interned (equal types, equal ty). Keeps: the
 * first occurrence, its operand order and its location; PARAMs are never merged (two params
 * of one type are different inputs). Creates no dead code (a merged duplicate had the same
 * operands as its survivor) and no new types.
 * Cost: O(instructions + operands) expected, one rebuild, a table of 2x the instructions.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

typedef struct cand {   /* an instruction about to be emitted, operands remapped */
  ir_op op;
  ir_ty ty;
  uint32_t n_args;
  const ir_ref *args;
  const ir_attr *attr;
} cand;

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

/* The operands as the key sees them: sorted for a commutative binary op. */
static void key_args(ir_op op, uint32_t n, const ir_ref *args, ir_ref *out2) {
  out2[0] = args[0];
  out2[1] = args[1];
  if ((ir_op_flags[op] & IR_COMM) && n == 2 && out2[0] > out2[1]) {
    out2[0] = args[1];
    out2[1] = args[0];
  }
}

static int rank_of(const ir_func *nf, ir_ty ty) { return nf->types[ty].rank; }

static uint64_t hash_cand(const ir_func *nf, const cand *c) {
  uint64_t h = mix(mix(mix(0x6a09e667f3bcc909ull, c->op), c->ty), c->n_args);
  if (c->n_args == 2) {
    ir_ref k[2];
    key_args(c->op, c->n_args, c->args, k);
    h = mix(mix(h, k[0]), k[1]);
  } else {
    for (uint32_t i = 0; i < c->n_args; i++) h = mix(h, c->args[i]);
  }
  const ir_attr *a = c->attr;
  h = mix(h, a->remat);
  switch (c->op) {
  case IR_CONST: h = mix(h, double_bits(a->value)); break;
  case IR_IOTA:
  case IR_CONCAT: h = mix(h, (uint64_t)a->axis); break;
  case IR_CMP: h = mix(h, (uint64_t)a->cmp); break;
  case IR_TRANSPOSE:
  case IR_BROADCAST:
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REV:
  case IR_REDUCE_PROD:
    h = mix(h, a->dims.n);
    for (int i = 0; i < a->dims.n && i < IR_MAX_RANK; i++) h = mix(h, a->dims.d[i]);
    break;
  case IR_SLICE:
    for (int i = 0; i < rank_of(nf, c->ty); i++)
      h = mix(mix(mix(h, (uint64_t)a->slice.start[i]), (uint64_t)a->slice.limit[i]),
              (uint64_t)a->slice.stride[i]);
    break;
  case IR_DOT:
    h = mix(mix(h, a->dot.n_batch), a->dot.n_contract);
    for (int i = 0; i < a->dot.n_batch && i < IR_MAX_RANK; i++)
      h = mix(mix(h, a->dot.lhs_batch[i]), a->dot.rhs_batch[i]);
    for (int i = 0; i < a->dot.n_contract && i < IR_MAX_RANK; i++)
      h = mix(mix(h, a->dot.lhs_contract[i]), a->dot.rhs_contract[i]);
    break;
  case IR_GET: h = mix(h, (uint64_t)a->axis); break;
  case IR_SORT:
    h = mix(mix(mix(mix(h, (uint64_t)a->axis), a->sort.n_keys), a->sort.index), a->sort.descending);
    break;
  case IR_SCAN: h = mix(h, a->scan.body); break;
  case IR_CONV: /* a few fields: same_attr compares them all (built from zero: memcmp) */
    h = mix(mix(mix(mix(h, a->conv.lhs[1]), a->conv.rhs[0]), (uint64_t)a->conv.stride[0]),
            (uint64_t)a->conv.groups);
    break;
  case IR_FFT: h = mix(mix(mix(h, a->fft.type), a->fft.n_dims), (uint64_t)a->fft.lengths[0]); break;
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER:
    h = mix(mix(mix(h, a->window.kind), (uint64_t)a->window.size[0]), (uint64_t)a->window.stride[0]);
    break;
  case IR_GATHER:
  case IR_SCATTER: /* a few fields: same_attr compares them all */
    h = mix(mix(mix(mix(h, a->gather.offset_dims.n), a->gather.index_dim), a->gather.mode),
            a->gather.combine);
    break;
  case IR_PAD:
    for (int i = 0; i < rank_of(nf, c->ty); i++)
      h = mix(mix(mix(h, (uint64_t)a->pad.lo[i]), (uint64_t)a->pad.hi[i]), (uint64_t)a->pad.interior[i]);
    break;
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_COLLECTIVE_PERMUTE:
  case IR_AXIS_INDEX:
    h = mix(mix(mix(mix(mix(h, a->coll.axes), a->coll.kind), a->coll.dim), a->coll.dim2),
            (uint64_t)(uint32_t)a->coll.shift);
    break;
  default: break;
  }
  return h;
}

static bool same_dims(const ir_dims *x, const ir_dims *y) {
  return x->n == y->n && memcmp(x->d, y->d, x->n < IR_MAX_RANK ? x->n : IR_MAX_RANK) == 0;
}

static bool same_attr(const ir_func *nf, ir_op op, ir_ty ty, const ir_attr *x, const ir_attr *y) {
  switch (op) {
  case IR_CONST: return double_bits(x->value) == double_bits(y->value);
  case IR_IOTA:
  case IR_CONCAT: return x->axis == y->axis;
  case IR_CMP: return x->cmp == y->cmp;
  case IR_TRANSPOSE:
  case IR_BROADCAST:
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REV: return same_dims(&x->dims, &y->dims);
  case IR_GATHER:
  case IR_SCATTER: {
    const ir_gather *p = &x->gather, *q = &y->gather;
    return same_dims(&p->offset_dims, &q->offset_dims) && same_dims(&p->collapsed, &q->collapsed) &&
           same_dims(&p->start_map, &q->start_map) && p->index_dim == q->index_dim &&
           p->mode == q->mode && p->combine == q->combine &&
           memcmp(p->sizes, q->sizes, sizeof p->sizes) == 0;
  }
  case IR_PAD:
    for (int i = 0; i < rank_of(nf, ty); i++)
      if (x->pad.lo[i] != y->pad.lo[i] || x->pad.hi[i] != y->pad.hi[i] ||
          x->pad.interior[i] != y->pad.interior[i])
        return false;
    return true;
  case IR_REDUCE_PROD: return same_dims(&x->dims, &y->dims);
  case IR_SLICE:
    for (int i = 0; i < rank_of(nf, ty); i++)
      if (x->slice.start[i] != y->slice.start[i] || x->slice.limit[i] != y->slice.limit[i] ||
          x->slice.stride[i] != y->slice.stride[i])
        return false;
    return true;
  case IR_DOT: {
    const ir_dot_dims *p = &x->dot, *q = &y->dot;
    if (p->n_batch != q->n_batch || p->n_contract != q->n_contract) return false;
    for (int i = 0; i < p->n_batch && i < IR_MAX_RANK; i++)
      if (p->lhs_batch[i] != q->lhs_batch[i] || p->rhs_batch[i] != q->rhs_batch[i]) return false;
    for (int i = 0; i < p->n_contract && i < IR_MAX_RANK; i++)
      if (p->lhs_contract[i] != q->lhs_contract[i] || p->rhs_contract[i] != q->rhs_contract[i])
        return false;
    return true;
  }
  case IR_GET: return x->axis == y->axis;
  case IR_SORT: return x->axis == y->axis && !memcmp(&x->sort, &y->sort, sizeof x->sort);
  case IR_CONV: return !memcmp(&x->conv, &y->conv, sizeof x->conv);
  case IR_FFT: return !memcmp(&x->fft, &y->fft, sizeof x->fft);
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: return !memcmp(&x->window, &y->window, sizeof x->window);
  case IR_SCAN: /* each runs its own body: never merged */
  case IR_COND:
  case IR_WHILE:
  case IR_SHARD_MAP: return false;
  case IR_ALL_REDUCE:
  case IR_ALL_GATHER:
  case IR_REDUCE_SCATTER:
  case IR_ALL_TO_ALL:
  case IR_COLLECTIVE_PERMUTE:
  case IR_AXIS_INDEX: return memcmp(&x->coll, &y->coll, sizeof x->coll) == 0;
  case IR_SHARDING: return sharding_equal(x->sharding, y->sharding);
  default: return true;
  }
}

static bool same(const ir_func *nf, ir_ref r, const cand *c) {
  const ir_ins *in = &nf->ins[r];
  if (in->op != c->op || in->ty != c->ty || in->n_args != c->n_args) return false;
  if (c->n_args == 2) {
    ir_ref x[2], y[2];
    key_args(c->op, 2, c->args, x);
    key_args(in->op, 2, in->args, y);
    if (x[0] != y[0] || x[1] != y[1]) return false;
  } else if (c->n_args && memcmp(in->args, c->args, c->n_args * sizeof *c->args) != 0) {
    return false;
  }
  return in->attr.remat == c->attr->remat && same_attr(nf, c->op, c->ty, &in->attr, c->attr);
}

jit_status pass_cse(ir_func *f) {
  jit_status st = JIT_OK;
  ir_ref *map = malloc((f->n_ins ? f->n_ins : 1) * sizeof *map);
  uint32_t n_body = f->n_ins - f->n_params;
  size_t cap = 16;
  while (cap < 2 * (size_t)n_body) cap *= 2;
  ir_ref *table = malloc(cap * sizeof *table);
  ir_ref *args = NULL;
  uint32_t args_cap = 0;
  if (!map || !table) {
    st = jit_error(JIT_ENOMEM, "cse: out of memory");
    goto done;
  }
  for (size_t i = 0; i < cap; i++) table[i] = IR_NOREF;
  ir_func *nf = pass_rebuild_begin(f, map, "cse");
  if (!nf) {
    st = JIT_ENOMEM;
    goto done;
  }
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (!pass_map_args(nf, in, map, &args, &args_cap)) break;
    cand c = {in->op, in->ty, in->n_args, args, &in->attr};
    size_t slot = (size_t)hash_cand(nf, &c) & (cap - 1);
    map[i] = IR_NOREF;
    if (in->op != IR_PARAM) {
      for (; table[slot] != IR_NOREF; slot = (slot + 1) & (cap - 1))
        if (same(nf, table[slot], &c)) {
          map[i] = table[slot];
          break;
        }
    }
    if (map[i] != IR_NOREF) continue;
    map[i] = ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    if (map[i] == IR_NOREF) break;
    if (in->op != IR_PARAM) table[slot] = map[i];
  }
  st = pass_rebuild_end(f, nf, map, "cse");
done:
  free(args);
  free(table);
  free(map);
  return st;
}
