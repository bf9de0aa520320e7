/*
 * cuda_backend.c: the CUDA backend of libbungpu, a thin mapping of bg_ops onto the CUDA driver
 * API, loaded at run time with dlopen (libcuda) and, on first compile, NVRTC (libnvrtc).
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
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dladdr */
#endif
#include "../internal.h"
#include "cuda_api.h"

#include <dlfcn.h>
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

typedef struct nvrtc_api {
#define BGCU_FIELD(ret, name, params) PFN_bg_##name name;
  BGNVRTC_FUNCS(BGCU_FIELD)
  BGNVRTC_FUNCS_OPTIONAL(BGCU_FIELD)
#undef BGCU_FIELD
} nvrtc_api;

static cu_api cu;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state; /* 0: not tried, 1: loaded, -1: failed (and stays so) */
static int32_t load_rc;
static char load_msg[512];
static char load_name[256];

static nvrtc_api nv;
static _Atomic int nvrtc_loaded;
#if !defined(__APPLE__)
static pthread_mutex_t nvrtc_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

/* ---- errors ----------------------------------------------------------------------------------- */
static int32_t map_cu(bgcu_result rc) {
  switch ((int32_t)rc) {
    /* bungpu.h shares these numbers with CUresult (proven in shim/test/cuda_decls_check.c). */
    case BG_OK: case BG_ERR_INVALID_VALUE: case BG_ERR_OUT_OF_MEMORY: case BG_ERR_NOT_INITIALIZED:
    case BG_ERR_DEINITIALIZED: case BG_ERR_NO_DEVICE: case BG_ERR_INVALID_DEVICE:
    case BG_ERR_INVALID_IMAGE: case BG_ERR_INVALID_CONTEXT: case BG_ERR_INVALID_PTX:
    case BG_ERR_NO_BINARY_FOR_GPU: case BG_ERR_UNSUPPORTED_PTX_VERSION:
    case BG_ERR_INVALID_SOURCE: case BG_ERR_FILE_NOT_FOUND: case BG_ERR_INVALID_HANDLE:
    case BG_ERR_ILLEGAL_STATE: case BG_ERR_NOT_FOUND: case BG_ERR_NOT_READY:
    case BG_ERR_ILLEGAL_ADDRESS: case BG_ERR_LAUNCH_OUT_OF_RESOURCES: case BG_ERR_LAUNCH_TIMEOUT:
    case BG_ERR_PEER_ACCESS_ALREADY_ENABLED: case BG_ERR_PEER_ACCESS_NOT_ENABLED:
    case BG_ERR_ASSERT: case BG_ERR_HARDWARE_STACK_ERROR: case BG_ERR_ILLEGAL_INSTRUCTION:
    case BG_ERR_MISALIGNED_ADDRESS: case BG_ERR_INVALID_ADDRESS_SPACE: case BG_ERR_INVALID_PC:
    case BG_ERR_LAUNCH_FAILED: case BG_ERR_NOT_PERMITTED: case BG_ERR_NOT_SUPPORTED:
    case BG_ERR_STREAM_CAPTURE_UNSUPPORTED: case BG_ERR_STREAM_CAPTURE_INVALIDATED:
    case BG_ERR_STREAM_CAPTURE_MERGE: case BG_ERR_STREAM_CAPTURE_UNMATCHED:
    case BG_ERR_STREAM_CAPTURE_UNJOINED: case BG_ERR_STREAM_CAPTURE_ISOLATION:
    case BG_ERR_STREAM_CAPTURE_IMPLICIT: case BG_ERR_CAPTURED_EVENT:
    case BG_ERR_STREAM_CAPTURE_WRONG_THREAD: case BG_ERR_UNKNOWN:
      return (int32_t)rc;
    default:
      return BG_ERR_UNKNOWN;
  }
}

static const char* cu_err_name(bgcu_result rc) {
  const char* s = NULL;
  if (cu.cuGetErrorName && cu.cuGetErrorName(rc, &s) == BGCUDA_SUCCESS && s) return s;
  return "CUDA_ERROR_UNRECOGNIZED";
}

static const char* cu_err_text(bgcu_result rc) {
  const char* s = NULL;
  if (cu.cuGetErrorString && cu.cuGetErrorString(rc, &s) == BGCUDA_SUCCESS && s) return s;
  return "no description";
}

static void note_capture_failure(bgcu_result rc, const char* call);

/* The one place a failed driver call becomes a bg status and message. */
static int32_t cu_fail(bgcu_result rc, const char* call) {
  note_capture_failure(rc, call);
  return bg_set_error(map_cu(rc), "%s: %s (%u): %s", call, cu_err_name(rc), rc, cu_err_text(rc));
}

static int32_t cu_fail_at(bgcu_result rc, const char* call, const char* what) {
  note_capture_failure(rc, call);
  return bg_set_error(map_cu(rc), "%s(%s): %s (%u): %s", call, what, cu_err_name(rc), rc,
                      cu_err_text(rc));
}

/* CALL(cuFoo_v2, (args)): call the loaded entry point; on failure record and return its code. */
#define CALL(fn, args)                                                                             \
  do {                                                                                             \
    bgcu_result rc_ = cu.fn args;                                                                  \
    if (rc_ != BGCUDA_SUCCESS) return cu_fail(rc_, #fn);                                           \
  } while (0)

static void put_msg(char* msg, uint64_t cap, const char* text) {
  if (msg && cap) snprintf(msg, (size_t)cap, "%s", text);
}

/* ---- loading libcuda --------------------------------------------------------------------------- */
#if !defined(__APPLE__)
/* dlsym into a function pointer without the object-to-function pointer cast ISO C lacks (POSIX
 * guarantees the representations match). */
#define LOAD_SYM(dst, h, name)                                                                     \
  do {                                                                                             \
    void* p_ = dlsym(h, name);                                                                     \
    _Static_assert(sizeof(dst) == sizeof p_, "function pointers are pointer-sized");               \
    memcpy(&(dst), &p_, sizeof p_);                                                                \
  } while (0)

static void* open_first(const char* const* names, size_t n, char* err, size_t cap,
                        const char** opened) {
  err[0] = 0;
  for (size_t i = 0; i < n; i++) {
    void* h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *opened = names[i];
      return h;
    }
    const char* e = dlerror();
    if (!err[0] && e) snprintf(err, cap, "%s", e);
  }
  return NULL;
}
#endif

static int32_t load_driver_locked(void) {
#if defined(__APPLE__)
  snprintf(load_msg, sizeof load_msg, "CUDA is not available on macOS");
  return BG_ERR_BACKEND_UNAVAILABLE;
#else
  char err[256];
  const char* opened = NULL;
  void* h;
  const char* env = getenv("BUNGPU_LIBCUDA");
  if (env && *env) {
    h = open_first(&env, 1, err, sizeof err, &opened);
    if (!h) {
      snprintf(load_msg, sizeof load_msg, "BUNGPU_LIBCUDA=%s could not be loaded (dlopen: %s)", env,
               err);
      return BG_ERR_BACKEND_UNAVAILABLE;
    }
  } else {
    static const char* const names[] = {"libcuda.so.1", "libcuda.so"};
    h = open_first(names, 2, err, sizeof err, &opened);
    if (!h) {
      snprintf(load_msg, sizeof load_msg,
               "libcuda.so.1, libcuda.so not found (dlopen: %s); install the NVIDIA driver or set "
               "BUNGPU_LIBCUDA to its path",
               err);
      return BG_ERR_BACKEND_UNAVAILABLE;
    }
  }
  snprintf(load_name, sizeof load_name, "%s", opened);

  const char* missing = NULL;
#define BGCU_LOAD(ret, name, params)                                                               \
  LOAD_SYM(cu.name, h, #name);                                                                     \
  if (!cu.name && !missing) missing = #name;
#define BGCU_LOAD_OPT(ret, name, params) LOAD_SYM(cu.name, h, #name);
#define BGCU_LOAD_LEGACY(ret, name, params, real) LOAD_SYM(cu.name, h, #name);
  BGCU_DRIVER_REQUIRED(BGCU_LOAD)
  BGCU_DRIVER_OPTIONAL(BGCU_LOAD_OPT)
  BGCU_DRIVER_LEGACY(BGCU_LOAD_LEGACY)
#undef BGCU_LOAD
#undef BGCU_LOAD_OPT
#undef BGCU_LOAD_LEGACY
  if (!missing && !cu.cuEventElapsedTime_v2 && !cu.cuEventElapsedTime) missing = "cuEventElapsedTime";
  if (!missing && !cu.cuStreamGetCaptureInfo_v3 && !cu.cuStreamGetCaptureInfo_v2)
    missing = "cuStreamGetCaptureInfo_v2";
  if (missing) {
    snprintf(load_msg, sizeof load_msg,
             "%s lacks %s: not the CUDA driver, or one too old (bungpu needs CUDA 11.4 or newer)",
             load_name, missing);
    memset(&cu, 0, sizeof cu);
    dlclose(h);
    return BG_ERR_BACKEND_UNAVAILABLE;
  }

  /* Before cuInit, unless the user chose otherwise: modules load eagerly (lazy loading would load
   * a kernel at its first launch, which waits behind a resident persistent kernel: a deadlock),
   * and enough hardware queues that streams do not queue behind a resident kernel (the default
   * is 8 connections shared by every stream). */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  bgcu_result rc = cu.cuInit(0);
  if (rc != BGCUDA_SUCCESS) {
    /* The library stays loaded: cuInit may have started threads. */
    snprintf(load_msg, sizeof load_msg, "cuInit: %s (%u): %s (driver %s)", cu_err_name(rc), rc,
             cu_err_text(rc), load_name);
    return map_cu(rc);
  }
  return BG_OK;
#endif
}

static int32_t load_driver(void) {
  pthread_mutex_lock(&load_lock);
  if (load_state == 0) {
    load_rc = load_driver_locked();
    load_state = load_rc == BG_OK ? 1 : -1;
  }
  int32_t rc = load_rc;
  pthread_mutex_unlock(&load_lock);
  return rc;
}

/* ---- loading NVRTC (on first use; a failure is not remembered, so BUNGPU_NVRTC may be set later)
 *  - Which: BUNGPU_NVRTC when set; else the NVRTC whose major version is the driver's (a newer
 *    NVRTC writes PTX the driver may reject; an older one may not know the GPU), then any.
 *  - NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by name at the first compile. When NVRTC
 *    was found outside the loader's search path (BUNGPU_NVRTC, a pip wheel, /usr/local/cuda) that
 *    fails every compile, so the builtins beside the library are loaded first: the loader then
 *    finds the already-loaded object by its soname. */
#if !defined(__APPLE__)
static char nvrtc_path[1024]; /* the folder NVRTC was loaded from, for its include folder */

static void nvrtc_preload_builtins(void* h, const nvrtc_api* api) {
  void* sym = dlsym(h, "nvrtcVersion");
  Dl_info info;
  if (!sym || !dladdr(sym, &info) || !info.dli_fname) return;
  const char* slash = strrchr(info.dli_fname, '/');
  if (!slash) return;
  int dlen = (int)(slash - info.dli_fname);
  snprintf(nvrtc_path, sizeof nvrtc_path, "%.*s", dlen, info.dli_fname);
  int major = 0, minor = 0;
  if (api->nvrtcVersion(&major, &minor) != BGNVRTC_SUCCESS) return;
  char path[1200];
  static const char* const forms[] = {"%s/libnvrtc-builtins.so.%d.%d", "%s/libnvrtc-builtins.so.%d",
                                      "%s/libnvrtc-builtins.so"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    snprintf(path, sizeof path, forms[i], nvrtc_path, major, minor);
    /* Never closed: NVRTC keeps using it. */
    if (dlopen(path, RTLD_NOW | RTLD_GLOBAL)) return;
  }
}
#endif

static int32_t load_nvrtc(void) {
  if (atomic_load_explicit(&nvrtc_loaded, memory_order_acquire)) return BG_OK;
#if defined(__APPLE__)
  return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE, "NVRTC: CUDA is not available on macOS");
#else
  pthread_mutex_lock(&nvrtc_lock);
  if (atomic_load_explicit(&nvrtc_loaded, memory_order_relaxed)) {
    pthread_mutex_unlock(&nvrtc_lock);
    return BG_OK;
  }
  const char* names[12];
  char matching[2][64];
  size_t n = 0;
  const char* env = getenv("BUNGPU_NVRTC");
  if (env && *env) names[n++] = env;
  int drv = 0;
  if (cu.cuDriverGetVersion && cu.cuDriverGetVersion(&drv) == BGCUDA_SUCCESS && drv >= 11000) {
    snprintf(matching[0], sizeof matching[0], "libnvrtc.so.%d", drv / 1000);
    snprintf(matching[1], sizeof matching[1], "/usr/local/cuda/lib64/libnvrtc.so.%d", drv / 1000);
    names[n++] = matching[0];
    names[n++] = matching[1];
  }
  names[n++] = "libnvrtc.so";
  names[n++] = "libnvrtc.so.13";
  names[n++] = "libnvrtc.so.12";
  names[n++] = "libnvrtc.so.11.2";
  names[n++] = "/usr/local/cuda/lib64/libnvrtc.so";
  char err[256];
  const char* opened = NULL;
  void* h = open_first(names, n, err, sizeof err, &opened);
  if (!h) {
    pthread_mutex_unlock(&nvrtc_lock);
    return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE,
                        "NVRTC not found: tried %s%s%slibnvrtc.so, libnvrtc.so.13, libnvrtc.so.12, "
                        "libnvrtc.so.11.2, /usr/local/cuda/lib64/libnvrtc.so (dlopen: %s); set "
                        "BUNGPU_NVRTC to the path of libnvrtc.so",
                        env && *env ? "BUNGPU_NVRTC=" : "", env && *env ? env : "",
                        env && *env ? ", " : "", err);
  }
  const char* missing = NULL;
  nvrtc_api api;
#define BGCU_LOAD(ret, name, params)                                                               \
  LOAD_SYM(api.name, h, #name);                                                                    \
  if (!api.name && !missing) missing = #name;
#define BGCU_LOAD_OPT(ret, name, params) LOAD_SYM(api.name, h, #name);
  BGNVRTC_FUNCS(BGCU_LOAD)
  BGNVRTC_FUNCS_OPTIONAL(BGCU_LOAD_OPT)
#undef BGCU_LOAD
#undef BGCU_LOAD_OPT
  if (missing) {
    dlclose(h);
    pthread_mutex_unlock(&nvrtc_lock);
    return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE,
                        "%s lacks %s: NVRTC is too old (bungpu needs NVRTC 11.2 or newer)", opened,
                        missing);
  }
  nvrtc_preload_builtins(h, &api);
  nv = api;
  atomic_store_explicit(&nvrtc_loaded, 1, memory_order_release);
  pthread_mutex_unlock(&nvrtc_lock);
  return BG_OK;
#endif
}

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
} cu_device;

/* A memory pool handle: the driver's pool (the device's default one is never destroyed). */
typedef struct cu_pool {
  bg_obj h;
  bgcu_mempool p;
} cu_pool;

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

static const bg_ops cu_ops;

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

static _Thread_local struct cu_device* cur_dev;

static void cu_leave(cu_guard* g) {
  if (g->pushed) {
    bgcu_context popped = NULL;
    cu.cuCtxPopCurrent_v2(&popped);
  }
  cur_dev = g->prev;
}

static void flush_deferred(struct cu_device* d);
static int blocked(struct cu_device* d);
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_device* devs; /* open devices (next_open), for blocked() */

static int32_t cu_enter(cu_device* d, cu_guard* g) {
  g->prev = cur_dev;
  cur_dev = d;
  bgcu_context cur = NULL;
  if (cu.cuCtxGetCurrent(&cur) != BGCUDA_SUCCESS || cur != d->ctx) {
    if (cu.cuCtxPushCurrent_v2 && cu.cuCtxPopCurrent_v2) {
      CALL(cuCtxPushCurrent_v2, (d->ctx));
      g->pushed = 1;
    } else {
      CALL(cuCtxSetCurrent, (d->ctx));
    }
  }
  /* releases put off while they could have waited forever (see blocked) */
  if (atomic_load_explicit(&d->ndeferred, memory_order_acquire) &&
      !atomic_load_explicit(&d->ncaps, memory_order_relaxed) && !blocked(d))
    flush_deferred(d);
  return BG_OK;
}

#define ENTER(d)                                                                                   \
  cu_guard enter_guard_ __attribute__((cleanup(cu_leave))) = {0, NULL};                            \
  do {                                                                                             \
    int32_t e_ = cu_enter(d, &enter_guard_);                                                       \
    if (e_) return e_;                                                                             \
  } while (0)

/* A failed call with a stream-capture error: every live capture of the entry's device that is now
 * invalidated and has no cause yet records this call as its cause. */
static void note_capture_failure(bgcu_result rc, const char* call) {
  cu_device* d = cur_dev;
  if (!d || rc < 900 || rc > 908 || rc == 901 || !atomic_load_explicit(&d->ncaps, memory_order_relaxed))
    return;
  pthread_mutex_lock(&d->cap_lock);
  for (cu_capture* c = d->caps; c; c = c->next) {
    if (c->why[0]) continue;
    bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
    if (cu.cuStreamIsCapturing(c->origin, &st) == BGCUDA_SUCCESS &&
        st == BGCU_STREAM_CAPTURE_STATUS_INVALIDATED)
      snprintf(c->why, sizeof c->why, "%s (%s)", call, cu_err_name(rc));
  }
  pthread_mutex_unlock(&d->cap_lock);
}

/* ---- backend entry points --------------------------------------------------------------------- */
static int32_t cu_probe(int32_t* count, char* msg, uint64_t cap) {
  *count = 0;
  int32_t rc = load_driver();
  if (rc != BG_OK) {
    put_msg(msg, cap, load_msg);
    return rc;
  }
  int n = 0;
  bgcu_result r = cu.cuDeviceGetCount(&n);
  char text[512];
  if (r != BGCUDA_SUCCESS) {
    snprintf(text, sizeof text, "cuDeviceGetCount: %s (%u): %s", cu_err_name(r), r, cu_err_text(r));
    put_msg(msg, cap, text);
    return map_cu(r);
  }
  if (n <= 0) {
    snprintf(text, sizeof text, "the CUDA driver (%s) reports no devices", load_name);
    put_msg(msg, cap, text);
    return BG_ERR_NO_DEVICE;
  }
  int v = 0;
  cu.cuDriverGetVersion(&v);
  snprintf(text, sizeof text, "%s: CUDA driver %d.%d, %d device(s)", load_name, v / 1000,
           (v % 1000) / 10, n);
  put_msg(msg, cap, text);
  *count = n;
  return BG_OK;
}

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
  atomic_init(&d->ncaps, 0);
  atomic_init(&d->resident, 0);
  pthread_mutex_init(&d->def_lock, NULL);
  atomic_init(&d->ndeferred, 0);
  pthread_mutex_init(&d->gate_lock, NULL);
  atomic_init(&d->ngates, 0);
  pthread_mutex_init(&d->str_lock, NULL);
  bg_obj_init(d, BG_KIND_DEVICE, &d->base);
  d->base.ops = &cu_ops;
  d->base.ordinal = ordinal;
  d->base.backend = BG_BACKEND_CUDA;
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

const bg_backend bg_cuda_backend = {cu_probe, cu_open};

/* ---- device ----------------------------------------------------------------------------------- */
/* ---- releases that could wait forever ----------------------------------------------------------
 * cuMemFree, cuMemFreeHost, cuModuleUnload and cuIpcCloseMemHandle wait for all work on the
 * device. Two kinds of work may never finish while the caller waits:
 *  - a persistent ring kernel (bungpu's bg_ring_persistent, counted in cu_launch until a host
 *    function queued behind it runs) never finishes on its own;
 *  - a stream parked at a TypeScript host function (a wait on a mapped word, or a shim signal's
 *    host function) waits for a JS thread, which may be the very one making the call: dispose(),
 *    a finaliser, the host-function poller, RingKernel.stop()'s polling.
 * The second shows through gates: an event recorded right behind every host function and stream
 * wait issued through bg; a gate not yet passed means a stream may be waiting for a JS thread.
 * While either is possible (blocked), those releases are queued on the device instead and done by
 * the first entry that finds neither (cu_enter), so no release can wait forever. Queued device
 * memory is not lost meanwhile: each queued free records a fence (an event on the legacy stream
 * and on each stream created on the device, but those with a resident kernel), and cu_mem_alloc
 * hands a queued block of about the size asked for out again once its fence has passed: a
 * long-lived ring kernel does not grow memory. A module is also kept loaded while a capture
 * record, graph or exec holds one of its kernel nodes, and its unload is put off during a capture
 * begun through bg (cuModuleUnload would invalidate it). Limits: only streams bg created are
 * fenced (another library's streams on the context are not), and a gate on any open device
 * counts (a stream may wait on another device's events). */
static void module_release_now(cu_module* m) {
  cu.cuModuleUnload(m->m);
  for (cu_kernel* k = m->kernels; k;) {
    cu_kernel* next = k->next;
    free(k);
    k = next;
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static void fence_drop(cu_deferred* e) {
  for (uint32_t i = 0; i < e->nfence; i++) cu.cuEventDestroy_v2(e->fence[i]);
  free(e->fence);
  e->fence = NULL;
  e->nfence = 0;
}

/* Whether the work queued before the free has finished (its events are dropped once it has). */
static int fence_passed(cu_deferred* e) {
  for (uint32_t i = 0; i < e->nfence; i++)
    if (cu.cuEventQuery(e->fence[i]) != BGCUDA_SUCCESS) return 0;
  fence_drop(e);
  return 1;
}

static int fence_one(cu_deferred* e, bgcu_stream s) {
  bgcu_event ev = NULL;
  if (cu.cuEventCreate(&ev, BGCU_EVENT_DISABLE_TIMING) != BGCUDA_SUCCESS) return 0;
  if (cu.cuEventRecord(ev, s) != BGCUDA_SUCCESS) {
    cu.cuEventDestroy_v2(ev);
    return 0;
  }
  e->fence[e->nfence++] = ev;
  return 1;
}

/* The fence of a queued free of `bytes` of device memory (the context current): the block may be
 * handed out again once it has passed. None (never handed out) while a capture is open, since work
 * queued on a capturing stream before its capture began cannot be fenced, or if an event fails. */
static void fence_record(cu_device* d, cu_deferred* e, uint64_t bytes) {
  if (atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0) return;
  pthread_mutex_lock(&d->str_lock);
  uint32_t n = 1;
  for (cu_stream* s = d->streams; s; s = s->next) n++;
  e->fence = calloc(n, sizeof *e->fence);
  int ok = e->fence && fence_one(e, NULL); /* the legacy stream: also blocking streams' work */
  for (cu_stream* s = d->streams; ok && s; s = s->next)
    if (!atomic_load_explicit(&s->resident, memory_order_acquire)) ok = fence_one(e, s->s);
  pthread_mutex_unlock(&d->str_lock);
  if (ok) e->bytes = bytes;
  else fence_drop(e);
}

/* Queue a release (the context current); 0 if it could not be queued. */
static int defer_release(cu_device* d, int kind, bg_devptr dptr, void* ptr) {
  cu_deferred* e = calloc(1, sizeof *e);
  if (!e) return 0;
  e->kind = kind;
  e->dptr = dptr;
  e->ptr = ptr;
  if (kind == 0 && cu.cuMemGetAddressRange_v2) {
    bgcu_deviceptr base = 0;
    size_t size = 0;
    if (cu.cuMemGetAddressRange_v2(&base, &size, dptr) == BGCUDA_SUCCESS && base == dptr)
      fence_record(d, e, size);
  }
  pthread_mutex_lock(&d->def_lock);
  e->next = d->deferred;
  d->deferred = e;
  atomic_fetch_add_explicit(&d->ndeferred, 1, memory_order_release);
  pthread_mutex_unlock(&d->def_lock);
  return 1;
}

/* A queued block of `bytes` up to a quarter more (any size if `loose`) whose fence has passed (the
 * smallest), taken off the queue; 0 if none. */
static bg_devptr reuse_deferred(cu_device* d, uint64_t bytes, int loose) {
  if (!atomic_load_explicit(&d->ndeferred, memory_order_acquire)) return 0;
  bg_devptr out = 0;
  pthread_mutex_lock(&d->def_lock);
  cu_deferred** best = NULL;
  for (cu_deferred** p = &d->deferred; *p; p = &(*p)->next) {
    cu_deferred* e = *p;
    if (e->kind != 0 || e->bytes < bytes || (!loose && e->bytes - bytes > bytes / 4)) continue;
    if ((best && (*best)->bytes <= e->bytes) || !fence_passed(e)) continue;
    best = p;
  }
  if (best) {
    cu_deferred* e = *best;
    *best = e->next;
    atomic_fetch_sub_explicit(&d->ndeferred, 1, memory_order_relaxed);
    out = e->dptr;
    free(e);
  }
  pthread_mutex_unlock(&d->def_lock);
  return out;
}

/* cuIpcCloseMemHandle after the context's work, so queued work reading the mapping finishes. */
static bgcu_result ipc_close_now(bg_devptr p) {
  bgcu_result r = cu.cuCtxSynchronize();
  bgcu_result c = cu.cuIpcCloseMemHandle(p);
  return r != BGCUDA_SUCCESS ? r : c;
}

/* With the device's context current, and nothing blocked. Failures have no caller left. */
static void flush_deferred(cu_device* d) {
  pthread_mutex_lock(&d->def_lock);
  cu_deferred* e = d->deferred;
  d->deferred = NULL;
  atomic_store_explicit(&d->ndeferred, 0, memory_order_relaxed);
  pthread_mutex_unlock(&d->def_lock);
  while (e) {
    cu_deferred* next = e->next;
    fence_drop(e);
    if (e->kind == 0) cu.cuMemFree_v2(e->dptr);
    else if (e->kind == 1) cu.cuMemFreeHost(e->ptr);
    else if (e->kind == 2) module_release_now(e->ptr);
    else ipc_close_now(e->dptr);
    free(e);
    e = next;
  }
}

static int is_resident(cu_device* d) {
  return atomic_load_explicit(&d->resident, memory_order_acquire) > 0;
}

/* Behind a host function or a stream wait just issued on `s` (the context current): a gate. Not
 * on a capturing stream (its work runs when a graph is launched), nor on the legacy stream while
 * a capture is open (using it could invalidate the capture). */
static void gate_add(cu_device* d, cu_stream* s) {
  if (atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0) {
    bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
    if (!s->s || cu.cuStreamIsCapturing(s->s, &st) != BGCUDA_SUCCESS ||
        st != BGCU_STREAM_CAPTURE_STATUS_NONE)
      return;
  }
  pthread_mutex_lock(&d->gate_lock);
  cu_gate* g = d->spare;
  if (g) d->spare = g->next;
  pthread_mutex_unlock(&d->gate_lock);
  if (!g) {
    g = calloc(1, sizeof *g);
    if (!g) return;
    if (cu.cuEventCreate(&g->e, BGCU_EVENT_DISABLE_TIMING) != BGCUDA_SUCCESS) {
      free(g);
      return;
    }
  }
  int recorded = cu.cuEventRecord(g->e, s->s) == BGCUDA_SUCCESS;
  pthread_mutex_lock(&d->gate_lock);
  if (recorded) {
    g->next = d->gates;
    d->gates = g;
    atomic_fetch_add_explicit(&d->ngates, 1, memory_order_release);
  } else {
    g->next = d->spare;
    d->spare = g;
  }
  pthread_mutex_unlock(&d->gate_lock);
}

/* Whether a gate of `d` has not been passed yet; passed ones go back to the spares. A failed
 * query (a sticky error: the streams run nothing more) counts as passed. */
static int gates_open(cu_device* d) {
  if (!atomic_load_explicit(&d->ngates, memory_order_acquire)) return 0;
  pthread_mutex_lock(&d->gate_lock);
  for (cu_gate** p = &d->gates; *p;) {
    cu_gate* g = *p;
    if (cu.cuEventQuery(g->e) == BGCUDA_ERROR_NOT_READY) {
      p = &g->next;
      continue;
    }
    *p = g->next;
    g->next = d->spare;
    d->spare = g;
    atomic_fetch_sub_explicit(&d->ngates, 1, memory_order_relaxed);
  }
  int open = d->gates != NULL;
  pthread_mutex_unlock(&d->gate_lock);
  return open;
}

/* Could a release that waits for the device's work wait forever now? A resident persistent kernel
 * on its context (through any device handle), or a gate of any open device not yet passed. */
static int blocked(cu_device* d) {
  if (is_resident(d)) return 1;
  int b = 0;
  pthread_mutex_lock(&devs_lock);
  for (cu_device* o = devs; o && !b; o = o->next_open)
    b = (o->ctx == d->ctx && is_resident(o)) || gates_open(o);
  pthread_mutex_unlock(&devs_lock);
  return b;
}

/* Drop a reference; the last one unloads (now, or once nothing is blocked and no capture is
 * open). Returns the unload's status when it happened now. */
static bgcu_result module_unref(cu_module* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return BGCUDA_SUCCESS;
  cu_device* d = m->dev;
  if ((atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0 || blocked(d)) &&
      defer_release(d, 2, 0, m))
    return BGCUDA_SUCCESS;
  bgcu_result r = cu.cuModuleUnload(m->m);
  m->m = NULL;
  for (cu_kernel* k = m->kernels; k;) {
    cu_kernel* next = k->next;
    free(k);
    k = next;
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
  return r;
}

static void resident_end(void* p) {
  /* a driver thread: no CUDA calls here */
  cu_stream* s = p;
  atomic_fetch_sub_explicit(&s->resident, 1, memory_order_release);
  atomic_fetch_sub_explicit(&CUDEV(s)->resident, 1, memory_order_release);
}

static void free_capture(cu_capture* c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->n; i++) module_unref(c->mods[i]);
  free(c->nodes);
  free(c->nargs);
  free(c->mods);
  free(c);
}

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
  out->backend = BG_BACKEND_CUDA;
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

/* ---- memory ----------------------------------------------------------------------------------- */
static int32_t cu_mem_alloc(bg_device* dev, uint64_t bytes, bg_devptr* out) {
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
static int32_t cu_mem_free(bg_device* dev, bg_devptr p) {
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

static int32_t cu_host_alloc(bg_device* dev, uint64_t bytes, uint32_t flags, void** host,
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

static int32_t cu_host_free(bg_device* dev, void* host) {
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

static int32_t cu_memcpy_htod(bg_device* dev, bg_devptr dst, const void* src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyHtoD_v2, (dst, src, (size_t)n));
  return legacy_done("after cuMemcpyHtoD_v2");
}

static int32_t cu_memcpy_dtoh(bg_device* dev, void* dst, bg_devptr src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyDtoH_v2, (dst, src, (size_t)n));
  return BG_OK;
}

static int32_t cu_memcpy_dtod(bg_device* dev, bg_devptr dst, bg_devptr src, uint64_t n) {
  ENTER((cu_device*)dev);
  CALL(cuMemcpyDtoD_v2, (dst, src, (size_t)n));
  return legacy_done("after cuMemcpyDtoD_v2");
}

static int32_t cu_memset(bg_device* dev, bg_devptr dst, uint32_t pattern, uint32_t esz,
                         uint64_t count) {
  ENTER((cu_device*)dev);
  switch (esz) {
    case 1: CALL(cuMemsetD8_v2, (dst, (unsigned char)pattern, (size_t)count)); break;
    case 2: CALL(cuMemsetD16_v2, (dst, (unsigned short)pattern, (size_t)count)); break;
    default: CALL(cuMemsetD32_v2, (dst, pattern, (size_t)count)); break;
  }
  return legacy_done("after cuMemsetD*_v2");
}

/* ---- streams ---------------------------------------------------------------------------------- */
static int32_t cu_stream_create(bg_device* dev, uint32_t flags, int32_t prio, void** out) {
  ENTER((cu_device*)dev);
  cu_stream* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  unsigned int cf = (flags & BG_STREAM_NON_BLOCKING) ? BGCU_STREAM_NON_BLOCKING : BGCU_STREAM_DEFAULT;
  bgcu_result r = cu.cuStreamCreateWithPriority(&s->s, cf, prio);
  if (r != BGCUDA_SUCCESS) {
    free(s);
    return cu_fail(r, "cuStreamCreateWithPriority");
  }
  bg_obj_init(s, BG_KIND_STREAM, dev);
  cu_device* d = (cu_device*)dev;
  pthread_mutex_lock(&d->str_lock);
  s->next = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->str_lock);
  *out = s;
  return BG_OK;
}

static void detach_capture(cu_device* d, cu_capture* c) {
  pthread_mutex_lock(&d->cap_lock);
  for (cu_capture** p = &d->caps; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      atomic_fetch_sub_explicit(&d->ncaps, 1, memory_order_relaxed);
      break;
    }
  pthread_mutex_unlock(&d->cap_lock);
}

/* Waits for the stream's work (unless it is capturing, where waiting is illegal), then destroys
 * it. The first error is returned; the stream is destroyed either way. */
static int32_t cu_stream_destroy(void* sp) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  int32_t rc = BG_OK;
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  bgcu_result r = cu.cuStreamIsCapturing(s->s, &st);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuStreamIsCapturing");
  else if (st == BGCU_STREAM_CAPTURE_STATUS_NONE) {
    r = cu.cuStreamSynchronize(s->s);
    if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuStreamSynchronize");
  }
  if (s->cap) {
    detach_capture(d, s->cap);
    free_capture(s->cap);
    s->cap = NULL;
  }
  pthread_mutex_lock(&d->str_lock);
  for (cu_stream** p = &d->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&d->str_lock);
  r = cu.cuStreamDestroy_v2(s->s);
  if (r != BGCUDA_SUCCESS && rc == BG_OK) rc = cu_fail(r, "cuStreamDestroy_v2");
  bg_obj_kill(s);
  free(s);
  return rc;
}

static int32_t cu_stream_synchronize(void* sp) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuStreamSynchronize, (s->s));
  return BG_OK;
}

static int32_t cu_stream_query(void* sp) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  bgcu_result r = cu.cuStreamQuery(s->s);
  if (r == BGCUDA_SUCCESS) return BG_OK;
  if (r == BGCUDA_ERROR_NOT_READY)
    return bg_set_error(BG_ERR_NOT_READY, "cuStreamQuery: CUDA_ERROR_NOT_READY (600)");
  return cu_fail(r, "cuStreamQuery");
}

static int32_t cu_stream_wait_event(void* sp, void* ep) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuStreamWaitEvent, (s->s, ((cu_event*)ep)->e, 0));
  return BG_OK;
}

static int32_t cu_memcpy_htod_async(void* sp, bg_devptr dst, const void* src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyHtoDAsync_v2, (dst, src, (size_t)n, s->s));
  return BG_OK;
}

static int32_t cu_memcpy_dtoh_async(void* sp, void* dst, bg_devptr src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyDtoHAsync_v2, (dst, src, (size_t)n, s->s));
  return BG_OK;
}

static int32_t cu_memcpy_dtod_async(void* sp, bg_devptr dst, bg_devptr src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyDtoDAsync_v2, (dst, src, (size_t)n, s->s));
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

static int32_t cu_peer_enable(bg_device* dev, bg_device* peer) {
  if (!cu.cuCtxEnablePeerAccess) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuCtxEnablePeerAccess: not in this driver");
  ENTER((cu_device*)dev);
  CALL(cuCtxEnablePeerAccess, (((cu_device*)peer)->ctx, 0));
  return BG_OK;
}

static int32_t cu_peer_disable(bg_device* dev, bg_device* peer) {
  if (!cu.cuCtxDisablePeerAccess) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuCtxDisablePeerAccess: not in this driver");
  ENTER((cu_device*)dev);
  CALL(cuCtxDisablePeerAccess, (((cu_device*)peer)->ctx));
  return BG_OK;
}

/* cuMemcpyPeerAsync goes peer to peer where access is enabled and stages through host memory
 * otherwise: the driver picks; `peer` is what the core reports. */
static int32_t cu_memcpy_peer_async(void* sp, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                                    bg_device* src_dev, uint64_t n, int peer) {
  (void)peer;
  cu_stream* s = sp;
  if (!cu.cuMemcpyPeerAsync) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuMemcpyPeerAsync: not in this driver");
  ENTER(CUDEV(s));
  CALL(cuMemcpyPeerAsync, (dst, ((cu_device*)dst_dev)->ctx, src, ((cu_device*)src_dev)->ctx, (size_t)n, s->s));
  return BG_OK;
}

static int32_t cu_memset_async(void* sp, bg_devptr dst, uint32_t pattern, uint32_t esz,
                               uint64_t count) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  switch (esz) {
    case 1: CALL(cuMemsetD8Async, (dst, (unsigned char)pattern, (size_t)count, s->s)); break;
    case 2: CALL(cuMemsetD16Async, (dst, (unsigned short)pattern, (size_t)count, s->s)); break;
    default: CALL(cuMemsetD32Async, (dst, pattern, (size_t)count, s->s)); break;
  }
  return BG_OK;
}

static int32_t cu_launch_host_func(void* sp, bg_host_fn fn, void* user) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuLaunchHostFunc, (s->s, fn, user));
  gate_add(CUDEV(s), s); /* it may wait for a JS thread (a shim signal) */
  return BG_OK;
}

/* bg_stream_notify: a host function that only queues a wake-up and returns, so no gate (a gate
 * per await would keep releases queued on a busy device). */
static int32_t cu_stream_notify(void* sp, bg_host_fn fn, void* user) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuLaunchHostFunc, (s->s, fn, user));
  return BG_OK;
}

/* Stream memory operations on mapped host memory: how TypeScript host functions hold a stream
 * without parking the driver's one host-function thread (a parked thread stalled every other
 * stream's host functions, so a wait across streams could deadlock). */
static int32_t cu_stream_wait_value32(void* sp, bg_devptr addr, uint32_t value) {
  cu_stream* s = sp;
  if (!cu.cuStreamWaitValue32_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_stream_wait_value32: the CUDA driver lacks "
                        "cuStreamWaitValue32_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(s));
  CALL(cuStreamWaitValue32_v2, (s->s, addr, value, BGCU_STREAM_WAIT_VALUE_EQ));
  gate_add(CUDEV(s), s); /* the word may be a TypeScript host function's */
  return BG_OK;
}

static int32_t cu_stream_write_value32(void* sp, bg_devptr addr, uint32_t value) {
  cu_stream* s = sp;
  if (!cu.cuStreamWriteValue32_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_stream_write_value32: the CUDA driver lacks "
                        "cuStreamWriteValue32_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(s));
  CALL(cuStreamWriteValue32_v2, (s->s, addr, value, BGCU_STREAM_WRITE_VALUE_DEFAULT));
  return BG_OK;
}

/* ---- events ----------------------------------------------------------------------------------- */
static int32_t cu_event_create(bg_device* dev, uint32_t flags, void** out) {
  ENTER((cu_device*)dev);
  cu_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: out of host memory");
  unsigned int cf = BGCU_EVENT_DEFAULT;
  if (flags & BG_EVENT_BLOCKING_SYNC) cf |= BGCU_EVENT_BLOCKING_SYNC;
  if (flags & BG_EVENT_DISABLE_TIMING) cf |= BGCU_EVENT_DISABLE_TIMING;
  if (flags & BG_EVENT_INTERPROCESS) cf |= BGCU_EVENT_INTERPROCESS;
  bgcu_result r = cu.cuEventCreate(&e->e, cf);
  if (r != BGCUDA_SUCCESS) {
    free(e);
    return cu_fail(r, "cuEventCreate");
  }
  atomic_init(&e->refs, 1);
  bg_obj_init(e, BG_KIND_EVENT, dev);
  *out = e;
  return BG_OK;
}

/* Drop a reference; the last one destroys the driver's event (the context is current). */
static bgcu_result event_unref(cu_event* e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return BGCUDA_SUCCESS;
  bgcu_result r = cu.cuEventDestroy_v2(e->e);
  free(e);
  return r;
}

static int32_t cu_event_destroy(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  bg_obj_kill(e);
  bgcu_result r = event_unref(e);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuEventDestroy_v2");
  return BG_OK;
}

/* Holds for the core's command-list graphs: a kernel keeps its module loaded (as a captured
 * kernel node does), an event its driver event. */
static void cu_event_hold(void* ep) {
  atomic_fetch_add_explicit(&((cu_event*)ep)->refs, 1, memory_order_relaxed);
}
static void cu_event_unhold(void* ep) {
  cu_event* e = ep;
  cu_guard g __attribute__((cleanup(cu_leave))) = {0, NULL};
  cu_enter(CUDEV(e), &g);
  event_unref(e);
}

static int32_t cu_event_record(void* ep, void* sp) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  CALL(cuEventRecord, (e->e, ((cu_stream*)sp)->s));
  return BG_OK;
}

static int32_t cu_event_query(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  bgcu_result r = cu.cuEventQuery(e->e);
  if (r == BGCUDA_SUCCESS) return BG_OK;
  if (r == BGCUDA_ERROR_NOT_READY)
    return bg_set_error(BG_ERR_NOT_READY, "cuEventQuery: CUDA_ERROR_NOT_READY (600)");
  return cu_fail(r, "cuEventQuery");
}

static int32_t cu_event_synchronize(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  CALL(cuEventSynchronize, (e->e));
  return BG_OK;
}

static int32_t cu_event_elapsed(float* ms, void* a, void* b) {
  ENTER(CUDEV(a));
  bgcu_event ea = ((cu_event*)a)->e, eb = ((cu_event*)b)->e;
  if (cu.cuEventElapsedTime_v2) CALL(cuEventElapsedTime_v2, (ms, ea, eb));
  else CALL(cuEventElapsedTime, (ms, ea, eb));
  return BG_OK;
}

/* ---- runtime compilation ---------------------------------------------------------------------- */
static int32_t nvrtc_fail(bgnvrtc_result r, const char* call) {
  int32_t code = r == BGNVRTC_ERROR_OUT_OF_MEMORY ? BG_ERR_OUT_OF_MEMORY
                 : (r == BGNVRTC_ERROR_INVALID_INPUT || r == BGNVRTC_ERROR_INVALID_PROGRAM ||
                    r == BGNVRTC_ERROR_INVALID_OPTION)
                     ? BG_ERR_INVALID_VALUE
                     : BG_ERR_UNKNOWN;
  const char* name = nv.nvrtcGetErrorString(r);
  return bg_set_error(code, "%s: %s (%u)", call, name ? name : "NVRTC_ERROR", r);
}

static int is_arch_option(const char* o) {
  return strncmp(o, "--gpu-architecture", 18) == 0 || strncmp(o, "-arch", 5) == 0;
}

/* Length of the first few lines of a log, for the error message. */
static int log_head(const char* log, size_t len) {
  size_t i = 0;
  int lines = 0;
  while (i < len && i < 700) {
    if (log[i] == '\n' && ++lines == 6) break;
    i++;
  }
  while (i > 0 && (log[i - 1] == '\n' || log[i - 1] == '\r')) i--;
  return (int)i;
}

static int has_prefix(const char* s, const char* p) { return strncmp(s, p, strlen(p)) == 0; }

/* The value of an architecture option ("sm_90" in "--gpu-architecture=sm_90", "-arch sm_90" is
 * two options and not recognised: NVRTC wants the = form). */
static const char* arch_value(const char* o) {
  const char* eq = strchr(o, '=');
  return eq ? eq + 1 : "";
}

/* The include folders handed to NVRTC with -I, so kernels can include the toolkit's headers:
 * $CUDA_HOME/include, $CUDA_PATH/include, the include folder beside NVRTC (pip wheels ship it
 * there), /usr/local/cuda/include; each only when it exists, none twice. */
static int include_dirs(char dirs[][1100], int max) {
  int n = 0;
  char cand[4][1100];
  int nc = 0;
  const char* e;
  if ((e = getenv("CUDA_HOME")) && *e) snprintf(cand[nc++], sizeof cand[0], "%s/include", e);
  if ((e = getenv("CUDA_PATH")) && *e) snprintf(cand[nc++], sizeof cand[0], "%s/include", e);
#if !defined(__APPLE__)
  if (nvrtc_path[0]) snprintf(cand[nc++], sizeof cand[0], "%s/../include", nvrtc_path);
#endif
  snprintf(cand[nc++], sizeof cand[0], "/usr/local/cuda/include");
  for (int i = 0; i < nc && n < max; i++) {
    char real[4096];
    if (!realpath(cand[i], real)) continue;
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= strcmp(dirs[j] + 2, real) == 0;
    if (dup || strlen(real) + 3 > sizeof dirs[0]) continue;
    snprintf(dirs[n++], sizeof dirs[0], "-I%s", real);
  }
  return n;
}

/* The newest architecture this NVRTC can target that is not newer than the device's, or 0. */
static int best_supported_arch(int want) {
  if (!nv.nvrtcGetNumSupportedArchs || !nv.nvrtcGetSupportedArchs) return 0;
  int n = 0;
  if (nv.nvrtcGetNumSupportedArchs(&n) != BGNVRTC_SUCCESS || n <= 0 || n > 4096) return 0;
  int* a = malloc((size_t)n * sizeof *a);
  if (!a) return 0;
  int best = 0;
  if (nv.nvrtcGetSupportedArchs(a) == BGNVRTC_SUCCESS)
    for (int i = 0; i < n; i++)
      if (a[i] <= want && a[i] > best) best = a[i];
  free(a);
  return best;
}

/* Compile `src` for the device:
 *  - CUBIN for the device's own sm_XY when want_cubin (what Program.compile asks for): a CUBIN
 *    never meets the driver's PTX ISA limit, so a newer NVRTC than the driver still works. When
 *    this NVRTC does not know sm_XY (older than the GPU) it falls back to PTX for the newest
 *    architecture it knows, which the driver JIT-compiles. A caller's own --gpu-architecture is
 *    kept: compute_XY gives PTX, sm_XY a CUBIN.
 *  - -default-device (functions without an execution space are __device__, so helpers written
 *    for C compile unchanged) and -I for the toolkit's include folders, unless given.
 * The result's code starts with "\x7fELF" for a CUBIN; PTX is text. An empty image is an error. */
static int32_t cu_rtc_compile(bg_device* dev, const char* src, const char* name,
                              const char* options, int32_t want_cubin, void** out) {
  cu_device* d = (cu_device*)dev;
  int32_t rc = load_nvrtc();
  if (rc != BG_OK) return rc;

  /* Split the newline-separated options in place in a copy. */
  size_t olen = strlen(options), nopt = 8;
  for (size_t i = 0; i < olen; i++) nopt += options[i] == '\n';
  char* buf = malloc(olen + 1);
  const char** argv = malloc(nopt * sizeof *argv);
  if (!buf || !argv) {
    free(buf);
    free(argv);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_rtc_compile: out of host memory");
  }
  memcpy(buf, options, olen + 1);
  int argc = 0, arch_at = -1, has_default_device = 0;
  for (char* p = buf; p && *p;) {
    char* nl = strchr(p, '\n');
    if (nl) *nl = 0;
    char* end = p + strlen(p);
    while (*p == ' ' || *p == '\t') p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = 0;
    if (*p) {
      if (is_arch_option(p)) arch_at = argc;
      has_default_device |= strcmp(p, "-default-device") == 0 ||
                            strcmp(p, "--device-as-default-execution-space") == 0;
      argv[argc++] = p;
    }
    p = nl ? nl + 1 : NULL;
  }
  if (!has_default_device) argv[argc++] = "-default-device";
  char incs[4][1100];
  int ninc = include_dirs(incs, 4);
  for (int i = 0; i < ninc && (size_t)argc < nopt - 1; i++) argv[argc++] = incs[i];
  char arch[64];
  int cubin;
  if (arch_at >= 0) {
    cubin = want_cubin && has_prefix(arch_value(argv[arch_at]), "sm_");
  } else {
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d%d", want_cubin ? "sm" : "compute",
             d->cc_major, d->cc_minor);
    arch_at = argc;
    argv[argc++] = arch;
    cubin = want_cubin;
  }

  bgnvrtc_program prog = NULL;
  char* log = NULL;
  char* code = NULL;
  bgnvrtc_result r = nv.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
  if (r != BGNVRTC_SUCCESS) {
    rc = nvrtc_fail(r, "nvrtcCreateProgram");
    prog = NULL;
    goto done;
  }
  bgnvrtc_result cr = nv.nvrtcCompileProgram(prog, argc, argv);
  if (cr == BGNVRTC_ERROR_INVALID_OPTION && argv[arch_at] == arch && cubin) {
    /* This NVRTC does not know the GPU's architecture: PTX for the newest one it knows. */
    int best = best_supported_arch(d->cc_major * 10 + d->cc_minor);
    if (best > 0) {
      snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d", best);
      cubin = 0;
      nv.nvrtcDestroyProgram(&prog);
      prog = NULL;
      r = nv.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
      if (r != BGNVRTC_SUCCESS) {
        rc = nvrtc_fail(r, "nvrtcCreateProgram");
        prog = NULL;
        goto done;
      }
      cr = nv.nvrtcCompileProgram(prog, argc, argv);
    }
  }
  size_t log_size = 0;
  r = nv.nvrtcGetProgramLogSize(prog, &log_size);
  if (r != BGNVRTC_SUCCESS) {
    rc = nvrtc_fail(r, "nvrtcGetProgramLogSize");
    goto done;
  }
  log = malloc(log_size + 1);
  if (!log) {
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_rtc_compile: out of host memory");
    goto done;
  }
  log[0] = 0;
  if (log_size) {
    r = nv.nvrtcGetProgramLog(prog, log);
    if (r != BGNVRTC_SUCCESS) {
      rc = nvrtc_fail(r, "nvrtcGetProgramLog");
      goto done;
    }
  }
  log[log_size] = 0;
  size_t log_len = strlen(log);

  if (cr != BGNVRTC_SUCCESS) {
    rc = bg_rtc_make(dev, "", 0, log, log_len, out);
    if (rc != BG_OK) goto done;
    const char* cname = nv.nvrtcGetErrorString(cr);
    rc = bg_set_error(BG_ERR_COMPILE, "nvrtcCompileProgram(%s, %s): %s (%u): %.*s", name,
                      argv[arch_at], cname ? cname : "NVRTC_ERROR", cr, log_head(log, log_len),
                      log);
    goto done;
  }

  size_t code_size = 0;
  r = cubin ? nv.nvrtcGetCUBINSize(prog, &code_size) : nv.nvrtcGetPTXSize(prog, &code_size);
  if (r != BGNVRTC_SUCCESS) {
    rc = nvrtc_fail(r, cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize");
    goto done;
  }
  code = malloc(code_size + 1);
  if (!code) {
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_rtc_compile: out of host memory");
    goto done;
  }
  code[0] = 0;
  if (code_size) {
    r = cubin ? nv.nvrtcGetCUBIN(prog, code) : nv.nvrtcGetPTX(prog, code);
    if (r != BGNVRTC_SUCCESS) {
      rc = nvrtc_fail(r, cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX");
      goto done;
    }
  }
  /* PTX is text: its length leaves out the NUL that NVRTC counts (bg_rtc_make adds one back). */
  if (!cubin && code_size && code[code_size - 1] == 0) code_size--;
  if (code_size == 0) {
    rc = bg_set_error(BG_ERR_INVALID_IMAGE, "bg_rtc_compile(%s): NVRTC reported success but %s "
                      "is empty (%s)", name, cubin ? "the CUBIN" : "the PTX", argv[arch_at]);
    goto done;
  }
  rc = bg_rtc_make(dev, code, code_size, log, log_len, out);

done:
  if (prog) nv.nvrtcDestroyProgram(&prog);
  free(code);
  free(log);
  free(argv);
  free(buf);
  return rc;
}

static int32_t cu_rtc_version(bg_device* dev, int32_t* major, int32_t* minor) {
  (void)dev;
  int32_t rc = load_nvrtc();
  if (rc != BG_OK) return rc;
  int a = 0, b = 0;
  bgnvrtc_result r = nv.nvrtcVersion(&a, &b);
  if (r != BGNVRTC_SUCCESS) return nvrtc_fail(r, "nvrtcVersion");
  *major = a;
  *minor = b;
  return BG_OK;
}

/* ---- modules and kernels ---------------------------------------------------------------------- */
static int32_t cu_module_load(bg_device* dev, int32_t kind, const void* data, uint64_t n,
                              void** out) {
  if (kind != BG_IMAGE_PTX && kind != BG_IMAGE_CUBIN)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_module_load: image kind %d cannot be loaded on the cuda backend (want "
                        "BG_IMAGE_PTX or BG_IMAGE_CUBIN)",
                        kind);
  if (n == 0 || (kind == BG_IMAGE_PTX && ((const char*)data)[0] == 0))
    return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: the %s image is empty",
                        kind == BG_IMAGE_PTX ? "PTX" : "CUBIN");
  ENTER((cu_device*)dev);
  cu_module* m = calloc(1, sizeof *m);
  if (!m) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  /* PTX must end in a NUL for the driver; copy it when the caller's bytes do not. */
  const void* image = data;
  char* copy = NULL;
  if (kind == BG_IMAGE_PTX && n && ((const char*)data)[n - 1] != 0) {
    copy = malloc((size_t)n + 1);
    if (!copy) {
      free(m);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
    }
    memcpy(copy, data, (size_t)n);
    copy[n] = 0;
    image = copy;
  }
  char log[1024];
  log[0] = 0;
  bgcu_enum opts[2] = {BGCU_JIT_ERROR_LOG_BUFFER, BGCU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[2] = {log, (void*)(uintptr_t)sizeof log};
  bgcu_result r = cu.cuModuleLoadDataEx(&m->m, image, 2, opts, vals);
  free(copy);
  if (r != BGCUDA_SUCCESS) {
    free(m);
    log[sizeof log - 1] = 0;
    return bg_set_error(map_cu(r), "cuModuleLoadDataEx: %s (%u): %s%s%.*s", cu_err_name(r), r,
                        cu_err_text(r), log[0] ? ": " : "", log_head(log, strlen(log)), log);
  }
  pthread_mutex_init(&m->lock, NULL);
  m->dev = (cu_device*)dev;
  atomic_init(&m->refs, 1);
  bg_obj_init(m, BG_KIND_MODULE, dev);
  *out = m;
  return BG_OK;
}

static int32_t cu_module_unload(void* mp) {
  cu_module* m = mp;
  ENTER(CUDEV(m));
  /* The handles die now; the module itself when its last reference goes (module_unref). */
  pthread_mutex_lock(&m->lock);
  for (cu_kernel* k = m->kernels; k; k = k->next) bg_obj_kill(k);
  pthread_mutex_unlock(&m->lock);
  bg_obj_kill(m);
  bgcu_result r = module_unref(m);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuModuleUnload");
  return BG_OK;
}

static void cu_kernel_hold(void* kp) {
  atomic_fetch_add_explicit(&((cu_kernel*)kp)->mod->refs, 1, memory_order_relaxed);
}
static void cu_kernel_unhold(void* kp) {
  cu_module* m = ((cu_kernel*)kp)->mod;
  cu_guard g __attribute__((cleanup(cu_leave))) = {0, NULL};
  cu_enter(m->dev, &g);
  module_unref(m);
}

static int32_t cu_module_get_kernel(void* mp, const char* name, void** out) {
  cu_module* m = mp;
  ENTER(CUDEV(m));
  bgcu_function f = NULL;
  bgcu_result r = cu.cuModuleGetFunction(&f, m->m, name);
  if (r != BGCUDA_SUCCESS) return cu_fail_at(r, "cuModuleGetFunction", name);
  pthread_mutex_lock(&m->lock);
  cu_kernel* k = m->kernels;
  while (k && k->f != f) k = k->next;
  if (!k) {
    k = calloc(1, sizeof *k);
    if (!k) {
      pthread_mutex_unlock(&m->lock);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_get_kernel: out of host memory");
    }
    k->f = f;
    k->mod = m;
    k->persistent = strcmp(name, "bg_ring_persistent") == 0;
    int st = 0;
    if (cu.cuFuncGetAttribute(&st, BGCU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f) == BGCUDA_SUCCESS)
      k->static_shared = st;
    atomic_init(&k->dyn_limit, 0);
    bg_obj_init(k, BG_KIND_KERNEL, m->h.dev);
    k->next = m->kernels;
    m->kernels = k;
  }
  pthread_mutex_unlock(&m->lock);
  *out = k;
  return BG_OK;
}

static int32_t cu_kernel_max_threads(void* kp, int32_t* out) {
  cu_kernel* k = kp;
  ENTER(CUDEV(k));
  int v = 0;
  CALL(cuFuncGetAttribute, (&v, BGCU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->f));
  *out = v;
  return BG_OK;
}

static bgcu_result capture_info(bgcu_stream s, bgcu_enum* st, uint64_t* id,
                                const bgcu_graph_node** deps, size_t* nd, const char** call) {
  if (cu.cuStreamGetCaptureInfo_v3) {
    *call = "cuStreamGetCaptureInfo_v3";
    return cu.cuStreamGetCaptureInfo_v3(s, st, id, NULL, deps, NULL, nd);
  }
  *call = "cuStreamGetCaptureInfo_v2";
  return cu.cuStreamGetCaptureInfo_v2(s, st, id, NULL, deps, nd);
}

/* After a launch on a capturing stream: append the new kernel node to its capture's record. */
static int32_t record_kernel_node(cu_device* d, cu_stream* s, cu_kernel* k, uint32_t nargs) {
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  const bgcu_graph_node* deps = NULL;
  size_t nd = 0;
  const char* call;
  bgcu_result r = capture_info(s->s, &st, &id, &deps, &nd, &call);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, call);
  if (st != BGCU_STREAM_CAPTURE_STATUS_ACTIVE || nd == 0 || !deps) return BG_OK;
  int32_t rc = BG_OK;
  pthread_mutex_lock(&d->cap_lock);
  cu_capture* c = d->caps;
  while (c && c->id != id) c = c->next;
  if (c) {
    if (c->n == c->cap) {
      uint32_t ncap = c->cap ? c->cap * 2 : 16;
      bgcu_graph_node* nn = realloc(c->nodes, ncap * sizeof *nn);
      if (nn) c->nodes = nn;
      uint32_t* na = nn ? realloc(c->nargs, ncap * sizeof *na) : NULL;
      if (na) c->nargs = na;
      cu_module** nm = na ? realloc(c->mods, ncap * sizeof *nm) : NULL;
      if (nm) c->mods = nm;
      if (nn && na && nm) c->cap = ncap;
      else rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_launch: out of host memory recording a "
                             "captured kernel node");
    }
    if (rc == BG_OK) {
      c->nodes[c->n] = deps[0];
      c->nargs[c->n] = nargs;
      c->mods[c->n] = k->mod;
      atomic_fetch_add_explicit(&k->mod->refs, 1, memory_order_relaxed);
      c->n++;
    }
  }
  pthread_mutex_unlock(&d->cap_lock);
  return rc;
}

static void fill_params(void** kp, const uint64_t* args, uint32_t nargs) {
  for (uint32_t i = 0; i < nargs; i++) kp[i] = (void*)&args[i];
}

static int32_t cu_launch(void* kp, void* sp, const uint32_t grid[3], const uint32_t block[3],
                         uint32_t shared, const uint64_t* args, uint32_t nargs) {
  cu_kernel* k = kp;
  cu_stream* s = sp;
  cu_device* d = CUDEV(k);
  ENTER(d);
  void* params[256];
  if (nargs > 256)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_launch: %u arguments (max 256)", nargs);
  fill_params(params, args, nargs);
  /* More than 48 KiB of shared memory (static + dynamic) must be opted into per function. */
  if ((int)shared > atomic_load_explicit(&k->dyn_limit, memory_order_relaxed) &&
      (uint64_t)shared + (uint64_t)k->static_shared > 48u * 1024u && cu.cuFuncSetAttribute) {
    bgcu_result r = cu.cuFuncSetAttribute(k->f, BGCU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          (int)shared);
    if (r != BGCUDA_SUCCESS) return cu_fail_at(r, "cuFuncSetAttribute", "MAX_DYNAMIC_SHARED_SIZE_BYTES");
    atomic_store_explicit(&k->dyn_limit, (int)shared, memory_order_relaxed);
  }
  CALL(cuLaunchKernel, (k->f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                        s->s, nargs ? params : NULL, NULL));
  int capturing = 0;
  if (s->s && atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0) {
    bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
    capturing = cu.cuStreamIsCapturing(s->s, &st) != BGCUDA_SUCCESS ||
                st != BGCU_STREAM_CAPTURE_STATUS_NONE;
    if (capturing) return record_kernel_node(d, s, k, nargs);
  }
  /* A persistent kernel is resident until the host function queued behind it runs. */
  if (k->persistent) {
    atomic_fetch_add_explicit(&s->resident, 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&d->resident, 1, memory_order_acq_rel);
    if (cu.cuLaunchHostFunc(s->s, resident_end, s) != BGCUDA_SUCCESS) {
      atomic_fetch_sub_explicit(&d->resident, 1, memory_order_acq_rel);
      atomic_fetch_sub_explicit(&s->resident, 1, memory_order_acq_rel);
    }
  }
  return BG_OK;
}

/* ---- capture and graphs ----------------------------------------------------------------------- */
static int32_t cu_begin_capture(void* sp, int32_t mode) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  CALL(cuStreamBeginCapture_v2, (s->s, (bgcu_enum)mode));
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  const bgcu_graph_node* deps = NULL;
  size_t nd = 0;
  const char* call;
  int32_t rc = BG_OK;
  cu_capture* c = calloc(1, sizeof *c);
  bgcu_result r = capture_info(s->s, &st, &id, &deps, &nd, &call);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, call);
  else if (!c) rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_begin_capture: out of host memory");
  if (rc != BG_OK) {
    /* Undo the capture so the stream is usable again. */
    bgcu_graph g = NULL;
    if (cu.cuStreamEndCapture(s->s, &g) == BGCUDA_SUCCESS && g) cu.cuGraphDestroy(g);
    free(c);
    return rc;
  }
  c->id = id;
  c->origin = s->s;
  pthread_mutex_lock(&d->cap_lock);
  c->next = d->caps;
  d->caps = c;
  atomic_fetch_add_explicit(&d->ncaps, 1, memory_order_relaxed);
  pthread_mutex_unlock(&d->cap_lock);
  s->cap = c;
  return BG_OK;
}

static int32_t cu_end_capture(void* sp, void** out) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  cu_capture* c = s->cap;
  bgcu_graph g = NULL;
  char why[sizeof c->why];
  why[0] = 0;
  if (c) {
    pthread_mutex_lock(&d->cap_lock);
    memcpy(why, c->why, sizeof why);
    pthread_mutex_unlock(&d->cap_lock);
  }
  bgcu_result r = cu.cuStreamEndCapture(s->s, &g);
  if (r != BGCUDA_SUCCESS) {
    /* A capture that failed to end is over too (invalidated) unless this stream never began it. */
    if (c) {
      bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
      if (cu.cuStreamIsCapturing(s->s, &st) != BGCUDA_SUCCESS ||
          st == BGCU_STREAM_CAPTURE_STATUS_NONE) {
        detach_capture(d, c);
        free_capture(c);
        s->cap = NULL;
      }
    }
    /* Name the call that invalidated the capture, as the CPU backend does. */
    if (r == BGCUDA_ERROR_STREAM_CAPTURE_INVALIDATED && why[0])
      return bg_set_error(map_cu(r), "cuStreamEndCapture: %s (%u): capture invalidated by %s",
                          cu_err_name(r), r, why);
    return cu_fail(r, "cuStreamEndCapture");
  }
  if (c) {
    detach_capture(d, c);
    s->cap = NULL;
  }
  cu_graph* gr = calloc(1, sizeof *gr);
  if (!gr) {
    free_capture(c);
    if (g) cu.cuGraphDestroy(g);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_end_capture: out of host memory");
  }
  gr->g = g;
  atomic_init(&gr->refs, 1);
  if (c) {
    gr->nk = c->n;
    gr->knodes = c->nodes;
    gr->knargs = c->nargs;
    gr->kmods = c->mods;
    free(c);
  }
  bg_obj_init(gr, BG_KIND_GRAPH, &d->base);
  *out = gr;
  return BG_OK;
}

static int32_t cu_capture_status(void* sp, int32_t* out) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  CALL(cuStreamIsCapturing, (s->s, &st));
  *out = (int32_t)st;
  return BG_OK;
}

static int32_t graph_unref(cu_graph* g) {
  if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return BG_OK;
  bgcu_result r = g->g ? cu.cuGraphDestroy(g->g) : BGCUDA_SUCCESS;
  for (uint32_t i = 0; i < g->nk; i++) module_unref(g->kmods[i]);
  for (uint32_t i = 0; i < g->nev; i++) event_unref(g->evs[i]);
  free(g->evs);
  free(g->knodes);
  free(g->knargs);
  free(g->kmods);
  free(g);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuGraphDestroy");
  return BG_OK;
}

static int32_t cu_graph_destroy(void* gp) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  bg_obj_kill(g);
  return graph_unref(g);
}

static int32_t cu_graph_node_count(void* gp, uint32_t* nodes, uint32_t* kernel_nodes) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  size_t n = 0;
  CALL(cuGraphGetNodes, (g->g, NULL, &n));
  *nodes = (uint32_t)n;
  *kernel_nodes = 0;
  if (!n) return BG_OK;
  bgcu_graph_node* all = malloc(n * sizeof *all);
  if (!all) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_node_count: out of host memory");
  bgcu_result r = cu.cuGraphGetNodes(g->g, all, &n);
  uint32_t k = 0;
  for (size_t i = 0; r == BGCUDA_SUCCESS && i < n; i++) {
    bgcu_enum t = 0;
    r = cu.cuGraphNodeGetType(all[i], &t);
    if (r == BGCUDA_SUCCESS && t == BGCU_GRAPH_NODE_TYPE_KERNEL) k++;
  }
  free(all);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuGraphGetNodes/cuGraphNodeGetType");
  *nodes = (uint32_t)n;
  *kernel_nodes = k;
  return BG_OK;
}

static int32_t exec_free(cu_exec* x) {
  bgcu_result r = x->x ? cu.cuGraphExecDestroy(x->x) : BGCUDA_SUCCESS;
  int32_t rc = r != BGCUDA_SUCCESS ? cu_fail(r, "cuGraphExecDestroy") : BG_OK;
  if (x->graph) {
    int32_t grc = graph_unref(x->graph);
    if (rc == BG_OK) rc = grc;
  }
  free(x->knodes);
  free(x->knargs);
  free(x->params);
  free(x);
  return rc;
}

static int32_t cu_graph_instantiate(void* gp, void** out) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  cu_exec* x = calloc(1, sizeof *x);
  if (!x) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
  bgcu_result r = cu.cuGraphInstantiateWithFlags(&x->x, g->g, 0);
  if (r != BGCUDA_SUCCESS) {
    free(x);
    return cu_fail(r, "cuGraphInstantiateWithFlags");
  }
  atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
  x->graph = g;
  int32_t rc = BG_OK;
  if (g->nk) {
    x->knodes = malloc(g->nk * sizeof *x->knodes);
    x->knargs = malloc(g->nk * sizeof *x->knargs);
    if (!x->knodes || !x->knargs) {
      exec_free(x);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
    }
    memcpy(x->knodes, g->knodes, g->nk * sizeof *x->knodes);
    memcpy(x->knargs, g->knargs, g->nk * sizeof *x->knargs);
    x->nk = g->nk;
    if (cu.cuGraphKernelNodeGetParams_v2) {
      x->params = calloc(g->nk, sizeof *x->params);
      if (!x->params) {
        exec_free(x);
        return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
      }
      for (uint32_t i = 0; i < g->nk; i++) {
        r = cu.cuGraphKernelNodeGetParams_v2(x->knodes[i], &x->params[i]);
        if (r != BGCUDA_SUCCESS) {
          rc = cu_fail(r, "cuGraphKernelNodeGetParams_v2");
          exec_free(x);
          return rc;
        }
        /* The driver's kernelParams pointer is not ours to keep. */
        x->params[i].kernelParams = NULL;
        x->params[i].extra = NULL;
      }
    }
  }
  bg_obj_init(x, BG_KIND_EXEC, g->h.dev);
  *out = x;
  return BG_OK;
}

static int32_t cu_graph_exec_destroy(void* xp) {
  cu_exec* x = xp;
  ENTER(CUDEV(x));
  bg_obj_kill(x);
  return exec_free(x);
}

static int32_t cu_graph_upload(void* xp, void* sp) {
  ENTER(CUDEV(xp));
  CALL(cuGraphUpload, (((cu_exec*)xp)->x, ((cu_stream*)sp)->s));
  return BG_OK;
}

static int32_t cu_graph_launch(void* xp, void* sp) {
  ENTER(CUDEV(xp));
  CALL(cuGraphLaunch, (((cu_exec*)xp)->x, ((cu_stream*)sp)->s));
  return BG_OK;
}

static int32_t cu_graph_exec_set_kernel_args(void* xp, uint32_t index, const uint64_t* args,
                                             uint32_t nargs) {
  cu_exec* x = xp;
  if (index >= x->nk)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: no kernel node %u (the graph has %u: "
                        "launches of its command list, or captured through bg_launch)",
                        index, x->nk);
  if (nargs != x->knargs[index])
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: kernel node %u was launched with %u "
                        "arguments, got %u",
                        index, x->knargs[index], nargs);
  if (!x->params || !cu.cuGraphExecKernelNodeSetParams_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_graph_exec_set_kernel_args: the CUDA driver lacks "
                        "cuGraphExecKernelNodeSetParams_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(x));
  void* params[256];
  if (nargs > 256)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_exec_set_kernel_args: %u arguments", nargs);
  fill_params(params, args, nargs);
  bgcu_kernel_node_params p = x->params[index];
  p.kernelParams = nargs ? params : NULL;
  p.extra = NULL;
  CALL(cuGraphExecKernelNodeSetParams_v2, (x->x, x->knodes[index], &p));
  return BG_OK;
}

/* ---- graphs from command lists ------------------------------------------------------------------
 * Built node by node (cuGraphAdd*Node), each node depending on the one before it: the list's
 * order is the graph's. Launches become kernel nodes (numbered in list order for
 * bg_graph_exec_set_kernel_args), copies memcpy nodes, memsets memset nodes, event records and
 * waits event nodes; barriers and empty copies add nothing. Without the construction calls, or
 * for a list naming a persistent kernel (its residency is tracked per launch), the core's
 * generic graph replays the list instead. */
static int graph_calls_present(void) {
  return cu.cuGraphCreate && cu.cuGraphAddKernelNode_v2 && cu.cuGraphAddMemcpyNode &&
         cu.cuGraphAddMemsetNode && cu.cuGraphAddEventRecordNode && cu.cuGraphAddEventWaitNode &&
         cu.cuGraphKernelNodeGetParams_v2;
}

static int32_t cu_graph_from_commands(bg_device* dev, const uint8_t* p, uint64_t len, void** out) {
  cu_device* d = (cu_device*)dev;
  const char* fn = "bg_graph_from_commands";
  bg_cmd_iter it;
  bg_cmd c;
  uint32_t nk = 0, nev = 0;
  int generic = !graph_calls_present();
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op == BG_CMD_LAUNCH) {
      nk++;
      if (((cu_kernel*)c.u.launch.kernel)->persistent) generic = 1;
    }
    if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) nev++;
  }
  if (generic) return bg_cmdgraph_create(dev, p, len, out);
  ENTER(d);
  cu_graph* gr = calloc(1, sizeof *gr);
  if (gr) {
    gr->knodes = calloc(nk ? nk : 1, sizeof *gr->knodes);
    gr->knargs = calloc(nk ? nk : 1, sizeof *gr->knargs);
    gr->kmods = calloc(nk ? nk : 1, sizeof *gr->kmods);
    gr->evs = calloc(nev ? nev : 1, sizeof *gr->evs);
  }
  if (!gr || !gr->knodes || !gr->knargs || !gr->kmods || !gr->evs) {
    if (gr) {
      free(gr->knodes);
      free(gr->knargs);
      free(gr->kmods);
      free(gr->evs);
    }
    free(gr);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  atomic_init(&gr->refs, 1);
  int32_t rc = BG_OK;
  bgcu_result r = cu.cuGraphCreate(&gr->g, 0);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuGraphCreate");
  bgcu_graph_node prev = NULL, node = NULL;
  void* params[256];
  bg_cmd_iter_init(&it, p, len);
  while (rc == BG_OK && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    const char* call = NULL;
    node = NULL;
    switch (c.op) {
      case BG_CMD_LAUNCH: {
        cu_kernel* k = c.u.launch.kernel;
        uint32_t shared = c.u.launch.shared;
        if ((int)shared > atomic_load_explicit(&k->dyn_limit, memory_order_relaxed) &&
            (uint64_t)shared + (uint64_t)k->static_shared > 48u * 1024u && cu.cuFuncSetAttribute) {
          r = cu.cuFuncSetAttribute(k->f, BGCU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)shared);
          if (r != BGCUDA_SUCCESS) {
            rc = cu_fail_at(r, "cuFuncSetAttribute", "MAX_DYNAMIC_SHARED_SIZE_BYTES");
            break;
          }
          atomic_store_explicit(&k->dyn_limit, (int)shared, memory_order_relaxed);
        }
        fill_params(params, c.u.launch.args, c.u.launch.nargs);
        bgcu_kernel_node_params kp;
        memset(&kp, 0, sizeof kp);
        kp.func = k->f;
        kp.gridDimX = c.u.launch.grid[0];
        kp.gridDimY = c.u.launch.grid[1];
        kp.gridDimZ = c.u.launch.grid[2];
        kp.blockDimX = c.u.launch.block[0];
        kp.blockDimY = c.u.launch.block[1];
        kp.blockDimZ = c.u.launch.block[2];
        kp.sharedMemBytes = shared;
        kp.kernelParams = c.u.launch.nargs ? params : NULL;
        r = cu.cuGraphAddKernelNode_v2(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &kp);
        call = "cuGraphAddKernelNode_v2";
        if (r == BGCUDA_SUCCESS) {
          gr->knodes[gr->nk] = node;
          gr->knargs[gr->nk] = c.u.launch.nargs;
          gr->kmods[gr->nk++] = k->mod;
          atomic_fetch_add_explicit(&k->mod->refs, 1, memory_order_relaxed);
        }
        break;
      }
      case BG_CMD_COPY:
      case BG_CMD_COPY_HTOD:
      case BG_CMD_COPY_DTOH: {
        bgcu_memcpy3d m;
        memset(&m, 0, sizeof m);
        m.Height = m.Depth = 1;
        m.srcMemoryType = m.dstMemoryType = BGCU_MEMORYTYPE_DEVICE;
        if (c.op == BG_CMD_COPY) {
          m.dstDevice = c.u.copy.dst;
          m.srcDevice = c.u.copy.src;
          m.WidthInBytes = c.u.copy.bytes;
        } else if (c.op == BG_CMD_COPY_HTOD) {
          m.dstDevice = c.u.htod.dst;
          m.srcMemoryType = BGCU_MEMORYTYPE_HOST;
          m.srcHost = c.u.htod.src;
          m.WidthInBytes = c.u.htod.bytes;
        } else {
          m.dstMemoryType = BGCU_MEMORYTYPE_HOST;
          m.dstHost = c.u.dtoh.dst;
          m.srcDevice = c.u.dtoh.src;
          m.WidthInBytes = c.u.dtoh.bytes;
        }
        if (!m.WidthInBytes) break;
        r = cu.cuGraphAddMemcpyNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &m, d->ctx);
        call = "cuGraphAddMemcpyNode";
        break;
      }
      case BG_CMD_MEMSET: {
        if (!c.u.fill.count) break;
        bgcu_memset_params m;
        memset(&m, 0, sizeof m);
        m.dst = c.u.fill.dst;
        m.value = c.u.fill.pattern;
        m.elementSize = c.u.fill.elem_size;
        m.width = c.u.fill.count;
        m.height = 1;
        r = cu.cuGraphAddMemsetNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &m, d->ctx);
        call = "cuGraphAddMemsetNode";
        break;
      }
      case BG_CMD_EVENT_RECORD:
      case BG_CMD_EVENT_WAIT: {
        cu_event* e = c.u.event.event;
        if (c.op == BG_CMD_EVENT_RECORD) {
          r = cu.cuGraphAddEventRecordNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, e->e);
          call = "cuGraphAddEventRecordNode";
        } else {
          r = cu.cuGraphAddEventWaitNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, e->e);
          call = "cuGraphAddEventWaitNode";
        }
        if (r == BGCUDA_SUCCESS) {
          atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
          gr->evs[gr->nev++] = e;
        }
        break;
      }
      default: break; /* a barrier: the nodes are in a chain already */
    }
    if (rc == BG_OK && call && r != BGCUDA_SUCCESS) rc = cu_fail_at(r, call, fn);
    if (node) prev = node;
  }
  if (rc != BG_OK) {
    graph_unref(gr);
    return rc;
  }
  bg_obj_init(gr, BG_KIND_GRAPH, dev);
  *out = gr;
  return BG_OK;
}

/* ---- rings ------------------------------------------------------------------------------------ */
static int32_t cu_ring_alloc(bg_device* dev, uint64_t bytes, void** host, bg_devptr* dptr) {
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

static int32_t cu_ring_free(bg_device* dev, void* host) {
  ENTER((cu_device*)dev);
  if (blocked((cu_device*)dev) && defer_release((cu_device*)dev, 1, 0, host)) return BG_OK;
  CALL(cuMemFreeHost, (host));
  return BG_OK;
}

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

static int32_t cu_mempool_create(bg_device* dev, uint64_t threshold, void** out) {
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
  bg_obj_init(p, BG_KIND_POOL, dev);
  *out = p;
  return BG_OK;
}

static int32_t cu_mempool_default(bg_device* dev, void** out) {
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

static int32_t cu_mempool_destroy(void* pp) {
  cu_pool* p = pp;
  cu_device* d = CUDEV(p);
  if (p == d->defpool)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mempool_destroy: the device's default pool belongs to the device");
  ENTER(d);
  bgcu_result r = cu.cuMemPoolDestroy(p->p); /* blocks still out stay valid until freed */
  bg_obj_kill(p);
  free(p);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuMemPoolDestroy");
  return BG_OK;
}

static int32_t cu_mempool_set_threshold(void* pp, uint64_t threshold) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  uint64_t t = threshold;
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
  return BG_OK;
}

static int32_t cu_mempool_trim(void* pp, uint64_t keep) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  CALL(cuMemPoolTrimTo, (p->p, (size_t)keep));
  return BG_OK;
}

static int32_t cu_mempool_stats(void* pp, uint64_t out[4]) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  static const bgcu_enum attrs[4] = {
      BGCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, BGCU_MEMPOOL_ATTR_USED_MEM_CURRENT,
      BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, BGCU_MEMPOOL_ATTR_USED_MEM_HIGH};
  for (int i = 0; i < 4; i++) CALL(cuMemPoolGetAttribute, (p->p, attrs[i], &out[i]));
  return BG_OK;
}

static int32_t cu_mempool_reset_peak(void* pp) {
  cu_pool* p = pp;
  ENTER(CUDEV(p));
  uint64_t zero = 0; /* setting a high-water mark to 0 resets it to the current value */
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  CALL(cuMemPoolSetAttribute, (p->p, BGCU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  return BG_OK;
}

static int32_t cu_mem_alloc_async(void* sp, void* pool, uint64_t bytes, bg_devptr* out) {
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

static int32_t cu_mem_free_async(void* sp, bg_devptr p) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  int32_t rc = pools_present(d, "bg_mem_free_async");
  if (rc) return rc;
  CALL(cuMemFreeAsync, (p, s->s));
  return BG_OK;
}

/* ---- memory and events shared between processes (cuIpc*) ---------------------------------------
 * Every cuMemAlloc allocation can be exported (no mem_alloc_shareable: the core uses mem_alloc).
 * The payload of bungpu's handle is the driver's CUipc*Handle. The driver itself refuses an open
 * in the exporting process (CUDA_ERROR_INVALID_CONTEXT). The mappings opened are counted per
 * device, so closing anything else is an error before any wait. A close waits for the context's
 * work first, so queued work that reads the mapping finishes, as a free would; while that could
 * wait forever it is queued like a free (see blocked). */
static int32_t ipc_present(const char* fn) {
  if (!cu.cuIpcGetMemHandle || !cu.cuIpcOpenMemHandle_v2 || !cu.cuIpcCloseMemHandle ||
      !cu.cuIpcGetEventHandle || !cu.cuIpcOpenEventHandle || !cu.cuMemGetAddressRange_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: the CUDA driver lacks the cuIpc* entry points", fn);
  return BG_OK;
}

static int32_t cu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes) {
  int32_t rc = ipc_present("bg_ipc_mem_export");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_deviceptr base = 0;
  size_t size = 0;
  CALL(cuMemGetAddressRange_v2, (&base, &size, p));
  if (base != p)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_mem_export: 0x%llx is not the start of an allocation (it lies %llu "
                        "bytes into one)", (unsigned long long)p, (unsigned long long)(p - base));
  bgcu_ipc_handle h;
  CALL(cuIpcGetMemHandle, (&h, p));
  memcpy(payload, &h, sizeof h);
  *bytes = size;
  return BG_OK;
}

static int32_t cu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                               bg_devptr* out) {
  (void)pid, (void)bytes;
  int32_t rc = ipc_present("bg_ipc_mem_open");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_ipc_handle h;
  memcpy(&h, payload, sizeof h);
  bgcu_deviceptr p = 0;
  CALL(cuIpcOpenMemHandle_v2, (&p, h, BGCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  cu_device* d = (cu_device*)dev;
  pthread_mutex_lock(&d->def_lock);
  cu_ipc_map* m = d->maps;
  while (m && m->p != p) m = m->next;
  if (!m && (m = calloc(1, sizeof *m))) {
    m->p = p;
    m->next = d->maps;
    d->maps = m;
  }
  if (m) m->opens++;
  pthread_mutex_unlock(&d->def_lock);
  if (!m) {
    cu.cuIpcCloseMemHandle(p);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_mem_open: out of host memory");
  }
  *out = p;
  return BG_OK;
}

/* Only a mapping bg_ipc_mem_open returned on this device (else BG_ERR_INVALID_VALUE at once).
 * Closed after the context's work, or queued while that could wait forever (see blocked). */
static int32_t cu_ipc_mem_close(bg_device* dev, bg_devptr p) {
  int32_t rc = ipc_present("bg_ipc_mem_close");
  if (rc) return rc;
  cu_device* d = (cu_device*)dev;
  ENTER(d);
  pthread_mutex_lock(&d->def_lock);
  cu_ipc_map** m = &d->maps;
  while (*m && (*m)->p != p) m = &(*m)->next;
  int found = *m != NULL;
  if (found && --(*m)->opens == 0) {
    cu_ipc_map* gone = *m;
    *m = gone->next;
    free(gone);
  }
  pthread_mutex_unlock(&d->def_lock);
  if (!found)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_mem_close: 0x%llx is not a mapping bg_ipc_mem_open returned on "
                        "this device (or it was closed already)", (unsigned long long)p);
  if (blocked(d) && defer_release(d, 3, p, NULL)) return BG_OK;
  bgcu_result r = ipc_close_now(p);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuIpcCloseMemHandle");
  return BG_OK;
}

static int32_t cu_ipc_event_export(void* ep, uint8_t* payload) {
  cu_event* e = ep;
  int32_t rc = ipc_present("bg_ipc_event_export");
  if (rc) return rc;
  ENTER(CUDEV(e));
  bgcu_ipc_handle h;
  CALL(cuIpcGetEventHandle, (&h, e->e));
  memcpy(payload, &h, sizeof h);
  return BG_OK;
}

static int32_t cu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out) {
  (void)pid;
  int32_t rc = ipc_present("bg_ipc_event_open");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_ipc_handle h;
  memcpy(&h, payload, sizeof h);
  cu_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_event_open: out of host memory");
  bgcu_result r = cu.cuIpcOpenEventHandle(&e->e, h);
  if (r != BGCUDA_SUCCESS) {
    free(e);
    return cu_fail(r, "cuIpcOpenEventHandle");
  }
  atomic_init(&e->refs, 1);
  bg_obj_init(e, BG_KIND_EVENT, dev);
  *out = e;
  return BG_OK;
}

/* ---- the table -------------------------------------------------------------------------------- */
extern const bg_coll_ops bg_cuda_coll_ops; /* nccl.c */
static const bg_ops cu_ops = {
    .name = "cuda",
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

/* ---- for nccl.c (declared in nccl_api.h) ------------------------------------------------------ */
int32_t bgcu_nccl_enter(bg_device* dev, int* cudev) {
  cu_device* d = (cu_device*)dev;
  if (cudev) *cudev = d->cudev;
  CALL(cuCtxSetCurrent, (d->ctx));
  return BG_OK;
}

struct CUstream_st* bgcu_stream_handle(void* s) { return ((cu_stream*)s)->s; }
