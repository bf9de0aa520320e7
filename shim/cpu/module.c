/*
 * cpu/module.c: modules and kernels. A module is a dlopen'd shared library (or a table of
 * functions compiled in memory); a kernel is a dlsym'd `void fn(const bg_cpu_ctx*)`.
 *
 * Calls: queue.c, base.c.
 */
#include "cpu.h"

#include <dlfcn.h>

/* ---- modules and kernels ----------------------------------------------------------------- */
static const char* image_name(int32_t kind) {
  switch (kind) {
    case BG_IMAGE_SHARED_LIBRARY: return "SHARED_LIBRARY";
    case BG_IMAGE_PTX: return "PTX";
    case BG_IMAGE_CUBIN: return "CUBIN";
    case BG_IMAGE_MSL_SOURCE: return "MSL_SOURCE";
    case BG_IMAGE_METALLIB: return "METALLIB";
    case BG_IMAGE_SYMBOLS: return "SYMBOLS";
  }
  return "unknown";
}

static void module_free(void* mv);

/* A table of {name, function} pairs compiled in memory by the caller (Bun's TinyCC). */
static int32_t load_symbols(bg_device* dev, const void* data, uint64_t n, void** out) {
  if (n == 0 || n % 16 || n / 16 > 65536)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_module_load: a symbol table is 16-byte {name, function} pairs, got %llu bytes",
                        (unsigned long long)n);
  uint32_t count = (uint32_t)(n / 16);
  const uint64_t* pairs = data;
  for (uint32_t i = 0; i < count; i++)
    if (!pairs[2 * i] || !pairs[2 * i + 1])
      return bg_set_error(BG_ERR_INVALID_VALUE, "bg_module_load: symbol table entry %u has a NULL name or function", i);
  cpu_module* m = calloc(1, sizeof *m);
  if (!m) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  m->sym_names = calloc(count, sizeof *m->sym_names);
  m->sym_fns = calloc(count, sizeof *m->sym_fns);
  pthread_mutex_init(&m->mu, NULL);
  m->nsyms = count;
  int ok = m->sym_names && m->sym_fns;
  for (uint32_t i = 0; ok && i < count; i++) {
    const char* name = (const char*)(uintptr_t)pairs[2 * i];
    size_t len = strlen(name);
    m->sym_names[i] = malloc(len + 1);
    if (!m->sym_names[i]) ok = 0;
    else memcpy(m->sym_names[i], name, len + 1);
    m->sym_fns[i] = (void*)(uintptr_t)pairs[2 * i + 1];
  }
  if (!ok) {
    module_free(m);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  }
  atomic_init(&m->refs, 1);
  bg_obj_init(m, BG_KIND_MODULE, dev);
  *out = m;
  return BG_OK;
}

int32_t cpu_module_load(bg_device* dev, int32_t kind, const void* data, uint64_t n, void** out) {
  if (kind == BG_IMAGE_SYMBOLS) return load_symbols(dev, data, n, out);
  if (kind != BG_IMAGE_SHARED_LIBRARY)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_module_load: image kind %s (%d) is not for the cpu backend",
                        image_name(kind), (int)kind);
  const char* src = data;
  size_t len = n ? (size_t)n : strlen(src);
  const char* nul = memchr(src, 0, len);
  if (nul) len = (size_t)(nul - src);
  if (!len) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_module_load: empty path");
  char* path = malloc(len + 1);
  if (!path) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  memcpy(path, src, len);
  path[len] = 0;
  cpu_module* m = calloc(1, sizeof *m);
  if (!m) {
    free(path);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  }
  dlerror();
  m->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->lib) {
    const char* why = dlerror();
    int32_t rc = bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: dlopen(%s): %s", path,
                              why ? why : "unknown error");
    free(path);
    free(m);
    return rc;
  }
  free(path);
  pthread_mutex_init(&m->mu, NULL);
  atomic_init(&m->refs, 1);
  bg_obj_init(m, BG_KIND_MODULE, dev);
  *out = m;
  return BG_OK;
}

static void module_free(void* mv) {
  cpu_module* m = mv;
  cpu_kernel* k = m->kernels;
  while (k) {
    cpu_kernel* nx = k->next;
    if (k->code_mod) cpu_module_unhold(k->code_mod);
    free(k->name);
    free(k);
    k = nx;
  }
  if (m->lib) dlclose(m->lib);
  for (uint32_t i = 0; m->sym_names && i < m->nsyms; i++) free(m->sym_names[i]);
  free(m->sym_names);
  free(m->sym_fns);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void cpu_module_hold(cpu_module* m) {
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void cpu_module_unhold(cpu_module* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
    cpu_defer((cpu_device*)m->h.dev, module_free, m);
}

/* Queued launches may still call into the library: the kernels die now (their handles stop
 * being live) but the library is closed once the work queued before the unload has run, and
 * not before every graph and exec holding one of its kernels is destroyed. */
int32_t cpu_module_unload(void* mv) {
  cpu_module* m = mv;
  bg_obj_kill(m);
  pthread_mutex_lock(&m->mu);
  for (cpu_kernel* k = m->kernels; k; k = k->next) bg_obj_kill(k);
  pthread_mutex_unlock(&m->mu);
  cpu_module_unhold(m);
  return BG_OK;
}

int32_t cpu_module_get_kernel(void* mv, const char* name, void** out) {
  cpu_module* m = mv;
  pthread_mutex_lock(&m->mu);
  for (cpu_kernel* k = m->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) {
      pthread_mutex_unlock(&m->mu);
      *out = k;
      return BG_OK;
    }
  void* sym = NULL;
  if (m->lib) {
    dlerror();
    sym = dlsym(m->lib, name);
  } else {
    for (uint32_t i = 0; i < m->nsyms && !sym; i++)
      if (strcmp(m->sym_names[i], name) == 0) sym = m->sym_fns[i];
  }
  if (!sym) {
    pthread_mutex_unlock(&m->mu);
    return bg_set_error(BG_ERR_NOT_FOUND, "bg_module_get_kernel: no kernel named \"%s\" in the module",
                        name);
  }
  cpu_kernel* k = calloc(1, sizeof *k);
  char* nm = k ? malloc(strlen(name) + 1) : NULL;
  if (!k || !nm) {
    pthread_mutex_unlock(&m->mu);
    free(k);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_get_kernel: out of host memory");
  }
  strcpy(nm, name);
  bg_obj_init(k, BG_KIND_KERNEL, m->h.dev);
  k->mod = m;
  k->persistent = strcmp(name, "bg_ring_persistent") == 0;
  k->name = nm;
  k->fn = (cpu_kfn)sym;
  k->next = m->kernels;
  m->kernels = k;
  pthread_mutex_unlock(&m->mu);
  *out = k;
  return BG_OK;
}

int32_t cpu_kernel_max_threads(void* k, int32_t* out) {
  (void)k;
  *out = CPU_MAX_THREADS;
  return BG_OK;
}

/* `k` runs `from`'s code from its next launch on (a worker reads fn once per launch, so a launch
 * under way finishes in the old code). The module of the code it ran before stays loaded until
 * the work queued before now has run (cpu_module_unhold defers the close). */
int32_t cpu_kernel_retarget(void* kv, void* fv) {
  cpu_kernel* k = kv;
  cpu_kernel* from = fv;
  if (k == from) return BG_OK;
  if (k->persistent || from->persistent)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_kernel_retarget: a persistent ring kernel is not retargeted");
  cpu_module* code = from->code_mod ? from->code_mod : from->mod;
  cpu_module_hold(code);
  pthread_mutex_lock(&k->mod->mu);
  cpu_module* old = k->code_mod;
  k->code_mod = code == k->mod ? NULL : code;
  atomic_store_explicit(&k->fn, atomic_load_explicit(&from->fn, memory_order_acquire), memory_order_release);
  pthread_mutex_unlock(&k->mod->mu);
  if (code == k->mod) cpu_module_unhold(code);
  if (old) cpu_module_unhold(old);
  return BG_OK;
}
