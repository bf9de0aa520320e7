/*
 * cuda/pool.c: memory pools and stream-ordered allocation: the driver's cuMemPool* and
 * cuMemAllocAsync / cuMemFreeAsync as they are.
 *
 * Calls: driver.c, context.c, base.c.
 */
#include "cuda_internal.h"

/* ---- memory pools and stream-ordered allocation (cuMemPool*, cuMemAllocAsync) ------------------
 * The driver's pools, as they are: stream-ordered reuse, stats and the release threshold are the
 * driver's. Without the entry points (a driver older than 11.2) or on a device without pool
 * support: BG_ERR_NOT_SUPPORTED. */
static int32_t pools_present(cu_device* d, const char* fn) {
  if (!cu.cuMemPoolCreate || !cu.cuMemAllocAsync || !cu.cuMemFreeAsync || !cu.cuMemPoolTrimTo ||
      !cu.cuDeviceGetDefaultMemPool || !cu.cuMemAllocFromPoolAsync || !cu.cuMemPoolSetAttribute ||
      !cu.cuMemPoolGetAttribute || !cu.cuMemPoolDestroy)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: the CUDA driver has no memory pools (11.2+)", fn);
  int known = atomic_load_explicit(&d->pools, memory_order_relaxed);
  if (!known) {
    int ok = 0;
    known = cu.cuDeviceGetAttribute(&ok, BGCU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d->cudev) ==
                    BGCUDA_SUCCESS && ok ? 1 : -1;
    atomic_store_explicit(&d->pools, known, memory_order_relaxed);
  }
  if (known < 0)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: the device does not support memory pools", fn);
  return BG_OK;
}

/* Grant or take back `to`'s access to pool `p` (peer access does not reach pool memory). */
bgcu_result cu_pool_access(bgcu_mempool p, cu_device* to, bgcu_enum flags) {
  if (!cu.cuMemPoolSetAccess) return BGCUDA_SUCCESS;
  bgcu_mem_access_desc a;
  memset(&a, 0, sizeof a);
  a.location.type = BGCU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = to->cudev;
  a.flags = flags;
  return cu.cuMemPoolSetAccess(p, &a, 1);
}

bgcu_result cu_pools_peer(cu_device* dev, cu_device* peer, int enable) {
  bgcu_result r = BGCUDA_SUCCESS;
  pthread_mutex_lock(&peer->pool_lock);
  int at = -1;
  for (int i = 0; i < peer->naccessors; i++)
    if (peer->accessors[i] == dev) at = i;
  if (enable && at < 0 && peer->naccessors < CU_MAX_ACCESSORS) peer->accessors[peer->naccessors++] = dev;
  if (!enable && at >= 0) peer->accessors[at] = peer->accessors[--peer->naccessors];
  for (cu_pool* p = peer->custom; p; p = p->next) {
    bgcu_result e = cu_pool_access(p->p, dev, enable ? BGCU_MEM_ACCESS_FLAGS_PROT_READWRITE : BGCU_MEM_ACCESS_FLAGS_PROT_NONE);
    if (e != BGCUDA_SUCCESS && r == BGCUDA_SUCCESS) r = e;
  }
  pthread_mutex_unlock(&peer->pool_lock);
  return r;
}

int32_t cu_mempool_create(bg_device* dev, uint64_t threshold, void** out) {
  cu_device* d = (cu_device*)dev;
  ENTER(d);
  int32_t rc = pools_present(d, "bg_mempool_create");
  if (rc) return rc;
  cu_pool* p = calloc(1, sizeof *p);
  if (!p) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mempool_create: out of host memory");
  bgcu_mempool_props props;
  memset(&props, 0, sizeof props);
  props.allocType = BGCU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = BGCU_MEM_HANDLE_TYPE_NONE;
  props.location.type = BGCU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = d->cudev;
  bgcu_result r = cu.cuMemPoolCreate(&p->p, &props);
  if (r != BGCUDA_SUCCESS) {
    free(p);
    return cu_fail(r, "cuMemPoolCreate");
  }
  uint64_t t = threshold;
  r = cu.cuMemPoolSetAttribute(p->p, BGCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t);
  if (r != BGCUDA_SUCCESS) {
    cu.cuMemPoolDestroy(p->p);
    free(p);
    return cu_fail(r, "cuMemPoolSetAttribute");
  }
  /* devices with peer access to this one reach its new pool too, as they reach its default one */
  pthread_mutex_lock(&d->pool_lock);
  for (int i = 0; i < d->naccessors; i++) {
    r = cu_pool_access(p->p, d->accessors[i], BGCU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    if (r != BGCUDA_SUCCESS) {
      pthread_mutex_unlock(&d->pool_lock);
      cu.cuMemPoolDestroy(p->p);
      free(p);
      return cu_fail(r, "cuMemPoolSetAccess (a device with peer access)");
    }
  }
  p->next = d->custom;
  d->custom = p;
  pthread_mutex_unlock(&d->pool_lock);
  bg_obj_init(p, BG_KIND_POOL, dev);
  *out = p;
  return BG_OK;
}

int32_t cu_mempool_default(bg_device* dev, void** out) {
  cu_device* d = (cu_device*)dev;
  ENTER(d);
  int32_t rc = pools_present(d, "bg_mempool_default");
  if (rc) return rc;
  pthread_mutex_lock(&d->cap_lock);
  if (!d->defpool) {
    cu_pool* p = calloc(1, sizeof *p);
    bgcu_result r = p ? cu.cuDeviceGetDefaultMemPool(&p->p, d->cudev) : BGCUDA_SUCCESS;
    if (!p || r != BGCUDA_SUCCESS) {
      pthread_mutex_unlock(&d->cap_lock);
      free(p);
      return p ? cu_fail(r, "cuDeviceGetDefaultMemPool")
               : bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mempool_default: out of host memory");
    }
    bg_obj_init(p, BG_KIND_POOL, dev);
    d->defpool = p;
  }
  *out = d->defpool;
  pthread_mutex_unlock(&d->cap_lock);
  return BG_OK;
}

int32_t cu_mempool_destroy(void* pp) {
  cu_pool* p = pp;
  cu_device* d = CUDEV(p);
  if (p == d->defpool)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mempool_destroy: the device's default pool belongs to the device");
  ENTER(d);
  pthread_mutex_lock(&d->pool_lock);
  for (cu_pool** q = &d->custom; *q; q = &(*q)->next)
    if (*q == p) {
      *q = p->next;
      break;
    }
  pthread_mutex_unlock(&d->pool_lock);
  bgcu_result r = cu.cuMemPoolDestroy(p->p); /* blocks still out stay valid until freed */
  bg_obj_kill(p);
  free(p);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuMemPoolDestroy");
  return BG_OK;
}

int32_t cu_mempool_set_threshold(void* pp, uint64_t threshold) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  uint64_t t = threshold;
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
  return BG_OK;
}

int32_t cu_mempool_trim(void* pp, uint64_t keep) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  CALL(cuMemPoolTrimTo, (p->p, (size_t)keep));
  return BG_OK;
}

int32_t cu_mempool_stats(void* pp, uint64_t out[4]) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  static const bgcu_enum attrs[4] = {
      BGCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, BGCU_MEMPOOL_ATTR_USED_MEM_CURRENT,
      BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, BGCU_MEMPOOL_ATTR_USED_MEM_HIGH};
  for (int i = 0; i < 4; i++) CALL(cuMemPoolGetAttribute, (p->p, attrs[i], &out[i]));
  return BG_OK;
}

int32_t cu_mempool_reset_peak(void* pp) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  uint64_t zero = 0; /* setting a high-water mark to 0 resets it to the current value */
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  return BG_OK;
}

int32_t cu_mem_alloc_async(void* sp, void* pool, uint64_t bytes, bg_devptr* out) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  int32_t rc = pools_present(d, "bg_mem_alloc_async");
  if (rc) return rc;
  bgcu_deviceptr p = 0;
  if (pool) CALL(cuMemAllocFromPoolAsync, (&p, (size_t)bytes, ((cu_pool*)pool)->p, s->s));
  else CALL(cuMemAllocAsync, (&p, (size_t)bytes, s->s));
  *out = p;
  return BG_OK;
}

int32_t cu_mem_free_async(void* sp, bg_devptr p) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  int32_t rc = pools_present(d, "bg_mem_free_async");
  if (rc) return rc;
  CALL(cuMemFreeAsync, (p, s->s));
  return BG_OK;
}
