/*
 * cpu_test.c: the CPU backend through the public bg_* API only.
 *
 *   cc -std=c11 -O1 -g -pthread -Ishim -o /tmp/cpu_test shim/test/cpu_test.c shim/[core .c files]
 *      shim/cpu/[all .c files] shim/test/stub_backend.c '-DBG_STUBS(X)=X(cuda, 0) X(metal, 0)'
 *      -ldl -lm && /tmp/cpu_test
 *
 * Kernels are compiled at run time from a source this test writes into a temporary folder
 * with the system `cc` (skipped when there is none). Prints "cpu_test: N checks passed".
 */
#define _GNU_SOURCE
#include "../bungpu.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int checks;

static void fail(int line, const char* what) {
  char m[1024];
  bg_last_error(m, sizeof m);
  fprintf(stderr, "cpu_test: check failed at line %d: %s\n  last error (%d): %s\n", line, what,
          bg_last_error_code(), m);
  exit(1);
}

#define CHECK(c)                       \
  do {                                 \
    if (!(c)) fail(__LINE__, #c);      \
    checks++;                          \
  } while (0)
#define OK(call) CHECK((call) == BG_OK)
#define ERR(call, code) CHECK((call) == (code))

static int last_error_has(const char* needle) {
  char m[1024];
  bg_last_error(m, sizeof m);
  return strstr(m, needle) != NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t f2slot(float f) {
  uint64_t v = 0;
  memcpy(&v, &f, 4);
  return v;
}

/* ---- host functions ----------------------------------------------------------------------- */
typedef struct order_log {
  int n;
  int vals[2000];
} order_log;
typedef struct order_item {
  order_log* log;
  int v;
} order_item;
static void hf_append(void* u) {
  order_item* it = u;
  it->log->vals[it->log->n++] = it->v;
}
static void hf_sleep20(void* u) {
  (void)u;
  sleep_ms(20);
}
static void hf_set_flag(void* u) { atomic_store((_Atomic int*)u, 1); }
static void hf_check_flag(void* u) {
  /* u points at {flag, seen} */
  _Atomic int* f = u;
  atomic_store(&f[1], atomic_load(&f[0]));
}
static void hf_wait_flag(void* u) {
  _Atomic int* f = u;
  while (!atomic_load(f)) sleep_ms(1);
}
static void hf_count(void* u) { atomic_fetch_add((_Atomic int*)u, 1); }

/* ---- kernels ------------------------------------------------------------------------------- */
static const char* kernel_src =
    "#include \"bungpu_cpu.h\"\n"
    "#include <sched.h>\n"
    "BG_KERNEL(vadd) {\n"
    "  const float* a = BG_ARG(0, const float*); const float* b = BG_ARG(1, const float*);\n"
    "  float* c = BG_ARG(2, float*); int n = BG_ARG(3, int);\n"
    "  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) c[i] = a[i] + b[i]; } }\n"
    "}\n"
    "BG_KERNEL(addk) {\n"
    "  int* x = BG_ARG(0, int*); int k = BG_ARG(1, int); int n = BG_ARG(2, int);\n"
    "  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] += k; } }\n"
    "}\n"
    "BG_KERNEL(blockids) {\n"
    "  unsigned* out = BG_ARG(0, unsigned*); unsigned* workers = BG_ARG(1, unsigned*);\n"
    "  BG_FOR_BLOCKS { unsigned lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "    out[lin * 3 + 0] = blockIdx.x; out[lin * 3 + 1] = blockIdx.y; out[lin * 3 + 2] = blockIdx.z;\n"
    "    workers[lin] = bg__ctx->worker; }\n"
    "}\n"
    "BG_KERNEL(blocksum) {\n"
    "  const int* in = BG_ARG(0, const int*); int* out = BG_ARG(1, int*);\n"
    "  BG_FOR_BLOCKS {\n"
    "    int* sh = (int*)BG_SHARED;\n"
    "    BG_FOR_THREADS { sh[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x]; }\n"
    "    BG_FOR_THREADS { if (threadIdx.x == 0) { int s = 0;\n"
    "      for (unsigned t = 0; t < blockDim.x; t++) s += sh[t]; out[blockIdx.x] = s; } }\n"
    "  }\n"
    "}\n"
    "BG_KERNEL(many) {\n"
    "  long long s = 0; for (int i = 0; i < 11; i++) s += BG_ARG(i, long long);\n"
    "  BG_FOR_BLOCKS { if (blockIdx.x == 0) *BG_ARG(11, long long*) = s; }\n"
    "}\n"
    "BG_KERNEL(spin) {\n"
    "  int* f = BG_ARG(0, int*);\n"
    "  BG_FOR_BLOCKS { while (!__atomic_load_n(f, __ATOMIC_ACQUIRE)) sched_yield(); }\n"
    "}\n"
    "BG_KERNEL(scalef) {\n"
    "  float* x = BG_ARG(0, float*); float f = BG_ARG(1, float); int n = BG_ARG(2, int);\n"
    "  BG_FOR_BLOCKS { BG_FOR_THREADS { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] *= f; } }\n"
    "}\n";

static char shim_dir[PATH_MAX];
static char tmpdir[64];
static char so_path[PATH_MAX];

static void find_shim_dir(void) {
#ifdef BG_SHIM_DIR
  snprintf(shim_dir, sizeof shim_dir, "%s", BG_SHIM_DIR);
#else
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", __FILE__);
  char* slash = strrchr(buf, '/');
  if (slash) *slash = 0; else snprintf(buf, sizeof buf, ".");
  strncat(buf, "/..", sizeof buf - strlen(buf) - 1);
  if (!realpath(buf, shim_dir)) snprintf(shim_dir, sizeof shim_dir, "%s", buf);
#endif
}

static int build_kernels(void) {
  if (system("cc --version >/dev/null 2>&1") != 0) return 0;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/bgcpu-XXXXXX");
  if (!mkdtemp(tmpdir)) return 0;
  char src[PATH_MAX], cmd[3 * PATH_MAX + 128];
  snprintf(src, sizeof src, "%s/k.c", tmpdir);
  snprintf(so_path, sizeof so_path, "%s/k.so", tmpdir);
  FILE* f = fopen(src, "w");
  if (!f) return 0;
  fputs(kernel_src, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -std=c11 -shared -fPIC -O2 -I'%s' -o '%s' '%s'", shim_dir, so_path,
           src);
  return system(cmd) == 0;
}

static void cleanup_kernels(void) {
  if (!tmpdir[0] || strncmp(tmpdir, "/tmp/bgcpu-", 11) != 0) return;
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/k.c", tmpdir);
  unlink(p);
  snprintf(p, sizeof p, "%s/k.so", tmpdir);
  unlink(p);
  rmdir(tmpdir);
}

/* ---- threads used by capture tests ---------------------------------------------------------- */
typedef struct alloc_job {
  void* dev;
  int32_t rc;
  bg_devptr p;
  char msg[512];
} alloc_job;
static void* alloc_thread(void* u) {
  alloc_job* j = u;
  j->rc = bg_mem_alloc(j->dev, 256, &j->p);
  bg_last_error(j->msg, sizeof j->msg);
  if (j->rc == BG_OK) bg_mem_free(j->dev, j->p);
  return NULL;
}
static int32_t alloc_from_thread(void* dev, alloc_job* j) {
  memset(j, 0, sizeof *j);
  j->dev = dev;
  pthread_t t;
  if (pthread_create(&t, NULL, alloc_thread, j)) return -1;
  pthread_join(t, NULL);
  return j->rc;
}

/* ---- command builder ------------------------------------------------------------------------ */
typedef struct cmdbuf {
  uint8_t b[4096];
  uint64_t n;
} cmdbuf;
static void put32(cmdbuf* c, uint32_t v) {
  memcpy(c->b + c->n, &v, 4);
  c->n += 4;
}
static void put64(cmdbuf* c, uint64_t v) {
  memcpy(c->b + c->n, &v, 8);
  c->n += 8;
}
static void cmd_launch(cmdbuf* c, void* k, uint32_t gx, uint32_t bx, const uint64_t* args,
                       uint32_t nargs) {
  put32(c, BG_CMD_LAUNCH);
  put32(c, 8 + 40 + 8 * nargs);
  put64(c, (uint64_t)(uintptr_t)k);
  put32(c, gx); put32(c, 1); put32(c, 1);
  put32(c, bx); put32(c, 1); put32(c, 1);
  put32(c, 0);
  put32(c, nargs);
  for (uint32_t i = 0; i < nargs; i++) put64(c, args[i]);
}
static void cmd3(cmdbuf* c, uint32_t op, uint64_t a, uint64_t b, uint64_t n) {
  put32(c, op);
  put32(c, 32);
  put64(c, a);
  put64(c, b);
  put64(c, n);
}
static void cmd_memset(cmdbuf* c, uint64_t dst, uint32_t pattern, uint32_t esz, uint64_t count) {
  put32(c, BG_CMD_MEMSET);
  put32(c, 32);
  put64(c, dst);
  put32(c, pattern);
  put32(c, esz);
  put64(c, count);
}
static void cmd_event(cmdbuf* c, uint32_t op, void* e) {
  put32(c, op);
  put32(c, 16);
  put64(c, (uint64_t)(uintptr_t)e);
}

/* ---- tests ------------------------------------------------------------------------------------ */
static void test_device(void** out_dev) {
  CHECK(bg_abi_version() == BG_ABI_VERSION);
  int32_t avail = 0, count = 0;
  char msg[256];
  OK(bg_backend_info(BG_BACKEND_CPU, &avail, &count, msg, sizeof msg));
  CHECK(avail == 1 && count == 1);
  OK(bg_backend_info(BG_BACKEND_CUDA, &avail, &count, msg, sizeof msg));
  CHECK(avail == 0 && count == 0);
  void* dev = NULL;
  void* dev2 = NULL;
  ERR(bg_device_open(BG_BACKEND_CPU, 1, &dev), BG_ERR_INVALID_DEVICE);
  OK(bg_device_open(BG_BACKEND_CPU, 0, &dev));
  OK(bg_device_open(BG_BACKEND_CPU, 0, &dev2));
  CHECK(dev == dev2);
  OK(bg_device_close(dev2));
  bg_device_props p;
  OK(bg_device_props_get(dev, &p));
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
  { /* the device counts the cores of this process's affinity mask */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1 && CPU_COUNT(&set) < n) n = CPU_COUNT(&set);
  }
#endif
  CHECK(p.backend == BG_BACKEND_CPU && p.ordinal == 0);
  CHECK(p.compute_units == (n < 1 ? 1 : n));
  CHECK(strstr(p.name, "CPU") != NULL && strstr(p.name, "threads") != NULL);
  CHECK(p.warp_size == 1 && p.max_threads_per_block == 1024);
  CHECK(p.unified_memory == 1 && p.can_map_host_memory == 1 && p.concurrent_kernels == 1);
  CHECK(p.max_shared_bytes_per_block >= 48 * 1024);
  CHECK(p.total_mem > 0);
  uint64_t fr = 0, tot = 0;
  OK(bg_device_mem_info(dev, &fr, &tot));
  CHECK(tot == p.total_mem && fr > 0 && fr <= tot);
  void* ds = NULL;
  OK(bg_stream_default(dev, &ds));
  CHECK(ds != NULL);
  ERR(bg_stream_destroy(ds), BG_ERR_INVALID_VALUE);
  OK(bg_device_synchronize(dev));
  *out_dev = dev;
}

static void test_memory(void* dev) {
  bg_devptr a = 0, b = 0;
  OK(bg_mem_alloc(dev, 1000, &a));
  CHECK(a != 0 && a % 64 == 0);
  ERR(bg_mem_alloc(dev, 0, &b), BG_ERR_INVALID_VALUE);
  ERR(bg_mem_free(dev, a + 8), BG_ERR_INVALID_VALUE);
  CHECK(last_error_has("bg_mem_free"));
  ERR(bg_mem_free(dev, 0x1234500), BG_ERR_INVALID_VALUE);
  ERR(bg_mem_alloc(dev, ~0ull - 16, &b), BG_ERR_OUT_OF_MEMORY);
  CHECK(last_error_has("bg_mem_alloc"));
  OK(bg_mem_free(dev, a));
  ERR(bg_mem_free(dev, a), BG_ERR_INVALID_VALUE);
  /* many allocations exercise the table */
  bg_devptr many[300];
  for (int i = 0; i < 300; i++) OK(bg_mem_alloc(dev, 64 + (uint64_t)i, &many[i]));
  for (int i = 0; i < 300; i += 2) OK(bg_mem_free(dev, many[i]));
  for (int i = 1; i < 300; i += 2) OK(bg_mem_free(dev, many[i]));

  void* h = NULL;
  bg_devptr hd = 0;
  OK(bg_host_alloc(dev, 4096, BG_HOST_ALLOC_MAPPED, &h, &hd));
  CHECK(h != NULL && (uintptr_t)h % 64 == 0 && hd == (bg_devptr)(uintptr_t)h);
  memset(h, 7, 4096);
  ERR(bg_host_free(dev, (char*)h + 64), BG_ERR_INVALID_VALUE);
  OK(bg_host_free(dev, h));
  ERR(bg_host_free(dev, h), BG_ERR_INVALID_VALUE);

  /* synchronous copies and memset */
  enum { N = 4096 };
  uint8_t src[N], dst[N];
  for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + 3);
  bg_devptr d1, d2;
  OK(bg_mem_alloc(dev, N, &d1));
  OK(bg_mem_alloc(dev, N, &d2));
  OK(bg_memcpy_htod(dev, d1, src, N));
  OK(bg_memcpy_dtod(dev, d2, d1, N));
  memset(dst, 0, N);
  OK(bg_memcpy_dtoh(dev, dst, d2, N));
  CHECK(memcmp(src, dst, N) == 0);
  OK(bg_memset(dev, d1, 0xAB, 1, 100));
  OK(bg_memcpy_dtoh(dev, dst, d1, N));
  int ok = 1;
  for (int i = 0; i < 100; i++) ok &= dst[i] == 0xAB;
  for (int i = 100; i < N; i++) ok &= dst[i] == src[i];
  CHECK(ok);
  OK(bg_memset(dev, d1 + 2, 0xBEEF1234u, 2, 10));
  OK(bg_memcpy_dtoh(dev, dst, d1, N));
  ok = dst[0] == 0xAB && dst[1] == 0xAB;
  for (int i = 0; i < 10; i++) ok &= dst[2 + 2 * i] == 0x34 && dst[3 + 2 * i] == 0x12;
  ok &= dst[22] == 0xAB;
  CHECK(ok);
  OK(bg_memset(dev, d1 + 4, 0xDEADBEEFu, 4, 8));
  OK(bg_memcpy_dtoh(dev, dst, d1, N));
  ok = 1;
  for (int i = 0; i < 8; i++)
    ok &= dst[4 + 4 * i] == 0xEF && dst[5 + 4 * i] == 0xBE && dst[6 + 4 * i] == 0xAD &&
          dst[7 + 4 * i] == 0xDE;
  ok &= dst[36] == 0xAB && dst[3] == 0x12;
  CHECK(ok);
  ERR(bg_memset(dev, d1 + 1, 0, 2, 4), BG_ERR_INVALID_VALUE);
  ERR(bg_memset(dev, d1, 0, 3, 4), BG_ERR_INVALID_VALUE);
  OK(bg_mem_free(dev, d1));
  OK(bg_mem_free(dev, d2));
}

static void test_streams(void* dev) {
  void *s1, *s2;
  OK(bg_stream_create(dev, 0, 0, &s1));
  OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, -1, &s2));
  ERR(bg_stream_create(dev, 8, 0, &s2), BG_ERR_INVALID_VALUE);
  enum { N = 1 << 16 };
  uint8_t* hsrc = malloc(N);
  uint8_t* hdst = malloc(N);
  for (int i = 0; i < N; i++) hsrc[i] = (uint8_t)(i ^ (i >> 8));
  bg_devptr a, b;
  OK(bg_mem_alloc(dev, N, &a));
  OK(bg_mem_alloc(dev, N, &b));
  OK(bg_memcpy_htod_async(s1, a, hsrc, N));
  OK(bg_memset_async(s1, b, 0x55, 1, N));
  OK(bg_memcpy_dtod_async(s1, b, a, N / 2));
  OK(bg_memset_async(s1, b + N - 8, 0x01020304u, 4, 2));
  OK(bg_memcpy_dtoh_async(s1, hdst, b, N));
  OK(bg_stream_synchronize(s1));
  OK(bg_stream_query(s1));
  int ok = memcmp(hdst, hsrc, N / 2) == 0;
  for (int i = N / 2; i < N - 8; i++) ok &= hdst[i] == 0x55;
  ok &= hdst[N - 8] == 0x04 && hdst[N - 5] == 0x01 && hdst[N - 1] == 0x01;
  CHECK(ok);

  /* host funcs run in order */
  static order_log log;
  static order_item items[2000];
  log.n = 0;
  for (int i = 0; i < 2000; i++) {
    items[i].log = &log;
    items[i].v = i;
    OK(bg_launch_host_func(s2, hf_append, &items[i]));
  }
  OK(bg_stream_synchronize(s2));
  ok = log.n == 2000;
  for (int i = 0; i < 2000 && ok; i++) ok &= log.vals[i] == i;
  CHECK(ok);

  /* query is NOT_READY while a host func holds the stream */
  static _Atomic int gate;
  atomic_store(&gate, 0);
  OK(bg_launch_host_func(s1, hf_wait_flag, (void*)&gate));
  ERR(bg_stream_query(s1), BG_ERR_NOT_READY);
  atomic_store(&gate, 1);
  OK(bg_stream_synchronize(s1));
  OK(bg_stream_query(s1));

  /* a stream destroyed with queued work finishes it first */
  void* s3;
  static _Atomic int counter;
  atomic_store(&counter, 0);
  OK(bg_stream_create(dev, 0, 0, &s3));
  OK(bg_launch_host_func(s3, hf_sleep20, NULL));
  for (int i = 0; i < 50; i++) OK(bg_launch_host_func(s3, hf_count, (void*)&counter));
  OK(bg_stream_destroy(s3));
  CHECK(atomic_load(&counter) == 50);

  /* many queued ops (queue growth) */
  atomic_store(&counter, 0);
  for (int i = 0; i < 5000; i++) OK(bg_launch_host_func(s1, hf_count, (void*)&counter));
  OK(bg_device_synchronize(dev));
  CHECK(atomic_load(&counter) == 5000);

  /* the default stream orders sync copies after its work */
  void* ds;
  OK(bg_stream_default(dev, &ds));
  atomic_store(&gate, 0);
  OK(bg_launch_host_func(ds, hf_sleep20, NULL));
  OK(bg_memset_async(ds, a, 0x77, 1, 16));
  uint8_t small[16] = {0};
  OK(bg_memcpy_dtoh(dev, small, a, 16));
  CHECK(small[0] == 0x77 && small[15] == 0x77);

  OK(bg_mem_free(dev, a));
  OK(bg_mem_free(dev, b));
  free(hsrc);
  free(hdst);
  OK(bg_stream_destroy(s1));
  OK(bg_stream_destroy(s2));
}

static void test_events(void* dev) {
  void *s1, *s2, *e0, *e1, *en, *et;
  OK(bg_stream_create(dev, 0, 0, &s1));
  OK(bg_stream_create(dev, 0, 0, &s2));
  OK(bg_event_create(dev, 0, &e0));
  OK(bg_event_create(dev, BG_EVENT_BLOCKING_SYNC, &e1));
  OK(bg_event_create(dev, 0, &en));
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &et));
  ERR(bg_event_create(dev, 64, &et), BG_ERR_INVALID_VALUE);
  /* never recorded: complete */
  OK(bg_event_query(en));
  OK(bg_event_synchronize(en));
  OK(bg_stream_wait_event(s1, en));
  float ms = -1;
  ERR(bg_event_elapsed(&ms, en, en), BG_ERR_INVALID_HANDLE);

  static _Atomic int flags[2];
  atomic_store(&flags[0], 0);
  atomic_store(&flags[1], 0);
  OK(bg_event_record(e0, s1));
  OK(bg_launch_host_func(s1, hf_sleep20, NULL));
  OK(bg_launch_host_func(s1, hf_set_flag, (void*)&flags[0]));
  OK(bg_event_record(e1, s1));
  ERR(bg_event_query(e1), BG_ERR_NOT_READY);
  ERR(bg_event_elapsed(&ms, e0, e1), BG_ERR_NOT_READY);
  OK(bg_stream_wait_event(s2, e1));
  OK(bg_launch_host_func(s2, hf_check_flag, (void*)flags));
  /* a later record must not be what s2 waits for */
  OK(bg_stream_synchronize(s2));
  CHECK(atomic_load(&flags[1]) == 1);
  OK(bg_event_query(e1));
  OK(bg_event_synchronize(e0));
  OK(bg_event_elapsed(&ms, e0, e1));
  CHECK(ms >= 15.0f && ms < 5000.0f);
  OK(bg_event_record(et, s1));
  OK(bg_stream_synchronize(s1));
  ERR(bg_event_elapsed(&ms, e0, et), BG_ERR_INVALID_HANDLE);

  /* wait captures the record as of the call */
  static _Atomic int gate;
  atomic_store(&gate, 0);
  atomic_store(&flags[0], 0);
  atomic_store(&flags[1], 0);
  OK(bg_launch_host_func(s1, hf_set_flag, (void*)&flags[0]));
  OK(bg_event_record(e0, s1));
  OK(bg_stream_wait_event(s2, e0));
  OK(bg_launch_host_func(s2, hf_check_flag, (void*)flags));
  OK(bg_launch_host_func(s1, hf_wait_flag, (void*)&gate)); /* holds s1 */
  OK(bg_event_record(e0, s1));                              /* a later record */
  OK(bg_stream_synchronize(s2));                            /* must not hang on it */
  CHECK(atomic_load(&flags[1]) == 1);
  ERR(bg_event_query(e0), BG_ERR_NOT_READY);
  atomic_store(&gate, 1);
  OK(bg_event_synchronize(e0));
  OK(bg_event_query(e0));

  /* destroying a pending event is fine */
  void* ep;
  OK(bg_event_create(dev, 0, &ep));
  OK(bg_launch_host_func(s1, hf_sleep20, NULL));
  OK(bg_event_record(ep, s1));
  OK(bg_stream_wait_event(s2, ep));
  OK(bg_event_destroy(ep));
  OK(bg_stream_synchronize(s2));
  OK(bg_stream_synchronize(s1));

  /* signals: stream-order hand-off to a polling host thread */
  void* sig;
  uint32_t* word;
  OK(bg_signal_create(&sig));
  OK(bg_signal_address(sig, (void**)&word));
  atomic_store(&flags[0], 0);
  OK(bg_stream_host_signal(s1, sig));
  OK(bg_launch_host_func(s1, hf_set_flag, (void*)&flags[0]));
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != BG_SIGNAL_REACHED) sleep_ms(1);
  CHECK(atomic_load(&flags[0]) == 0);
  OK(bg_signal_release(sig));
  OK(bg_stream_synchronize(s1));
  CHECK(atomic_load(&flags[0]) == 1);
  OK(bg_signal_destroy(sig));

  OK(bg_event_destroy(e0));
  OK(bg_event_destroy(e1));
  OK(bg_event_destroy(en));
  OK(bg_event_destroy(et));
  OK(bg_stream_destroy(s1));
  OK(bg_stream_destroy(s2));
}

static int all_eq_i(const int32_t* v, int n, int32_t want) {
  for (int i = 0; i < n; i++)
    if (v[i] != want) return 0;
  return 1;
}

typedef struct kernels {
  void* mod;
  void *vadd, *addk, *blockids, *blocksum, *many, *scalef, *spin;
} kernels;

static void test_kernels(void* dev, kernels* K) {
  void* m = NULL;
  ERR(bg_module_load(dev, BG_IMAGE_SHARED_LIBRARY, "/nonexistent/k.so", 0, &m), BG_ERR_INVALID_IMAGE);
  CHECK(last_error_has("bg_module_load"));
  ERR(bg_module_load(dev, BG_IMAGE_PTX, ".version 7.0", 13, &m), BG_ERR_NOT_SUPPORTED);
  OK(bg_module_load(dev, BG_IMAGE_SHARED_LIBRARY, so_path, strlen(so_path) + 1, &K->mod));
  void* k;
  ERR(bg_module_get_kernel(K->mod, "nope", &k), BG_ERR_NOT_FOUND);
  OK(bg_module_get_kernel(K->mod, "vadd", &K->vadd));
  OK(bg_module_get_kernel(K->mod, "vadd", &k));
  CHECK(k == K->vadd);
  OK(bg_module_get_kernel(K->mod, "addk", &K->addk));
  OK(bg_module_get_kernel(K->mod, "blockids", &K->blockids));
  OK(bg_module_get_kernel(K->mod, "blocksum", &K->blocksum));
  OK(bg_module_get_kernel(K->mod, "many", &K->many));
  OK(bg_module_get_kernel(K->mod, "scalef", &K->scalef));
  OK(bg_module_get_kernel(K->mod, "spin", &K->spin));
  int32_t mt = 0;
  OK(bg_kernel_max_threads(K->vadd, &mt));
  CHECK(mt == 1024);

  void* s;
  OK(bg_stream_create(dev, 0, 0, &s));
  enum { N = 100003 };
  float* ha = malloc(N * sizeof(float));
  float* hb = malloc(N * sizeof(float));
  float* hc = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) {
    ha[i] = (float)i;
    hb[i] = (float)(2 * i + 1);
  }
  bg_devptr a, b, c;
  OK(bg_mem_alloc(dev, N * sizeof(float), &a));
  OK(bg_mem_alloc(dev, N * sizeof(float), &b));
  OK(bg_mem_alloc(dev, (N + 64) * sizeof(float), &c));
  OK(bg_memcpy_htod(dev, a, ha, N * sizeof(float)));
  OK(bg_memcpy_htod(dev, b, hb, N * sizeof(float)));
  OK(bg_memset(dev, c, 0xFFFFFFFFu, 4, N + 64));
  uint64_t args[4] = {a, b, c, N};
  uint32_t grid = (N + 127) / 128;
  OK(bg_launch(K->vadd, s, grid, 1, 1, 128, 1, 1, 0, args, 4));
  OK(bg_stream_synchronize(s));
  OK(bg_memcpy_dtoh(dev, hc, c, N * sizeof(float)));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= hc[i] == (float)(3 * i + 1);
  CHECK(ok);
  uint32_t tail[64];
  OK(bg_memcpy_dtoh(dev, tail, c + N * sizeof(float), sizeof tail));
  ok = 1;
  for (int i = 0; i < 64; i++) ok &= tail[i] == 0xFFFFFFFFu;
  CHECK(ok);
  /* float argument in the low bytes */
  uint64_t sargs[3] = {c, f2slot(0.5f), N};
  OK(bg_launch(K->scalef, s, grid, 1, 1, 128, 1, 1, 0, sargs, 3));
  OK(bg_memcpy_dtoh_async(s, hc, c, N * sizeof(float)));
  OK(bg_stream_synchronize(s));
  ok = 1;
  for (int i = 0; i < N; i++) ok &= hc[i] == (float)(3 * i + 1) * 0.5f;
  CHECK(ok);

  /* limits */
  ERR(bg_launch(K->vadd, s, 1, 1, 1, 1025, 1, 1, 0, args, 4), BG_ERR_INVALID_VALUE);
  ERR(bg_launch(K->vadd, s, 1, 1, 1, 32, 32, 2, 0, args, 4), BG_ERR_INVALID_VALUE);
  ERR(bg_launch(K->vadd, s, 1, 1, 1, 32, 1, 1, 1u << 20, args, 4), BG_ERR_INVALID_VALUE);
  ERR(bg_launch(K->vadd, s, 1, 70000, 1, 32, 1, 1, 0, args, 4), BG_ERR_INVALID_VALUE);
  ERR(bg_launch(K->vadd, s, 0, 1, 1, 32, 1, 1, 0, args, 4), BG_ERR_INVALID_VALUE);

  /* 3-D grid: every block runs once with the right blockIdx; worker ids in range */
  const uint32_t gx = 7, gy = 5, gz = 3, nb = gx * gy * gz;
  bg_devptr ids, wk;
  OK(bg_mem_alloc(dev, nb * 3 * 4, &ids));
  OK(bg_mem_alloc(dev, nb * 4, &wk));
  OK(bg_memset(dev, ids, 0xFFFFFFFFu, 4, nb * 3));
  uint64_t bargs[2] = {ids, wk};
  OK(bg_launch(K->blockids, s, gx, gy, gz, 2, 2, 1, 0, bargs, 2));
  uint32_t hid[105 * 3], hwk[105];
  OK(bg_memcpy_dtoh_async(s, hid, ids, sizeof hid));
  OK(bg_memcpy_dtoh_async(s, hwk, wk, sizeof hwk));
  OK(bg_stream_synchronize(s));
  bg_device_props p;
  OK(bg_device_props_get(dev, &p));
  ok = 1;
  for (uint32_t z = 0; z < gz; z++)
    for (uint32_t y = 0; y < gy; y++)
      for (uint32_t x = 0; x < gx; x++) {
        uint32_t l = x + gx * (y + gy * z);
        ok &= hid[3 * l] == x && hid[3 * l + 1] == y && hid[3 * l + 2] == z;
        ok &= hwk[l] < (uint32_t)p.compute_units;
      }
  CHECK(ok);

  /* shared memory per worker */
  enum { B = 64, NB = 333 };
  int* hin = malloc(B * NB * sizeof(int));
  int hout[NB];
  for (int i = 0; i < B * NB; i++) hin[i] = i % 17 - 8;
  bg_devptr din, dout;
  OK(bg_mem_alloc(dev, B * NB * sizeof(int), &din));
  OK(bg_mem_alloc(dev, NB * sizeof(int), &dout));
  OK(bg_memcpy_htod_async(s, din, hin, B * NB * sizeof(int)));
  uint64_t shargs[2] = {din, dout};
  OK(bg_launch(K->blocksum, s, NB, 1, 1, B, 1, 1, B * sizeof(int), shargs, 2));
  OK(bg_memcpy_dtoh_async(s, hout, dout, sizeof hout));
  OK(bg_stream_synchronize(s));
  ok = 1;
  for (int bi = 0; bi < NB; bi++) {
    int sum = 0;
    for (int t = 0; t < B; t++) sum += hin[bi * B + t];
    ok &= hout[bi] == sum;
  }
  CHECK(ok);

  /* more arguments than fit inline */
  int64_t result = 0;
  uint64_t margs[12];
  for (int i = 0; i < 11; i++) margs[i] = (uint64_t)(i + 1) * 1000;
  margs[11] = (uint64_t)(uintptr_t)&result;
  OK(bg_launch(K->many, s, 3, 1, 1, 1, 1, 1, 0, margs, 12));
  OK(bg_stream_synchronize(s));
  CHECK(result == 66000);

  /* two streams launching concurrently both progress */
  void* s2;
  OK(bg_stream_create(dev, 0, 0, &s2));
  bg_devptr x1, x2;
  OK(bg_mem_alloc(dev, 1000 * 4, &x1));
  OK(bg_mem_alloc(dev, 1000 * 4, &x2));
  OK(bg_memset(dev, x1, 0, 4, 1000));
  OK(bg_memset(dev, x2, 0, 4, 1000));
  uint64_t a1[3] = {x1, 1, 1000}, a2[3] = {x2, 2, 1000};
  for (int i = 0; i < 200; i++) {
    OK(bg_launch(K->addk, s, 8, 1, 1, 128, 1, 1, 0, a1, 3));
    OK(bg_launch(K->addk, s2, 1, 1, 1, 1000, 1, 1, 0, a2, 3));
  }
  OK(bg_device_synchronize(dev));
  int32_t h1[1000], h2[1000];
  OK(bg_memcpy_dtoh(dev, h1, x1, sizeof h1));
  OK(bg_memcpy_dtoh(dev, h2, x2, sizeof h2));
  ok = 1;
  for (int i = 0; i < 1000; i++) ok &= h1[i] == 200 && h2[i] == 400;
  CHECK(ok);

  /* a long-running (persistent) kernel on one stream does not stall launches on another. It
   * runs on non-blocking streams, as on CUDA: the synchronous copies below are default-stream
   * operations and would wait for a blocking stream's persistent kernel forever. */
  static int spin_flag;
  __atomic_store_n(&spin_flag, 0, __ATOMIC_RELEASE);
  uint64_t spargs[1] = {(uint64_t)(uintptr_t)&spin_flag};
  void *p1, *p2;
  OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &p1));
  OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &p2));
  OK(bg_launch(K->spin, p1, 4, 1, 1, 1, 1, 1, 0, spargs, 1));
  OK(bg_launch(K->spin, p2, 1, 1, 1, 1, 1, 1, 0, spargs, 1));
  void* s3;
  OK(bg_stream_create(dev, 0, 0, &s3));
  OK(bg_memset(dev, x1, 0, 4, 1000));
  for (int i = 0; i < 20; i++) OK(bg_launch(K->addk, s3, 8, 1, 1, 128, 1, 1, 0, a1, 3));
  OK(bg_stream_synchronize(s3));
  OK(bg_memcpy_dtoh(dev, h1, x1, sizeof h1));
  CHECK(all_eq_i(h1, 1000, 20));
  ERR(bg_stream_query(p1), BG_ERR_NOT_READY);
  __atomic_store_n(&spin_flag, 1, __ATOMIC_RELEASE);
  OK(bg_stream_synchronize(p1));
  OK(bg_stream_synchronize(p2));
  OK(bg_stream_destroy(p1));
  OK(bg_stream_destroy(p2));

  /* freeing memory and unloading a module with work queued that uses them does not wait and
   * does not pull them from under that work */
  static _Atomic int gate;
  atomic_store(&gate, 0);
  bg_devptr tmp;
  OK(bg_mem_alloc(dev, 1000 * 4, &tmp));
  void* hp;
  bg_devptr hpd;
  OK(bg_host_alloc(dev, 4000, 0, &hp, &hpd));
  void* m2;
  void* k2;
  OK(bg_module_load(dev, BG_IMAGE_SHARED_LIBRARY, so_path, 0, &m2));
  OK(bg_module_get_kernel(m2, "addk", &k2));
  uint64_t at[3] = {tmp, 3, 1000};
  OK(bg_launch_host_func(s3, hf_wait_flag, (void*)&gate));
  OK(bg_memset_async(s3, tmp, 0, 4, 1000));
  OK(bg_launch(k2, s3, 8, 1, 1, 128, 1, 1, 0, at, 3));
  OK(bg_memcpy_dtoh_async(s3, hp, tmp, 4000));
  OK(bg_mem_free(dev, tmp));
  OK(bg_host_free(dev, hp));
  OK(bg_module_unload(m2));
  ERR(bg_stream_query(s3), BG_ERR_NOT_READY);
  atomic_store(&gate, 1);
  OK(bg_stream_synchronize(s3));
  OK(bg_stream_destroy(s3));

  OK(bg_mem_free(dev, x1));
  OK(bg_mem_free(dev, x2));
  OK(bg_mem_free(dev, din));
  OK(bg_mem_free(dev, dout));
  OK(bg_mem_free(dev, ids));
  OK(bg_mem_free(dev, wk));
  OK(bg_mem_free(dev, a));
  OK(bg_mem_free(dev, b));
  OK(bg_mem_free(dev, c));
  free(ha);
  free(hb);
  free(hc);
  free(hin);
  OK(bg_stream_destroy(s));
  OK(bg_stream_destroy(s2));
}

static void read_ints(void* dev, bg_devptr p, int32_t* out, int n) {
  if (bg_memcpy_dtoh(dev, out, p, (uint64_t)n * 4) != BG_OK) fail(__LINE__, "read_ints");
}

static int all_eq(const int32_t* v, int n, int32_t want) {
  for (int i = 0; i < n; i++)
    if (v[i] != want) return 0;
  return 1;
}

static void test_capture(void* dev, kernels* K) {
  void *s1, *s2, *ef, *ej, *ds;
  OK(bg_stream_default(dev, &ds));
  OK(bg_stream_create(dev, 0, 0, &s1));
  OK(bg_stream_create(dev, 0, 0, &s2));
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &ef));
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &ej));
  enum { N = 1000 };
  bg_devptr x, y;
  OK(bg_mem_alloc(dev, N * 4, &x));
  OK(bg_mem_alloc(dev, N * 4, &y));
  OK(bg_memset(dev, x, 0, 4, N));
  OK(bg_memset(dev, y, 0, 4, N));
  int32_t hv[N];

  ERR(bg_stream_begin_capture(ds, BG_CAPTURE_MODE_GLOBAL), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  ERR(bg_stream_begin_capture(s1, 7), BG_ERR_INVALID_VALUE);
  void* g = NULL;
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_ILLEGAL_STATE);
  int32_t st = -1;
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_NONE);

  /* fork / join capture */
  uint64_t ax[3] = {x, 1, N}, ay[3] = {y, 10, N};
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  ERR(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL), BG_ERR_ILLEGAL_STATE);
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_ACTIVE);
  OK(bg_launch(K->addk, s1, 8, 1, 1, 128, 1, 1, 0, ax, 3));
  OK(bg_event_record(ef, s1));
  OK(bg_stream_wait_event(s2, ef));
  OK(bg_stream_capture_status(s2, &st));
  CHECK(st == BG_CAPTURE_ACTIVE);
  OK(bg_launch(K->addk, s2, 4, 1, 1, 256, 1, 1, 0, ay, 3));
  OK(bg_memset_async(s2, y + 4 * (N - 1), 0, 4, 1)); /* y[N-1] stays 0 after each replay... */
  OK(bg_event_record(ej, s2));
  OK(bg_stream_wait_event(s1, ej));
  OK(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  sleep_ms(5);
  CHECK(all_eq((const int32_t*)(uintptr_t)x, N, 0)); /* nothing ran */
  OK(bg_stream_end_capture(s1, &g));
  CHECK(g != NULL);
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_NONE);
  OK(bg_stream_capture_status(s2, &st));
  CHECK(st == BG_CAPTURE_NONE);
  uint32_t nn = 0, nk = 0;
  OK(bg_graph_node_count(g, &nn, &nk));
  CHECK(nn == 4 && nk == 3);
  void* xg;
  OK(bg_graph_instantiate(g, &xg));
  OK(bg_graph_destroy(g));
  OK(bg_graph_upload(xg, s1));
  for (int i = 0; i < 100; i++) OK(bg_graph_launch(xg, s1));
  OK(bg_stream_synchronize(s1));
  read_ints(dev, x, hv, N);
  CHECK(all_eq(hv, N, 200));
  read_ints(dev, y, hv, N);
  CHECK(all_eq(hv, N - 1, 1000) && hv[N - 1] == 0);

  /* update the first kernel node's arguments */
  uint64_t ax5[3] = {x, 5, N};
  ERR(bg_graph_exec_set_kernel_args(xg, 3, ax5, 3), BG_ERR_INVALID_VALUE);
  ERR(bg_graph_exec_set_kernel_args(xg, 0, ax5, 2), BG_ERR_INVALID_VALUE);
  OK(bg_graph_exec_set_kernel_args(xg, 0, ax5, 3));
  OK(bg_graph_launch(xg, s1));
  OK(bg_stream_synchronize(s1));
  read_ints(dev, x, hv, N);
  CHECK(all_eq(hv, N, 206));
  /* while a launch is queued: the queued launch keeps the old arguments */
  static _Atomic int gate;
  atomic_store(&gate, 0);
  OK(bg_launch_host_func(s1, hf_wait_flag, (void*)&gate));
  OK(bg_graph_launch(xg, s1));                         /* +5 +1 */
  uint64_t ax100[3] = {x, 100, N};
  OK(bg_graph_exec_set_kernel_args(xg, 0, ax100, 3));
  OK(bg_graph_launch(xg, s2));                         /* +100 +1, serialized with s1's */
  atomic_store(&gate, 1);
  OK(bg_device_synchronize(dev));
  read_ints(dev, x, hv, N);
  CHECK(all_eq(hv, N, 206 + 6 + 101));
  ERR(bg_graph_launch(xg, s1) == BG_OK ? bg_stream_synchronize(s1) : -1, BG_OK);

  /* graph launch into a capture is refused */
  OK(bg_stream_begin_capture(s2, BG_CAPTURE_MODE_RELAXED));
  ERR(bg_graph_launch(xg, s2), BG_ERR_NOT_SUPPORTED);
  OK(bg_stream_end_capture(s2, &g));
  OK(bg_graph_node_count(g, &nn, &nk));
  CHECK(nn == 0 && nk == 0);
  OK(bg_graph_destroy(g));
  /* exec outlives a destroy with launches queued */
  atomic_store(&gate, 0);
  OK(bg_launch_host_func(s1, hf_wait_flag, (void*)&gate));
  OK(bg_graph_launch(xg, s1));
  OK(bg_graph_exec_destroy(xg));
  atomic_store(&gate, 1);
  OK(bg_stream_synchronize(s1));

  /* Global: an illegal call from another thread invalidates */
  alloc_job job;
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  ERR(alloc_from_thread(dev, &job), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(strstr(job.msg, "bg_mem_alloc") && strstr(job.msg, "Global") &&
        strstr(job.msg, "another thread"));
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_INVALIDATED);
  ERR(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  CHECK(last_error_has("bg_mem_alloc") && last_error_has("Global"));
  CHECK(g == NULL);
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_NONE);
  /* normal work still works */
  OK(bg_memset_async(s1, x, 0, 4, N));
  OK(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  OK(bg_stream_synchronize(s1));
  read_ints(dev, x, hv, N);
  CHECK(all_eq(hv, N, 1));

  /* ThreadLocal: another thread may; this thread may not */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_THREAD_LOCAL));
  OK(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  OK(alloc_from_thread(dev, &job));
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_ACTIVE);
  bg_devptr p = 0;
  ERR(bg_mem_alloc(dev, 64, &p), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(last_error_has("ThreadLocal") && last_error_has("this thread"));
  /* a sync copy uses the default stream while blocking s1 captures: the implicit dependency is
   * what the driver reports first */
  ERR(bg_memcpy_dtoh(dev, hv, x, 4), BG_ERR_STREAM_CAPTURE_IMPLICIT);
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_INVALIDATED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  CHECK(last_error_has("bg_mem_alloc (mode ThreadLocal"));

  /* Relaxed: never by mode; but syncing the capturing stream itself always invalidates */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_RELAXED));
  OK(bg_mem_alloc(dev, 64, &p));
  OK(bg_mem_free(dev, p));
  OK(bg_device_synchronize(dev));
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_ACTIVE);
  ERR(bg_stream_synchronize(s1), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  ERR(bg_stream_query(s1), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);

  /* querying a captured event invalidates */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_RELAXED));
  OK(bg_event_record(ef, s1));
  ERR(bg_event_query(ef), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_event_query(ef)); /* no longer captured */

  /* Global: device synchronize and sync copies are illegal */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  ERR(bg_device_synchronize(dev), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  CHECK(last_error_has("bg_device_synchronize"));

  /* unjoined */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_launch(K->addk, s1, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  OK(bg_event_record(ef, s1));
  OK(bg_stream_wait_event(s2, ef));
  OK(bg_launch(K->addk, s2, 1, 1, 1, 1000, 1, 1, 0, ay, 3));
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_UNJOINED);
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_NONE);
  OK(bg_stream_capture_status(s2, &st));
  CHECK(st == BG_CAPTURE_NONE);
  OK(bg_stream_synchronize(s2));

  /* unmatched: end on the joined stream */
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_event_record(ef, s1));
  OK(bg_stream_wait_event(s2, ef));
  ERR(bg_stream_end_capture(s2, &g), BG_ERR_STREAM_CAPTURE_UNMATCHED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_stream_capture_status(s2, &st));
  CHECK(st == BG_CAPTURE_NONE);

  /* a capture whose fork never did anything and a join-only stream are fine; also copies,
   * memsets, host funcs and an external event record inside a graph */
  static _Atomic int counter;
  atomic_store(&counter, 0);
  void* eo;
  OK(bg_event_create(dev, 0, &eo));
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_THREAD_LOCAL));
  OK(bg_memset_async(s1, x, 3, 4, N));
  OK(bg_memcpy_dtod_async(s1, y, x, N * 4));
  OK(bg_launch_host_func(s1, hf_count, (void*)&counter));
  OK(bg_event_record(eo, s1));
  OK(bg_stream_end_capture(s1, &g));
  OK(bg_graph_node_count(g, &nn, &nk));
  CHECK(nn == 4 && nk == 0);
  OK(bg_graph_instantiate(g, &xg));
  OK(bg_graph_destroy(g));
  OK(bg_memset(dev, y, 0, 4, N));
  OK(bg_graph_launch(xg, s1));
  OK(bg_stream_wait_event(s2, eo));
  OK(bg_launch_host_func(s2, hf_count, (void*)&counter));
  OK(bg_stream_synchronize(s2));
  CHECK(atomic_load(&counter) == 2);
  OK(bg_event_synchronize(eo));
  read_ints(dev, y, hv, N);
  CHECK(all_eq(hv, N, 3));
  OK(bg_graph_exec_destroy(xg));
  OK(bg_event_destroy(eo));

  /* a destroyed joined stream invalidates; a destroyed origin discards */
  void* s3;
  OK(bg_stream_create(dev, 0, 0, &s3));
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_event_record(ef, s1));
  OK(bg_stream_wait_event(s3, ef));
  OK(bg_stream_destroy(s3));
  OK(bg_stream_capture_status(s1, &st));
  CHECK(st == BG_CAPTURE_INVALIDATED);
  ERR(bg_stream_end_capture(s1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_stream_create(dev, 0, 0, &s3));
  OK(bg_stream_begin_capture(s3, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_launch(K->addk, s3, 1, 1, 1, 1000, 1, 1, 0, ax, 3));
  OK(bg_stream_destroy(s3));
  bg_devptr q;
  OK(bg_mem_alloc(dev, 64, &q)); /* no capture is left */
  OK(bg_mem_free(dev, q));

  OK(bg_event_destroy(ef));
  OK(bg_event_destroy(ej));
  OK(bg_mem_free(dev, x));
  OK(bg_mem_free(dev, y));
  OK(bg_stream_destroy(s1));
  OK(bg_stream_destroy(s2));
}

static void test_submit(void* dev, kernels* K) {
  void *s1, *s2, *e, *e2;
  OK(bg_stream_create(dev, 0, 0, &s1));
  OK(bg_stream_create(dev, 0, 0, &s2));
  OK(bg_event_create(dev, 0, &e));
  OK(bg_event_create(dev, 0, &e2));
  enum { N = 512 };
  bg_devptr x, y;
  OK(bg_mem_alloc(dev, N * 4, &x));
  OK(bg_mem_alloc(dev, N * 4, &y));
  void* hp;
  bg_devptr hpd;
  OK(bg_host_alloc(dev, N * 4, BG_HOST_ALLOC_MAPPED, &hp, &hpd));
  int32_t* hin = hp;
  for (int i = 0; i < N; i++) hin[i] = i;
  static int32_t hout[N];

  /* s2 holds a flag that s1's commands wait for through e2 */
  static _Atomic int flags[2];
  atomic_store(&flags[0], 0);
  atomic_store(&flags[1], 0);
  OK(bg_launch_host_func(s2, hf_sleep20, NULL));
  OK(bg_launch_host_func(s2, hf_set_flag, (void*)&flags[0]));
  OK(bg_event_record(e2, s2));

  cmdbuf cb = {.n = 0};
  cmd_event(&cb, BG_CMD_EVENT_WAIT, e2);
  cmd3(&cb, BG_CMD_COPY_HTOD, x, (uint64_t)(uintptr_t)hin, N * 4);
  uint64_t args[3] = {x, 7, N};
  cmd_launch(&cb, K->addk, 4, 128, args, 3);
  put32(&cb, BG_CMD_BARRIER);
  put32(&cb, 8);
  cmd_memset(&cb, y, 0x01010101u, 4, N);
  cmd3(&cb, BG_CMD_COPY, y, x, (N / 2) * 4);
  cmd_event(&cb, BG_CMD_EVENT_RECORD, e);
  cmd3(&cb, BG_CMD_COPY_DTOH, (uint64_t)(uintptr_t)hout, y, N * 4);
  OK(bg_submit(s1, cb.b, cb.n));
  ERR(bg_event_query(e), BG_ERR_NOT_READY); /* s1 waits for s2's 20 ms */
  OK(bg_stream_wait_event(s2, e));
  OK(bg_launch_host_func(s2, hf_check_flag, (void*)flags));
  OK(bg_stream_synchronize(s1));
  OK(bg_stream_synchronize(s2));
  CHECK(atomic_load(&flags[1]) == 1);
  int ok = 1;
  for (int i = 0; i < N / 2; i++) ok &= hout[i] == i + 7;
  for (int i = N / 2; i < N; i++) ok &= hout[i] == 0x01010101;
  CHECK(ok);
  OK(bg_event_query(e));

  /* malformed */
  cmdbuf bad = {.n = 0};
  cmd_memset(&bad, y, 0, 4, 1);
  put32(&bad, 99);
  put32(&bad, 8);
  uint64_t off = 0;
  ERR(bg_submit_checked(s1, bad.b, bad.n, &off), BG_ERR_INVALID_VALUE);
  CHECK(off == 32);
  cmdbuf big = {.n = 0};
  uint64_t a2[3] = {x, 1, N};
  cmd_launch(&big, K->addk, 1, 2048, a2, 3);
  ERR(bg_submit(s1, big.b, big.n), BG_ERR_INVALID_VALUE);

  /* submit during capture records nodes */
  cmdbuf cc = {.n = 0};
  cmd_launch(&cc, K->addk, 4, 128, a2, 3);
  cmd_memset(&cc, y, 0, 4, N);
  cmd_event(&cc, BG_CMD_EVENT_RECORD, e);
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  OK(bg_submit(s1, cc.b, cc.n));
  void* g;
  OK(bg_stream_end_capture(s1, &g));
  uint32_t nn, nk;
  OK(bg_graph_node_count(g, &nn, &nk));
  CHECK(nn == 3 && nk == 1);
  OK(bg_graph_destroy(g));

  /* issue loop and launch loop */
  OK(bg_bench_noop_loop(1000));
  cmdbuf il = {.n = 0};
  cmd_launch(&il, K->addk, 1, 512, a2, 3);
  OK(bg_memset(dev, x, 0, 4, N));
  OK(bg_bench_issue_loop(s1, il.b, il.n, 10));
  OK(bg_bench_launch_loop(K->addk, s1, 1, 512, a2, 3, 1000));
  OK(bg_stream_synchronize(s1));
  int32_t hv[N];
  read_ints(dev, x, hv, N);
  CHECK(all_eq(hv, N, 1010));

  OK(bg_host_free(dev, hp));
  OK(bg_mem_free(dev, x));
  OK(bg_mem_free(dev, y));
  OK(bg_event_destroy(e));
  OK(bg_event_destroy(e2));
  OK(bg_stream_destroy(s1));
  OK(bg_stream_destroy(s2));
}

/* bg_graph_from_commands: the core's command-list graph on the CPU backend. */
static void test_graph_from_commands(void* dev, kernels* K) {
  enum { N = 256 };
  void *s, *e;
  OK(bg_stream_create(dev, 0, 0, &s));
  OK(bg_event_create(dev, 0, &e));
  bg_devptr x, y;
  OK(bg_mem_alloc(dev, N * 4, &x));
  OK(bg_mem_alloc(dev, N * 4, &y));
  /* memset x to 1; x += 5; barrier; y = x; y += 100; record e */
  cmdbuf cb = {.n = 0};
  cmd_memset(&cb, x, 1, 4, N);
  uint64_t ax[3] = {x, 5, N}, ay[3] = {y, 100, N};
  cmd_launch(&cb, K->addk, 1, N, ax, 3);
  put32(&cb, BG_CMD_BARRIER);
  put32(&cb, 8);
  cmd3(&cb, BG_CMD_COPY, y, x, N * 4);
  cmd_launch(&cb, K->addk, 1, N, ay, 3);
  cmd_event(&cb, BG_CMD_EVENT_RECORD, e);
  void *g = NULL, *gx = NULL;
  ERR(bg_graph_from_commands(NULL, cb.b, cb.n, &g), BG_ERR_INVALID_HANDLE);
  ERR(bg_graph_from_commands(dev, cb.b, cb.n, NULL), BG_ERR_INVALID_VALUE);
  OK(bg_graph_from_commands(dev, cb.b, cb.n, &g));
  uint32_t nn = 0, nk = 0;
  OK(bg_graph_node_count(g, &nn, &nk));
  CHECK(nn == 5 && nk == 2); /* the barrier is no node */
  OK(bg_graph_instantiate(g, &gx));
  OK(bg_graph_upload(gx, s));
  int32_t h[N];
  for (int rep = 0; rep < 2; rep++) { /* replayed: the same result each time */
    OK(bg_graph_launch(gx, s));
    OK(bg_stream_synchronize(s));
    OK(bg_event_query(e));
    read_ints(dev, x, h, N);
    CHECK(all_eq_i(h, N, 6));
    read_ints(dev, y, h, N);
    CHECK(all_eq_i(h, N, 106));
  }
  /* argument updates patch the exec, by launch index */
  uint64_t ax2[3] = {x, 40, N}, ay2[3] = {y, 1000, N / 2};
  OK(bg_graph_exec_set_kernel_args(gx, 0, ax2, 3));
  OK(bg_graph_exec_set_kernel_args(gx, 1, ay2, 3));
  ERR(bg_graph_exec_set_kernel_args(gx, 1, ay2, 2), BG_ERR_INVALID_VALUE);
  ERR(bg_graph_exec_set_kernel_args(gx, 2, ay2, 3), BG_ERR_INVALID_VALUE);
  CHECK(last_error_has("out of range"));
  OK(bg_graph_launch(gx, s));
  OK(bg_stream_synchronize(s));
  read_ints(dev, x, h, N);
  CHECK(all_eq_i(h, N, 41));
  read_ints(dev, y, h, N);
  CHECK(all_eq_i(h, N / 2, 1041) && all_eq_i(h + N / 2, N / 2, 41));
  /* a second exec starts from the graph's arguments */
  void* gx2 = NULL;
  OK(bg_graph_instantiate(g, &gx2));
  OK(bg_graph_launch(gx2, s));
  OK(bg_stream_synchronize(s));
  read_ints(dev, y, h, N);
  CHECK(all_eq_i(h, N, 106));
  OK(bg_graph_exec_destroy(gx2));
  /* wrong kinds and devices are refused like any graph handle */
  ERR(bg_graph_launch(g, s), BG_ERR_INVALID_HANDLE);
  ERR(bg_graph_instantiate(gx, &gx2), BG_ERR_INVALID_HANDLE);

  /* a bad list is refused, naming the offending command's offset */
  cmdbuf bad = {.n = 0};
  cmd_memset(&bad, x, 0, 4, 1);
  put32(&bad, 99);
  put32(&bad, 8);
  void* gb = NULL;
  ERR(bg_graph_from_commands(dev, bad.b, bad.n, &gb), BG_ERR_INVALID_VALUE);
  CHECK(gb == NULL && last_error_has("at byte 32"));
  cmdbuf big = {.n = 0};
  cmd_launch(&big, K->addk, 1, 2048, ax, 3);
  ERR(bg_graph_from_commands(dev, big.b, big.n, &gb), BG_ERR_INVALID_VALUE);
  cmdbuf nok = {.n = 0};
  cmd_launch(&nok, (void*)e, 1, 1, ax, 3); /* not a kernel */
  ERR(bg_graph_from_commands(dev, nok.b, nok.n, &gb), BG_ERR_INVALID_HANDLE);
  CHECK(last_error_has("at byte 0"));

  /* kernels of an unloaded module and destroyed events stay usable by the graph, as in a
   * captured graph; a list naming them afterwards is refused */
  void *m2 = NULL, *k2 = NULL, *e2 = NULL;
  OK(bg_module_load(dev, BG_IMAGE_SHARED_LIBRARY, so_path, strlen(so_path) + 1, &m2));
  OK(bg_module_get_kernel(m2, "addk", &k2));
  OK(bg_event_create(dev, 0, &e2));
  cmdbuf hl = {.n = 0};
  uint64_t a3[3] = {x, 3, N};
  cmd_launch(&hl, k2, 1, N, a3, 3);
  cmd_event(&hl, BG_CMD_EVENT_RECORD, e2);
  void *g2 = NULL, *x2 = NULL;
  OK(bg_graph_from_commands(dev, hl.b, hl.n, &g2));
  OK(bg_module_unload(m2));
  OK(bg_event_destroy(e2));
  ERR(bg_graph_from_commands(dev, hl.b, hl.n, &gb), BG_ERR_INVALID_HANDLE);
  ERR(bg_submit(s, hl.b, hl.n), BG_ERR_INVALID_HANDLE);
  OK(bg_graph_instantiate(g2, &x2));
  OK(bg_graph_destroy(g2)); /* the exec holds them too */
  OK(bg_memset(dev, x, 0, 4, N));
  OK(bg_graph_launch(x2, s));
  OK(bg_graph_launch(x2, s));
  OK(bg_stream_synchronize(s));
  read_ints(dev, x, h, N);
  CHECK(all_eq_i(h, N, 6));
  OK(bg_graph_exec_destroy(x2));

  /* an empty list is a graph of no nodes */
  void *ge = NULL, *xe = NULL;
  OK(bg_graph_from_commands(dev, NULL, 0, &ge));
  OK(bg_graph_node_count(ge, &nn, &nk));
  CHECK(nn == 0 && nk == 0);
  OK(bg_graph_instantiate(ge, &xe));
  OK(bg_graph_launch(xe, s));
  OK(bg_graph_exec_destroy(xe));
  OK(bg_graph_destroy(ge));

  OK(bg_graph_exec_destroy(gx));
  OK(bg_graph_destroy(g));
  OK(bg_mem_free(dev, x));
  OK(bg_mem_free(dev, y));
  OK(bg_event_destroy(e));
  OK(bg_stream_destroy(s));
}

static void test_submit_nokernel(void* dev) {
  void* s;
  OK(bg_stream_create(dev, 0, 0, &s));
  bg_devptr y;
  OK(bg_mem_alloc(dev, 64, &y));
  cmdbuf cb = {.n = 0};
  cmd_memset(&cb, y, 0x22, 1, 64);
  put32(&cb, BG_CMD_BARRIER);
  put32(&cb, 8);
  OK(bg_submit(s, cb.b, cb.n));
  OK(bg_stream_synchronize(s));
  CHECK(((uint8_t*)(uintptr_t)y)[63] == 0x22);
  OK(bg_mem_free(dev, y));
  OK(bg_stream_destroy(s));
}

static void test_rings(void* dev) {
  void* r;
  ERR(bg_ring_create(dev, 6, 4, &r), BG_ERR_INVALID_VALUE);
  ERR(bg_ring_create(dev, 8, 3, &r), BG_ERR_INVALID_VALUE);
  OK(bg_ring_create(dev, 8, 4, &r));
  void* host;
  bg_devptr d;
  OK(bg_ring_address(r, &host, &d));
  CHECK(host != NULL && (uintptr_t)host % 128 == 0 && d == (bg_devptr)(uintptr_t)host);
  uint64_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
  uint32_t n = 0, used = 0;
  OK(bg_ring_push(r, in, 3, &n));
  CHECK(n == 3);
  OK(bg_ring_pop(r, out, 2, &n));
  CHECK(n == 2 && out[0] == 1 && out[1] == 2);
  OK(bg_ring_push(r, in + 3, 5, &n)); /* wraps; only 3 fit */
  CHECK(n == 3);
  OK(bg_ring_count(r, &used));
  CHECK(used == 4);
  OK(bg_ring_push(r, in + 6, 1, &n));
  CHECK(n == 0);
  OK(bg_ring_pop(r, out, 8, &n));
  CHECK(n == 4 && out[0] == 3 && out[1] == 4 && out[2] == 5 && out[3] == 6);
  OK(bg_ring_pop(r, out, 8, &n));
  CHECK(n == 0);
  uint32_t meta[2];
  memcpy(meta, (uint8_t*)host + BG_RING_META_OFFSET, 8);
  CHECK(meta[0] == 8 && meta[1] == 4);
  OK(bg_ring_destroy(r));
}

/* ---- the legacy default stream -------------------------------------------------------------- */
static int32_t peek(bg_devptr x) { return __atomic_load_n((int32_t*)(uintptr_t)x, __ATOMIC_ACQUIRE); }

/* CUDA's legacy default stream: default-stream work waits for prior work on every blocking
 * stream and blocking streams wait for prior default-stream work; non-blocking streams are
 * exempt. A `spin` kernel holds a stream until the flag is set, so "has not run" is certain. */
static void test_legacy(void* dev, kernels* K) {
  void *ds, *b1, *b2, *nb;
  OK(bg_stream_default(dev, &ds));
  OK(bg_stream_create(dev, 0, 0, &b1));
  OK(bg_stream_create(dev, 0, 0, &b2));
  OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &nb));
  static int flag;
  uint64_t sp[1] = {(uint64_t)(uintptr_t)&flag};
  bg_devptr x;
  OK(bg_mem_alloc(dev, 64, &x));
  OK(bg_memset(dev, x, 0, 4, 16));
  uint64_t inc[3] = {x, 1, 1};
  int32_t v = -1;
#define HOLD(st)                                             \
  do {                                                       \
    __atomic_store_n(&flag, 0, __ATOMIC_RELEASE);            \
    OK(bg_launch(K->spin, st, 1, 1, 1, 1, 1, 1, 0, sp, 1));  \
  } while (0)
#define RELEASE() __atomic_store_n(&flag, 1, __ATOMIC_RELEASE)

  /* (a) default-stream work waits for a blocking stream's prior work */
  HOLD(b1);
  OK(bg_launch(K->addk, ds, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  sleep_ms(20);
  ERR(bg_stream_query(ds), BG_ERR_NOT_READY);
  CHECK(peek(x) == 0);
  RELEASE();
  OK(bg_stream_synchronize(ds));
  CHECK(peek(x) == 1);

  /* (b) a blocking stream's work waits for prior default-stream work */
  HOLD(ds);
  OK(bg_launch(K->addk, b1, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  sleep_ms(20);
  ERR(bg_stream_query(b1), BG_ERR_NOT_READY);
  CHECK(peek(x) == 1);
  RELEASE();
  OK(bg_stream_synchronize(b1));
  CHECK(peek(x) == 2);

  /* (c) a non-blocking stream overtakes a held default stream, and the default stream (and a
   * blocking stream behind it) overtake a held non-blocking stream */
  HOLD(ds);
  OK(bg_launch(K->addk, nb, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  OK(bg_stream_synchronize(nb));
  CHECK(peek(x) == 3);
  ERR(bg_stream_query(ds), BG_ERR_NOT_READY);
  RELEASE();
  OK(bg_stream_synchronize(ds));
  HOLD(nb);
  OK(bg_launch(K->addk, ds, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  OK(bg_launch(K->addk, b1, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  OK(bg_stream_synchronize(b1));
  CHECK(peek(x) == 5);
  /* a synchronous copy does not wait for a non-blocking stream either */
  OK(bg_memcpy_dtoh(dev, &v, x, 4));
  CHECK(v == 5);
  ERR(bg_stream_query(nb), BG_ERR_NOT_READY);
  RELEASE();
  OK(bg_stream_synchronize(nb));

  /* synchronizing or querying the default stream covers the blocking streams, not the others */
  HOLD(b1);
  ERR(bg_stream_query(ds), BG_ERR_NOT_READY);
  RELEASE();
  OK(bg_stream_synchronize(ds));
  OK(bg_stream_query(b1)); /* finished: synchronizing ds waited for it */
  HOLD(nb);
  OK(bg_stream_query(ds));
  OK(bg_stream_synchronize(ds));
  ERR(bg_stream_query(nb), BG_ERR_NOT_READY);
  RELEASE();
  OK(bg_stream_synchronize(nb));

  /* blocking streams do not wait for each other, only through the default stream */
  HOLD(b1);
  OK(bg_launch(K->addk, b2, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  OK(bg_stream_synchronize(b2));
  CHECK(peek(x) == 6);
  static order_log log;
  static order_item it[2];
  log.n = 0;
  it[0].log = it[1].log = &log;
  it[0].v = 1;
  it[1].v = 2;
  OK(bg_launch_host_func(ds, hf_append, &it[0])); /* waits for b1 */
  OK(bg_launch_host_func(b2, hf_append, &it[1])); /* waits for that, so for b1 too */
  sleep_ms(20);
  ERR(bg_stream_query(b2), BG_ERR_NOT_READY); /* (log.n is not read here: a race for TSan) */
  RELEASE();
  OK(bg_stream_synchronize(b2));
  CHECK(log.n == 2 && log.vals[0] == 1 && log.vals[1] == 2);

  /* (d) a synchronous copy waits for work queued before it on a blocking stream */
  OK(bg_launch_host_func(b1, hf_sleep20, NULL));
  OK(bg_memset_async(b1, x + 4, 0x5a5a5a5au, 4, 1));
  OK(bg_memcpy_dtoh(dev, &v, x + 4, 4));
  CHECK(v == 0x5a5a5a5a);
  OK(bg_launch_host_func(b1, hf_sleep20, NULL));
  OK(bg_memset_async(b1, x + 4, 0x11111111u, 4, 1));
  OK(bg_memset(dev, x + 4, 0x22222222u, 4, 1)); /* after b1's memset, not before */
  CHECK(peek(x + 4) == 0x22222222);
  /* (e) and it is complete when it returns: a non-blocking stream queued next sees it */
  OK(bg_memset(dev, x + 8, 7, 4, 1));
  uint64_t inc8[3] = {x + 8, 1, 1};
  OK(bg_launch(K->addk, nb, 1, 1, 1, 1, 1, 1, 0, inc8, 3));
  OK(bg_stream_synchronize(nb));
  CHECK(peek(x + 8) == 8);
  OK(bg_memcpy_dtod(dev, x + 12, x + 8, 4));
  uint64_t inc12[3] = {x + 12, 1, 1};
  OK(bg_launch(K->addk, nb, 1, 1, 1, 1, 1, 1, 0, inc12, 3));
  OK(bg_stream_synchronize(nb));
  CHECK(peek(x + 12) == 9);

  /* events recorded on the default stream include the blocking streams' prior work */
  void* e;
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &e));
  HOLD(b1);
  OK(bg_event_record(e, ds));
  sleep_ms(10);
  ERR(bg_event_query(e), BG_ERR_NOT_READY);
  RELEASE();
  OK(bg_event_synchronize(e));
  OK(bg_event_destroy(e));

  /* a blocking stream destroyed while the default stream still has to wait for it */
  void* bx;
  OK(bg_stream_create(dev, 0, 0, &bx));
  OK(bg_launch_host_func(ds, hf_sleep20, NULL));
  OK(bg_launch_host_func(bx, hf_sleep20, NULL));
  OK(bg_launch(K->addk, ds, 1, 1, 1, 1, 1, 1, 0, inc, 3)); /* waits for bx */
  OK(bg_stream_destroy(bx));
  OK(bg_stream_synchronize(ds));
  CHECK(peek(x) == 7);

  /* capture: the default stream is unusable while a blocking stream captures (any mode) */
  int32_t st = -1;
  void* g = NULL;
  OK(bg_stream_begin_capture(b1, BG_CAPTURE_MODE_RELAXED));
  ERR(bg_launch(K->addk, ds, 1, 1, 1, 1, 1, 1, 0, inc, 3), BG_ERR_STREAM_CAPTURE_IMPLICIT);
  CHECK(last_error_has("bg_launch") && last_error_has("blocking stream"));
  OK(bg_stream_capture_status(b1, &st));
  CHECK(st == BG_CAPTURE_INVALIDATED);
  ERR(bg_stream_end_capture(b1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_stream_begin_capture(b1, BG_CAPTURE_MODE_RELAXED));
  ERR(bg_memcpy_dtoh(dev, &v, x, 4), BG_ERR_STREAM_CAPTURE_IMPLICIT);
  ERR(bg_stream_end_capture(b1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_stream_begin_capture(b1, BG_CAPTURE_MODE_RELAXED));
  ERR(bg_stream_synchronize(ds), BG_ERR_STREAM_CAPTURE_IMPLICIT);
  ERR(bg_stream_end_capture(b1, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  /* the default stream cannot join a capture, even one of non-blocking streams */
  void* ec;
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &ec));
  OK(bg_stream_begin_capture(nb, BG_CAPTURE_MODE_RELAXED));
  OK(bg_event_record(ec, nb));
  ERR(bg_stream_wait_event(ds, ec), BG_ERR_STREAM_CAPTURE_IMPLICIT);
  ERR(bg_stream_end_capture(nb, &g), BG_ERR_STREAM_CAPTURE_INVALIDATED);
  OK(bg_event_destroy(ec));
  /* a capture of non-blocking streams only is untouched, and captured work takes no implicit
   * dependency */
  OK(bg_stream_begin_capture(nb, BG_CAPTURE_MODE_RELAXED));
  HOLD(ds);
  OK(bg_launch(K->addk, nb, 1, 1, 1, 1, 1, 1, 0, inc, 3));
  OK(bg_stream_end_capture(nb, &g));
  RELEASE();
  OK(bg_stream_synchronize(ds));
  void* xg;
  OK(bg_graph_instantiate(g, &xg));
  OK(bg_graph_destroy(g));
  HOLD(ds);
  OK(bg_graph_launch(xg, b1)); /* a launch on a blocking stream waits for the default stream */
  sleep_ms(10);
  ERR(bg_stream_query(b1), BG_ERR_NOT_READY);
  CHECK(peek(x) == 7);
  RELEASE();
  OK(bg_stream_synchronize(b1));
  CHECK(peek(x) == 8);
  OK(bg_graph_exec_destroy(xg));
#undef HOLD
#undef RELEASE

  OK(bg_mem_free(dev, x));
  OK(bg_stream_destroy(b1));
  OK(bg_stream_destroy(b2));
  OK(bg_stream_destroy(nb));
}

int main(void) {
  void* dev = NULL;
  find_shim_dir();
  test_device(&dev);
  test_memory(dev);
  test_streams(dev);
  test_events(dev);
  test_rings(dev);
  test_submit_nokernel(dev);
  if (build_kernels()) {
    kernels K;
    memset(&K, 0, sizeof K);
    test_kernels(dev, &K);
    test_capture(dev, &K);
    test_submit(dev, &K);
    test_graph_from_commands(dev, &K);
    test_legacy(dev, &K);
    OK(bg_module_unload(K.mod));
  } else {
    printf("cpu_test: no C compiler (cc): kernel, capture and submit tests skipped\n");
  }
  cleanup_kernels();
  /* a stream left open is drained and stopped by close */
  void* leftover;
  OK(bg_stream_create(dev, 0, 0, &leftover));
  OK(bg_launch_host_func(leftover, hf_sleep20, NULL));
  bg_devptr forgotten;
  OK(bg_mem_alloc(dev, 128, &forgotten));
  OK(bg_device_close(dev));
  printf("cpu_test: %d checks passed\n", checks);
  return 0;
}
