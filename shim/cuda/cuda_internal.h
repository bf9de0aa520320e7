/*
 * cuda/cuda_internal.h: what the files of the CUDA backend share. The backend is a thin mapping
 * of bg_ops onto the CUDA driver API, loaded at run time with dlopen (libcuda) and, on first
 * compile, NVRTC (libnvrtc); nothing is linked.
 *
 * From the bottom up; each file calls only files above it in this list:
 *  driver.c   loading libcuda (`cu`, the entry points), cuInit, the probe; driver statuses.
 *  compile.c  NVRTC: loading it, compiling CUDA C++ to CUBIN or PTX.
 *  release.c  releases that could wait forever, queued and done later; fences and the reuse of
 *             queued blocks; gates behind host functions and stream waits; the open devices.
 *  context.c  entering a device (its context current for the call, queued releases flushed) and
 *             failing out of the driver (cu_fail, CALL, ENTER); nccl.c's two calls.
 *  memory.c   device and pinned host memory, synchronous copies and memsets, rings.
 *  pool.c     memory pools and stream-ordered allocation.
 *  ipc.c      memory and events shared between processes.
 *  capture.c  capture records: begin, end, status, the kernel nodes launches append.
 *  stream.c   streams, asynchronous copies, host functions, stream memory operations, events.
 *  module.c   modules, kernels and launches.
 *  graph.c    graphs and execs, from captures or command lists.
 *  nccl.c     communicators over NCCL (nccl_api.h), through context.c's nccl calls.
 *  device.c   open/close, props, synchronize, peers, and the bg_ops table naming them all.
 * The one call that climbs is through a pointer: resident_end (module.c), a host function the
 * driver runs behind a persistent kernel. Shared functions and data are declared here, hidden
 * from outside the library as the static ones they were.
 *
 * Choices:
 *  - Context: each device retains its primary context at open and releases it at close. Every
 *    entry that touches the driver first makes that context current on the calling thread
 *    (cuCtxGetCurrent, then cuCtxSetCurrent only when it differs), so calls may come from any
 *    thread (Bun Workers). The thread keeps that context current afterwards.
 *  - Default stream: the device's default stream object wraps the legacy NULL stream, so the
 *    synchronous copies and memsets (which run on the legacy stream) are ordered after the work
 *    on it, and created streams without BG_STREAM_NON_BLOCKING synchronize with it, as in CUDA.
 *  - Kernel nodes in capture order: while any capture begun through bg_stream_begin_capture is
 *    live on the device, each bg_launch on a capturing stream asks cuStreamGetCaptureInfo for the
 *    stream's dependency set, which right after a launch is exactly the new kernel node, and
 *    appends it (with its argument count) to the capture record whose capture id matches. Records
 *    are keyed by the driver's capture id, so launches on streams that joined the capture through
 *    events (fork/join) land in the origin's record too. end_capture hands the list to the graph;
 *    instantiate copies it and each node's CUDA_KERNEL_NODE_PARAMS into the exec. An exec keeps
 *    its graph alive (the node handles belong to it), so bg_graph_destroy before the exec's end is
 *    safe. Limitation: kernels that enter a capture other than through bg_launch (another
 *    library's launches) are not numbered; launches from several threads into one capture are
 *    numbered in the order their bg_launch calls recorded them.
 *  - Commands: `submit` is NULL; the core issues them one by one through this table. Graphs
 *    from command lists (bg_graph_from_commands) are built node by node (cu_graph_from_commands);
 *    where the driver lacks those calls, the core's generic graph replays the list, and
 *    kernel_hold / event_hold keep what it names alive.
 *  - Rings: cuMemHostAlloc(DEVICEMAP | PORTABLE), zeroed, and its device address.
 */
#ifndef BUNGPU_CUDA_INTERNAL_H
#define BUNGPU_CUDA_INTERNAL_H

#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dladdr */
#endif
#include "../internal.h"
#include "cuda_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the loaded driver ------------------------------------------------------------------------ */
typedef struct cu_api {
#define BGCU_FIELD(ret, name, params) PFN_bg_##name name;
#define BGCU_FIELD_LEGACY(ret, name, params, real) PFN_bg_##name name;
  BGCU_DRIVER_REQUIRED(BGCU_FIELD)
  BGCU_DRIVER_OPTIONAL(BGCU_FIELD)
  BGCU_DRIVER_LEGACY(BGCU_FIELD_LEGACY)
#undef BGCU_FIELD
#undef BGCU_FIELD_LEGACY
} cu_api;

/* CALL(cuFoo_v2, (args)): call the loaded entry point; on failure record and return its code. */
#define CALL(fn, args)                                                                             \
  do {                                                                                             \
    bgcu_result rc_ = cu.fn args;                                                                  \
    if (rc_ != BGCUDA_SUCCESS) return cu_fail(rc_, #fn);                                           \
  } while (0)

#if !defined(__APPLE__)
/* dlsym into a function pointer without the object-to-function pointer cast ISO C lacks (POSIX
 * guarantees the representations match). */
#define LOAD_SYM(dst, h, name)                                                                     \
  do {                                                                                             \
    void* p_ = dlsym(h, name);                                                                     \
    _Static_assert(sizeof(dst) == sizeof p_, "function pointers are pointer-sized");               \
    memcpy(&(dst), &p_, sizeof p_);                                                                \
  } while (0)
#endif

/* ---- objects ---------------------------------------------------------------------------------- */
typedef struct cu_capture {
  uint64_t id;                /* the driver's capture sequence id */
  bgcu_stream origin;         /* the stream that began it */
  char why[192];              /* the first failed call seen to invalidate it, for end_capture */
  bgcu_graph_node* nodes;     /* kernel nodes in capture order */
  uint32_t* nargs;            /* argument count of each */
  struct cu_module** mods;    /* the module of each (one reference each) */
  uint32_t n, cap;
  struct cu_capture* next;
} cu_capture;

#define CU_MAX_ACCESSORS 64 /* devices with peer access to one device, at most */

typedef struct cu_device {
  bg_device base; /* first: a cu_device* is a bg_device* */
  bgcu_device cudev;
  bgcu_context ctx;
  int cc_major, cc_minor;
  pthread_mutex_t cap_lock;
  cu_capture* caps;     /* live captures begun through bg */
  _Atomic int ncaps;    /* their count: launches skip the capture query when 0 */
  _Atomic int resident; /* persistent ring kernels launched and not yet finished */
  pthread_mutex_t def_lock;
  struct cu_deferred* deferred; /* releases that would wait for a resident kernel or the JS thread */
  _Atomic int ndeferred;
  struct cu_ipc_map* maps;      /* IPC mappings opened and not yet closed (def_lock) */
  pthread_mutex_t gate_lock;
  struct cu_gate* gates;        /* host functions and stream waits not yet passed (see blocked) */
  struct cu_gate* spare;        /* passed ones, their events kept for reuse */
  _Atomic int ngates;
  pthread_mutex_t str_lock;
  struct cu_stream* streams;    /* the streams created on it, for the fences of deferred frees */
  struct cu_device* next_open;  /* the list of open devices (devs) */
  struct cu_pool* defpool; /* the handle of the device's default memory pool, made on first use */
  _Atomic int pools;       /* memory pools: 0 not asked yet, 1 supported, -1 not */
  /* Pools made on it (MemoryPool), and the devices with peer access to it, which each of them
   * grants access to (cuMemPoolSetAccess: peer access does not reach pool memory). pool_lock. */
  pthread_mutex_t pool_lock;
  struct cu_pool* custom;
  struct cu_device* accessors[CU_MAX_ACCESSORS];
  int naccessors;
} cu_device;

/* A memory pool handle: the driver's pool (the device's default one is never destroyed). */
typedef struct cu_pool {
  bg_obj h;
  bgcu_mempool p;
  struct cu_pool* next; /* the device's custom pools (not the default one) */
} cu_pool;

/* Peer access to a device's pools: `dev` gets read-write access to every pool made on `peer` now
 * and later (enable), or loses it (disable). pool.c. */
bgcu_result cu_pools_peer(cu_device* dev, cu_device* peer, int enable);
/* `to`'s access to pool `p` granted (read-write) or taken back (none); pool.c. */
bgcu_result cu_pool_access(bgcu_mempool p, cu_device* to, bgcu_enum flags);

/* A release put off while it could wait forever (see blocked): cuMemFree, cuMemFreeHost,
 * cuModuleUnload and cuIpcCloseMemHandle wait for all work on the device. */
typedef struct cu_deferred {
  int kind; /* 0 device memory, 1 pinned host memory, 2 module, 3 IPC mapping */
  bg_devptr dptr;
  void* ptr;
  uint64_t bytes;    /* kind 0: the allocation's size, when it may be handed out again (else 0) */
  bgcu_event* fence; /* kind 0: recorded at the free on every stream that could still use it */
  uint32_t nfence;
  struct cu_deferred* next;
} cu_deferred;

/* A point in a stream behind which the stream may wait for a JS thread: a host function (a
 * TypeScript one is a shim signal) or a wait on a word (how TypeScript host functions hold a
 * stream). Its event is recorded right after it. */
typedef struct cu_gate {
  bgcu_event e;
  struct cu_gate* next;
} cu_gate;

/* An IPC mapping this process opened (cuIpcOpenMemHandle), counted per open. */
typedef struct cu_ipc_map {
  bg_devptr p;
  int opens;
  struct cu_ipc_map* next;
} cu_ipc_map;

typedef struct cu_stream {
  bg_obj h;
  bgcu_stream s;        /* NULL: the legacy default stream */
  cu_capture* cap;      /* the capture this stream began, until end_capture */
  _Atomic int resident; /* persistent kernels on it, launched and not yet finished */
  struct cu_stream* next; /* the device's created streams (str_lock) */
} cu_stream;

typedef struct cu_event {
  bg_obj h;
  bgcu_event e;
  _Atomic int refs; /* the handle, plus one per hold of a command-list graph */
} cu_event;

typedef struct cu_kernel {
  bg_obj h;
  bgcu_function f;
  struct cu_module* mod;
  int persistent;        /* bungpu's persistent ring kernel (bg_ring_persistent): never ends alone */
  int static_shared;     /* its static shared memory (bytes) */
  _Atomic int dyn_limit; /* dynamic shared memory it may use, as last set with cuFuncSetAttribute */
  struct cu_kernel* next;
} cu_kernel;

typedef struct cu_module {
  bg_obj h;
  bgcu_module m;
  struct cu_device* dev;
  _Atomic int refs;   /* the handle, plus one per captured kernel node of a live capture or graph */
  pthread_mutex_t lock;
  cu_kernel* kernels; /* module-owned, freed at unload */
} cu_module;

typedef struct cu_graph {
  bg_obj h;
  bgcu_graph g;
  _Atomic int refs;   /* the handle, plus one per exec instantiated from it */
  uint32_t nk;        /* kernel nodes recorded during capture, in capture order */
  bgcu_graph_node* knodes;
  uint32_t* knargs;
  struct cu_module** kmods; /* their modules, kept loaded while the graph (or an exec) lives */
  uint32_t nev;             /* events of a graph built from a command list, held (event_unref) */
  struct cu_event** evs;
  int mem_nodes;            /* memory allocation nodes: -1 not looked at yet, 0 none, 1 some */
  _Atomic int execs;        /* its execs alive (a graph with memory nodes may have one) */
} cu_graph;

typedef struct cu_exec {
  bg_obj h;
  bgcu_graph_exec x;
  cu_graph* graph;
  uint32_t nk;
  bgcu_graph_node* knodes;
  uint32_t* knargs;
  bgcu_kernel_node_params* params; /* NULL when the driver lacks the kernel-node calls */
} cu_exec;

#define CUDEV(h) ((cu_device*)((bg_obj*)(h))->dev)

/* Every entry that touches the driver makes the device's primary context current for the length
 * of the call only: pushed when another context (or none) is current, popped on return, so another
 * CUDA user of the same thread finds its own context as it left it. Without the push/pop entry
 * points (never the case since CUDA 4) the context is set and left current. The entry's device is
 * remembered for the thread meanwhile (cur_dev), so a failed call can note what invalidated a
 * capture. ENTER relies on the cleanup attribute of GCC and Clang. */
typedef struct cu_guard {
  int pushed;
  struct cu_device* prev;
} cu_guard;

#define ENTER(d)                                                                                   \
  cu_guard enter_guard_ __attribute__((cleanup(cu_leave))) = {0, NULL};                            \
  do {                                                                                             \
    int32_t e_ = cu_enter(d, &enter_guard_);                                                       \
    if (e_) return e_;                                                                             \
  } while (0)

#pragma GCC visibility push(hidden)

/* driver.c */
extern cu_api cu;
extern char load_msg[512];
int32_t map_cu(bgcu_result rc);
const char* cu_err_name(bgcu_result rc);
const char* cu_err_text(bgcu_result rc);
int32_t load_driver(void);
int32_t cu_probe(int32_t* count, char* msg, uint64_t cap);

#if !defined(__APPLE__)
void* open_first(const char* const* names, size_t n, char* err, size_t cap,
                 const char** opened);
#endif

/* compile.c */
int log_head(const char* log, size_t len);
int32_t cu_rtc_compile(bg_device* dev, const char* src, const char* name,
                       const char* options, int32_t want_cubin, void** out);
int32_t cu_rtc_version(bg_device* dev, int32_t* major, int32_t* minor);

/* release.c */
extern pthread_mutex_t devs_lock;
extern cu_device* devs;
int defer_release(cu_device* d, int kind, bg_devptr dptr, void* ptr);
bg_devptr reuse_deferred(cu_device* d, uint64_t bytes, int loose);
bgcu_result ipc_close_now(bg_devptr p);
void flush_deferred(cu_device* d);
int is_resident(cu_device* d);
void gate_add(cu_device* d, cu_stream* s);
int blocked(cu_device* d);
bgcu_result module_unref(cu_module* m);

/* context.c */
int32_t cu_fail(bgcu_result rc, const char* call);
int32_t cu_fail_at(bgcu_result rc, const char* call, const char* what);
void cu_leave(cu_guard* g);
int32_t cu_enter(cu_device* d, cu_guard* g);

/* memory.c */
int32_t cu_mem_alloc(bg_device* dev, uint64_t bytes, bg_devptr* out);
int32_t cu_mem_free(bg_device* dev, bg_devptr p);
int32_t cu_host_alloc(bg_device* dev, uint64_t bytes, uint32_t flags, void** host,
                      bg_devptr* dptr);
int32_t cu_host_free(bg_device* dev, void* host);
int32_t cu_memcpy_htod(bg_device* dev, bg_devptr dst, const void* src, uint64_t n);
int32_t cu_memcpy_dtoh(bg_device* dev, void* dst, bg_devptr src, uint64_t n);
int32_t cu_memcpy_dtod(bg_device* dev, bg_devptr dst, bg_devptr src, uint64_t n);
int32_t cu_memset(bg_device* dev, bg_devptr dst, uint32_t pattern, uint32_t esz,
                  uint64_t count);
int32_t cu_ring_alloc(bg_device* dev, uint64_t bytes, void** host, bg_devptr* dptr);
int32_t cu_ring_free(bg_device* dev, void* host);

/* pool.c */
int32_t cu_mempool_create(bg_device* dev, uint64_t threshold, void** out);
int32_t cu_mempool_default(bg_device* dev, void** out);
int32_t cu_mempool_destroy(void* pp);
int32_t cu_mempool_set_threshold(void* pp, uint64_t threshold);
int32_t cu_mempool_trim(void* pp, uint64_t keep);
int32_t cu_mempool_stats(void* pp, uint64_t out[4]);
int32_t cu_mempool_reset_peak(void* pp);
int32_t cu_mem_alloc_async(void* sp, void* pool, uint64_t bytes, bg_devptr* out);
int32_t cu_mem_free_async(void* sp, bg_devptr p);

/* ipc.c */
int32_t cu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes);
int32_t cu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                        bg_devptr* out);
int32_t cu_ipc_mem_close(bg_device* dev, bg_devptr p);
int32_t cu_ipc_event_export(void* ep, uint8_t* payload);
int32_t cu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out);

/* capture.c */
void free_capture(cu_capture* c);
void detach_capture(cu_device* d, cu_capture* c);
int32_t record_kernel_node(cu_device* d, cu_stream* s, cu_kernel* k, uint32_t nargs);
int32_t cu_begin_capture(void* sp, int32_t mode);
int32_t cu_end_capture(void* sp, void** out);
int32_t cu_capture_status(void* sp, int32_t* out);

/* stream.c */
int32_t cu_stream_create(bg_device* dev, uint32_t flags, int32_t prio, void** out);
int32_t cu_stream_destroy(void* sp);
int32_t cu_stream_synchronize(void* sp);
int32_t cu_stream_query(void* sp);
int32_t cu_stream_wait_event(void* sp, void* ep);
int32_t cu_memcpy_htod_async(void* sp, bg_devptr dst, const void* src, uint64_t n);
int32_t cu_memcpy_dtoh_async(void* sp, void* dst, bg_devptr src, uint64_t n);
int32_t cu_memcpy_dtod_async(void* sp, bg_devptr dst, bg_devptr src, uint64_t n);
int32_t cu_memcpy_peer_async(void* sp, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                             bg_device* src_dev, uint64_t n, int peer);
int32_t cu_memset_async(void* sp, bg_devptr dst, uint32_t pattern, uint32_t esz,
                        uint64_t count);
int32_t cu_launch_host_func(void* sp, bg_host_fn fn, void* user);
int32_t cu_stream_notify(void* sp, bg_host_fn fn, void* user);
int32_t cu_stream_wait_value32(void* sp, bg_devptr addr, uint32_t value);
int32_t cu_stream_write_value32(void* sp, bg_devptr addr, uint32_t value);
int32_t cu_event_create(bg_device* dev, uint32_t flags, void** out);
bgcu_result event_unref(cu_event* e);
int32_t cu_event_destroy(void* ep);
void cu_event_hold(void* ep);
void cu_event_unhold(void* ep);
int32_t cu_event_record(void* ep, void* sp);
int32_t cu_event_query(void* ep);
int32_t cu_event_synchronize(void* ep);
int32_t cu_event_elapsed(float* ms, void* a, void* b);

/* module.c */
int32_t cu_module_load(bg_device* dev, int32_t kind, const void* data, uint64_t n,
                       void** out);
int32_t cu_module_unload(void* mp);
void cu_kernel_hold(void* kp);
void cu_kernel_unhold(void* kp);
int32_t cu_module_get_kernel(void* mp, const char* name, void** out);
int32_t cu_kernel_max_threads(void* kp, int32_t* out);
void fill_params(void** kp, const uint64_t* args, uint32_t nargs);
int32_t cu_launch(void* kp, void* sp, const uint32_t grid[3], const uint32_t block[3],
                  uint32_t shared, const uint64_t* args, uint32_t nargs);

/* graph.c */
int32_t cu_graph_destroy(void* gp);
int32_t cu_graph_node_count(void* gp, uint32_t* nodes, uint32_t* kernel_nodes);
int32_t cu_graph_instantiate(void* gp, void** out);
int32_t cu_graph_exec_destroy(void* xp);
int32_t cu_graph_upload(void* xp, void* sp);
int32_t cu_graph_launch(void* xp, void* sp);
int32_t cu_graph_exec_set_kernel_args(void* xp, uint32_t index, const uint64_t* args,
                                      uint32_t nargs);
int32_t cu_graph_from_commands(bg_device* dev, const uint8_t* p, uint64_t len, void** out);

#pragma GCC visibility pop

#endif /* BUNGPU_CUDA_INTERNAL_H */
