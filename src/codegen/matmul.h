/* matmul.h: dot_general as generated code: a packed, register-blocked (GotoBLAS/BLIS) matmul
 * emitted into an LLVM module, with an elementwise epilogue fused into the store of each tile.
 *
 * The kernel has the uniform signature  void NAME(void *const *bufs, int64_t row_begin,
 * int64_t row_end)  and computes rows [row_begin, row_end) of the output viewed as
 * [batch * M, N] (M = product of lhs free dims, N = of rhs free dims, K = of contracting dims;
 * the dot's result layout [batch..., lhs free..., rhs free...] is exactly that view).
 *
 * Loops (per call):   rows in chunks (one batch at a time)
 *                       jc: N in NC blocks
 *                         pc: K in KC blocks    pack rhs KC x NC into NR-wide strips (scratch)
 *                           ic: M in MC blocks  pack lhs MC x KC into MR-tall strips (scratch)
 *                             jr, ir: MR x NR register tile, k-loop of broadcast-FMAs
 * f32 on AVX-512: MR x NR = 8 x 32 (16 zmm accumulators); on AVX2: 6 x 16 (12 ymm of the 16, as
 * BLIS's haswell kernel); block sizes follow (matmul.c says why).
 * The packers read any layout through strides (transposed operands, several contracting dims,
 * batch dims anywhere; contiguous-k operands through in-register transposes), widen f16/bf16 to
 * f32 and i8/u8 to i32, and zero-pad the edges, so the micro-kernel always runs whole tiles over
 * contiguous panels; only the stores of edge tiles are masked.
 * Partial sums over K blocks live in the output buffer when it holds the accumulator type
 * (f32 out of an f32 dot, ...), else in scratch; the epilogue runs once, after the last K block.
 *
 * Threads: each call packs the rhs panels it needs, so give each thread one contiguous range of
 * rows (not many small pieces): the packing is ~2 ms per 16 MiB of rhs, per call.
 *
 * Numerics: f32 (and f16/bf16, widened) accumulate in f32 with FMA, f64 in f64, integers in
 * i32 (i8, u8, i32) or i64, wrapping, which equals the interpreter's result after its wrap to the
 * dtype. The sum order of an element depends only on K (not on the row range or thread count),
 * so splitting rows over calls gives bit-identical results.
 */
#ifndef TJIT_CODEGEN_MATMUL_H
#define TJIT_CODEGEN_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Core.h>

#include "codegen/gemm_core.h"
#include "ir/ir.h"

/* What an epilogue sees for one vector of a finished tile: row `row`, columns col .. col+width-1
   of the output viewed as [batch * M, N]. Emit code with `b` (at its insertion point) and return
   the value to store into bufs[out_buf]: a <width x T'> vector where T' is the compute type of
   out_dtype (f32 for f16/bf16/f32, double, i8 for i8/u8, i32, i64, i1 for bool). */
typedef struct cg_mm_epi {
  LLVMBuilderRef b;
  LLVMValueRef bufs; /* ptr: the kernel's bufs parameter (load bufs[i] for epilogue inputs) */
  LLVMValueRef acc;  /* <width x T>: the dot's values, already rounded to its dtype; T is the
                        compute type of the dot's dtype (as for T' above) */
  LLVMValueRef row;  /* i64: output row, batch * M + m */
  LLVMValueRef col;  /* i64: first column, a multiple of width */
  LLVMValueRef mask; /* <width x i1>: lanes with col + lane < N; loads of inputs indexed by the
                        column must be masked with it (the last vector of a row runs past N) */
  unsigned width;    /* lanes: vec_bytes / the compute type's size (16 or 8 with AVX-512) */
} cg_mm_epi;

/* Returns the value to store, or NULL when it cannot emit the epilogue (the emitter then fails
   with JIT_EUNSUPPORTED). It may also store further outputs itself (masked with e->mask), and may
   add blocks (it must leave the builder where the code continues). It is called MR * 2 + 1
   times per kernel (17 with AVX-512, 13 with AVX2: each vector of a whole tile, with an all-true
   constant mask, and once for edge tiles), all in one function, so keep state that must be
   emitted once out of it. */
typedef LLVMValueRef (*cg_mm_epilogue_fn)(void *ctx, const cg_mm_epi *e);

typedef struct cg_matmul_desc {
  ir_type lhs, rhs;           /* the operands' types (same dtype, any numeric dtype) */
  ir_dot_dims dims;           /* the dot's batch and contracting dims */
  jit_dtype out_dtype;        /* dtype stored into bufs[out_buf] (the epilogue's result) */
  cg_mm_epilogue_fn epilogue; /* NULL: store the dot's value (out_dtype must be the dot's) */
  void *epilogue_ctx;
  int lhs_buf, rhs_buf; /* indices into bufs of the operands, */
  int out_buf;          /* of the output ([batch * M, N] dense, row-major), */
  int scratch_buf;      /* and of this thread's scratch (see cg_matmul_scratch_bytes) */
  int vec_bytes;        /* vector registers to block for: 64, 32 or 16 (the target's) */
  bool bf16_dot;        /* bf16 operands may be multiplied by vdpbf16ps (the target has it; only
                           the precompiled core does: cg_matmul_core_plan_bf16) */
  int bf16_amx;         /* a gemm_amx_mode: bf16 operands may be multiplied by AMX tiles, or by
                           their C model (the core only; takes precedence over bf16_dot) */
  bool bf16_cvt;        /* the target has AVX-512 BF16: a bf16 epilogue may round by
                           vcvtneps2bf16 (core_dot.c, where the host has it too) */
  bool lhs_view;        /* the lhs is read through lhs_strides (elements, one per lhs dim; they
                           may overlap), not as a dense row-major array: a conv's im2col view */
  int64_t lhs_strides[IR_MAX_RANK];
  int64_t out_batch_stride; /* elements between the output's batches, 0: dense (M * N); with */
  int64_t out_ld;           /* elements between its rows, 0: N, a grouped conv's output
                               [M, groups x N] (batch = group) is a strided view; no epilogue */
  /* A grouped conv's group (lhs_view only; 0: none): the dot's first batch dim has no dim in
     the lhs view (which would need rank 9 for 3 spatial dims); group g of the lhs starts
     g * lhs_group_stride elements in, and dims.lhs_batch[0] is ignored. */
  int64_t lhs_group_stride;
  /* A conv's padding read as zeros (lhs_view only): every view address is offset by lhs_offset
     elements (minus the low pads' elements), and for each of the n_bounds spatial dims the
     lhs position  index(m_dim) * m_mul + index(k_dim) * k_mul - lo  (view dims: an output
     position in M, a window offset in K) must lie in [0, size), else the element reads as 0. */
  int64_t lhs_offset;
  int n_bounds;
  struct cg_view_bound {
    int m_dim, k_dim;
    int64_t m_mul, k_mul, lo, size;
  } bounds[IR_CONV_MAX_SPATIAL];
} cg_matmul_desc;

/* Fills d for a dot of lhs x rhs with the default buffer layout
     bufs = lhs, rhs, [n_epi epilogue buffers], out, scratch
   (lhs_buf 0, rhs_buf 1, out_buf 2 + n_epi, scratch_buf 3 + n_epi), no epilogue, out_dtype =
   the operands' dtype, and the given vec_bytes (cg_jit_target(jit)->vector_bytes: the tile's
   size must be the same where the runtime plans a dot and where codegen emits it). Any vec_bytes
   runs correctly on any x86-64 host (LLVM splits wider vectors); the target's is the fast one. */
void cg_matmul_desc_init(cg_matmul_desc *d, const ir_type *lhs, const ir_type *rhs,
                         const ir_dot_dims *dims, uint32_t n_epi, int vec_bytes);
/* The same for instruction `dot` of f: an IR_DOT, or an IR_CONV in GEMM form (ir_conv_is_gemm):
   M = batch x output positions and K = window positions x in features read through a strided
   view of the lhs (each (position, window offset) pair addresses lhs element position * stride +
   offset * dilation), N = out features, the result [batch, spatial..., feature] exactly the
   matmul's [M, N]. A conv with feature (batch) groups is a batched matmul over the groups: the
   lhs view's features (batch) and the rhs's out features split into (group, per group), and the
   output written through out_batch_stride and out_ld. */
void cg_matmul_desc_from_ir(cg_matmul_desc *d, const ir_func *f, ir_ref dot, uint32_t n_epi,
                            int vec_bytes);

/* The problem's sizes: batch, M, N, K. JIT_EINVAL (with a message) for an invalid desc. */
jit_status cg_matmul_shape(const cg_matmul_desc *d, int64_t *batch, int64_t *m, int64_t *n,
                           int64_t *k);
/* True when each output element is stored once, after its epilogue reads its operands (no
   partial sums kept in the output between K blocks): what writing the output over a buffer the
   epilogue reads at the same element needs. False for an invalid desc. */
bool cg_matmul_stores_once(const cg_matmul_desc *d);

/* The rows of a whole call, [0, batch * M): the range the runtime splits over threads, best in
   pieces that are multiples of cg_matmul_row_grain (a register tile's height, or a cache block's
   when rows are many); any split is correct. 0 for an invalid desc. */
int64_t cg_matmul_rows(const cg_matmul_desc *d);
int64_t cg_matmul_row_grain(const cg_matmul_desc *d);

/* Bytes of scratch one call needs, the same for any row range (up to ~4.3 MiB for f32 at the
   default block sizes; less for small operands; 0 for an invalid desc). The block must be
   64-byte aligned. Every thread running the kernel at the same time needs its own: the caller
   passes each its own bufs array whose scratch_buf entry points to its own block. The kernel
   never allocates; the content need not be initialised or kept between calls, so one block per
   thread can serve every dot kernel of an executable (size it for the largest). */
size_t cg_matmul_scratch_bytes(const cg_matmul_desc *d);

/* Adds `void NAME(void *const *bufs, int64_t row_begin, int64_t row_end)` to m (built in
   LLVMGetModuleContext(m)). The function is external; optimise the module with cg_optimize.
   JIT_EINVAL for an invalid desc, JIT_EUNSUPPORTED when the epilogue returns NULL or a value of
   the wrong type, JIT_ENOMEM. On failure the function may be left half-built in m: drop m. */
jit_status cg_matmul_emit(LLVMModuleRef m, const char *name, const cg_matmul_desc *d);

/* The precompiled core's plan for d (gemm_core.h), when the core runs it: f32 or f64 operands
   and output, 32-byte vectors (the core's tile), one stride per batch, M, N and K group, not a
   conv's lhs view. */
bool cg_matmul_core_plan(const cg_matmul_desc *d, gemm_core_plan *out);
/* The same for a dot of bf16 operands and output (tjit_gemm_core_bf16), with where its partial
   sums live; false when the core does not run d. */
bool cg_matmul_core_plan_bf16(const cg_matmul_desc *d, gemm_core_plan *out, gemm_core_sums *sums);
/* Adds `void NAME(void *const *bufs, int64_t row_begin, int64_t row_end)` as cg_matmul_emit does,
   as a call of the precompiled core with d's plan and d's epilogue emitted per tile (NAME.epi):
   the same results, bit for bit, for a fraction of LLVM's work. JIT_EINVAL when
   cg_matmul_core_plan is false; the rest as cg_matmul_emit. */
jit_status cg_matmul_core_emit(LLVMModuleRef m, const char *name, const cg_matmul_desc *d);

/* The pass pipeline for a module holding one matmul kernel: default<O1> (with the context's
   SLP, no loop vectorizer or unroller), which keeps the same 6x16 FMA loop as O3 for less work.
   A lighter one (sroa, early-cse, instcombine, simplifycfg) cut W4's and W8's LLVM work by a
   third (callgrind: 363 M -> 279 M, 1303 M -> 824 M instructions) with the same inner loop, but
   W4 ran 25% slower warm (130 -> 165 ms, alternating runs): the loops around the micro-kernel
   (packing, tile addressing) need O1's loop passes. */
#define CG_MATMUL_PIPELINE "default<O1>"

#endif /* TJIT_CODEGEN_MATMUL_H */
