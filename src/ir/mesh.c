/* mesh.c: device meshes: named n-d grids over any subset of a context's virtual devices, in any
 * order. Validation, reference counting, and the text forms dumps and errors print. */
#include <stdarg.h>
#include <stdio.h>
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

/* "2x4" for error messages. */
static void format_dims(int n_axes, const int64_t *sizes, char *buf, size_t n) {
  int len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n_axes; i++) put(buf, n, &len, "%s%lld", i ? "x" : "", (long long)sizes[i]);
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* An axis name is an identifier other than "_" (the spec grammar's "not sharded"). */
static jit_status check_axis_name(const char *name, int i, const char *who) {
  if (!name) return jit_error(JIT_EINVAL, "%s: axis_names[%d] is NULL", who, i);
  size_t len = strlen(name);
  if (len == 0) return jit_error(JIT_EINVAL, "%s: axis_names[%d] is empty", who, i);
  if (len > JIT_MESH_AXIS_NAME_MAX)
    return jit_error(JIT_EINVAL, "%s: axis_names[%d] is %zu bytes long (at most %d)", who, i, len,
                     JIT_MESH_AXIS_NAME_MAX);
  bool ok = is_ident_start(name[0]);
  for (size_t k = 1; ok && k < len; k++) ok = is_ident_char(name[k]);
  if (!ok)
    return jit_error(JIT_EINVAL,
                     "%s: axis_names[%d] = '%s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", who,
                     i, name);
  if (strcmp(name, "_") == 0)
    return jit_error(JIT_EINVAL,
                     "%s: axis_names[%d] = '_' is reserved (partition specs use it for 'not "
                     "sharded')",
                     who, i);
  return JIT_OK;
}

jit_status mesh_new(jit_ctx *ctx, int n_ctx_devices, int n_axes, const int64_t *sizes,
                    const char *const *names, const int *device_ids, const char *who,
                    jit_mesh **out) {
  jit_status st = JIT_OK;
  jit_mesh *m = NULL;
  bool *seen = NULL;
  *out = NULL;
  if (n_axes < 1 || n_axes > JIT_MAX_MESH_AXES)
    return jit_error(JIT_EINVAL, "%s: n_axes is %d (must be 1..%d)", who, n_axes,
                     JIT_MAX_MESH_AXES);
  if (!sizes) return jit_error(JIT_EINVAL, "%s: axis_sizes is NULL", who);
  if (!names) return jit_error(JIT_EINVAL, "%s: axis_names is NULL", who);
  for (int i = 0; i < n_axes; i++) {
    TRY(check_axis_name(names[i], i, who));
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0)
        return jit_error(JIT_EINVAL, "%s: axis name '%s' is used twice (axes %d and %d)", who,
                         names[i], j, i);
    if (sizes[i] < 1)
      return jit_error(JIT_EINVAL, "%s: axis '%s' has size %lld (must be >= 1)", who, names[i],
                       (long long)sizes[i]);
  }
  char dims[160];
  format_dims(n_axes, sizes, dims, sizeof dims);
  int64_t n = 1;
  for (int i = 0; i < n_axes; i++) {
    if (sizes[i] > JIT_MAX_DEVICES || n * sizes[i] > JIT_MAX_DEVICES)
      return jit_error(JIT_ESHARDING, "%s: a mesh of %s devices is larger than %d devices", who,
                       dims, JIT_MAX_DEVICES);
    n *= sizes[i];
  }
  int have = ctx ? n_ctx_devices : JIT_MAX_DEVICES;
  if (n > have) {
    if (device_ids)
      return jit_error(JIT_ESHARDING,
                       "%s: a mesh of %s = %lld devices needs %lld distinct device ids but the "
                       "context has only %d devices (TJIT_DEVICES or jit_ctx_opts.n_devices)",
                       who, dims, (long long)n, (long long)n, have);
    return jit_error(JIT_ESHARDING,
                     "%s: a mesh of %s = %lld devices needs %lld devices but the context has %d "
                     "(TJIT_DEVICES or jit_ctx_opts.n_devices)",
                     who, dims, (long long)n, (long long)n, have);
  }

  m = calloc(1, sizeof *m);
  if (!m) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  m->device_ids = malloc((size_t)n * sizeof *m->device_ids);
  seen = calloc((size_t)have, sizeof *seen);
  if (!m->device_ids || !seen) TRY(jit_error(JIT_ENOMEM, "%s: out of memory", who));
  atomic_init(&m->refs, 1);
  m->ctx = ctx;
  m->n_axes = n_axes;
  m->n_devices = (int)n;
  for (int i = 0; i < n_axes; i++) {
    m->sizes[i] = sizes[i];
    strcpy(m->names[i], names[i]);
  }
  for (int i = 0; i < (int)n; i++) {
    int id = device_ids ? device_ids[i] : i;
    if (id < 0 || id >= have) {
      if (ctx)
        TRY(jit_error(JIT_ESHARDING,
                      "%s: device_ids[%d] = %d is not a device of the context (ids 0..%d; a mesh "
                      "of %s = %lld devices needs %lld device ids)",
                      who, i, id, have - 1, dims, (long long)n, (long long)n));
      TRY(jit_error(JIT_ESHARDING, "%s: device id %d is out of range 0..%d", who, id, have - 1));
    }
    if (seen[id]) {
      int first = 0;
      while (m->device_ids[first] != id) first++;
      TRY(jit_error(JIT_ESHARDING,
                    "%s: device_ids[%d] = %d repeats device_ids[%d] (a mesh of %s = %lld devices "
                    "needs %lld distinct device ids)",
                    who, i, id, first, dims, (long long)n, (long long)n));
    }
    seen[id] = true;
    m->device_ids[i] = id;
  }
  free(seen);
  *out = m;
  return JIT_OK;
fail:
  free(seen);
  if (m) free(m->device_ids);
  free(m);
  return st;
}

jit_mesh *mesh_ref(jit_mesh *m) {
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
  return m;
}

void jit_mesh_free(jit_mesh *m) {
  if (!m) return;
  /* acq_rel: the last owner must see every other owner's reads finished before freeing. */
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  free(m->device_ids);
  free(m);
}

int mesh_axis_index(const jit_mesh *m, const char *name, size_t len) {
  for (int i = 0; i < m->n_axes; i++)
    if (strlen(m->names[i]) == len && memcmp(m->names[i], name, len) == 0) return i;
  return -1;
}

bool mesh_same_devices(const jit_mesh *a, const jit_mesh *b) {
  if (a == b) return true;
  return a->n_devices == b->n_devices &&
         memcmp(a->device_ids, b->device_ids, (size_t)a->n_devices * sizeof *a->device_ids) == 0;
}

bool mesh_equal(const jit_mesh *a, const jit_mesh *b) {
  if (a == b) return true;
  if (a->n_axes != b->n_axes || !mesh_same_devices(a, b)) return false;
  for (int i = 0; i < a->n_axes; i++)
    if (a->sizes[i] != b->sizes[i] || strcmp(a->names[i], b->names[i]) != 0) return false;
  return true;
}

bool mesh_default_ids(const jit_mesh *m) {
  for (int i = 0; i < m->n_devices; i++)
    if (m->device_ids[i] != i) return false;
  return true;
}

void mesh_coords(const jit_mesh *m, int pos, int64_t *coords) {
  int64_t rest = pos;
  for (int i = m->n_axes - 1; i >= 0; i--) {
    coords[i] = rest % m->sizes[i];
    rest /= m->sizes[i];
  }
}

int mesh_position(const jit_mesh *m, int device_id) {
  for (int i = 0; i < m->n_devices; i++)
    if (m->device_ids[i] == device_id) return i;
  return -1;
}

int mesh_format(const jit_mesh *m, char *buf, size_t n) {
  int len = 0;
  if (n) buf[0] = '\0';
  put(buf, n, &len, "mesh[");
  for (int i = 0; i < m->n_axes; i++)
    put(buf, n, &len, "%s%s=%lld", i ? "," : "", m->names[i], (long long)m->sizes[i]);
  if (!mesh_default_ids(m)) {
    put(buf, n, &len, " devices=[");
    for (int i = 0; i < m->n_devices; i++) put(buf, n, &len, "%s%d", i ? "," : "", m->device_ids[i]);
    put(buf, n, &len, "]");
  }
  put(buf, n, &len, "]");
  return len;
}

int mesh_format_ids(const jit_mesh *m, int max_ids, char *buf, size_t n) {
  int len = 0;
  if (n) buf[0] = '\0';
  put(buf, n, &len, "[");
  for (int i = 0; i < m->n_devices; i++) {
    if (i == max_ids) {
      put(buf, n, &len, ", ...");
      break;
    }
    put(buf, n, &len, "%s%d", i ? ", " : "", m->device_ids[i]);
  }
  put(buf, n, &len, "]");
  return len;
}

void mesh_to_ir(const jit_mesh *m, ir_mesh *out) {
  memset(out, 0, sizeof *out);
  out->n_axes = m->n_axes;
  for (int a = 0; a < m->n_axes; a++) {
    out->sizes[a] = m->sizes[a];
    snprintf(out->names[a], sizeof out->names[a], "%s", m->names[a]);
  }
}

bool mesh_matches_ir(const jit_mesh *m, const ir_mesh *im) {
  if (!m || !im || m->n_axes != im->n_axes) return false;
  for (int a = 0; a < m->n_axes; a++)
    if (m->sizes[a] != im->sizes[a] || strcmp(m->names[a], im->names[a]) != 0) return false;
  return true;
}
