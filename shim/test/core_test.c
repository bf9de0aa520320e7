/*
 * core_test.c: the core (every .c directly under shim/) against a recording fake backend that has only
 * the required vtable entries (and enter/leave hooks): the command decoder on good and bad lists, one-by-one issue of a
 * submit, the synchronous copies and memset the core builds from asynchronous ones, and the
 * generic command-list graph (replay, argument patches, holds), and the plain memory pool the core
 * gives a backend without pools (Metal): stream-ordered calls on plain allocations.
 *
 *   cc -std=c11 -g -Ishim '-DBG_STUBS(X)=X(cpu, 0) X(cuda, 0) X(metal, 0)' -o /tmp/core_test
 *      shim/test/core_test.c shim/test/stub_backend.c shim/[every .c] -lpthread && /tmp/core_test
 *
 * No real backend is linked: the table's lines find stand-ins (stub_backend.c).
 *
 * Prints "core_test: N checks passed".
 */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>

static int checks, fails;
#define CHECK(c)                                                                                  \
  do {                                                                                            \
    checks++;                                                                                     \
    if (!(c)) {                                                                                   \
      fails++;                                                                                    \
      char m_[512];                                                                               \
      bg_last_error(m_, sizeof m_);                                                               \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #c, m_);           \
    }                                                                                             \
  } while (0)

/* ---- a fake backend that records what it is asked to do --------------------------------------- */
static char trace[4096];
static int holds; /* kernel and event holds outstanding */
static void logf_(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static int depth, enters, unhooked; /* enter/leave hooks: nesting, calls, ops called outside */
static void logf_(const char* fmt, ...) {
  if (!depth) unhooked++;
  size_t n = strlen(trace);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(trace + n, sizeof trace - n, fmt, ap);
  va_end(ap);
}
typedef struct fake {
  bg_obj h;
  const char* name;
} fake;

static int32_t f_sync(void* s) {
  logf_("sync(%s) ", ((fake*)s)->name);
  return BG_OK;
}
static int32_t f_htod(void* s, bg_devptr d, const void* src, uint64_t n) {
  logf_("htod(%s,%llx,%s,%llu) ", ((fake*)s)->name, (unsigned long long)d, (const char*)src,
        (unsigned long long)n);
  return BG_OK;
}
static int32_t f_dtoh(void* s, void* d, bg_devptr src, uint64_t n) {
  (void)d;
  logf_("dtoh(%s,%llx,%llu) ", ((fake*)s)->name, (unsigned long long)src, (unsigned long long)n);
  return BG_OK;
}
static int32_t f_dtod(void* s, bg_devptr d, bg_devptr src, uint64_t n) {
  logf_("dtod(%s,%llx,%llx,%llu) ", ((fake*)s)->name, (unsigned long long)d,
        (unsigned long long)src, (unsigned long long)n);
  return BG_OK;
}
static int32_t f_memset(void* s, bg_devptr d, uint32_t pattern, uint32_t esz, uint64_t count) {
  logf_("memset(%s,%llx,%x,%u,%llu) ", ((fake*)s)->name, (unsigned long long)d, pattern, esz,
        (unsigned long long)count);
  return BG_OK;
}
static int32_t f_launch(void* k, void* s, const uint32_t g[3], const uint32_t b[3],
                        uint32_t shared, const uint64_t* args, uint32_t nargs) {
  logf_("launch(%s,%s,%ux%ux%u,%ux%ux%u,%u,", ((fake*)k)->name, ((fake*)s)->name, g[0], g[1],
        g[2], b[0], b[1], b[2], shared);
  for (uint32_t i = 0; i < nargs; i++) logf_("%s%llu", i ? "/" : "[", (unsigned long long)args[i]);
  logf_("]) ");
  return BG_OK;
}
static int32_t f_record(void* e, void* s) {
  logf_("record(%s,%s) ", ((fake*)e)->name, ((fake*)s)->name);
  return BG_OK;
}
static int32_t f_wait(void* s, void* e) {
  logf_("wait(%s,%s) ", ((fake*)s)->name, ((fake*)e)->name);
  return BG_OK;
}
static void* f_enter(bg_device* d) {
  (void)d;
  depth++;
  enters++;
  return &depth;
}
static void f_leave(bg_device* d, void* token) {
  (void)d;
  if (token != &depth) unhooked += 1000;
  depth--;
}
static uint64_t next_mem = 0x100000;
static int32_t f_alloc(bg_device* d, uint64_t n, bg_devptr* out) {
  (void)d;
  *out = next_mem;
  next_mem += 0x100000;
  logf_("alloc(%llu) ", (unsigned long long)n);
  return BG_OK;
}
static int32_t f_free(bg_device* d, bg_devptr p) {
  (void)d;
  logf_("free(%llx) ", (unsigned long long)p);
  return BG_OK;
}
static void f_hold(void* h) { (void)h, holds++; }
static void f_unhold(void* h) { (void)h, holds--; }

static bg_ops fake_ops = {
    .name = "fake",
    .enter = f_enter,
    .leave = f_leave,
    .mem_alloc = f_alloc,
    .mem_free = f_free,
    .stream_synchronize = f_sync,
    .stream_wait_event = f_wait,
    .memcpy_htod_async = f_htod,
    .memcpy_dtoh_async = f_dtoh,
    .memcpy_dtod_async = f_dtod,
    .memset_async = f_memset,
    .event_record = f_record,
    .launch = f_launch,
    .kernel_hold = f_hold,
    .kernel_unhold = f_unhold,
    .event_hold = f_hold,
    .event_unhold = f_unhold,
};

/* ---- list builder ------------------------------------------------------------------------------ */
typedef struct list {
  _Alignas(8) uint8_t b[1024];
  uint64_t n;
} list;
static void put(list* l, const void* p, size_t n) {
  memcpy(l->b + l->n, p, n);
  l->n += n;
}
static void launch(list* l, void* k, uint32_t gx, uint32_t bx, uint32_t nargs, const uint64_t* a) {
  bg_cmd_launch_rec r = {{BG_CMD_LAUNCH, (uint32_t)(sizeof r + 8 * nargs)},
                         (uint64_t)(uintptr_t)k, {gx, 1, 1}, {bx, 1, 1}, 0, nargs};
  put(l, &r, sizeof r);
  put(l, a, 8 * nargs);
}
static void copy(list* l, uint32_t op, uint64_t dst, uint64_t src, uint64_t n) {
  bg_cmd_copy_rec r = {{op, sizeof r}, dst, src, n};
  put(l, &r, sizeof r);
}
static void fill(list* l, uint64_t dst, uint32_t pattern, uint32_t esz, uint64_t count) {
  bg_cmd_memset_rec r = {{BG_CMD_MEMSET, sizeof r}, dst, pattern, esz, count};
  put(l, &r, sizeof r);
}
static void event(list* l, uint32_t op, void* e) {
  bg_cmd_event_rec r = {{op, sizeof r}, (uint64_t)(uintptr_t)e};
  put(l, &r, sizeof r);
}
static void barrier(list* l) {
  bg_cmd_header r = {BG_CMD_BARRIER, sizeof r};
  put(l, &r, sizeof r);
}
static void raw32(list* l, uint32_t v) { put(l, &v, 4); }

/* The backend table (backends.c): numbers are lines, names the records', an unknown number an
 * error rather than some backend's. */
static void table_checks(void) {
  CHECK(bg_backend_count() == 3);
  static const char* const want[] = {"cpu", "cuda", "metal"};
  char name[16];
  for (int32_t b = 0; b < 3; b++) CHECK(bg_backend_name(b, name, sizeof name) == BG_OK && !strcmp(name, want[b]));
  CHECK(bg_backend_name(BG_BACKEND_METAL, name, 5) == BG_ERR_INVALID_VALUE);
  int32_t avail = 7, count = 7;
  char msg[128];
  CHECK(bg_backend_info(BG_BACKEND_CUDA, &avail, &count, msg, sizeof msg) == BG_OK && !avail && !count &&
        strstr(msg, "cuda"));
  void* d = NULL;
  CHECK(bg_device_open(BG_BACKEND_CPU, 0, &d) == BG_ERR_BACKEND_UNAVAILABLE && !d);
  for (int32_t bad = -1; bad <= 3; bad += 4) {
    CHECK(bg_backend_name(bad, name, sizeof name) == BG_ERR_INVALID_VALUE);
    CHECK(bg_backend_info(bad, &avail, &count, msg, sizeof msg) == BG_ERR_INVALID_VALUE);
    CHECK(bg_device_open(bad, 0, &d) == BG_ERR_INVALID_VALUE);
    bg_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "no backend") != NULL);
  }
}

int main(void) {
  table_checks();
  bg_device dev;
  memset(&dev, 0, sizeof dev);
  fake ds = {.name = "ds"}, s1 = {.name = "s1"}, k1 = {.name = "k1"}, k2 = {.name = "k2"},
       e1 = {.name = "e1"}, other = {.name = "other"};
  bg_device dev2;
  memset(&dev2, 0, sizeof dev2);
  bg_obj_init(&dev, BG_KIND_DEVICE, &dev);
  bg_obj_init(&dev2, BG_KIND_DEVICE, &dev2);
  dev.ops = dev2.ops = &fake_ops;
  dev.default_stream = &ds;
  bg_obj_init(&ds, BG_KIND_STREAM, &dev);
  bg_obj_init(&s1, BG_KIND_STREAM, &dev);
  bg_obj_init(&k1, BG_KIND_KERNEL, &dev);
  bg_obj_init(&k2, BG_KIND_KERNEL, &dev);
  bg_obj_init(&e1, BG_KIND_EVENT, &dev);
  bg_obj_init(&other, BG_KIND_KERNEL, &dev2);

  /* synchronous copies and memset without backend entries: async on the default stream + wait */
  trace[0] = 0;
  CHECK(bg_memcpy_htod(&dev, 0x1000, "abc", 3) == BG_OK);
  CHECK(bg_memcpy_dtod(&dev, 0x2000, 0x1000, 3) == BG_OK);
  char out[4];
  CHECK(bg_memcpy_dtoh(&dev, out, 0x2000, 3) == BG_OK);
  CHECK(bg_memset(&dev, 0x3000, 0x7, 4, 5) == BG_OK);
  CHECK(!strcmp(trace, "htod(ds,1000,abc,3) sync(ds) dtod(ds,2000,1000,3) sync(ds) "
                       "dtoh(ds,2000,3) sync(ds) memset(ds,3000,7,4,5) sync(ds) "));

  /* a list, decoded and issued one by one (the fake has no submit) */
  list l = {.n = 0};
  uint64_t a1[3] = {1, 2, 3}, a2[1] = {9};
  launch(&l, &k1, 4, 32, 3, a1);
  barrier(&l);
  copy(&l, BG_CMD_COPY, 0x10, 0x20, 8);
  copy(&l, BG_CMD_COPY_HTOD, 0x30, (uint64_t)(uintptr_t)"xy", 2);
  copy(&l, BG_CMD_COPY_DTOH, (uint64_t)(uintptr_t)out, 0x40, 2);
  copy(&l, BG_CMD_COPY, 0x10, 0x20, 0); /* empty: nothing issued */
  fill(&l, 0x50, 0xab, 1, 3);
  event(&l, BG_CMD_EVENT_RECORD, &e1);
  event(&l, BG_CMD_EVENT_WAIT, &e1);
  launch(&l, &k2, 1, 1, 1, a2);
  const char* want =
      "launch(k1,s1,4x1x1,32x1x1,0,[1/2/3]) dtod(s1,10,20,8) htod(s1,30,xy,2) dtoh(s1,40,2) "
      "memset(s1,50,ab,1,3) record(e1,s1) wait(s1,e1) launch(k2,s1,1x1x1,1x1x1,0,[9]) ";
  trace[0] = 0;
  CHECK(bg_submit(&s1, l.b, l.n) == BG_OK);
  CHECK(!strcmp(trace, want));
  /* the decoder yields the same, typed */
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, l.b, l.n);
  CHECK(bg_cmd_next(&it, &c) == BG_CMD_NEXT && c.op == BG_CMD_LAUNCH && c.offset == 0 &&
        c.size == 72 && c.u.launch.kernel == &k1 && c.u.launch.grid[0] == 4 &&
        c.u.launch.block[0] == 32 && c.u.launch.nargs == 3 && c.u.launch.args[2] == 3);
  CHECK(bg_cmd_next(&it, &c) == BG_CMD_NEXT && c.op == BG_CMD_BARRIER && c.offset == 72);
  CHECK(bg_cmd_next(&it, &c) == BG_CMD_NEXT && c.op == BG_CMD_COPY && c.u.copy.dst == 0x10 &&
        c.u.copy.src == 0x20 && c.u.copy.bytes == 8);
  int n = 3;
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) n++;
  CHECK(n == 10 && it.off == l.n);
  /* an unaligned list is taken too */
  static _Alignas(8) uint8_t shifted[1032];
  memcpy(shifted + 4, l.b, l.n);
  trace[0] = 0;
  CHECK(bg_submit(&s1, shifted + 4, l.n) == BG_OK);
  CHECK(!strcmp(trace, want));
  /* the C loop of the benches issues the same */
  trace[0] = 0;
  CHECK(bg_bench_issue_loop(&s1, l.b, l.n, 2) == BG_OK);
  CHECK(strlen(trace) == 2 * strlen(want));

  /* bad lists: nothing runs, the offset names the command */
  typedef struct badcase {
    const char* what;
    int32_t code;
    uint64_t off;
  } badcase;
  badcase bad[9];
  list b[9];
  memset(b, 0, sizeof b);
  int nb = 0;
  fill(&b[nb], 0x50, 0, 4, 1), raw32(&b[nb], 99), raw32(&b[nb], 8);
  bad[nb++] = (badcase){"unknown op", BG_ERR_INVALID_VALUE, 32};
  barrier(&b[nb]), raw32(&b[nb], BG_CMD_BARRIER);
  bad[nb++] = (badcase){"truncated header", BG_ERR_INVALID_VALUE, 8};
  raw32(&b[nb], BG_CMD_BARRIER), raw32(&b[nb], 12), raw32(&b[nb], 0);
  bad[nb++] = (badcase){"size not a multiple of 8", BG_ERR_INVALID_VALUE, 0};
  launch(&b[nb], &k1, 1, 1, 3, a1);
  b[nb].n -= 8;
  memcpy(b[nb].b + 4, &(uint32_t){64}, 4);
  bad[nb++] = (badcase){"nargs and size disagree", BG_ERR_INVALID_VALUE, 0};
  barrier(&b[nb]), launch(&b[nb], &other, 1, 1, 1, a2);
  bad[nb++] = (badcase){"kernel of another device", BG_ERR_INVALID_HANDLE, 8};
  launch(&b[nb], &k1, 1, 2048, 1, a2);
  bad[nb++] = (badcase){"block too large", BG_ERR_INVALID_VALUE, 0};
  fill(&b[nb], 0x51, 0, 4, 1);
  bad[nb++] = (badcase){"misaligned memset", BG_ERR_INVALID_VALUE, 0};
  copy(&b[nb], BG_CMD_COPY_HTOD, 0x10, 0, 4);
  bad[nb++] = (badcase){"NULL copy source", BG_ERR_INVALID_VALUE, 0};
  event(&b[nb], BG_CMD_EVENT_WAIT, &k1);
  bad[nb++] = (badcase){"not an event", BG_ERR_INVALID_HANDLE, 0};
  for (int i = 0; i < nb; i++) {
    uint64_t off = 12345;
    trace[0] = 0;
    int32_t rc = bg_submit_checked(&s1, b[i].b, b[i].n, &off);
    if (rc != bad[i].code || off != bad[i].off || trace[0])
      fprintf(stderr, "bad list '%s': rc %d off %llu trace '%s'\n", bad[i].what, rc,
              (unsigned long long)off, trace);
    CHECK(rc == bad[i].code && off == bad[i].off && !trace[0]);
    void* g = &dev;
    CHECK(bg_graph_from_commands(&dev, b[i].b, b[i].n, &g) == bad[i].code && g == NULL);
  }

  /* the generic graph: replays the list, patches arguments, holds what it names */
  void *g = NULL, *x = NULL, *x2 = NULL;
  CHECK(bg_graph_from_commands(&dev, l.b, l.n, &g) == BG_OK);
  CHECK(holds == 4); /* k1, e1 twice, k2 */
  uint32_t nodes = 0, knodes = 0;
  /* the barrier and the empty copy are no nodes */
  CHECK(bg_graph_node_count(g, &nodes, &knodes) == BG_OK && nodes == 8 && knodes == 2);
  CHECK(bg_graph_instantiate(g, &x) == BG_OK && bg_graph_instantiate(g, &x2) == BG_OK);
  CHECK(holds == 12);
  CHECK(bg_graph_destroy(g) == BG_OK && holds == 8);
  trace[0] = 0;
  CHECK(bg_graph_upload(x, &s1) == BG_OK && !trace[0]);
  CHECK(bg_graph_launch(x, &s1) == BG_OK);
  CHECK(!strcmp(trace, want));
  uint64_t p1[3] = {7, 8, 9}, p2[1] = {5};
  CHECK(bg_graph_exec_set_kernel_args(x, 0, p1, 3) == BG_OK);
  CHECK(bg_graph_exec_set_kernel_args(x, 1, p2, 1) == BG_OK);
  CHECK(bg_graph_exec_set_kernel_args(x, 1, p1, 3) == BG_ERR_INVALID_VALUE);
  CHECK(bg_graph_exec_set_kernel_args(x, 2, p2, 1) == BG_ERR_INVALID_VALUE);
  CHECK(bg_graph_exec_set_kernel_args(x, 1, NULL, 1) == BG_ERR_INVALID_VALUE);
  trace[0] = 0;
  CHECK(bg_graph_launch(x, &s1) == BG_OK);
  CHECK(strstr(trace, "launch(k1,s1,4x1x1,32x1x1,0,[7/8/9])") &&
        strstr(trace, "launch(k2,s1,1x1x1,1x1x1,0,[5])"));
  trace[0] = 0;
  CHECK(bg_graph_launch(x2, &s1) == BG_OK && !strcmp(trace, want)); /* its own arguments */
  CHECK(bg_graph_launch(x, &dev) == BG_ERR_INVALID_HANDLE);
  CHECK(bg_graph_exec_destroy(x) == BG_OK && bg_graph_exec_destroy(x2) == BG_OK && holds == 0);

  /* a backend without holds has no generic graphs */
  fake_ops.kernel_hold = NULL;
  CHECK(bg_graph_from_commands(&dev, l.b, l.n, &g) == BG_ERR_NOT_SUPPORTED);
  fake_ops.kernel_hold = f_hold;

  /* the plain pool: a backend without pools allocates plainly, and frees after a stream wait */
  {
    void *dp = NULL, *dp2 = NULL, *p2 = NULL;
    uint64_t r = 9, u = 9, rh = 9, uh = 9;
    CHECK(bg_mempool_default(&dev, &dp) == BG_OK && bg_mempool_default(&dev, &dp2) == BG_OK && dp == dp2);
    bg_devptr a = 0, b = 0;
    trace[0] = 0;
    CHECK(bg_mem_alloc_async(&s1, NULL, 100, &a) == BG_OK && a == 0x100000);
    CHECK(bg_mem_alloc_async(&s1, dp, 50, &b) == BG_OK);
    CHECK(bg_mempool_stats(dp, &r, &u, &rh, &uh) == BG_OK && r == 150 && u == 150 && rh == 150 && uh == 150);
    CHECK(bg_mem_free_async(&s1, a) == BG_OK);
    CHECK(!strcmp(trace, "alloc(100) alloc(50) sync(s1) free(100000) "));
    CHECK(bg_mem_free_async(&s1, a) == BG_ERR_INVALID_VALUE); /* twice */
    CHECK(bg_mem_free_async(&s1, 0) == BG_ERR_INVALID_VALUE);
    CHECK(bg_mem_alloc_async(&s1, NULL, 0, &a) == BG_ERR_INVALID_VALUE);
    CHECK(bg_mem_alloc_async(&s1, &k1, 8, &a) == BG_ERR_INVALID_HANDLE); /* not a pool */
    CHECK(bg_mempool_stats(dp, &r, &u, &rh, &uh) == BG_OK && r == 50 && u == 50 && uh == 150);
    CHECK(bg_mempool_reset_peak(dp) == BG_OK);
    CHECK(bg_mempool_stats(dp, &r, &u, &rh, &uh) == BG_OK && rh == 50 && uh == 50);
    CHECK(bg_mempool_trim(dp, 0) == BG_OK && bg_mempool_set_threshold(dp, 1) == BG_OK);
    CHECK(bg_mempool_destroy(dp) == BG_ERR_INVALID_VALUE); /* the device's own */
    CHECK(bg_mem_free_async(&s1, b) == BG_OK);
    /* a created pool destroyed with a block out: the block stays valid until freed */
    CHECK(bg_mempool_create(&dev, 0, &p2) == BG_OK && p2 != dp);
    CHECK(bg_mem_alloc_async(&s1, p2, 64, &a) == BG_OK);
    CHECK(bg_mempool_destroy(p2) == BG_OK);
    CHECK(bg_mempool_stats(p2, &r, &u, &rh, &uh) == BG_ERR_INVALID_HANDLE);
    CHECK(bg_mem_free_async(&s1, a) == BG_OK);
    CHECK(bg_mempool_create(&dev, 0, &p2) == BG_OK && bg_mempool_destroy(p2) == BG_OK);
  }

  /* every backend call ran between the device's enter and leave hooks */
  CHECK(enters > 10 && depth == 0 && unhooked == 0);

  if (fails) {
    printf("core_test: %d of %d checks failed\n", fails, checks);
    return 1;
  }
  printf("core_test: %d checks passed\n", checks);
  return 0;
}
