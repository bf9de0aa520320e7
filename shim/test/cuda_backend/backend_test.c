#define _POSIX_C_SOURCE 200809L
/* Regression tests of the CUDA backend against the driver simulator: each section names the
 * defect it guards against, and fails on the backend as it was before the fix. Output: one line
 * per check, "ok   <name>" or "FAIL <name>: why", then "<n> failures". */
#include "bungpu.h"
#include "cudasim.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static int fails;
static void report(int ok, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void report(int ok, const char* name, const char* fmt, ...) {
  char why[1200] = "";
  if (!ok && fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
  }
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, ok ? "" : ": ", why);
  if (!ok) fails++;
}
static char err[1024];
#define TRY(x) do { int32_t r_ = (x); if (r_) { bg_last_error(err, sizeof err); printf("FAIL %s -> %d: %s\n", #x, r_, err); fails++; return; } } while (0)

static void* dev;
static cudasim_api sim;
typedef unsigned int (*ctx_get_fn)(void**);
static ctx_get_fn sim_ctx_get;

/* Host twins. */
static _Atomic unsigned seen_word;
BG_KERNEL(readword) { seen_word = BG_ARG(0, const unsigned*)[0]; }
BG_KERNEL(noop) { (void)bg__ctx; }
static _Atomic int counted;
BG_KERNEL(count) { (void)bg__ctx; counted++; }
/* Stands for RingKernel's persistent kernel: resident until the test lets it go. */
static _Atomic int ring_go, ring_running;
BG_KERNEL(bg_ring_persistent) {
  (void)bg__ctx;
  ring_running = 1;
  while (!ring_go) {
    struct timespec t = {0, 1000 * 1000};
    nanosleep(&t, NULL);
  }
  ring_running = 0;
}

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry readword(.param .u64 p) { ret; }\n"
    ".visible .entry noop() { ret; }\n"
    ".visible .entry bg_ring_persistent() { ret; }\n";
static const char ptx2[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry count() { ret; }\n";

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void* mod;
static void *k_read, *k_noop, *s_nb;

/* 1. Synchronous memset / copies: the driver's cuMemsetD*, cuMemcpyDtoD and cuMemcpyHtoD (from
 * pageable memory) may return before the device has written; work queued next on a non-blocking
 * stream then read stale data. bg_memset / bg_memcpy_* must return with the data in place. */
static void sync_ops_visible(void) {
  bg_devptr a = 0, b = 0;
  TRY(bg_mem_alloc(dev, 256, &a));
  TRY(bg_mem_alloc(dev, 256, &b));
  TRY(bg_memset(dev, a, 0, 4, 64));
  TRY(bg_memset(dev, b, 0x22222222u, 4, 64));
  TRY(bg_device_synchronize(dev));
  sim.set_delay_us(150 * 1000);
  struct { const char* name; int op; unsigned want; } cases[] = {
      {"bg_memset is complete on return", 0, 0x11111111u},
      {"bg_memcpy_dtod is complete on return", 1, 0x22222222u},
      {"bg_memcpy_htod (pageable) is complete on return", 2, 0x33333333u},
  };
  for (int i = 0; i < 3; i++) {
    TRY(bg_memset(dev, a, 0, 4, 64));
    TRY(bg_device_synchronize(dev));
    if (cases[i].op == 0) TRY(bg_memset(dev, a, 0x11111111u, 4, 64));
    if (cases[i].op == 1) TRY(bg_memcpy_dtod(dev, a, b, 256));
    if (cases[i].op == 2) {
      unsigned* host = malloc(256);
      for (int j = 0; j < 64; j++) host[j] = 0x33333333u;
      TRY(bg_memcpy_htod(dev, a, host, 256));
      memset(host, 0, 256); /* the caller may reuse its memory at once */
      free(host);
    }
    uint64_t args[1] = {a};
    seen_word = 0xdeadbeef;
    TRY(bg_launch(k_read, s_nb, 1, 1, 1, 1, 1, 1, 0, args, 1));
    TRY(bg_stream_synchronize(s_nb));
    report(seen_word == cases[i].want, cases[i].name, "a kernel on a non-blocking stream read 0x%x, want 0x%x",
           (unsigned)seen_word, cases[i].want);
  }
  sim.set_delay_us(0);
  TRY(bg_mem_free(dev, a));
  TRY(bg_mem_free(dev, b));
}

/* 2. Dynamic shared memory above 48 KiB needs cuFuncSetAttribute; the device properties report
 * the opt-in limit (what a launch can really use), not the 48 KiB default. */
static void dynamic_shared(void) {
  bg_device_props p;
  TRY(bg_device_props_get(dev, &p));
  report(p.max_shared_bytes_per_block > 48 * 1024, "props report the opt-in shared memory limit",
         "max_shared_bytes_per_block = %d", p.max_shared_bytes_per_block);
  int32_t rc = bg_launch(k_noop, s_nb, 1, 1, 1, 32, 1, 1, 100 * 1024, NULL, 0);
  bg_last_error(err, sizeof err);
  int32_t rc2 = rc ? rc : bg_stream_synchronize(s_nb);
  report(rc == 0 && rc2 == 0, "a launch with 100 KiB of dynamic shared memory", "-> %d: %s", rc, err);
  rc = bg_launch(k_noop, s_nb, 1, 1, 1, 32, 1, 1, (uint32_t)p.max_shared_bytes_per_block, NULL, 0);
  bg_last_error(err, sizeof err);
  report(rc == 0, "a launch with all the shared memory the props report", "-> %d: %s", rc, err);
  rc = bg_launch(k_noop, s_nb, 1, 1, 1, 32, 1, 1, (uint32_t)p.max_shared_bytes_per_block + 1, NULL, 0);
  report(rc == BG_ERR_INVALID_VALUE, "one byte more is refused with INVALID_VALUE", "-> %d", rc);
  TRY(bg_stream_synchronize(s_nb));
}

/* 3. end_capture names the call that invalidated the capture (the CPU backend does). */
static void capture_names_cause(void) {
  TRY(bg_stream_begin_capture(s_nb, BG_CAPTURE_MODE_GLOBAL));
  TRY(bg_launch(k_noop, s_nb, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  bg_devptr p = 0;
  int32_t rc = bg_mem_alloc(dev, 64, &p); /* illegal during a global capture */
  report(rc == BG_ERR_STREAM_CAPTURE_UNSUPPORTED, "cuMemAlloc during a global capture is refused", "-> %d", rc);
  void* g = NULL;
  rc = bg_stream_end_capture(s_nb, &g);
  bg_last_error(err, sizeof err);
  report(rc == BG_ERR_STREAM_CAPTURE_INVALIDATED && strstr(err, "invalidated by cuMemAlloc_v2") != NULL,
         "end_capture names the call that invalidated the capture", "-> %d: %s", rc, err);
  if (g) bg_graph_destroy(g);
  /* a clean capture afterwards still works and says nothing of the old cause */
  TRY(bg_stream_begin_capture(s_nb, BG_CAPTURE_MODE_GLOBAL));
  TRY(bg_launch(k_noop, s_nb, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  rc = bg_stream_end_capture(s_nb, &g);
  report(rc == 0 && g, "a later capture on the stream ends cleanly", "-> %d", rc);
  if (g) bg_graph_destroy(g);
}

/* 4. The context is made current with push/pop: a thread with no context current (or another
 * CUDA user's) finds it unchanged after a bungpu call. */
static void context_push_pop(void) {
  void* cur = (void*)1;
  sim_ctx_get(&cur);
  report(cur == NULL, "no context is left current on the calling thread", "current context %p", cur);
  bg_devptr p = 0;
  TRY(bg_mem_alloc(dev, 64, &p));
  TRY(bg_memset(dev, p, 7, 4, 16));
  TRY(bg_mem_free(dev, p));
  cur = (void*)1;
  sim_ctx_get(&cur);
  report(cur == NULL, "still none after alloc, memset, free", "current context %p", cur);
}

/* 6. A resident persistent kernel: cuMemFree, cuMemFreeHost and cuModuleUnload wait for all work,
 * so freeing while a RingKernel runs never returned; bg_device_synchronize (cuCtxSynchronize) never
 * returned either. Frees and unloads are put off until the kernel has finished; a device-wide
 * wait is refused; other streams keep working. (A watchdog turns a deadlock into a failure.) */
static void resident_kernel(void) {
  void *kring, *s2, *m2, *kcount;
  TRY(bg_module_get_kernel(mod, "bg_ring_persistent", &kring));
  TRY(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s2));
  TRY(bg_module_load(dev, BG_IMAGE_PTX, ptx2, sizeof ptx2 - 1, &m2));
  TRY(bg_module_get_kernel(m2, "count", &kcount));
  bg_devptr p = 0;
  TRY(bg_mem_alloc(dev, 4096, &p));
  void* host = NULL;
  bg_devptr hostd = 0;
  TRY(bg_host_alloc(dev, 4096, BG_HOST_ALLOC_MAPPED, &host, &hostd));
  ring_go = 0;
  TRY(bg_launch(kring, s_nb, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  for (int i = 0; i < 2000 && !ring_running; i++) {
    struct timespec t = {0, 1000 * 1000};
    nanosleep(&t, NULL);
  }
  report(ring_running, "the persistent kernel runs", "it never started");
  double t0 = now_ms();
  int32_t a = bg_mem_free(dev, p), b = bg_host_free(dev, host), c = bg_module_unload(m2);
  report(a == 0 && b == 0 && c == 0 && now_ms() - t0 < 1000,
         "free, free host, module unload return while a persistent kernel is resident",
         "-> %d %d %d in %.0f ms", a, b, c, now_ms() - t0);
  int32_t rc = bg_device_synchronize(dev);
  bg_last_error(err, sizeof err);
  report(rc == BG_ERR_ILLEGAL_STATE && strstr(err, "persistent"), "a device-wide wait is refused, not hung",
         "-> %d: %s", rc, err);
  TRY(bg_launch(k_noop, s2, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  rc = bg_stream_synchronize(s2);
  report(rc == 0 && ring_running, "other streams work beside the resident kernel", "-> %d", rc);
  ring_go = 1;
  TRY(bg_stream_synchronize(s_nb));
  unsigned word = 0;
  rc = bg_memcpy_dtoh(dev, &word, p, 4); /* the first call after the kernel ended releases */
  report(rc == BG_ERR_INVALID_VALUE, "the put-off free happened once the kernel had finished",
         "reading the freed memory -> %d", rc);
  TRY(bg_device_synchronize(dev));
  TRY(bg_stream_destroy(s2));
}

/* 7. A module stays loaded while a graph or exec holds one of its kernel nodes (unloading it
 * left the exec launching a function of an unloaded module). */
static void module_outlives_unload_in_exec(void) {
  void *m3, *kcount, *g = NULL, *x = NULL;
  TRY(bg_module_load(dev, BG_IMAGE_PTX, ptx2, sizeof ptx2 - 1, &m3));
  TRY(bg_module_get_kernel(m3, "count", &kcount));
  TRY(bg_stream_begin_capture(s_nb, BG_CAPTURE_MODE_RELAXED));
  TRY(bg_launch(kcount, s_nb, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  TRY(bg_stream_end_capture(s_nb, &g));
  TRY(bg_graph_instantiate(g, &x));
  TRY(bg_graph_destroy(g));
  TRY(bg_module_unload(m3));
  counted = 0;
  int32_t rc = bg_graph_launch(x, s_nb);
  bg_last_error(err, sizeof err);
  int32_t rc2 = rc ? rc : bg_stream_synchronize(s_nb);
  report(rc == 0 && rc2 == 0 && counted == 1, "an exec runs a kernel of a module unloaded after capture",
         "-> %d / %d, ran %d: %s", rc, rc2, (int)counted, err);
  TRY(bg_graph_exec_destroy(x));
}

/* 5. Before cuInit: eager module loading and enough hardware queues, unless the user chose. */
static void init_env(const char* want_loading, const char* want_conn) {
  const char* a = getenv("CUDA_MODULE_LOADING");
  const char* b = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  report(a && !strcmp(a, want_loading), "CUDA_MODULE_LOADING", "is %s, want %s", a ? a : "(unset)", want_loading);
  report(b && !strcmp(b, want_conn), "CUDA_DEVICE_MAX_CONNECTIONS", "is %s, want %s", b ? b : "(unset)", want_conn);
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "FAIL watchdog: the test hung for 30 s (a deadlock)\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(3);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGALRM, watchdog);
  alarm(30);
  if (!cudasim_open(&sim)) {
    printf("FAIL cannot open the simulator through BUNGPU_LIBCUDA\n");
    return 1;
  }
  void* h = dlopen(getenv("BUNGPU_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  void* sym = h ? dlsym(h, "cuCtxGetCurrent") : NULL;
  memcpy(&sim_ctx_get, &sym, sizeof sym);
  sim.register_kernel("readword", readword);
  sim.register_kernel("noop", noop);
  sim.register_kernel("count", count);
  sim.register_kernel("bg_ring_persistent", bg_ring_persistent);
  const int env_only = argc > 1 && !strcmp(argv[1], "env");
  const char* user_loading = getenv("CUDA_MODULE_LOADING");
  char keep_loading[64] = "", keep_conn[64] = "";
  if (user_loading) snprintf(keep_loading, sizeof keep_loading, "%s", user_loading);
  if (getenv("CUDA_DEVICE_MAX_CONNECTIONS")) snprintf(keep_conn, sizeof keep_conn, "%s", getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  if (bg_device_open(BG_BACKEND_CUDA, 0, &dev)) {
    bg_last_error(err, sizeof err);
    printf("FAIL bg_device_open: %s\n", err);
    return 1;
  }
  if (env_only) {
    init_env(keep_loading, keep_conn);
  } else {
    init_env("EAGER", "32");
    if (bg_module_load(dev, BG_IMAGE_PTX, ptx, sizeof ptx - 1, &mod) ||
        bg_module_get_kernel(mod, "readword", &k_read) || bg_module_get_kernel(mod, "noop", &k_noop) ||
        bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s_nb)) {
      bg_last_error(err, sizeof err);
      printf("FAIL setup: %s\n", err);
      return 1;
    }
    context_push_pop();
    sync_ops_visible();
    dynamic_shared();
    capture_names_cause();
    resident_kernel();
    module_outlives_unload_in_exec();
    bg_stream_destroy(s_nb);
    bg_module_unload(mod);
  }
  bg_device_close(dev);
  printf("%d failures\n", fails);
  return fails ? 1 : 0;
}
