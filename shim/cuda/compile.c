/*
 * cuda/compile.c: runtime compilation with NVRTC, loaded on first use (BUNGPU_NVRTC, else the
 * NVRTC of the driver's major version, then any), its builtins preloaded beside it; the options
 * and architecture handed to it, CUBIN or PTX out, and its log in the error. log_head is
 * module.c's too.
 *
 * Calls: driver.c, base.c.
 */
#include "cuda_internal.h"

#include <dlfcn.h>

typedef struct nvrtc_api {
#define BGCU_FIELD(ret, name, params) PFN_bg_##name name;
  BGNVRTC_FUNCS(BGCU_FIELD)
  BGNVRTC_FUNCS_OPTIONAL(BGCU_FIELD)
#undef BGCU_FIELD
} nvrtc_api;

static nvrtc_api nv;
static _Atomic int nvrtc_loaded;
#if !defined(__APPLE__)
static pthread_mutex_t nvrtc_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

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
                        "libnvrtc.so.11.2, /usr/local/cuda/lib64/libnvrtc.so (dlopen: %s). NVRTC comes "
                        "with the CUDA toolkit, or alone from pip (pip install nvidia-cuda-nvrtc-cu12: "
                        "site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12); set BUNGPU_NVRTC to the "
                        "path of the libnvrtc.so it installs",
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
int log_head(const char* log, size_t len) {
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

/* NVIDIA's compatibility rules: a CUBIN loads on a driver of its toolkit's major version or newer
 * (minor version compatibility within a major), PTX on a driver whose PTX ISA is at least the
 * PTX's .version. An NVRTC of a newer major than the driver (NVRTC 13 on a 12.x driver) writes
 * neither in a form that driver loads, and has no option for an older PTX ISA, so the compile is
 * refused here with both versions and what to do, rather than at the load with a bare
 * CUDA_ERROR_INVALID_IMAGE. BG_OK when the versions agree or either is unknown. */
static int32_t check_driver_clash(const char* name) {
  int nmaj = 0, nmin = 0, drv = 0;
  if (nv.nvrtcVersion(&nmaj, &nmin) != BGNVRTC_SUCCESS || !cu.cuDriverGetVersion ||
      cu.cuDriverGetVersion(&drv) != BGCUDA_SUCCESS || drv < 1000 || nmaj <= drv / 1000)
    return BG_OK;
  int dmaj = drv / 1000, dmin = drv % 1000 / 10;
  return bg_set_error(
      BG_ERR_UNSUPPORTED_PTX_VERSION,
      "bg_rtc_compile(%s): NVRTC %d.%d%s%s is newer than the CUDA driver (CUDA %d.%d): a CUBIN "
      "needs a driver of its CUDA major version or newer, and NVRTC %d's PTX has an ISA the %d.%d "
      "driver cannot JIT, so nothing it compiles would load. Use an NVRTC of CUDA %d (the "
      "toolkit's, or pip install nvidia-cuda-nvrtc-cu%d, then BUNGPU_NVRTC=<that libnvrtc.so.%d>), "
      "or update the NVIDIA driver to one for CUDA %d",
      name, nmaj, nmin,
#if !defined(__APPLE__)
      nvrtc_path[0] ? " from " : "", nvrtc_path[0] ? nvrtc_path : "",
#else
      "", "",
#endif
      dmaj, dmin, nmaj, dmaj, dmin, dmaj, dmaj, dmaj, nmaj);
}

/* Compile `src` for the device:
 *  - CUBIN for the device's own sm_XY when want_cubin (what Program.compile asks for): a CUBIN
 *    never meets the driver's PTX ISA limit, so a newer NVRTC of the driver's CUDA major still
 *    works (minor version compatibility; a newer major is refused, check_driver_clash). When
 *    this NVRTC does not know sm_XY (older than the GPU) it falls back to PTX for the newest
 *    architecture it knows, which the driver JIT-compiles. A caller's own --gpu-architecture is
 *    kept: compute_XY gives PTX, sm_XY a CUBIN.
 *  - -default-device (functions without an execution space are __device__, so helpers written
 *    for C compile unchanged) and -I for the toolkit's include folders, unless given.
 * The result's code starts with "\x7fELF" for a CUBIN; PTX is text. An empty image is an error.
 * An NVRTC of a newer CUDA major than the driver is refused first (check_driver_clash). */
int32_t cu_rtc_compile(bg_device* dev, const char* src, const char* name,
                       const char* options, int32_t want_cubin, void** out) {
  cu_device* d = (cu_device*)dev;
  int32_t rc = load_nvrtc();
  if (rc != BG_OK) return rc;
  if ((rc = check_driver_clash(name)) != BG_OK) return rc;

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

int32_t cu_rtc_version(bg_device* dev, int32_t* major, int32_t* minor) {
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
