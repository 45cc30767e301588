/* disk_cache.h: the persistent level of the compile cache: object files on disk, keyed by a
 * SHA-256 of the LLVM module text and everything else that shapes the machine code.
 *
 * Use (one handle per jit_ctx, opened with the context when cache_dir/TJIT_CACHE_DIR is set):
 *
 *   char *key; size_t key_len;
 *   cg_disk_cache_key(jit, module_text, &key, &key_len);     // module text BEFORE cg_optimize
 *   if (!cg_disk_cache_get(cache, key, key_len, &obj, &len)) {
 *     cg_optimize(jit, m); cg_emit_object(jit, m, &obj, &len);
 *     cg_disk_cache_put(cache, key, key_len, obj, len);
 *   }
 *   cg_add_object(jit, obj, len, &lib); free(obj); free(key);
 *
 * The cache never fails a compile: any I/O problem, a corrupt, truncated or foreign entry, or an
 * unwritable directory is a miss (or a put that stores nothing), reported on stderr only when
 * TJIT_DEBUG_CACHE=1. A NULL handle (no cache configured) is valid everywhere and always misses.
 *
 * On disk: DIR/<64 hex digits of the key hash>, each file an 88-byte header (magic "TJITOBJ\0",
 * format version, header size, key hash, payload length, payload SHA-256; integers little-endian)
 * followed by the object. Puts write a temp file DIR/.tmp-XXXXXX and rename() it over the final
 * name, so a reader sees a whole old entry, a whole new one, or none (a crash that loses the data
 * under a renamed name leaves an entry whose checksum fails: a miss); two processes
 * storing the same key both succeed. Files are created 0600 (the cache holds code this process
 * will run, so it must not be writable by others).
 *
 * Trust (docs/CACHE.md): only a directory owned by this user and writable by nobody else is read
 * or written, and only regular entries owned by this user and writable by nobody else are loaded;
 * anything else is a miss. The directory is opened once and entries are reached through that
 * descriptor; an entry is opened once, checked with fstat and read from the same descriptor, and
 * its checksum is computed over the bytes in memory that the caller then loads.
 *
 * Size bound: when the bytes this process believes are in DIR exceed the limit (1 GiB, or
 * TJIT_CACHE_MAX_MB, or cg_disk_cache_set_limit), the oldest entries by mtime are removed until
 * the total is below 90% of it. A hit touches its entry's mtime, so this is LRU. Temp files left
 * by killed processes are removed when older than an hour. Other processes' puts are counted at
 * the next scan, so the bound is approximate, never exact.
 */
#ifndef TJIT_CODEGEN_DISK_CACHE_H
#define TJIT_CODEGEN_DISK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tjit.h"

typedef struct cg_disk_cache cg_disk_cache;
typedef struct cg_jit cg_jit; /* codegen/llvm_jit.h */

#define CG_DISK_CACHE_FORMAT 1                       /* bump when the key text or file layout changes */
#define CG_DISK_CACHE_DEFAULT_LIMIT (1ull << 30)    /* bytes */
#define CG_DISK_CACHE_MAX_OBJECT (1ull << 30)       /* larger payloads are neither stored nor read */

/* Opens (creating DIR and its parents, mode 0700, when missing) the cache in DIR. DIR NULL or ""
   gives *out = NULL, a valid "no cache" handle. A directory that cannot be created, written or
   trusted is not an error: the handle just misses. Fails only with JIT_ENOMEM. */
jit_status cg_disk_cache_open(const char *dir, cg_disk_cache **out);
/* NULL is a no-op. */
void cg_disk_cache_close(cg_disk_cache *c);

/* The key text of a module for JIT's target: format version, target CPU, feature string, LLVM
   version and opt level, then MODULE_TEXT (cg_module_text before cg_optimize, which adds the
   triple and layout). malloc'd into *key (free() it); *key_len excludes the final NUL.
   JIT may be NULL (a payload that is not machine code): the target fields are then "-". */
jit_status cg_disk_cache_key(const cg_jit *jit, const char *module_text, char **key,
                             size_t *key_len);

/* True on a hit: *obj (malloc'd, free() it) and *len hold the stored object, fully validated
   (magic, version, key hash, length = file size - header, payload checksum). False on a miss or
   any failure, with *obj = NULL, *len = 0. Safe from several threads at once. */
bool cg_disk_cache_get(cg_disk_cache *c, const char *key_text, size_t key_len, void **obj,
                       size_t *len);
/* Stores OBJ (1..CG_DISK_CACHE_MAX_OBJECT bytes) under the key, replacing any entry (valid or
   not). True when the entry was written and renamed into place. Safe from several threads and
   processes at once. */
bool cg_disk_cache_put(cg_disk_cache *c, const char *key_text, size_t key_len, const void *obj,
                       size_t len);

/* Sets the size bound in bytes (0: unbounded). */
void cg_disk_cache_set_limit(cg_disk_cache *c, uint64_t bytes);

/* The entry's file name for the key, "DIR/<hex>", into buf; false when it does not fit or C is
   NULL. For tests and tools; the cache itself never hands out paths. */
bool cg_disk_cache_entry_path(const cg_disk_cache *c, const char *key_text, size_t key_len,
                              char *buf, size_t n);

/* SHA-256 of n bytes (FIPS 180-4), the key hash and the payload checksum. */
void cg_sha256(const void *data, size_t n, uint8_t out[32]);

#endif /* TJIT_CODEGEN_DISK_CACHE_H */
