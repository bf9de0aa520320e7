#include "bungpu.h"
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
#include <pthread.h>
static int fails;
#define OK(x) do { int32_t r_ = (x); if (r_) { char e_[1024]; bg_last_error(e_, sizeof e_); printf("FAIL %s -> %d: %s\n", #x, r_, e_); fails++; } } while (0)
#define EXPECT(x, code) do { int32_t r_ = (x); char e_[1024]; bg_last_error(e_, sizeof e_); printf("%s %s -> %d: %s\n", r_ == (code) ? "ok  " : "FAIL", #x, r_, e_); if (r_ != (code)) fails++; } while (0)
static void* dev;
static void* thread_main(void* a) { (void)a; bg_devptr p = 0; OK(bg_mem_alloc(dev, 16, &p)); OK(bg_mem_free(dev, p)); return NULL; }
int main(void) {
  int32_t av = 0, n = 0; char msg[512];
  bg_backend_info(BG_BACKEND_CUDA, &av, &n, msg, sizeof msg); printf("info %d %d %s\n", av, n, msg);
  OK(bg_device_open(BG_BACKEND_CUDA, 0, &dev));
  EXPECT(bg_device_open(BG_BACKEND_CUDA, 3, &(void*){0}), BG_ERR_INVALID_DEVICE);
  bg_device_props pr; OK(bg_device_props_get(dev, &pr));
  printf("props %s cc %d.%d sms %d warp %d maxthr %d shared %d unified %d map %d conc %d mem %llu\n", pr.name, pr.cc_major, pr.cc_minor, pr.compute_units, pr.warp_size, pr.max_threads_per_block, pr.max_shared_bytes_per_block, pr.unified_memory, pr.can_map_host_memory, pr.concurrent_kernels, (unsigned long long)pr.total_mem);
  pthread_t t; pthread_create(&t, NULL, thread_main, NULL); pthread_join(t, NULL);
  bg_devptr d = 0; OK(bg_mem_alloc(dev, 64, &d));
  OK(bg_memset(dev, d, 0x01020304, 4, 16)); unsigned v[16]; OK(bg_memcpy_dtoh(dev, v, d, 64)); printf("memset32 %x\n", v[5]);
  OK(bg_memset(dev, d, 0xBEEF, 2, 32)); OK(bg_memcpy_dtoh(dev, v, d, 64)); printf("memset16 %x\n", v[5]);
  void* h = NULL; bg_devptr hd = 0; OK(bg_host_alloc(dev, 64, BG_HOST_ALLOC_MAPPED, &h, &hd)); printf("mapped dev=%d\n", hd != 0); OK(bg_host_free(dev, h));
  OK(bg_host_alloc(dev, 64, 0, &h, &hd)); printf("unmapped dev=%llu\n", (unsigned long long)hd); OK(bg_host_free(dev, h));
  void* ring; OK(bg_ring_create(dev, 16, 8, &ring)); void* rh; bg_devptr rd; OK(bg_ring_address(ring, &rh, &rd));
  printf("ring data zeroed %d\n", ((unsigned char*)rh)[400] == 0); OK(bg_ring_destroy(ring));
  void* ds; OK(bg_stream_default(dev, &ds));
  void *s1, *s2; OK(bg_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s1)); OK(bg_stream_create(dev, 0, -1, &s2));
  EXPECT(bg_stream_query(s1), BG_OK); EXPECT(bg_stream_query(s1), BG_ERR_NOT_READY);
  void* m; EXPECT(bg_module_load(dev, BG_IMAGE_MSL_SOURCE, "x", 1, &m), BG_ERR_NOT_SUPPORTED);
  EXPECT(bg_module_load(dev, BG_IMAGE_PTX, "BAD ptx", 7, &m), BG_ERR_INVALID_PTX);
  OK(bg_module_load(dev, BG_IMAGE_PTX, ".version 8.0", 12, &m));
  void *ka, *kb, *ka2; OK(bg_module_get_kernel(m, "vadd", &ka)); OK(bg_module_get_kernel(m, "saxpy", &kb)); OK(bg_module_get_kernel(m, "vadd", &ka2));
  printf("same kernel handle %d\n", ka == ka2);
  EXPECT(bg_module_get_kernel(m, "missing", &ka2), BG_ERR_NOT_FOUND);
  int32_t mt; OK(bg_kernel_max_threads(ka, &mt)); printf("max threads %d\n", mt);
  uint64_t args[4] = {11, 22, 33, 44};
  OK(bg_launch(ka, ds, 1, 1, 1, 32, 1, 1, 0, args, 4));
  EXPECT(bg_stream_begin_capture(ds, 0), BG_ERR_STREAM_CAPTURE_UNSUPPORTED);
  OK(bg_stream_begin_capture(s1, BG_CAPTURE_MODE_GLOBAL));
  int32_t st; OK(bg_stream_capture_status(s1, &st)); printf("status %d\n", st);
  void *e1, *e2; OK(bg_event_create(dev, 0, &e1)); OK(bg_event_create(dev, BG_EVENT_DISABLE_TIMING, &e2));
  uint64_t a1[4] = {1, 0, 0, 0}, a2[3] = {2, 0, 0}, a3[4] = {3, 0, 0, 0};
  OK(bg_launch(ka, s1, 1, 1, 1, 32, 1, 1, 0, a1, 4));          // node 0
  OK(bg_event_record(e1, s1)); OK(bg_stream_wait_event(s2, e1)); // fork
  OK(bg_launch(kb, s2, 2, 1, 1, 32, 1, 1, 0, a2, 3));          // node 1 (on s2)
  OK(bg_launch(ka, s1, 3, 1, 1, 32, 1, 1, 0, a3, 4));          // node 2
  OK(bg_event_record(e2, s2)); OK(bg_stream_wait_event(s1, e2)); // join
  // a command buffer launch during capture: node 3
  struct { uint32_t op, size; uint64_t k; uint32_t g[3], b[3], sh, na; uint64_t args[1]; } cmd = {BG_CMD_LAUNCH, sizeof cmd, (uint64_t)(uintptr_t)kb, {4,1,1}, {1,1,1}, 0, 1, {4}};
  OK(bg_submit(s1, &cmd, sizeof cmd));
  void* g; OK(bg_stream_end_capture(s1, &g));
  uint32_t nn, nk; OK(bg_graph_node_count(g, &nn, &nk)); printf("nodes %u kernel %u\n", nn, nk);
  void* x; OK(bg_graph_instantiate(g, &x));
  OK(bg_graph_destroy(g)); // exec keeps it alive
  uint64_t na[3] = {77, 0, 0};
  OK(bg_graph_exec_set_kernel_args(x, 1, na, 3));
  extern uint64_t mock_last_set_a0; extern void* mock_last_set_node; printf("set node1 a0=%llu grid=%u\n", (unsigned long long)mock_last_set_a0, ((unsigned*)((char*)mock_last_set_node + 16))[0]);
  uint64_t nb[4] = {99, 0, 0, 0}; OK(bg_graph_exec_set_kernel_args(x, 2, nb, 4)); printf("set node2 a0=%llu grid=%u\n", (unsigned long long)mock_last_set_a0, ((unsigned*)((char*)mock_last_set_node + 16))[0]);
  uint64_t nc[1] = {5}; OK(bg_graph_exec_set_kernel_args(x, 3, nc, 1)); printf("set node3 grid=%u\n", ((unsigned*)((char*)mock_last_set_node + 16))[0]);
  EXPECT(bg_graph_exec_set_kernel_args(x, 1, na, 2), BG_ERR_INVALID_VALUE);
  EXPECT(bg_graph_exec_set_kernel_args(x, 4, na, 3), BG_ERR_INVALID_VALUE);
  OK(bg_graph_upload(x, s1)); OK(bg_graph_launch(x, s1));
  OK(bg_graph_exec_destroy(x));
  float ms; OK(bg_event_elapsed(&ms, e1, e2)); printf("elapsed %.2f\n", ms);
  OK(bg_event_query(e1)); OK(bg_event_synchronize(e1));
  OK(bg_event_destroy(e1)); OK(bg_event_destroy(e2));
  OK(bg_stream_destroy(s2)); void* s3; OK(bg_stream_create(dev, 0, 0, &s3)); OK(bg_stream_begin_capture(s3, BG_CAPTURE_MODE_RELAXED)); OK(bg_launch(ka, s3, 1, 1, 1, 1, 1, 1, 0, args, 4)); OK(bg_stream_destroy(s3)); // destroy while capturing
  OK(bg_stream_synchronize(s1)); OK(bg_stream_destroy(s1));
  OK(bg_module_unload(m));
  OK(bg_mem_free(dev, d));
  OK(bg_device_synchronize(dev)); uint64_t fb, tb; OK(bg_device_mem_info(dev, &fb, &tb));
  OK(bg_device_close(dev));
  printf("%d failures\n", fails);
  return fails != 0;
}
