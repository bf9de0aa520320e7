/*
 * metal/backend.c: the Metal device (probe, open, close, properties, synchronize) and the
 * vtable that names the entries of every file of the backend; off macOS, a probe and an open
 * that say why not. The top of the backend.
 *
 * Calls: runtime.c, stream.c, memory.c, ops.c, base.c.
 */
#include "metal.h"

#if defined(__APPLE__)

/* Ordinal 0 is MTLCreateSystemDefaultDevice() when it gives one; then the other devices of
 * MTLCopyAllDevices() in its order. Returns the ordinal-th device (+1) or NULL; *count gets
 * how many there are. Runs inside a pool. */
static oc_id device_at(int32_t ordinal, int32_t* count) {
  oc_id def = mtl_rt.create_default ? mtl_rt.create_default() : NULL;
  oc_id all = mtl_rt.copy_all ? mtl_rt.copy_all() : NULL;
  uint64_t n = all ? m_u64(all, mtl_S.count) : 0, def_id = def ? m_u64(def, mtl_S.registryID) : 0;
  int32_t k = 0;
  oc_id found = NULL;
  if (def) {
    if (ordinal == 0) found = ret(def);
    k = 1;
  }
  for (uint64_t i = 0; i < n; i++) {
    oc_id x = m_id_u64(all, mtl_S.objectAtIndex, i);
    if (!x || (def && m_u64(x, mtl_S.registryID) == def_id)) continue;
    if (k == ordinal) found = ret(x);
    k++;
  }
  rel(all);
  rel(def);
  if (count) *count = k;
  return found;
}

extern const bg_ops bg_metal_ops; /* the table below */

/* ---- device --------------------------------------------------------------------------------- */

static int32_t probe_impl(int32_t* count, char* msg, uint64_t cap) {
  int32_t n = 0;
  oc_id d = device_at(-1, &n);
  rel(d);
  *count = n;
  if (!n) {
    snprintf(msg, (size_t)cap, "Metal: MTLCopyAllDevices() and MTLCreateSystemDefaultDevice() "
             "found no device");
    return BG_ERR_NO_DEVICE;
  }
  snprintf(msg, (size_t)cap, "Metal: %d device(s)", n);
  return BG_OK;
}

static int32_t metal_probe(int32_t* count, char* msg, uint64_t cap) {
  *count = 0;
  if (mtl_rt_ready() != BG_OK) {
    snprintf(msg, (size_t)cap, "%s", mtl_rt.msg);
    return mtl_rt.rc;
  }
  POOLED(probe_impl(count, msg, cap)); /* not a vtable entry: the core's hooks do not cover it */
}

static int32_t open_impl(int32_t ordinal, bg_device** out) {
  int32_t n = 0;
  oc_id dev = device_at(ordinal, &n);
  if (!dev)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "Metal: %d device(s), no ordinal %d", n, ordinal);
  /* newSharedEvent (10.14) and hasUnifiedMemory (10.15, with GPUEndTime) stand for the OS. */
  if (!m_bool_sel(dev, mtl_S.respondsToSelector, mtl_S.newSharedEvent) ||
      !m_bool_sel(dev, mtl_S.respondsToSelector, mtl_S.hasUnifiedMemory)) {
    rel(dev);
    return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE,
                        "Metal: the device lacks newSharedEvent/hasUnifiedMemory "
                        "(macOS 10.15 or later needed)");
  }
  mtl_dev* d = calloc(1, sizeof *d);
  if (!d) {
    rel(dev);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_device_open: out of host memory");
  }
  bg_obj_init(d, BG_KIND_DEVICE, &d->d);
  d->d.ops = &bg_metal_ops;
  d->d.ordinal = ordinal;
  d->dev = dev;
  pthread_mutex_init(&d->mu, NULL);
  pthread_mutex_init(&d->smu, NULL);
  d->max_tg = m_size(dev, mtl_S.maxThreadsPerThreadgroup);
  d->max_tg_mem = m_u64(dev, mtl_S.maxThreadgroupMemoryLength);
  d->max_buf = m_u64(dev, mtl_S.maxBufferLength);
  mtl_stream* s = NULL;
  int32_t rc = mtl_stream_new(d, &s);
  if (rc) {
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->smu);
    rel(dev);
    free(d);
    return rc;
  }
  d->d.default_stream = s;
  *out = &d->d;
  return BG_OK;
}

static int32_t metal_open(int32_t ordinal, bg_device** out) {
  if (mtl_rt_ready() != BG_OK) return bg_set_error(mtl_rt.rc, "%s", mtl_rt.msg);
  POOLED(open_impl(ordinal, out));
}

static int32_t close_impl(bg_device* dv) {
  mtl_dev* d = (mtl_dev*)dv;
  pthread_mutex_lock(&d->smu);
  mtl_stream* list = d->streams;
  d->streams = NULL;
  pthread_mutex_unlock(&d->smu);
  while (list) {
    mtl_stream* next = list->next;
    mtl_stream_free(list);
    list = next;
  }
  mtl_stream_free(dv->default_stream);
  for (size_t i = 0; i < d->nmap; i++) rel(d->map[i].buf);
  free(d->map);
  for (int i = 0; i < BI_COUNT; i++) rel(d->bi_pso[i]);
  rel(d->bi_lib);
  rel(d->dev);
  pthread_mutex_destroy(&d->mu);
  pthread_mutex_destroy(&d->smu);
  bg_obj_kill(d);
  free(d);
  return BG_OK;
}
static int32_t m_device_close(bg_device* dv) { POOLED(close_impl(dv)); }

static int32_t props_impl(bg_device* dv, bg_device_props* out) {
  mtl_dev* d = (mtl_dev*)dv;
  oc_id nm = m_id(d->dev, mtl_S.name);
  const char* c = nm ? (const char*)m_ptr(nm, mtl_S.utf8) : NULL;
  snprintf(out->name, sizeof out->name, "%s", c ? c : "Metal device");
  out->ordinal = dv->ordinal;
  out->compute_units = 0; /* Metal does not say */
  out->max_threads_per_block = (int32_t)(d->max_tg.w > 0x7fffffff ? 0x7fffffff : d->max_tg.w);
  out->warp_size = 32; /* threadExecutionWidth is per pipeline; 32 on Apple GPUs */
  out->unified_memory = m_bool(d->dev, mtl_S.hasUnifiedMemory);
  out->can_map_host_memory = 1;
  out->concurrent_kernels = 1;
  out->max_shared_bytes_per_block =
      (int32_t)(d->max_tg_mem > 0x7fffffff ? 0x7fffffff : d->max_tg_mem);
  out->total_mem = m_u64(d->dev, mtl_S.recommendedMaxWorkingSetSize);
#define CLAMP32(v) (int32_t)((v) > 0x7fffffff ? 0x7fffffff : (v))
  out->max_block_dim[0] = CLAMP32(d->max_tg.w);
  out->max_block_dim[1] = CLAMP32(d->max_tg.h);
  out->max_block_dim[2] = CLAMP32(d->max_tg.d);
#undef CLAMP32
  /* dispatchThreadgroups takes NSUInteger counts: the grid is bounded only by the u32 record */
  out->max_grid_dim[0] = out->max_grid_dim[1] = out->max_grid_dim[2] = 0x7fffffff;
  return BG_OK;
}
static int32_t m_device_props(bg_device* dv, bg_device_props* out) { return props_impl(dv, out); }

static int32_t m_device_mem_info(bg_device* dv, uint64_t* free_b, uint64_t* total_b) {
  mtl_dev* d = (mtl_dev*)dv;
  uint64_t total = m_u64(d->dev, mtl_S.recommendedMaxWorkingSetSize);
  uint64_t used = m_u64(d->dev, mtl_S.currentAllocatedSize);
  *total_b = total;
  *free_b = total > used ? total - used : 0;
  return BG_OK;
}

static int32_t device_sync_impl(bg_device* dv) {
  mtl_dev* d = (mtl_dev*)dv;
  pthread_mutex_lock(&d->smu);
  int32_t rc = mtl_stream_sync(dv->default_stream);
  for (mtl_stream* s = d->streams; s; s = s->next) {
    int32_t r = mtl_stream_sync(s);
    if (!rc) rc = r;
  }
  pthread_mutex_unlock(&d->smu);
  return rc;
}
static int32_t m_device_synchronize(bg_device* dv) { return device_sync_impl(dv); }

/* ---- compiler version, capture, graphs ------------------------------------------------------ */
/* The Metal Shading Language version this macOS compiles by default. */
static int32_t rtc_version_impl(int32_t* major, int32_t* minor) {
  oc_id pi = mtl_rt.NSProcessInfo ? m_id(mtl_rt.NSProcessInfo, mtl_S.processInfo) : NULL;
  if (!pi) return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_rtc_version: NSProcessInfo unavailable");
  ns_osver v = m_osver(pi, mtl_S.operatingSystemVersion);
  static const int8_t msl[][2] = {{2, 3}, {2, 4}, {3, 0}, {3, 1}, {3, 2}}; /* macOS 11..15 */
  if (v.major >= 26) { /* macOS 26 (the version after 15) */
    *major = 4;
    *minor = 0;
  } else if (v.major >= 11) {
    int64_t i = v.major - 11 < 4 ? v.major - 11 : 4;
    *major = msl[i][0];
    *minor = msl[i][1];
  } else {
    *major = 2;
    *minor = v.minor >= 15 ? 2 : v.minor == 14 ? 1 : 0;
  }
  return BG_OK;
}
static int32_t m_rtc_version(bg_device* dv, int32_t* major, int32_t* minor) {
  (void)dv;
  return rtc_version_impl(major, minor);
}

static int32_t m_begin_capture(void* sv, int32_t mode) {
  (void)sv;
  (void)mode;
  return bg_set_error(BG_ERR_NOT_SUPPORTED,
                      "Metal has no stream capture; use command buffers (bg_submit) instead");
}
static int32_t m_end_capture(void* sv, void** out) {
  (void)sv;
  *out = NULL;
  return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_stream_end_capture: the stream is not capturing "
                      "(Metal has no stream capture)");
}
static int32_t m_capture_status(void* sv, int32_t* out) {
  (void)sv;
  *out = BG_CAPTURE_NONE;
  return BG_OK;
}
/* Around every entry point the core calls: objects the entry autoreleases go with this pool. */
static void* m_enter(bg_device* dv) {
  (void)dv;
  return mtl_rt.pool_push();
}
static void m_leave(bg_device* dv, void* pool) {
  (void)dv;
  mtl_rt.pool_pop(pool);
}

/* The backend's record in the table (backends.c). */
const bg_ops bg_metal_ops = {
    .name = "metal",
    .probe = metal_probe,
    .open = metal_open,
    .enter = m_enter,
    .leave = m_leave,
    .device_close = m_device_close,
    .device_props = m_device_props,
    .device_mem_info = m_device_mem_info,
    .device_synchronize = m_device_synchronize,
    .mem_alloc = mtl_mem_alloc,
    .mem_free = mtl_mem_free,
    .host_alloc = mtl_host_alloc,
    .host_free = mtl_host_free,
    .memcpy_htod = mtl_memcpy_htod,
    .memcpy_dtoh = mtl_memcpy_dtoh,
    .memcpy_dtod = mtl_memcpy_dtod,
    .memset = mtl_memset,
    .stream_create = mtl_stream_create,
    .stream_destroy = mtl_stream_destroy,
    .stream_synchronize = mtl_stream_synchronize,
    .stream_query = mtl_stream_query,
    .stream_wait_event = mtl_stream_wait_event,
    .memcpy_htod_async = mtl_memcpy_htod_async,
    .memcpy_dtoh_async = mtl_memcpy_dtoh_async,
    .memcpy_dtod_async = mtl_memcpy_dtod_async,
    .memset_async = mtl_memset_async,
    .launch_host_func = mtl_launch_host_func,
    .event_create = mtl_event_create,
    .event_destroy = mtl_event_destroy,
    .event_record = mtl_event_record,
    .event_query = mtl_event_query,
    .event_synchronize = mtl_event_synchronize,
    .event_elapsed = mtl_event_elapsed,
    .rtc_compile = NULL, /* Metal compiles at bg_module_load */
    .rtc_version = m_rtc_version,
    .module_load = mtl_module_load,
    .module_unload = mtl_module_unload,
    .module_get_kernel = mtl_module_get_kernel,
    .kernel_max_threads = mtl_kernel_max_threads,
    .launch = mtl_launch,
    .begin_capture = m_begin_capture,
    .end_capture = m_end_capture,
    .capture_status = m_capture_status,
    /* no captured graphs: bg_graph_from_commands gives the core's command-list graphs, which
     * are the only graph handles Metal ever sees, so the graph_* entries stay NULL */
    .submit = mtl_submit,
    .kernel_hold = mtl_kernel_hold,
    .kernel_unhold = mtl_kernel_unhold,
    .event_hold = mtl_event_hold,
    .event_unhold = mtl_event_unhold,
    .ring_alloc = mtl_ring_alloc,
    .ring_free = mtl_ring_free,
};

#else /* !__APPLE__ */

static int32_t metal_probe(int32_t* count, char* msg, uint64_t cap) {
  if (count) *count = 0;
  if (msg && cap) snprintf(msg, (size_t)cap, "Metal is only available on macOS");
  return BG_ERR_BACKEND_UNAVAILABLE;
}

static int32_t metal_open(int32_t ordinal, bg_device** out) {
  (void)ordinal;
  if (out) *out = NULL;
  return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE, "Metal is only available on macOS");
}

const bg_ops bg_metal_ops = {.name = "metal", .probe = metal_probe, .open = metal_open};

#endif

