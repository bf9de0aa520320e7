/*
 * cuda/memory.c: device memory (allocated, or a queued free's block handed out again; freed, or
 * queued while the free could wait forever), pinned host memory, synchronous copies and memsets
 * (each waits for the legacy stream, so the data is in place on return), and ring memory (mapped
 * pinned host memory).
 *
 * Calls: driver.c, release.c, context.c, base.c.
 */
#include "cuda_internal.h"

/* ---- memory ----------------------------------------------------------------------------------- */
int32_t cu_mem_alloc(bg_device* dev, uint64_t bytes, bg_devptr* out) {
  ENTER((cu_device*)dev);
  bgcu_deviceptr p = reuse_deferred((cu_device*)dev, bytes, 0); /* a queued free's block */
  if (!p) {
    bgcu_result r = cu.cuMemAlloc_v2(&p, (size_t)bytes);
    if (map_cu(r) == BG_ERR_OUT_OF_MEMORY) p = reuse_deferred((cu_device*)dev, bytes, 1);
    if (!p) return cu_fail(r, "cuMemAlloc_v2");
  }
  *out = p;
  return BG_OK;
}

/* Queued while blocked (see blocked); checked first, so a bad pointer is an error now. */
int32_t cu_mem_free(bg_device* dev, bg_devptr p) {
  cu_device* d = (cu_device*)dev;
  ENTER(d);
  if (blocked(d)) {
    bgcu_deviceptr base = 0;
    size_t size = 0;
    if (cu.cuMemGetAddressRange_v2 &&
        (cu.cuMemGetAddressRange_v2(&base, &size, p) != BGCUDA_SUCCESS || base != p))
      return bg_set_error(BG_ERR_INVALID_VALUE,
                          "cuMemFree_v2: 0x%llx is not the start of a device allocation",
                          (unsigned long long)p);
    pthread_mutex_lock(&d->def_lock);
    cu_deferred* e = d->deferred;
    while (e && !(e->kind == 0 && e->dptr == p)) e = e->next;
    pthread_mutex_unlock(&d->def_lock);
    if (e) /* a second free would hand the block out twice */
      return bg_set_error(BG_ERR_INVALID_VALUE, "cuMemFree_v2: 0x%llx was freed already",
                          (unsigned long long)p);
    if (defer_release(d, 0, p, NULL)) return BG_OK;
  }
  CALL(cuMemFree_v2, (p));
  return BG_OK;
}

int32_t cu_host_alloc(bg_device* dev, uint64_t bytes, uint32_t flags, void** host,
                      bg_devptr* dptr) {
  ENTER((cu_device*)dev);
  unsigned int cf = 0;
  if (flags & BG_HOST_ALLOC_MAPPED) cf |= BGCU_MEMHOSTALLOC_DEVICEMAP;
  if (flags & BG_HOST_ALLOC_PORTABLE) cf |= BGCU_MEMHOSTALLOC_PORTABLE;
  void* h = NULL;
  CALL(cuMemHostAlloc, (&h, (size_t)bytes, cf));
  bgcu_deviceptr p = 0;
  if (flags & BG_HOST_ALLOC_MAPPED) {
    bgcu_result r = cu.cuMemHostGetDevicePointer_v2(&p, h, 0);
    if (r != BGCUDA_SUCCESS) {
      int32_t rc = cu_fail(r, "cuMemHostGetDevicePointer_v2");
      cu.cuMemFreeHost(h);
      return rc;
    }
  }
  *host = h;
  *dptr = p;
  return BG_OK;
}

int32_t cu_host_free(bg_device* dev, void* host) {
  ENTER((cu_device*)dev);
  if (blocked((cu_device*)dev) && defer_release((cu_device*)dev, 1, 0, host)) return BG_OK;
  CALL(cuMemFreeHost, (host));
  return BG_OK;
}

/* The synchronous copies and memsets return when the data is in place, visible to work queued
 * afterwards on any stream (non-blocking ones included). The driver's own do not promise that:
 * cuMemsetD*, cuMemcpyDtoD and cuMemcpyHtoD from pageable memory may return before the device
 * has written (CUDA's "API synchronization behavior"), so each is followed by a wait on the legacy
 * stream they ran on. Created non-blocking streams (rings run on those) are not waited for. */
static int32_t legacy_done(const char* after) {
  bgcu_result r = cu.cuStreamSynchronize(NULL);
  if (r != BGCUDA_SUCCESS) return cu_fail_at(r, "cuStreamSynchronize", after);
  return BG_OK;
}

int32_t cu_memcpy_htod(bg_device* dev, bg_devptr dst, const void* src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyHtoD_v2, (dst, src, (size_t)n));
  return legacy_done("after cuMemcpyHtoD_v2");
}

int32_t cu_memcpy_dtoh(bg_device* dev, void* dst, bg_devptr src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyDtoH_v2, (dst, src, (size_t)n));
  return BG_OK;
}

int32_t cu_memcpy_dtod(bg_device* dev, bg_devptr dst, bg_devptr src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyDtoD_v2, (dst, src, (size_t)n));
  return legacy_done("after cuMemcpyDtoD_v2");
}

int32_t cu_memset(bg_device* dev, bg_devptr dst, uint32_t pattern, uint32_t esz,
                  uint64_t count) {
  ENTER((cu_device*)dev);
  switch (esz) {
    case 1: CALL(cuMemsetD8_v2, (dst, (unsigned char)pattern, (size_t)count)); break;
    case 2: CALL(cuMemsetD16_v2, (dst, (unsigned short)pattern, (size_t)count)); break;
    default: CALL(cuMemsetD32_v2, (dst, pattern, (size_t)count)); break;
  }
  return legacy_done("after cuMemsetD*_v2");
}

/* ---- rings ------------------------------------------------------------------------------------ */
int32_t cu_ring_alloc(bg_device* dev, uint64_t bytes, void** host, bg_devptr* dptr) {
  ENTER((cu_device*)dev);
  void* h = NULL;
  CALL(cuMemHostAlloc, (&h, (size_t)bytes, BGCU_MEMHOSTALLOC_DEVICEMAP | BGCU_MEMHOSTALLOC_PORTABLE));
  bgcu_deviceptr p = 0;
  bgcu_result r = cu.cuMemHostGetDevicePointer_v2(&p, h, 0);
  if (r != BGCUDA_SUCCESS) {
    int32_t rc = cu_fail(r, "cuMemHostGetDevicePointer_v2");
    cu.cuMemFreeHost(h);
    return rc;
  }
  memset(h, 0, (size_t)bytes);
  *host = h;
  *dptr = p;
  return BG_OK;
}

int32_t cu_ring_free(bg_device* dev, void* host) {
  ENTER((cu_device*)dev);
  if (blocked((cu_device*)dev) && defer_release((cu_device*)dev, 1, 0, host)) return BG_OK;
  CALL(cuMemFreeHost, (host));
  return BG_OK;
}
