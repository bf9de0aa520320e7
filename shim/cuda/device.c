/*
 * cuda/device.c: the device and the table: open (the primary context retained, the default
 * stream), close (captures, queued releases and gates dropped), props, memory info, synchronize,
 * peer access, and bg_ops naming every entry point of the other files (and nccl.c's collectives).
 * The top of the backend.
 *
 * Calls: driver.c, compile.c, release.c, context.c, memory.c, pool.c, ipc.c, capture.c, stream.c, module.c, graph.c, nccl.c, base.c.
 */
#include "cuda_internal.h"

extern const bg_ops bg_cuda_ops; /* the table below */

static int32_t cu_open(int32_t ordinal, bg_device** out) {
  int32_t rc = load_driver();
  if (rc != BG_OK) return bg_set_error(rc, "%s", load_msg);
  cu_device* d = calloc(1, sizeof *d);
  cu_stream* ds = calloc(1, sizeof *ds);
  if (!d || !ds) {
    free(d);
    free(ds);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_device_open: out of host memory");
  }
  bgcu_result r = cu.cuDeviceGet(&d->cudev, ordinal);
  if (r != BGCUDA_SUCCESS) {
    rc = cu_fail(r, "cuDeviceGet");
    goto fail;
  }
  r = cu.cuDevicePrimaryCtxRetain(&d->ctx, d->cudev);
  if (r != BGCUDA_SUCCESS) {
    rc = cu_fail(r, "cuDevicePrimaryCtxRetain");
    goto fail;
  }
  r = cu.cuDeviceGetAttribute(&d->cc_major, BGCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cudev);
  if (r == BGCUDA_SUCCESS)
    r = cu.cuDeviceGetAttribute(&d->cc_minor, BGCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                d->cudev);
  if (r != BGCUDA_SUCCESS) {
    rc = cu_fail(r, "cuDeviceGetAttribute");
    cu.cuDevicePrimaryCtxRelease_v2(d->cudev);
    goto fail;
  }
  pthread_mutex_init(&d->cap_lock, NULL);
  pthread_mutex_init(&d->pool_lock, NULL);
  atomic_init(&d->ncaps, 0);
  atomic_init(&d->resident, 0);
  pthread_mutex_init(&d->def_lock, NULL);
  atomic_init(&d->ndeferred, 0);
  pthread_mutex_init(&d->gate_lock, NULL);
  atomic_init(&d->ngates, 0);
  pthread_mutex_init(&d->str_lock, NULL);
  bg_obj_init(d, BG_KIND_DEVICE, &d->base);
  d->base.ops = &bg_cuda_ops;
  d->base.ordinal = ordinal;
  bg_obj_init(ds, BG_KIND_STREAM, &d->base);
  ds->s = NULL;
  d->base.default_stream = ds;
  pthread_mutex_lock(&devs_lock);
  d->next_open = devs;
  devs = d;
  pthread_mutex_unlock(&devs_lock);
  *out = &d->base;
  return BG_OK;
fail:
  free(d);
  free(ds);
  return rc;
}

/* ---- device ----------------------------------------------------------------------------------- */

static int32_t close_flush(cu_device* d) {
  ENTER(d);
  pthread_mutex_lock(&d->cap_lock);
  cu_capture* c = d->caps;
  d->caps = NULL;
  atomic_store_explicit(&d->ncaps, 0, memory_order_relaxed);
  pthread_mutex_unlock(&d->cap_lock);
  while (c) {
    cu_capture* next = c->next;
    free_capture(c);
    c = next;
  }
  flush_deferred(d);
  pthread_mutex_lock(&devs_lock);
  for (cu_device** p = &devs; *p; p = &(*p)->next_open)
    if (*p == d) {
      *p = d->next_open;
      break;
    }
  /* a closed device is no one's accessor any more (the core drops its peer bits without a disable) */
  for (cu_device* o = devs; o; o = o->next_open) {
    pthread_mutex_lock(&o->pool_lock);
    for (int i = 0; i < o->naccessors; i++)
      if (o->accessors[i] == d) o->accessors[i--] = o->accessors[--o->naccessors];
    pthread_mutex_unlock(&o->pool_lock);
  }
  pthread_mutex_unlock(&devs_lock);
  for (int i = 0; i < 2; i++) {
    cu_gate* g = i ? d->spare : d->gates;
    while (g) {
      cu_gate* next = g->next;
      cu.cuEventDestroy_v2(g->e);
      free(g);
      g = next;
    }
  }
  d->gates = d->spare = NULL;
  for (cu_ipc_map* m = d->maps; m;) {
    cu_ipc_map* next = m->next;
    free(m);
    m = next;
  }
  d->maps = NULL;
  return BG_OK;
}

static int32_t cu_device_close(bg_device* dev) {
  cu_device* d = (cu_device*)dev;
  close_flush(d);
  pthread_mutex_destroy(&d->def_lock);
  pthread_mutex_destroy(&d->gate_lock);
  pthread_mutex_destroy(&d->str_lock);
  if (d->defpool) {
    bg_obj_kill(d->defpool);
    free(d->defpool);
  }
  cu_stream* ds = dev->default_stream;
  bg_obj_kill(ds);
  free(ds);
  pthread_mutex_lock(&d->cap_lock);
  cu_capture* c = d->caps;
  d->caps = NULL;
  pthread_mutex_unlock(&d->cap_lock);
  while (c) {
    cu_capture* next = c->next;
    free_capture(c);
    c = next;
  }
  pthread_mutex_destroy(&d->cap_lock);
  pthread_mutex_destroy(&d->pool_lock);
  bgcu_result r = cu.cuDevicePrimaryCtxRelease_v2(d->cudev);
  bg_obj_kill(d);
  free(d);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuDevicePrimaryCtxRelease_v2");
  return BG_OK;
}

static int32_t cu_device_props(bg_device* dev, bg_device_props* out) {
  cu_device* d = (cu_device*)dev;
  CALL(cuDeviceGetName, (out->name, (int)sizeof out->name, d->cudev));
  out->name[sizeof out->name - 1] = 0;
  out->ordinal = dev->ordinal;
  static const struct {
    bgcu_enum attr;
    size_t off;
  } attrs[] = {
      {BGCU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, offsetof(bg_device_props, compute_units)},
      {BGCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, offsetof(bg_device_props, cc_major)},
      {BGCU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, offsetof(bg_device_props, cc_minor)},
      {BGCU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, offsetof(bg_device_props, max_threads_per_block)},
      {BGCU_DEVICE_ATTRIBUTE_WARP_SIZE, offsetof(bg_device_props, warp_size)},
      {BGCU_DEVICE_ATTRIBUTE_INTEGRATED, offsetof(bg_device_props, unified_memory)},
      {BGCU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, offsetof(bg_device_props, can_map_host_memory)},
      {BGCU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, offsetof(bg_device_props, concurrent_kernels)},
      {BGCU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
       offsetof(bg_device_props, max_shared_bytes_per_block)},
      {BGCU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, offsetof(bg_device_props, max_block_dim[0])},
      {BGCU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, offsetof(bg_device_props, max_block_dim[1])},
      {BGCU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, offsetof(bg_device_props, max_block_dim[2])},
      {BGCU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, offsetof(bg_device_props, max_grid_dim[0])},
      {BGCU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, offsetof(bg_device_props, max_grid_dim[1])},
      {BGCU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, offsetof(bg_device_props, max_grid_dim[2])},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    int v = 0;
    CALL(cuDeviceGetAttribute, (&v, attrs[i].attr, d->cudev));
    int32_t v32 = v;
    memcpy((char*)out + attrs[i].off, &v32, sizeof v32);
  }
  /* The most shared memory a block can have: the opt-in limit, which launches reach through
   * cuFuncSetAttribute (cu_launch), rather than the 48 KiB default. */
  int optin = 0;
  if (cu.cuFuncSetAttribute &&
      cu.cuDeviceGetAttribute(&optin, BGCU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                              d->cudev) == BGCUDA_SUCCESS &&
      optin > out->max_shared_bytes_per_block)
    out->max_shared_bytes_per_block = optin;
  size_t total = 0;
  CALL(cuDeviceTotalMem_v2, (&total, d->cudev));
  out->total_mem = total;
  return BG_OK;
}

static int32_t cu_device_mem_info(bg_device* dev, uint64_t* free_b, uint64_t* total_b) {
  ENTER((cu_device*)dev);
  size_t f = 0, t = 0;
  CALL(cuMemGetInfo_v2, (&f, &t));
  *free_b = f;
  *total_b = t;
  return BG_OK;
}

static int32_t cu_device_synchronize(bg_device* dev) {
  ENTER((cu_device*)dev);
  if (is_resident((cu_device*)dev))
    return bg_set_error(BG_ERR_ILLEGAL_STATE,
                        "bg_device_synchronize: a persistent ring kernel is resident on the device "
                        "and never finishes on its own (cuCtxSynchronize would not return); "
                        "synchronize the other streams instead");
  CALL(cuCtxSynchronize, ());
  return BG_OK;
}

/* ---- several devices ---------------------------------------------------------------------------
 * The core keeps the enabled-peer bookkeeping and the CUDA error rules (bungpu.h); these are the
 * driver calls. Optional entry points (cuda_api.h): without them no device reports a peer, and a
 * copy between devices is BG_ERR_NOT_SUPPORTED. */
static int32_t cu_device_can_access_peer(bg_device* dev, bg_device* peer, int32_t* out) {
  int v = 0;
  if (!cu.cuDeviceCanAccessPeer) return BG_OK;
  CALL(cuDeviceCanAccessPeer, (&v, ((cu_device*)dev)->cudev, ((cu_device*)peer)->cudev));
  *out = v != 0;
  return BG_OK;
}

/* Peer access reaches the peer's cuMemAlloc memory only: its stream-ordered memory (Stream.alloc,
 * the tensor arena) is its default pool's, which a device may touch only once cuMemPoolSetAccess
 * grants it. So enabling gives dev read-write access to peer's default pool too, and disabling
 * takes it back; the peer's pools made with MemoryPool follow (cu_pools_peer, pool.c). */
static bgcu_result default_pool_access(cu_device* dev, cu_device* peer, bgcu_enum flags) {
  if (!cu.cuMemPoolSetAccess || !cu.cuDeviceGetDefaultMemPool) return BGCUDA_SUCCESS;
  int ok = 0;
  if (cu.cuDeviceGetAttribute(&ok, BGCU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, peer->cudev) != BGCUDA_SUCCESS || !ok)
    return BGCUDA_SUCCESS;
  bgcu_mempool pool = NULL;
  bgcu_result r = cu.cuDeviceGetDefaultMemPool(&pool, peer->cudev);
  if (r != BGCUDA_SUCCESS) return r;
  return cu_pool_access(pool, dev, flags);
}

static int32_t cu_peer_enable(bg_device* dev, bg_device* peer) {
  if (!cu.cuCtxEnablePeerAccess) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuCtxEnablePeerAccess: not in this driver");
  ENTER((cu_device*)dev);
  CALL(cuCtxEnablePeerAccess, (((cu_device*)peer)->ctx, 0));
  bgcu_result r = default_pool_access((cu_device*)dev, (cu_device*)peer, BGCU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (r != BGCUDA_SUCCESS) {
    cu.cuCtxDisablePeerAccess(((cu_device*)peer)->ctx);
    return cu_fail(r, "cuMemPoolSetAccess (the peer's default pool)");
  }
  r = cu_pools_peer((cu_device*)dev, (cu_device*)peer, 1);
  if (r != BGCUDA_SUCCESS) {
    cu_pools_peer((cu_device*)dev, (cu_device*)peer, 0);
    default_pool_access((cu_device*)dev, (cu_device*)peer, BGCU_MEM_ACCESS_FLAGS_PROT_NONE);
    cu.cuCtxDisablePeerAccess(((cu_device*)peer)->ctx);
    return cu_fail(r, "cuMemPoolSetAccess (a pool of the peer)");
  }
  return BG_OK;
}

static int32_t cu_peer_disable(bg_device* dev, bg_device* peer) {
  if (!cu.cuCtxDisablePeerAccess) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuCtxDisablePeerAccess: not in this driver");
  ENTER((cu_device*)dev);
  CALL(cuCtxDisablePeerAccess, (((cu_device*)peer)->ctx));
  bgcu_result r = default_pool_access((cu_device*)dev, (cu_device*)peer, BGCU_MEM_ACCESS_FLAGS_PROT_NONE);
  bgcu_result r2 = cu_pools_peer((cu_device*)dev, (cu_device*)peer, 0);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuMemPoolSetAccess (the peer's default pool)");
  if (r2 != BGCUDA_SUCCESS) return cu_fail(r2, "cuMemPoolSetAccess (a pool of the peer)");
  return BG_OK;
}

/* ---- the table -------------------------------------------------------------------------------- */
extern const bg_coll_ops bg_cuda_coll_ops; /* nccl.c */
/* The backend's record in the table (backends.c). */
const bg_ops bg_cuda_ops = {
    .name = "cuda",
    .probe = cu_probe,
    .open = cu_open,
    .coll = &bg_cuda_coll_ops,
    .device_close = cu_device_close,
    .device_props = cu_device_props,
    .device_mem_info = cu_device_mem_info,
    .device_synchronize = cu_device_synchronize,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .memcpy_htod = cu_memcpy_htod,
    .memcpy_dtoh = cu_memcpy_dtoh,
    .memcpy_dtod = cu_memcpy_dtod,
    .memset = cu_memset,
    .device_can_access_peer = cu_device_can_access_peer,
    .peer_enable = cu_peer_enable,
    .peer_disable = cu_peer_disable,
    .memcpy_peer_async = cu_memcpy_peer_async,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .stream_query = cu_stream_query,
    .stream_wait_event = cu_stream_wait_event,
    .memcpy_htod_async = cu_memcpy_htod_async,
    .memcpy_dtoh_async = cu_memcpy_dtoh_async,
    .memcpy_dtod_async = cu_memcpy_dtod_async,
    .memset_async = cu_memset_async,
    .launch_host_func = cu_launch_host_func,
    .stream_notify = cu_stream_notify,
    .stream_wait_value32 = cu_stream_wait_value32,
    .stream_write_value32 = cu_stream_write_value32,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .event_elapsed = cu_event_elapsed,
    .rtc_compile = cu_rtc_compile,
    .rtc_version = cu_rtc_version,
    .module_load = cu_module_load,
    .module_unload = cu_module_unload,
    .module_get_kernel = cu_module_get_kernel,
    .kernel_max_threads = cu_kernel_max_threads,
    .launch = cu_launch,
    .begin_capture = cu_begin_capture,
    .end_capture = cu_end_capture,
    .capture_status = cu_capture_status,
    .graph_destroy = cu_graph_destroy,
    .graph_node_count = cu_graph_node_count,
    .graph_instantiate = cu_graph_instantiate,
    .graph_exec_destroy = cu_graph_exec_destroy,
    .graph_upload = cu_graph_upload,
    .graph_launch = cu_graph_launch,
    .graph_exec_set_kernel_args = cu_graph_exec_set_kernel_args,
    .submit = NULL,
    .graph_from_commands = cu_graph_from_commands,
    .kernel_hold = cu_kernel_hold,
    .kernel_unhold = cu_kernel_unhold,
    .event_hold = cu_event_hold,
    .event_unhold = cu_event_unhold,
    .ring_alloc = cu_ring_alloc,
    .ring_free = cu_ring_free,
    .mempool_create = cu_mempool_create,
    .mempool_default = cu_mempool_default,
    .mempool_destroy = cu_mempool_destroy,
    .mempool_set_threshold = cu_mempool_set_threshold,
    .mempool_trim = cu_mempool_trim,
    .mempool_stats = cu_mempool_stats,
    .mempool_reset_peak = cu_mempool_reset_peak,
    .mem_alloc_async = cu_mem_alloc_async,
    .mem_free_async = cu_mem_free_async,
    .ipc_mem_export = cu_ipc_mem_export,
    .ipc_mem_open = cu_ipc_mem_open,
    .ipc_mem_close = cu_ipc_mem_close,
    .ipc_event_export = cu_ipc_event_export,
    .ipc_event_open = cu_ipc_event_open,
};
