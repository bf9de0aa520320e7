/*
 * pools.c: the entry points of stream-ordered allocation and memory pools (bungpu.h): the
 * backend's pools where it has them, else the core's plain pool.
 *
 * Calls: base.c.
 */
#define _GNU_SOURCE
#include "entry.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- stream-ordered allocation and memory pools -------------------------------------------
 * A backend with pools (CPU, CUDA) gets each call after the checks. A backend without them
 * (Metal) gets the core's plain pool: bg_mem_alloc for each allocation, a synchronize of the
 * freeing stream before each bg_mem_free (the block is never reused early), the stats counted
 * here; trimming has nothing to release. */
typedef struct plain_pool {
  bg_obj h;
  uint64_t threshold, st[4]; /* reserved, used, reserved_high, used_high */
  bg_devptr* addr;
  uint64_t* size;
  size_t n, cap;
  int dead; /* destroyed while blocks were out: freed with the last of them */
  struct plain_pool* next;
} plain_pool;
static pthread_mutex_t plain_mu = PTHREAD_MUTEX_INITIALIZER;
static plain_pool* plain_all; /* every plain pool, under plain_mu */

static void plain_note(plain_pool* p, int64_t d) {
  p->st[0] += (uint64_t)d;
  p->st[1] += (uint64_t)d;
  if (p->st[0] > p->st[2]) p->st[2] = p->st[0];
  if (p->st[1] > p->st[3]) p->st[3] = p->st[1];
}

static void plain_unlink(plain_pool* p) { /* under plain_mu */
  plain_pool** pp = &plain_all;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  bg_obj_kill(p);
  free(p->addr);
  free(p->size);
  free(p);
}

void bg_plain_pools_close(bg_device* d) {
  pthread_mutex_lock(&plain_mu);
  for (plain_pool** pp = &plain_all; *pp;) {
    plain_pool* p = *pp;
    if (p->h.dev != d) {
      pp = &p->next;
      continue;
    }
    *pp = p->next;
    p->next = NULL;
    bg_obj_kill(p);
    free(p->addr);
    free(p->size);
    free(p);
  }
  d->plain_pool = NULL;
  pthread_mutex_unlock(&plain_mu);
}

static int32_t plain_create(bg_device* d, uint64_t threshold, void** out) {
  plain_pool* p = calloc(1, sizeof *p);
  if (!p) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mempool_create: out of host memory");
  bg_obj_init(p, BG_KIND_POOL, d);
  p->threshold = threshold;
  pthread_mutex_lock(&plain_mu);
  p->next = plain_all;
  plain_all = p;
  pthread_mutex_unlock(&plain_mu);
  *out = p;
  return BG_OK;
}

static int32_t plain_default(bg_device* d, void** out) {
  pthread_mutex_lock(&bg_dev_lock);
  int32_t rc = BG_OK;
  if (!d->plain_pool) rc = plain_create(d, 0, &d->plain_pool);
  *out = d->plain_pool;
  pthread_mutex_unlock(&bg_dev_lock);
  return rc;
}

static int32_t plain_alloc(void* s, plain_pool* p, uint64_t bytes, bg_devptr* out) {
  bg_device* d = DEV(s);
  if (!p) {
    int32_t rc = plain_default(d, (void**)&p);
    if (rc) return rc;
  }
  pthread_mutex_lock(&plain_mu);
  if (p->n == p->cap) {
    size_t c = p->cap ? 2 * p->cap : 16;
    bg_devptr* a = realloc(p->addr, c * sizeof *a);
    if (a) p->addr = a;
    uint64_t* z = a ? realloc(p->size, c * sizeof *z) : NULL;
    if (z) p->size = z;
    if (!a || !z) {
      pthread_mutex_unlock(&plain_mu);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_async: out of host memory");
    }
    p->cap = c;
  }
  pthread_mutex_unlock(&plain_mu);
  int32_t rc = d->ops->mem_alloc(d, bytes, out);
  if (rc) return rc;
  pthread_mutex_lock(&plain_mu);
  p->addr[p->n] = *out;
  p->size[p->n++] = bytes;
  plain_note(p, (int64_t)bytes);
  pthread_mutex_unlock(&plain_mu);
  return BG_OK;
}

static int32_t plain_free(void* s, bg_devptr ptr) {
  bg_device* d = DEV(s);
  pthread_mutex_lock(&plain_mu);
  plain_pool* p = plain_all;
  size_t i = 0;
  for (; p; p = p->next) {
    if (p->h.dev != d) continue;
    for (i = 0; i < p->n && p->addr[i] != ptr; i++) {}
    if (i < p->n) break;
  }
  if (!p) {
    pthread_mutex_unlock(&plain_mu);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mem_free_async: 0x%llx is not a live stream-ordered allocation of this "
                        "device", (unsigned long long)ptr);
  }
  uint64_t bytes = p->size[i];
  p->addr[i] = p->addr[p->n - 1];
  p->size[i] = p->size[--p->n];
  plain_note(p, -(int64_t)bytes);
  if (p->dead && p->n == 0) plain_unlink(p);
  pthread_mutex_unlock(&plain_mu);
  int32_t rc = d->ops->stream_synchronize(s);
  int32_t rf = d->ops->mem_free(d, ptr);
  return rc ? rc : rf;
}

#define POOL_OK(p, fn)                                                                          \
  do {                                                                                          \
    CHECK(p, BG_KIND_POOL, fn);                                                                 \
  } while (0)
#define HAS_POOLS(h) (OPS(h)->mempool_create != NULL)

BG_API int32_t bg_mempool_create(void* dev, uint64_t threshold, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mempool_create");
  NONNULL(out, "bg_mempool_create", "out");
  BG_HOOK(DEV(dev));
  if (!HAS_POOLS(dev)) return plain_create(dev, threshold, out);
  return OPS(dev)->mempool_create(dev, threshold, out);
}

BG_API int32_t bg_mempool_default(void* dev, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mempool_default");
  NONNULL(out, "bg_mempool_default", "out");
  BG_HOOK(DEV(dev));
  if (!HAS_POOLS(dev)) return plain_default(dev, out);
  return OPS(dev)->mempool_default(dev, out);
}

BG_API int32_t bg_mempool_destroy(void* pool) {
  POOL_OK(pool, "bg_mempool_destroy");
  BG_HOOK(DEV(pool));
  if (HAS_POOLS(pool)) return OPS(pool)->mempool_destroy(pool);
  if (pool == DEV(pool)->plain_pool)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mempool_destroy: the device's default pool belongs to the device");
  plain_pool* p = pool;
  pthread_mutex_lock(&plain_mu);
  if (p->n) {
    p->dead = 1;
    p->h.magic = 0; /* the handle is gone; the blocks stay valid until freed */
  } else {
    plain_unlink(p);
  }
  pthread_mutex_unlock(&plain_mu);
  return BG_OK;
}

BG_API int32_t bg_mempool_set_threshold(void* pool, uint64_t threshold) {
  POOL_OK(pool, "bg_mempool_set_threshold");
  BG_HOOK(DEV(pool));
  if (HAS_POOLS(pool)) return OPS(pool)->mempool_set_threshold(pool, threshold);
  ((plain_pool*)pool)->threshold = threshold;
  return BG_OK;
}

BG_API int32_t bg_mempool_trim(void* pool, uint64_t keep) {
  POOL_OK(pool, "bg_mempool_trim");
  BG_HOOK(DEV(pool));
  if (HAS_POOLS(pool)) return OPS(pool)->mempool_trim(pool, keep);
  return BG_OK; /* a plain pool holds nothing unused */
}

BG_API int32_t bg_mempool_stats(void* pool, uint64_t* reserved, uint64_t* used,
                                uint64_t* reserved_high, uint64_t* used_high) {
  POOL_OK(pool, "bg_mempool_stats");
  uint64_t st[4] = {0, 0, 0, 0};
  int32_t rc = BG_OK;
  if (HAS_POOLS(pool)) {
    BG_HOOK(DEV(pool));
    rc = OPS(pool)->mempool_stats(pool, st);
  } else {
    pthread_mutex_lock(&plain_mu);
    memcpy(st, ((plain_pool*)pool)->st, sizeof st);
    pthread_mutex_unlock(&plain_mu);
  }
  if (reserved) *reserved = st[0];
  if (used) *used = st[1];
  if (reserved_high) *reserved_high = st[2];
  if (used_high) *used_high = st[3];
  return rc;
}

BG_API int32_t bg_mempool_reset_peak(void* pool) {
  POOL_OK(pool, "bg_mempool_reset_peak");
  BG_HOOK(DEV(pool));
  if (HAS_POOLS(pool)) return OPS(pool)->mempool_reset_peak(pool);
  plain_pool* p = pool;
  pthread_mutex_lock(&plain_mu);
  p->st[2] = p->st[0];
  p->st[3] = p->st[1];
  pthread_mutex_unlock(&plain_mu);
  return BG_OK;
}

BG_API int32_t bg_mem_alloc_async(void* s, void* pool, uint64_t bytes, bg_devptr* out) {
  CHECK(s, BG_KIND_STREAM, "bg_mem_alloc_async");
  NONNULL(out, "bg_mem_alloc_async", "out");
  if (pool) {
    POOL_OK(pool, "bg_mem_alloc_async");
    if (DEV(pool) != DEV(s))
      return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_async: pool of another device");
  }
  if (bytes == 0) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_async: size 0");
  *out = 0;
  BG_HOOK(DEV(s));
  if (!HAS_POOLS(s)) return plain_alloc(s, pool, bytes, out);
  return OPS(s)->mem_alloc_async(s, pool, bytes, out);
}

BG_API int32_t bg_mem_free_async(void* s, bg_devptr p) {
  CHECK(s, BG_KIND_STREAM, "bg_mem_free_async");
  NONNULL(p, "bg_mem_free_async", "ptr");
  BG_HOOK(DEV(s));
  if (!HAS_POOLS(s)) return plain_free(s, p);
  return OPS(s)->mem_free_async(s, p);
}
