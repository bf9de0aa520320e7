/*
 * metal.c: the Metal backend, in plain C11 over the Objective-C runtime.
 *
 * Nothing is linked: libobjc, Foundation, Metal (and CoreGraphics, which macOS wants loaded
 * before it hands out a default device) are dlopen'ed, and every Objective-C message goes
 * through objc_msgSend cast to the exact function type of that call (m_* helpers below; never
 * variadic). Off macOS this file builds a backend whose probe and open say why not.
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
 *    command buffers that timing records end (see m_event_elapsed).
 *  - Metal has no stream capture (BG_ERR_NOT_SUPPORTED). Graphs come from command lists
 *    (bg_graph_from_commands): the core's generic graph replays the list through m_submit.
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

static struct {
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
} rt;

static struct {
#define X(f, s) oc_sel f;
  SELECTORS(X)
#undef X
} S;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

/* One helper per message signature, each calling objc_msgSend through its exact type. */
#define SEND(T) ((T)rt.send)
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
  return ((mtl_size(*)(oc_id, oc_sel))rt.send_stret)(o, s);
#else
  return SEND(mtl_size (*)(oc_id, oc_sel))(o, s);
#endif
}
static inline ns_osver m_osver(oc_id o, oc_sel s) {
#if defined(__x86_64__)
  return ((ns_osver(*)(oc_id, oc_sel))rt.send_stret)(o, s);
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
  if (o) m_void(o, S.release);
}
static inline oc_id ret(oc_id o) { return o ? m_id(o, S.retain) : o; }

/* An NSString (+1) from UTF-8 bytes. */
static oc_id ns_str(const char* p, size_t n) {
  oc_id a = m_id(rt.NSString, S.alloc);
  return a ? m_id_ptr_u64_u64(a, S.initWithBytes, p, n, NS_UTF8) : NULL;
}

/* An NSError's localizedDescription, copied into buf. */
static const char* err_text(oc_id err, char* buf, size_t cap) {
  oc_id d = err ? m_id(err, S.localizedDescription) : NULL;
  const char* c = d ? (const char*)m_ptr(d, S.utf8) : NULL;
  snprintf(buf, cap, "%s", c ? c : "unknown error");
  return buf;
}

/* Every entry point that touches Objective-C runs inside an autorelease pool. */
#define POOLED(call)                                                                            \
  do {                                                                                          \
    void* pool_ = rt.pool_push();                                                               \
    int32_t rc_ = (call);                                                                       \
    rt.pool_pop(pool_);                                                                         \
    return rc_;                                                                                 \
  } while (0)

#define LOADFN(dst, handle, name)                                                               \
  do {                                                                                          \
    void* p_ = (handle) ? dlsym((handle), (name)) : NULL;                                       \
    memcpy(&(dst), &p_, sizeof p_);                                                             \
    if (!p_) missing = (name);                                                                  \
  } while (0)

static void rt_fail(const char* what, const char* path) {
  const char* e = dlerror();
  rt.rc = BG_ERR_BACKEND_UNAVAILABLE;
  snprintf(rt.msg, sizeof rt.msg, "Metal: %s %s failed (%s); tried %s, %s, %s", what, path,
           e ? e : "not found", PATH_OBJC, PATH_FOUNDATION, PATH_METAL);
}

static void rt_load(void) {
  void* objc = dlopen(PATH_OBJC, RTLD_LAZY | RTLD_GLOBAL);
  if (!objc) { rt_fail("dlopen", PATH_OBJC); return; }
  void* foundation = dlopen(PATH_FOUNDATION, RTLD_LAZY | RTLD_GLOBAL);
  if (!foundation) { rt_fail("dlopen", PATH_FOUNDATION); return; }
  void* metal = dlopen(PATH_METAL, RTLD_LAZY | RTLD_GLOBAL);
  if (!metal) { rt_fail("dlopen", PATH_METAL); return; }
  (void)dlopen(PATH_CG, RTLD_LAZY | RTLD_GLOBAL); /* optional: lets MTLCreateSystemDefaultDevice answer */
  const char* missing = NULL;
  LOADFN(rt.get_class, objc, "objc_getClass");
  LOADFN(rt.sel, objc, "sel_registerName");
  LOADFN(rt.send, objc, "objc_msgSend");
#if defined(__x86_64__)
  LOADFN(rt.send_stret, objc, "objc_msgSend_stret");
#endif
  LOADFN(rt.pool_push, objc, "objc_autoreleasePoolPush");
  LOADFN(rt.pool_pop, objc, "objc_autoreleasePoolPop");
  if (missing) { rt_fail("dlsym", missing); return; }
  LOADFN(rt.create_default, metal, "MTLCreateSystemDefaultDevice");
  LOADFN(rt.copy_all, metal, "MTLCopyAllDevices");
  if (!rt.create_default && !rt.copy_all) { rt_fail("dlsym", "MTLCopyAllDevices"); return; }
  LOADFN(rt.dd_create, RTLD_DEFAULT, "dispatch_data_create"); /* only BG_IMAGE_METALLIB needs it */
  LOADFN(rt.dd_release, RTLD_DEFAULT, "dispatch_release");
  rt.NSString = rt.get_class("NSString");
  rt.NSProcessInfo = rt.get_class("NSProcessInfo");
  if (!rt.NSString) { rt_fail("objc_getClass", "NSString"); return; }
#define X(f, s) S.f = rt.sel(s);
  SELECTORS(X)
#undef X
  rt.rc = BG_OK;
}

static int32_t rt_ready(void) {
  pthread_once(&rt_once, rt_load);
  return rt.rc;
}

/* Ordinal 0 is MTLCreateSystemDefaultDevice() when it gives one; then the other devices of
 * MTLCopyAllDevices() in its order. Returns the ordinal-th device (+1) or NULL; *count gets
 * how many there are. Runs inside a pool. */
static oc_id device_at(int32_t ordinal, int32_t* count) {
  oc_id def = rt.create_default ? rt.create_default() : NULL;
  oc_id all = rt.copy_all ? rt.copy_all() : NULL;
  uint64_t n = all ? m_u64(all, S.count) : 0, def_id = def ? m_u64(def, S.registryID) : 0;
  int32_t k = 0;
  oc_id found = NULL;
  if (def) {
    if (ordinal == 0) found = ret(def);
    k = 1;
  }
  for (uint64_t i = 0; i < n; i++) {
    oc_id x = m_id_u64(all, S.objectAtIndex, i);
    if (!x || (def && m_u64(x, S.registryID) == def_id)) continue;
    if (k == ordinal) found = ret(x);
    k++;
  }
  rel(all);
  rel(def);
  if (count) *count = k;
  return found;
}

/* ---- objects -------------------------------------------------------------------------------- */
enum { BUF_DEVICE, BUF_HOST, BUF_RING };
static const char* const BUF_WHAT[] = {"device allocation", "host allocation", "ring"};

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

/* ---- address map ---------------------------------------------------------------------------- */
/* Index of the allocation containing a, or -1. Caller holds d->mu. */
static ptrdiff_t map_find(const mtl_dev* d, uint64_t a) {
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
  ptrdiff_t i = map_find(d, base);
  oc_id buf = NULL;
  if (i >= 0 && d->map[i].base == base && d->map[i].kind == kind) {
    buf = d->map[i].buf;
    memmove(d->map + i, d->map + i + 1, (d->nmap - (size_t)i - 1) * sizeof *d->map);
    d->nmap--;
  }
  pthread_mutex_unlock(&d->mu);
  return buf;
}

typedef struct mtl_ref {
  oc_id buf;
  uint64_t off;
  uint8_t* ptr;
} mtl_ref;

/* (buffer, offset) of [a, a + n) when it lies inside one allocation. */
static int lookup(mtl_dev* d, uint64_t a, uint64_t n, mtl_ref* r) {
  pthread_mutex_lock(&d->mu);
  ptrdiff_t i = map_find(d, a);
  mtl_buf e = i >= 0 ? d->map[i] : (mtl_buf){0, 0, NULL, 0};
  pthread_mutex_unlock(&d->mu);
  if (i < 0) return -1; /* not ours */
  r->buf = e.buf;
  r->off = a - e.base;
  r->ptr = (uint8_t*)(uintptr_t)a;
  return n <= e.len - r->off ? 0 : 1; /* 1: runs past the end */
}

static int32_t resolve(mtl_dev* d, uint64_t a, uint64_t n, const char* fn, const char* what,
                       mtl_ref* r) {
  int k = lookup(d, a, n, r);
  if (k < 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s 0x%llx is not memory of this Metal device",
                        fn, what, HEX(a));
  if (k > 0)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "%s: %s range 0x%llx + %llu runs past the end of its allocation", fn, what,
                        HEX(a), HEX(n));
  return BG_OK;
}

/* ---- built-in kernels: fills of 1/2/4-byte patterns and unaligned copies -------------------- */
static const char BI_SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void bg_fill8(device uchar* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = uchar(v); }\n"
    "kernel void bg_fill16(device ushort* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = ushort(v); }\n"
    "kernel void bg_fill32(device uint* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = v; }\n"
    "kernel void bg_copy8(device uchar* d [[buffer(0)]], device const uchar* src [[buffer(1)]],\n"
    "  constant ulong& doff [[buffer(2)]], constant ulong& soff [[buffer(3)]],\n"
    "  constant uint& n [[buffer(4)]], uint i [[thread_position_in_grid]])\n"
    "  { if (i < n) d[doff + i] = src[soff + i]; }\n";
static const char* const BI_NAMES[BI_COUNT] = {"bg_fill8", "bg_fill16", "bg_fill32", "bg_copy8"};

/* Compiled on first use, once per device. */
static int32_t builtin(mtl_dev* d, int which, oc_id* out) {
  char buf[768];
  int32_t rc = BG_OK;
  pthread_mutex_lock(&d->mu);
  if (!d->bi_pso[which]) {
    oc_id err = NULL;
    if (!d->bi_lib) {
      oc_id src = ns_str(BI_SRC, sizeof BI_SRC - 1);
      d->bi_lib = src ? m_id_id_id_err(d->dev, S.newLibraryWithSource, src, NULL, &err) : NULL;
      rel(src);
      if (!d->bi_lib) {
        rc = bg_set_error(BG_ERR_COMPILE, "newLibraryWithSource:options:error: (built-in kernels) %s",
                          err_text(err, buf, sizeof buf));
        goto out;
      }
    }
    oc_id name = ns_str(BI_NAMES[which], strlen(BI_NAMES[which]));
    oc_id fn = name ? m_id_id(d->bi_lib, S.newFunctionWithName, name) : NULL;
    rel(name);
    err = NULL;
    d->bi_pso[which] = fn ? m_id_id_err(d->dev, S.newComputePipelineState, fn, &err) : NULL;
    rel(fn);
    if (!d->bi_pso[which]) {
      rc = bg_set_error(BG_ERR_COMPILE, "newComputePipelineStateWithFunction:error: (%s) %s",
                        BI_NAMES[which], err_text(err, buf, sizeof buf));
      goto out;
    }
  }
  *out = d->bi_pso[which];
out:
  pthread_mutex_unlock(&d->mu);
  return rc;
}

#define CHUNK (1ull << 30) /* elements per built-in dispatch (thread index is a uint) */

static void dispatch_1d(oc_id enc, oc_id pso, uint64_t n) {
  uint64_t tg = 256, max = m_u64(pso, S.maxTotalThreadsPerThreadgroup);
  if (max && max < tg) tg = max;
  m_void_id(enc, S.setComputePipelineState, pso);
  m_void_size_size(enc, S.dispatchThreadgroups, (mtl_size){(n + tg - 1) / tg, 1, 1},
                   (mtl_size){tg, 1, 1});
}

/* ---- streams: command buffers, encoders, the helper thread ---------------------------------- */
static void end_encoder_locked(mtl_stream* s) {
  if (!s->enc) return;
  m_void(s->enc, S.endEncoding);
  rel(s->enc);
  s->enc = NULL;
  s->enc_kind = ENC_NONE;
}

static int32_t ensure_cb_locked(mtl_stream* s) {
  if (s->cb) return BG_OK;
  mtl_item* it = calloc(1, sizeof *it);
  if (!it) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "Metal: out of host memory");
  oc_id cb = m_id(s->queue, S.commandBuffer);
  if (!cb) {
    free(it);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "commandBuffer: the queue gave no command buffer");
  }
  it->kind = IT_CB;
  it->cb = s->cb = ret(cb);
  s->cb_item = it;
  if (s->gate_next > s->gate_done) /* host work before it has not run yet */
    m_void_id_u64(cb, S.encodeWaitForEvent, s->gate, s->gate_next);
  return BG_OK;
}

static int32_t encoder_locked(mtl_stream* s, int kind, oc_id* out) {
  if (s->enc_kind == kind) {
    *out = s->enc;
    return BG_OK;
  }
  end_encoder_locked(s);
  int32_t rc = ensure_cb_locked(s);
  if (rc) return rc;
  oc_id e = kind == ENC_BLIT      ? m_id(s->cb, S.blitCommandEncoder)
            : kind == ENC_SERIAL ? m_id(s->cb, S.computeCommandEncoder)
                                 : m_id_u64(s->cb, S.computeCommandEncoderWithDispatchType,
                                            MTL_DISPATCH_CONCURRENT);
  if (!e)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: the command buffer gave no encoder",
                        kind == ENC_BLIT ? "blitCommandEncoder" : "computeCommandEncoder");
  s->enc = ret(e);
  s->enc_kind = kind;
  *out = s->enc;
  return BG_OK;
}

static void push_locked(mtl_stream* s, mtl_item* it) {
  it->next = NULL;
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  s->nfifo++;
  s->pushed++;
  pthread_cond_signal(&s->cv_work);
}

/* Commit the open command buffer, if any. Never fails: its item was allocated with it. */
static void flush_locked(mtl_stream* s) {
  if (!s->cb) return;
  end_encoder_locked(s);
  m_void(s->cb, S.commit);
  mtl_item* it = s->cb_item;
  s->cb = NULL;
  s->cb_item = NULL;
  push_locked(s, it);
}

/* After encoding: commit now while the GPU has little of this stream's work; else the helper
 * thread commits it when earlier work completes. */
static void maybe_flush_locked(mtl_stream* s) {
  if (s->cb && s->nfifo < MAX_INFLIGHT) flush_locked(s);
}

/* Host work in stream order: after all earlier work, before all later GPU work (the gate). */
static int32_t push_host_locked(mtl_stream* s, int kind, bg_host_fn fn, void* user, void* dst,
                                const void* src, uint64_t n, oc_id keep) {
  mtl_item* it = calloc(1, sizeof *it);
  if (!it) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "Metal: out of host memory");
  flush_locked(s);
  it->kind = kind;
  it->fn = fn;
  it->user = user;
  it->dst = dst;
  it->src = src;
  it->n = n;
  it->keep = ret(keep);
  it->gate = ++s->gate_next;
  push_locked(s, it);
  return BG_OK;
}

static void ev_unref(mtl_event* e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  rel(e->ev);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

/* The helper thread saw the command buffer holding record (e, v) complete. */
static void ev_complete(mtl_event* e, uint64_t v, double t_gpu, uint64_t t_host, int failed) {
  pthread_mutex_lock(&e->mu);
  if (v > atomic_load(&e->done)) {
    e->t_value = v;
    e->t_gpu = t_gpu;
    e->t_host = t_host;
    atomic_store(&e->done, v);
  }
  pthread_mutex_unlock(&e->mu);
  /* A failed command buffer may not have signaled: let GPU waiters go on. */
  if (failed && m_u64(e->ev, S.signaledValue) < v) m_void_u64(e->ev, S.setSignaledValue, v);
}

/* Runs one item outside the stream lock; fills err/msg on a failure. */
static void run_item(mtl_stream* s, mtl_item* it, int32_t* err, char* msg, size_t cap) {
  if (it->kind == IT_CB) {
    m_void(it->cb, S.waitUntilCompleted);
    uint64_t t_host = bg_now_ns();
    int failed = m_u64(it->cb, S.status) == MTL_CB_ERROR;
    if (failed) {
      char buf[400];
      *err = BG_ERR_LAUNCH_FAILED;
      snprintf(msg, cap, "MTLCommandBuffer: %s", err_text(m_id(it->cb, S.error), buf, sizeof buf));
    }
    double t_gpu = it->recs ? m_f64(it->cb, S.GPUEndTime) : 0;
    for (mtl_rec* r = it->recs; r;) {
      mtl_rec* next = r->next;
      ev_complete(r->e, r->v, t_gpu, t_host, failed);
      ev_unref(r->e);
      free(r);
      r = next;
    }
    rel(it->cb);
    return;
  }
  if (it->kind == IT_HOST) it->fn(it->user);
  else memcpy(it->dst, it->src, (size_t)it->n);
  rel(it->keep);
  m_void_u64(s->gate, S.setSignaledValue, it->gate);
}

static void* stream_main(void* arg) {
  mtl_stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->quit) pthread_cond_wait(&s->cv_work, &s->mu);
    if (!s->head) break;
    mtl_item* it = s->head;
    pthread_mutex_unlock(&s->mu);
    int32_t err = BG_OK;
    char msg[512];
    void* pool = rt.pool_push();
    run_item(s, it, &err, msg, sizeof msg);
    pthread_mutex_lock(&s->mu);
    if (err && !s->err) {
      s->err = err;
      memcpy(s->errmsg, msg, sizeof msg);
    }
    if (it->kind != IT_CB) s->gate_done = it->gate;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->nfifo--;
    s->completed++;
    if (s->cb && s->nfifo < MAX_INFLIGHT) flush_locked(s); /* work held while the GPU was busy */
    rt.pool_pop(pool);
    pthread_cond_broadcast(&s->cv_done);
    free(it);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static int32_t take_error_locked(mtl_stream* s) {
  if (!s->err) return BG_OK;
  int32_t rc = bg_set_error(s->err, "%s", s->errmsg);
  s->err = BG_OK;
  return rc;
}

static int32_t stream_sync(mtl_stream* s) {
  pthread_mutex_lock(&s->mu);
  flush_locked(s);
  uint64_t target = s->pushed;
  while (s->completed < target) pthread_cond_wait(&s->cv_done, &s->mu);
  int32_t rc = take_error_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static int32_t stream_new(mtl_dev* d, mtl_stream** out) {
  mtl_stream* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  s->queue = m_id(d->dev, S.newCommandQueue);
  s->gate = m_id(d->dev, S.newSharedEvent);
  if (!s->queue || !s->gate) {
    const char* what = s->queue ? "newSharedEvent" : "newCommandQueue";
    rel(s->queue);
    rel(s->gate);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: the device returned nil", what);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, NULL);
  bg_obj_init(s, BG_KIND_STREAM, &d->d);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    rel(s->queue);
    rel(s->gate);
    bg_obj_kill(s);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: pthread_create failed");
  }
  *out = s;
  return BG_OK;
}

static int32_t stream_free(mtl_stream* s) {
  int32_t rc = stream_sync(s);
  pthread_mutex_lock(&s->mu);
  s->quit = 1;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  bg_obj_kill(s);
  end_encoder_locked(s);
  rel(s->cb); /* not committed: nothing after the sync can be left here, but be safe */
  free(s->cb_item);
  rel(s->queue);
  rel(s->gate);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_done);
  free(s);
  return rc;
}

/* ---- device --------------------------------------------------------------------------------- */
static const bg_ops metal_ops;

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
  if (rt_ready() != BG_OK) {
    snprintf(msg, (size_t)cap, "%s", rt.msg);
    return rt.rc;
  }
  POOLED(probe_impl(count, msg, cap));
}

static int32_t open_impl(int32_t ordinal, bg_device** out) {
  int32_t n = 0;
  oc_id dev = device_at(ordinal, &n);
  if (!dev)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "Metal: %d device(s), no ordinal %d", n, ordinal);
  /* newSharedEvent (10.14) and hasUnifiedMemory (10.15, with GPUEndTime) stand for the OS. */
  if (!m_bool_sel(dev, S.respondsToSelector, S.newSharedEvent) ||
      !m_bool_sel(dev, S.respondsToSelector, S.hasUnifiedMemory)) {
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
  d->d.ops = &metal_ops;
  d->d.backend = BG_BACKEND_METAL;
  d->d.ordinal = ordinal;
  d->dev = dev;
  pthread_mutex_init(&d->mu, NULL);
  pthread_mutex_init(&d->smu, NULL);
  d->max_tg = m_size(dev, S.maxThreadsPerThreadgroup);
  d->max_tg_mem = m_u64(dev, S.maxThreadgroupMemoryLength);
  d->max_buf = m_u64(dev, S.maxBufferLength);
  mtl_stream* s = NULL;
  int32_t rc = stream_new(d, &s);
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
  if (rt_ready() != BG_OK) return bg_set_error(rt.rc, "%s", rt.msg);
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
    stream_free(list);
    list = next;
  }
  stream_free(dv->default_stream);
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
  oc_id nm = m_id(d->dev, S.name);
  const char* c = nm ? (const char*)m_ptr(nm, S.utf8) : NULL;
  snprintf(out->name, sizeof out->name, "%s", c ? c : "Metal device");
  out->backend = BG_BACKEND_METAL;
  out->ordinal = dv->ordinal;
  out->compute_units = 0; /* Metal does not say */
  out->max_threads_per_block = (int32_t)(d->max_tg.w > 0x7fffffff ? 0x7fffffff : d->max_tg.w);
  out->warp_size = 32; /* threadExecutionWidth is per pipeline; 32 on Apple GPUs */
  out->unified_memory = m_bool(d->dev, S.hasUnifiedMemory);
  out->can_map_host_memory = 1;
  out->concurrent_kernels = 1;
  out->max_shared_bytes_per_block =
      (int32_t)(d->max_tg_mem > 0x7fffffff ? 0x7fffffff : d->max_tg_mem);
  out->total_mem = m_u64(d->dev, S.recommendedMaxWorkingSetSize);
  return BG_OK;
}
static int32_t m_device_props(bg_device* dv, bg_device_props* out) { POOLED(props_impl(dv, out)); }

static int32_t m_device_mem_info(bg_device* dv, uint64_t* free_b, uint64_t* total_b) {
  mtl_dev* d = (mtl_dev*)dv;
  uint64_t total = m_u64(d->dev, S.recommendedMaxWorkingSetSize);
  uint64_t used = m_u64(d->dev, S.currentAllocatedSize);
  *total_b = total;
  *free_b = total > used ? total - used : 0;
  return BG_OK;
}

static int32_t device_sync_impl(bg_device* dv) {
  mtl_dev* d = (mtl_dev*)dv;
  pthread_mutex_lock(&d->smu);
  int32_t rc = stream_sync(dv->default_stream);
  for (mtl_stream* s = d->streams; s; s = s->next) {
    int32_t r = stream_sync(s);
    if (!rc) rc = r;
  }
  pthread_mutex_unlock(&d->smu);
  return rc;
}
static int32_t m_device_synchronize(bg_device* dv) { POOLED(device_sync_impl(dv)); }

/* ---- memory --------------------------------------------------------------------------------- */
static int32_t buf_alloc(mtl_dev* d, uint64_t bytes, int kind, const char* fn, uint64_t* out) {
  if (bytes > d->max_buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: %llu bytes exceed the device's maxBufferLength %llu",
                        fn, HEX(bytes), HEX(d->max_buf));
  oc_id buf = m_id_u64_u64(d->dev, S.newBufferWithLength, bytes, MTL_STORAGE_SHARED);
  if (!buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newBufferWithLength:options: %llu bytes failed",
                        HEX(bytes));
  uint64_t base = (uint64_t)(uintptr_t)m_ptr(buf, S.contents);
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

static int32_t m_mem_alloc(bg_device* dv, uint64_t bytes, bg_devptr* out) {
  POOLED(buf_alloc((mtl_dev*)dv, bytes, BUF_DEVICE, "bg_mem_alloc", out));
}
static int32_t m_mem_free(bg_device* dv, bg_devptr p) {
  POOLED(buf_free((mtl_dev*)dv, p, BUF_DEVICE, "bg_mem_free"));
}

static int32_t host_alloc_impl(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr) {
  uint64_t base = 0;
  int32_t rc = buf_alloc((mtl_dev*)dv, bytes, BUF_HOST, "bg_host_alloc", &base);
  if (rc) return rc;
  *host = (void*)(uintptr_t)base; /* shared storage: always mapped, same address */
  *dptr = base;
  return BG_OK;
}
static int32_t m_host_alloc(bg_device* dv, uint64_t bytes, uint32_t flags, void** host,
                            bg_devptr* dptr) {
  (void)flags;
  POOLED(host_alloc_impl(dv, bytes, host, dptr));
}
static int32_t m_host_free(bg_device* dv, void* host) {
  POOLED(buf_free((mtl_dev*)dv, (uint64_t)(uintptr_t)host, BUF_HOST, "bg_host_free"));
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
static int32_t m_ring_alloc(bg_device* dv, uint64_t bytes, void** host, bg_devptr* dptr) {
  POOLED(ring_alloc_impl(dv, bytes, host, dptr));
}
static int32_t m_ring_free(bg_device* dv, void* host) {
  POOLED(buf_free((mtl_dev*)dv, (uint64_t)(uintptr_t)host, BUF_RING, "bg_ring_destroy"));
}

/* Synchronous copies and fills: after the default stream's work, on the CPU (shared storage). */
static int32_t sync_default(bg_device* dv) { POOLED(stream_sync(dv->default_stream)); }

static int32_t m_memcpy_htod(bg_device* dv, bg_devptr dst, const void* src, uint64_t n) {
  mtl_ref r;
  int32_t rc = resolve((mtl_dev*)dv, dst, n, "bg_memcpy_htod", "dst", &r);
  if (!rc) rc = sync_default(dv);
  if (!rc) memcpy(r.ptr, src, (size_t)n);
  return rc;
}

static int32_t m_memcpy_dtoh(bg_device* dv, void* dst, bg_devptr src, uint64_t n) {
  mtl_ref r;
  int32_t rc = resolve((mtl_dev*)dv, src, n, "bg_memcpy_dtoh", "src", &r);
  if (!rc) rc = sync_default(dv);
  if (!rc) memcpy(dst, r.ptr, (size_t)n);
  return rc;
}

static int32_t m_memcpy_dtod(bg_device* dv, bg_devptr dst, bg_devptr src, uint64_t n) {
  mtl_ref rd, rs;
  int32_t rc = resolve((mtl_dev*)dv, dst, n, "bg_memcpy_dtod", "dst", &rd);
  if (!rc) rc = resolve((mtl_dev*)dv, src, n, "bg_memcpy_dtod", "src", &rs);
  if (!rc) rc = sync_default(dv);
  if (!rc) memmove(rd.ptr, rs.ptr, (size_t)n);
  return rc;
}

static int32_t m_memset(bg_device* dv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                        uint64_t count) {
  mtl_ref r;
  if (count > UINT64_MAX / esz)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_memset: %llu elements overflow", HEX(count));
  int32_t rc = resolve((mtl_dev*)dv, dst, count * esz, "bg_memset", "dst", &r);
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

/* ---- async copies and fills, encoded on the stream ------------------------------------------ */
/* Device-side copy between two resolved ranges: a blit when 4-byte aligned (macOS requires it
 * of copyFromBuffer), else the built-in byte-copy kernel. */
static int32_t copy_locked(mtl_stream* s, mtl_ref dst, mtl_ref src, uint64_t n) {
  oc_id enc, pso;
  int32_t rc;
  if (((dst.off | src.off | n) & 3) == 0) {
    if ((rc = encoder_locked(s, ENC_BLIT, &enc))) return rc;
    m_void_id_u64_id_u64_u64(enc, S.copyFromBuffer, src.buf, src.off, dst.buf, dst.off, n);
    return BG_OK;
  }
  if ((rc = builtin(DEVOF(s), BI_COPY8, &pso))) return rc;
  if ((rc = encoder_locked(s, ENC_SERIAL, &enc))) return rc;
  m_void_id_u64_u64(enc, S.setBuffer, dst.buf, 0, 0);
  m_void_id_u64_u64(enc, S.setBuffer, src.buf, 0, 1);
  for (uint64_t done = 0; done < n; done += CHUNK) {
    uint64_t doff = dst.off + done, soff = src.off + done;
    uint32_t k = (uint32_t)(n - done < CHUNK ? n - done : CHUNK);
    m_void_ptr_u64_u64(enc, S.setBytes, &doff, 8, 2);
    m_void_ptr_u64_u64(enc, S.setBytes, &soff, 8, 3);
    m_void_ptr_u64_u64(enc, S.setBytes, &k, 4, 4);
    dispatch_1d(enc, pso, k);
  }
  return BG_OK;
}

static int32_t memset_locked(mtl_stream* s, mtl_ref r, uint32_t pattern, uint32_t esz,
                             uint64_t count) {
  oc_id enc, pso;
  int32_t rc;
  if ((rc = builtin(DEVOF(s), esz == 1 ? BI_FILL8 : esz == 2 ? BI_FILL16 : BI_FILL32, &pso)))
    return rc;
  if ((rc = encoder_locked(s, ENC_SERIAL, &enc))) return rc;
  uint32_t v = esz == 1 ? pattern & 0xff : esz == 2 ? pattern & 0xffff : pattern;
  m_void_id_u64_u64(enc, S.setBuffer, r.buf, 0, 0);
  m_void_ptr_u64_u64(enc, S.setBytes, &v, 4, 3);
  for (uint64_t done = 0; done < count; done += CHUNK) {
    uint64_t start = r.off / esz + done;
    uint32_t k = (uint32_t)(count - done < CHUNK ? count - done : CHUNK);
    m_void_ptr_u64_u64(enc, S.setBytes, &start, 8, 1);
    m_void_ptr_u64_u64(enc, S.setBytes, &k, 4, 2);
    dispatch_1d(enc, pso, k);
  }
  return BG_OK;
}

/* Host to device: from a shared allocation by blit; from pageable memory through a staging
 * buffer filled now (newBufferWithBytes copies), so the caller may reuse src at once. */
static int32_t htod_locked(mtl_stream* s, mtl_ref dst, const void* src, uint64_t n) {
  mtl_ref rs;
  if (lookup(DEVOF(s), (uint64_t)(uintptr_t)src, n, &rs) == 0) return copy_locked(s, dst, rs, n);
  if (n > DEVOF(s)->max_buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_memcpy_htod_async: %llu bytes exceed "
                        "maxBufferLength for the staging buffer", HEX(n));
  oc_id stage = m_id_ptr_u64_u64(DEVOF(s)->dev, S.newBufferWithBytes, src, n, MTL_STORAGE_SHARED);
  if (!stage)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newBufferWithBytes:length:options: %llu bytes failed",
                        HEX(n));
  int32_t rc = copy_locked(s, dst, (mtl_ref){stage, 0, NULL}, n);
  rel(stage); /* the command buffer keeps it until it completes */
  return rc;
}

/* Device to host: into a shared allocation by blit; into pageable memory by the helper thread
 * after the work before it (the source buffer is kept alive meanwhile). */
static int32_t dtoh_locked(mtl_stream* s, void* dst, mtl_ref src, uint64_t n) {
  mtl_ref rd;
  if (lookup(DEVOF(s), (uint64_t)(uintptr_t)dst, n, &rd) == 0) return copy_locked(s, rd, src, n);
  return push_host_locked(s, IT_COPY, NULL, NULL, dst, src.ptr, n, src.buf);
}

static int32_t htod_async_impl(void* sv, bg_devptr dst, const void* src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref r;
  int32_t rc = resolve(DEVOF(s), dst, n, "bg_memcpy_htod_async", "dst", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = htod_locked(s, r, src, n))) maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_memcpy_htod_async(void* sv, bg_devptr dst, const void* src, uint64_t n) {
  POOLED(htod_async_impl(sv, dst, src, n));
}

static int32_t dtoh_async_impl(void* sv, void* dst, bg_devptr src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref r;
  int32_t rc = resolve(DEVOF(s), src, n, "bg_memcpy_dtoh_async", "src", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = dtoh_locked(s, dst, r, n))) maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_memcpy_dtoh_async(void* sv, void* dst, bg_devptr src, uint64_t n) {
  POOLED(dtoh_async_impl(sv, dst, src, n));
}

static int32_t dtod_async_impl(void* sv, bg_devptr dst, bg_devptr src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref rd, rs;
  int32_t rc = resolve(DEVOF(s), dst, n, "bg_memcpy_dtod_async", "dst", &rd);
  if (!rc) rc = resolve(DEVOF(s), src, n, "bg_memcpy_dtod_async", "src", &rs);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = copy_locked(s, rd, rs, n))) maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_memcpy_dtod_async(void* sv, bg_devptr dst, bg_devptr src, uint64_t n) {
  POOLED(dtod_async_impl(sv, dst, src, n));
}

static int32_t memset_async_impl(void* sv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                                 uint64_t count) {
  mtl_stream* s = sv;
  mtl_ref r;
  if (count > UINT64_MAX / esz)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_memset_async: %llu elements overflow", HEX(count));
  int32_t rc = resolve(DEVOF(s), dst, count * esz, "bg_memset_async", "dst", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = memset_locked(s, r, pattern, esz, count))) maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_memset_async(void* sv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                              uint64_t count) {
  POOLED(memset_async_impl(sv, dst, pattern, esz, count));
}

/* ---- stream entry points -------------------------------------------------------------------- */
static int32_t stream_create_impl(bg_device* dv, void** out) {
  mtl_dev* d = (mtl_dev*)dv;
  mtl_stream* s = NULL;
  int32_t rc = stream_new(d, &s);
  if (rc) return rc;
  pthread_mutex_lock(&d->smu);
  s->next = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->smu);
  *out = s;
  return BG_OK;
}
static int32_t m_stream_create(bg_device* dv, uint32_t flags, int32_t prio, void** out) {
  (void)flags; /* every Metal queue is independent: non-blocking semantics */
  (void)prio;
  POOLED(stream_create_impl(dv, out));
}

static int32_t stream_destroy_impl(void* sv) {
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  pthread_mutex_lock(&d->smu);
  for (mtl_stream** p = &d->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&d->smu);
  return stream_free(s);
}
static int32_t m_stream_destroy(void* sv) { POOLED(stream_destroy_impl(sv)); }
static int32_t m_stream_synchronize(void* sv) { POOLED(stream_sync(sv)); }

static int32_t query_impl(mtl_stream* s) {
  pthread_mutex_lock(&s->mu);
  flush_locked(s);
  int32_t rc = s->completed == s->pushed
                   ? take_error_locked(s)
                   : bg_set_error(BG_ERR_NOT_READY, "bg_stream_query: work still pending");
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_stream_query(void* sv) { POOLED(query_impl(sv)); }

static int32_t m_launch_host_func(void* sv, bg_host_fn fn, void* user) {
  mtl_stream* s = sv;
  void* pool = rt.pool_push();
  pthread_mutex_lock(&s->mu);
  int32_t rc = push_host_locked(s, IT_HOST, fn, user, NULL, NULL, 0, NULL);
  pthread_mutex_unlock(&s->mu);
  rt.pool_pop(pool);
  return rc;
}

/* ---- events --------------------------------------------------------------------------------- */
static int32_t event_create_impl(bg_device* dv, uint32_t flags, void** out) {
  mtl_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: out of host memory");
  e->ev = m_id(((mtl_dev*)dv)->dev, S.newSharedEvent);
  if (!e->ev) {
    free(e);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newSharedEvent: the device returned nil");
  }
  e->flags = flags;
  atomic_init(&e->refs, 1);
  atomic_init(&e->counter, 0);
  atomic_init(&e->target, 0);
  atomic_init(&e->done, 0);
  pthread_mutex_init(&e->mu, NULL);
  bg_obj_init(e, BG_KIND_EVENT, dv);
  *out = e;
  return BG_OK;
}
static int32_t m_event_create(bg_device* dv, uint32_t flags, void** out) {
  POOLED(event_create_impl(dv, flags, out));
}

static int32_t event_destroy_impl(void* ev) {
  bg_obj_kill(ev);
  ev_unref(ev); /* pending records keep it until their command buffers complete */
  return BG_OK;
}
static int32_t m_event_destroy(void* ev) { POOLED(event_destroy_impl(ev)); }
static void m_event_hold(void* ev) { atomic_fetch_add(&((mtl_event*)ev)->refs, 1); }
static void m_event_unhold(void* ev) {
  void* pool = rt.pool_push();
  ev_unref(ev);
  rt.pool_pop(pool);
}

/* Signal the event at the end of the work encoded so far. A timing event ends its command
 * buffer there, so that buffer's GPUEndTime is the event's time. */
static int32_t record_locked(mtl_stream* s, mtl_event* e) {
  mtl_rec* r = malloc(sizeof *r);
  if (!r) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_record: out of host memory");
  int32_t rc = ensure_cb_locked(s);
  if (rc) {
    free(r);
    return rc;
  }
  end_encoder_locked(s);
  uint64_t v = atomic_fetch_add(&e->counter, 1) + 1;
  m_void_id_u64(s->cb, S.encodeSignalEvent, e->ev, v);
  atomic_fetch_add(&e->refs, 1);
  r->e = e;
  r->v = v;
  r->next = s->cb_item->recs;
  s->cb_item->recs = r;
  atomic_store(&e->target, v);
  if (!(e->flags & BG_EVENT_DISABLE_TIMING)) flush_locked(s);
  return BG_OK;
}

static int32_t wait_locked(mtl_stream* s, mtl_event* e) {
  uint64_t t = atomic_load(&e->target);
  if (!t) return BG_OK; /* never recorded: nothing to wait for */
  int32_t rc = ensure_cb_locked(s);
  if (rc) return rc;
  end_encoder_locked(s);
  m_void_id_u64(s->cb, S.encodeWaitForEvent, e->ev, t);
  return BG_OK;
}

static int32_t event_record_impl(void* ev, void* sv) {
  mtl_stream* s = sv;
  pthread_mutex_lock(&s->mu);
  int32_t rc = record_locked(s, ev);
  if (!rc) maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_event_record(void* ev, void* sv) { POOLED(event_record_impl(ev, sv)); }

static int32_t wait_event_impl(void* sv, void* ev) {
  mtl_stream* s = sv;
  pthread_mutex_lock(&s->mu);
  int32_t rc = wait_locked(s, ev);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_stream_wait_event(void* sv, void* ev) { POOLED(wait_event_impl(sv, ev)); }

/* Reached: a timing event once the helper thread stamped it (so elapsed works); any other as
 * soon as the GPU signaled it. */
static int ev_reached(mtl_event* e, uint64_t t) {
  if (atomic_load(&e->done) >= t) return 1;
  if (!(e->flags & BG_EVENT_DISABLE_TIMING)) return 0;
  void* pool = rt.pool_push();
  int ok = m_u64(e->ev, S.signaledValue) >= t;
  rt.pool_pop(pool);
  return ok;
}

static int32_t m_event_query(void* ev) {
  mtl_event* e = ev;
  uint64_t t = atomic_load(&e->target);
  if (!t || ev_reached(e, t)) return BG_OK;
  return bg_set_error(BG_ERR_NOT_READY, "bg_event_query: not reached yet");
}

static int32_t m_event_synchronize(void* ev) {
  mtl_event* e = ev;
  uint64_t t = atomic_load(&e->target);
  for (unsigned i = 0; t && !ev_reached(e, t); i++) {
    if (i < 64) continue; /* a short spin, then a backing-off sleep up to 1 ms */
    unsigned shift = i - 64 < 10 ? i - 64 : 10;
    struct timespec ts = {0, (long)(1000u << shift)};
    nanosleep(&ts, NULL);
  }
  return BG_OK;
}

/* Elapsed time between two timing events. GPUEndTime of the command buffers the records ended
 * (GPU clock, sub-microsecond); where the OS gives no GPU time (0), the host time at which the
 * helper thread saw them complete (tens of microseconds of wake-up jitter). */
static int32_t m_event_elapsed(float* ms, void* a, void* b) {
  mtl_event *ea = a, *eb = b;
  if ((ea->flags | eb->flags) & BG_EVENT_DISABLE_TIMING)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_event_elapsed: an event was created with "
                        "BG_EVENT_DISABLE_TIMING");
  uint64_t ta = atomic_load(&ea->target), tb = atomic_load(&eb->target);
  if (!ta || !tb)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_event_elapsed: an event was never recorded");
  double ga, gb;
  uint64_t ha, hb, va, vb;
  pthread_mutex_lock(&ea->mu);
  va = ea->t_value, ga = ea->t_gpu, ha = ea->t_host;
  pthread_mutex_unlock(&ea->mu);
  pthread_mutex_lock(&eb->mu);
  vb = eb->t_value, gb = eb->t_gpu, hb = eb->t_host;
  pthread_mutex_unlock(&eb->mu);
  if (va != ta || vb != tb)
    return bg_set_error(BG_ERR_NOT_READY, "bg_event_elapsed: an event has not completed");
  if (ga > 0 && gb > 0) *ms = (float)((gb - ga) * 1000.0);
  else *ms = (float)(((double)hb - (double)ha) / 1e6);
  return BG_OK;
}

/* ---- modules and kernels -------------------------------------------------------------------- */
static int32_t module_load_impl(bg_device* dv, int32_t kind, const void* data, uint64_t n,
                                void** out) {
  mtl_dev* d = (mtl_dev*)dv;
  oc_id lib = NULL, err = NULL;
  char buf[900];
  if (kind == BG_IMAGE_MSL_SOURCE) {
    const char* p = data;
    size_t len = n ? (size_t)n : strlen(p); /* 0: a NUL-terminated string */
    while (len && !p[len - 1]) len--;
    oc_id src = ns_str(p, len);
    if (!src)
      return bg_set_error(BG_ERR_INVALID_SOURCE, "bg_module_load: the MSL source is not UTF-8");
    lib = m_id_id_id_err(d->dev, S.newLibraryWithSource, src, NULL, &err);
    rel(src);
    if (!lib)
      return bg_set_error(BG_ERR_COMPILE, "newLibraryWithSource:options:error: %s",
                          err_text(err, buf, sizeof buf));
  } else if (kind == BG_IMAGE_METALLIB) {
    if (!n) return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: empty metallib");
    if (!rt.dd_create || !rt.dd_release)
      return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_module_load: dispatch_data_create not found");
    void* dd = rt.dd_create(data, (size_t)n, NULL, NULL); /* default destructor: copies */
    if (!dd) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "dispatch_data_create: failed");
    lib = m_id_id_err(d->dev, S.newLibraryWithData, (oc_id)dd, &err);
    rt.dd_release(dd);
    if (!lib)
      return bg_set_error(BG_ERR_INVALID_IMAGE, "newLibraryWithData:error: %s",
                          err_text(err, buf, sizeof buf));
  } else {
    return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: image kind %d is not for Metal "
                        "(want BG_IMAGE_MSL_SOURCE or BG_IMAGE_METALLIB)", kind);
  }
  mtl_module* m = calloc(1, sizeof *m);
  if (!m) {
    rel(lib);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  }
  m->lib = lib;
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->mu, NULL);
  bg_obj_init(m, BG_KIND_MODULE, dv);
  *out = m;
  return BG_OK;
}
static int32_t m_module_load(bg_device* dv, int32_t kind, const void* data, uint64_t n,
                             void** out) {
  POOLED(module_load_impl(dv, kind, data, n, out));
}

/* The last reference frees the kernels and the library. */
static void module_unref(mtl_module* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  for (mtl_kernel* k = m->kernels; k;) {
    mtl_kernel* next = k->next;
    rel(k->pso); /* command buffers in flight hold their own references */
    rel(k->fn);
    free(k->name);
    free(k);
    k = next;
  }
  rel(m->lib);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* The handles die now; the kernels' code once no command-list graph holds them. */
static int32_t module_unload_impl(void* mv) {
  mtl_module* m = mv;
  bg_obj_kill(m);
  pthread_mutex_lock(&m->mu);
  for (mtl_kernel* k = m->kernels; k; k = k->next) bg_obj_kill(k);
  pthread_mutex_unlock(&m->mu);
  module_unref(m);
  return BG_OK;
}
static int32_t m_module_unload(void* mv) { POOLED(module_unload_impl(mv)); }

static void m_kernel_hold(void* kv) {
  atomic_fetch_add_explicit(&((mtl_kernel*)kv)->mod->refs, 1, memory_order_relaxed);
}
static void m_kernel_unhold(void* kv) {
  void* pool = rt.pool_push();
  module_unref(((mtl_kernel*)kv)->mod);
  rt.pool_pop(pool);
}

static int32_t get_kernel_impl(void* mv, const char* name, void** out) {
  mtl_module* m = mv;
  mtl_dev* d = DEVOF(m);
  char buf[900];
  int32_t rc = BG_OK;
  pthread_mutex_lock(&m->mu);
  for (mtl_kernel* k = m->kernels; k; k = k->next)
    if (!strcmp(k->name, name)) {
      *out = k;
      goto out;
    }
  oc_id nm = ns_str(name, strlen(name)), err = NULL;
  oc_id fn = nm ? m_id_id(m->lib, S.newFunctionWithName, nm) : NULL;
  rel(nm);
  if (!fn) {
    rc = bg_set_error(BG_ERR_NOT_FOUND, "newFunctionWithName: no function '%s' in the module", name);
    goto out;
  }
  oc_id pso = m_id_id_err(d->dev, S.newComputePipelineState, fn, &err);
  if (!pso) {
    rel(fn);
    rc = bg_set_error(BG_ERR_COMPILE, "newComputePipelineStateWithFunction:error: %s: %s", name,
                      err_text(err, buf, sizeof buf));
    goto out;
  }
  mtl_kernel* k = calloc(1, sizeof *k);
  char* copy = strdup(name);
  if (!k || !copy) {
    free(k);
    free(copy);
    rel(pso);
    rel(fn);
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_get_kernel: out of host memory");
    goto out;
  }
  k->name = copy;
  k->mod = m;
  k->fn = fn;
  k->pso = pso;
  uint64_t mt = m_u64(pso, S.maxTotalThreadsPerThreadgroup);
  k->max_threads = (int32_t)(mt > 0x7fffffff ? 0x7fffffff : mt);
  k->static_tg = m_u64(pso, S.staticThreadgroupMemoryLength);
  bg_obj_init(k, BG_KIND_KERNEL, m->h.dev);
  k->next = m->kernels;
  m->kernels = k;
  *out = k;
out:
  pthread_mutex_unlock(&m->mu);
  return rc;
}
static int32_t m_module_get_kernel(void* mv, const char* name, void** out) {
  POOLED(get_kernel_impl(mv, name, out));
}

static int32_t m_kernel_max_threads(void* kv, int32_t* out) {
  *out = ((mtl_kernel*)kv)->max_threads;
  return BG_OK;
}

/* ---- launches ------------------------------------------------------------------------------- */
#define ROUND16(x) (((uint64_t)(x) + 15) & ~(uint64_t)15)

static int32_t launch_check(mtl_dev* d, mtl_kernel* k, const uint32_t b[3], uint32_t shared,
                            uint32_t nargs, const char* fn) {
  if (nargs > MAX_BUFFER_ARGS)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u arguments; a Metal kernel binds at most %d",
                        fn, nargs, MAX_BUFFER_ARGS);
  uint64_t t = (uint64_t)b[0] * b[1] * b[2];
  if (t > (uint64_t)k->max_threads || b[0] > d->max_tg.w || b[1] > d->max_tg.h || b[2] > d->max_tg.d)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: block %ux%ux%u exceeds kernel %s's "
                        "maxTotalThreadsPerThreadgroup %d (device max %llux%llux%llu)", fn, b[0],
                        b[1], b[2], k->name, k->max_threads, HEX(d->max_tg.w), HEX(d->max_tg.h),
                        HEX(d->max_tg.d));
  if (ROUND16(shared) + k->static_tg > d->max_tg_mem)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u bytes of threadgroup memory (+%llu static) "
                        "exceed maxThreadgroupMemoryLength %llu", fn, shared, HEX(k->static_tg),
                        HEX(d->max_tg_mem));
  return BG_OK;
}

static void launch_encode(mtl_dev* d, oc_id enc, mtl_kernel* k, const uint32_t g[3],
                          const uint32_t b[3], uint32_t shared, const uint64_t* args,
                          uint32_t nargs) {
  m_void_id(enc, S.setComputePipelineState, k->pso);
  pthread_mutex_lock(&d->mu);
  for (uint32_t i = 0; i < nargs; i++) {
    ptrdiff_t j = args[i] ? map_find(d, args[i]) : -1;
    if (j >= 0) m_void_id_u64_u64(enc, S.setBuffer, d->map[j].buf, args[i] - d->map[j].base, i);
    else m_void_ptr_u64_u64(enc, S.setBytes, &args[i], 8, i);
  }
  pthread_mutex_unlock(&d->mu);
  if (shared) m_void_u64_u64(enc, S.setThreadgroupMemoryLength, ROUND16(shared), 0);
  m_void_size_size(enc, S.dispatchThreadgroups, (mtl_size){g[0], g[1], g[2]},
                   (mtl_size){b[0], b[1], b[2]});
}

static int32_t launch_impl(void* kv, void* sv, const uint32_t g[3], const uint32_t b[3],
                           uint32_t shared, const uint64_t* args, uint32_t nargs) {
  mtl_kernel* k = kv;
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  int32_t rc = launch_check(d, k, b, shared, nargs, "bg_launch");
  if (rc) return rc;
  oc_id enc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = encoder_locked(s, ENC_SERIAL, &enc))) { /* serial: launches run in order */
    launch_encode(d, enc, k, g, b, shared, args, nargs);
    maybe_flush_locked(s);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_launch(void* kv, void* sv, const uint32_t g[3], const uint32_t b[3],
                        uint32_t shared, const uint64_t* args, uint32_t nargs) {
  POOLED(launch_impl(kv, sv, g, b, shared, args, nargs));
}

/* ---- command lists: one concurrent compute encoder, barriers where the list asks ------------ */
/* Everything that can be refused is checked before anything is encoded. */
static int32_t submit_check(mtl_stream* s, const uint8_t* p, uint64_t len) {
  mtl_dev* d = DEVOF(s);
  mtl_ref r;
  int32_t rc = BG_OK;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (!rc && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        rc = launch_check(d, c.u.launch.kernel, c.u.launch.block, c.u.launch.shared,
                          c.u.launch.nargs, "bg_submit");
        break;
      case BG_CMD_COPY:
        if (c.u.copy.bytes &&
            !(rc = resolve(d, c.u.copy.dst, c.u.copy.bytes, "bg_submit (copy)", "dst", &r)))
          rc = resolve(d, c.u.copy.src, c.u.copy.bytes, "bg_submit (copy)", "src", &r);
        break;
      case BG_CMD_COPY_HTOD:
        if (c.u.htod.bytes)
          rc = resolve(d, c.u.htod.dst, c.u.htod.bytes, "bg_submit (copy to device)", "dst", &r);
        break;
      case BG_CMD_COPY_DTOH:
        if (c.u.dtoh.bytes)
          rc = resolve(d, c.u.dtoh.src, c.u.dtoh.bytes, "bg_submit (copy to host)", "src", &r);
        break;
      case BG_CMD_MEMSET: {
        uint64_t n = c.u.fill.count;
        uint32_t esz = c.u.fill.elem_size;
        if (n && n > UINT64_MAX / esz)
          rc = bg_set_error(BG_ERR_INVALID_VALUE, "bg_submit: memset of %llu elements", HEX(n));
        else if (n)
          rc = resolve(d, c.u.fill.dst, n * esz, "bg_submit (memset)", "dst", &r);
        break;
      }
      default: break;
    }
  }
  return rc;
}

static int32_t submit_impl(void* sv, const uint8_t* p, uint64_t len) {
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  int32_t rc = submit_check(s, p, len);
  if (rc) return rc;
  mtl_ref rd, rs;
  oc_id enc;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  pthread_mutex_lock(&s->mu);
  while (!rc && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        if (!(rc = encoder_locked(s, ENC_CONCURRENT, &enc)))
          launch_encode(d, enc, c.u.launch.kernel, c.u.launch.grid, c.u.launch.block,
                        c.u.launch.shared, c.u.launch.args, c.u.launch.nargs);
        break;
      case BG_CMD_BARRIER: /* across encoders Metal orders buffer hazards itself */
        if (s->enc_kind == ENC_CONCURRENT)
          m_void_u64(s->enc, S.memoryBarrierWithScope, MTL_BARRIER_BUFFERS);
        break;
      case BG_CMD_COPY: {
        uint64_t n = c.u.copy.bytes;
        if (n && !(rc = resolve(d, c.u.copy.dst, n, "bg_submit (copy)", "dst", &rd)) &&
            !(rc = resolve(d, c.u.copy.src, n, "bg_submit (copy)", "src", &rs)))
          rc = copy_locked(s, rd, rs, n);
        break;
      }
      case BG_CMD_COPY_HTOD: {
        uint64_t n = c.u.htod.bytes;
        if (n && !(rc = resolve(d, c.u.htod.dst, n, "bg_submit (copy to device)", "dst", &rd)))
          rc = htod_locked(s, rd, c.u.htod.src, n);
        break;
      }
      case BG_CMD_COPY_DTOH: {
        uint64_t n = c.u.dtoh.bytes;
        if (n && !(rc = resolve(d, c.u.dtoh.src, n, "bg_submit (copy to host)", "src", &rs)))
          rc = dtoh_locked(s, c.u.dtoh.dst, rs, n);
        break;
      }
      case BG_CMD_MEMSET: {
        uint64_t n = c.u.fill.count;
        if (n && !(rc = resolve(d, c.u.fill.dst, n * c.u.fill.elem_size, "bg_submit (memset)",
                                "dst", &rd)))
          rc = memset_locked(s, rd, c.u.fill.pattern, c.u.fill.elem_size, n);
        break;
      }
      case BG_CMD_EVENT_RECORD: rc = record_locked(s, c.u.event.event); break;
      case BG_CMD_EVENT_WAIT: rc = wait_locked(s, c.u.event.event); break;
      default: break;
    }
  }
  end_encoder_locked(s); /* the next list or launch starts after this one */
  maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
static int32_t m_submit(void* sv, const uint8_t* p, uint64_t len) {
  POOLED(submit_impl(sv, p, len));
}

/* ---- compiler version, capture, graphs ------------------------------------------------------ */
/* The Metal Shading Language version this macOS compiles by default. */
static int32_t rtc_version_impl(int32_t* major, int32_t* minor) {
  oc_id pi = rt.NSProcessInfo ? m_id(rt.NSProcessInfo, S.processInfo) : NULL;
  if (!pi) return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_rtc_version: NSProcessInfo unavailable");
  ns_osver v = m_osver(pi, S.operatingSystemVersion);
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
  POOLED(rtc_version_impl(major, minor));
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
static const bg_ops metal_ops = {
    .name = "metal",
    .device_close = m_device_close,
    .device_props = m_device_props,
    .device_mem_info = m_device_mem_info,
    .device_synchronize = m_device_synchronize,
    .mem_alloc = m_mem_alloc,
    .mem_free = m_mem_free,
    .host_alloc = m_host_alloc,
    .host_free = m_host_free,
    .memcpy_htod = m_memcpy_htod,
    .memcpy_dtoh = m_memcpy_dtoh,
    .memcpy_dtod = m_memcpy_dtod,
    .memset = m_memset,
    .stream_create = m_stream_create,
    .stream_destroy = m_stream_destroy,
    .stream_synchronize = m_stream_synchronize,
    .stream_query = m_stream_query,
    .stream_wait_event = m_stream_wait_event,
    .memcpy_htod_async = m_memcpy_htod_async,
    .memcpy_dtoh_async = m_memcpy_dtoh_async,
    .memcpy_dtod_async = m_memcpy_dtod_async,
    .memset_async = m_memset_async,
    .launch_host_func = m_launch_host_func,
    .event_create = m_event_create,
    .event_destroy = m_event_destroy,
    .event_record = m_event_record,
    .event_query = m_event_query,
    .event_synchronize = m_event_synchronize,
    .event_elapsed = m_event_elapsed,
    .rtc_compile = NULL, /* Metal compiles at bg_module_load */
    .rtc_version = m_rtc_version,
    .module_load = m_module_load,
    .module_unload = m_module_unload,
    .module_get_kernel = m_module_get_kernel,
    .kernel_max_threads = m_kernel_max_threads,
    .launch = m_launch,
    .begin_capture = m_begin_capture,
    .end_capture = m_end_capture,
    .capture_status = m_capture_status,
    /* no captured graphs: bg_graph_from_commands gives the core's command-list graphs, which
     * are the only graph handles Metal ever sees, so the graph_* entries stay NULL */
    .submit = m_submit,
    .kernel_hold = m_kernel_hold,
    .kernel_unhold = m_kernel_unhold,
    .event_hold = m_event_hold,
    .event_unhold = m_event_unhold,
    .ring_alloc = m_ring_alloc,
    .ring_free = m_ring_free,
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

#endif

const bg_backend bg_metal_backend = {metal_probe, metal_open};
