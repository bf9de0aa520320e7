#define _POSIX_C_SOURCE 200809L
/* The CUDA backend (shim/cuda) through libbungpu against the driver simulator: every mapped call,
 * capture records and node order, argument updates and error mapping, with kernels run by their
 * host twins so results are checked, not just return codes. Built under ASan/UBSan by run.sh. */
#include "bungpu.h"
#include "cudasim.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static int fails;
#define OK(x) do { int32_t r_ = (x); if (r_) { char e_[1024]; bg_last_error(e_, sizeof e_); printf("FAIL %s -> %d: %s\n", #x, r_, e_); fails++; } } while (0)
#define EXPECT(x, code) do { int32_t r_ = (x); char e_[1024]; bg_last_error(e_, sizeof e_); printf("%s %s -> %d: %s\n", r_ == (code) ? "ok  " : "FAIL", #x, r_, r_ ? e_ : ""); if (r_ != (code)) fails++; } while (0)
#define CHECK(c) do { if (!(c)) { printf("FAIL %s (line %d)\n", #c, __LINE__); fails++; } } while (0)
static void* dev;

/* Host twins: each appends what it ran with to a log. */
static char runlog[4096];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void logrun(const char* fmt, unsigned long long a0, unsigned g) {
  pthread_mutex_lock(&log_mu);
  size_t n = strlen(runlog);
  snprintf(runlog + n, sizeof runlog - n, fmt, a0, g);
  pthread_mutex_unlock(&log_mu);
}
BG_KERNEL(vadd) { logrun("vadd(%llu)x%u ", BG_ARG(0, uint64_t), bg__ctx->grid.x); }
BG_KERNEL(scale) { logrun("scale(%llu)x%u ", BG_ARG(0, uint64_t), bg__ctx->grid.x); }
BG_KERNEL(one) { logrun("one(%llu)x%u ", BG_ARG(0, uint32_t), bg__ctx->grid.x); }
BG_KERNEL(slow) { (void)bg__ctx; struct timespec t = {0, 100 * 1000 * 1000}; nanosleep(&t, NULL); }

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n) { ret; }\n"
    ".visible .entry scale(.param .u64 p, .param .f32 s, .param .u32 n) { ret; }\n"
    ".visible .entry one(.param .u32 n) { ret; }\n"
    ".visible .entry slow() { ret; }\n"
    ".visible .entry twinless() { ret; }\n";

static void* thread_main(void* a) { (void)a; bg_devptr p = 0; OK(bg_mem_alloc(dev, 16, &p)); OK(bg_mem_free(dev, p)); return NULL; }

int main(void) {
  cudasim_api sim;
  if (!cudasim_open(&sim)) { printf("FAIL cannot open the simulator through BUNGPU_LIBCUDA\n"); return 1; }
  sim.register_kernel("vadd", vadd); sim.register_kernel("scale", scale); sim.register_kernel("one", one); sim.register_kernel("slow", slow);
  int32_t av = 0, n = 0; char msg[512];
  bg_backend_info(BG_BACKEND_CUDA, &av, &n, msg, sizeof msg); printf("info %d %d %s\n", av, n, msg);
  OK(bg_device_open(BG_BACKEND_CUDA, 0, &dev));
  EXPECT(bg_device_open(BG_BACKEND_CUDA, 3, &(void*){0}), BG_ERR_INVALID_DEVICE);
  bg_device_props pr; OK(bg_device_props_get(dev, &pr));
  printf("props %s cc %d.%d sms %d warp %d maxthr %d shared %d map %d conc %d\n", pr.name, pr.cc_major, pr.cc_minor, pr.compute_units, pr.warp_size, pr.max_threads_per_block, pr.max_shared_bytes_per_block, pr.can_map_host_memory, pr.concurrent_kernels);
  pthread_t t; pthread_create(&t, NULL, thread_main, NULL); pthread_join(t, NULL);
  bg_devptr d = 0; OK(bg_mem_alloc(dev, 64, &d));
  OK(bg_memset(dev, d, 0x01020304, 4, 16)); unsigned v[16]; OK(bg_memcpy_dtoh(dev, v, d, 64)); printf("memset32 %x\n", v[5]);
  OK(bg_memset(dev, d, 0xBEEF, 2, 32)); OK(bg_memcpy_dtoh(dev, v, d, 64)); printf("memset16 %x\n", v[5]);
  EXPECT(bg_memcpy_dtoh(dev, v, d + 32, 64), BG_ERR_INVALID_VALUE); /* past the allocation */
  { /* peer access on the one simulated device: not its own peer; a "peer" copy within it is a dtod copy */
    int32_t can = 7, path = 7; void* s0; bg_devptr d2 = 0; unsigned w[16] = {0};
    OK(bg_device_can_access_peer(dev, dev, &can)); CHECK(can == 0);
    EXPECT(bg_device_enable_peer_access(dev, dev), BG_ERR_INVALID_DEVICE);
    EXPECT(bg_device_disable_peer_access(dev, dev), BG_ERR_PEER_ACCESS_NOT_ENABLED);
    OK(bg_mem_alloc(dev, 64, &d2)); OK(bg_stream_default(dev, &s0));
    OK(bg_memset(dev, d, 0x0A0B0C0D, 4, 16));
    OK(bg_memcpy_peer_async(s0, d2, dev, d, dev, 64, &path)); CHECK(path == BG_COPY_PATH_DEVICE);
    OK(bg_stream_synchronize(s0)); OK(bg_memcpy_dtoh(dev, w, d2, 64)); CHECK(w[3] == 0x0A0B0C0Du && w[15] == 0x0A0B0C0Du);
    EXPECT(bg_memcpy_peer_async(s0, d2, dev, d + 32, dev, 64, &path), BG_ERR_INVALID_VALUE); /* past the allocation */
    OK(bg_mem_free(dev, d2));
  }
  { /* sharing between processes, as far as one process goes: export, and the driver's refusals */
    unsigned char mh[BG_IPC_HANDLE_BYTES], eh[BG_IPC_HANDLE_BYTES], junk[BG_IPC_HANDLE_BYTES];
    bg_devptr sd = 0, got = 0; uint64_t bytes = 0; void *ev = NULL, *plain = NULL, *opened = NULL;
    OK(bg_mem_alloc_flags(dev, 1000, BG_MEM_SHAREABLE, &sd)); /* CUDA: any cuMemAlloc memory */
    OK(bg_ipc_mem_export(dev, sd, mh));
    EXPECT(bg_ipc_mem_export(dev, sd + 8, mh + 0), BG_ERR_INVALID_VALUE); /* not an allocation's start */
    EXPECT(bg_ipc_mem_open(dev, mh, &got, &bytes), BG_ERR_INVALID_CONTEXT); /* the exporting process */
    memset(junk, 0x5a, sizeof junk);
    EXPECT(bg_ipc_mem_open(dev, junk, &got, &bytes), BG_ERR_INVALID_VALUE);
    EXPECT(bg_ipc_mem_close(dev, sd), BG_ERR_INVALID_VALUE); /* not an opened mapping */
    EXPECT(bg_event_create(dev, BG_EVENT_INTERPROCESS, &ev), BG_ERR_INVALID_VALUE); /* timing on */
    OK(bg_event_create(dev, BG_EVENT_INTERPROCESS | BG_EVENT_DISABLE_TIMING, &ev));
    OK(bg_ipc_event_export(ev, eh));
    EXPECT(bg_ipc_event_open(dev, eh, &opened), BG_ERR_INVALID_CONTEXT);
    EXPECT(bg_ipc_event_open(dev, mh, &opened), BG_ERR_INVALID_VALUE); /* a memory handle */
    OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &plain));
    EXPECT(bg_ipc_event_export(plain, eh), BG_ERR_INVALID_VALUE); /* not interprocess */
    void* s0; OK(bg_stream_default(dev, &s0)); OK(bg_event_record(ev, s0)); OK(bg_event_synchronize(ev));
    OK(bg_event_destroy(plain)); OK(bg_event_destroy(ev)); OK(bg_mem_free(dev, sd));
    printf("ipc handles checked\n");
  }
  void* h = NULL; bg_devptr hd = 0; OK(bg_host_alloc(dev, 64, BG_HOST_ALLOC_MAPPED, &h, &hd)); printf("mapped dev==host %d\n", hd == (bg_devptr)(uintptr_t)h); OK(bg_host_free(dev, h));
  OK(bg_host_alloc(dev, 64, 0, &h, &hd)); printf("unmapped dev=%llu\n", (unsigned long long)hd); OK(bg_host_free(dev, h));
  void* ring; OK(bg_ring_create(dev, 16, 8, &ring)); void* rh; bg_devptr rd; OK(bg_ring_address(ring, &rh, &rd));
  printf("ring data zeroed %d\n", ((unsigned char*)rh)[400] == 0); OK(bg_ring_destroy(ring));
  void* ds; OK(bg_stream_default(dev, &ds));
  void *s1, *s2; OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s1)); OK(bg_stream_create(dev, 0, -1, &s2));
  void* m; EXPECT(bg_module_load(dev, BG_IMAGE_MSL_SOURCE, "x", 1, &m), BG_ERR_NOT_SUPPORTED);
  EXPECT(bg_module_load(dev, BG_IMAGE_PTX, "BAD ptx", 7, &m), BG_ERR_INVALID_PTX);
  OK(bg_module_load(dev, BG_IMAGE_PTX, ptx, sizeof ptx - 1, &m));
  void *ka, *kb, *kc, *kslow, *ka2; OK(bg_module_get_kernel(m, "vadd", &ka)); OK(bg_module_get_kernel(m, "scale", &kb)); OK(bg_module_get_kernel(m, "one", &kc)); OK(bg_module_get_kernel(m, "slow", &kslow)); OK(bg_module_get_kernel(m, "vadd", &ka2));
  printf("same kernel handle %d\n", ka == ka2);
  EXPECT(bg_module_get_kernel(m, "missing", &ka2), BG_ERR_NOT_FOUND);
  void* kt; OK(bg_module_get_kernel(m, "twinless", &kt));
  EXPECT(bg_launch(kt, s1, 1, 1, 1, 1, 1, 1, 0, NULL, 0), BG_ERR_NOT_FOUND);
  int32_t mt; OK(bg_kernel_max_threads(ka, &mt)); printf("max threads %d\n", mt);
  EXPECT(bg_stream_query(s1), BG_OK);
  OK(bg_launch(kslow, s1, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  EXPECT(bg_stream_query(s1), BG_ERR_NOT_READY);
  OK(bg_stream_synchronize(s1)); EXPECT(bg_stream_query(s1), BG_OK);
  uint64_t args[4] = {11, 22, 33, 44};
  OK(bg_launch(ka, ds, 1, 1, 1, 32, 1, 1, 0, args, 4));
  EXPECT(bg_launch(ka, ds, 1, 1, 1, 2048, 1, 1, 0, args, 4), BG_ERR_INVALID_VALUE);
  EXPECT(bg_stream_begin_capture(ds, 0), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  OK(bg_device_synchronize(dev));
  runlog[0] = 0;
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  int32_t st; OK(bg_stream_capture_status(s1, &st)); printf("status %d\n", st);
  void *e1, *e2; OK(bg_event_create(dev, 0, &e1)); OK(bg_event_create(dev, 0, &e2));
  uint64_t a1[4] = {1, 0, 0, 0}, a2[3] = {2, 0, 0}, a3[4] = {3, 0, 0, 0};
  OK(bg_launch(ka, s1, 1, 1, 1, 32, 1, 1, 0, a1, 4));          // node 0
  OK(bg_event_record(e1, s1)); OK(bg_stream_wait_event(s2, e1)); // fork
  OK(bg_launch(kb, s2, 2, 1, 1, 32, 1, 1, 0, a2, 3));          // node 1 (on s2)
  OK(bg_launch(ka, s1, 3, 1, 1, 32, 1, 1, 0, a3, 4));          // node 2
  OK(bg_event_record(e2, s2)); OK(bg_stream_wait_event(s1, e2)); // join
  // a command buffer launch during capture: node 3
  struct { uint32_t op, size; uint64_t k; uint32_t g[3], b[3], sh, na; uint64_t args[1]; } cmd = {BG_CMD_LAUNCH, sizeof cmd, (uint64_t)(uintptr_t)kc, {4,1,1}, {1,1,1}, 0, 1, {4}};
  OK(bg_submit(s1, &cmd, sizeof cmd));
  printf("nothing ran during capture: [%s]\n", runlog);
  void* g; OK(bg_stream_end_capture(s1, &g));
  uint32_t nn, nk; OK(bg_graph_node_count(g, &nn, &nk)); printf("nodes %u kernel %u\n", nn, nk);
  void* x; OK(bg_graph_instantiate(g, &x));
  OK(bg_graph_destroy(g)); // exec keeps it alive
  uint64_t na[3] = {77, 0, 0};
  OK(bg_graph_exec_set_kernel_args(x, 1, na, 3));
  uint64_t nb[4] = {99, 0, 0, 0}; OK(bg_graph_exec_set_kernel_args(x, 2, nb, 4));
  uint64_t nc[1] = {5}; OK(bg_graph_exec_set_kernel_args(x, 3, nc, 1));
  EXPECT(bg_graph_exec_set_kernel_args(x, 1, na, 2), BG_ERR_INVALID_VALUE);
  EXPECT(bg_graph_exec_set_kernel_args(x, 4, na, 3), BG_ERR_INVALID_VALUE);
  OK(bg_graph_upload(x, s1)); OK(bg_graph_launch(x, s1));
  OK(bg_stream_synchronize(s1));
  printf("replay: %s\n", runlog);
  OK(bg_graph_exec_destroy(x));
  float ms;
  EXPECT(bg_event_elapsed(&ms, e1, e2), BG_ERR_CAPTURED_EVENT);
  EXPECT(bg_event_query(e1), BG_ERR_CAPTURED_EVENT);
  OK(bg_event_record(e1, s1)); OK(bg_launch(kslow, s1, 1, 1, 1, 1, 1, 1, 0, NULL, 0)); OK(bg_event_record(e2, s1));
  EXPECT(bg_event_elapsed(&ms, e1, e2), BG_ERR_NOT_READY);
  OK(bg_event_synchronize(e2)); OK(bg_event_elapsed(&ms, e1, e2)); printf("elapsed >= 90 ms: %d\n", ms >= 90.0f);
  OK(bg_event_query(e1));
  { // a graph from a command list: the core's generic graph, replayed through this backend
    struct { uint32_t op, size; uint64_t k; uint32_t g[3], b[3], sh, na; uint64_t args[4]; } l1 = {BG_CMD_LAUNCH, sizeof l1, (uint64_t)(uintptr_t)ka, {1,1,1}, {32,1,1}, 0, 4, {5, 0, 0, 0}};
    struct { uint32_t op, size; uint64_t e; } r1 = {BG_CMD_EVENT_RECORD, sizeof r1, 0};
    struct { uint32_t op, size; uint64_t k; uint32_t g[3], b[3], sh, na; uint64_t args[3]; } l2 = {BG_CMD_LAUNCH, sizeof l2, (uint64_t)(uintptr_t)kb, {2,1,1}, {32,1,1}, 0, 3, {6, 0, 0}};
    struct { uint32_t op, size; uint64_t dst; uint32_t pat, esz; uint64_t count; } ms1 = {BG_CMD_MEMSET, sizeof ms1, d, 0x07070707u, 4, 16};
    struct { uint32_t op, size; uint64_t dst, src, bytes; } cp1 = {BG_CMD_COPY_DTOH, sizeof cp1, 0, d, 64};
    unsigned got[16] = {0};
    cp1.dst = (uint64_t)(uintptr_t)got;
    void* e3; OK(bg_event_create(dev, 0, &e3)); r1.e = (uint64_t)(uintptr_t)e3;
    uint8_t list[512]; size_t o = 0;
    memcpy(list + o, &l1, sizeof l1); o += sizeof l1; memcpy(list + o, &r1, sizeof r1); o += sizeof r1;
    memcpy(list + o, &l2, sizeof l2); o += sizeof l2; memcpy(list + o, &ms1, sizeof ms1); o += sizeof ms1;
    memcpy(list + o, &cp1, sizeof cp1); o += sizeof cp1;
    void *cg = NULL, *cx = NULL; OK(bg_graph_from_commands(dev, list, o, &cg));
    uint32_t cn = 0, ck = 0; OK(bg_graph_node_count(cg, &cn, &ck)); printf("list graph nodes %u kernel %u\n", cn, ck);
    OK(bg_graph_instantiate(cg, &cx));
    OK(bg_graph_destroy(cg));
    OK(bg_event_destroy(e3)); // the graph holds it
    runlog[0] = 0;
    OK(bg_graph_upload(cx, s1)); OK(bg_graph_launch(cx, s1)); OK(bg_graph_launch(cx, s1));
    uint64_t up[3] = {8, 0, 0}; OK(bg_graph_exec_set_kernel_args(cx, 1, up, 3));
    EXPECT(bg_graph_exec_set_kernel_args(cx, 1, up, 4), BG_ERR_INVALID_VALUE);
    EXPECT(bg_graph_exec_set_kernel_args(cx, 2, up, 3), BG_ERR_INVALID_VALUE); // names the driver graph's count
    OK(bg_graph_launch(cx, s1)); OK(bg_stream_synchronize(s1));
    printf("list replay: %s\n", runlog);
    printf("list memset %x\n", got[15]);
    OK(bg_graph_exec_destroy(cx));
    // a graph keeps its kernel's module loaded; the handle itself is dead for new lists
    void *m2, *kv2; OK(bg_module_load(dev, BG_IMAGE_PTX, ptx, sizeof ptx - 1, &m2)); OK(bg_module_get_kernel(m2, "vadd", &kv2));
    l1.k = (uint64_t)(uintptr_t)kv2; l1.args[0] = 9;
    OK(bg_graph_from_commands(dev, &l1, sizeof l1, &cg)); OK(bg_graph_instantiate(cg, &cx));
    OK(bg_module_unload(m2));
    EXPECT(bg_graph_from_commands(dev, &l1, sizeof l1, &(void*){0}), BG_ERR_INVALID_HANDLE);
    runlog[0] = 0;
    OK(bg_graph_launch(cx, s1)); OK(bg_stream_synchronize(s1));
    printf("after unload: %s\n", runlog);
    OK(bg_graph_exec_destroy(cx)); OK(bg_graph_destroy(cg));
  }
  { // stream-ordered allocation and pools through the backend (cuMemPool*, cuMemAllocAsync)
    void *pool = NULL, *dpool = NULL, *dpool2 = NULL;
    OK(bg_mempool_create(dev, ~0ull, &pool));
    OK(bg_mempool_default(dev, &dpool)); OK(bg_mempool_default(dev, &dpool2));
    printf("default pool handle stable %d\n", dpool == dpool2 && dpool != pool);
    bg_devptr p1 = 0, p2 = 0, p3 = 0;
    OK(bg_launch(kslow, s1, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
    OK(bg_mem_alloc_async(s1, pool, 1000, &p1)); OK(bg_mem_free_async(s1, p1));
    OK(bg_mem_alloc_async(s1, pool, 1000, &p2));
    void* s4; OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s4));
    OK(bg_mem_alloc_async(s4, pool, 1000, &p3));
    printf("pool reuse same stream %d other stream while busy %d\n", p2 == p1, p3 == p1);
    uint64_t st[4]; OK(bg_mempool_stats(pool, &st[0], &st[1], &st[2], &st[3]));
    printf("pool stats %llu %llu %llu %llu\n", (unsigned long long)st[0], (unsigned long long)st[1], (unsigned long long)st[2], (unsigned long long)st[3]);
    OK(bg_mem_free_async(s1, p2)); OK(bg_mem_free_async(s4, p3));
    EXPECT(bg_mem_free_async(s4, p3), BG_ERR_INVALID_VALUE);
    OK(bg_stream_synchronize(s1)); OK(bg_stream_synchronize(s4));
    OK(bg_mempool_reset_peak(pool)); OK(bg_mempool_trim(pool, 1024));
    OK(bg_mempool_stats(pool, &st[0], &st[1], &st[2], &st[3]));
    printf("pool after trim %llu %llu %llu %llu\n", (unsigned long long)st[0], (unsigned long long)st[1], (unsigned long long)st[2], (unsigned long long)st[3]);
    OK(bg_mempool_set_threshold(pool, 0)); OK(bg_stream_synchronize(s1));
    OK(bg_mempool_stats(pool, &st[0], NULL, NULL, NULL)); printf("pool after sync %llu\n", (unsigned long long)st[0]);
    EXPECT(bg_mempool_destroy(dpool), BG_ERR_INVALID_VALUE);
    EXPECT(bg_mem_alloc_async(s1, NULL, 0, &p1), BG_ERR_INVALID_VALUE);
    // in a capture: a memory allocation node and a free node, the same address every replay
    bg_devptr gp = 0;
    OK(bg_stream_begin_capture(s4, BG_CAPTURE_MODE_GLOBAL));
    OK(bg_mem_alloc_async(s4, NULL, 256, &gp));
    OK(bg_memset_async(s4, gp, 0x05050505u, 4, 64));
    unsigned got[64] = {0};
    OK(bg_memcpy_dtoh_async(s4, got, gp, 256));
    OK(bg_mem_free_async(s4, gp));
    void* mg; OK(bg_stream_end_capture(s4, &mg));
    uint32_t mn = 0, mk = 0; OK(bg_graph_node_count(mg, &mn, &mk)); printf("memory graph nodes %u kernel %u\n", mn, mk);
    void* mx; OK(bg_graph_instantiate(mg, &mx)); OK(bg_graph_destroy(mg));
    for (int r = 0; r < 3; r++) { got[63] = 0; OK(bg_graph_launch(mx, s4)); OK(bg_stream_synchronize(s4)); CHECK(got[63] == 0x05050505u); }
    printf("memory graph replayed %x\n", got[63]);
    OK(bg_graph_exec_destroy(mx));
    OK(bg_mempool_destroy(pool));
    OK(bg_stream_destroy(s4));
  }
  OK(bg_event_destroy(e1)); OK(bg_event_destroy(e2));
  OK(bg_stream_destroy(s2)); void* s3; OK(bg_stream_create(dev, 0, 0, &s3)); OK(bg_stream_begin_capture(s3, BG_CAPTURE_MODE_RELAXED)); OK(bg_launch(ka, s3, 1, 1, 1, 1, 1, 1, 0, args, 4)); OK(bg_stream_destroy(s3)); // destroy while capturing
  OK(bg_stream_synchronize(s1)); OK(bg_stream_destroy(s1));
  OK(bg_module_unload(m));
  OK(bg_mem_free(dev, d));
  OK(bg_device_synchronize(dev)); uint64_t fb, tb; OK(bg_device_mem_info(dev, &fb, &tb)); CHECK(fb <= tb && tb > 0);
  OK(bg_device_close(dev));
  printf("%d failures\n", fails);
  return fails != 0;
}
