#define _GNU_SOURCE
#include "bungpu.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long mock_live(int cls);
void mock_report(void);
int32_t bg_signal_create(void** out);
int32_t bg_signal_destroy(void* sig);
int32_t bg_signal_address(void* sig, void** out_word);

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)
#define OK(call) do { int32_t rc_ = (call); if (rc_) { char m_[1024]; bg_last_error(m_, sizeof m_); fails++; fprintf(stderr, "FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, rc_, m_); } } while (0)

static char order[64];
static _Atomic int norder;
static void hostfn(void* u) { order[norder++] = (char)(uintptr_t)u; }
static int* watched;
static int seen_at_host;
static void peek(void* u) { (void)u; usleep(40000); seen_at_host = watched[0]; }

static const char* SRC = "kernel void vadd(...) {} kernel void slowinc() {} kernel void fail() {} kernel void twice() {}";

static void put32(uint8_t** p, uint32_t v) { memcpy(*p, &v, 4); *p += 4; }
static void put64(uint8_t** p, uint64_t v) { memcpy(*p, &v, 8); *p += 8; }

int main(void) {
  int32_t avail = 0, count = 0;
  char msg[512];
  OK(bg_backend_info(BG_BACKEND_METAL, &avail, &count, msg, sizeof msg));
  CHECK(avail == 1 && count == 1, "avail %d count %d (%s)", avail, count, msg);
  void* dev;
  OK(bg_device_open(BG_BACKEND_METAL, 0, &dev));
  bg_device_props pr;
  OK(bg_device_props_get(dev, &pr));
  CHECK(!strcmp(pr.name, "Mock Apple M9") && pr.max_threads_per_block == 1024 && pr.unified_memory == 1 &&
        pr.max_shared_bytes_per_block == 32768 && pr.total_mem == 16ull << 30, "props %s %d", pr.name, pr.max_threads_per_block);
  uint64_t fr, tot;
  OK(bg_device_mem_info(dev, &fr, &tot));
  CHECK(tot == 16ull << 30 && fr == 15ull << 30, "mem info");
  int32_t ma, mi;
  OK(bg_rtc_version(dev, &ma, &mi));
  CHECK(ma == 3 && mi == 1, "msl %d.%d", ma, mi);

  /* modules */
  void *mod, *vadd, *slow, *failk, *twice, *k;
  CHECK(bg_module_load(dev, BG_IMAGE_MSL_SOURCE, "#error x", 8, &mod) == BG_ERR_COMPILE, "compile error code");
  bg_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "newLibraryWithSource") && strstr(msg, "boom"), "compile msg %s", msg);
  OK(bg_module_load(dev, BG_IMAGE_MSL_SOURCE, SRC, strlen(SRC) + 1, &mod));
  OK(bg_module_get_kernel(mod, "vadd", &vadd));
  OK(bg_module_get_kernel(mod, "vadd", &k));
  CHECK(k == vadd, "kernel cached");
  CHECK(bg_module_get_kernel(mod, "nope", &k) == BG_ERR_NOT_FOUND, "not found");
  OK(bg_module_get_kernel(mod, "slowinc", &slow));
  OK(bg_module_get_kernel(mod, "fail", &failk));
  OK(bg_module_get_kernel(mod, "twice", &twice));
  int32_t mt;
  OK(bg_kernel_max_threads(vadd, &mt));
  CHECK(mt == 1024, "max threads");

  /* memory + sync copies + default-stream launches */
  enum { N = 1000 };
  bg_devptr a, b, c;
  OK(bg_mem_alloc(dev, N * 4, &a));
  OK(bg_mem_alloc(dev, N * 4, &b));
  OK(bg_mem_alloc(dev, N * 4, &c));
  float ha[N], hb[N], hc[N];
  for (int i = 0; i < N; i++) ha[i] = (float)i, hb[i] = 2.0f * i;
  OK(bg_memcpy_htod(dev, a, ha, sizeof ha));
  OK(bg_memcpy_htod(dev, b, hb, sizeof hb));
  void* ds;
  OK(bg_stream_default(dev, &ds));
  uint64_t args[4] = {a, b, c, N};
  for (int it = 0; it < 50; it++) OK(bg_launch(vadd, ds, (N + 255) / 256, 1, 1, 256, 1, 1, 0, args, 4));
  OK(bg_memcpy_dtoh(dev, hc, c, sizeof hc));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += hc[i] != 3.0f * i;
  CHECK(!bad, "vadd wrong %d", bad);
  /* a view: address + offset binds with setBuffer at that offset */
  uint64_t args2[4] = {a + 400, b + 400, c, 10};
  OK(bg_launch(vadd, ds, 1, 1, 1, 16, 1, 1, 0, args2, 4));
  OK(bg_memcpy_dtoh(dev, hc, c, 40));
  CHECK(hc[0] == 300.0f && hc[9] == 327.0f, "view %f %f", hc[0], hc[9]);
  CHECK(bg_launch(vadd, ds, 1, 1, 1, 2048, 1, 1, 0, args, 4) == BG_ERR_INVALID_VALUE, "too many threads");
  CHECK(bg_launch(vadd, ds, 1, 1, 1, 64, 1, 1, 40000, args, 4) == BG_ERR_INVALID_VALUE, "too much shared");
  CHECK(bg_mem_free(dev, a + 4) == BG_ERR_INVALID_VALUE, "free inside");
  CHECK(bg_memcpy_htod(dev, a + N * 4 - 4, ha, 8) == BG_ERR_INVALID_VALUE, "htod past end");
  CHECK(bg_memcpy_htod(dev, 0x1234, ha, 8) == BG_ERR_INVALID_VALUE, "htod unknown");

  /* sync memset */
  OK(bg_memset(dev, c, 0x1234abcd, 4, N));
  OK(bg_memcpy_dtoh(dev, hc, c, 8));
  uint32_t u;
  memcpy(&u, hc, 4);
  CHECK(u == 0x1234abcd, "sync memset32 %x", u);

  /* streams: async fills, copies, host funcs, order */
  void* s1;
  OK(bg_stream_create(dev, 0, 0, &s1));
  uint8_t pg[N * 4], back[N * 4];
  memset(pg, 7, sizeof pg);
  OK(bg_memset_async(s1, c, 0x55, 1, N * 4));
  OK(bg_launch_host_func(s1, hostfn, (void*)'A'));
  OK(bg_memset_async(s1, c + 2, 0xBEEF, 2, 3));       /* 16-bit fill at an odd-of-4 offset */
  OK(bg_memset_async(s1, c + 8, 0xCAFEF00D, 4, 2));
  OK(bg_launch_host_func(s1, hostfn, (void*)'B'));
  OK(bg_memcpy_htod_async(s1, a, pg, 64));             /* pageable source: staging buffer */
  memset(pg, 9, sizeof pg);                            /* reuse at once: must not matter */
  OK(bg_memcpy_dtod_async(s1, b + 1, a, 13));          /* unaligned: copy8 kernel */
  OK(bg_memcpy_dtod_async(s1, b + 64, a, 64));         /* aligned: blit */
  OK(bg_memcpy_dtoh_async(s1, back, c, 16));           /* pageable destination: helper thread */
  OK(bg_launch_host_func(s1, hostfn, (void*)'C'));
  OK(bg_stream_synchronize(s1));
  CHECK(norder == 3 && !memcmp(order, "ABC", 3), "host order %.*s", norder, order);
  uint8_t expect[16] = {0x55, 0x55, 0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE, 0x0D, 0xF0, 0xFE, 0xCA, 0x0D, 0xF0, 0xFE, 0xCA};
  CHECK(!memcmp(back, expect, 16), "fills/dtoh %02x %02x %02x %02x", back[0], back[1], back[2], back[3]);
  uint8_t hb8[128];
  OK(bg_memcpy_dtoh(dev, hb8, b, 128));
  CHECK(hb8[0] != 7 && hb8[1] == 7 && hb8[13] == 7 && hb8[14] != 7 && hb8[64] == 7 && hb8[127] == 7, "copies");
  OK(bg_stream_query(s1));

  /* host work holds later GPU work back: the stream stops at a host func until it returns */
  void* hostbuf;
  bg_devptr hostdev;
  OK(bg_host_alloc(dev, 4096, BG_HOST_ALLOC_MAPPED, &hostbuf, &hostdev));
  CHECK((uint64_t)(uintptr_t)hostbuf == hostdev, "mapped address");
  watched = hostbuf;
  watched[0] = 0;
  uint64_t sargs[2] = {hostdev, 1};
  OK(bg_launch(slow, s1, 1, 1, 1, 1, 1, 1, 0, sargs, 2));
  OK(bg_launch_host_func(s1, peek, NULL));
  OK(bg_launch(slow, s1, 1, 1, 1, 1, 1, 1, 0, sargs, 2));
  CHECK(bg_stream_query(s1) == BG_ERR_NOT_READY, "query not ready");
  OK(bg_stream_synchronize(s1));
  CHECK(seen_at_host == 1 && watched[0] == 2, "gate: host saw %d, final %d", seen_at_host, watched[0]);

  /* signals (TypeScript host functions) */
  void* sig;
  OK(bg_signal_create(&sig));
  _Atomic uint32_t* word;
  OK(bg_signal_address(sig, (void**)&word));
  watched[0] = 0;
  OK(bg_launch(slow, s1, 1, 1, 1, 1, 1, 1, 0, sargs, 2));
  OK(bg_stream_host_signal(s1, sig));
  OK(bg_launch(slow, s1, 1, 1, 1, 1, 1, 1, 0, sargs, 2));
  while (atomic_load(word) != BG_SIGNAL_REACHED) usleep(100);
  CHECK(watched[0] == 1, "at signal %d", watched[0]);
  usleep(50000);
  CHECK(watched[0] == 1, "held at signal %d", watched[0]);
  OK(bg_signal_release(sig));
  OK(bg_stream_synchronize(s1));
  CHECK(watched[0] == 2, "after signal %d", watched[0]);
  OK(bg_signal_destroy(sig));

  /* events across streams, timing */
  void *s2, *e0, *e1, *en;
  OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s2));
  OK(bg_event_create(dev, 0, &e0));
  OK(bg_event_create(dev, 0, &e1));
  OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &en));
  OK(bg_event_query(en)); /* never recorded: complete */
  watched[0] = 0;
  OK(bg_event_record(e0, s1));
  OK(bg_launch(slow, s1, 1, 1, 1, 1, 1, 1, 0, sargs, 2));
  OK(bg_event_record(en, s1));
  OK(bg_event_record(e1, s1));
  OK(bg_stream_wait_event(s2, en));
  uint64_t targs[3] = {hostdev, hostdev + 64, 1};
  OK(bg_launch(twice, s2, 1, 1, 1, 1, 1, 1, 0, targs, 3)); /* reads watched[0] as float bits */
  float ms;
  CHECK(bg_event_elapsed(&ms, e0, e1) == BG_ERR_NOT_READY || 1, "elapsed early");
  OK(bg_event_synchronize(e1));
  OK(bg_event_elapsed(&ms, e0, e1));
  CHECK(ms >= 15.0f && ms < 1000.0f, "elapsed %f", ms);
  CHECK(bg_event_elapsed(&ms, e0, en) == BG_ERR_INVALID_HANDLE, "no timing");
  OK(bg_stream_synchronize(s2));
  float got;
  memcpy(&got, (char*)hostbuf + 64, 4);
  float one;
  int w1 = 1;
  memcpy(&one, &w1, 4);
  CHECK(got == 2 * one, "s2 waited for s1: %g vs %g", got, 2 * one);
  OK(bg_event_query(en));

  /* command list: launches, barrier, copy, memset, record, htod/dtoh, wait */
  uint8_t cmds[1024], *p = cmds;
  bg_devptr x, y;
  OK(bg_mem_alloc(dev, 4096, &x));
  OK(bg_mem_alloc(dev, 4096, &y));
  float src16[16], out16[16];
  for (int i = 0; i < 16; i++) src16[i] = (float)i;
  put32(&p, BG_CMD_COPY_HTOD); put32(&p, 32); put64(&p, x); put64(&p, (uint64_t)(uintptr_t)src16); put64(&p, 64);
  put32(&p, BG_CMD_BARRIER); put32(&p, 8);
  put32(&p, BG_CMD_LAUNCH); put32(&p, 48 + 24); put64(&p, (uint64_t)(uintptr_t)twice);
  put32(&p, 1); put32(&p, 1); put32(&p, 1); put32(&p, 16); put32(&p, 1); put32(&p, 1); put32(&p, 0); put32(&p, 3);
  put64(&p, x); put64(&p, y); put64(&p, 16);
  put32(&p, BG_CMD_BARRIER); put32(&p, 8);
  put32(&p, BG_CMD_LAUNCH); put32(&p, 48 + 24); put64(&p, (uint64_t)(uintptr_t)twice);
  put32(&p, 1); put32(&p, 1); put32(&p, 1); put32(&p, 16); put32(&p, 1); put32(&p, 1); put32(&p, 0); put32(&p, 3);
  put64(&p, y); put64(&p, x); put64(&p, 16);
  put32(&p, BG_CMD_EVENT_RECORD); put32(&p, 16); put64(&p, (uint64_t)(uintptr_t)e0);
  put32(&p, BG_CMD_COPY); put32(&p, 32); put64(&p, y + 64); put64(&p, x); put64(&p, 64);
  put32(&p, BG_CMD_MEMSET); put32(&p, 32); put64(&p, y + 128); put32(&p, 0x3f800000); put32(&p, 4); put64(&p, 4);
  put32(&p, BG_CMD_EVENT_WAIT); put32(&p, 16); put64(&p, (uint64_t)(uintptr_t)en);
  put32(&p, BG_CMD_COPY_DTOH); put32(&p, 32); put64(&p, (uint64_t)(uintptr_t)out16); put64(&p, y + 64); put64(&p, 64);
  OK(bg_submit(s2, cmds, (uint64_t)(p - cmds)));
  OK(bg_stream_synchronize(s2));
  bad = 0;
  for (int i = 0; i < 16; i++) bad += out16[i] != 4.0f * i;
  CHECK(!bad, "submit result %f %f", out16[1], out16[15]);
  OK(bg_memcpy_dtoh(dev, out16, y + 128, 16));
  CHECK(out16[0] == 1.0f && out16[3] == 1.0f, "submit memset");
  /* a bad list enqueues nothing */
  uint64_t badoff = 0;
  uint8_t bl[128], *q = bl;
  put32(&q, BG_CMD_MEMSET); put32(&q, 32); put64(&q, y); put32(&q, 0); put32(&q, 4); put64(&q, 1);
  put32(&q, BG_CMD_COPY); put32(&q, 32); put64(&q, y); put64(&q, 0x1000); put64(&q, 4);
  CHECK(bg_submit_checked(s2, bl, (uint64_t)(q - bl), &badoff) == BG_ERR_INVALID_VALUE, "bad list");

  /* a failing command buffer surfaces at synchronize, once */
  OK(bg_launch(failk, s2, 1, 1, 1, 1, 1, 1, 0, NULL, 0));
  CHECK(bg_stream_synchronize(s2) == BG_ERR_LAUNCH_FAILED, "launch failed");
  bg_last_error(msg, sizeof msg);
  CHECK(strstr(msg, "MTLCommandBuffer") != NULL, "failure msg %s", msg);
  OK(bg_stream_synchronize(s2));

  /* capture / graphs */
  CHECK(bg_stream_begin_capture(s2, 0) == BG_ERR_NOT_SUPPORTED, "capture");
  int32_t cs = 7;
  OK(bg_stream_capture_status(s2, &cs));
  CHECK(cs == BG_CAPTURE_NONE, "capture status");

  /* graphs from command lists: the core's graph, replayed through the Metal submit path */
  {
    float one_f = 1.0f;
    uint32_t onebits;
    memcpy(&onebits, &one_f, 4);
    uint8_t gl[512], *r = gl;
    put32(&r, BG_CMD_MEMSET); put32(&r, 32); put64(&r, y + 256); put32(&r, onebits); put32(&r, 4); put64(&r, 16);
    put32(&r, BG_CMD_BARRIER); put32(&r, 8);
    put32(&r, BG_CMD_LAUNCH); put32(&r, 48 + 24); put64(&r, (uint64_t)(uintptr_t)twice);
    put32(&r, 1); put32(&r, 1); put32(&r, 1); put32(&r, 16); put32(&r, 1); put32(&r, 1); put32(&r, 0); put32(&r, 3);
    put64(&r, y + 256); put64(&r, y + 512); put64(&r, 16);
    put32(&r, BG_CMD_BARRIER); put32(&r, 8);
    put32(&r, BG_CMD_LAUNCH); put32(&r, 48 + 32); put64(&r, (uint64_t)(uintptr_t)vadd);
    put32(&r, 1); put32(&r, 1); put32(&r, 1); put32(&r, 16); put32(&r, 1); put32(&r, 1); put32(&r, 0); put32(&r, 4);
    put64(&r, y + 256); put64(&r, y + 512); put64(&r, y + 768); put64(&r, 16);
    put32(&r, BG_CMD_BARRIER); put32(&r, 8);
    put32(&r, BG_CMD_COPY); put32(&r, 32); put64(&r, y + 1024); put64(&r, y + 768); put64(&r, 64);
    put32(&r, BG_CMD_EVENT_RECORD); put32(&r, 16); put64(&r, (uint64_t)(uintptr_t)e0);
    void *g = NULL, *gx = NULL;
    OK(bg_graph_from_commands(dev, gl, (uint64_t)(r - gl), &g));
    uint32_t nn = 0, nk = 0;
    OK(bg_graph_node_count(g, &nn, &nk));
    CHECK(nn == 5 && nk == 2, "graph nodes %u kernels %u", nn, nk);
    OK(bg_graph_instantiate(g, &gx));
    OK(bg_graph_upload(gx, s2));
    for (int rep = 0; rep < 2; rep++) { /* replayed: each launch recomputes from the memset */
      OK(bg_memset(dev, y + 256, 0, 4, (1024 + 64 - 256) / 4)); /* clear inputs, outputs, the copy */
      OK(bg_graph_launch(gx, s2));
      OK(bg_stream_synchronize(s2));
      OK(bg_event_query(e0));
      OK(bg_memcpy_dtoh(dev, out16, y + 1024, 64));
      bad = 0;
      for (int i = 0; i < 16; i++) bad += out16[i] != 3.0f;
      CHECK(!bad, "graph replay %d: %f %f", rep, out16[0], out16[15]);
    }
    /* argument update: the vadd node now adds the doubled values to themselves */
    uint64_t nargs2[4] = {y + 512, y + 512, y + 768, 16};
    OK(bg_graph_exec_set_kernel_args(gx, 1, nargs2, 4));
    CHECK(bg_graph_exec_set_kernel_args(gx, 1, nargs2, 3) == BG_ERR_INVALID_VALUE, "nargs mismatch");
    CHECK(bg_graph_exec_set_kernel_args(gx, 2, nargs2, 4) == BG_ERR_INVALID_VALUE, "index range");
    OK(bg_graph_launch(gx, s2));
    OK(bg_stream_synchronize(s2));
    OK(bg_memcpy_dtoh(dev, out16, y + 1024, 64));
    bad = 0;
    for (int i = 0; i < 16; i++) bad += out16[i] != 4.0f;
    CHECK(!bad, "graph after args update: %f %f", out16[0], out16[15]);
    OK(bg_graph_exec_destroy(gx));
    OK(bg_graph_destroy(g));
    /* a bad list is refused with its offset; a graph outlives its kernel's module */
    uint8_t bg2[64], *t = bg2;
    put32(&t, BG_CMD_BARRIER); put32(&t, 8);
    put32(&t, 77); put32(&t, 8);
    g = NULL;
    CHECK(bg_graph_from_commands(dev, bg2, (uint64_t)(t - bg2), &g) == BG_ERR_INVALID_VALUE && !g, "bad graph list");
    bg_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "at byte 8") != NULL, "bad list msg %s", msg);
    void *mod2, *twice2, *ev2;
    OK(bg_module_load(dev, BG_IMAGE_MSL_SOURCE, SRC, strlen(SRC) + 1, &mod2));
    OK(bg_module_get_kernel(mod2, "twice", &twice2));
    OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &ev2));
    uint8_t hl[128], *u = hl;
    put32(&u, BG_CMD_LAUNCH); put32(&u, 48 + 24); put64(&u, (uint64_t)(uintptr_t)twice2);
    put32(&u, 1); put32(&u, 1); put32(&u, 1); put32(&u, 16); put32(&u, 1); put32(&u, 1); put32(&u, 0); put32(&u, 3);
    put64(&u, y + 256); put64(&u, y + 1280); put64(&u, 16);
    put32(&u, BG_CMD_EVENT_RECORD); put32(&u, 16); put64(&u, (uint64_t)(uintptr_t)ev2);
    OK(bg_graph_from_commands(dev, hl, (uint64_t)(u - hl), &g));
    OK(bg_graph_instantiate(g, &gx));
    OK(bg_graph_destroy(g));
    OK(bg_module_unload(mod2));
    OK(bg_event_destroy(ev2));
    CHECK(bg_submit(s2, hl, (uint64_t)(u - hl)) == BG_ERR_INVALID_HANDLE, "unloaded kernel refused by submit");
    OK(bg_graph_launch(gx, s2));
    OK(bg_stream_synchronize(s2));
    OK(bg_memcpy_dtoh(dev, out16, y + 1280, 64));
    bad = 0;
    for (int i = 0; i < 16; i++) bad += out16[i] != 2.0f;
    CHECK(!bad, "graph of an unloaded module: %f", out16[0]);
    OK(bg_graph_exec_destroy(gx));
  }

  /* rings */
  void* ring;
  OK(bg_ring_create(dev, 16, 8, &ring));
  uint32_t pushed, popped, m16[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  OK(bg_ring_push(ring, m16, 2, &pushed));
  OK(bg_ring_pop(ring, m16, 2, &popped));
  CHECK(pushed == 2 && popped == 2 && m16[4] == 5, "ring");
  void* rh;
  bg_devptr rd;
  OK(bg_ring_address(ring, &rh, &rd));
  uint64_t rargs[2] = {rd + BG_RING_DATA_OFFSET, 4};
  OK(bg_launch(slow, s2, 1, 1, 1, 4, 1, 1, 0, rargs, 2)); /* the ring is bindable by address */
  OK(bg_device_synchronize(dev));
  OK(bg_ring_destroy(ring));

  /* stream-ordered allocation: Metal has no pool of its own, so the core allocates plainly and a
   * free waits for its stream first */
  {
    void* pool;
    OK(bg_mempool_default(dev, &pool));
    bg_devptr sa;
    uint32_t back[4] = {0};
    OK(bg_mem_alloc_async(s1, NULL, 4096, &sa));
    OK(bg_memset_async(s1, sa, 0x01010101u, 4, 1024));
    OK(bg_memcpy_dtoh_async(s1, back, sa, sizeof back));
    OK(bg_mem_free_async(s1, sa));
    CHECK(back[3] == 0x01010101u, "stream-ordered memory used before its free");
    uint64_t r = 1, u = 1, rh = 0, uh = 0;
    OK(bg_mempool_stats(pool, &r, &u, &rh, &uh));
    CHECK(r == 0 && u == 0 && rh == 4096 && uh == 4096, "plain pool stats %llu %llu %llu %llu",
          (unsigned long long)r, (unsigned long long)u, (unsigned long long)rh, (unsigned long long)uh);
    CHECK(bg_mem_free_async(s1, sa) == BG_ERR_INVALID_VALUE, "stream-ordered double free");
    CHECK(bg_mempool_destroy(pool) == BG_ERR_INVALID_VALUE, "default pool destroy");
  }

  /* bench loop and teardown */
  OK(bg_bench_launch_loop(vadd, s1, (N + 255) / 256, 256, args, 4, 500));
  OK(bg_stream_synchronize(s1));
  OK(bg_event_destroy(e0));
  OK(bg_event_destroy(e1));
  OK(bg_event_destroy(en));
  OK(bg_stream_destroy(s1));
  OK(bg_stream_destroy(s2));
  OK(bg_host_free(dev, hostbuf));
  CHECK(bg_host_free(dev, hostbuf) == BG_ERR_INVALID_VALUE, "double host free");
  OK(bg_mem_free(dev, a));
  OK(bg_mem_free(dev, b));
  OK(bg_mem_free(dev, x));
  OK(bg_mem_free(dev, y));
  OK(bg_module_unload(mod));
  OK(bg_device_close(dev)); /* c still allocated: released here */
  for (int cls = 5; cls <= 12; cls++)
    if (mock_live(cls)) { fails++; fprintf(stderr, "FAIL: leaked objects\n"); mock_report(); break; }
  printf(fails ? "%d FAILURES\n" : "all mock tests passed\n", fails);
  return fails != 0;
}
