/*
 * cuda/module.c: modules (cuModuleLoadDataEx of PTX or CUBIN) and their kernels, and launches:
 * the shared memory opt-in past 48 KiB, the kernel node a launch on a capturing stream appends to
 * its capture (capture.c), and the residency of a persistent ring kernel (release.c).
 *
 * Calls: driver.c, compile.c, release.c, context.c, capture.c, base.c.
 */
#include "cuda_internal.h"

/* ---- modules and kernels ---------------------------------------------------------------------- */
int32_t cu_module_load(bg_device* dev, int32_t kind, const void* data, uint64_t n,
                       void** out) {
  if (kind != BG_IMAGE_PTX && kind != BG_IMAGE_CUBIN)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_module_load: image kind %d cannot be loaded on the cuda backend (want "
                        "BG_IMAGE_PTX or BG_IMAGE_CUBIN)",
                        kind);
  if (n == 0 || (kind == BG_IMAGE_PTX && ((const char*)data)[0] == 0))
    return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: the %s image is empty",
                        kind == BG_IMAGE_PTX ? "PTX" : "CUBIN");
  /* The driver can wait for the device to drain before it loads a module (reported for
   * cuModuleLoadDataEx and cuLibraryLoadData); a resident persistent kernel never drains. */
  if (is_resident((cu_device*)dev))
    return bg_set_error(BG_ERR_ILLEGAL_STATE,
                        "bg_module_load: a persistent ring kernel is resident on the device, and loading "
                        "a module can wait for the device to drain, which it never does while that kernel "
                        "runs: compile and prepare before launching the ring kernel, or stop it first");
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
    /* A CUBIN of a newer CUDA major, or PTX of a newer ISA, than the driver: say which driver,
     * since a cached image (compiled when another driver was installed) meets it here. */
    int drv = 0;
    char hint[300] = "";
    if ((r == BGCUDA_ERROR_UNSUPPORTED_PTX_VERSION || (r == BGCUDA_ERROR_INVALID_IMAGE && kind == BG_IMAGE_CUBIN)) &&
        cu.cuDriverGetVersion && cu.cuDriverGetVersion(&drv) == BGCUDA_SUCCESS && drv >= 1000)
      snprintf(hint, sizeof hint, " (the driver is CUDA %d.%d: an image from a newer CUDA toolkit or NVRTC "
               "than that is refused; compile with an NVRTC of CUDA %d, BUNGPU_NVRTC, or update the driver)",
               drv / 1000, drv % 1000 / 10, drv / 1000);
    return bg_set_error(map_cu(r), "cuModuleLoadDataEx: %s (%u): %s%s%.*s%s", cu_err_name(r), r,
                        cu_err_text(r), log[0] ? ": " : "", log_head(log, strlen(log)), log, hint);
  }
  pthread_mutex_init(&m->lock, NULL);
  m->dev = (cu_device*)dev;
  atomic_init(&m->refs, 1);
  bg_obj_init(m, BG_KIND_MODULE, dev);
  *out = m;
  return BG_OK;
}

int32_t cu_module_unload(void* mp) {
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

void cu_kernel_hold(void* kp) {
  atomic_fetch_add_explicit(&((cu_kernel*)kp)->mod->refs, 1, memory_order_relaxed);
}
void cu_kernel_unhold(void* kp) {
  cu_module* m = ((cu_kernel*)kp)->mod;
  cu_guard g __attribute__((cleanup(cu_leave))) = {0, NULL};
  cu_enter(m->dev, &g);
  module_unref(m);
}

int32_t cu_module_get_kernel(void* mp, const char* name, void** out) {
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

int32_t cu_kernel_max_threads(void* kp, int32_t* out) {
  cu_kernel* k = kp;
  ENTER(CUDEV(k));
  int v = 0;
  CALL(cuFuncGetAttribute, (&v, BGCU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->f));
  *out = v;
  return BG_OK;
}

static void resident_end(void* p) {
  /* a driver thread: no CUDA calls here */
  cu_stream* s = p;
  atomic_fetch_sub_explicit(&s->resident, 1, memory_order_release);
  atomic_fetch_sub_explicit(&CUDEV(s)->resident, 1, memory_order_release);
}

void fill_params(void** kp, const uint64_t* args, uint32_t nargs) {
  for (uint32_t i = 0; i < nargs; i++) kp[i] = (void*)&args[i];
}

int32_t cu_launch(void* kp, void* sp, const uint32_t grid[3], const uint32_t block[3],
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
