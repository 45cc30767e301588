/* pipeline.c: the optimization pipeline (which passes run, in which order, each switchable and
 * verified), and the rebuild helpers every pass uses to rewrite a function.
 *
 *   traced fn
 *      |
 *      v
 *   canonicalize   fold constants, drop identities (x+0, x*1, neg neg), collapse chains of
 *      |           reshape/transpose/broadcast, erase what that left dead
 *      v
 *   cse            one instruction per distinct (op, type, operands, attributes)
 *      |
 *      v
 *   canonicalize   merged operands expose more rules: max(x,x), select(p,x,x)
 *      |
 *      v
 *   dce            keep only what a result depends on (a no-op after canonicalize; it keeps the
 *      |           pipeline tidy when canonicalize is switched off)
 *      v
 *   windows        a reduce_window of a small window as the sum / max / min of strided slices
 *      |           of its padded operand (one fused loop)
 *      v
 *   depthwise      a depthwise conv of a small window (or one of 1-4 input features) as the
 *      |           sum of strided slices of its padded lhs times filter rows (one fused loop,
 *      |           vectors across features)
 *      v
 *   conv_layout    each float conv in the GEMM's form: lhs dilation as a PAD, result as
 *      |           [batch, spatial..., feature] then transposed back
 *      v
 *   reduce_split   a long reduction into few outputs as two: the first keeps leading reduced
 *      |           axes (rows for the threads), the second sums those
 *      v
 *   optimized fn   (ir_verify after every pass when asked, naming the pass)
 *
 * Glossary (used in every pass): fn = ir_func; ins = instruction (ir_ins); ref = an ins's
 * index in its fn, which is also its SSA value; ty = index of an interned ir_type, so equal
 * types have equal ty; op = ir_op; map = old ref -> new ref while a pass rebuilds a fn.
 */
#include "ir/passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/profile.h"

const char *const pass_names[PASS_COUNT] = {
#define PASS_NAME(name, NAME) #name,
    PASS_DEF(PASS_NAME)
#undef PASS_NAME
};

typedef jit_status (*pass_fn)(ir_func *f);
static const pass_fn pass_fns[PASS_COUNT] = {
#define PASS_FN(name, NAME) pass_##name,
    PASS_DEF(PASS_FN)
#undef PASS_FN
};

/* ---- rebuilding ------------------------------------------------------------------------------ */

ir_func *pass_rebuild_begin(const ir_func *f, ir_ref *map, const char *pass) {
  ir_func *nf = ir_func_new(f->name);
  if (!nf) goto oom;
  /* Same types at the same indices: an ins's ty is then valid in both fns, no translation. */
  if (f->n_types) {
    nf->types = malloc(f->n_types * sizeof *nf->types);
    if (!nf->types) goto oom;
    memcpy(nf->types, f->types, f->n_types * sizeof *nf->types);
    nf->n_types = nf->cap_types = f->n_types;
  }
  for (uint32_t i = 0; i < f->n_params; i++) {
    map[i] = ir_emit_param(nf, f->ins[i].ty);
    if (map[i] == IR_NOREF) goto oom;
  }
  return nf;
oom:
  ir_func_free(nf);
  jit_error(JIT_ENOMEM, "%s: out of memory rebuilding @%s", pass, f->name);
  return NULL;
}

jit_status pass_rebuild_end(ir_func *f, ir_func *nf, const ir_ref *map, const char *pass) {
  if (nf->oom) goto oom;
  ir_ref *res = NULL;
  if (f->n_results) {
    res = malloc(f->n_results * sizeof *res);
    if (!res) goto oom;
    for (uint32_t i = 0; i < f->n_results; i++) res[i] = map[f->results[i]];
  }
  jit_status st = ir_set_results(nf, f->n_results, res);
  free(res);
  if (st != JIT_OK) goto oom;
  if (!nf->n_bodies) ir_move_bodies(nf, f); /* the rebuilt SCANs keep their body indices */
  ir_func_replace(f, nf);
  return JIT_OK;
oom:
  ir_func_free(nf);
  return jit_error(JIT_ENOMEM, "%s: out of memory rebuilding @%s", pass, f->name);
}

ir_ref pass_emit_inferred(ir_func *nf, const char *pass, ir_op op, uint32_t n, const ir_ref *args,
                          const ir_attr *attr, ir_loc loc) {
  const ir_type *t[3] = {NULL, NULL, NULL};
  if (n > 3) {
    jit_error(JIT_EINTERNAL, "%s: %s with %u operands", pass, ir_op_name[op], n);
    return IR_NOREF;
  }
  for (uint32_t k = 0; k < n; k++) {
    if (args[k] == IR_NOREF) return IR_NOREF;
    t[k] = ir_type_of(nf, args[k]);
  }
  ir_type out;
  char why[256];
  if (ir_infer_type(op, n, t, attr, NULL, &out, why, sizeof why) != JIT_OK) {
    jit_error(JIT_EINTERNAL, "%s: %s: %s", pass, ir_op_name[op], why);
    return IR_NOREF;
  }
  ir_ty ty = ir_type_intern(nf, &out);
  return ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, op, ty, n, args, attr, loc);
}

bool pass_map_args(ir_func *nf, const ir_ins *in, const ir_ref *map, ir_ref **buf, uint32_t *cap) {
  if (in->n_args > *cap) {
    ir_ref *a = realloc(*buf, in->n_args * sizeof *a);
    if (!a) {
      nf->oom = true;
      return false;
    }
    *buf = a;
    *cap = in->n_args;
  }
  for (uint32_t k = 0; k < in->n_args; k++) (*buf)[k] = map[in->args[k]];
  return true;
}

jit_status pass_rewrite_each(ir_func *f, const char *pass, pass_select_fn want, pass_rewrite_fn rewrite) {
  bool any = false;
  for (uint32_t i = f->n_params; i < f->n_ins && !any; i++) any = want(f, &f->ins[i]);
  if (!any) return JIT_OK;
  ir_ref *map = malloc(f->n_ins * sizeof *map);
  if (!map) return jit_error(JIT_ENOMEM, "%s: out of memory", pass);
  ir_func *nf = pass_rebuild_begin(f, map, pass);
  if (!nf) {
    free(map);
    return JIT_ENOMEM;
  }
  ir_ref *args = NULL;
  uint32_t cap = 0;
  jit_status st = JIT_OK;
  for (uint32_t i = f->n_params; i < f->n_ins && st == JIT_OK; i++) {
    const ir_ins *in = &f->ins[i];
    if (!pass_map_args(nf, in, map, &args, &cap)) break;
    bool mine = want(f, in);
    map[i] = mine ? rewrite(nf, f, in, args) : ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    if (map[i] == IR_NOREF) st = nf->oom || !mine ? JIT_ENOMEM : JIT_EINTERNAL;
  }
  free(args);
  if (st == JIT_EINTERNAL) { /* a rule refused: a bug, its reason already in the last error */
    ir_func_free(nf);
  } else {
    st = pass_rebuild_end(f, nf, map, pass); /* reports nf's OOM */
  }
  free(map);
  return st;
}

/* ---- the pipeline ---------------------------------------------------------------------------- */

/* "canonicalize, cse, dce" (from the pass table) into buf, for error messages. */
static const char *known_passes(char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < PASS_COUNT && len < n; i++) {
    int k = snprintf(buf + len, n - len, "%s%s", i ? ", " : "", pass_names[i]);
    if (k < 0) break;
    len += (size_t)k;
  }
  return buf;
}

static int find_pass(const char *name, size_t n) {
  for (int i = 0; i < PASS_COUNT; i++)
    if (strlen(pass_names[i]) == n && memcmp(pass_names[i], name, n) == 0) return i;
  return -1;
}

/* Adds the passes named in $TJIT_DISABLE_PASSES to *disabled. An unknown name is an error
   rather than silently ignored: a misspelt pass would otherwise quietly stay on. */
static jit_status env_disabled(unsigned *disabled) {
  const char *s = getenv("TJIT_DISABLE_PASSES");
  if (!s) return JIT_OK;
  while (*s) {
    while (*s == ',' || *s == ' ' || *s == '\t') s++;
    const char *b = s;
    while (*s && *s != ',' && *s != ' ' && *s != '\t') s++;
    if (s == b) continue;
    int p = find_pass(b, (size_t)(s - b));
    if (p < 0) {
      char names[128];
      return jit_error(JIT_EINVAL, "TJIT_DISABLE_PASSES: unknown pass '%.*s' (passes: %s)",
                       (int)(s - b), b, known_passes(names, sizeof names));
    }
    *disabled |= 1u << p;
  }
  return JIT_OK;
}

static jit_status run(ir_func *f, pass_id p, unsigned disabled, bool verify) {
  if (disabled & (1u << p)) return JIT_OK;
  for (uint32_t i = 0; i < f->n_bodies; i++) { /* scan bodies first: what they need may shrink */
    jit_status st = run(f->bodies[i], p, disabled, verify);
    if (st != JIT_OK) return st;
  }
  uint64_t t0 = prof_begin();
  jit_status st = pass_fns[p](f);
  if (st == JIT_OK && verify) st = ir_verify(f, pass_names[p]);
  prof_end(t0, "pass", pass_names[p], 2,
           (prof_arg[]){{"fn", f->name ? f->name : "", 0}, {"instructions", NULL, f->n_ins}});
  return st;
}

jit_status ir_optimize(ir_func *f, unsigned disabled, bool verify) {
  jit_status st = env_disabled(&disabled);
  if (st != JIT_OK) return st;
  TRY(run(f, PASS_CANONICALIZE, disabled, verify));
  TRY(run(f, PASS_CSE, disabled, verify));
  TRY(run(f, PASS_CANONICALIZE, disabled, verify));
  TRY(run(f, PASS_HOIST, disabled, verify));
  TRY(run(f, PASS_DCE, disabled, verify));
  TRY(run(f, PASS_WINDOWS, disabled, verify));
  TRY(run(f, PASS_DEPTHWISE, disabled, verify));
  TRY(run(f, PASS_CONV_LAYOUT, disabled, verify));
  TRY(run(f, PASS_REDUCE_SPLIT, disabled, verify));
  return JIT_OK;
fail:
  return st;
}

jit_status ir_run_pass(ir_func *f, const char *name, bool verify) {
  if (strcmp(name, "pipeline") == 0) return ir_optimize(f, 0, verify);
  int p = find_pass(name, strlen(name));
  if (p < 0) {
    char names[128];
    return jit_error(JIT_EINVAL, "unknown pass '%s' (passes: %s; pipeline: all of them)", name,
                     known_passes(names, sizeof names));
  }
  return run(f, (pass_id)p, 0, verify);
}
