// Compile check for shim/cuda/ring_kernel.cuh (no GPU needed):
//   nvcc --ptx -arch=sm_80 -o /tmp/ring_check.ptx shim/test/cuda_kernels/ring_check.cu
// (CUDA 13 targets sm_75 and newer, so the pre-Volta fenced-volatile path of ring_kernel.cuh is
// compiled only by older toolkits.) NVRTC compiles it too.
#include "../../cuda/ring_kernel.cuh"

// A message is 4 floats in and 4 floats out: response[i] = msg[i] * scale, scale in state.
// Every thread of the block runs the handler: thread i handles element i.
__device__ void scale4(const void* msg, void* response, void* state) {
  const float* in = (const float*)msg;
  float* out = (float*)response;
  float scale = *(const float*)state;
  for (unsigned int i = threadIdx.x; i < 4; i += blockDim.x) out[i] = in[i] * scale;
}

BG_RING_KERNEL(ring_scale4, scale4)

// The template form, instantiated explicitly.
template __global__ void bg_ring_persistent<scale4>(void*, void*, const unsigned int*, void*);

// The helpers on their own: move one message from one ring to another if there is one.
extern "C" __global__ void ring_forward_one(void* in_ring, void* out_ring, int* moved) {
  __shared__ unsigned int buf[64];
  if (threadIdx.x == 0) {
    int ok = bg_ring_try_pop(in_ring, buf);
    if (ok) bg_ring_push(out_ring, buf);
    *moved = ok;
  }
}
