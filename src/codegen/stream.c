/* stream.c: turns a kernel's vector stores into non-temporal ones (vmovntps) where their
 * alignment can be proven, after O3 has vectorized the kernel's loops.
 *
 * Why: a plain store first reads the line it writes (write-allocate), so a kernel that writes a
 * large array once moves 1.5x the bytes of a copy; streaming stores skip that read (a=2b over
 * 64 MiB: 3.35 -> 2.75 ms on 2 Zen 3 cores). Worth it only for outputs past the last-level cache
 * (they would not stay there anyway); the runtime picks which kernels (exec.c).
 *
 * The vectorizer cannot emit them itself (it refuses a nontemporal store whose scalar alignment
 * is below the vector's), and an under-aligned one is lowered to four movntsd. So the kernel is
 * marked here, store by store, after O3: a vector store of 16, 32 or 64 bytes is
 * marked when its address is base + offset with base = bufs[k] for a buffer k of the mask that
 * the kernel does not also read, and offset a proven multiple of the store's size (from the
 * index expression: constants, add, sub, or, mul, shl, extensions, selects, and induction phis).
 * The runtime hands the kernel those buffers 64-byte aligned (an unaligned one, a scan's slice,
 * through an aligned copy: exec_run.c aligned_copies), so there is no plain twin of it to compile.
 * Anything not proven stays a plain store, so a pattern this file does not know costs speed,
 * never correctness. Streaming stores are weakly ordered: the kernel ends with an sfence, before
 * the runtime's join publishes the output to other threads. */
#include "codegen/stream.h"

#include <stdint.h>
#include <string.h>

#include "runtime/error.h"

#define MAX_DEPTH 24 /* of the index expressions followed */

/* The largest power of two (bytes, capped at 64) that the integer v is known to be a multiple
   of, times `scale`; `cycle` is the phi being resolved (its own value counts as any multiple). */
static uint64_t known_multiple(LLVMValueRef v, uint64_t scale, LLVMValueRef cycle, int depth) {
  const uint64_t top = 64;
  if (scale >= top) return top;
  if (cycle && v == cycle) return top;
  if (depth > MAX_DEPTH) return scale;
  if (LLVMIsAConstantInt(v)) {
    unsigned long long c = LLVMConstIntGetZExtValue(v);
    if (c == 0) return top;
    uint64_t m = scale;
    while (m < top && !(c & 1)) {
      c >>= 1;
      m <<= 1;
    }
    return m;
  }
  if (!LLVMIsAInstruction(v)) return scale;
  LLVMOpcode op = LLVMGetInstructionOpcode(v);
  switch (op) {
  case LLVMAdd:
  case LLVMSub:
  case LLVMOr: /* the low bits of both are zero, so are those of the result */
  case LLVMSelect: {
    unsigned first = op == LLVMSelect ? 1 : 0;
    uint64_t a = known_multiple(LLVMGetOperand(v, first), scale, cycle, depth + 1);
    uint64_t b = known_multiple(LLVMGetOperand(v, first + 1), scale, cycle, depth + 1);
    return a < b ? a : b;
  }
  case LLVMMul: {
    uint64_t a = known_multiple(LLVMGetOperand(v, 0), 1, cycle, depth + 1);
    uint64_t b = known_multiple(LLVMGetOperand(v, 1), 1, cycle, depth + 1);
    uint64_t m = a * b * scale;
    return m > top ? top : m;
  }
  case LLVMShl: {
    LLVMValueRef s = LLVMGetOperand(v, 1);
    if (!LLVMIsAConstantInt(s)) return scale;
    unsigned long long sh = LLVMConstIntGetZExtValue(s);
    uint64_t m = known_multiple(LLVMGetOperand(v, 0), scale, cycle, depth + 1);
    for (unsigned long long i = 0; i < sh && m < top; i++) m <<= 1;
    return m;
  }
  case LLVMSExt:
  case LLVMZExt: return known_multiple(LLVMGetOperand(v, 0), scale, cycle, depth + 1);
  case LLVMPHI: {
    /* v is a multiple of m when every incoming value is, assuming v is (induction) */
    if (cycle) return scale; /* one phi at a time keeps this linear */
    uint64_t m = top;
    for (unsigned i = 0, n = LLVMCountIncoming(v); i < n && m > scale; i++) {
      uint64_t a = known_multiple(LLVMGetIncomingValue(v, i), scale, v, depth + 1);
      if (a < m) m = a;
    }
    return m;
  }
  default: return scale;
  }
}

/* Bytes of an element of a GEP's source type, 0 for types not indexed here. */
static uint64_t elem_bytes(LLVMTypeRef t) {
  switch (LLVMGetTypeKind(t)) {
  case LLVMIntegerTypeKind: {
    unsigned w = LLVMGetIntTypeWidth(t);
    return w % 8 == 0 && w <= 64 ? w / 8 : 0;
  }
  case LLVMHalfTypeKind:
  case LLVMBFloatTypeKind: return 2;
  case LLVMFloatTypeKind: return 4;
  case LLVMDoubleTypeKind: return 8;
  default: return 0;
  }
}

/* The bufs index k when p is the load of bufs[k] from the function's first parameter, else -1. */
static int buffer_index(LLVMValueRef p, LLVMValueRef bufs) {
  if (!LLVMIsALoadInst(p)) return -1;
  LLVMValueRef a = LLVMGetOperand(p, 0);
  if (a == bufs) return 0;
  if (!LLVMIsAGetElementPtrInst(a) || LLVMGetNumOperands(a) != 2 || LLVMGetOperand(a, 0) != bufs)
    return -1;
  LLVMValueRef idx = LLVMGetOperand(a, 1);
  if (!LLVMIsAConstantInt(idx)) return -1;
  long long i = LLVMConstIntGetSExtValue(idx);
  uint64_t es = elem_bytes(LLVMGetGEPSourceElementType(a));
  if (LLVMGetTypeKind(LLVMGetGEPSourceElementType(a)) == LLVMPointerTypeKind) es = 8;
  if (es == 0 || i < 0) return -1;
  long long byte = i * (long long)es;
  return byte % 8 == 0 && byte / 8 < 64 ? (int)(byte / 8) : -1;
}

/* For an address the kernel loads or stores through: its buffer index k (or -1) and the power of
   two (bytes) its offset from bufs[k] is a multiple of. */
static int address_base(LLVMValueRef ptr, LLVMValueRef bufs, uint64_t *align) {
  uint64_t m = 64;
  for (int depth = 0; depth < MAX_DEPTH; depth++) {
    int k = buffer_index(ptr, bufs);
    if (k >= 0) {
      *align = m;
      return k;
    }
    if (!LLVMIsAGetElementPtrInst(ptr) || LLVMGetNumOperands(ptr) != 2) return -1;
    uint64_t es = elem_bytes(LLVMGetGEPSourceElementType(ptr));
    if (es == 0 || (es & (es - 1))) return -1;
    uint64_t a = known_multiple(LLVMGetOperand(ptr, 1), es, NULL, 0);
    if (a < m) m = a;
    ptr = LLVMGetOperand(ptr, 0);
  }
  return -1;
}

jit_status cg_stream_stores(LLVMModuleRef m, const char *fn_name, uint64_t buf_mask, int *marked) {
  if (marked) *marked = 0;
  if (!m || !fn_name) return jit_error(JIT_EINVAL, "cg_stream_stores: NULL module or name");
  LLVMValueRef fn = LLVMGetNamedFunction(m, fn_name);
  if (!fn || LLVMCountParams(fn) < 1)
    return jit_error(JIT_EINVAL, "cg_stream_stores: no kernel %s", fn_name);
  const char *triple = LLVMGetTarget(m);
  if (!triple || strncmp(triple, "x86_64", 6) != 0) return JIT_OK; /* sfence and movnt are x86's */
  LLVMContextRef c = LLVMGetModuleContext(m);
  LLVMValueRef bufs = LLVMGetParam(fn, 0);
  unsigned nt_kind = LLVMGetMDKindIDInContext(c, "nontemporal", 11);
  LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(c), 1, 0));
  LLVMValueRef nt_md = LLVMMetadataAsValue(c, LLVMMDNodeInContext2(c, &one, 1));
  LLVMTargetDataRef td = LLVMGetModuleDataLayout(m);
  /* a buffer the kernel also reads (a softmax over rows too long for a row scratch array keeps
     exp(x - max) in its output and divides it in place) is left alone: streaming its stores
     would send them to memory just before they are read back (W2 0.45 -> 0.61 ns per element);
     the gain is only for lines written and not read */
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
      uint64_t align = 0;
      int k = LLVMIsALoadInst(in) ? address_base(LLVMGetOperand(in, 0), bufs, &align) : -1;
      if (k >= 0) buf_mask &= ~((uint64_t)1 << k);
    }
  int n = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb && buf_mask; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
      if (!LLVMIsAStoreInst(in) || LLVMGetVolatile(in)) continue;
      LLVMTypeRef vt = LLVMTypeOf(LLVMGetOperand(in, 0));
      if (LLVMGetTypeKind(vt) != LLVMVectorTypeKind) continue;
      unsigned long long size = LLVMStoreSizeOfType(td, vt);
      if (size != 16 && size != 32 && size != 64) continue;
      uint64_t align = 0;
      int k = address_base(LLVMGetOperand(in, 1), bufs, &align);
      if (k < 0 || !(buf_mask >> k & 1) || align < size) continue;
      LLVMSetAlignment(in, (unsigned)size);
      LLVMSetMetadata(in, nt_kind, nt_md);
      n++;
    }
  if (n > 0) {
    /* before every return: the stores must be visible before the caller's join says so */
    LLVMTypeRef vty = LLVMFunctionType(LLVMVoidTypeInContext(c), NULL, 0, 0);
    LLVMValueRef sfence = LLVMGetNamedFunction(m, "llvm.x86.sse.sfence");
    if (!sfence) sfence = LLVMAddFunction(m, "llvm.x86.sse.sfence", vty);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
    if (!b) return jit_error(JIT_ENOMEM, "cg_stream_stores: out of memory");
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      LLVMValueRef t = LLVMGetBasicBlockTerminator(bb);
      if (!t || LLVMGetInstructionOpcode(t) != LLVMRet) continue;
      LLVMPositionBuilderBefore(b, t);
      LLVMBuildCall2(b, vty, sfence, NULL, 0, "");
    }
    LLVMDisposeBuilder(b);
  }
  if (marked) *marked = n;
  return JIT_OK;
}
