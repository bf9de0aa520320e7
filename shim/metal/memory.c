/*
 * metal/memory.c: the address map (any address inside an allocation back to its MTLBuffer),
 * allocations, synchronous copies and fills, ring memory.
 *
 * Calls: runtime.c, stream.c, base.c.
 */
#include "metal.h"

#if defined(__APPLE__)

static const char* const BUF_WHAT[] = {"device allocation", "host allocation", "ring"};

/* ---- address map ---------------------------------------------------------------------------- */
/* Index of the allocation containing a, or -1. Caller holds d->mu. */
ptrdiff_t mtl_map_find(const mtl_dev* d, uint64_t a) {
  size_t lo = 0, hi = d->nmap;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (d->map[mid].base <= a) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return -1;
  const mtl_buf* e = &d->map[lo - 1];
  return a - e->base < e->len ? (ptrdiff_t)(lo - 1) : -1;
}

static int32_t map_add(mtl_dev* d, uint64_t base, uint64_t len, oc_id buf, int kind) {
  pthread_mutex_lock(&d->mu);
  if (d->nmap == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    mtl_buf* m = realloc(d->map, cap * sizeof *m);
    if (!m) {
      pthread_mutex_unlock(&d->mu);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "Metal: out of host memory for the address map");
    }
    d->map = m;
    d->cap = cap;
  }
  size_t i = d->nmap;
  while (i && d->map[i - 1].base > base) i--;
  memmove(d->map + i + 1, d->map + i, (d->nmap - i) * sizeof *d->map);
  d->map[i] = (mtl_buf){base, len, buf, kind};
  d->nmap++;
  pthread_mutex_unlock(&d->mu);
  return BG_OK;
}

/* Remove the allocation starting exactly at base, of the given kind; returns its buffer. */
static oc_id map_take(mtl_dev* d, uint64_t base, int kind) {
  pthread_mutex_lock(&d->mu);
  ptrdiff_t i = mtl_map_find(d, base);
  oc_id buf = NULL;
  if (i >= 0 && d->map[i].base == base && d->map[i].kind == kind) {
    buf = d->map[i].buf;
    memmove(d->map + i, d->map + i + 1, (d->nmap - (size_t)i - 1) * sizeof *d->map);
    d->nmap--;
  }
  pthread_mutex_unlock(&d->mu);
  return buf;
}

/* (buffer, offset) of [a, a + n) when it lies inside one allocation. */
int mtl_lookup(mtl_dev* d, uint64_t a, uint64_t n, mtl_ref* r) {
  pthread_mutex_lock(&d->mu);
  ptrdiff_t i = mtl_map_find(d, a);
  mtl_buf e = i >= 0 ? d->map[i] : (mtl_buf){0, 0, NULL, 0};
  pthread_mutex_unlock(&d->mu);
  if (i < 0) return -1; /* not ours */
  r->buf = e.buf;
  r->off = a - e.base;
  r->ptr = (uint8_t*)(uintptr_t)a;
  return n <= e.len - r->off ? 0 : 1; /* 1: runs past the end */
}

int32_t mtl_resolve(mtl_dev* d, uint64_t a, uint64_t n, const char* fn, const char* what,
                    mtl_ref* r) {
  int k = mtl_lookup(d, a, n, r);
  if (k < 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s 0x%llx is not memory of this Metal device",
                        fn, what, HEX(a));
  if (k > 0)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "%s: %s range 0x%llx + %llu runs past the end of its allocation", fn, what,
                        HEX(a), HEX(n));
  return BG_OK;
}

/* ---- memory --------------------------------------------------------------------------------- */
static int32_t buf_alloc(mtl_dev* d, uint64_t bytes, int kind, const char* fn, uint64_t* out) {
  if (bytes > d->max_buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: %llu bytes exceed the device's maxBufferLength %llu",
                        fn, HEX(bytes), HEX(d->max_buf));
  oc_id buf = m_id_u64_u64(d->dev, mtl_S.newBufferWithLength, bytes, MTL_STORAGE_SHARED);
  if (!buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newBufferWithLength:options: %llu bytes failed",
                        HEX(bytes));
  uint64_t base = (uint64_t)(uintptr_t)m_ptr(buf, mtl_S.contents);
  int32_t rc = map_add(d, base, bytes, buf, kind);
  if (rc) {
    rel(buf);
    return rc;
  }
  *out = base;
  return BG_OK;
}

static int32_t buf_free(mtl_dev* d, uint64_t base, int kind, const char* fn) {
  oc_id buf = map_take(d, base, kind);
  if (!buf)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: 0x%llx is not the start of a Metal %s", fn,
                        HEX(base), BUF_WHAT[kind]);
  rel(buf); /* command buffers that use it hold their own reference */
  return BG_OK;
}

int32_t mtl_mem_alloc(bg_device* dv, uint64_t bytes, bg_devptr* out) {
  return buf_alloc((mtl_dev*)dv, bytes, BUF_DEVICE, "bg_mem_alloc", out);
}
int32_t mtl_mem_free(bg_device* dv, bg_devptr p) {
  return buf_free((mtl_dev*)dv, p, BUF_DEVICE, "bg_mem_free");
}

static int32_t host_alloc_impl(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr) {
  uint64_t base = 0;
  int32_t rc = buf_alloc((mtl_dev*)dv, bytes, BUF_HOST, "bg_host_alloc", &base);
  if (rc) return rc;
  *host = (void*)(uintptr_t)base; /* shared storage: always mapped, same address */
  *dptr = base;
  return BG_OK;
}
int32_t mtl_host_alloc(bg_device* dv, uint64_t bytes, uint32_t flags, void** host,
                       bg_devptr* dptr) {
  (void)flags;
  return host_alloc_impl(dv, bytes, host, dptr);
}
int32_t mtl_host_free(bg_device* dv, void* host) {
  return buf_free((mtl_dev*)dv, (uint64_t)(uintptr_t)host, BUF_HOST, "bg_host_free");
}

static int32_t ring_alloc_impl(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr) {
  uint64_t base = 0;
  int32_t rc = buf_alloc((mtl_dev*)dv, bytes, BUF_RING, "bg_ring_create", &base);
  if (rc) return rc;
  memset((void*)(uintptr_t)base, 0, (size_t)bytes);
  *host = (void*)(uintptr_t)base;
  *dptr = base;
  return BG_OK;
}
int32_t mtl_ring_alloc(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr) {
  return ring_alloc_impl(dv, bytes, host, dptr);
}
int32_t mtl_ring_free(bg_device* dv, void* host) {
  return buf_free((mtl_dev*)dv, (uint64_t)(uintptr_t)host, BUF_RING, "bg_ring_destroy");
}

/* Synchronous copies and fills: after the default stream's work, on the CPU (shared storage). */
static int32_t sync_default(bg_device* dv) { POOLED(mtl_stream_sync(dv->default_stream)); }

int32_t mtl_memcpy_htod(bg_device* dv, bg_devptr dst, const void* src, uint64_t n) {
  mtl_ref r;
  int32_t rc = mtl_resolve((mtl_dev*)dv, dst, n, "bg_memcpy_htod", "dst", &r);
  if (!rc) rc = sync_default(dv);
  if (!rc) memcpy(r.ptr, src, (size_t)n);
  return rc;
}

int32_t mtl_memcpy_dtoh(bg_device* dv, void* dst, bg_devptr src, uint64_t n) {
  mtl_ref r;
  int32_t rc = mtl_resolve((mtl_dev*)dv, src, n, "bg_memcpy_dtoh", "src", &r);
  if (!rc) rc = sync_default(dv);
  if (!rc) memcpy(dst, r.ptr, (size_t)n);
  return rc;
}

int32_t mtl_memcpy_dtod(bg_device* dv, bg_devptr dst, bg_devptr src, uint64_t n) {
  mtl_ref rd, rs;
  int32_t rc = mtl_resolve((mtl_dev*)dv, dst, n, "bg_memcpy_dtod", "dst", &rd);
  if (!rc) rc = mtl_resolve((mtl_dev*)dv, src, n, "bg_memcpy_dtod", "src", &rs);
  if (!rc) rc = sync_default(dv);
  if (!rc) memmove(rd.ptr, rs.ptr, (size_t)n);
  return rc;
}

int32_t mtl_memset(bg_device* dv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                   uint64_t count) {
  mtl_ref r;
  if (count > UINT64_MAX / esz)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_memset: %llu elements overflow", HEX(count));
  int32_t rc = mtl_resolve((mtl_dev*)dv, dst, count * esz, "bg_memset", "dst", &r);
  if (!rc) rc = sync_default(dv);
  if (rc) return rc;
  if (esz == 1) {
    memset(r.ptr, (int)(pattern & 0xff), (size_t)count);
  } else if (esz == 2) {
    uint16_t v = (uint16_t)pattern;
    for (uint64_t i = 0; i < count; i++) memcpy(r.ptr + 2 * i, &v, 2);
  } else {
    for (uint64_t i = 0; i < count; i++) memcpy(r.ptr + 4 * i, &pattern, 4);
  }
  return BG_OK;
}

#endif /* __APPLE__ */
