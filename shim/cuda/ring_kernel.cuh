/*
 * ring_kernel.cuh: the device side of bungpu's rings, for persistent kernels.
 *
 * A ring is the SPSC queue of bungpu.h, in mapped pinned host memory (bg_ring_create; its device
 * address from bg_ring_address):
 *   +0   u64 head   (consumer's next index; written by the consumer only)
 *   +128 u64 tail   (producer's next index; written by the producer only)
 *   +256 u32 msg_bytes, u32 capacity (a power of two), u32 closed, u32 reserved
 *   +384 capacity * msg_bytes of messages; slot i at (i & (capacity - 1))
 * The producer writes the slot, then stores tail with release; the consumer loads tail with
 * acquire, reads the slot, then stores head with release. Scope is the whole system: the other
 * side is the host, across PCIe.
 *
 * Memory ordering: on sm_70 and newer, ld.acquire.sys / st.release.sys; before that, volatile
 * accesses fenced with __threadfence_system(). Message words are moved with volatile accesses so
 * no stale L1 line is ever read. Header-free, so NVRTC compiles it without include paths.
 *
 * A persistent kernel:
 *
 *   __device__ void handler(const void* msg, void* response, void* state) { ... }
 *   BG_RING_KERNEL(my_server, handler)
 *
 * defines extern "C" __global__ void my_server(void* in_ring, void* out_ring,
 *                                              const unsigned int* stop, void* state)
 * Launch it with ONE block (any block shape) and shared_bytes >= in msg_bytes + out msg_bytes.
 * Thread 0 does all ring work; every thread of the block calls the handler on each message (so a
 * handler may split its work over threadIdx and use __syncthreads()); the message and the
 * response live in the block's dynamic shared memory. It loops: pop a message, run the handler,
 * push the response (spinning while the outbound ring is full). It returns when *stop (a u32 in
 * mapped memory the host sets) is nonzero and the inbound ring is empty, so every message pushed
 * before the stop flag was set is answered.
 */
#ifndef BUNGPU_RING_KERNEL_CUH
#define BUNGPU_RING_KERNEL_CUH

#define BG_RING_HEAD_OFFSET 0
#define BG_RING_TAIL_OFFSET 128
#define BG_RING_META_OFFSET 256
#define BG_RING_DATA_OFFSET 384

/* ---- system-scope acquire / release ---------------------------------------------------------- */
__device__ __forceinline__ unsigned long long bg_ld_acquire_sys_u64(const unsigned long long* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned long long v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  unsigned long long v = *(const volatile unsigned long long*)p;
  __threadfence_system();
  return v;
#endif
}

__device__ __forceinline__ unsigned int bg_ld_acquire_sys_u32(const unsigned int* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned int v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  unsigned int v = *(const volatile unsigned int*)p;
  __threadfence_system();
  return v;
#endif
}

__device__ __forceinline__ void bg_st_release_sys_u64(unsigned long long* p, unsigned long long v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("st.release.sys.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
#else
  __threadfence_system();
  *(volatile unsigned long long*)p = v;
#endif
}

__device__ __forceinline__ void bg_ring_pause() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __nanosleep(64);
#endif
}

/* ---- ring fields ----------------------------------------------------------------------------- */
__device__ __forceinline__ unsigned long long* bg_ring_head(void* ring) {
  return (unsigned long long*)((char*)ring + BG_RING_HEAD_OFFSET);
}
__device__ __forceinline__ unsigned long long* bg_ring_tail(void* ring) {
  return (unsigned long long*)((char*)ring + BG_RING_TAIL_OFFSET);
}
__device__ __forceinline__ unsigned int bg_ring_msg_bytes(const void* ring) {
  return ((const volatile unsigned int*)((const char*)ring + BG_RING_META_OFFSET))[0];
}
__device__ __forceinline__ unsigned int bg_ring_capacity(const void* ring) {
  return ((const volatile unsigned int*)((const char*)ring + BG_RING_META_OFFSET))[1];
}
__device__ __forceinline__ unsigned int* bg_ring_slot(void* ring, unsigned long long index) {
  unsigned long long slot = index & (unsigned long long)(bg_ring_capacity(ring) - 1u);
  return (unsigned int*)((char*)ring + BG_RING_DATA_OFFSET + slot * bg_ring_msg_bytes(ring));
}

/* Messages are a multiple of 4 bytes (bg_ring_create enforces it). */
__device__ __forceinline__ void bg_ring_copy_in(unsigned int* dst, const unsigned int* src,
                                                unsigned int bytes) {
  const volatile unsigned int* s = src;
  for (unsigned int i = 0; i < bytes / 4u; i++) dst[i] = s[i];
}
__device__ __forceinline__ void bg_ring_copy_out(unsigned int* dst, const unsigned int* src,
                                                 unsigned int bytes) {
  volatile unsigned int* d = dst;
  for (unsigned int i = 0; i < bytes / 4u; i++) d[i] = src[i];
}

/* Consumer side: pop one message into dst (msg_bytes of it). False when the ring is empty. Call it
 * from one thread only: a ring has a single consumer. */
__device__ __forceinline__ bool bg_ring_try_pop(void* ring, void* dst) {
  unsigned long long head = *(volatile unsigned long long*)bg_ring_head(ring); /* ours */
  unsigned long long tail = bg_ld_acquire_sys_u64(bg_ring_tail(ring));
  if (head == tail) return false;
  bg_ring_copy_in((unsigned int*)dst, bg_ring_slot(ring, head), bg_ring_msg_bytes(ring));
  bg_st_release_sys_u64(bg_ring_head(ring), head + 1ull);
  return true;
}

/* Producer side: push one message from src (msg_bytes of it). False when the ring is full. Call it
 * from one thread only: a ring has a single producer. */
__device__ __forceinline__ bool bg_ring_try_push(void* ring, const void* src) {
  unsigned long long tail = *(volatile unsigned long long*)bg_ring_tail(ring); /* ours */
  unsigned long long head = bg_ld_acquire_sys_u64(bg_ring_head(ring));
  if (tail - head >= (unsigned long long)bg_ring_capacity(ring)) return false;
  bg_ring_copy_out(bg_ring_slot(ring, tail), (const unsigned int*)src, bg_ring_msg_bytes(ring));
  bg_st_release_sys_u64(bg_ring_tail(ring), tail + 1ull);
  return true;
}

__device__ __forceinline__ void bg_ring_push(void* ring, const void* src) {
  while (!bg_ring_try_push(ring, src)) bg_ring_pause();
}

/* ---- the persistent loop --------------------------------------------------------------------- */
template <typename Handler>
__device__ __forceinline__ void bg_ring_serve(void* in_ring, void* out_ring,
                                              const unsigned int* stop, void* state,
                                              Handler handler) {
  extern __shared__ unsigned int bg_ring_smem[];
  __shared__ int bg_ring_quit;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  unsigned int* msg = bg_ring_smem;
  unsigned int* response = bg_ring_smem + bg_ring_msg_bytes(in_ring) / 4u;
  for (;;) {
    if (leader) {
      int quit = 0;
      for (;;) {
        if (bg_ring_try_pop(in_ring, msg)) break;
        /* Stop only once the flag is set and, after seeing it, the inbound ring is still empty:
         * every message pushed before the flag was set gets its answer. */
        if (bg_ld_acquire_sys_u32(stop)) {
          if (!bg_ring_try_pop(in_ring, msg)) quit = 1;
          break;
        }
        bg_ring_pause();
      }
      bg_ring_quit = quit;
    }
    __syncthreads();
    if (bg_ring_quit) return;
    handler((const void*)msg, (void*)response, state);
    __syncthreads();
    if (leader) bg_ring_push(out_ring, response);
    /* The next iteration's __syncthreads() orders this push before msg is overwritten. */
  }
}

template <void (*Handler)(const void* msg, void* response, void* state)>
__global__ void bg_ring_persistent(void* in_ring, void* out_ring, const unsigned int* stop,
                                   void* state) {
  bg_ring_serve(in_ring, out_ring, stop, state, Handler);
}

/* An unmangled persistent kernel, loadable by name with bg_module_get_kernel. */
#define BG_RING_KERNEL(name, handler)                                                              \
  extern "C" __global__ void name(void* in_ring, void* out_ring, const unsigned int* stop,        \
                                  void* state) {                                                   \
    bg_ring_serve(in_ring, out_ring, stop, state, handler);                                        \
  }

#endif /* BUNGPU_RING_KERNEL_CUH */
