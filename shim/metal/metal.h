/*
 * metal.h: what the files of the Metal backend share. The backend is plain C11 over the
 * Objective-C runtime, in five files by job, each calling only the files listed above it:
 *  runtime.c  the runtime loaded at run time, the selectors, NSString and NSError helpers
 *  stream.c   streams (command buffers, encoders, the helper thread), events
 *  memory.c   the address map, allocations, synchronous copies and fills, rings
 *  ops.c      built-in kernels, asynchronous copies and fills, modules, launches, command lists
 *  backend.c  the device (probe/open/close/props/synchronize) and the vtable naming them all
 *
 * Nothing is linked: libobjc, Foundation, Metal (and CoreGraphics, which macOS wants loaded
 * before it hands out a default device) are dlopen'ed, and every Objective-C message goes
 * through objc_msgSend cast to the exact function type of that call (m_* helpers below; never
 * variadic). Off macOS the backend builds to a probe and an open that say why not.
 *
 * Mechanism, in short (see the notes at each part):
 *  - Memory: every allocation is a shared-storage MTLBuffer; its device address is its
 *    `contents` pointer. A sorted table (address, length, buffer) maps any address inside an
 *    allocation back to (buffer, offset) for kernel arguments and copies.
 *  - Streams: one MTLCommandQueue each, one open command buffer that work is encoded into, and
 *    one helper thread that waits on committed command buffers in order and runs host work
 *    (host functions, copies to pageable host memory) in stream order. The open command buffer
 *    is committed at once while fewer than two items are in flight, otherwise when the helper
 *    thread drains them (or on synchronize, query, host work and timed event records), so
 *    launches batch while the GPU is busy and never wait for a host call to start.
 *  - Host work holds later GPU work of its stream back through a per-stream MTLSharedEvent
 *    "gate": a command buffer created after host work first waits for the gate's value, which
 *    the helper thread sets once the host work has run.
 *  - Async copies: blits when offsets and size are multiples of 4 (macOS requires it), else a
 *    built-in byte-copy kernel; async fills of 1, 2 and 4-byte patterns: built-in fill kernels.
 *    The built-ins are MSL compiled once per device on first use. Synchronous copies and fills
 *    wait for the default stream, then run on the CPU (shared storage).
 *  - Events: an MTLSharedEvent and a counter per event; elapsed time is the GPUEndTime of the
 *    command buffers that timing records end (see mtl_event_elapsed).
 *  - Metal has no stream capture (BG_ERR_NOT_SUPPORTED). Graphs come from command lists
 *    (bg_graph_from_commands): the core's generic graph replays the list through mtl_submit.
 *
 * MSL kernel convention (bg_launch / BG_CMD_LAUNCH): argument slot i is [[buffer(i)]]. A slot
 * holding an address inside an allocation of this device is bound with setBuffer at that
 * offset (declare `device T* p [[buffer(i)]]`; the offset must suit T's alignment); any other
 * slot is passed with setBytes as its 8 bytes, so scalars are `constant T& x [[buffer(i)]]`
 * with T of 4 bytes (int, uint, float: the low 4 bytes) or 8 bytes (long, ulong, double is not
 * in MSL). At most 31 slots. Grid is in threadgroups, block is threads per threadgroup
 * (dispatchThreadgroups:threadsPerThreadgroup:); dynamic shared memory is
 * `threadgroup T* smem [[threadgroup(0)]]`, rounded up to 16 bytes.
 */
#ifndef BUNGPU_METAL_H
#define BUNGPU_METAL_H

#define _GNU_SOURCE
#define _DARWIN_C_SOURCE
#include "../internal.h"

#include <stdio.h>
#include <string.h>

#if defined(__APPLE__)

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* ---- Objective-C runtime, looked up at run time --------------------------------------------- */
typedef struct objc_object* oc_id;
typedef struct objc_selector* oc_sel;
typedef void (*oc_imp)(void); /* generic function pointer; cast to the exact type per call */
typedef struct mtl_size { uint64_t w, h, d; } mtl_size; /* MTLSize: three NSUIntegers */
typedef struct ns_osver { int64_t major, minor, patch; } ns_osver;

enum {
  MTL_STORAGE_SHARED = 0,      /* MTLResourceStorageModeShared */
  MTL_DISPATCH_CONCURRENT = 1, /* MTLDispatchTypeConcurrent */
  MTL_BARRIER_BUFFERS = 1,     /* MTLBarrierScopeBuffers */
  MTL_CB_ERROR = 5,            /* MTLCommandBufferStatusError */
  NS_UTF8 = 4,                 /* NSUTF8StringEncoding */
  MAX_BUFFER_ARGS = 31,        /* buffer argument table entries of a compute function */
  MAX_INFLIGHT = 2             /* committed items per stream before new work is held open */
};

#define PATH_OBJC "/usr/lib/libobjc.A.dylib"
#define PATH_FOUNDATION "/System/Library/Frameworks/Foundation.framework/Foundation"
#define PATH_METAL "/System/Library/Frameworks/Metal.framework/Metal"
#define PATH_CG "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"

#define SELECTORS(X)                                                                           \
  X(retain, "retain") X(release, "release") X(alloc, "alloc")                                 \
  X(respondsToSelector, "respondsToSelector:") X(initWithBytes, "initWithBytes:length:encoding:") \
  X(utf8, "UTF8String") X(count, "count") X(objectAtIndex, "objectAtIndex:")                  \
  X(localizedDescription, "localizedDescription") X(processInfo, "processInfo")               \
  X(operatingSystemVersion, "operatingSystemVersion") X(name, "name")                         \
  X(registryID, "registryID") X(recommendedMaxWorkingSetSize, "recommendedMaxWorkingSetSize") \
  X(currentAllocatedSize, "currentAllocatedSize") X(hasUnifiedMemory, "hasUnifiedMemory")     \
  X(maxThreadsPerThreadgroup, "maxThreadsPerThreadgroup")                                     \
  X(maxThreadgroupMemoryLength, "maxThreadgroupMemoryLength")                                 \
  X(maxBufferLength, "maxBufferLength") X(newBufferWithLength, "newBufferWithLength:options:") \
  X(newBufferWithBytes, "newBufferWithBytes:length:options:") X(contents, "contents")         \
  X(newCommandQueue, "newCommandQueue") X(commandBuffer, "commandBuffer")                     \
  X(computeCommandEncoder, "computeCommandEncoder")                                           \
  X(computeCommandEncoderWithDispatchType, "computeCommandEncoderWithDispatchType:")          \
  X(blitCommandEncoder, "blitCommandEncoder") X(endEncoding, "endEncoding") X(commit, "commit") \
  X(waitUntilCompleted, "waitUntilCompleted") X(status, "status") X(error, "error")           \
  X(GPUEndTime, "GPUEndTime") X(setComputePipelineState, "setComputePipelineState:")          \
  X(setBuffer, "setBuffer:offset:atIndex:") X(setBytes, "setBytes:length:atIndex:")           \
  X(setThreadgroupMemoryLength, "setThreadgroupMemoryLength:atIndex:")                        \
  X(dispatchThreadgroups, "dispatchThreadgroups:threadsPerThreadgroup:")                      \
  X(memoryBarrierWithScope, "memoryBarrierWithScope:")                                        \
  X(copyFromBuffer, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:")           \
  X(newSharedEvent, "newSharedEvent") X(signaledValue, "signaledValue")                       \
  X(setSignaledValue, "setSignaledValue:") X(encodeSignalEvent, "encodeSignalEvent:value:")   \
  X(encodeWaitForEvent, "encodeWaitForEvent:value:")                                          \
  X(newLibraryWithSource, "newLibraryWithSource:options:error:")                              \
  X(newLibraryWithData, "newLibraryWithData:error:") X(newFunctionWithName, "newFunctionWithName:") \
  X(newComputePipelineState, "newComputePipelineStateWithFunction:error:")                    \
  X(maxTotalThreadsPerThreadgroup, "maxTotalThreadsPerThreadgroup")                           \
  X(staticThreadgroupMemoryLength, "staticThreadgroupMemoryLength")

typedef struct mtl_runtime {
  int32_t rc;
  char msg[512];
  oc_id (*get_class)(const char*);
  oc_sel (*sel)(const char*);
  oc_imp send;
  oc_imp send_stret; /* x86_64 only: structs over 16 bytes come back through objc_msgSend_stret */
  void* (*pool_push)(void);
  void (*pool_pop)(void*);
  oc_id (*create_default)(void);
  oc_id (*copy_all)(void);
  void* (*dd_create)(const void*, size_t, void*, void*); /* dispatch_data_create */
  void (*dd_release)(void*);                              /* dispatch_release */
  oc_id NSString, NSProcessInfo;
} mtl_runtime;
extern mtl_runtime mtl_rt; /* the loaded runtime (runtime.c) */

typedef struct mtl_selectors {
#define X(f, s) oc_sel f;
  SELECTORS(X)
#undef X
} mtl_selectors;
extern mtl_selectors mtl_S; /* the selectors, registered once (runtime.c) */


/* One helper per message signature, each calling objc_msgSend through its exact type. */
#define SEND(T) ((T)mtl_rt.send)
static inline oc_id m_id(oc_id o, oc_sel s) { return SEND(oc_id (*)(oc_id, oc_sel))(o, s); }
static inline void* m_ptr(oc_id o, oc_sel s) { return SEND(void* (*)(oc_id, oc_sel))(o, s); }
static inline void m_void(oc_id o, oc_sel s) { SEND(void (*)(oc_id, oc_sel))(o, s); }
static inline uint64_t m_u64(oc_id o, oc_sel s) { return SEND(uint64_t (*)(oc_id, oc_sel))(o, s); }
static inline double m_f64(oc_id o, oc_sel s) { return SEND(double (*)(oc_id, oc_sel))(o, s); }
static inline int m_bool(oc_id o, oc_sel s) {
  return SEND(unsigned char (*)(oc_id, oc_sel))(o, s) != 0; /* BOOL: 1 byte on both arches */
}
static inline int m_bool_sel(oc_id o, oc_sel s, oc_sel a) {
  return SEND(unsigned char (*)(oc_id, oc_sel, oc_sel))(o, s, a) != 0;
}
static inline mtl_size m_size(oc_id o, oc_sel s) {
#if defined(__x86_64__)
  return ((mtl_size(*)(oc_id, oc_sel))mtl_rt.send_stret)(o, s);
#else
  return SEND(mtl_size (*)(oc_id, oc_sel))(o, s);
#endif
}
static inline ns_osver m_osver(oc_id o, oc_sel s) {
#if defined(__x86_64__)
  return ((ns_osver(*)(oc_id, oc_sel))mtl_rt.send_stret)(o, s);
#else
  return SEND(ns_osver (*)(oc_id, oc_sel))(o, s);
#endif
}
static inline oc_id m_id_u64(oc_id o, oc_sel s, uint64_t a) {
  return SEND(oc_id (*)(oc_id, oc_sel, uint64_t))(o, s, a);
}
static inline oc_id m_id_u64_u64(oc_id o, oc_sel s, uint64_t a, uint64_t b) {
  return SEND(oc_id (*)(oc_id, oc_sel, uint64_t, uint64_t))(o, s, a, b);
}
static inline oc_id m_id_ptr_u64_u64(oc_id o, oc_sel s, const void* p, uint64_t a, uint64_t b) {
  return SEND(oc_id (*)(oc_id, oc_sel, const void*, uint64_t, uint64_t))(o, s, p, a, b);
}
static inline oc_id m_id_id(oc_id o, oc_sel s, oc_id a) {
  return SEND(oc_id (*)(oc_id, oc_sel, oc_id))(o, s, a);
}
static inline oc_id m_id_id_err(oc_id o, oc_sel s, oc_id a, oc_id* err) {
  return SEND(oc_id (*)(oc_id, oc_sel, oc_id, oc_id*))(o, s, a, err);
}
static inline oc_id m_id_id_id_err(oc_id o, oc_sel s, oc_id a, oc_id b, oc_id* err) {
  return SEND(oc_id (*)(oc_id, oc_sel, oc_id, oc_id, oc_id*))(o, s, a, b, err);
}
static inline void m_void_id(oc_id o, oc_sel s, oc_id a) {
  SEND(void (*)(oc_id, oc_sel, oc_id))(o, s, a);
}
static inline void m_void_u64(oc_id o, oc_sel s, uint64_t a) {
  SEND(void (*)(oc_id, oc_sel, uint64_t))(o, s, a);
}
static inline void m_void_u64_u64(oc_id o, oc_sel s, uint64_t a, uint64_t b) {
  SEND(void (*)(oc_id, oc_sel, uint64_t, uint64_t))(o, s, a, b);
}
static inline void m_void_id_u64(oc_id o, oc_sel s, oc_id a, uint64_t b) {
  SEND(void (*)(oc_id, oc_sel, oc_id, uint64_t))(o, s, a, b);
}
static inline void m_void_id_u64_u64(oc_id o, oc_sel s, oc_id a, uint64_t b, uint64_t c) {
  SEND(void (*)(oc_id, oc_sel, oc_id, uint64_t, uint64_t))(o, s, a, b, c);
}
static inline void m_void_ptr_u64_u64(oc_id o, oc_sel s, const void* p, uint64_t a, uint64_t b) {
  SEND(void (*)(oc_id, oc_sel, const void*, uint64_t, uint64_t))(o, s, p, a, b);
}
static inline void m_void_size_size(oc_id o, oc_sel s, mtl_size a, mtl_size b) {
  SEND(void (*)(oc_id, oc_sel, mtl_size, mtl_size))(o, s, a, b);
}
static inline void m_void_id_u64_id_u64_u64(oc_id o, oc_sel s, oc_id a, uint64_t b, oc_id c,
                                            uint64_t d, uint64_t e) {
  SEND(void (*)(oc_id, oc_sel, oc_id, uint64_t, oc_id, uint64_t, uint64_t))(o, s, a, b, c, d, e);
}

static inline void rel(oc_id o) {
  if (o) m_void(o, mtl_S.release);
}
static inline oc_id ret(oc_id o) { return o ? m_id(o, mtl_S.retain) : o; }

/* Every entry point that touches Objective-C runs inside an autorelease pool: the core's
 * enter/leave hooks (m_enter, m_leave) give one around each vtable call; the rest (probe, open,
 * close, and what the core calls outside its hooks) use POOLED. */
#define POOLED(call)                                                                            \
  do {                                                                                          \
    void* pool_ = mtl_rt.pool_push();                                                               \
    int32_t rc_ = (call);                                                                       \
    mtl_rt.pool_pop(pool_);                                                                         \
    return rc_;                                                                                 \
  } while (0)

/* ---- objects -------------------------------------------------------------------------------- */
enum { BUF_DEVICE, BUF_HOST, BUF_RING };

typedef struct mtl_buf {
  uint64_t base, len;
  oc_id buf;
  int kind;
} mtl_buf;

enum { BI_FILL8, BI_FILL16, BI_FILL32, BI_COPY8, BI_COUNT };

struct mtl_stream;

typedef struct mtl_dev {
  bg_device d; /* first: the core sees a bg_device */
  oc_id dev;
  pthread_mutex_t mu; /* leaf lock: the address map and the built-in kernels */
  mtl_buf* map;       /* sorted by base */
  size_t nmap, cap;
  oc_id bi_lib, bi_pso[BI_COUNT];
  pthread_mutex_t smu; /* the list of created streams; taken before any stream's lock */
  struct mtl_stream* streams;
  mtl_size max_tg;
  uint64_t max_tg_mem, max_buf;
} mtl_dev;

typedef struct mtl_event {
  bg_obj h;
  oc_id ev; /* MTLSharedEvent */
  uint32_t flags;
  _Atomic int refs;         /* the handle plus each pending record */
  _Atomic uint64_t counter; /* last value handed to a record */
  _Atomic uint64_t target;  /* value of the latest record; 0: never recorded */
  _Atomic uint64_t done;    /* highest value whose command buffer the helper saw complete */
  pthread_mutex_t mu;       /* the timestamps */
  uint64_t t_value, t_host;
  double t_gpu; /* GPUEndTime (seconds) of the command buffer that ended with the record */
} mtl_event;

typedef struct mtl_rec {
  struct mtl_rec* next;
  mtl_event* e;
  uint64_t v;
} mtl_rec;

enum { IT_CB, IT_HOST, IT_COPY };
typedef struct mtl_item {
  struct mtl_item* next;
  int kind;
  oc_id cb;      /* IT_CB: committed command buffer (+1) */
  mtl_rec* recs; /* IT_CB: event records it ends with */
  bg_host_fn fn; /* IT_HOST */
  void* user;
  void* dst; /* IT_COPY: memcpy(dst, src, n) keeping `keep` alive */
  const void* src;
  uint64_t n;
  oc_id keep;
  uint64_t gate; /* IT_HOST, IT_COPY: gate value set once it has run */
} mtl_item;

enum { ENC_NONE, ENC_SERIAL, ENC_CONCURRENT, ENC_BLIT };

typedef struct mtl_stream {
  bg_obj h;
  struct mtl_stream* next; /* in the device's list of created streams */
  oc_id queue, gate;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  oc_id cb;          /* open command buffer (+1) or NULL */
  mtl_item* cb_item; /* its item, allocated with it so a flush cannot fail */
  oc_id enc;         /* open encoder (+1) or NULL */
  int enc_kind;
  mtl_item *head, *tail; /* committed work, in order; head is what the helper works on */
  uint32_t nfifo;
  uint64_t pushed, completed;
  uint64_t gate_next, gate_done;
  int quit;
  pthread_t thread;
  int32_t err; /* first failure of committed work, reported by synchronize/query */
  char errmsg[512];
} mtl_stream;

typedef struct mtl_kernel {
  bg_obj h;
  struct mtl_module* mod;
  struct mtl_kernel* next;
  char* name;
  oc_id fn, pso;
  int32_t max_threads;
  uint64_t static_tg;
} mtl_kernel;

typedef struct mtl_module {
  bg_obj h;
  _Atomic int refs; /* the handle, plus one per hold of a command-list graph on its kernels */
  oc_id lib;
  pthread_mutex_t mu;
  mtl_kernel* kernels;
} mtl_module;

#define DEVOF(h) ((mtl_dev*)((bg_obj*)(h))->dev)
#define HEX(a) ((unsigned long long)(a))


typedef struct mtl_ref {
  oc_id buf;
  uint64_t off;
  uint8_t* ptr;
} mtl_ref;


/* ---- what the files of the backend call across each other ------------------------------------ */
/* runtime.c */
int32_t mtl_rt_ready(void); /* loads the runtime once; BG_OK, or mtl_rt.rc with mtl_rt.msg */
oc_id mtl_ns_str(const char* p, size_t n);
const char* mtl_err_text(oc_id err, char* buf, size_t cap);
/* memory.c */
ptrdiff_t mtl_map_find(const mtl_dev* d, uint64_t a);
int mtl_lookup(mtl_dev* d, uint64_t a, uint64_t n, mtl_ref* r);
int32_t mtl_resolve(mtl_dev* d, uint64_t a, uint64_t n, const char* fn, const char* what,
                    mtl_ref* r);
int32_t mtl_mem_alloc(bg_device* dv, uint64_t bytes, bg_devptr* out);
int32_t mtl_mem_free(bg_device* dv, bg_devptr p);
int32_t mtl_host_alloc(bg_device* dv, uint64_t bytes, uint32_t flags, void** host,
                       bg_devptr* dptr);
int32_t mtl_host_free(bg_device* dv, void* host);
int32_t mtl_ring_alloc(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr);
int32_t mtl_ring_free(bg_device* dv, void* host);
int32_t mtl_memcpy_htod(bg_device* dv, bg_devptr dst, const void* src, uint64_t n);
int32_t mtl_memcpy_dtoh(bg_device* dv, void* dst, bg_devptr src, uint64_t n);
int32_t mtl_memcpy_dtod(bg_device* dv, bg_devptr dst, bg_devptr src, uint64_t n);
int32_t mtl_memset(bg_device* dv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                   uint64_t count);
/* stream.c */
void mtl_end_encoder_locked(mtl_stream* s);
int32_t mtl_encoder_locked(mtl_stream* s, int kind, oc_id* out);
void mtl_maybe_flush_locked(mtl_stream* s);
int32_t mtl_push_host_locked(mtl_stream* s, int kind, bg_host_fn fn, void* user, void* dst,
                             const void* src, uint64_t n, oc_id keep);
int32_t mtl_stream_sync(mtl_stream* s);
int32_t mtl_stream_new(mtl_dev* d, mtl_stream** out);
int32_t mtl_stream_free(mtl_stream* s);
int32_t mtl_stream_create(bg_device* dv, uint32_t flags, int32_t prio, void** out);
int32_t mtl_stream_destroy(void* sv);
int32_t mtl_stream_synchronize(void* sv);
int32_t mtl_stream_query(void* sv);
int32_t mtl_launch_host_func(void* sv, bg_host_fn fn, void* user);
int32_t mtl_event_create(bg_device* dv, uint32_t flags, void** out);
int32_t mtl_event_destroy(void* ev);
void mtl_event_hold(void* ev);
void mtl_event_unhold(void* ev);
int32_t mtl_record_locked(mtl_stream* s, mtl_event* e);
int32_t mtl_wait_locked(mtl_stream* s, mtl_event* e);
int32_t mtl_event_record(void* ev, void* sv);
int32_t mtl_stream_wait_event(void* sv, void* ev);
int32_t mtl_event_query(void* ev);
int32_t mtl_event_synchronize(void* ev);
int32_t mtl_event_elapsed(float* ms, void* a, void* b);
/* ops.c */
int32_t mtl_memcpy_htod_async(void* sv, bg_devptr dst, const void* src, uint64_t n);
int32_t mtl_memcpy_dtoh_async(void* sv, void* dst, bg_devptr src, uint64_t n);
int32_t mtl_memcpy_dtod_async(void* sv, bg_devptr dst, bg_devptr src, uint64_t n);
int32_t mtl_memset_async(void* sv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                         uint64_t count);
int32_t mtl_module_load(bg_device* dv, int32_t kind, const void* data, uint64_t n,
                        void** out);
int32_t mtl_module_unload(void* mv);
void mtl_kernel_hold(void* kv);
void mtl_kernel_unhold(void* kv);
int32_t mtl_module_get_kernel(void* mv, const char* name, void** out);
int32_t mtl_kernel_max_threads(void* kv, int32_t* out);
int32_t mtl_launch(void* kv, void* sv, const uint32_t g[3], const uint32_t b[3],
                   uint32_t shared, const uint64_t* args, uint32_t nargs);
int32_t mtl_submit(void* sv, const uint8_t* p, uint64_t len);

#endif /* __APPLE__ */
#endif /* BUNGPU_METAL_H */
