/*
 * api.c: the entry points of libbungpu (bungpu.h): the device table, and one thin wrapper per
 * bg_* symbol that validates what it can and calls the device's vtable, or the generic
 * command-list graph (commands.c). The last error, handle checks and compile results it stands
 * on are base.c's; the bg_submit* entries are commands.c's. One file over 600 lines: every
 * wrapper is a few lines of the same shape (CHECK, NONNULL, NEED, BG_HOOK, the vtable call), in
 * the header's order, and they share those macros.
 *
 * Calls: backends.c, commands.c, base.c.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BG_SOURCE_HASH
#define BG_SOURCE_HASH "unknown"
#endif

static const char* kind_name(bg_kind k) {
  switch (k) {
    case BG_KIND_DEVICE: return "device";
    case BG_KIND_STREAM: return "stream";
    case BG_KIND_EVENT: return "event";
    case BG_KIND_MODULE: return "module";
    case BG_KIND_KERNEL: return "kernel";
    case BG_KIND_GRAPH: return "graph";
    case BG_KIND_EXEC: return "graph exec";
    case BG_KIND_RING: return "ring";
    case BG_KIND_SIGNAL: return "signal";
    case BG_KIND_RTC: return "compile result";
    case BG_KIND_CMD_GRAPH: return "graph";
    case BG_KIND_CMD_EXEC: return "graph exec";
    case BG_KIND_POOL: return "memory pool";
    case BG_KIND_COMM: return "communicator";
  }
  return "handle";
}

#define CHECK(h, kind, fn)                                                                      \
  do {                                                                                          \
    if (!bg_obj_is((h), (kind)))                                                                \
      return bg_set_error(BG_ERR_INVALID_HANDLE, "%s: not a live %s handle", fn,               \
                          kind_name(kind));                                                     \
  } while (0)
#define NONNULL(p, fn, what)                                                                    \
  do {                                                                                          \
    if (!(p)) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s is NULL", fn, what);           \
  } while (0)
#define DEV(h) (((bg_obj*)(h))->dev)
#define OPS(h) (DEV(h)->ops)
#define NEED(h, op, fn)                                                                         \
  do {                                                                                          \
    if (!OPS(h)->op)                                                                            \
      return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: not supported on the %s backend", fn,     \
                          OPS(h)->name);                                                        \
  } while (0)

/* ---- library ------------------------------------------------------------------------------- */
BG_API int32_t bg_abi_version(void) { return BG_ABI_VERSION; }

BG_API int32_t bg_source_hash(char* buf, uint64_t cap) {
  NONNULL(buf, "bg_source_hash", "buf");
  size_t n = strlen(BG_SOURCE_HASH);
  if (cap < n + 1) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_source_hash: buffer too small");
  memcpy(buf, BG_SOURCE_HASH, n + 1);
  return BG_OK;
}

BG_API int32_t bg_noop(void) { return BG_OK; }

BG_API int32_t bg_init(void) {
  bg_clear_error();
  return BG_OK;
}

/* ---- backends: the table's lines (backends.c) ----------------------------------------------- */
BG_API int32_t bg_backend_count(void) { return bg_backends_count(); }

BG_API int32_t bg_backend_name(int32_t backend, char* buf, uint64_t cap) {
  NONNULL(buf, "bg_backend_name", "buf");
  const bg_ops* be = bg_backend_at(backend);
  if (!be) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_backend_name: no backend %d", backend);
  size_t n = strlen(be->name);
  if (cap < n + 1) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_backend_name: buffer too small");
  memcpy(buf, be->name, n + 1);
  return BG_OK;
}

BG_API int32_t bg_backend_info(int32_t backend, int32_t* available, int32_t* count, char* msg,
                               uint64_t cap) {
  const bg_ops* be = bg_backend_at(backend);
  if (!be) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_backend_info: no backend %d", backend);
  int32_t n = 0;
  char local[512] = {0};
  int32_t rc = be->probe(&n, local, sizeof local);
  if (available) *available = rc == BG_OK;
  if (count) *count = rc == BG_OK ? n : 0;
  if (msg && cap) snprintf(msg, (size_t)cap, "%s", local);
  return BG_OK;
}

/* One device object per (backend, ordinal), shared by every open and counted. */
#define MAX_ORDINALS 64
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static void plain_pools_close(bg_device* d); /* the core's plain pools of `d` (below) */
static bg_device* dev_table[BG_MAX_BACKENDS][MAX_ORDINALS];
static int32_t dev_refs[BG_MAX_BACKENDS][MAX_ORDINALS];

BG_API int32_t bg_device_open(int32_t backend, int32_t ordinal, void** out) {
  NONNULL(out, "bg_device_open", "out");
  const bg_ops* be = bg_backend_at(backend);
  if (!be) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_device_open: no backend %d", backend);
  if (ordinal < 0 || ordinal >= MAX_ORDINALS)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "bg_device_open: ordinal %d out of range", ordinal);
  pthread_mutex_lock(&dev_lock);
  bg_device* d = dev_table[backend][ordinal];
  if (d) {
    dev_refs[backend][ordinal]++;
    pthread_mutex_unlock(&dev_lock);
    *out = d;
    return BG_OK;
  }
  int32_t n = 0;
  char msg[512] = {0};
  int32_t rc = be->probe(&n, msg, sizeof msg);
  if (rc != BG_OK) {
    pthread_mutex_unlock(&dev_lock);
    return bg_set_error(rc, "bg_device_open: %s", msg);
  }
  if (ordinal >= n) {
    pthread_mutex_unlock(&dev_lock);
    return bg_set_error(BG_ERR_INVALID_DEVICE, "bg_device_open: %s has %d device(s), no ordinal %d",
                        be->name, n, ordinal);
  }
  rc = be->open(ordinal, &d);
  if (rc == BG_OK) {
    d->backend = backend;
    d->ordinal = ordinal;
    dev_table[backend][ordinal] = d;
    dev_refs[backend][ordinal] = 1;
    *out = d;
  }
  pthread_mutex_unlock(&dev_lock);
  return rc;
}

BG_API int32_t bg_device_close(void* dev) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_close");
  bg_device* d = dev;
  pthread_mutex_lock(&dev_lock);
  int32_t rc = BG_OK;
  if (--dev_refs[d->backend][d->ordinal] == 0) {
    dev_table[d->backend][d->ordinal] = NULL;
    plain_pools_close(d);
    /* as destroying a context does: nobody keeps access to a closed device */
    for (int i = 0; i < MAX_ORDINALS; i++)
      if (dev_table[d->backend][i])
        atomic_fetch_and(&dev_table[d->backend][i]->peer_enabled, ~((uint64_t)1 << (uint32_t)d->ordinal));
    rc = d->ops->device_close(d);
  }
  pthread_mutex_unlock(&dev_lock);
  return rc;
}

BG_API int32_t bg_device_props_get(void* dev, bg_device_props* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_props_get");
  NONNULL(out, "bg_device_props_get", "out");
  memset(out, 0, sizeof *out);
  BG_HOOK(DEV(dev));
  int32_t rc = OPS(dev)->device_props(dev, out);
  out->backend = DEV(dev)->backend; /* the table's number, which the backend need not know */
  return rc;
}

BG_API int32_t bg_device_mem_info(void* dev, uint64_t* free_b, uint64_t* total_b) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_mem_info");
  NONNULL(free_b, "bg_device_mem_info", "free");
  NONNULL(total_b, "bg_device_mem_info", "total");
  BG_HOOK(DEV(dev));
  return OPS(dev)->device_mem_info(dev, free_b, total_b);
}

BG_API int32_t bg_device_synchronize(void* dev) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_synchronize");
  BG_HOOK(DEV(dev));
  return OPS(dev)->device_synchronize(dev);
}

/* ---- memory -------------------------------------------------------------------------------- */
BG_API int32_t bg_mem_alloc(void* dev, uint64_t bytes, bg_devptr* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mem_alloc");
  NONNULL(out, "bg_mem_alloc", "out");
  if (bytes == 0) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc: size 0");
  BG_HOOK(DEV(dev));
  return OPS(dev)->mem_alloc(dev, bytes, out);
}

BG_API int32_t bg_mem_free(void* dev, bg_devptr p) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mem_free");
  if (!p) return BG_OK;
  BG_HOOK(DEV(dev));
  return OPS(dev)->mem_free(dev, p);
}

BG_API int32_t bg_host_alloc(void* dev, uint64_t bytes, uint32_t flags, void** host, bg_devptr* d) {
  CHECK(dev, BG_KIND_DEVICE, "bg_host_alloc");
  NONNULL(host, "bg_host_alloc", "out_host");
  if (bytes == 0) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_host_alloc: size 0");
  if (flags & ~(uint32_t)(BG_HOST_ALLOC_MAPPED | BG_HOST_ALLOC_PORTABLE))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_host_alloc: unknown flags 0x%x", flags);
  bg_devptr unused = 0;
  BG_HOOK(DEV(dev));
  return OPS(dev)->host_alloc(dev, bytes, flags, host, d ? d : &unused);
}

BG_API int32_t bg_host_free(void* dev, void* host) {
  CHECK(dev, BG_KIND_DEVICE, "bg_host_free");
  if (!host) return BG_OK;
  BG_HOOK(DEV(dev));
  return OPS(dev)->host_free(dev, host);
}

/* A backend without a synchronous copy or memset gets its asynchronous one on the device's
 * default stream, then a wait for that stream: the same legacy-stream semantics, data in place
 * on return. */
static int32_t then_wait_default(void* dev, int32_t rc) {
  if (rc) return rc;
  bg_device* d = dev;
  return d->ops->stream_synchronize(d->default_stream);
}
#define DEFAULT_STREAM(dev) (((bg_device*)(dev))->default_stream)

BG_API int32_t bg_memcpy_htod(void* dev, bg_devptr dst, const void* src, uint64_t n) {
  CHECK(dev, BG_KIND_DEVICE, "bg_memcpy_htod");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_htod", "src");
  NONNULL(dst, "bg_memcpy_htod", "dst");
  BG_HOOK(DEV(dev));
  if (!OPS(dev)->memcpy_htod)
    return then_wait_default(dev, OPS(dev)->memcpy_htod_async(DEFAULT_STREAM(dev), dst, src, n));
  return OPS(dev)->memcpy_htod(dev, dst, src, n);
}

BG_API int32_t bg_memcpy_dtoh(void* dev, void* dst, bg_devptr src, uint64_t n) {
  CHECK(dev, BG_KIND_DEVICE, "bg_memcpy_dtoh");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_dtoh", "src");
  NONNULL(dst, "bg_memcpy_dtoh", "dst");
  BG_HOOK(DEV(dev));
  if (!OPS(dev)->memcpy_dtoh)
    return then_wait_default(dev, OPS(dev)->memcpy_dtoh_async(DEFAULT_STREAM(dev), dst, src, n));
  return OPS(dev)->memcpy_dtoh(dev, dst, src, n);
}

BG_API int32_t bg_memcpy_dtod(void* dev, bg_devptr dst, bg_devptr src, uint64_t n) {
  CHECK(dev, BG_KIND_DEVICE, "bg_memcpy_dtod");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_dtod", "src");
  NONNULL(dst, "bg_memcpy_dtod", "dst");
  BG_HOOK(DEV(dev));
  if (!OPS(dev)->memcpy_dtod)
    return then_wait_default(dev, OPS(dev)->memcpy_dtod_async(DEFAULT_STREAM(dev), dst, src, n));
  return OPS(dev)->memcpy_dtod(dev, dst, src, n);
}

static int32_t check_memset(const char* fn, bg_devptr dst, uint32_t esz) {
  NONNULL(dst, fn, "dst");
  if (esz != 1 && esz != 2 && esz != 4)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: element size %u (want 1, 2 or 4)", fn, esz);
  if (dst % esz) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: dst not aligned to %u", fn, esz);
  return BG_OK;
}

BG_API int32_t bg_memset(void* dev, bg_devptr dst, uint32_t pattern, uint32_t esz, uint64_t count) {
  CHECK(dev, BG_KIND_DEVICE, "bg_memset");
  if (!count) return BG_OK;
  int32_t rc = check_memset("bg_memset", dst, esz);
  if (rc) return rc;
  BG_HOOK(DEV(dev));
  if (!OPS(dev)->memset)
    return then_wait_default(
        dev, OPS(dev)->memset_async(DEFAULT_STREAM(dev), dst, pattern, esz, count));
  return (OPS(dev)->memset)(dev, dst, pattern, esz, count); /* parenthesised: _FORTIFY_SOURCE makes memset a macro */
}

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

static void plain_pools_close(bg_device* d) {
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
  pthread_mutex_lock(&dev_lock);
  int32_t rc = BG_OK;
  if (!d->plain_pool) rc = plain_create(d, 0, &d->plain_pool);
  *out = d->plain_pool;
  pthread_mutex_unlock(&dev_lock);
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

/* ---- memory and events shared between processes -------------------------------------------- */
BG_API int32_t bg_mem_alloc_flags(void* dev, uint64_t bytes, uint32_t flags, bg_devptr* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mem_alloc_flags");
  NONNULL(out, "bg_mem_alloc_flags", "out");
  if (flags & ~(uint32_t)BG_MEM_SHAREABLE)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_flags: unknown flags 0x%x", flags);
  if (bytes == 0) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_flags: size 0");
  BG_HOOK(DEV(dev));
  if (!(flags & BG_MEM_SHAREABLE)) return OPS(dev)->mem_alloc(dev, bytes, out);
  NEED(dev, ipc_mem_export, "bg_mem_alloc_flags (BG_MEM_SHAREABLE)");
  if (OPS(dev)->mem_alloc_shareable) return OPS(dev)->mem_alloc_shareable(dev, bytes, out);
  return OPS(dev)->mem_alloc(dev, bytes, out);
}

static void ipc_header(bg_ipc_handle* h, uint32_t kind, int32_t backend, uint64_t bytes) {
  memset(h, 0, sizeof *h);
  h->magic = BG_IPC_MAGIC;
  h->kind = kind;
  h->backend = backend;
  h->pid = (int32_t)getpid();
  h->bytes = bytes;
}

/* A handle's header, read from caller memory of any alignment: BG_ERR_INVALID_VALUE unless it is
 * a bungpu handle of `kind` for `d`'s backend. */
static int32_t ipc_read(const char* fn, const void* handle, uint32_t kind, bg_device* d,
                        bg_ipc_handle* h) {
  memcpy(h, handle, sizeof *h);
  if (h->magic != BG_IPC_MAGIC || (h->kind != BG_IPC_KIND_MEM && h->kind != BG_IPC_KIND_EVENT) ||
      !bg_backend_at(h->backend) || h->pid <= 0 || h->reserved != 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: not a bungpu interprocess handle", fn);
  if (h->kind != kind)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle is of %s, not of %s", fn,
                        h->kind == BG_IPC_KIND_MEM ? "memory" : "an event",
                        kind == BG_IPC_KIND_MEM ? "memory" : "an event");
  if (h->backend != d->backend)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle comes from a %s device, not %s", fn,
                        bg_backend_at(h->backend)->name, d->ops->name);
  if (kind == BG_IPC_KIND_MEM && h->bytes == 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle names 0 bytes", fn);
  /* an event's handle names no size: its exporter writes 0 there, so anything else is altered */
  if (kind == BG_IPC_KIND_EVENT && h->bytes != 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle names %llu bytes; an event's handle names none", fn,
                        (unsigned long long)h->bytes);
  return BG_OK;
}

BG_API int32_t bg_ipc_mem_export(void* dev, bg_devptr p, void* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_export");
  NONNULL(out, "bg_ipc_mem_export", "out_handle");
  NONNULL(p, "bg_ipc_mem_export", "ptr");
  NEED(dev, ipc_mem_export, "bg_ipc_mem_export");
  bg_ipc_handle h;
  ipc_header(&h, BG_IPC_KIND_MEM, DEV(dev)->backend, 0);
  BG_HOOK(DEV(dev));
  int32_t rc = OPS(dev)->ipc_mem_export(dev, p, h.payload, &h.bytes);
  if (rc == BG_OK) memcpy(out, &h, sizeof h);
  return rc;
}

BG_API int32_t bg_ipc_mem_open(void* dev, const void* handle, bg_devptr* out, uint64_t* out_bytes) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_open");
  NONNULL(handle, "bg_ipc_mem_open", "handle");
  NONNULL(out, "bg_ipc_mem_open", "out");
  NEED(dev, ipc_mem_open, "bg_ipc_mem_open");
  bg_ipc_handle h;
  int32_t rc = ipc_read("bg_ipc_mem_open", handle, BG_IPC_KIND_MEM, dev, &h);
  if (rc) return rc;
  BG_HOOK(DEV(dev));
  rc = OPS(dev)->ipc_mem_open(dev, h.pid, h.payload, h.bytes, out);
  if (rc == BG_OK && out_bytes) *out_bytes = h.bytes;
  return rc;
}

BG_API int32_t bg_ipc_mem_close(void* dev, bg_devptr p) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_close");
  NONNULL(p, "bg_ipc_mem_close", "ptr");
  NEED(dev, ipc_mem_close, "bg_ipc_mem_close");
  BG_HOOK(DEV(dev));
  return OPS(dev)->ipc_mem_close(dev, p);
}

BG_API int32_t bg_ipc_event_export(void* e, void* out) {
  CHECK(e, BG_KIND_EVENT, "bg_ipc_event_export");
  NONNULL(out, "bg_ipc_event_export", "out_handle");
  NEED(e, ipc_event_export, "bg_ipc_event_export");
  bg_ipc_handle h;
  ipc_header(&h, BG_IPC_KIND_EVENT, DEV(e)->backend, 0);
  BG_HOOK(DEV(e));
  int32_t rc = OPS(e)->ipc_event_export(e, h.payload);
  if (rc == BG_OK) memcpy(out, &h, sizeof h);
  return rc;
}

BG_API int32_t bg_ipc_event_open(void* dev, const void* handle, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_event_open");
  NONNULL(handle, "bg_ipc_event_open", "handle");
  NONNULL(out, "bg_ipc_event_open", "out");
  NEED(dev, ipc_event_open, "bg_ipc_event_open");
  bg_ipc_handle h;
  int32_t rc = ipc_read("bg_ipc_event_open", handle, BG_IPC_KIND_EVENT, dev, &h);
  if (rc) return rc;
  BG_HOOK(DEV(dev));
  return OPS(dev)->ipc_event_open(dev, h.pid, h.payload, out);
}

/* ---- several devices: peer access and copies between devices ------------------------------- */
static uint64_t peer_bit(const bg_device* peer) { return (uint64_t)1 << (uint32_t)peer->ordinal; }

static int32_t can_access(bg_device* d, bg_device* p, int32_t* out) {
  *out = 0;
  if (d == p || d->backend != p->backend || !d->ops->device_can_access_peer) return BG_OK;
  BG_HOOK(d);
  return d->ops->device_can_access_peer(d, p, out);
}

BG_API int32_t bg_device_can_access_peer(void* dev, void* peer, int32_t* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_can_access_peer");
  CHECK(peer, BG_KIND_DEVICE, "bg_device_can_access_peer");
  NONNULL(out, "bg_device_can_access_peer", "out");
  return can_access(dev, peer, out);
}

static int32_t peer_check(const char* fn, bg_device* d, bg_device* p) {
  int32_t ok = 0;
  int32_t rc = can_access(d, p, &ok);
  if (rc) return rc;
  if (!ok)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "%s: %s:%d cannot access %s:%d%s", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name,
                        (int)p->ordinal,
                        d == p ? " (the same device)" : d->backend != p->backend ? " (another backend)" : "");
  return BG_OK;
}

BG_API int32_t bg_device_enable_peer_access(void* dev, void* peer) {
  const char* fn = "bg_device_enable_peer_access";
  CHECK(dev, BG_KIND_DEVICE, fn);
  CHECK(peer, BG_KIND_DEVICE, fn);
  bg_device *d = dev, *p = peer;
  int32_t rc = peer_check(fn, d, p);
  if (rc) return rc;
  pthread_mutex_lock(&dev_lock);
  if (atomic_load(&d->peer_enabled) & peer_bit(p)) {
    pthread_mutex_unlock(&dev_lock);
    return bg_set_error(BG_ERR_PEER_ACCESS_ALREADY_ENABLED, "%s: %s:%d already has access to %s:%d", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name, (int)p->ordinal);
  }
  if (d->ops->peer_enable) {
    BG_HOOK(d);
    rc = d->ops->peer_enable(d, p);
  }
  /* the driver's own "already enabled" (someone else enabled it in a shared context): the
   * access is there, so the bookkeeping says so too */
  if (rc == BG_OK || rc == BG_ERR_PEER_ACCESS_ALREADY_ENABLED) atomic_fetch_or(&d->peer_enabled, peer_bit(p));
  pthread_mutex_unlock(&dev_lock);
  return rc;
}

BG_API int32_t bg_device_disable_peer_access(void* dev, void* peer) {
  const char* fn = "bg_device_disable_peer_access";
  CHECK(dev, BG_KIND_DEVICE, fn);
  CHECK(peer, BG_KIND_DEVICE, fn);
  bg_device *d = dev, *p = peer;
  pthread_mutex_lock(&dev_lock);
  if (d == p || d->backend != p->backend || !(atomic_load(&d->peer_enabled) & peer_bit(p))) {
    pthread_mutex_unlock(&dev_lock);
    return bg_set_error(BG_ERR_PEER_ACCESS_NOT_ENABLED, "%s: %s:%d has no peer access to %s:%d", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name, (int)p->ordinal);
  }
  int32_t rc = BG_OK;
  if (d->ops->peer_disable) {
    BG_HOOK(d);
    rc = d->ops->peer_disable(d, p);
  }
  if (rc == BG_OK || rc == BG_ERR_PEER_ACCESS_NOT_ENABLED) atomic_fetch_and(&d->peer_enabled, ~peer_bit(p));
  pthread_mutex_unlock(&dev_lock);
  return rc;
}

BG_API int32_t bg_memcpy_peer_async(void* s, bg_devptr dst, void* dst_dev, bg_devptr src,
                                    void* src_dev, uint64_t n, int32_t* out_path) {
  const char* fn = "bg_memcpy_peer_async";
  CHECK(s, BG_KIND_STREAM, fn);
  CHECK(dst_dev, BG_KIND_DEVICE, fn);
  CHECK(src_dev, BG_KIND_DEVICE, fn);
  bg_device *sd = DEV(s), *dd = dst_dev, *xd = src_dev;
  if (sd != dd && sd != xd)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the stream is on neither device of the copy", fn);
  if (dd->backend != xd->backend)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: a copy between the %s and %s backends", fn,
                        xd->ops->name, dd->ops->name);
  bg_device* other = sd == dd ? xd : dd;
  int32_t path = other == sd ? BG_COPY_PATH_DEVICE
                 : (atomic_load(&sd->peer_enabled) & peer_bit(other)) ? BG_COPY_PATH_PEER
                                                                       : BG_COPY_PATH_STAGED;
  if (out_path) *out_path = path;
  if (!n) return BG_OK;
  NONNULL(src, fn, "src");
  NONNULL(dst, fn, "dst");
  BG_HOOK(sd);
  if (path == BG_COPY_PATH_DEVICE) return OPS(s)->memcpy_dtod_async(s, dst, src, n);
  if (!OPS(s)->memcpy_peer_async)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: copies between devices are not supported on the %s backend", fn,
                        OPS(s)->name);
  return OPS(s)->memcpy_peer_async(s, dst, dd, src, xd, n, path == BG_COPY_PATH_PEER);
}

/* ---- collectives: communicators ------------------------------------------------------------ */
static const bg_coll_ops* coll_of(const bg_device* d) { return d->ops->coll; }

#define COLL_NEED(d, fn)                                                                        \
  const bg_coll_ops* co = coll_of(d);                                                           \
  if (!co)                                                                                      \
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: no communicators on the %s backend", fn,     \
                        (d)->ops->name)

BG_API int32_t bg_comm_unique_id(void* dev, uint8_t* out, uint64_t cap) {
  const char* fn = "bg_comm_unique_id";
  CHECK(dev, BG_KIND_DEVICE, fn);
  NONNULL(out, fn, "out");
  if (cap < BG_COMM_ID_BYTES)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the id takes %d bytes, the buffer has %llu", fn,
                        BG_COMM_ID_BYTES, (unsigned long long)cap);
  COLL_NEED(DEV(dev), fn);
  memset(out, 0, BG_COMM_ID_BYTES);
  BG_HOOK(DEV(dev));
  return co->unique_id(dev, out);
}

BG_API int32_t bg_comm_init_rank(void* dev, int32_t nranks, const uint8_t* id, uint64_t id_len,
                                 int32_t rank, void** out) {
  const char* fn = "bg_comm_init_rank";
  CHECK(dev, BG_KIND_DEVICE, fn);
  NONNULL(out, fn, "out");
  NONNULL(id, fn, "id");
  if (id_len != BG_COMM_ID_BYTES)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: an id is %d bytes, not %llu", fn, BG_COMM_ID_BYTES,
                        (unsigned long long)id_len);
  if (nranks < 1)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: nranks %d (at least 1)", fn, (int)nranks);
  if (rank < 0 || rank >= nranks)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: rank %d out of range [0, %d)", fn, (int)rank,
                        (int)nranks);
  COLL_NEED(DEV(dev), fn);
  BG_HOOK(DEV(dev));
  return co->init_rank(dev, nranks, id, rank, out);
}

BG_API int32_t bg_comm_init_all(void* const* devs, int32_t n, void** out) {
  const char* fn = "bg_comm_init_all";
  NONNULL(devs, fn, "devs");
  NONNULL(out, fn, "out");
  if (n < 1) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %d devices (at least 1)", fn, (int)n);
  for (int32_t i = 0; i < n; i++) {
    CHECK(devs[i], BG_KIND_DEVICE, fn);
    bg_device *a = devs[i], *b = devs[0];
    if (a->backend != b->backend)
      return bg_set_error(BG_ERR_INVALID_VALUE, "%s: device %d is %s:%d, device 0 %s:%d (one backend)",
                          fn, (int)i, a->ops->name, (int)a->ordinal,
                          b->ops->name, (int)b->ordinal);
    for (int32_t j = 0; j < i; j++)
      if (devs[j] == a)
        return bg_set_error(BG_ERR_INVALID_DEVICE, "%s: %s:%d is named twice (devices %d and %d)", fn,
                            a->ops->name, (int)a->ordinal, (int)j, (int)i);
  }
  COLL_NEED((bg_device*)devs[0], fn);
  for (int32_t i = 0; i < n; i++) out[i] = NULL;
  return co->init_all((bg_device**)devs, n, out);
}

BG_API int32_t bg_comm_destroy(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_destroy");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->destroy(c);
}

BG_API int32_t bg_comm_abort(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_abort");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->abort(c);
}

BG_API int32_t bg_comm_info(void* c, int32_t* rank, int32_t* nranks) {
  CHECK(c, BG_KIND_COMM, "bg_comm_info");
  NONNULL(rank, "bg_comm_info", "rank");
  NONNULL(nranks, "bg_comm_info", "nranks");
  return coll_of(DEV(c))->info(c, rank, nranks);
}

BG_API int32_t bg_comm_check(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_check");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->check(c);
}

BG_API int32_t bg_comm_set_timeout(void* c, uint32_t ms) {
  CHECK(c, BG_KIND_COMM, "bg_comm_set_timeout");
  const bg_coll_ops* co = coll_of(DEV(c));
  if (!co->set_timeout)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_comm_set_timeout: not supported on the %s backend",
                        OPS(c)->name);
  return co->set_timeout(c, ms);
}

/* Grouping: the depth and the backends that took part (their tables), per thread. */
static _Thread_local int32_t group_depth;
static _Thread_local uint32_t group_backends;
static _Thread_local const bg_coll_ops* group_ops[BG_MAX_BACKENDS];
static _Thread_local int group_abandoned;

static uint32_t dtype_size(int32_t t) {
  switch (t) {
    case BG_DTYPE_INT8: case BG_DTYPE_UINT8: return 1;
    case BG_DTYPE_FLOAT16: case BG_DTYPE_BFLOAT16: return 2;
    case BG_DTYPE_INT32: case BG_DTYPE_UINT32: case BG_DTYPE_FLOAT32: return 4;
    case BG_DTYPE_INT64: case BG_DTYPE_UINT64: case BG_DTYPE_FLOAT64: return 8;
  }
  return 0;
}

BG_API int32_t bg_comm_collective(void* c, void* s, int32_t coll, bg_devptr send, bg_devptr recv,
                                  uint64_t count, int32_t dtype, int32_t redop, int32_t peer) {
  const char* fn = "bg_comm_collective";
  CHECK(c, BG_KIND_COMM, fn);
  CHECK(s, BG_KIND_STREAM, fn);
  if (DEV(s) != DEV(c))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the stream is on %s:%d, the communicator on %s:%d", fn,
                        OPS(s)->name, (int)DEV(s)->ordinal, OPS(c)->name, (int)DEV(c)->ordinal);
  if (coll < BG_COLL_ALL_REDUCE || coll > BG_COLL_RECV)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no collective %d", fn, (int)coll);
  if (!dtype_size(dtype)) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no data type %d", fn, (int)dtype);
  int reduces = coll == BG_COLL_ALL_REDUCE || coll == BG_COLL_REDUCE || coll == BG_COLL_REDUCE_SCATTER;
  if (reduces && (redop < BG_RED_SUM || redop > BG_RED_AVG))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no reduction %d", fn, (int)redop);
  const bg_coll_ops* co = coll_of(DEV(c));
  int32_t rank = 0, nranks = 0;
  int32_t rc = co->info(c, &rank, &nranks);
  if (rc) return rc;
  int rooted = coll == BG_COLL_BROADCAST || coll == BG_COLL_REDUCE || coll == BG_COLL_SEND || coll == BG_COLL_RECV;
  if (rooted && (peer < 0 || peer >= nranks))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s %d out of range [0, %d)", fn,
                        coll == BG_COLL_SEND || coll == BG_COLL_RECV ? "peer" : "root", (int)peer,
                        (int)nranks);
  if (count && coll != BG_COLL_RECV) NONNULL(send, fn, "send");
  if (count && coll != BG_COLL_SEND) NONNULL(recv, fn, "recv");
  bg_coll_call call = {coll, dtype, reduces ? redop : 0, rooted ? peer : 0, send, recv, count};
  BG_HOOK(DEV(c));
  int grouped = group_depth > 0;
  if (grouped) {
    uint32_t bit = 1u << (uint32_t)DEV(c)->backend;
    if (!(group_backends & bit)) {
      if (co->group_start && (rc = co->group_start())) return rc;
      group_backends |= bit;
      group_ops[DEV(c)->backend] = co;
    }
  }
  return co->call(c, s, &call, grouped);
}

BG_API int32_t bg_comm_group_start(void) {
  group_depth++;
  return BG_OK;
}

BG_API int32_t bg_comm_group_end(void) {
  if (group_depth <= 0)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_end: no group was started on this thread");
  if (--group_depth) return BG_OK;
  uint32_t used = group_backends;
  int discard = group_abandoned;
  group_backends = 0;
  group_abandoned = 0;
  int32_t first = BG_OK;
  char msg[512] = {0};
  for (int32_t b = 0; b < BG_MAX_BACKENDS; b++) {
    if (!(used & (1u << (uint32_t)b))) continue;
    const bg_coll_ops* co = group_ops[b];
    group_ops[b] = NULL;
    if (!co || !co->group_end) continue;
    int32_t rc = co->group_end(discard);
    if (rc && !first) {
      first = rc;
      bg_last_error(msg, sizeof msg);
    }
  }
  if (first) return bg_set_error(first, "%s", msg);
  if (discard)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_end: the group was abandoned (bg_comm_group_abandon); "
                                              "its calls were dropped where the backend can drop them");
  return BG_OK;
}

BG_API int32_t bg_comm_group_abandon(void) {
  if (group_depth <= 0)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_abandon: no group was started on this thread");
  group_abandoned = 1;
  return BG_OK;
}

/* ---- streams ------------------------------------------------------------------------------- */
BG_API int32_t bg_stream_create(void* dev, uint32_t flags, int32_t prio, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_stream_create");
  NONNULL(out, "bg_stream_create", "out");
  if (flags & ~(uint32_t)BG_STREAM_NON_BLOCKING)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_create: unknown flags 0x%x", flags);
  BG_HOOK(DEV(dev));
  return OPS(dev)->stream_create(dev, flags, prio, out);
}

BG_API int32_t bg_stream_default(void* dev, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_stream_default");
  NONNULL(out, "bg_stream_default", "out");
  *out = ((bg_device*)dev)->default_stream;
  return BG_OK;
}

BG_API int32_t bg_stream_destroy(void* s) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_destroy");
  if (s == DEV(s)->default_stream)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_stream_destroy: the default stream belongs to its device");
  BG_HOOK(DEV(s));
  return OPS(s)->stream_destroy(s);
}

BG_API int32_t bg_stream_synchronize(void* s) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_synchronize");
  BG_HOOK(DEV(s));
  return OPS(s)->stream_synchronize(s);
}

BG_API int32_t bg_stream_query(void* s) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_query");
  BG_HOOK(DEV(s));
  return OPS(s)->stream_query(s);
}

BG_API int32_t bg_stream_wait_event(void* s, void* e) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_wait_event");
  CHECK(e, BG_KIND_EVENT, "bg_stream_wait_event");
  /* an event of another device of the same backend is fine (cuStreamWaitEvent across contexts) */
  if (DEV(s)->backend != DEV(e)->backend)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_wait_event: event of another backend's device");
  BG_HOOK(DEV(s));
  return OPS(s)->stream_wait_event(s, e);
}

BG_API int32_t bg_memcpy_htod_async(void* s, bg_devptr dst, const void* src, uint64_t n) {
  CHECK(s, BG_KIND_STREAM, "bg_memcpy_htod_async");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_htod_async", "src");
  NONNULL(dst, "bg_memcpy_htod_async", "dst");
  BG_HOOK(DEV(s));
  return OPS(s)->memcpy_htod_async(s, dst, src, n);
}

BG_API int32_t bg_memcpy_dtoh_async(void* s, void* dst, bg_devptr src, uint64_t n) {
  CHECK(s, BG_KIND_STREAM, "bg_memcpy_dtoh_async");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_dtoh_async", "src");
  NONNULL(dst, "bg_memcpy_dtoh_async", "dst");
  BG_HOOK(DEV(s));
  return OPS(s)->memcpy_dtoh_async(s, dst, src, n);
}

BG_API int32_t bg_memcpy_dtod_async(void* s, bg_devptr dst, bg_devptr src, uint64_t n) {
  CHECK(s, BG_KIND_STREAM, "bg_memcpy_dtod_async");
  if (!n) return BG_OK;
  NONNULL(src, "bg_memcpy_dtod_async", "src");
  NONNULL(dst, "bg_memcpy_dtod_async", "dst");
  BG_HOOK(DEV(s));
  return OPS(s)->memcpy_dtod_async(s, dst, src, n);
}

BG_API int32_t bg_memset_async(void* s, bg_devptr dst, uint32_t pattern, uint32_t esz,
                               uint64_t count) {
  CHECK(s, BG_KIND_STREAM, "bg_memset_async");
  if (!count) return BG_OK;
  int32_t rc = check_memset("bg_memset_async", dst, esz);
  if (rc) return rc;
  BG_HOOK(DEV(s));
  return OPS(s)->memset_async(s, dst, pattern, esz, count);
}

BG_API int32_t bg_launch_host_func(void* s, bg_host_fn fn, void* user) {
  CHECK(s, BG_KIND_STREAM, "bg_launch_host_func");
  NONNULL(fn, "bg_launch_host_func", "fn");
  BG_HOOK(DEV(s));
  return OPS(s)->launch_host_func(s, fn, user);
}

BG_API int32_t bg_stream_notify(void* s, bg_host_fn fn, void* user) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_notify");
  NONNULL(fn, "bg_stream_notify", "fn");
  BG_HOOK(DEV(s));
  return OPS(s)->stream_notify ? OPS(s)->stream_notify(s, fn, user) : OPS(s)->launch_host_func(s, fn, user);
}

/* ---- signals ------------------------------------------------------------------------------- */
struct bg_signal {
  bg_obj h;
  _Atomic uint32_t state; /* read by TypeScript through bg_signal_address */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

BG_API int32_t bg_signal_create(void** out) {
  NONNULL(out, "bg_signal_create", "out");
  bg_signal* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_signal_create: out of host memory");
  bg_obj_init(s, BG_KIND_SIGNAL, NULL);
  atomic_init(&s->state, BG_SIGNAL_IDLE);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  *out = s;
  return BG_OK;
}

BG_API int32_t bg_signal_destroy(void* sig) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_destroy");
  bg_signal* s = sig;
  uint32_t st = atomic_load(&s->state);
  if (st == BG_SIGNAL_PENDING || st == BG_SIGNAL_REACHED)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_signal_destroy: a stream still waits on it");
  bg_obj_kill(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return BG_OK;
}

BG_API int32_t bg_signal_address(void* sig, void** out) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_address");
  NONNULL(out, "bg_signal_address", "out");
  *out = (void*)&((bg_signal*)sig)->state;
  return BG_OK;
}

BG_API int32_t bg_signal_release(void* sig) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_release");
  bg_signal* s = sig;
  pthread_mutex_lock(&s->mu);
  if (atomic_load(&s->state) != BG_SIGNAL_REACHED) {
    pthread_mutex_unlock(&s->mu);
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_signal_release: the stream has not reached it");
  }
  atomic_store_explicit(&s->state, BG_SIGNAL_RELEASED, memory_order_release);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return BG_OK;
}

void bg_signal_run(void* sig) {
  bg_signal* s = sig;
  pthread_mutex_lock(&s->mu);
  atomic_store_explicit(&s->state, BG_SIGNAL_REACHED, memory_order_release);
  while (atomic_load_explicit(&s->state, memory_order_acquire) != BG_SIGNAL_RELEASED)
    pthread_cond_wait(&s->cv, &s->mu);
  atomic_store_explicit(&s->state, BG_SIGNAL_IDLE, memory_order_release);
  pthread_mutex_unlock(&s->mu);
}

BG_API int32_t bg_stream_host_signal(void* stream, void* sig) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_host_signal");
  CHECK(sig, BG_KIND_SIGNAL, "bg_stream_host_signal");
  bg_signal* s = sig;
  uint32_t expect = BG_SIGNAL_IDLE;
  if (!atomic_compare_exchange_strong(&s->state, &expect, BG_SIGNAL_PENDING))
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_stream_host_signal: signal already in use");
  BG_HOOK(DEV(stream));
  int32_t rc = OPS(stream)->launch_host_func(stream, bg_signal_run, s);
  if (rc != BG_OK) atomic_store(&s->state, BG_SIGNAL_IDLE);
  return rc;
}

BG_API int32_t bg_stream_wait_value32(void* stream, bg_devptr addr, uint32_t value) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_wait_value32");
  NONNULL(addr, "bg_stream_wait_value32", "addr");
  if (addr & 3) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_wait_value32: address not 4-byte aligned");
  NEED(stream, stream_wait_value32, "bg_stream_wait_value32");
  BG_HOOK(DEV(stream));
  return OPS(stream)->stream_wait_value32(stream, addr, value);
}

BG_API int32_t bg_stream_write_value32(void* stream, bg_devptr addr, uint32_t value) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_write_value32");
  NONNULL(addr, "bg_stream_write_value32", "addr");
  if (addr & 3) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_write_value32: address not 4-byte aligned");
  NEED(stream, stream_write_value32, "bg_stream_write_value32");
  BG_HOOK(DEV(stream));
  return OPS(stream)->stream_write_value32(stream, addr, value);
}

/* ---- events -------------------------------------------------------------------------------- */
BG_API int32_t bg_event_create(void* dev, uint32_t flags, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_event_create");
  NONNULL(out, "bg_event_create", "out");
  if (flags & ~(uint32_t)(BG_EVENT_BLOCKING_SYNC | BG_EVENT_DISABLE_TIMING | BG_EVENT_INTERPROCESS))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_event_create: unknown flags 0x%x", flags);
  if ((flags & BG_EVENT_INTERPROCESS) && !(flags & BG_EVENT_DISABLE_TIMING))
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_event_create: BG_EVENT_INTERPROCESS needs BG_EVENT_DISABLE_TIMING");
  if (flags & BG_EVENT_INTERPROCESS) NEED(dev, ipc_event_export, "bg_event_create (BG_EVENT_INTERPROCESS)");
  BG_HOOK(DEV(dev));
  return OPS(dev)->event_create(dev, flags, out);
}

BG_API int32_t bg_event_destroy(void* e) {
  CHECK(e, BG_KIND_EVENT, "bg_event_destroy");
  BG_HOOK(DEV(e));
  return OPS(e)->event_destroy(e);
}

BG_API int32_t bg_event_record(void* e, void* s) {
  CHECK(e, BG_KIND_EVENT, "bg_event_record");
  CHECK(s, BG_KIND_STREAM, "bg_event_record");
  if (DEV(s) != DEV(e))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_event_record: stream of another device");
  BG_HOOK(DEV(e));
  return OPS(e)->event_record(e, s);
}

BG_API int32_t bg_event_query(void* e) {
  CHECK(e, BG_KIND_EVENT, "bg_event_query");
  BG_HOOK(DEV(e));
  return OPS(e)->event_query(e);
}

BG_API int32_t bg_event_synchronize(void* e) {
  CHECK(e, BG_KIND_EVENT, "bg_event_synchronize");
  BG_HOOK(DEV(e));
  return OPS(e)->event_synchronize(e);
}

BG_API int32_t bg_event_elapsed(float* ms, void* a, void* b) {
  NONNULL(ms, "bg_event_elapsed", "out_ms");
  CHECK(a, BG_KIND_EVENT, "bg_event_elapsed");
  CHECK(b, BG_KIND_EVENT, "bg_event_elapsed");
  if (DEV(a) != DEV(b))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_event_elapsed: events of different devices");
  BG_HOOK(DEV(a));
  return OPS(a)->event_elapsed(ms, a, b);
}

/* ---- runtime compilation (the result object is base.c's) --------------------------------- */
BG_API int32_t bg_rtc_compile(void* dev, const char* src, const char* name, const char* options,
                              int32_t want_cubin, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_rtc_compile");
  NONNULL(src, "bg_rtc_compile", "src");
  NONNULL(out, "bg_rtc_compile", "out_result");
  NEED(dev, rtc_compile, "bg_rtc_compile");
  *out = NULL;
  BG_HOOK(DEV(dev));
  return OPS(dev)->rtc_compile(dev, src, name ? name : "kernel.cu", options ? options : "",
                               want_cubin, out);
}

BG_API int32_t bg_rtc_sizes(void* r, uint64_t* code_len, uint64_t* log_len) {
  CHECK(r, BG_KIND_RTC, "bg_rtc_sizes");
  if (code_len) *code_len = ((bg_rtc*)r)->code_len;
  if (log_len) *log_len = ((bg_rtc*)r)->log_len;
  return BG_OK;
}

BG_API int32_t bg_rtc_copy(void* r, void* code, void* log) {
  CHECK(r, BG_KIND_RTC, "bg_rtc_copy");
  bg_rtc* x = r;
  if (code && x->code_len) memcpy(code, x->code, x->code_len);
  if (log && x->log_len) memcpy(log, x->log, x->log_len);
  return BG_OK;
}

BG_API int32_t bg_rtc_free(void* r) {
  CHECK(r, BG_KIND_RTC, "bg_rtc_free");
  bg_rtc* x = r;
  bg_obj_kill(x);
  free(x->code);
  free(x->log);
  free(x);
  return BG_OK;
}

BG_API int32_t bg_rtc_version(void* dev, int32_t* major, int32_t* minor) {
  CHECK(dev, BG_KIND_DEVICE, "bg_rtc_version");
  NONNULL(major, "bg_rtc_version", "major");
  NONNULL(minor, "bg_rtc_version", "minor");
  NEED(dev, rtc_version, "bg_rtc_version");
  BG_HOOK(DEV(dev));
  return OPS(dev)->rtc_version(dev, major, minor);
}

/* ---- modules and kernels ------------------------------------------------------------------- */
BG_API int32_t bg_module_load(void* dev, int32_t kind, const void* data, uint64_t n, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_module_load");
  NONNULL(data, "bg_module_load", "data");
  NONNULL(out, "bg_module_load", "out");
  if (kind < BG_IMAGE_SHARED_LIBRARY || kind > BG_IMAGE_SYMBOLS)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_module_load: unknown image kind %d", kind);
  BG_HOOK(DEV(dev));
  return OPS(dev)->module_load(dev, kind, data, n, out);
}

BG_API int32_t bg_module_unload(void* m) {
  CHECK(m, BG_KIND_MODULE, "bg_module_unload");
  BG_HOOK(DEV(m));
  return OPS(m)->module_unload(m);
}

BG_API int32_t bg_module_get_kernel(void* m, const char* name, void** out) {
  CHECK(m, BG_KIND_MODULE, "bg_module_get_kernel");
  NONNULL(name, "bg_module_get_kernel", "name");
  NONNULL(out, "bg_module_get_kernel", "out");
  BG_HOOK(DEV(m));
  return OPS(m)->module_get_kernel(m, name, out);
}

BG_API int32_t bg_kernel_max_threads(void* k, int32_t* out) {
  CHECK(k, BG_KIND_KERNEL, "bg_kernel_max_threads");
  NONNULL(out, "bg_kernel_max_threads", "out");
  BG_HOOK(DEV(k));
  return OPS(k)->kernel_max_threads(k, out);
}

BG_API int32_t bg_kernel_retarget(void* k, void* from) {
  CHECK(k, BG_KIND_KERNEL, "bg_kernel_retarget");
  CHECK(from, BG_KIND_KERNEL, "bg_kernel_retarget");
  if (DEV(k) != DEV(from))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_kernel_retarget: the kernels are on different devices");
  NEED(k, kernel_retarget, "bg_kernel_retarget");
  BG_HOOK(DEV(k));
  return OPS(k)->kernel_retarget(k, from);
}

static int32_t check_launch(const char* fn, void* k, void* s, const uint32_t g[3],
                            const uint32_t b[3], const void* args, uint32_t nargs) {
  CHECK(k, BG_KIND_KERNEL, fn);
  CHECK(s, BG_KIND_STREAM, fn);
  if (DEV(k) != DEV(s))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: kernel and stream on different devices", fn);
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: zero grid or block dimension (%ux%ux%u, %ux%ux%u)",
                        fn, g[0], g[1], g[2], b[0], b[1], b[2]);
  if (nargs && !args) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: args is NULL", fn);
  if (nargs > 256) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u arguments (max 256)", fn, nargs);
  return BG_OK;
}

BG_API int32_t bg_launch(void* k, void* s, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx,
                         uint32_t by, uint32_t bz, uint32_t shared, const void* args,
                         uint32_t nargs) {
  const uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  int32_t rc = check_launch("bg_launch", k, s, g, b, args, nargs);
  if (rc) return rc;
  BG_HOOK(DEV(k));
  return OPS(k)->launch(k, s, g, b, shared, (const uint64_t*)args, nargs);
}

/* ---- capture and graphs -------------------------------------------------------------------- */
BG_API int32_t bg_stream_begin_capture(void* s, int32_t mode) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_begin_capture");
  if (mode < BG_CAPTURE_MODE_GLOBAL || mode > BG_CAPTURE_MODE_RELAXED)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_begin_capture: unknown mode %d", mode);
  if (s == DEV(s)->default_stream)
    return bg_set_error(BG_ERR_STREAM_CAPTURE_UNSUPPORTED,
                        "bg_stream_begin_capture: the device's default stream cannot be captured; "
                        "create a stream");
  NEED(s, begin_capture, "bg_stream_begin_capture");
  BG_HOOK(DEV(s));
  return OPS(s)->begin_capture(s, mode);
}

BG_API int32_t bg_stream_end_capture(void* s, void** out) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_end_capture");
  NONNULL(out, "bg_stream_end_capture", "out_graph");
  NEED(s, end_capture, "bg_stream_end_capture");
  *out = NULL;
  BG_HOOK(DEV(s));
  return OPS(s)->end_capture(s, out);
}

BG_API int32_t bg_stream_capture_status(void* s, int32_t* out) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_capture_status");
  NONNULL(out, "bg_stream_capture_status", "out");
  NEED(s, capture_status, "bg_stream_capture_status");
  BG_HOOK(DEV(s));
  return OPS(s)->capture_status(s, out);
}

BG_API int32_t bg_graph_destroy(void* g) {
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    BG_HOOK(DEV(g));
    return bg_cmdgraph_destroy(g);
  }
  CHECK(g, BG_KIND_GRAPH, "bg_graph_destroy");
  BG_HOOK(DEV(g));
  return OPS(g)->graph_destroy(g);
}

BG_API int32_t bg_graph_node_count(void* g, uint32_t* nodes, uint32_t* knodes) {
  uint32_t a = 0, b = 0;
  int32_t rc;
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    rc = bg_cmdgraph_node_count(g, &a, &b);
  } else {
    CHECK(g, BG_KIND_GRAPH, "bg_graph_node_count");
    BG_HOOK(DEV(g));
    rc = OPS(g)->graph_node_count(g, &a, &b);
  }
  if (nodes) *nodes = a;
  if (knodes) *knodes = b;
  return rc;
}

BG_API int32_t bg_graph_instantiate(void* g, void** out) {
  NONNULL(out, "bg_graph_instantiate", "out_exec");
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    BG_HOOK(DEV(g));
    return bg_cmdgraph_instantiate(g, out);
  }
  CHECK(g, BG_KIND_GRAPH, "bg_graph_instantiate");
  BG_HOOK(DEV(g));
  return OPS(g)->graph_instantiate(g, out);
}

BG_API int32_t bg_graph_exec_destroy(void* x) {
  if (bg_obj_is(x, BG_KIND_CMD_EXEC)) {
    BG_HOOK(DEV(x));
    return bg_cmdgraph_exec_destroy(x);
  }
  CHECK(x, BG_KIND_EXEC, "bg_graph_exec_destroy");
  BG_HOOK(DEV(x));
  return OPS(x)->graph_exec_destroy(x);
}

BG_API int32_t bg_graph_upload(void* x, void* s) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_upload");
  CHECK(s, BG_KIND_STREAM, "bg_graph_upload");
  if (DEV(x) != DEV(s))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_upload: stream of another device");
  if (generic) return BG_OK; /* a command list has nothing to upload ahead */
  BG_HOOK(DEV(x));
  return OPS(x)->graph_upload(x, s);
}

BG_API int32_t bg_graph_launch(void* x, void* s) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_launch");
  CHECK(s, BG_KIND_STREAM, "bg_graph_launch");
  if (DEV(x) != DEV(s))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_launch: stream of another device");
  BG_HOOK(DEV(x));
  if (generic) return bg_cmdgraph_launch(x, s);
  return OPS(x)->graph_launch(x, s);
}

BG_API int32_t bg_graph_exec_set_kernel_args(void* x, uint32_t index, const void* args,
                                             uint32_t nargs) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_exec_set_kernel_args");
  if (nargs && !args)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_exec_set_kernel_args: args is NULL");
  if (generic) return bg_cmdgraph_set_kernel_args(x, index, (const uint64_t*)args, nargs);
  BG_HOOK(DEV(x));
  return OPS(x)->graph_exec_set_kernel_args(x, index, (const uint64_t*)args, nargs);
}

/* ---- rings --------------------------------------------------------------------------------- */
typedef struct bg_ring {
  bg_obj h;
  uint8_t* base;    /* host view */
  bg_devptr dbase;  /* device view */
  uint32_t msg_bytes, capacity;
} bg_ring;

#define RING_HEAD(r) ((_Atomic uint64_t*)((r)->base + BG_RING_HEAD_OFFSET))
#define RING_TAIL(r) ((_Atomic uint64_t*)((r)->base + BG_RING_TAIL_OFFSET))

BG_API int32_t bg_ring_create(void* dev, uint32_t msg_bytes, uint32_t capacity, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ring_create");
  NONNULL(out, "bg_ring_create", "out");
  NEED(dev, ring_alloc, "bg_ring_create");
  if (!msg_bytes || msg_bytes % 4 || msg_bytes > 65536)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ring_create: message size %u (want a multiple of 4, 4..65536)", msg_bytes);
  if (capacity < 2 || capacity > (1u << 24) || (capacity & (capacity - 1)))
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ring_create: capacity %u (want a power of two, 2..16777216)", capacity);
  bg_ring* r = calloc(1, sizeof *r);
  if (!r) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ring_create: out of host memory");
  uint64_t bytes = BG_RING_DATA_OFFSET + (uint64_t)msg_bytes * capacity;
  void* host = NULL;
  BG_HOOK(DEV(dev));
  int32_t rc = OPS(dev)->ring_alloc(dev, bytes, &host, &r->dbase);
  if (rc) {
    free(r);
    return rc;
  }
  r->base = host;
  memset(r->base, 0, BG_RING_DATA_OFFSET);
  uint32_t meta[4] = {msg_bytes, capacity, 0, 0};
  memcpy(r->base + BG_RING_META_OFFSET, meta, sizeof meta);
  r->msg_bytes = msg_bytes;
  r->capacity = capacity;
  bg_obj_init(r, BG_KIND_RING, dev);
  *out = r;
  return BG_OK;
}

BG_API int32_t bg_ring_destroy(void* ring) {
  CHECK(ring, BG_KIND_RING, "bg_ring_destroy");
  bg_ring* r = ring;
  bg_obj_kill(r);
  BG_HOOK(DEV(r));
  int32_t rc = DEV(r)->ops->ring_free(DEV(r), r->base);
  free(r);
  return rc;
}

BG_API int32_t bg_ring_address(void* ring, void** host, bg_devptr* d) {
  CHECK(ring, BG_KIND_RING, "bg_ring_address");
  bg_ring* r = ring;
  if (host) *host = r->base;
  if (d) *d = r->dbase;
  return BG_OK;
}

BG_API int32_t bg_ring_push(void* ring, const void* msgs, uint32_t n, uint32_t* pushed) {
  CHECK(ring, BG_KIND_RING, "bg_ring_push");
  NONNULL(pushed, "bg_ring_push", "out_pushed");
  *pushed = 0;
  if (!n) return BG_OK;
  NONNULL(msgs, "bg_ring_push", "msgs");
  bg_ring* r = ring;
  uint64_t tail = atomic_load_explicit(RING_TAIL(r), memory_order_relaxed);
  uint64_t head = atomic_load_explicit(RING_HEAD(r), memory_order_acquire);
  uint64_t room = r->capacity - (tail - head);
  uint32_t k = n < room ? n : (uint32_t)room;
  const uint8_t* src = msgs;
  uint8_t* data = r->base + BG_RING_DATA_OFFSET;
  uint32_t mask = r->capacity - 1;
  for (uint32_t i = 0; i < k;) {
    uint32_t slot = (uint32_t)((tail + i) & mask);
    uint32_t run = r->capacity - slot;
    if (run > k - i) run = k - i;
    memcpy(data + (uint64_t)slot * r->msg_bytes, src + (uint64_t)i * r->msg_bytes,
           (uint64_t)run * r->msg_bytes);
    i += run;
  }
  atomic_store_explicit(RING_TAIL(r), tail + k, memory_order_release);
  *pushed = k;
  return BG_OK;
}

BG_API int32_t bg_ring_pop(void* ring, void* out, uint32_t max, uint32_t* popped) {
  CHECK(ring, BG_KIND_RING, "bg_ring_pop");
  NONNULL(popped, "bg_ring_pop", "out_popped");
  *popped = 0;
  if (!max) return BG_OK;
  NONNULL(out, "bg_ring_pop", "out");
  bg_ring* r = ring;
  uint64_t head = atomic_load_explicit(RING_HEAD(r), memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(RING_TAIL(r), memory_order_acquire);
  uint64_t avail = tail - head;
  uint32_t k = max < avail ? max : (uint32_t)avail;
  uint8_t* dst = out;
  const uint8_t* data = r->base + BG_RING_DATA_OFFSET;
  uint32_t mask = r->capacity - 1;
  for (uint32_t i = 0; i < k;) {
    uint32_t slot = (uint32_t)((head + i) & mask);
    uint32_t run = r->capacity - slot;
    if (run > k - i) run = k - i;
    memcpy(dst + (uint64_t)i * r->msg_bytes, data + (uint64_t)slot * r->msg_bytes,
           (uint64_t)run * r->msg_bytes);
    i += run;
  }
  atomic_store_explicit(RING_HEAD(r), head + k, memory_order_release);
  *popped = k;
  return BG_OK;
}

BG_API int32_t bg_ring_count(void* ring, uint32_t* used) {
  CHECK(ring, BG_KIND_RING, "bg_ring_count");
  NONNULL(used, "bg_ring_count", "out_used");
  bg_ring* r = ring;
  *used = (uint32_t)(atomic_load_explicit(RING_TAIL(r), memory_order_acquire) -
                     atomic_load_explicit(RING_HEAD(r), memory_order_acquire));
  return BG_OK;
}

/* ---- measurement helpers ------------------------------------------------------------------- */
static int32_t (*volatile noop_ptr)(void) = bg_noop;

BG_API int32_t bg_bench_noop_loop(uint64_t iters) {
  int32_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) acc |= noop_ptr();
  return acc;
}

BG_API int32_t bg_bench_launch_loop(void* k, void* s, uint32_t gx, uint32_t bx, const void* args,
                                    uint32_t nargs, uint64_t iters) {
  for (uint64_t i = 0; i < iters; i++) {
    int32_t rc = bg_launch(k, s, gx, 1, 1, bx, 1, 1, 0, args, nargs);
    if (rc) return rc;
  }
  return BG_OK;
}
