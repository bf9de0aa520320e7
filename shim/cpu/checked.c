/*
 * cpu/checked.c: checked mode (BUNGPU_CHECK=1, read once): device memory between guard pages, so
 * a kernel's stray write faults at once, and the checked vtable: the device's own (device.c hands
 * it in), each entry that runs, queues or waits for work first returning the device's sticky
 * error once a kernel faulted (pool.c catches the fault and sets it), as CUDA's calls on a
 * context do after an illegal address; releasing calls and static queries pass through, so
 * cleanup succeeds.
 *
 * Calls: hostmem.c, base.c.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int cpu_checked_mode(void) {
  static int v = -1;
  if (v < 0) {
    const char* e = getenv("BUNGPU_CHECK");
    v = e && *e && strcmp(e, "0") != 0;
  }
  return v;
}

/* Checked mode's device allocations: [guard page][data pages][guard page], both guards
 * PROT_NONE. The pointer is placed so that its size rounded up to 64 bytes ends at the back
 * guard: a write past the (64-byte-rounded) end, or far before the start, faults at once. */
static void guarded_geometry(uint64_t bytes, size_t* used, size_t* data) {
  size_t ps = cpu_page_size();
  size_t u = (size_t)((bytes + 63) / 64 * 64);
  if (u == 0) u = 64;
  *used = u;
  *data = (u + ps - 1) / ps * ps;
}

void* cpu_guarded_alloc(uint64_t bytes) {
  size_t ps = cpu_page_size();
  if (bytes > (uint64_t)SIZE_MAX / 2) return NULL;
  size_t used, data;
  guarded_geometry(bytes, &used, &data);
  size_t len = data + 2 * ps;
  char* base = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
  if (mprotect(base + ps, data, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, len);
    return NULL;
  }
  return base + ps + (data - used);
}

void cpu_guarded_free(void* p, uint64_t bytes) {
  size_t ps = cpu_page_size();
  size_t used, data;
  guarded_geometry(bytes, &used, &data);
  char* base = (char*)p - (data - used) - ps;
  munmap(base, data + 2 * ps);
}

void cpu_guarded_release(void* arg) {
  cpu_guarded_block* g = arg;
  cpu_guarded_free(g->p, g->bytes);
  free(g);
}

/* ---- the checked-mode vtable ------------------------------------------------------------------ */
static const bg_ops* base; /* the device's own table */

/* After a kernel faulted (checked mode), every call on the device returns the sticky error, as
 * CUDA's calls on a context do after an illegal address, until the device is closed. Releasing
 * calls (frees, destroys, unload, end of capture) and static queries still work, so cleanup
 * succeeds. */
#define STICKY_OF(devp, fn)                                                                      \
  do {                                                                                           \
    cpu_device* d_ = (cpu_device*)(devp);                                                        \
    int32_t c_ = atomic_load_explicit(&d_->sticky, memory_order_acquire);                       \
    if (c_) return bg_set_error(c_, "%s: the device has a sticky error: %s", fn, d_->sticky_msg); \
  } while (0)
#define HDEV(h) (((bg_obj*)(h))->dev)
#define WRAP_D(name, params, args)                                                               \
  static int32_t chk_##name params {                                                             \
    STICKY_OF(dev, "bg_" #name);                                                                 \
    return (base->name) args;                                                                      \
  }
#define WRAP_H(name, h, params, args)                                                            \
  static int32_t chk_##name params {                                                             \
    STICKY_OF(HDEV(h), "bg_" #name);                                                             \
    return (base->name) args;                                                                      \
  }

/* Waits check again afterwards: the fault may have happened in the work they waited for. */
#define WRAP_WAIT(name, h, params, args)                                                         \
  static int32_t chk_##name params {                                                             \
    STICKY_OF(HDEV(h), "bg_" #name);                                                             \
    int32_t rc_ = (base->name) args;                                                               \
    if (rc_ == BG_OK) STICKY_OF(HDEV(h), "bg_" #name);                                           \
    return rc_;                                                                                  \
  }
WRAP_WAIT(device_synchronize, dev, (bg_device* dev), (dev))
WRAP_D(mem_alloc, (bg_device* dev, uint64_t b, bg_devptr* o), (dev, b, o))
WRAP_D(host_alloc, (bg_device* dev, uint64_t b, uint32_t f, void** h, bg_devptr* o), (dev, b, f, h, o))
WRAP_D(memcpy_htod, (bg_device* dev, bg_devptr d, const void* s, uint64_t n), (dev, d, s, n))
WRAP_WAIT(memcpy_dtoh, dev, (bg_device* dev, void* d, bg_devptr s, uint64_t n), (dev, d, s, n))
WRAP_D(memcpy_dtod, (bg_device* dev, bg_devptr d, bg_devptr s, uint64_t n), (dev, d, s, n))
WRAP_D(memset, (bg_device* dev, bg_devptr d, uint32_t p, uint32_t e, uint64_t c), (dev, d, p, e, c))
WRAP_D(stream_create, (bg_device* dev, uint32_t f, int32_t p, void** o), (dev, f, p, o))
WRAP_D(event_create, (bg_device* dev, uint32_t f, void** o), (dev, f, o))
WRAP_D(module_load, (bg_device* dev, int32_t k, const void* d, uint64_t n, void** o), (dev, k, d, n, o))
WRAP_D(ring_alloc, (bg_device* dev, uint64_t b, void** h, bg_devptr* o), (dev, b, h, o))
WRAP_WAIT(stream_synchronize, s, (void* s), (s))
WRAP_WAIT(stream_query, s, (void* s), (s))
WRAP_H(stream_wait_event, s, (void* s, void* e), (s, e))
WRAP_H(memcpy_htod_async, s, (void* s, bg_devptr d, const void* src, uint64_t n), (s, d, src, n))
WRAP_H(memcpy_dtoh_async, s, (void* s, void* d, bg_devptr src, uint64_t n), (s, d, src, n))
WRAP_H(memcpy_dtod_async, s, (void* s, bg_devptr d, bg_devptr src, uint64_t n), (s, d, src, n))
WRAP_H(memcpy_peer_async, s, (void* s, bg_devptr d, bg_device* dd, bg_devptr src, bg_device* sd, uint64_t n, int p),
       (s, d, dd, src, sd, n, p))
WRAP_H(memset_async, s, (void* s, bg_devptr d, uint32_t p, uint32_t e, uint64_t c), (s, d, p, e, c))
WRAP_H(launch_host_func, s, (void* s, bg_host_fn f, void* u), (s, f, u))
WRAP_H(event_record, e, (void* e, void* s), (e, s))
WRAP_WAIT(event_query, e, (void* e), (e))
WRAP_WAIT(event_synchronize, e, (void* e), (e))
WRAP_H(event_elapsed, a, (float* ms, void* a, void* b), (ms, a, b))
WRAP_H(module_get_kernel, m, (void* m, const char* n, void** o), (m, n, o))
WRAP_H(kernel_max_threads, k, (void* k, int32_t* o), (k, o))
WRAP_H(kernel_retarget, k, (void* k, void* f), (k, f))
WRAP_H(launch, k, (void* k, void* s, const uint32_t g[3], const uint32_t b[3], uint32_t sh, const uint64_t* a, uint32_t n),
       (k, s, g, b, sh, a, n))
WRAP_H(begin_capture, s, (void* s, int32_t m), (s, m))
WRAP_H(graph_instantiate, g, (void* g, void** o), (g, o))
WRAP_H(graph_upload, x, (void* x, void* s), (x, s))
WRAP_H(graph_launch, x, (void* x, void* s), (x, s))
WRAP_H(graph_exec_set_kernel_args, x, (void* x, uint32_t i, const uint64_t* a, uint32_t n), (x, i, a, n))
WRAP_H(submit, s, (void* s, const uint8_t* b, uint64_t n), (s, b, n))
WRAP_D(mempool_create, (bg_device* dev, uint64_t t, void** o), (dev, t, o))
WRAP_H(mem_alloc_async, s, (void* s, void* p, uint64_t b, bg_devptr* o), (s, p, b, o))
WRAP_D(mem_alloc_shareable, (bg_device* dev, uint64_t b, bg_devptr* o), (dev, b, o))
static int32_t chk_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* pl, uint64_t b, bg_devptr* o) {
  STICKY_OF(dev, "bg_ipc_mem_open");
  return base->ipc_mem_open(dev, pid, pl, b, o);
}
static int32_t chk_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* pl, void** o) {
  STICKY_OF(dev, "bg_ipc_event_open");
  return base->ipc_event_open(dev, pid, pl, o);
}
WRAP_D(graph_from_commands, (bg_device* dev, const uint8_t* p, uint64_t n, void** o), (dev, p, n, o))

static bg_ops checked;

static void build(void) {
  checked = *base;
  /* the core's fallbacks instead, through the checked entries: submit then stream_synchronize,
   * and a host function for a notification */
  checked.submit_wait = NULL;
  checked.stream_notify = NULL;
  checked.device_synchronize = chk_device_synchronize;
  checked.mem_alloc = chk_mem_alloc;
  checked.host_alloc = chk_host_alloc;
  checked.memcpy_htod = chk_memcpy_htod;
  checked.memcpy_dtoh = chk_memcpy_dtoh;
  checked.memcpy_dtod = chk_memcpy_dtod;
  checked.memset = chk_memset;
  checked.memcpy_peer_async = chk_memcpy_peer_async;
  checked.stream_create = chk_stream_create;
  checked.stream_synchronize = chk_stream_synchronize;
  checked.stream_query = chk_stream_query;
  checked.stream_wait_event = chk_stream_wait_event;
  checked.memcpy_htod_async = chk_memcpy_htod_async;
  checked.memcpy_dtoh_async = chk_memcpy_dtoh_async;
  checked.memcpy_dtod_async = chk_memcpy_dtod_async;
  checked.memset_async = chk_memset_async;
  checked.launch_host_func = chk_launch_host_func;
  checked.event_create = chk_event_create;
  checked.event_record = chk_event_record;
  checked.event_query = chk_event_query;
  checked.event_synchronize = chk_event_synchronize;
  checked.event_elapsed = chk_event_elapsed;
  checked.module_load = chk_module_load;
  checked.module_get_kernel = chk_module_get_kernel;
  checked.kernel_max_threads = chk_kernel_max_threads;
  checked.kernel_retarget = chk_kernel_retarget;
  checked.launch = chk_launch;
  checked.begin_capture = chk_begin_capture;
  checked.graph_instantiate = chk_graph_instantiate;
  checked.graph_upload = chk_graph_upload;
  checked.graph_launch = chk_graph_launch;
  checked.graph_exec_set_kernel_args = chk_graph_exec_set_kernel_args;
  checked.submit = chk_submit;
  checked.graph_from_commands = chk_graph_from_commands;
  checked.ring_alloc = chk_ring_alloc;
  checked.mempool_create = chk_mempool_create;
  checked.mem_alloc_async = chk_mem_alloc_async;
  checked.mem_alloc_shareable = chk_mem_alloc_shareable;
  checked.ipc_mem_open = chk_ipc_mem_open;
  checked.ipc_event_open = chk_ipc_event_open;
}

const bg_ops* cpu_checked_ops(const bg_ops* device_ops) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  base = device_ops; /* always the same table (device.c's), set under the core's device lock */
  pthread_once(&once, build);
  return &checked;
}
