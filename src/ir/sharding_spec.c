/* sharding_spec.c: shardings (a mesh + one partition entry per array dim): the spec grammar, the
 * IR text form, shard geometry. Placing arrays on devices is the runtime's (runtime/sharding.c). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/mesh_spec.h"
#include "runtime/error.h"

/* snprintf that never writes past n and accumulates the total length like snprintf does. */
static void put(char *buf, size_t n, int *len, const char *fmt, ...) JIT_PRINTF(4, 5);
static void put(char *buf, size_t n, int *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t at = (size_t)*len;
  int k = vsnprintf(at < n ? buf + at : NULL, at < n ? n - at : 0, fmt, ap);
  va_end(ap);
  if (k > 0) *len += k;
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ---- making and comparing shardings ------------------------------------------------------------ */
static jit_status sharding_alloc(jit_mesh *m, const char *who, jit_sharding **out) {
  jit_sharding *s = calloc(1, sizeof *s);
  if (!s) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  atomic_init(&s->refs, 1);
  s->mesh = mesh_ref(m);
  *out = s;
  return JIT_OK;
}

jit_status sharding_new(jit_mesh *m, int rank, const uint8_t *n_dim_axes,
                        const uint8_t (*dim_axes)[JIT_MAX_MESH_AXES], jit_sharding **out) {
  static const char who[] = "sharding_new";
  *out = NULL;
  if (!m) return jit_error(JIT_EINVAL, "%s: mesh is NULL", who);
  if (rank < 0 || rank > JIT_MAX_RANK)
    return jit_error(JIT_EINVAL, "%s: rank %d is out of range 0..%d", who, rank, JIT_MAX_RANK);
  int used_by[JIT_MAX_MESH_AXES];
  for (int i = 0; i < JIT_MAX_MESH_AXES; i++) used_by[i] = -1;
  for (int d = 0; d < rank; d++) {
    if (n_dim_axes[d] > m->n_axes)
      return jit_error(JIT_EINVAL, "%s: dim %d names %d axes of a %d-axis mesh", who, d,
                       n_dim_axes[d], m->n_axes);
    for (int k = 0; k < n_dim_axes[d]; k++) {
      int a = dim_axes[d][k];
      if (a >= m->n_axes)
        return jit_error(JIT_EINVAL, "%s: dim %d names axis %d of a %d-axis mesh", who, d, a,
                         m->n_axes);
      if (used_by[a] >= 0)
        return jit_error(JIT_ESHARDING, "%s: mesh axis '%s' splits dims %d and %d", who,
                         m->names[a], used_by[a], d);
      used_by[a] = d;
    }
  }
  jit_sharding *s = NULL;
  jit_status st = sharding_alloc(m, who, &s);
  if (st != JIT_OK) return st;
  s->rank = rank;
  for (int d = 0; d < rank; d++) {
    s->n_dim_axes[d] = n_dim_axes[d];
    for (int k = 0; k < n_dim_axes[d]; k++) s->dim_axes[d][k] = dim_axes[d][k];
  }
  *out = s;
  return JIT_OK;
}

/* "character 'c'", "byte 0x07" or "end of the spec", for syntax errors. */
static void describe(char c, char *buf, size_t n) {
  if (c == '\0') snprintf(buf, n, "end of the spec");
  else if (c > ' ' && c < 127) snprintf(buf, n, "character '%c'", c);
  else snprintf(buf, n, "byte 0x%02x", (unsigned char)c);
}

/* The spec grammar (shared/API.md):  spec  := blank* | entry (',' entry)*
                                       entry := blank* ('_' | axis (blank* '+' blank* axis)*) blank*
   An all-blank spec has no entries (a rank-0 array). Syntax errors are JIT_EINVAL; naming an
   unknown axis or one axis twice is JIT_ESHARDING. Positions are 0-based byte offsets. */
jit_status sharding_parse(jit_mesh *m, const char *spec, const char *who, jit_sharding **out) {
  *out = NULL;
  if (!m) return jit_error(JIT_EINVAL, "%s: mesh is NULL", who);
  if (!spec) return jit_error(JIT_EINVAL, "%s: spec is NULL", who);
  uint8_t n_axes[JIT_MAX_RANK] = {0};
  uint8_t axes[JIT_MAX_RANK][JIT_MAX_MESH_AXES];
  int used_by[JIT_MAX_MESH_AXES];
  for (int i = 0; i < JIT_MAX_MESH_AXES; i++) used_by[i] = -1;
  const char *p = spec;
  int rank = 0;
  while (is_blank(*p)) p++;
  if (*p != '\0') {
    for (p = spec;; p++) { /* p is at the start of an entry (just past a ',' after the first) */
      while (is_blank(*p)) p++;
      int pos = (int)(p - spec);
      if (*p == ',' || *p == '\0')
        return jit_error(JIT_EINVAL, "%s: spec \"%s\": empty entry for dim %d at position %d",
                         who, spec, rank, pos);
      if (rank == JIT_MAX_RANK)
        return jit_error(JIT_EINVAL, "%s: spec \"%s\" has more than %d entries", who, spec,
                         JIT_MAX_RANK);
      for (bool first = true;; first = false) {
        pos = (int)(p - spec);
        if (!is_ident_start(*p)) {
          char what[32];
          describe(*p, what, sizeof what);
          return jit_error(JIT_EINVAL,
                           "%s: spec \"%s\": unexpected %s at position %d (expected a mesh axis "
                           "name%s)",
                           who, spec, what, pos, first ? " or '_'" : "");
        }
        const char *name = p;
        while (is_ident_char(*p)) p++;
        size_t len = (size_t)(p - name);
        bool underscore = len == 1 && name[0] == '_';
        while (is_blank(*p)) p++;
        if (underscore) {
          if (!first || *p == '+')
            return jit_error(JIT_EINVAL,
                             "%s: spec \"%s\": '_' (not sharded) cannot be combined with mesh "
                             "axes at position %d",
                             who, spec, pos);
          break;
        }
        int a = mesh_axis_index(m, name, len);
        if (a < 0) {
          char names[JIT_MAX_MESH_AXES * (JIT_MESH_AXIS_NAME_MAX + 2)];
          int nl = 0;
          names[0] = '\0';
          for (int i = 0; i < m->n_axes; i++)
            put(names, sizeof names, &nl, "%s%s", i ? ", " : "", m->names[i]);
          return jit_error(JIT_ESHARDING,
                           "%s: spec \"%s\": unknown mesh axis '%.*s' at position %d (the mesh "
                           "has axes %s)",
                           who, spec, (int)len, name, pos, names);
        }
        if (used_by[a] >= 0)
          return jit_error(JIT_ESHARDING,
                           "%s: spec \"%s\": mesh axis '%s' at position %d is used twice (dims "
                           "%d and %d); an axis may split only one dim, once",
                           who, spec, m->names[a], pos, used_by[a], rank);
        used_by[a] = rank;
        axes[rank][n_axes[rank]++] = (uint8_t)a;
        if (*p != '+') break;
        p++;
        while (is_blank(*p)) p++;
      }
      rank++;
      if (*p == '\0') break;
      if (*p != ',') {
        char what[32];
        describe(*p, what, sizeof what);
        return jit_error(JIT_EINVAL,
                         "%s: spec \"%s\": unexpected %s at position %d (expected ',', '+' or the "
                         "end)",
                         who, spec, what, (int)(p - spec));
      }
    }
  }
  jit_sharding *s = NULL;
  jit_status st = sharding_alloc(m, who, &s);
  if (st != JIT_OK) return st;
  s->rank = rank;
  for (int d = 0; d < rank; d++) {
    s->n_dim_axes[d] = n_axes[d];
    for (int k = 0; k < n_axes[d]; k++) s->dim_axes[d][k] = axes[d][k];
  }
  *out = s;
  return JIT_OK;
}

jit_status jit_sharding_create(const jit_mesh *m, const char *spec, jit_sharding **out) {
  if (!out) return jit_error(JIT_EINVAL, "jit_sharding_create: out is NULL");
  *out = NULL;
  /* The mesh is immutable; taking a reference only touches its counter. */
  return sharding_parse((jit_mesh *)m, spec, "jit_sharding_create", out);
}

jit_sharding *sharding_ref(jit_sharding *s) {
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  return s;
}

void sharding_unref(jit_sharding *s) {
  if (!s) return;
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  jit_mesh_free(s->mesh);
  free(s);
}

void jit_sharding_free(jit_sharding *s) { sharding_unref(s); }

bool sharding_equal(const jit_sharding *a, const jit_sharding *b) {
  if (a == b) return true;
  if (!a || !b || a->rank != b->rank || !mesh_equal(a->mesh, b->mesh)) return false;
  for (int d = 0; d < a->rank; d++) {
    if (a->n_dim_axes[d] != b->n_dim_axes[d]) return false;
    for (int k = 0; k < a->n_dim_axes[d]; k++)
      if (a->dim_axes[d][k] != b->dim_axes[d][k]) return false;
  }
  return true;
}

/* FNV-1a over the fields sharding_equal compares. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

uint64_t sharding_hash(const jit_sharding *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  if (!s) return h;
  const jit_mesh *m = s->mesh;
  h = fnv(h, &m->n_axes, sizeof m->n_axes);
  for (int i = 0; i < m->n_axes; i++) {
    h = fnv(h, &m->sizes[i], sizeof m->sizes[i]);
    h = fnv(h, m->names[i], strlen(m->names[i]) + 1);
  }
  h = fnv(h, m->device_ids, (size_t)m->n_devices * sizeof *m->device_ids);
  h = fnv(h, &s->rank, sizeof s->rank);
  for (int d = 0; d < s->rank; d++) {
    h = fnv(h, &s->n_dim_axes[d], 1);
    h = fnv(h, s->dim_axes[d], s->n_dim_axes[d]);
  }
  return h;
}

bool sharding_is_replicated(const jit_sharding *s) {
  for (int d = 0; d < s->rank; d++)
    if (s->n_dim_axes[d] > 0) return false;
  return true;
}

int sharding_format_spec(const jit_sharding *s, char *buf, size_t n) {
  int len = 0;
  if (n) buf[0] = '\0';
  for (int d = 0; d < s->rank; d++) {
    if (d) put(buf, n, &len, ",");
    if (s->n_dim_axes[d] == 0) put(buf, n, &len, "_");
    for (int k = 0; k < s->n_dim_axes[d]; k++)
      put(buf, n, &len, "%s%s", k ? "+" : "", s->mesh->names[s->dim_axes[d][k]]);
  }
  return len;
}

int sharding_format(const jit_sharding *s, char *buf, size_t n) {
  int len = 0;
  if (n) buf[0] = '\0';
  put(buf, n, &len, "{");
  int k = mesh_format(s->mesh, (size_t)len < n ? buf + len : NULL, (size_t)len < n ? n - len : 0);
  len += k;
  put(buf, n, &len, " \"");
  k = sharding_format_spec(s, (size_t)len < n ? buf + len : NULL, (size_t)len < n ? n - len : 0);
  len += k;
  put(buf, n, &len, "\"}");
  return len;
}

/* ---- the IR text form ------------------------------------------------------------------------- */
static const char *skip_blanks(const char *p) {
  while (is_blank(*p)) p++;
  return p;
}

static jit_status text_error(const char *text, const char *p, const char *expected) {
  return jit_error(JIT_EINVAL, "sharding text \"%.60s\": expected %s at position %d", text, expected,
                   (int)(p - text));
}

/* Reads a non-negative decimal integer (at most 18 digits, so no overflow). */
static bool read_int(const char **pp, int64_t *out) {
  const char *p = *pp;
  int64_t v = 0;
  int n = 0;
  while (*p >= '0' && *p <= '9' && n < 18) v = v * 10 + (*p++ - '0'), n++;
  if (n == 0 || (*p >= '0' && *p <= '9')) return false;
  *pp = p;
  *out = v;
  return true;
}

jit_status sharding_parse_text(const char *text, const char **end, jit_sharding **out) {
  jit_status st = JIT_OK;
  char names[JIT_MAX_MESH_AXES][JIT_MESH_AXIS_NAME_MAX + 1];
  const char *name_ptrs[JIT_MAX_MESH_AXES];
  int64_t sizes[JIT_MAX_MESH_AXES];
  int *ids = NULL, n_ids = 0, cap_ids = 0;
  char *spec = NULL;
  jit_mesh *m = NULL;
  int n_axes = 0;
  *out = NULL;
  const char *p = skip_blanks(text);
  if (*p != '{') return text_error(text, p, "'{'");
  p = skip_blanks(p + 1);
  if (strncmp(p, "mesh[", 5) != 0) return text_error(text, p, "'mesh['");
  p += 5;
  for (;;) {
    p = skip_blanks(p);
    const char *name = p;
    while (is_ident_char(*p)) p++;
    size_t len = (size_t)(p - name);
    if (len == 0 || len > JIT_MESH_AXIS_NAME_MAX || n_axes == JIT_MAX_MESH_AXES)
      return text_error(text, name, "a mesh axis name");
    memcpy(names[n_axes], name, len);
    names[n_axes][len] = '\0';
    name_ptrs[n_axes] = names[n_axes];
    p = skip_blanks(p);
    if (*p != '=') return text_error(text, p, "'='");
    p = skip_blanks(p + 1);
    if (!read_int(&p, &sizes[n_axes])) return text_error(text, p, "an axis size");
    n_axes++;
    p = skip_blanks(p);
    if (*p != ',') break;
    p++;
  }
  if (strncmp(p, "devices=[", 9) == 0) {
    p += 9;
    for (;;) {
      int64_t id = 0;
      p = skip_blanks(p);
      if (!read_int(&p, &id) || id >= JIT_MAX_DEVICES) TRY(text_error(text, p, "a device id"));
      if (n_ids == cap_ids) {
        cap_ids = cap_ids ? 2 * cap_ids : 16;
        int *grown = cap_ids <= JIT_MAX_DEVICES ? realloc(ids, (size_t)cap_ids * sizeof *ids) : NULL;
        if (!grown) TRY(jit_error(JIT_ENOMEM, "sharding text: out of memory"));
        ids = grown;
      }
      ids[n_ids++] = (int)id;
      p = skip_blanks(p);
      if (*p != ',') break;
      p++;
    }
    if (*p != ']') TRY(text_error(text, p, "']' after the device ids"));
    p = skip_blanks(p + 1);
  }
  if (*p != ']') TRY(text_error(text, p, "']'"));
  p = skip_blanks(p + 1);
  if (*p != '"') TRY(text_error(text, p, "'\"' before the spec"));
  const char *spec_start = ++p;
  while (*p && *p != '"') p++;
  if (*p != '"') TRY(text_error(text, p, "'\"' after the spec"));
  spec = strndup(spec_start, (size_t)(p - spec_start));
  if (!spec) TRY(jit_error(JIT_ENOMEM, "sharding text: out of memory"));
  p = skip_blanks(p + 1);
  if (*p != '}') TRY(text_error(text, p, "'}'"));
  if (ids) { /* mesh_new reads one id per device: the list must have exactly that many */
    int64_t n = 1;
    for (int i = 0; i < n_axes && n <= JIT_MAX_DEVICES; i++)
      n = sizes[i] > JIT_MAX_DEVICES ? JIT_MAX_DEVICES + 1 : n * sizes[i];
    if (n != n_ids)
      TRY(jit_error(JIT_EINVAL, "sharding text \"%.60s\": a mesh of %lld devices lists %d device ids",
                    text, (long long)n, n_ids));
  }
  TRY(mesh_new(NULL, 0, n_axes, sizes, name_ptrs, ids, "sharding text", &m));
  TRY(sharding_parse(m, spec, "sharding text", out));
  if (end) *end = p + 1;
fail:
  jit_mesh_free(m);
  free(spec);
  free(ids);
  return st;
}

/* ---- shard geometry ---------------------------------------------------------------------------- */
int64_t sharding_dim_parts(const jit_sharding *s, int dim) {
  int64_t parts = 1;
  for (int k = 0; k < s->n_dim_axes[dim]; k++) parts *= s->mesh->sizes[s->dim_axes[dim][k]];
  return parts;
}

int64_t sharding_shard_index(const jit_sharding *s, int pos, int dim) {
  int64_t coords[JIT_MAX_MESH_AXES];
  mesh_coords(s->mesh, pos, coords);
  int64_t idx = 0;
  for (int k = 0; k < s->n_dim_axes[dim]; k++) {
    int a = s->dim_axes[dim][k];
    idx = idx * s->mesh->sizes[a] + coords[a];
  }
  return idx;
}

void sharding_shard_shape(const jit_sharding *s, const int64_t *shape, int64_t *out) {
  for (int d = 0; d < s->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    out[d] = shape[d] / parts + (shape[d] % parts != 0);
  }
}

void sharding_shard_box(const jit_sharding *s, const int64_t *shape, int pos, int64_t *start,
                        int64_t *size) {
  for (int d = 0; d < s->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    int64_t block = shape[d] / parts + (shape[d] % parts != 0);
    int64_t lo = sharding_shard_index(s, pos, d) * block;
    if (lo > shape[d]) lo = shape[d];
    start[d] = lo;
    size[d] = shape[d] - lo < block ? shape[d] - lo : block;
  }
}

jit_status sharding_check_array(const jit_sharding *s, jit_dtype dt, int rank,
                                const int64_t *shape, const char *who) {
  ir_type t = {.dtype = dt, .rank = rank};
  for (int d = 0; d < rank; d++) t.dims[d] = shape[d];
  char ty[160], sh[512];
  ir_format_type(&t, ty, sizeof ty);
  sharding_format(s, sh, sizeof sh);
  if (s->rank != rank)
    return jit_error(JIT_ESHARDING,
                     "%s: the sharding %s has %d spec entries but the array %s has rank %d (one "
                     "entry per dim)",
                     who, sh, s->rank, ty, rank);
  for (int d = 0; d < rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    if (shape[d] % parts == 0) continue;
    char axes[JIT_MAX_MESH_AXES * (JIT_MESH_AXIS_NAME_MAX + 2)];
    int len = 0;
    axes[0] = '\0';
    for (int k = 0; k < s->n_dim_axes[d]; k++)
      put(axes, sizeof axes, &len, "%s%s", k ? "+" : "", s->mesh->names[s->dim_axes[d][k]]);
    return jit_error(JIT_ESHARDING,
                     "%s: the sharding %s implies that the global size of dimension %d should be "
                     "divisible by %lld (mesh axes %s), but it is equal to %lld (full shape %s)",
                     who, sh, d, (long long)parts, axes, (long long)shape[d], ty);
  }
  return JIT_OK;
}

/* ---- copying boxes between row-major buffers --------------------------------------------------- */
void sharding_copy_box(char *dst, const int64_t *dst_shape, const int64_t *dst_off, const char *src,
                     const int64_t *src_shape, const int64_t *src_off, const int64_t *size,
                     int rank, size_t esize) {
  if (rank == 0) {
    memcpy(dst, src, esize);
    return;
  }
  for (int d = 0; d < rank; d++)
    if (size[d] == 0) return;
  size_t dst_stride[JIT_MAX_RANK], src_stride[JIT_MAX_RANK];
  size_t ds = esize, ss = esize;
  for (int d = rank - 1; d >= 0; d--) {
    dst_stride[d] = ds;
    src_stride[d] = ss;
    ds *= (size_t)dst_shape[d];
    ss *= (size_t)src_shape[d];
  }
  int c = rank - 1;
  size_t chunk = (size_t)size[c];
  while (c > 0 && size[c] == src_shape[c] && size[c] == dst_shape[c]) chunk *= (size_t)size[--c];
  chunk *= esize;
  int64_t idx[JIT_MAX_RANK] = {0};
  for (;;) {
    size_t so = 0, dof = 0;
    for (int d = 0; d <= c; d++) {
      int64_t i = d < c ? idx[d] : 0;
      so += (size_t)(src_off[d] + i) * src_stride[d];
      dof += (size_t)(dst_off[d] + i) * dst_stride[d];
    }
    memcpy(dst + dof, src + so, chunk);
    int d = c - 1;
    while (d >= 0 && ++idx[d] == size[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}
