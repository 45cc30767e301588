/* emit_c_matmul.c: the matmul kernel of exported C: the JIT's scheme (codegen/matmul.c) in plain
 * C with GCC/clang vector extensions: rhs packed in strips of NR = 2 vectors, lhs in strips of MR
 * rows, an MR x 2-vector register tile over KC steps (8 x 2 zmm with AVX-512, 6 x 2 ymm below,
 * as -march picks), partial sums over K blocks accumulated in the output. Operands are read
 * through tjit_grp index maps, so any dot_general (batch, free and contracted dims in any order)
 * is one packing away from the same tile.
 */
#include <string.h>

#include "codegen/kernel.h"
#include "runtime/error.h"

/* Shared by both element types. */
static const char common[] =
    "/* ---- matmul (packed, register-blocked; see tjit's codegen/matmul.c) ---- */\n"
    "#if defined(__AVX512F__)\n"
    "#define TJIT_VBYTES 64\n"
    "#define TJIT_MR 8\n"
    "#else\n"
    "#define TJIT_VBYTES 32\n"
    "#define TJIT_MR 6\n"
    "#endif\n"
    "#define TJIT_KC 256\n"
    "#define TJIT_MC (TJIT_MR * 16)\n"
    "/* dims of one operand that form one index of the product (row-major over them) */\n"
    "typedef struct tjit_grp { int n; int64_t ext[8], str[8]; } tjit_grp;\n"
    "static inline int64_t tjit_off(const tjit_grp *g, int64_t i) {\n"
    "  if (g->n == 1) return i * g->str[0];\n"
    "  int64_t o = 0;\n"
    "  for (int d = g->n - 1; d >= 0; d--) { o += i % g->ext[d] * g->str[d]; i /= g->ext[d]; }\n"
    "  return o;\n"
    "}\n"
    "static inline void *tjit_alloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }\n"
    "/* a dot: out[b][m][n] = sum_k lhs(b, m, k) * rhs(b, k, n) */\n"
    "typedef struct tjit_dot { const void *lhs, *rhs; void *out; int64_t B, M, N, K;\n"
    "  tjit_grp lb, lm, lk, rb, rk, rn; } tjit_dot;\n";

/* @T@: the element type, @S@: its suffix. */
static const char typed[] =
    "typedef @T@ tjit_v@S@ __attribute__((vector_size(TJIT_VBYTES)));\n"
    "static inline void tjit_tile_@S@(int64_t kc, const @T@ *ap, const @T@ *bp, @T@ *c,\n"
    "                                int64_t ldc, int mr, int nr, int first) {\n"
    "  enum { L = TJIT_VBYTES / sizeof(@T@), NR = 2 * L };\n"
    "  tjit_v@S@ acc[TJIT_MR][2];\n"
    "  for (int i = 0; i < TJIT_MR; i++) acc[i][0] = acc[i][1] = (tjit_v@S@){0};\n"
    "  for (int64_t k = 0; k < kc; k++) {\n"
    "    tjit_v@S@ b0, b1;\n"
    "    memcpy(&b0, bp + k * NR, sizeof b0);\n"
    "    memcpy(&b1, bp + k * NR + L, sizeof b1);\n"
    "#pragma GCC unroll 8\n"
    "    for (int i = 0; i < TJIT_MR; i++) {\n"
    "      @T@ a = ap[k * TJIT_MR + i];\n"
    "      acc[i][0] += a * b0;\n"
    "      acc[i][1] += a * b1;\n"
    "    }\n"
    "  }\n"
    "  if (mr == TJIT_MR && nr == NR) {\n"
    "#pragma GCC unroll 8\n"
    "    for (int i = 0; i < TJIT_MR; i++) {\n"
    "      if (!first) {\n"
    "        tjit_v@S@ c0, c1;\n"
    "        memcpy(&c0, c + i * ldc, sizeof c0);\n"
    "        memcpy(&c1, c + i * ldc + L, sizeof c1);\n"
    "        acc[i][0] += c0;\n"
    "        acc[i][1] += c1;\n"
    "      }\n"
    "      memcpy(c + i * ldc, &acc[i][0], sizeof acc[i][0]);\n"
    "      memcpy(c + i * ldc + L, &acc[i][1], sizeof acc[i][1]);\n"
    "    }\n"
    "    return;\n"
    "  }\n"
    "  @T@ t[TJIT_MR][NR];\n"
    "  memcpy(t, acc, sizeof t);\n"
    "  for (int i = 0; i < mr; i++)\n"
    "    for (int j = 0; j < nr; j++) c[i * ldc + j] = first ? t[i][j] : c[i * ldc + j] + t[i][j];\n"
    "}\n"
    "/* rows [m0, m1) of every batch of d; nonzero when out of memory */\n"
    "static int tjit_dot_@S@(const tjit_dot *d, int64_t m0, int64_t m1) {\n"
    "  enum { L = TJIT_VBYTES / sizeof(@T@), NR = 2 * L };\n"
    "  const @T@ *lhs = d->lhs, *rhs = d->rhs;\n"
    "  int64_t N = d->N, K = d->K, npad = (N + NR - 1) / NR * NR;\n"
    "  @T@ *bp = tjit_alloc((size_t)TJIT_KC * (size_t)npad * sizeof(@T@));\n"
    "  @T@ *ap = tjit_alloc((size_t)TJIT_MC * TJIT_KC * sizeof(@T@));\n"
    "  if (!bp || !ap) { free(bp); free(ap); return 1; }\n"
    "  for (int64_t b = 0; b < d->B; b++) {\n"
    "    const @T@ *l = lhs + tjit_off(&d->lb, b), *r = rhs + tjit_off(&d->rb, b);\n"
    "    @T@ *out = (@T@ *)d->out + b * d->M * N;\n"
    "    for (int64_t pc = 0; pc < K; pc += TJIT_KC) {\n"
    "      int64_t kc = K - pc < TJIT_KC ? K - pc : TJIT_KC;\n"
    "      for (int64_t k = 0; k < kc; k++) {\n"
    "        const @T@ *row = r + tjit_off(&d->rk, pc + k);\n"
    "        for (int64_t j = 0; j < npad; j++)\n"
    "          bp[(j / NR) * kc * NR + k * NR + j % NR] = j < N ? row[tjit_off(&d->rn, j)] : 0;\n"
    "      }\n"
    "      for (int64_t ic = m0; ic < m1; ic += TJIT_MC) {\n"
    "        int64_t mc = m1 - ic < TJIT_MC ? m1 - ic : TJIT_MC;\n"
    "        int64_t mpad = (mc + TJIT_MR - 1) / TJIT_MR * TJIT_MR;\n"
    "        for (int64_t i = 0; i < mpad; i++) {\n"
    "          @T@ *dst = ap + (i / TJIT_MR) * kc * TJIT_MR + i % TJIT_MR;\n"
    "          if (i >= mc) { for (int64_t k = 0; k < kc; k++) dst[k * TJIT_MR] = 0; continue; }\n"
    "          const @T@ *src = l + tjit_off(&d->lm, ic + i);\n"
    "          for (int64_t k = 0; k < kc; k++) dst[k * TJIT_MR] = src[tjit_off(&d->lk, pc + k)];\n"
    "        }\n"
    "        for (int64_t jr = 0; jr < N; jr += NR)\n"
    "          for (int64_t ir = 0; ir < mc; ir += TJIT_MR)\n"
    "            tjit_tile_@S@(kc, ap + (ir / TJIT_MR) * kc * TJIT_MR, bp + (jr / NR) * kc * NR,\n"
    "                          out + (ic + ir) * N + jr, N, (int)(mc - ir < TJIT_MR ? mc - ir : TJIT_MR),\n"
    "                          (int)(N - jr < NR ? N - jr : NR), pc == 0);\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  free(bp);\n"
    "  free(ap);\n"
    "  return 0;\n"
    "}\n";

static void put_typed(FILE *out, const char *t, const char *s) {
  for (const char *p = typed; *p;) {
    if (strncmp(p, "@T@", 3) == 0) {
      fputs(t, out);
      p += 3;
    } else if (strncmp(p, "@S@", 3) == 0) {
      fputs(s, out);
      p += 3;
    } else {
      fputc(*p++, out);
    }
  }
}

jit_status lp_emit_c_matmul(FILE *out) {
  fputs(common, out);
  put_typed(out, "float", "f32");
  put_typed(out, "double", "f64");
  if (ferror(out)) return jit_error(JIT_EIO, "codegen: writing C failed");
  return JIT_OK;
}
