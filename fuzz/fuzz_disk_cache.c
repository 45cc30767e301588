/* fuzz_disk_cache.c: bytes as a disk-cache entry file (src/codegen/disk_cache.c) -> the loader,
 * which must miss on anything but a whole, matching entry. With the first byte odd, the rest is
 * sealed as a valid entry for the key first (header, key hash and checksum computed here), so
 * the loader must then hit and return exactly those bytes. */
#define _GNU_SOURCE /* mkdtemp */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/disk_cache.h"

enum { HDR = 88 };
static const char key[] = "fuzz key";
static cg_disk_cache *cache;
static char path[512];

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!cache) {
    static char dir[] = "/tmp/tjit_fuzz_cache_XXXXXX";
    if (!mkdtemp(dir) || cg_disk_cache_open(dir, &cache) != JIT_OK || !cache ||
        !cg_disk_cache_entry_path(cache, key, sizeof key - 1, path, sizeof path))
      abort();
  }
  if (size > (1u << 20)) return 0;
  bool seal = size > 1 && (data[0] & 1);
  uint8_t *file = malloc(size + HDR + 1);
  if (!file) abort();
  size_t len = size;
  if (seal) { /* magic, version, header size, key hash, payload length, payload checksum */
    len = HDR + size - 1;
    memcpy(file, "TJITOBJ", 8);
    put_le(file + 8, CG_DISK_CACHE_FORMAT, 4);
    put_le(file + 12, HDR, 4);
    cg_sha256(key, sizeof key - 1, file + 16);
    put_le(file + 48, size - 1, 8);
    cg_sha256(data + 1, size - 1, file + 56);
    memcpy(file + HDR, data + 1, size - 1);
  } else if (size) {
    memcpy(file, data, size);
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || (len && write(fd, file, len) != (ssize_t)len)) abort();
  close(fd);
  void *obj = NULL;
  size_t n = 0;
  bool hit = cg_disk_cache_get(cache, key, sizeof key - 1, &obj, &n);
  if (seal && (!hit || n != size - 1 || memcmp(obj, data + 1, n) != 0)) abort();
  free(obj);
  free(file);
  return 0;
}
