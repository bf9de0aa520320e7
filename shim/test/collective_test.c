/*
 * collective_test.c: the CPU backend's communicators (cpu/collective.c) through the C ABI, for the
 * sanitizers (test/communicator.test.ts builds it with AddressSanitizer + UndefinedBehaviorSanitizer
 * and with ThreadSanitizer): all-reduce, broadcast, all-gather and reduce-scatter over 4 devices
 * in several rounds, grouped sends and receives in a ring, an abort that ends a wait. Run with
 * BUNGPU_CPU_DEVICES=4; prints "collective_test: N checks passed" or the first failure.
 */
#include "../bungpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;
#define OK(x)                                                                                      \
  do {                                                                                             \
    int32_t rc_ = (x);                                                                             \
    if (rc_) {                                                                                     \
      char m_[512];                                                                                \
      bg_last_error(m_, sizeof m_);                                                                \
      fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #x, rc_, m_);                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define EXPECT(c)                                                                                  \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c);                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { N = 4, COUNT = 600000 }; /* floats: 2.4 MB, three 1 MiB rounds */

int main(void) {
  void *dev[N], *comm[N], *st[N];
  bg_devptr x[N], y[N];
  for (int r = 0; r < N; r++) {
    OK(bg_device_open(BG_BACKEND_CPU, r, &dev[r]));
    OK(bg_stream_default(dev[r], &st[r]));
    OK(bg_mem_alloc(dev[r], (uint64_t)COUNT * 4 * N, &x[r]));
    OK(bg_mem_alloc(dev[r], (uint64_t)COUNT * 4 * N, &y[r]));
    float* p = (float*)(uintptr_t)x[r];
    for (int i = 0; i < COUNT * N; i++) p[i] = (float)(r + 1) + (float)(i % 7);
  }
  OK(bg_comm_init_all(dev, N, comm));
  /* all-reduce sum, in rounds */
  for (int r = 0; r < N; r++) OK(bg_comm_collective(comm[r], st[r], BG_COLL_ALL_REDUCE, x[r], y[r], COUNT, BG_DTYPE_FLOAT32, BG_RED_SUM, 0));
  for (int r = 0; r < N; r++) OK(bg_stream_synchronize(st[r]));
  for (int r = 0; r < N; r++) {
    const float* q = (const float*)(uintptr_t)y[r];
    int good = 1;
    for (int i = 0; i < COUNT; i++) good &= q[i] == (float)(10 + 4 * (i % 7));
    EXPECT(good);
  }
  /* broadcast from rank 2, all-gather, reduce-scatter max */
  for (int r = 0; r < N; r++) OK(bg_comm_collective(comm[r], st[r], BG_COLL_BROADCAST, x[r], y[r], COUNT, BG_DTYPE_FLOAT32, 0, 2));
  for (int r = 0; r < N; r++) OK(bg_stream_synchronize(st[r]));
  for (int r = 0; r < N; r++) EXPECT(((const float*)(uintptr_t)y[r])[COUNT - 1] == (float)(3 + (COUNT - 1) % 7));
  for (int r = 0; r < N; r++) OK(bg_comm_collective(comm[r], st[r], BG_COLL_ALL_GATHER, x[r], y[r], COUNT, BG_DTYPE_FLOAT32, 0, 0));
  for (int r = 0; r < N; r++) OK(bg_stream_synchronize(st[r]));
  for (int r = 0; r < N; r++)
    for (int k = 0; k < N; k++) EXPECT(((const float*)(uintptr_t)y[r])[k * COUNT + 5] == (float)(k + 1 + 5));
  for (int r = 0; r < N; r++) OK(bg_comm_collective(comm[r], st[r], BG_COLL_REDUCE_SCATTER, x[r], y[r], COUNT, BG_DTYPE_FLOAT32, BG_RED_MAX, 0));
  for (int r = 0; r < N; r++) OK(bg_stream_synchronize(st[r]));
  for (int r = 0; r < N; r++) EXPECT(((const float*)(uintptr_t)y[r])[3] == (float)(4 + (r * COUNT + 3) % 7));
  /* a ring of sends and receives in one group */
  OK(bg_comm_group_start());
  for (int r = 0; r < N; r++) {
    OK(bg_comm_collective(comm[r], st[r], BG_COLL_SEND, x[r], 0, COUNT, BG_DTYPE_FLOAT32, 0, (r + 1) % N));
    OK(bg_comm_collective(comm[r], st[r], BG_COLL_RECV, 0, y[r], COUNT, BG_DTYPE_FLOAT32, 0, (r + N - 1) % N));
  }
  OK(bg_comm_group_end());
  for (int r = 0; r < N; r++) OK(bg_stream_synchronize(st[r]));
  for (int r = 0; r < N; r++) EXPECT(((const float*)(uintptr_t)y[r])[COUNT - 2] == (float)(((r + N - 1) % N) + 1 + (COUNT - 2) % 7));
  for (int r = 0; r < N; r++) OK(bg_comm_check(comm[r]));
  /* a rank that never comes: abort ends the wait */
  OK(bg_comm_collective(comm[0], st[0], BG_COLL_ALL_REDUCE, x[0], y[0], 16, BG_DTYPE_FLOAT32, BG_RED_SUM, 0));
  OK(bg_comm_abort(comm[3]));
  OK(bg_stream_synchronize(st[0]));
  EXPECT(bg_comm_check(comm[0]) == BG_ERR_ILLEGAL_STATE);
  for (int r = 0; r < N; r++) {
    OK(bg_comm_destroy(comm[r]));
    OK(bg_mem_free(dev[r], x[r]));
    OK(bg_mem_free(dev[r], y[r]));
    OK(bg_device_close(dev[r]));
  }
  printf("collective_test: %d checks passed\n", checks);
  return 0;
}
