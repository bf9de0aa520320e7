/*
 * cuda/driver.c: the CUDA driver, loaded at run time: dlopen of libcuda (BUNGPU_LIBCUDA, else
 * libcuda.so.1, libcuda.so) once per process, its entry points into `cu` (cuda_api.h's X-macros),
 * cuInit, and the probe that counts devices; a driver status as a bg status and its name and
 * text. The bottom of the backend.
 *
 * Calls: nothing.
 */
#include "cuda_internal.h"

#include <dlfcn.h>

cu_api cu;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state; /* 0: not tried, 1: loaded, -1: failed (and stays so) */
static int32_t load_rc;
char load_msg[512];
static char load_name[256];
/* CUDA was initialised in this process before bungpu's cuInit (by another library): the settings
 * bungpu makes before cuInit did not apply. */
static int preinit;

/* ---- errors ----------------------------------------------------------------------------------- */
int32_t map_cu(bgcu_result rc) {
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

const char* cu_err_name(bgcu_result rc) {
  const char* s = NULL;
  if (cu.cuGetErrorName && cu.cuGetErrorName(rc, &s) == BGCUDA_SUCCESS && s) return s;
  return "CUDA_ERROR_UNRECOGNIZED";
}

const char* cu_err_text(bgcu_result rc) {
  const char* s = NULL;
  if (cu.cuGetErrorString && cu.cuGetErrorString(rc, &s) == BGCUDA_SUCCESS && s) return s;
  return "no description";
}

static void put_msg(char* msg, uint64_t cap, const char* text) {
  if (msg && cap) snprintf(msg, (size_t)cap, "%s", text);
}

/* ---- loading libcuda --------------------------------------------------------------------------- */
#if !defined(__APPLE__)

void* open_first(const char* const* names, size_t n, char* err, size_t cap,
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
  int before = 0;
  preinit = cu.cuDeviceGetCount(&before) == BGCUDA_SUCCESS; /* NOT_INITIALIZED until someone's cuInit */
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

int32_t load_driver(void) {
  pthread_mutex_lock(&load_lock);
  if (load_state == 0) {
    load_rc = load_driver_locked();
    load_state = load_rc == BG_OK ? 1 : -1;
  }
  int32_t rc = load_rc;
  pthread_mutex_unlock(&load_lock);
  return rc;
}

/* ---- backend entry points --------------------------------------------------------------------- */
int32_t cu_probe(int32_t* count, char* msg, uint64_t cap) {
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
  snprintf(text, sizeof text, "%s: CUDA driver %d.%d, %d device(s)%s", load_name, v / 1000,
           (v % 1000) / 10, n,
           preinit ? "; CUDA was initialised before bungpu (another library): its "
                     "CUDA_MODULE_LOADING=EAGER and CUDA_DEVICE_MAX_CONNECTIONS=32 did not apply "
                     "(set them before CUDA loads)"
                   : "");
  put_msg(msg, cap, text);
  *count = n;
  return BG_OK;
}
