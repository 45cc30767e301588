/* cache.c: a jit_fn's in-memory signature cache: a chained hash map from (arg dtypes, ranks,
 * shapes, shardings, static bytes) to the compiled signature; lookups read the args, allocating nothing. */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/transport.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"

/* FNV-1a, 64-bit: keys are a few dozen bytes, so a simple byte hash is fast enough. */
#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= FNV_PRIME;
  }
  return h;
}

static uint64_t mix_u64(uint64_t h, uint64_t v) { return mix_bytes(h, &v, sizeof v); }

uint64_t sig_hash(int n_args, jit_array *const *args, const void *static_args, size_t static_len) {
  uint64_t h = FNV_OFFSET;
  for (int i = 0; i < n_args; i++) {
    const jit_array *a = args[i];
    h = mix_u64(h, (uint64_t)a->dtype << 8 | (uint64_t)a->rank);
    for (int d = 0; d < a->rank; d++) h = mix_u64(h, (uint64_t)a->shape[d]);
    if (a->sharding) h = mix_u64(h, sharding_hash(a->sharding));
  }
  h = mix_u64(h, static_len);
  if (static_len) h = mix_bytes(h, static_args, static_len);
  return h;
}

static bool sig_matches(const jit_sig *s, uint64_t hash, int n_args, jit_array *const *args,
                        const void *static_args, size_t static_len) {
  if (s->hash != hash || s->n_args != n_args || s->static_len != static_len) return false;
  for (int i = 0; i < n_args; i++) {
    const jit_array *a = args[i];
    const ir_type *t = &s->arg_types[i];
    if (t->dtype != a->dtype || t->rank != a->rank) return false;
    for (int d = 0; d < a->rank; d++)
      if (t->dims[d] != a->shape[d]) return false;
    const jit_sharding *sh = s->arg_shardings ? s->arg_shardings[i] : NULL;
    if (!sharding_equal(sh, a->sharding)) return false;
  }
  return static_len == 0 || memcmp(s->static_bytes, static_args, static_len) == 0;
}

jit_sig *sig_cache_find(const sig_cache *c, uint64_t hash, int n_args, jit_array *const *args,
                        const void *static_args, size_t static_len) {
  if (c->n_buckets == 0) return NULL;
  for (jit_sig *s = c->buckets[hash & (c->n_buckets - 1)]; s; s = s->next)
    if (sig_matches(s, hash, n_args, args, static_args, static_len)) return s;
  return NULL;
}

jit_status sig_new(uint64_t hash, int n_args, jit_array *const *args, const void *static_args,
                   size_t static_len, jit_sig **out) {
  jit_status st = JIT_OK;
  *out = NULL;
  jit_sig *s = calloc(1, sizeof *s);
  if (!s) return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  s->hash = hash;
  s->n_args = n_args;
  atomic_init(&s->refs, 1);
  if (n_args) {
    s->arg_types = calloc((size_t)n_args, sizeof *s->arg_types);
    if (!s->arg_types) TRY(jit_error(JIT_ENOMEM, "jit_call: out of memory"));
    for (int i = 0; i < n_args; i++) array_type(args[i], &s->arg_types[i]);
    for (int i = 0; i < n_args; i++) {
      if (!args[i]->sharding) continue;
      if (!s->arg_shardings && !(s->arg_shardings = calloc((size_t)n_args, sizeof *s->arg_shardings)))
        TRY(jit_error(JIT_ENOMEM, "jit_call: out of memory"));
      s->arg_shardings[i] = sharding_ref(args[i]->sharding);
    }
  }
  if (static_len) {
    s->static_bytes = malloc(static_len);
    if (!s->static_bytes) TRY(jit_error(JIT_ENOMEM, "jit_call: out of memory"));
    memcpy(s->static_bytes, static_args, static_len);
    s->static_len = static_len;
  }
  *out = s;
  return JIT_OK;
fail:
  sig_free(s);
  return st;
}

void sig_free(jit_sig *s) {
  if (!s) return;
  exec_free(s->exe);
  ir_spmd_free(s->spmd);
  coll_transport_free(s->world);
  for (int i = 0; s->arg_shardings && i < s->n_args; i++) sharding_unref(s->arg_shardings[i]);
  free(s->arg_shardings);
  free(s->arg_types);
  free(s->static_bytes);
  ir_func_free(s->traced);
  ir_func_free(s->optimized);
  free(s);
}

void sig_unref(jit_sig *s) {
  if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) sig_free(s);
}

/* Doubles the bucket array, relinking every entry; keeps the load factor at most 1. */
static bool rehash(sig_cache *c, size_t n_buckets) {
  jit_sig **b = calloc(n_buckets, sizeof *b);
  if (!b) return false;
  for (int i = 0; i < c->n; i++) {
    jit_sig *s = c->order[i];
    size_t k = s->hash & (n_buckets - 1);
    s->next = b[k];
    b[k] = s;
  }
  free(c->buckets);
  c->buckets = b;
  c->n_buckets = n_buckets;
  return true;
}

jit_status sig_cache_insert(sig_cache *c, jit_sig *s) {
  if (c->n == INT32_MAX) return jit_error(JIT_ENOMEM, "jit_call: too many signatures");
  if (c->n == c->cap) {
    int cap = c->cap ? (c->cap > INT32_MAX / 2 ? INT32_MAX : c->cap * 2) : 8;
    jit_sig **o = realloc(c->order, (size_t)cap * sizeof *o);
    if (!o) return jit_error(JIT_ENOMEM, "jit_call: out of memory");
    c->order = o;
    c->cap = cap;
  }
  if ((size_t)c->n + 1 > c->n_buckets) {
    /* The order array already has room, so a failed rehash leaves the cache as it was. */
    if (!rehash(c, c->n_buckets ? c->n_buckets * 2 : 8))
      return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  }
  s->index = c->next_index++;
  c->order[c->n++] = s;
  size_t k = s->hash & (c->n_buckets - 1);
  s->next = c->buckets[k];
  c->buckets[k] = s;
  return JIT_OK;
}

void sig_cache_remove(sig_cache *c, jit_sig *s) {
  if (c->n_buckets == 0) return;
  for (jit_sig **p = &c->buckets[s->hash & (c->n_buckets - 1)]; *p; p = &(*p)->next) {
    if (*p != s) continue;
    *p = s->next;
    s->next = NULL;
    /* order is sorted by index: find s by bisection, close the gap */
    int lo = 0, hi = c->n - 1;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (c->order[mid]->index < s->index) lo = mid + 1;
      else hi = mid;
    }
    memmove(&c->order[lo], &c->order[lo + 1], (size_t)(c->n - lo - 1) * sizeof *c->order);
    c->n--;
    return;
  }
}

void sig_cache_free(sig_cache *c) {
  for (int i = 0; i < c->n; i++) sig_unref(c->order[i]);
  free(c->order);
  free(c->buckets);
  memset(c, 0, sizeof *c);
}
