/* matmul.c: emits dot_general as a packed, register-blocked LLVM kernel with a fused epilogue
 * (see matmul.h for the loop structure, the buffers and the numerics).
 */
#include "codegen/matmul.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "codegen/gemm_core.h"
#include "codegen/llvm_jit.h"
#include "runtime/error.h"

/* ---- the plan: sizes, strides, tile and block sizes, scratch layout
 * ------------------------------- */

/* One index group (batch, M, N or K) as (extent, stride) dims, outermost first, with adjacent
   dims merged where the strides allow on both sides (s[1] is the rhs side of batch and K). An
   index i of the group is at element offset sum_d ((i / inner_d) % ext_d) * s[side][d]. */
typedef struct grp {
  int n;
  int64_t ext[IR_MAX_RANK];
  int64_t s[2][IR_MAX_RANK];
  int64_t numel;
} grp;

/* Tile and block sizes come from this machine's caches (Zen 5: L1d 48 KiB, L2 1 MiB per core,
   L3 32 MiB) and were tuned on it: the micro-kernel streams an NR-wide strip of packed rhs
   (KC x NR, 128 KiB) and an MR-tall strip of packed lhs (MR x KC) from L2, which delivers the
   160 bytes per 16 FMAs easily; the MC x KC block of packed lhs stays in L2 across the strips of
   rhs, and the KC x NC panel of rhs in L3 across the MC blocks. A long KC matters most: each K
   block beyond the first reads and writes the output tile once more (a 4x shorter KC cost a
   fifth of the speed of 512x1024x4096). */
#define MM_KC_STRIP (128 << 10) /* bytes of one packed rhs strip, KC x NR */
#define MM_MC_BLOCK (256 << 10) /* bytes of the packed lhs block, MC x KC */
/* With 64-byte vectors twice that: each MC block streams the KC x NC rhs panel from L3 once
   more, and on an Emerald Rapids host (2 MiB L2) 2-thread GEMMs ran 4-8% faster in mean over
   interleaved runs (W4's two shapes, 2048^3) with 512 KiB than with 256 (1 MiB gave about as much);
   half of a 1 MiB L2 (Zen 4, Skylake-X) still leaves room for the rhs strip. */
#define MM_MC_BLOCK_512 (512 << 10)
/* AMX tiles stream a 32-row strip of the lhs block and the rhs strip from L2 per 32 x 32 tile, and
   reuse the strip over the block's row tiles: 256 rows (1 MiB at KC 1024) ran the two W13 dots
   5-8% faster than 128 on Emerald Rapids, one thread and two, in interleaved calls; 512 rows
   about as fast as 256. */
#define MM_MC_BLOCK_AMX (1 << 20)
#define MM_NC_PANEL (4 << 20)   /* bytes of the packed rhs panel, KC x NC */
#define MM_RC_ROWS 512          /* rows per chunk when partial sums live in scratch */

typedef struct plan {
  jit_dtype dt; /* the operands' (and the dot's) dtype */
  jit_dtype out_dt;
  int64_t B, M, N, K;
  grp bat, m, n, k;   /* bat, k: s[0] lhs, s[1] rhs; m: lhs; n: rhs */
  int vw, nv, mr, nr; /* lanes per vector, vectors per tile row, tile rows, tile columns */
  int64_t kc, mc, nc, rc;
  bool c_in_out;  /* partial sums over K blocks accumulate in the output buffer */
  bool c_scratch; /* ... else in scratch at c_off (only when K > kc) */
  int64_t c_ld;   /* row length of the scratch partial sums */
  int64_t out_bs, out_ld; /* elements between the output's batches and rows */
  size_t a_off, b_off, c_off, bytes;
  /* the desc's bounds (a conv's padding) as M and K index arithmetic: the view dim's index is
     (index / div) % ext of the M (K) index */
  int nbnd;
  struct {
    int64_t mdiv, mext, mmul, kdiv, kext, kmul, lo, size;
  } bnd[IR_CONV_MAX_SPATIAL];
} plan;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Appends dims to g (exts, lhs strides, rhs strides) merging and dropping size-1 dims. */
static void grp_add(grp *g, int64_t ext, int64_t s0, int64_t s1) {
  g->numel *= ext;
  if (ext == 1)
    return;
  if (g->n > 0) {
    int j = g->n - 1;
    if (g->s[0][j] == ext * s0 && g->s[1][j] == ext * s1) {
      g->ext[j] *= ext;
      g->s[0][j] = s0;
      g->s[1][j] = s1;
      return;
    }
  }
  g->ext[g->n] = ext;
  g->s[0][g->n] = s0;
  g->s[1][g->n] = s1;
  g->n++;
}

static void grp_init(grp *g) {
  memset(g, 0, sizeof *g);
  g->numel = 1;
}

static bool dtype_ok(jit_dtype d) { return ir_dtype_is_int(d) || ir_dtype_is_float(d); }

static size_t csize(jit_dtype dt) { return dt == JIT_F64 || dt == JIT_I64 ? 8 : 4; }

/* The compute type of the accumulators is also the storage type of out_dt exactly when out
   can hold the partial sums. */
static bool acc_is_storage(jit_dtype dt, jit_dtype out) {
  switch (dt) {
  case JIT_F32:
  case JIT_F16:
  case JIT_BF16:
    return out == JIT_F32;
  case JIT_F64:
    return out == JIT_F64;
  case JIT_I64:
    return out == JIT_I64;
  default:
    return out == JIT_I32; /* i8, u8, i32 accumulate in i32 */
  }
}

/* For an lhs view whose innermost K dim is contiguous (a conv's features): that dim's length,
   the run of K the lhs packer can load as vectors; 0 otherwise. With bounds a run is one window
   position's features (the bounds hold per position), not the merged dim: a window row of
   several positions may reach into the padding for some of them. */
static int64_t conv_run(const cg_matmul_desc *d, const plan *p) {
  const grp *k = &p->k;
  if (p->nbnd) {
    int f = d->dims.lhs_contract[d->dims.n_contract - 1];
    return d->lhs_strides[f] == 1 ? max64(d->lhs.dims[f], 1) : 0;
  }
  return d->lhs_view && k->n >= 1 && k->s[0][k->n - 1] == 1 ? k->ext[k->n - 1] : 0;
}

/* The product of the extents of dims list[i + 1 .. n - 1] (an index's divisor in a row-major
   group), for the entry of list that is dim; -1 when dim is not in list. */
static int64_t inner_extent(const ir_type *t, const uint8_t *list, int n, int dim) {
  for (int i = 0; i < n; i++) {
    if (list[i] != dim) continue;
    int64_t div = 1;
    for (int j = i + 1; j < n; j++) div *= max64(t->dims[list[j]], 1);
    return div;
  }
  return -1;
}

/* The bounds of d as index arithmetic on the M and K indices (m_order: the M dims in order). */
static jit_status plan_bounds(const cg_matmul_desc *d, const uint8_t *m_order, int n_m, plan *p) {
  if ((d->n_bounds || d->lhs_group_stride || d->lhs_offset) && !d->lhs_view)
    return jit_error(JIT_EINVAL, "matmul: bounds, offset or group stride without an lhs view");
  if (d->n_bounds < 0 || d->n_bounds > IR_CONV_MAX_SPATIAL)
    return jit_error(JIT_EINVAL, "matmul: %d bounds", d->n_bounds);
  p->nbnd = d->n_bounds;
  for (int i = 0; i < d->n_bounds; i++) {
    const struct cg_view_bound *b = &d->bounds[i];
    int64_t mdiv = inner_extent(&d->lhs, m_order, n_m, b->m_dim);
    int64_t kdiv = inner_extent(&d->lhs, d->dims.lhs_contract, d->dims.n_contract, b->k_dim);
    if (mdiv < 0 || kdiv < 0 || b->size < 0)
      return jit_error(JIT_EINVAL, "matmul: bound %d names no M and K dims", i);
    p->bnd[i].mdiv = mdiv;
    p->bnd[i].mext = max64(d->lhs.dims[b->m_dim], 1);
    p->bnd[i].mmul = b->m_mul;
    p->bnd[i].kdiv = kdiv;
    p->bnd[i].kext = max64(d->lhs.dims[b->k_dim], 1);
    p->bnd[i].kmul = b->k_mul;
    p->bnd[i].lo = b->lo;
    p->bnd[i].size = b->size;
  }
  return JIT_OK;
}

static jit_status make_plan(const cg_matmul_desc *d, plan *p) {
  memset(p, 0, sizeof *p);
  const ir_type *lt = &d->lhs, *rt = &d->rhs;
  const ir_dot_dims *dd = &d->dims;
  if (lt->dtype != rt->dtype || !dtype_ok(lt->dtype))
    return jit_error(JIT_EINVAL, "matmul: operand dtypes %s x %s", jit_dtype_name(lt->dtype),
                     jit_dtype_name(rt->dtype));
  if (!ir_dtype_valid(d->out_dtype))
    return jit_error(JIT_EINVAL, "matmul: bad output dtype %d", (int)d->out_dtype);
  if (!d->epilogue && d->out_dtype != lt->dtype)
    return jit_error(JIT_EINVAL, "matmul: output dtype %s without an epilogue for a %s dot",
                     jit_dtype_name(d->out_dtype), jit_dtype_name(lt->dtype));
  int nb = dd->n_batch, nc = dd->n_contract;
  int virt = d->lhs_group_stride && nb > 0; /* the first batch dim has no lhs dim */
  if (lt->rank < 0 || lt->rank > IR_MAX_RANK || rt->rank < 0 || rt->rank > IR_MAX_RANK ||
      nb - virt + nc > lt->rank || nb + nc > rt->rank || (d->lhs_group_stride && !nb))
    return jit_error(JIT_EINVAL, "matmul: bad ranks or dot dims");
  int bufs[4] = {d->lhs_buf, d->rhs_buf, d->out_buf, d->scratch_buf};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < i; j++)
      if (bufs[i] < 0 || bufs[i] == bufs[j])
        return jit_error(JIT_EINVAL, "matmul: bad buffer indices");
  bool lused[IR_MAX_RANK] = {0}, rused[IR_MAX_RANK] = {0};
  int64_t ls[IR_MAX_RANK], rs[IR_MAX_RANK];
  int64_t acc = 1;
  for (int i = lt->rank - 1; i >= 0; i--) {
    if (lt->dims[i] < 0)
      return jit_error(JIT_EINVAL, "matmul: negative dim");
    ls[i] = d->lhs_view ? d->lhs_strides[i] : acc;
    acc *= lt->dims[i] ? lt->dims[i] : 1;
  }
  acc = 1;
  for (int i = rt->rank - 1; i >= 0; i--) {
    if (rt->dims[i] < 0)
      return jit_error(JIT_EINVAL, "matmul: negative dim");
    rs[i] = acc;
    acc *= rt->dims[i] ? rt->dims[i] : 1;
  }
  grp_init(&p->bat);
  grp_init(&p->m);
  grp_init(&p->n);
  grp_init(&p->k);
  for (int i = 0; i < nb + nc; i++) {
    int l = i < nb ? dd->lhs_batch[i] : dd->lhs_contract[i - nb];
    int r = i < nb ? dd->rhs_batch[i] : dd->rhs_contract[i - nb];
    if (i == 0 && virt) {
      if (r >= rt->rank || rused[r])
        return jit_error(JIT_EINVAL, "matmul: bad batch/contract dims");
      rused[r] = true;
      grp_add(&p->bat, rt->dims[r], d->lhs_group_stride, rs[r]);
      continue;
    }
    if (l >= lt->rank || r >= rt->rank || lused[l] || rused[r] || lt->dims[l] != rt->dims[r])
      return jit_error(JIT_EINVAL, "matmul: bad batch/contract dims");
    lused[l] = rused[r] = true;
    grp_add(i < nb ? &p->bat : &p->k, lt->dims[l], ls[l], rs[r]);
  }
  uint8_t m_order[IR_MAX_RANK];
  int n_m = 0;
  for (int i = 0; i < lt->rank; i++)
    if (!lused[i]) {
      m_order[n_m++] = (uint8_t)i;
      grp_add(&p->m, lt->dims[i], ls[i], 0);
    }
  jit_status bst = plan_bounds(d, m_order, n_m, p);
  if (bst != JIT_OK)
    return bst;
  for (int i = 0; i < rt->rank; i++)
    if (!rused[i])
      grp_add(&p->n, rt->dims[i], rs[i], 0);
  p->dt = lt->dtype;
  p->out_dt = d->out_dtype;
  p->B = p->bat.numel;
  p->M = p->m.numel;
  p->N = p->n.numel;
  p->K = p->k.numel;
  p->out_ld = d->out_ld ? d->out_ld : p->N;
  p->out_bs = d->out_batch_stride ? d->out_batch_stride : p->M * p->out_ld;
  if ((d->out_ld || d->out_batch_stride) && d->epilogue)
    return jit_error(JIT_EINVAL, "matmul: an epilogue over a strided output");
  if (d->out_ld < 0 || d->out_batch_stride < 0 || (d->out_ld && d->out_ld < p->N))
    return jit_error(JIT_EINVAL, "matmul: output strides %lld, %lld for rows of %lld",
                     (long long)d->out_batch_stride, (long long)d->out_ld, (long long)p->N);
  if (p->B > ((int64_t)1 << 40) / (p->M ? p->M : 1))
    return jit_error(JIT_EINVAL, "matmul: too many rows");

  if (d->vec_bytes != 16 && d->vec_bytes != 32 && d->vec_bytes != 64)
    return jit_error(JIT_EINVAL, "matmul: vector size %d is not 16, 32 or 64 bytes", d->vec_bytes);
  size_t es = csize(p->dt);
  /* The tile is MR x 2 vectors: MR * 2 accumulators, 2 vectors of rhs and a broadcast of lhs
     must fit the register file (32 zmm with AVX-512, 16 ymm or xmm below it), or the k-loop
     spills. */
  p->vw = (int)((size_t)d->vec_bytes / es);
  p->nv = 2;
  p->nr = p->vw * p->nv;
  p->mr = d->vec_bytes == 64 ? 8 : 6;
  int64_t kc = MM_KC_STRIP / ((int64_t)p->nr * (int64_t)es);
  /* a conv's view: K blocks start at whole contiguous runs of its innermost K dim (a window
     row's features), which the lhs packer then loads as vectors (emit_pack) */
  int64_t run = conv_run(d, p);
  if (run && p->K > kc && run <= kc) kc -= kc % run;
  int64_t mc_block = d->vec_bytes == 64 ? MM_MC_BLOCK_512 : MM_MC_BLOCK;
  if (d->bf16_amx && p->dt == JIT_BF16 && d->vec_bytes == 64) mc_block = MM_MC_BLOCK_AMX;
  int64_t mc = round_up(mc_block / (kc * (int64_t)es), p->mr);
  int64_t ncb = round_up(MM_NC_PANEL / (kc * (int64_t)es), p->nr);
  p->kc = kc;
  p->mc = min64(mc, round_up(max64(p->M, 1), p->mr));
  p->nc = min64(ncb, round_up(max64(p->N, 1), p->nr));
  p->c_in_out = acc_is_storage(p->dt, p->out_dt);
  p->c_scratch = !p->c_in_out && p->K > kc;
  /* a chunk bounds the scratch partial sums; with them in out, a whole batch is one chunk so
     that the rhs is packed once per call */
  p->rc = p->c_scratch ? round_up(MM_RC_ROWS, p->mc) : INT64_MAX / 4;
  p->c_ld = p->nc;
  size_t kce = (size_t)min64(kc, p->K);
  size_t a_bytes = (size_t)p->mc * kce * es, b_bytes = kce * (size_t)p->nc * es;
  size_t c_bytes =
      p->c_scratch ? (size_t)min64(p->rc, round_up(p->M, p->mr)) * (size_t)p->nc * es : 0;
  p->a_off = 0;
  p->b_off = (size_t)round_up((int64_t)a_bytes, 64);
  p->c_off = p->b_off + (size_t)round_up((int64_t)b_bytes, 64);
  p->bytes = p->c_off + (size_t)round_up((int64_t)c_bytes, 64);
  return JIT_OK;
}

/* ---- public helpers -----------------------------------------------------------------------------
 */

void cg_matmul_desc_init(cg_matmul_desc *d, const ir_type *lhs, const ir_type *rhs,
                         const ir_dot_dims *dims, uint32_t n_epi, int vec_bytes) {
  memset(d, 0, sizeof *d);
  d->lhs = *lhs;
  d->rhs = *rhs;
  d->dims = *dims;
  d->out_dtype = lhs->dtype;
  d->lhs_buf = 0;
  d->rhs_buf = 1;
  d->out_buf = 2 + (int)n_epi;
  d->scratch_buf = 3 + (int)n_epi;
  d->vec_bytes = vec_bytes;
}

/* A conv in GEMM form as a dot of the lhs view [batch, out spatial..., window..., in features]
   with the rhs, contracting the window and feature dims with the rhs's spatial and in dims. With
   G feature (batch) groups, the rhs's out features split into (G, per group) as the dot's batch
   dim, whose lhs side is lhs_group_stride (the view has no room for it with 3 spatial dims): the
   view's features (batch) are those of one group, and group g writes the output's columns
   g * N .. g * N + N - 1 of every row. The padding stays out of memory: the view starts at the
   unpadded lhs minus the low pads and its bounds read positions in the padding as zeros. */
static void conv_desc(cg_matmul_desc *d, const ir_func *f, const ir_ins *in, uint32_t n_epi,
                      int vec_bytes) {
  const ir_conv *c = &in->attr.conv;
  const ir_type *lt = ir_type_of(f, in->args[0]), *rt = ir_type_of(f, in->args[1]);
  const ir_type *ot = &f->types[in->ty];
  int ns = lt->rank - 2;
  int64_t s[IR_MAX_RANK], acc = 1;
  for (int i = lt->rank - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= lt->dims[i];
  }
  int64_t G = c->groups > 1 ? c->groups : c->batch_groups;
  int g = G > 1;
  ir_type view = {.dtype = lt->dtype, .rank = 2 * ns + 2};
  ir_dot_dims dims = {.n_contract = (uint8_t)(ns + 1)};
  int64_t vs[IR_MAX_RANK];
  int64_t nb = lt->dims[c->lhs[0]] / c->batch_groups, nf = lt->dims[c->lhs[1]] / c->groups;
  /* the rhs with its out features split into (G, per group): dim o is the group, o + 1 the
     features within it; dims past o move up by one */
  ir_type rv = *rt;
  int o = c->rhs[0];
  int rmap[IR_MAX_RANK];
  for (int i = 0; i < rt->rank; i++) rmap[i] = i < o ? i : i + g;
  if (g) {
    rv.rank = rt->rank + 1;
    for (int i = rt->rank - 1; i > o; i--) rv.dims[i + 1] = rt->dims[i];
    rv.dims[o] = G;
    rv.dims[o + 1] = rt->dims[o] / G;
    dims.n_batch = 1;
    dims.rhs_batch[0] = (uint8_t)o;
  }
  view.dims[0] = nb;
  vs[0] = s[c->lhs[0]];
  for (int i = 0; i < ns; i++) {
    view.dims[1 + i] = ot->dims[1 + i];
    vs[1 + i] = c->stride[i] * s[c->lhs[2 + i]];
    view.dims[1 + ns + i] = rt->dims[c->rhs[2 + i]];
    vs[1 + ns + i] = c->rhs_dil[i] * s[c->lhs[2 + i]];
    dims.lhs_contract[i] = (uint8_t)(1 + ns + i);
    dims.rhs_contract[i] = (uint8_t)rmap[c->rhs[2 + i]];
  }
  view.dims[1 + 2 * ns] = nf;
  vs[1 + 2 * ns] = s[c->lhs[1]];
  dims.lhs_contract[ns] = (uint8_t)(1 + 2 * ns);
  dims.rhs_contract[ns] = (uint8_t)rmap[c->rhs[1]];
  cg_matmul_desc_init(d, &view, &rv, &dims, n_epi, vec_bytes);
  d->lhs_view = true;
  memcpy(d->lhs_strides, vs, sizeof vs);
  if (g) {
    d->lhs_group_stride = c->groups > 1 ? nf * s[c->lhs[1]] : nb * s[c->lhs[0]];
    d->out_batch_stride = rt->dims[o] / G;
    d->out_ld = rt->dims[o];
  }
  for (int i = 0; i < ns; i++) {
    d->lhs_offset -= c->pad_lo[i] * s[c->lhs[2 + i]];
    if (c->pad_lo[i] > 0 || c->pad_hi[i] > 0) /* crops alone never leave the lhs */
      d->bounds[d->n_bounds++] = (struct cg_view_bound){.m_dim = 1 + i, .k_dim = 1 + ns + i,
                                                        .m_mul = c->stride[i],
                                                        .k_mul = c->rhs_dil[i],
                                                        .lo = c->pad_lo[i],
                                                        .size = lt->dims[c->lhs[2 + i]]};
  }
}

void cg_matmul_desc_from_ir(cg_matmul_desc *d, const ir_func *f, ir_ref dot, uint32_t n_epi,
                            int vec_bytes) {
  const ir_ins *in = &f->ins[dot];
  if (in->op == IR_CONV) {
    conv_desc(d, f, in, n_epi, vec_bytes);
    return;
  }
  cg_matmul_desc_init(d, ir_type_of(f, in->args[0]), ir_type_of(f, in->args[1]), &in->attr.dot,
                      n_epi, vec_bytes);
}

jit_status cg_matmul_shape(const cg_matmul_desc *d, int64_t *batch, int64_t *m, int64_t *n,
                           int64_t *k) {
  plan p;
  jit_status st = make_plan(d, &p);
  if (st != JIT_OK)
    return st;
  *batch = p.B;
  *m = p.M;
  *n = p.N;
  *k = p.K;
  return JIT_OK;
}

bool cg_matmul_stores_once(const cg_matmul_desc *d) {
  plan p;
  if (make_plan(d, &p) != JIT_OK) {
    jit_error_clear();
    return false;
  }
  return !(p.c_in_out && p.K > p.kc);
}

int64_t cg_matmul_rows(const cg_matmul_desc *d) {
  plan p;
  return make_plan(d, &p) == JIT_OK ? p.B * p.M : 0;
}

int64_t cg_matmul_row_grain(const cg_matmul_desc *d) {
  plan p;
  if (make_plan(d, &p) != JIT_OK)
    return 0;
  return p.M >= 4 * p.mc ? p.mc : p.mr;
}

size_t cg_matmul_scratch_bytes(const cg_matmul_desc *d) {
  plan p;
  return make_plan(d, &p) == JIT_OK ? p.bytes : 0;
}

/* ---- emission
 * ------------------------------------------------------------------------------------ */

typedef struct mm {
  LLVMContextRef c;
  LLVMModuleRef m;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  const cg_matmul_desc *d;
  plan p;
  LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, half, ptr;
  LLVMTypeRef T, VT; /* accumulator scalar and vector (vw lanes) types */
  LLVMTypeRef S;     /* operand storage type */
  bool fail;         /* the epilogue failed */
} mm;

static LLVMValueRef ci(mm *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }

static LLVMBasicBlockRef block(mm *e, const char *name) {
  return LLVMAppendBasicBlockInContext(e->c, e->fn, name);
}

/* The compute type of dtype d as the emitters use it (bool i1, i8/u8 i8, 16-bit floats f32). */
static LLVMTypeRef ctype(mm *e, jit_dtype d) {
  switch (d) {
  case JIT_BOOL:
    return e->i1;
  case JIT_I8:
  case JIT_U8:
    return e->i8;
  case JIT_I32:
    return e->i32;
  case JIT_I64:
    return e->i64;
  case JIT_F64:
    return e->f64;
  default:
    return e->f32;
  }
}

/* The in-memory type of dtype d. */
static LLVMTypeRef stype(mm *e, jit_dtype d) {
  switch (d) {
  case JIT_BOOL:
    return e->i8;
  case JIT_F16:
    return e->half;
  case JIT_BF16:
    return e->i16;
  default:
    return ctype(e, d);
  }
}

static LLVMTypeRef vec(LLVMTypeRef t, int n) { return LLVMVectorType(t, (unsigned)n); }

/* The same-shaped type (scalar or vector) with element type t. */
static LLVMTypeRef like(LLVMValueRef x, LLVMTypeRef t) {
  LLVMTypeRef xt = LLVMTypeOf(x);
  return LLVMGetTypeKind(xt) == LLVMVectorTypeKind ? vec(t, (int)LLVMGetVectorSize(xt)) : t;
}

/* Constant v of integer type t, or a splat of it when t is a vector type. */
static LLVMValueRef kint(LLVMTypeRef t, uint64_t v) {
  if (LLVMGetTypeKind(t) != LLVMVectorTypeKind)
    return LLVMConstInt(t, v, 0);
  LLVMValueRef lanes[64], s = LLVMConstInt(LLVMGetElementType(t), v, 0);
  unsigned n = LLVMGetVectorSize(t);
  for (unsigned i = 0; i < n; i++)
    lanes[i] = s;
  return LLVMConstVector(lanes, n);
}

static LLVMValueRef call_intrinsic(mm *e, const char *name, LLVMTypeRef *tys, unsigned n_tys,
                                   LLVMValueRef *args, unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->m, id, tys, n_tys);
  LLVMTypeRef fty = LLVMIntrinsicGetType(e->c, id, tys, n_tys);
  return LLVMBuildCall2(e->b, fty, fn, args, n, "");
}

static LLVMValueRef gep(mm *e, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
  return LLVMBuildGEP2(e->b, t, p, &i, 1, "");
}

static LLVMValueRef load(mm *e, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(e->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static void store(mm *e, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(e->b, v, p), align);
}

static unsigned esize(mm *e, LLVMTypeRef t) {
  if (t == e->f64 || t == e->i64)
    return 8;
  if (t == e->f32 || t == e->i32)
    return 4;
  if (t == e->half || t == e->i16)
    return 2;
  return 1;
}

/* The alignment of a whole vector in a packed rhs strip or in the tile: rows there are nr = 2
   vectors long and start 64-byte aligned. */
static unsigned valign(mm *e) { return (unsigned)e->p.vw * esize(e, e->T); }

static LLVMValueRef masked_load(mm *e, LLVMTypeRef vt, LLVMValueRef p, LLVMValueRef mask,
                                unsigned align) {
  LLVMValueRef args[4] = {p, LLVMConstInt(e->i32, align, 0), mask, LLVMConstNull(vt)};
  LLVMTypeRef tys[2] = {vt, e->ptr};
  return call_intrinsic(e, "llvm.masked.load", tys, 2, args, 4);
}

static void masked_store(mm *e, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask, unsigned align) {
  LLVMValueRef args[4] = {v, p, LLVMConstInt(e->i32, align, 0), mask};
  LLVMTypeRef tys[2] = {LLVMTypeOf(v), e->ptr};
  call_intrinsic(e, "llvm.masked.store", tys, 2, args, 4);
}

static LLVMValueRef splat(mm *e, LLVMValueRef s, int n) {
  LLVMTypeRef vt = vec(LLVMTypeOf(s), n);
  LLVMValueRef v =
      LLVMBuildInsertElement(e->b, LLVMGetUndef(vt), s, LLVMConstInt(e->i32, 0, 0), "");
  return LLVMBuildShuffleVector(e->b, v, LLVMGetUndef(vt), LLVMConstNull(vec(e->i32, n)), "");
}

static LLVMValueRef imin(mm *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, a, b, ""), a, b, "");
}

/* Lanes 0..n-1 of an n-lane mask: lane < count (count i64, any value). */
static LLVMValueRef lane_mask(mm *e, LLVMValueRef count, int n) {
  LLVMValueRef lanes[64];
  for (int i = 0; i < n; i++)
    lanes[i] = ci(e, i);
  LLVMValueRef iota = LLVMConstVector(lanes, (unsigned)n);
  return LLVMBuildICmp(e->b, LLVMIntSLT, iota, splat(e, count, n), "");
}

/* Operand element(s) of storage type S widened to the compute type T. */
static LLVMValueRef widen(mm *e, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  switch (e->p.dt) {
  case JIT_F16:
    return LLVMBuildFPExt(b, x, like(x, e->f32), "");
  case JIT_BF16: {
    LLVMValueRef w = LLVMBuildZExt(b, x, like(x, e->i32), "");
    w = LLVMBuildShl(b, w, kint(like(x, e->i32), 16), "");
    return LLVMBuildBitCast(b, w, like(x, e->f32), "");
  }
  case JIT_I8:
    return LLVMBuildSExt(b, x, like(x, e->i32), "");
  case JIT_U8:
    return LLVMBuildZExt(b, x, like(x, e->i32), "");
  default:
    return x;
  }
}

/* The bf16 bits (i16) of float(s) x, rounded to nearest even; NaN stays a quiet NaN. */
static LLVMValueRef bf16_bits(mm *e, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  LLVMTypeRef it = like(x, e->i32);
  LLVMValueRef u = LLVMBuildBitCast(b, x, it, "");
  LLVMValueRef hi = LLVMBuildLShr(b, u, kint(it, 16), "");
  LLVMValueRef nan = LLVMBuildOr(b, hi, kint(it, 0x40), "");
  LLVMValueRef bias = LLVMBuildAdd(b, kint(it, 0x7fff), LLVMBuildAnd(b, hi, kint(it, 1), ""), "");
  LLVMValueRef r = LLVMBuildLShr(b, LLVMBuildAdd(b, u, bias, ""), kint(it, 16), "");
  LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  return LLVMBuildTrunc(b, LLVMBuildSelect(b, isnan, nan, r, ""), like(x, e->i16), "");
}

/* Finished sums (type T) as the dot's value in the compute type of its dtype. */
static LLVMValueRef to_dot_value(mm *e, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  switch (e->p.dt) {
  case JIT_F16:
    return LLVMBuildFPExt(b, LLVMBuildFPTrunc(b, x, like(x, e->half), ""), like(x, e->f32), "");
  case JIT_BF16: {
    LLVMValueRef w = LLVMBuildZExt(b, bf16_bits(e, x), like(x, e->i32), "");
    w = LLVMBuildShl(b, w, kint(like(x, e->i32), 16), "");
    return LLVMBuildBitCast(b, w, like(x, e->f32), "");
  }
  case JIT_I8:
  case JIT_U8:
    return LLVMBuildTrunc(b, x, like(x, e->i8), "");
  default:
    return x;
  }
}

/* A value in the compute type of out_dt as stored in memory. */
static LLVMValueRef to_storage(mm *e, LLVMValueRef x) {
  switch (e->p.out_dt) {
  case JIT_F16:
    return LLVMBuildFPTrunc(e->b, x, like(x, e->half), "");
  case JIT_BF16:
    return bf16_bits(e, x);
  case JIT_BOOL:
    return LLVMBuildZExt(e->b, x, like(x, e->i8), "");
  default:
    return x;
  }
}

/* Element offset of index idx (i64) of group g, side s. */
static LLVMValueRef grp_off(mm *e, const grp *g, int side, LLVMValueRef idx) {
  LLVMBuilderRef b = e->b;
  if (g->n == 0 || g->numel == 0)
    return ci(e, 0);
  if (g->n == 1)
    return LLVMBuildMul(b, idx, ci(e, g->s[side][0]), "");
  LLVMValueRef off = ci(e, 0), q = idx;
  for (int d = g->n - 1; d >= 0; d--) {
    LLVMValueRef i = d ? LLVMBuildURem(b, q, ci(e, g->ext[d]), "") : q;
    off = LLVMBuildAdd(b, off, LLVMBuildMul(b, i, ci(e, g->s[side][d]), ""), "");
    if (d)
      q = LLVMBuildUDiv(b, q, ci(e, g->ext[d]), "");
  }
  return off;
}

/* for (iv = lo; iv < hi; iv = next) { ... }: open positions the builder in the body; close
   takes the next value (computed in the body) and positions the builder after the loop. */
typedef struct loop {
  LLVMBasicBlockRef head, exit;
  LLVMValueRef iv;
  bool unroll; /* the optimizer may unroll it (set after loop_open) */
} loop;

static LLVMValueRef loop_open(mm *e, loop *L, LLVMValueRef lo, LLVMValueRef hi, const char *name) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(e->b);
  char nm[48];
  snprintf(nm, sizeof nm, "%s.head", name);
  L->unroll = false;
  L->head = block(e, nm);
  snprintf(nm, sizeof nm, "%s.body", name);
  LLVMBasicBlockRef body = block(e, nm);
  snprintf(nm, sizeof nm, "%s.exit", name);
  L->exit = block(e, nm);
  LLVMBuildBr(e->b, L->head);
  LLVMPositionBuilderAtEnd(e->b, L->head);
  L->iv = LLVMBuildPhi(e->b, e->i64, name);
  LLVMAddIncoming(L->iv, &lo, &pre, 1);
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, L->iv, hi, ""), body, L->exit);
  LLVMPositionBuilderAtEnd(e->b, body);
  return L->iv;
}

/* !llvm.loop metadata: no loop here is for the vectorizer (the vector code is explicit; left to
   it, the packing loops became scatters, slow on this CPU), and the loops around the register
   tile must not be unrolled either (a constant trip count would copy the micro-kernel). */
static LLVMValueRef loop_md(mm *e, bool unroll) {
  LLVMMetadataRef opts[2];
  unsigned n = 0;
  const char *vk = "llvm.loop.vectorize.enable";
  LLVMMetadataRef vec_off[2] = {
      LLVMMDStringInContext2(e->c, vk, strlen(vk)),
      LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(e->c), 0, 0))};
  opts[n++] = LLVMMDNodeInContext2(e->c, vec_off, 2);
  if (!unroll) {
    const char *uk = "llvm.loop.unroll.disable";
    LLVMMetadataRef u = LLVMMDStringInContext2(e->c, uk, strlen(uk));
    opts[n++] = LLVMMDNodeInContext2(e->c, &u, 1);
  }
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->c, NULL, 0);
  LLVMMetadataRef ops[3] = {tmp, opts[0], n > 1 ? opts[1] : NULL};
  LLVMMetadataRef node = LLVMMDNodeInContext2(e->c, ops, 1 + n);
  LLVMMetadataReplaceAllUsesWith(tmp, node);
  return LLVMMetadataAsValue(e->c, node);
}

static void loop_close(mm *e, loop *L, LLVMValueRef next) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b);
  LLVMValueRef br = LLVMBuildBr(e->b, L->head);
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(e->c, "llvm.loop", 9), loop_md(e, L->unroll));
  LLVMAddIncoming(L->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(e->b, L->exit);
}

static LLVMValueRef step(mm *e, LLVMValueRef iv, int64_t by) {
  return LLVMBuildAdd(e->b, iv, ci(e, by), "");
}

/* Transposes n vectors of n lanes (n a power of two) in registers: r[i][k] becomes r[k][i].
   Each stage swaps the off-diagonal s x s blocks of every 2s x 2s block (s = n/2 .. 1). */
static void transpose(mm *e, LLVMValueRef *r, int n) {
  LLVMValueRef lo[32], hi[32], nr[32];
  for (int s = n / 2; s >= 1; s /= 2) {
    for (int t = 0; t < n; t++) {
      int blk = t / (2 * s) * (2 * s), o = t % (2 * s);
      lo[t] = LLVMConstInt(e->i32, (unsigned)(o < s ? blk + o : n + blk + o - s), 0);
      hi[t] = LLVMConstInt(e->i32, (unsigned)(o < s ? blk + s + o : n + blk + o), 0);
    }
    LLVMValueRef ml = LLVMConstVector(lo, (unsigned)n), mh = LLVMConstVector(hi, (unsigned)n);
    for (int i = 0; i < n; i++) {
      if (i & s)
        continue;
      nr[i] = LLVMBuildShuffleVector(e->b, r[i], r[i + s], ml, "");
      nr[i + s] = LLVMBuildShuffleVector(e->b, r[i], r[i + s], mh, "");
    }
    for (int i = 0; i < n; i++)
      r[i] = nr[i];
  }
}

/* The bounds (a conv's padding, see cg_matmul_desc) for the lhs packer. bound_rows: the part
   of each bound's position that depends on the row, for M index m (computed once per row and
   window run, not per element); bound_inside: i1, whether K index k of that row lies inside
   every bound. Unsigned compares take the position's two limits at once. */
static void bound_rows(mm *e, LLVMValueRef m, LLVMValueRef *rp) {
  LLVMBuilderRef b = e->b;
  for (int i = 0; i < e->p.nbnd; i++) {
    LLVMValueRef o = LLVMBuildUDiv(b, m, ci(e, e->p.bnd[i].mdiv), "");
    o = LLVMBuildURem(b, o, ci(e, e->p.bnd[i].mext), "");
    rp[i] = LLVMBuildSub(b, LLVMBuildMul(b, o, ci(e, e->p.bnd[i].mmul), ""), ci(e, e->p.bnd[i].lo), "");
  }
}

static LLVMValueRef bound_inside(mm *e, const LLVMValueRef *rp, LLVMValueRef k) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef ok = LLVMConstInt(e->i1, 1, 0);
  for (int i = 0; i < e->p.nbnd; i++) {
    LLVMValueRef w = LLVMBuildUDiv(b, k, ci(e, e->p.bnd[i].kdiv), "");
    w = LLVMBuildURem(b, w, ci(e, e->p.bnd[i].kext), "");
    LLVMValueRef at = LLVMBuildAdd(b, rp[i], LLVMBuildMul(b, w, ci(e, e->p.bnd[i].kmul), ""), "");
    ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntULT, at, ci(e, e->p.bnd[i].size), ""), "");
  }
  return ok;
}

/* One element at p widened to T, or 0 when ok is false (then p is never read: in the padding
   it may point outside the lhs). */
static LLVMValueRef load_if(mm *e, LLVMValueRef p, LLVMValueRef ok) {
  LLVMValueRef x = masked_load(e, vec(e->S, 1), p, splat(e, ok, 1), esize(e, e->S));
  return widen(e, LLVMBuildExtractElement(e->b, x, LLVMConstInt(e->i32, 0, 0), ""));
}

/* One strip of a pack whose k is contiguous in memory and w is one dim (a normal lhs, a
   transposed rhs): n x n blocks (w x k, n the largest power of two <= W and <= vw) are loaded as
   n vectors along k, transposed in registers and stored as n vectors along w (only the lanes
   inside the strip when n does not divide W, as for MR = 6); the last kc % n columns go element
   by element. Rows at or past `valid` are zeros; with `bounded` (the lhs of a conv with
   padding, the columns one window position's features) so are rows whose position is in the
   padding. */
static void emit_pack_transpose(mm *e, LLVMValueRef sdst, LLVMValueRef src, const grp *gw, int ks,
                                LLVMValueRef w0, LLVMValueRef valid, LLVMValueRef k0,
                                LLVMValueRef kc, int W, bool bounded, const char *name) {
  LLVMBuilderRef b = e->b;
  const grp *gk = &e->p.k;
  int n = 1;
  while (2 * n <= W && 2 * n <= e->p.vw) n *= 2;
  char nm[32];
  LLVMValueRef kmain = LLVMBuildAnd(b, kc, ci(e, ~(int64_t)(n - 1)), "");
  LLVMValueRef ksrc = gep(e, e->S, src, grp_off(e, gk, ks, k0));
  for (int jb = 0; jb < W; jb += n) {
    LLVMValueRef rowp[32], rowm[32], r[32], rp[IR_CONV_MAX_SPATIAL];
    for (int q = 0; q < n; q++) {
      LLVMValueRef j = ci(e, jb + q), row = LLVMBuildAdd(b, w0, j, "");
      LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, j, valid, "");
      if (bounded) {
        bound_rows(e, row, rp);
        ok = LLVMBuildAnd(b, ok, bound_inside(e, rp, k0), "");
      }
      rowp[q] = gep(e, e->S, ksrc, grp_off(e, gw, 0, row));
      rowm[q] = splat(e, ok, n);
    }
    loop lk;
    snprintf(nm, sizeof nm, "%s.t%d", name, jb);
    LLVMValueRef kb = loop_open(e, &lk, ci(e, 0), kmain, nm);
    for (int q = 0; q < n; q++)
      r[q] = widen(
          e, masked_load(e, vec(e->S, n), gep(e, e->S, rowp[q], kb), rowm[q], esize(e, e->S)));
    transpose(e, r, n);
    int keep = W - jb < n ? W - jb : n; /* lanes of a row of the strip */
    LLVMValueRef first[32];
    for (int q = 0; q < keep; q++) first[q] = LLVMConstInt(e->i32, (unsigned)q, 0);
    for (int q = 0; q < n; q++) {
      LLVMValueRef at = LLVMBuildAdd(
          b, LLVMBuildMul(b, LLVMBuildAdd(b, kb, ci(e, q), ""), ci(e, W), ""), ci(e, jb), "");
      LLVMValueRef v = r[q];
      if (keep < n)
        v = keep == 1 ? LLVMBuildExtractElement(b, v, first[0], "")
                      : LLVMBuildShuffleVector(b, v, LLVMGetPoison(LLVMTypeOf(v)),
                                               LLVMConstVector(first, (unsigned)keep), "");
      store(e, v, gep(e, e->T, sdst, at), esize(e, e->T));
    }
    loop_close(e, &lk, step(e, kb, n));
  }
  /* the last kc % n columns: rows past `valid` read row 0 (in bounds) and store 0; rows in
     the padding read nothing */
  loop lj, lk;
  snprintf(nm, sizeof nm, "%s.tj", name);
  LLVMValueRef j = loop_open(e, &lj, ci(e, 0), ci(e, W), nm);
  LLVMValueRef ok = LLVMBuildICmp(b, LLVMIntSLT, j, valid, "");
  LLVMValueRef inside = NULL;
  if (bounded) {
    LLVMValueRef rp[IR_CONV_MAX_SPATIAL];
    bound_rows(e, LLVMBuildAdd(b, w0, j, ""), rp);
    inside = LLVMBuildAnd(b, ok, bound_inside(e, rp, k0), "");
  }
  LLVMValueRef jsrc =
      gep(e, e->S, ksrc,
          grp_off(e, gw, 0, LLVMBuildAdd(b, w0, LLVMBuildSelect(b, ok, j, ci(e, 0), ""), "")));
  snprintf(nm, sizeof nm, "%s.tk", name);
  LLVMValueRef k = loop_open(e, &lk, kmain, kc, nm);
  LLVMValueRef x;
  if (inside)
    x = load_if(e, gep(e, e->S, jsrc, k), inside);
  else
    x = LLVMBuildSelect(b, ok, widen(e, load(e, e->S, gep(e, e->S, jsrc, k), esize(e, e->S))),
                        LLVMConstNull(e->T), "");
  store(e, x, gep(e, e->T, sdst, LLVMBuildAdd(b, LLVMBuildMul(b, k, ci(e, W), ""), j, "")),
        esize(e, e->T));
  loop_close(e, &lk, step(e, k, 1));
  loop_close(e, &lj, step(e, j, 1));
}

/* Packs a panel into strips W wide:
     dst[(s * kc + k) * W + j] = src[off_w(w0 + s*W + j) + off_k(k0 + k)]  (0 past wn)
   for strips s while s*W < wn, k < kc, j < W. w is group gw (side 0), k is group k (side ks). */
static void emit_pack(mm *e, LLVMValueRef dst, LLVMValueRef src, const grp *gw, int ks,
                      LLVMValueRef w0, LLVMValueRef wn, LLVMValueRef k0, LLVMValueRef kc, int W,
                      const char *name) {
  LLVMBuilderRef b = e->b;
  const grp *gk = &e->p.k;
  char nm[32];
  loop ls, lk, lj;
  snprintf(nm, sizeof nm, "%s.s", name);
  LLVMValueRef ws = loop_open(e, &ls, ci(e, 0), wn, nm);
  LLVMValueRef valid = imin(e, ci(e, W), LLVMBuildSub(b, wn, ws, ""));
  LLVMValueRef sdst = gep(e, e->T, dst, LLVMBuildMul(b, ws, kc, ""));
  bool bounded = ks == 0 && e->p.nbnd > 0; /* the lhs of a conv with padding */
  if (!bounded && gw->n == 1 && gw->s[0][0] == 1) {
    /* w is contiguous: a masked vector load per k */
    LLVMValueRef mask = lane_mask(e, valid, W);
    LLVMValueRef wsrc = gep(e, e->S, src, LLVMBuildAdd(b, w0, ws, ""));
    snprintf(nm, sizeof nm, "%s.k", name);
    LLVMValueRef k = loop_open(e, &lk, ci(e, 0), kc, nm);
    lk.unroll = true;
    LLVMValueRef p = gep(e, e->S, wsrc, grp_off(e, gk, ks, LLVMBuildAdd(b, k0, k, "")));
    LLVMValueRef v = widen(e, masked_load(e, vec(e->S, W), p, mask, esize(e, e->S)));
    store(e, v, gep(e, e->T, sdst, LLVMBuildMul(b, k, ci(e, W), "")), esize(e, e->T));
    loop_close(e, &lk, step(e, k, 1));
  } else if (!bounded && gw->n <= 1 && gk->n == 1 && gk->s[ks][0] == 1) {
    emit_pack_transpose(e, sdst, src, gw, ks, LLVMBuildAdd(b, w0, ws, ""), valid, k0, kc, W,
                        false, name);
  } else if (ks == 0 && conv_run(e->d, &e->p) &&
             (e->p.K <= e->p.kc || e->p.kc % conv_run(e->d, &e->p) == 0)) {
    /* a conv's patches: each contiguous run of K (one window row's features, one position's
       with padding) transposed in vector chunks like a contiguous-k operand; K blocks start at
       run boundaries (make_plan) */
    int64_t run = conv_run(e->d, &e->p);
    loop lr;
    snprintf(nm, sizeof nm, "%s.run", name);
    LLVMValueRef r0 = loop_open(e, &lr, ci(e, 0), kc, nm);
    emit_pack_transpose(e, gep(e, e->T, sdst, LLVMBuildMul(b, r0, ci(e, W), "")), src, gw, ks,
                        LLVMBuildAdd(b, w0, ws, ""), valid, LLVMBuildAdd(b, k0, r0, ""),
                        imin(e, ci(e, run), LLVMBuildSub(b, kc, r0, "")), W, bounded, name);
    loop_close(e, &lr, step(e, r0, run));
  } else {
    /* any layout: element by element, k innermost (contiguous when k has the smaller stride);
       with bounds, each element's position checked (its row's part once per row) */
    snprintf(nm, sizeof nm, "%s.j", name);
    LLVMValueRef j = loop_open(e, &lj, ci(e, 0), valid, nm);
    LLVMValueRef row = LLVMBuildAdd(b, w0, LLVMBuildAdd(b, ws, j, ""), "");
    LLVMValueRef jsrc = gep(e, e->S, src, grp_off(e, gw, 0, row));
    LLVMValueRef jdst = gep(e, e->T, sdst, j), rp[IR_CONV_MAX_SPATIAL];
    if (bounded)
      bound_rows(e, row, rp);
    snprintf(nm, sizeof nm, "%s.k", name);
    LLVMValueRef k = loop_open(e, &lk, ci(e, 0), kc, nm);
    LLVMValueRef kk = LLVMBuildAdd(b, k0, k, "");
    LLVMValueRef xp = gep(e, e->S, jsrc, grp_off(e, gk, ks, kk));
    LLVMValueRef x = bounded ? load_if(e, xp, bound_inside(e, rp, kk))
                             : widen(e, load(e, e->S, xp, esize(e, e->S)));
    store(e, x, gep(e, e->T, jdst, LLVMBuildMul(b, k, ci(e, W), "")), esize(e, e->T));
    loop_close(e, &lk, step(e, k, 1));
    loop_close(e, &lj, step(e, j, 1));
    /* zero the padding columns of the last strip */
    snprintf(nm, sizeof nm, "%s.z", name);
    j = loop_open(e, &lj, valid, ci(e, W), nm);
    jdst = gep(e, e->T, sdst, j);
    snprintf(nm, sizeof nm, "%s.zk", name);
    k = loop_open(e, &lk, ci(e, 0), kc, nm);
    store(e, LLVMConstNull(e->T), gep(e, e->T, jdst, LLVMBuildMul(b, k, ci(e, W), "")),
          esize(e, e->T));
    loop_close(e, &lk, step(e, k, 1));
    loop_close(e, &lj, step(e, j, 1));
  }
  loop_close(e, &ls, step(e, ws, W));
}

/* acc += a * b on vectors of the accumulator type: one vfmadd where the target has FMA, a
   multiply and an add where it has not (llvm.fma would become a libm call per lane there). */
static LLVMValueRef madd(mm *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef acc) {
  if (e->T == e->f32 || e->T == e->f64) {
    LLVMValueRef args[3] = {a, b, acc};
    LLVMTypeRef t = e->VT;
    return call_intrinsic(e, "llvm.fmuladd", &t, 1, args, 3);
  }
  return LLVMBuildAdd(e->b, acc, LLVMBuildMul(e->b, a, b, ""), "");
}

static LLVMValueRef vadd(mm *e, LLVMValueRef a, LLVMValueRef b) {
  return e->T == e->f32 || e->T == e->f64 ? LLVMBuildFAdd(e->b, a, b, "")
                                          : LLVMBuildAdd(e->b, a, b, "");
}

/* The register tile: MR x NV accumulator vectors over kc steps of the packed strips, left in
   acc[i * nv + v]. */
static void emit_microkernel(mm *e, LLVMValueRef ap, LLVMValueRef bp, LLVMValueRef kc,
                             LLVMValueRef *acc) {
  LLVMBuilderRef b = e->b;
  int mr = e->p.mr, nv = e->p.nv, vw = e->p.vw, nr = e->p.nr, na = mr * nv;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b), head = block(e, "mk.head"),
                    body = block(e, "mk.body"), done = block(e, "mk.exit");
  LLVMBuildBr(b, head);
  LLVMPositionBuilderAtEnd(b, head);
  LLVMValueRef k = LLVMBuildPhi(b, e->i64, "k"), zero = ci(e, 0), vzero = LLVMConstNull(e->VT);
  LLVMAddIncoming(k, &zero, &pre, 1);
  LLVMValueRef phis[64];
  for (int a = 0; a < na; a++) {
    phis[a] = LLVMBuildPhi(b, e->VT, "acc");
    LLVMAddIncoming(phis[a], &vzero, &pre, 1);
  }
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, k, kc, ""), body, done);
  LLVMPositionBuilderAtEnd(b, body);
  LLVMValueRef arow = gep(e, e->T, ap, LLVMBuildMul(b, k, ci(e, mr), ""));
  LLVMValueRef brow = gep(e, e->T, bp, LLVMBuildMul(b, k, ci(e, nr), ""));
  LLVMValueRef bv[8], next[64];
  for (int v = 0; v < nv; v++)
    bv[v] = load(e, e->VT, gep(e, e->T, brow, ci(e, v * vw)), valign(e));
  for (int i = 0; i < mr; i++) {
    LLVMValueRef s = splat(e, load(e, e->T, gep(e, e->T, arow, ci(e, i)), esize(e, e->T)), vw);
    for (int v = 0; v < nv; v++)
      next[i * nv + v] = madd(e, s, bv[v], phis[i * nv + v]);
  }
  LLVMValueRef k1 = step(e, k, 1);
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
  LLVMBuildBr(b, head);
  LLVMAddIncoming(k, &k1, &latch, 1);
  for (int a = 0; a < na; a++)
    LLVMAddIncoming(phis[a], &next[a], &latch, 1);
  LLVMPositionBuilderAtEnd(b, done);
  for (int a = 0; a < na; a++)
    acc[a] = phis[a];
}

/* Per-call values the tile store needs. */
typedef struct tile_ctx {
  LLVMValueRef bufs, out, cbuf; /* cbuf: scratch partial sums (c_scratch) */
  LLVMValueRef tile;            /* alloca of mr * nr T */
  LLVMValueRef orow0, ocol0;    /* the tile's first output row (global) and column */
  LLVMValueRef crow0, ccol0;    /* its first row and column in the scratch partial sums */
  LLVMValueRef obase, pbase;    /* its first element in out, in the partial sums (or NULL) */
  int64_t pld;                  /* row length of the partial sums */
  LLVMValueRef mv, nvalid;      /* valid rows and columns of the tile */
  LLVMValueRef first, last;     /* i1: first / last K block */
} tile_ctx;

/* A vector of a finished tile is at row i (of the tile) and column offset cofs (i64 values);
   mask: its lanes inside N, NULL when all are (a whole tile needs no masking). */

/* Where the vector's partial sums over earlier K blocks live, or NULL (a single K block). */
static LLVMValueRef partial_ptr(mm *e, const tile_ctx *t, LLVMValueRef i, LLVMValueRef cofs) {
  if (!t->pbase)
    return NULL;
  return gep(e, e->T, t->pbase,
             LLVMBuildAdd(e->b, LLVMBuildMul(e->b, i, ci(e, t->pld), ""), cofs, ""));
}

/* x plus the partial sums of earlier K blocks (no memory access at all in the first block). */
static LLVMValueRef add_partial(mm *e, const tile_ctx *t, LLVMValueRef x, LLVMValueRef i,
                                LLVMValueRef cofs, LLVMValueRef mask) {
  LLVMValueRef pp = partial_ptr(e, t, i, cofs);
  if (!pp)
    return x;
  LLVMValueRef pm = splat(e, LLVMBuildNot(e->b, t->first, ""), e->p.vw);
  if (mask)
    pm = LLVMBuildAnd(e->b, mask, pm, "");
  return vadd(e, x, masked_load(e, e->VT, pp, pm, esize(e, e->T)));
}

/* Keeps x as the partial sums for the next K block. */
static void store_partial(mm *e, const tile_ctx *t, LLVMValueRef x, LLVMValueRef i,
                          LLVMValueRef cofs, LLVMValueRef mask) {
  LLVMValueRef pp = partial_ptr(e, t, i, cofs);
  if (!pp)
    return;
  if (mask)
    masked_store(e, x, pp, mask, esize(e, e->T));
  else
    store(e, x, pp, esize(e, e->T));
}

/* The finished sums x through the epilogue into out. */
static void store_final(mm *e, const tile_ctx *t, LLVMValueRef x, LLVMValueRef i, LLVMValueRef cofs,
                        LLVMValueRef mask) {
  LLVMBuilderRef b = e->b;
  const plan *p = &e->p;
  int vw = p->vw;
  LLVMTypeRef OS = stype(e, p->out_dt);
  LLVMValueRef y = to_dot_value(e, x);
  if (e->d->epilogue) {
    cg_mm_epi ep = {b,
                    t->bufs,
                    y,
                    LLVMBuildAdd(b, t->orow0, i, ""),
                    LLVMBuildAdd(b, t->ocol0, cofs, ""),
                    mask ? mask : LLVMConstAllOnes(vec(e->i1, vw)),
                    (unsigned)vw};
    y = e->d->epilogue(e->d->epilogue_ctx, &ep);
    if (!y || LLVMTypeOf(y) != vec(ctype(e, p->out_dt), vw)) {
      e->fail = true;
      y = LLVMGetUndef(vec(ctype(e, p->out_dt), vw));
    }
  }
  LLVMValueRef op =
      gep(e, OS, t->obase, LLVMBuildAdd(b, LLVMBuildMul(b, i, ci(e, p->out_ld), ""), cofs, ""));
  if (mask)
    masked_store(e, to_storage(e, y), op, mask, esize(e, OS));
  else
    store(e, to_storage(e, y), op, esize(e, OS));
}

/* The tile's sums from the stack copy, vector by vector over rows x vectors, into the partial
   sums or (last K block) through the epilogue into out; edge: mask each vector's lanes to nvalid.
   Loops, not straight-line code: one copy of the epilogue instead of one per accumulator, which
   made LLVM spend most of a dot's compile on the store (W8's backward dot: 13 copies of a select
   chain); the stack round trip costs a few dozen loads per kc x MR x NR FMAs. */
static void emit_tile_rows(mm *e, const tile_ctx *t, LLVMValueRef rows, bool edge) {
  LLVMBuilderRef b = e->b;
  const plan *p = &e->p;
  int nv = p->nv, vw = p->vw, nr = p->nr;
  loop li, lv;
  LLVMValueRef i = loop_open(e, &li, ci(e, 0), rows, edge ? "st.i" : "sw.i");
  LLVMValueRef v = loop_open(e, &lv, ci(e, 0), ci(e, nv), edge ? "st.v" : "sw.v");
  LLVMValueRef cofs = LLVMBuildMul(b, v, ci(e, vw), "");
  LLVMValueRef mask = edge ? lane_mask(e, LLVMBuildSub(b, t->nvalid, cofs, ""), vw) : NULL;
  LLVMValueRef y =
      load(e, e->VT,
           gep(e, e->T, t->tile, LLVMBuildAdd(b, LLVMBuildMul(b, i, ci(e, nr), ""), cofs, "")),
           valign(e));
  y = add_partial(e, t, y, i, cofs, mask);
  LLVMBasicBlockRef fin = block(e, "st.final"), part = block(e, "st.partial"),
                    join = block(e, "st.join");
  LLVMBuildCondBr(b, t->last, fin, part);
  LLVMPositionBuilderAtEnd(b, part);
  store_partial(e, t, y, i, cofs, mask);
  LLVMBuildBr(b, join);
  LLVMPositionBuilderAtEnd(b, fin);
  store_final(e, t, y, i, cofs, mask);
  LLVMBuildBr(b, join);
  LLVMPositionBuilderAtEnd(b, join);
  loop_close(e, &lv, step(e, v, 1));
  loop_close(e, &li, step(e, i, 1));
}

/* The stack copy of a finished tile at t->tile through emit_tile_rows: unmasked when the tile is
   whole (the usual case), else masked to its valid rows and columns. */
static void emit_tile_copy_store(mm *e, const tile_ctx *t) {
  LLVMBuilderRef b = e->b;
  const plan *p = &e->p;
  int mr = p->mr, nr = p->nr;
  LLVMBasicBlockRef whole = block(e, "tile.whole"), edge = block(e, "tile.edge"),
                    done = block(e, "tile.done");
  LLVMValueRef full = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, t->mv, ci(e, mr), ""),
                                   LLVMBuildICmp(b, LLVMIntEQ, t->nvalid, ci(e, nr), ""), "");
  LLVMBuildCondBr(b, full, whole, edge);
  LLVMPositionBuilderAtEnd(b, whole);
  emit_tile_rows(e, t, ci(e, mr), false);
  LLVMBuildBr(b, done);
  LLVMPositionBuilderAtEnd(b, edge);
  emit_tile_rows(e, t, t->mv, true);
  LLVMBuildBr(b, done);
  LLVMPositionBuilderAtEnd(b, done);
}

/* Stores a finished register tile through a stack copy (emit_tile_copy_store). */
static void emit_tile_store(mm *e, const tile_ctx *t, LLVMValueRef *acc) {
  const plan *p = &e->p;
  int mr = p->mr, nv = p->nv, vw = p->vw, nr = p->nr;
  for (int a = 0; a < mr * nv; a++)
    store(e, acc[a], gep(e, e->T, t->tile, ci(e, a / nv * nr + a % nv * vw)), valign(e));
  emit_tile_copy_store(e, t);
}

/* Asks for the lines the tile's store will read or write while the micro-kernel runs: the rows
   of a tile are a row length apart in out, so the hardware prefetchers do not find them. */
static void emit_prefetch_tile(mm *e, const tile_ctx *t) {
  const plan *p = &e->p;
  LLVMTypeRef tys[1] = {e->ptr};
  LLVMValueRef base = t->pbase ? t->pbase : t->obase;
  LLVMTypeRef et = t->pbase ? e->T : stype(e, p->out_dt);
  int64_t ld = t->pbase ? t->pld : p->out_ld;
  for (int i = 0; i < p->mr; i++)
    for (int at = 0; at < 2; at++) {
      LLVMValueRef q = gep(e, et, base, ci(e, i * ld + (at ? p->nr - 1 : 0)));
      LLVMValueRef args[4] = {q, LLVMConstInt(e->i32, 1, 0), LLVMConstInt(e->i32, 3, 0),
                              LLVMConstInt(e->i32, 1, 0)};
      call_intrinsic(e, "llvm.prefetch", tys, 1, args, 4);
    }
}

static LLVMValueRef buf_ptr(mm *e, LLVMValueRef bufs, int i) {
  return load(e, e->ptr, gep(e, e->ptr, bufs, ci(e, i)), 8);
}

static void emit_body(mm *e) {
  LLVMBuilderRef b = e->b;
  const plan *p = &e->p;
  const cg_matmul_desc *d = e->d;
  LLVMValueRef bufs = LLVMGetParam(e->fn, 0), rb = LLVMGetParam(e->fn, 1),
               re = LLVMGetParam(e->fn, 2);
  LLVMBasicBlockRef entry = block(e, "entry");
  LLVMPositionBuilderAtEnd(b, entry);
  tile_ctx t;
  memset(&t, 0, sizeof t);
  t.bufs = bufs;
  LLVMValueRef lhs = buf_ptr(e, bufs, d->lhs_buf), rhs = buf_ptr(e, bufs, d->rhs_buf);
  t.out = buf_ptr(e, bufs, d->out_buf);
  LLVMValueRef scratch = buf_ptr(e, bufs, d->scratch_buf);
  LLVMValueRef ap = gep(e, e->i8, scratch, ci(e, (int64_t)p->a_off));
  LLVMValueRef bp = gep(e, e->i8, scratch, ci(e, (int64_t)p->b_off));
  t.cbuf = gep(e, e->i8, scratch, ci(e, (int64_t)p->c_off));
  t.tile = LLVMBuildArrayAlloca(b, e->T, ci(e, p->mr * p->nr), "tile");
  LLVMSetAlignment(t.tile, 64);
  if (p->M == 0 || p->N == 0 || p->B == 0) {
    LLVMBuildRetVoid(b);
    return;
  }

  /* chunks of rows, never across a batch */
  loop lr, ljc, lpc, lic, ljr, lir;
  LLVMValueRef r = loop_open(e, &lr, rb, re, "chunk");
  LLVMValueRef bi = LLVMBuildUDiv(b, r, ci(e, p->M), "batch");
  LLVMValueRef brow = LLVMBuildMul(b, bi, ci(e, p->M), "");
  LLVMValueRef m0 = LLVMBuildSub(b, r, brow, "m0");
  LLVMValueRef m1 = imin(e, imin(e, ci(e, p->M), LLVMBuildSub(b, re, brow, "")),
                         LLVMBuildAdd(b, m0, ci(e, p->rc), ""));
  LLVMValueRef lhs_b = gep(e, e->S, lhs, LLVMBuildAdd(b, grp_off(e, &p->bat, 0, bi), ci(e, d->lhs_offset), ""));
  LLVMValueRef rhs_b = gep(e, e->S, rhs, grp_off(e, &p->bat, 1, bi));

  LLVMValueRef jc = loop_open(e, &ljc, ci(e, 0), ci(e, p->N), "jc");
  LLVMValueRef nc = imin(e, ci(e, p->nc), LLVMBuildSub(b, ci(e, p->N), jc, ""));
  LLVMValueRef pc = loop_open(e, &lpc, ci(e, 0), ci(e, p->K > 0 ? p->K : 1), "pc");
  LLVMValueRef kc = imin(e, ci(e, p->kc), LLVMBuildSub(b, ci(e, p->K), pc, ""));
  t.first = LLVMBuildICmp(b, LLVMIntEQ, pc, ci(e, 0), "first");
  t.last = LLVMBuildICmp(b, LLVMIntSGE, LLVMBuildAdd(b, pc, ci(e, p->kc), ""), ci(e, p->K), "last");
  emit_pack(e, bp, rhs_b, &p->n, 1, jc, nc, pc, kc, p->nr, "pb");

  LLVMValueRef ic = loop_open(e, &lic, m0, m1, "ic");
  LLVMValueRef mc = imin(e, ci(e, p->mc), LLVMBuildSub(b, m1, ic, ""));
  emit_pack(e, ap, lhs_b, &p->m, 0, ic, mc, pc, kc, p->mr, "pa");

  LLVMValueRef jr = loop_open(e, &ljr, ci(e, 0), nc, "jr");
  t.nvalid = imin(e, ci(e, p->nr), LLVMBuildSub(b, nc, jr, ""));
  LLVMValueRef bstrip = gep(e, e->T, bp, LLVMBuildMul(b, jr, kc, ""));
  LLVMValueRef ir = loop_open(e, &lir, ci(e, 0), mc, "ir");
  t.mv = imin(e, ci(e, p->mr), LLVMBuildSub(b, mc, ir, ""));
  LLVMValueRef astrip = gep(e, e->T, ap, LLVMBuildMul(b, ir, kc, ""));
  LLVMValueRef acc[64];
  LLVMValueRef mrow = LLVMBuildAdd(b, ic, ir, "");
  t.orow0 = LLVMBuildAdd(b, brow, mrow, "");
  t.ocol0 = LLVMBuildAdd(b, jc, jr, "");
  t.crow0 = LLVMBuildSub(b, mrow, m0, "");
  t.ccol0 = jr;
  LLVMValueRef orow_at = LLVMBuildAdd(b, LLVMBuildMul(b, bi, ci(e, p->out_bs), ""),
                                      LLVMBuildMul(b, mrow, ci(e, p->out_ld), ""), "");
  t.obase = gep(e, stype(e, p->out_dt), t.out, LLVMBuildAdd(b, orow_at, t.ocol0, ""));
  t.pbase = NULL;
  if (p->c_in_out) {
    t.pbase = t.obase;
    t.pld = p->out_ld;
  } else if (p->c_scratch) {
    t.pbase = gep(e, e->T, t.cbuf,
                  LLVMBuildAdd(b, LLVMBuildMul(b, t.crow0, ci(e, p->c_ld), ""), t.ccol0, ""));
    t.pld = p->c_ld;
  }
  emit_prefetch_tile(e, &t);
  emit_microkernel(e, astrip, bstrip, kc, acc);
  emit_tile_store(e, &t, acc);
  loop_close(e, &lir, step(e, ir, p->mr));
  loop_close(e, &ljr, step(e, jr, p->nr));
  loop_close(e, &lic, step(e, ic, p->mc));
  loop_close(e, &lpc, step(e, pc, p->kc));
  loop_close(e, &ljc, step(e, jc, p->nc));
  loop_close(e, &lr, LLVMBuildAdd(b, brow, m1, ""));
  LLVMBuildRetVoid(b);
}

/* e for emitting d's code into m (make_plan done by the caller). */
static void mm_init(mm *e, LLVMModuleRef m, const cg_matmul_desc *d) {
  e->d = d;
  e->m = m;
  e->c = LLVMGetModuleContext(m);
  e->i1 = LLVMInt1TypeInContext(e->c);
  e->i8 = LLVMInt8TypeInContext(e->c);
  e->i16 = LLVMInt16TypeInContext(e->c);
  e->i32 = LLVMInt32TypeInContext(e->c);
  e->i64 = LLVMInt64TypeInContext(e->c);
  e->f32 = LLVMFloatTypeInContext(e->c);
  e->f64 = LLVMDoubleTypeInContext(e->c);
  e->half = LLVMHalfTypeInContext(e->c);
  e->ptr = LLVMPointerTypeInContext(e->c, 0);
  switch (e->p.dt) {
  case JIT_F64:
    e->T = e->f64;
    break;
  case JIT_I64:
    e->T = e->i64;
    break;
  case JIT_F32:
  case JIT_F16:
  case JIT_BF16:
    e->T = e->f32;
    break;
  default:
    e->T = e->i32;
    break;
  }
  e->VT = vec(e->T, e->p.vw);
  e->S = stype(e, e->p.dt);
}

jit_status cg_matmul_emit(LLVMModuleRef m, const char *name, const cg_matmul_desc *d) {
  mm e;
  memset(&e, 0, sizeof e);
  jit_status st = make_plan(d, &e.p);
  if (st != JIT_OK)
    return st;
  if (!m || !name)
    return jit_error(JIT_EINVAL, "matmul: no module or name");
  mm_init(&e, m, d);
  if (LLVMGetNamedFunction(m, name))
    return jit_error(JIT_EINVAL, "matmul: the module already has a function %s", name);
  LLVMTypeRef params[3] = {e.ptr, e.i64, e.i64};
  e.fn = LLVMAddFunction(m, name, LLVMFunctionType(LLVMVoidTypeInContext(e.c), params, 3, 0));
  if (!e.fn)
    return jit_error(JIT_ENOMEM, "matmul: out of memory");
  e.b = LLVMCreateBuilderInContext(e.c);
  if (!e.b)
    return jit_error(JIT_ENOMEM, "matmul: out of memory");
  emit_body(&e);
  LLVMDisposeBuilder(e.b);
  if (e.fail)
    return jit_error(JIT_EUNSUPPORTED, "matmul: %s: the epilogue gave no value of type <%d x %s>",
                     name, e.p.vw, jit_dtype_name(e.p.out_dt));
  return JIT_OK;
}

/* ---- the precompiled core's form of a dot (gemm_core.h) ------------------------------------------ */

/* The core's plan of d when it runs d with operands of dtype dt (and a d output of the same). */
static bool core_plan_of(const cg_matmul_desc *d, jit_dtype dt, plan *pp, gemm_core_plan *out) {
  plan p;
  if (make_plan(d, &p) != JIT_OK) {
    jit_error_clear();
    return false;
  }
  /* one stride per index group: the core's packers walk one dim each; a conv's view has more
     (and padding bounds), its packer is generated */
  if (p.dt != dt || p.out_dt != p.dt || d->lhs_view ||
      p.bat.n > 1 || p.m.n > 1 || p.n.n > 1 || p.k.n > 1 ||
      (d->vec_bytes != 32 && d->vec_bytes != 64) || p.mr != GEMM_CORE_MR_OF(d->vec_bytes) ||
      p.nr != GEMM_CORE_NR(d->vec_bytes, (int)csize(p.dt)))
    return false;
  *pp = p;
  *out = (gemm_core_plan){
      .B = p.B, .M = p.M, .N = p.N, .K = p.K,
      .lhs_bs = p.bat.n ? p.bat.s[0][0] : 0, .lhs_ms = p.m.n ? p.m.s[0][0] : 0,
      .lhs_ks = p.k.n ? p.k.s[0][0] : 0,
      .rhs_bs = p.bat.n ? p.bat.s[1][0] : 0, .rhs_ks = p.k.n ? p.k.s[1][0] : 0,
      .rhs_ns = p.n.n ? p.n.s[0][0] : 0,
      .out_bs = p.out_bs, .out_ld = p.out_ld,
      .kc = p.kc, .mc = p.mc, .nc = p.nc,
      .a_off = (int64_t)p.a_off, .b_off = (int64_t)p.b_off,
      .lhs_buf = d->lhs_buf, .rhs_buf = d->rhs_buf, .out_buf = d->out_buf,
      .scratch_buf = d->scratch_buf, .vec_bytes = d->vec_bytes};
  return true;
}

bool cg_matmul_core_plan(const cg_matmul_desc *d, gemm_core_plan *out) {
  plan p;
  return core_plan_of(d, d->lhs.dtype == JIT_F64 ? JIT_F64 : JIT_F32, &p, out);
}

bool cg_matmul_core_plan_bf16(const cg_matmul_desc *d, gemm_core_plan *out, gemm_core_sums *sums) {
  plan p;
  if (!core_plan_of(d, JIT_BF16, &p, out)) return false;
  *sums = (gemm_core_sums){.c_off = (int64_t)p.c_off, .c_ld = p.c_ld,
                           .rc = p.c_scratch ? p.rc : INT64_MAX / 4,
                           .pairs = d->bf16_dot && d->vec_bytes == 64,
                           .amx = d->vec_bytes == 64 && gemm_core_amx_fits(out) ? d->bf16_amx : 0};
  return true;
}

/* NAME.epi(bufs, tile, row, rows, col): the finished sums of one tile (the core's stack copy)
   through d's epilogue into the output, as emit_tile_rows does for the generated kernel. */
static LLVMValueRef emit_core_epilogue(mm *e, const char *name) {
  char epi_name[160];
  snprintf(epi_name, sizeof epi_name, "%s.epi", name);
  LLVMTypeRef params[5] = {e->ptr, e->ptr, e->i64, e->i64, e->i64};
  e->fn = LLVMAddFunction(e->m, epi_name,
                          LLVMFunctionType(LLVMVoidTypeInContext(e->c), params, 5, 0));
  LLVMSetLinkage(e->fn, LLVMInternalLinkage);
  cg_set_nounwind(e->fn);
  LLVMPositionBuilderAtEnd(e->b, block(e, "entry"));
  const plan *p = &e->p;
  tile_ctx t;
  memset(&t, 0, sizeof t);
  t.bufs = LLVMGetParam(e->fn, 0);
  t.tile = LLVMGetParam(e->fn, 1);
  t.orow0 = LLVMGetParam(e->fn, 2);
  t.mv = LLVMGetParam(e->fn, 3);
  t.ocol0 = LLVMGetParam(e->fn, 4);
  t.out = buf_ptr(e, t.bufs, e->d->out_buf);
  t.nvalid = imin(e, ci(e, p->nr), LLVMBuildSub(e->b, ci(e, p->N), t.ocol0, ""));
  t.first = LLVMConstInt(e->i1, 0, 0);
  t.last = LLVMConstInt(e->i1, 1, 0);
  LLVMValueRef at = LLVMBuildAdd(e->b, LLVMBuildMul(e->b, t.orow0, ci(e, p->out_ld), ""),
                                 t.ocol0, "");
  t.obase = gep(e, stype(e, p->out_dt), t.out, at);
  /* whole tiles unmasked, edges masked, as the generated kernel: a masked epilogue reads its
     operands lane by lane (epilogue.c's load_vec), which cost W5's 32x256 dots with an added
     operand an eighth of their time; its second copy is cheap to compile since the epilogue's
     functions are emitted on whole vectors (it doubled the LLVM work when tanh was emitted per
     lane: W5's 19 + 50 ms of 90) */
  emit_tile_copy_store(e, &t);
  LLVMBuildRetVoid(e->b);
  return e->fn;
}

jit_status cg_matmul_core_emit(LLVMModuleRef m, const char *name, const cg_matmul_desc *d) {
  gemm_core_plan cp;
  if (!m || !name || !cg_matmul_core_plan(d, &cp))
    return jit_error(JIT_EINVAL, "matmul: %s: not a dot the precompiled core runs",
                     name ? name : "(no name)");
  if (LLVMGetNamedFunction(m, name))
    return jit_error(JIT_EINVAL, "matmul: the module already has a function %s", name);
  mm e;
  memset(&e, 0, sizeof e);
  make_plan(d, &e.p);
  mm_init(&e, m, d);
  if (!(e.b = LLVMCreateBuilderInContext(e.c)))
    return jit_error(JIT_ENOMEM, "matmul: out of memory");
  int64_t fields[GEMM_CORE_PLAN_FIELDS];
  memcpy(fields, &cp, sizeof fields);
  LLVMValueRef vals[GEMM_CORE_PLAN_FIELDS];
  for (int i = 0; i < GEMM_CORE_PLAN_FIELDS; i++) vals[i] = ci(&e, fields[i]);
  char gname[160];
  snprintf(gname, sizeof gname, "%s.plan", name);
  LLVMValueRef g = LLVMAddGlobal(m, LLVMArrayType2(e.i64, GEMM_CORE_PLAN_FIELDS), gname);
  LLVMSetInitializer(g, LLVMConstArray2(e.i64, vals, GEMM_CORE_PLAN_FIELDS));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  LLVMSetAlignment(g, 8);
  LLVMValueRef epi = d->epilogue ? emit_core_epilogue(&e, name) : LLVMConstNull(e.ptr);
  LLVMTypeRef kparams[3] = {e.ptr, e.i64, e.i64};
  LLVMValueRef fn =
      LLVMAddFunction(m, name, LLVMFunctionType(LLVMVoidTypeInContext(e.c), kparams, 3, 0));
  const char *core = e.p.dt == JIT_F64 ? GEMM_CORE_F64_SYMBOL : GEMM_CORE_F32_SYMBOL;
  LLVMTypeRef cparams[5] = {e.ptr, e.ptr, e.i64, e.i64, e.ptr};
  LLVMTypeRef cty = LLVMFunctionType(LLVMVoidTypeInContext(e.c), cparams, 5, 0);
  LLVMValueRef cfn = LLVMGetNamedFunction(m, core);
  if (!cfn) cfn = LLVMAddFunction(m, core, cty);
  cg_set_nounwind(cfn);
  cg_set_nounwind(fn);
  e.fn = fn;
  LLVMPositionBuilderAtEnd(e.b, block(&e, "entry"));
  LLVMValueRef args[5] = {g, LLVMGetParam(fn, 0), LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), epi};
  LLVMBuildCall2(e.b, cty, cfn, args, 5, "");
  LLVMBuildRetVoid(e.b);
  LLVMDisposeBuilder(e.b);
  if (e.fail)
    return jit_error(JIT_EUNSUPPORTED, "matmul: %s: the epilogue gave no value of type <%d x %s>",
                     name, e.p.vw, jit_dtype_name(e.p.out_dt));
  return JIT_OK;
}
