/*
 * metal/runtime.c: the Objective-C runtime and Metal loaded at run time (once, by mtl_rt_ready),
 * the selectors, and the small helpers every file of the backend uses on them. Off macOS it
 * is empty.
 *
 * Calls: nothing.
 */
#include "metal.h"

#if defined(__APPLE__)

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
mtl_runtime mtl_rt;
mtl_selectors mtl_S;

/* An NSString (+1) from UTF-8 bytes. */
oc_id mtl_ns_str(const char* p, size_t n) {
  oc_id a = m_id(mtl_rt.NSString, mtl_S.alloc);
  return a ? m_id_ptr_u64_u64(a, mtl_S.initWithBytes, p, n, NS_UTF8) : NULL;
}

/* An NSError's localizedDescription, copied into buf. */
const char* mtl_err_text(oc_id err, char* buf, size_t cap) {
  oc_id d = err ? m_id(err, mtl_S.localizedDescription) : NULL;
  const char* c = d ? (const char*)m_ptr(d, mtl_S.utf8) : NULL;
  snprintf(buf, cap, "%s", c ? c : "unknown error");
  return buf;
}

#define LOADFN(dst, handle, name)                                                               \
  do {                                                                                          \
    void* p_ = (handle) ? dlsym((handle), (name)) : NULL;                                       \
    memcpy(&(dst), &p_, sizeof p_);                                                             \
    if (!p_) missing = (name);                                                                  \
  } while (0)

static void rt_fail(const char* what, const char* path) {
  const char* e = dlerror();
  mtl_rt.rc = BG_ERR_BACKEND_UNAVAILABLE;
  snprintf(mtl_rt.msg, sizeof mtl_rt.msg, "Metal: %s %s failed (%s); tried %s, %s, %s", what, path,
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
  LOADFN(mtl_rt.get_class, objc, "objc_getClass");
  LOADFN(mtl_rt.sel, objc, "sel_registerName");
  LOADFN(mtl_rt.send, objc, "objc_msgSend");
#if defined(__x86_64__)
  LOADFN(mtl_rt.send_stret, objc, "objc_msgSend_stret");
#endif
  LOADFN(mtl_rt.pool_push, objc, "objc_autoreleasePoolPush");
  LOADFN(mtl_rt.pool_pop, objc, "objc_autoreleasePoolPop");
  if (missing) { rt_fail("dlsym", missing); return; }
  LOADFN(mtl_rt.create_default, metal, "MTLCreateSystemDefaultDevice");
  LOADFN(mtl_rt.copy_all, metal, "MTLCopyAllDevices");
  if (!mtl_rt.create_default && !mtl_rt.copy_all) { rt_fail("dlsym", "MTLCopyAllDevices"); return; }
  LOADFN(mtl_rt.dd_create, RTLD_DEFAULT, "dispatch_data_create"); /* only BG_IMAGE_METALLIB needs it */
  LOADFN(mtl_rt.dd_release, RTLD_DEFAULT, "dispatch_release");
  mtl_rt.NSString = mtl_rt.get_class("NSString");
  mtl_rt.NSProcessInfo = mtl_rt.get_class("NSProcessInfo");
  if (!mtl_rt.NSString) { rt_fail("objc_getClass", "NSString"); return; }
#define X(f, s) mtl_S.f = mtl_rt.sel(s);
  SELECTORS(X)
#undef X
  mtl_rt.rc = BG_OK;
}

int32_t mtl_rt_ready(void) {
  pthread_once(&rt_once, rt_load);
  return mtl_rt.rc;
}

#endif /* __APPLE__ */
