/*
 * stub_backend.c: the one stand-in backend of the C tests. A test compiles it with the backends
 * it stands in for, each with its count of devices:
 *
 *   -D'BG_STUBS(X)=X(cuda, 0) X(metal, 0)'   the backends a harness does not link: their
 *                                             table lines (shim/backends.c) find a record that
 *                                             says "not built into this test"
 *   -D'BG_STUBS(X)=X(null, 1)'                with -D'BG_EXTRA_BACKENDS(X)=X(null)' on the whole
 *                                             library: a new backend in one table line, with one
 *                                             device whose every call is BG_ERR_NOT_SUPPORTED
 *                                             (test/backend_table.test.ts)
 *
 * Every entry the core requires is filled, so the core never calls a NULL one; entries that take
 * a stream, event, module or kernel are never reached (a stub device makes none), and say so.
 */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef BG_STUBS
#error "compile with -D'BG_STUBS(X)=X(name, devices) ...'"
#endif

static int32_t unsupported(const bg_device* d, const char* what) {
  return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: not supported on the %s backend (a stub)", what,
                      d ? d->ops->name : "stub");
}
#define OF(h) (((const bg_obj*)(h))->dev)

static int32_t stub_probe(const char* name, int32_t devices, int32_t* count, char* msg, uint64_t cap) {
  *count = devices;
  if (devices > 0) return BG_OK;
  snprintf(msg, (size_t)cap, "the %s backend is not built into this test", name);
  return BG_ERR_BACKEND_UNAVAILABLE;
}

static int32_t stub_open(const bg_ops* ops, int32_t devices, int32_t ordinal, bg_device** out) {
  if (ordinal < 0 || ordinal >= devices)
    return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE, "the %s backend is not built into this test", ops->name);
  bg_device* d = calloc(1, sizeof *d);
  if (!d) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_device_open: out of host memory");
  bg_obj_init(d, BG_KIND_DEVICE, d);
  d->ops = ops;
  *out = d;
  return BG_OK;
}

static int32_t s_device_close(bg_device* d) {
  bg_obj_kill(d);
  free(d);
  return BG_OK;
}
static int32_t s_device_props(bg_device* d, bg_device_props* o) {
  (void)o;
  return unsupported(d, "bg_device_props_get");
}
static int32_t s_device_mem_info(bg_device* d, uint64_t* f, uint64_t* t) {
  (void)f, (void)t;
  return unsupported(d, "bg_device_mem_info");
}
static int32_t s_device_synchronize(bg_device* d) { return unsupported(d, "bg_device_synchronize"); }
static int32_t s_mem_alloc(bg_device* d, uint64_t n, bg_devptr* o) {
  (void)n, (void)o;
  return unsupported(d, "bg_mem_alloc");
}
static int32_t s_mem_free(bg_device* d, bg_devptr p) {
  (void)p;
  return unsupported(d, "bg_mem_free");
}
static int32_t s_host_alloc(bg_device* d, uint64_t n, uint32_t f, void** h, bg_devptr* p) {
  (void)n, (void)f, (void)h, (void)p;
  return unsupported(d, "bg_host_alloc");
}
static int32_t s_host_free(bg_device* d, void* h) {
  (void)h;
  return unsupported(d, "bg_host_free");
}
static int32_t s_stream_create(bg_device* d, uint32_t f, int32_t p, void** o) {
  (void)f, (void)p, (void)o;
  return unsupported(d, "bg_stream_create");
}
static int32_t s_event_create(bg_device* d, uint32_t f, void** o) {
  (void)f, (void)o;
  return unsupported(d, "bg_event_create");
}
static int32_t s_module_load(bg_device* d, int32_t k, const void* p, uint64_t n, void** o) {
  (void)k, (void)p, (void)n, (void)o;
  return unsupported(d, "bg_module_load");
}
/* Entries on handles a stub device never makes. */
static int32_t s_h(void* h) { return unsupported(OF(h), "a stub's handle"); }
static int32_t s_h2(void* h, void* x) {
  (void)x;
  return unsupported(OF(h), "a stub's handle");
}
static int32_t s_copy_in(void* s, bg_devptr d, const void* p, uint64_t n) {
  (void)d, (void)p, (void)n;
  return s_h(s);
}
static int32_t s_copy_out(void* s, void* p, bg_devptr d, uint64_t n) {
  (void)d, (void)p, (void)n;
  return s_h(s);
}
static int32_t s_copy_dd(void* s, bg_devptr a, bg_devptr b, uint64_t n) {
  (void)a, (void)b, (void)n;
  return s_h(s);
}
static int32_t s_memset_async(void* s, bg_devptr a, uint32_t v, uint32_t e, uint64_t n) {
  (void)a, (void)v, (void)e, (void)n;
  return s_h(s);
}
static int32_t s_host_func(void* s, bg_host_fn fn, void* u) {
  (void)fn, (void)u;
  return s_h(s);
}
static int32_t s_elapsed(float* ms, void* a, void* b) {
  (void)ms, (void)b;
  return s_h(a);
}
static int32_t s_get_kernel(void* m, const char* n, void** o) {
  (void)n, (void)o;
  return s_h(m);
}
static int32_t s_max_threads(void* k, int32_t* o) {
  (void)o;
  return s_h(k);
}
static int32_t s_launch(void* k, void* s, const uint32_t g[3], const uint32_t b[3], uint32_t sh,
                        const uint64_t* a, uint32_t n) {
  (void)s, (void)g, (void)b, (void)sh, (void)a, (void)n;
  return s_h(k);
}

#define BG_STUB_RECORD(n, devices)                                                                \
  static int32_t stub_probe_##n(int32_t* count, char* msg, uint64_t cap) {                        \
    return stub_probe(#n, devices, count, msg, cap);                                              \
  }                                                                                               \
  extern const bg_ops bg_##n##_ops;                                                               \
  static int32_t stub_open_##n(int32_t ordinal, bg_device** out) {                                \
    return stub_open(&bg_##n##_ops, devices, ordinal, out);                                       \
  }                                                                                               \
  const bg_ops bg_##n##_ops = {                                                                   \
      .name = #n,                                                                                 \
      .probe = stub_probe_##n,                                                                    \
      .open = stub_open_##n,                                                                      \
      .device_close = s_device_close,                                                             \
      .device_props = s_device_props,                                                             \
      .device_mem_info = s_device_mem_info,                                                       \
      .device_synchronize = s_device_synchronize,                                                 \
      .mem_alloc = s_mem_alloc,                                                                   \
      .mem_free = s_mem_free,                                                                     \
      .host_alloc = s_host_alloc,                                                                 \
      .host_free = s_host_free,                                                                   \
      .stream_create = s_stream_create,                                                           \
      .stream_destroy = s_h,                                                                      \
      .stream_synchronize = s_h,                                                                  \
      .stream_query = s_h,                                                                        \
      .stream_wait_event = s_h2,                                                                  \
      .memcpy_htod_async = s_copy_in,                                                             \
      .memcpy_dtoh_async = s_copy_out,                                                            \
      .memcpy_dtod_async = s_copy_dd,                                                             \
      .memset_async = s_memset_async,                                                             \
      .launch_host_func = s_host_func,                                                            \
      .event_create = s_event_create,                                                             \
      .event_destroy = s_h,                                                                       \
      .event_record = s_h2,                                                                       \
      .event_query = s_h,                                                                         \
      .event_synchronize = s_h,                                                                   \
      .event_elapsed = s_elapsed,                                                                 \
      .module_load = s_module_load,                                                               \
      .module_unload = s_h,                                                                       \
      .module_get_kernel = s_get_kernel,                                                          \
      .kernel_max_threads = s_max_threads,                                                        \
      .launch = s_launch,                                                                         \
  };

BG_STUBS(BG_STUB_RECORD)
