/*
 * api.c: the entry points of libbungpu (bungpu.h) for one device's work: the library, the
 * backends and the device table, memory, streams, events, compilation, modules, kernels and
 * launches, one thin wrapper per bg_* symbol that validates what it can and calls the device's
 * vtable. The other entry points are grouped by job beside it: pools.c (stream-ordered
 * allocation and memory pools), multi.c (several devices and processes), graphs.c (capture and
 * graphs), rings.c (signals and rings); commands.c has the bg_submit* entries. The last error,
 * handle checks and compile results it stands on are base.c's.
 *
 * Calls: pools.c, backends.c, base.c.
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

#ifndef BG_SOURCE_HASH
#define BG_SOURCE_HASH "unknown"
#endif

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
static bg_device* dev_table[BG_MAX_BACKENDS][MAX_ORDINALS];
static int32_t dev_refs[BG_MAX_BACKENDS][MAX_ORDINALS];

BG_API int32_t bg_device_open(int32_t backend, int32_t ordinal, void** out) {
  NONNULL(out, "bg_device_open", "out");
  const bg_ops* be = bg_backend_at(backend);
  if (!be) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_device_open: no backend %d", backend);
  if (ordinal < 0 || ordinal >= MAX_ORDINALS)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "bg_device_open: ordinal %d out of range", ordinal);
  pthread_mutex_lock(&bg_dev_lock);
  bg_device* d = dev_table[backend][ordinal];
  if (d) {
    dev_refs[backend][ordinal]++;
    pthread_mutex_unlock(&bg_dev_lock);
    *out = d;
    return BG_OK;
  }
  int32_t n = 0;
  char msg[512] = {0};
  int32_t rc = be->probe(&n, msg, sizeof msg);
  if (rc != BG_OK) {
    pthread_mutex_unlock(&bg_dev_lock);
    return bg_set_error(rc, "bg_device_open: %s", msg);
  }
  if (ordinal >= n) {
    pthread_mutex_unlock(&bg_dev_lock);
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
  pthread_mutex_unlock(&bg_dev_lock);
  return rc;
}

BG_API int32_t bg_device_close(void* dev) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_close");
  bg_device* d = dev;
  pthread_mutex_lock(&bg_dev_lock);
  int32_t rc = BG_OK;
  if (--dev_refs[d->backend][d->ordinal] == 0) {
    dev_table[d->backend][d->ordinal] = NULL;
    bg_plain_pools_close(d);
    /* as destroying a context does: nobody keeps access to a closed device */
    for (int i = 0; i < MAX_ORDINALS; i++)
      if (dev_table[d->backend][i])
        atomic_fetch_and(&dev_table[d->backend][i]->peer_enabled, ~((uint64_t)1 << (uint32_t)d->ordinal));
    rc = d->ops->device_close(d);
  }
  pthread_mutex_unlock(&bg_dev_lock);
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
