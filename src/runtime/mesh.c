/* mesh.c: device meshes, shardings and placement. Placeholders until sharding lands: every entry
 * point reports JIT_EUNSUPPORTED (and clears its out handle) so callers can already link. */
#include "runtime/error.h"
#include "runtime/runtime.h"

jit_status jit_mesh_create(jit_ctx *ctx, int n_axes, const int64_t *axis_sizes,
                           const char *const *axis_names, const int *device_ids, jit_mesh **out) {
  if (out) *out = NULL;
  return jit_error(JIT_EUNSUPPORTED, "jit_mesh_create: device meshes are not implemented yet");
}

void jit_mesh_free(jit_mesh *m) { (void)m; }

jit_status jit_sharding_create(const jit_mesh *m, const char *spec, jit_sharding **out) {
  if (out) *out = NULL;
  return jit_error(JIT_EUNSUPPORTED, "jit_sharding_create: shardings are not implemented yet");
}

void jit_sharding_free(jit_sharding *s) { (void)s; }

jit_status jit_device_put(const jit_array *a, const jit_sharding *s, jit_array **out) {
  if (out) *out = NULL;
  return jit_error(JIT_EUNSUPPORTED, "jit_device_put: sharded placement is not implemented yet");
}

jit_status jit_array_visualize(const jit_array *a, FILE *out) {
  return jit_error(JIT_EUNSUPPORTED, "jit_array_visualize: shardings are not implemented yet");
}
