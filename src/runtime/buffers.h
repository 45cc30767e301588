/* buffers.h: a per-context cache of freed array buffers, reused by size class, so that a warm
 * jit_call writes its outputs into memory that is already mapped (fresh pages cost far more than
 * the bandwidth to fill them on this kind of VM: see DESIGN.md). */
#ifndef TJIT_BUFFERS_H
#define TJIT_BUFFERS_H

#include <stdbool.h>
#include <stddef.h>

#include "tjit.h"

typedef struct buf_pool buf_pool;

/* A pool with one reference (the context's). Every array made from it holds another, so arrays
   may outlive their context. */
jit_status buf_pool_create(buf_pool **out);
void       buf_pool_retain(buf_pool *p);
void       buf_pool_release(buf_pool *p);  /* the last release frees every cached block */
/* A 64-byte aligned block of at least bytes (> 0); *cap is its real size, to give back with it.
   NULL on OOM. */
void      *buf_pool_get(buf_pool *p, size_t bytes, size_t *cap);
void       buf_pool_put(buf_pool *p, void *block, size_t cap);
/* False in sanitizer builds, where every put frees its block. */
bool       buf_pool_caches(void);

#endif /* TJIT_BUFFERS_H */
