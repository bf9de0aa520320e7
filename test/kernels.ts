// The test kernels, each in C for the CPU backend and CUDA C, written to read alike.
export const cpuKernels = `
#include "bungpu_cpu.h"

BG_KERNEL(vadd) {
  const float* a = BG_ARG(0, const float*);
  const float* b = BG_ARG(1, const float*);
  float* c = BG_ARG(2, float*);
  int n = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) c[i] = a[i] + b[i];
    }
  }
}

BG_KERNEL(saxpy) {
  float a = BG_ARG(0, float);
  const float* x = BG_ARG(1, const float*);
  float* y = BG_ARG(2, float*);
  int n = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = a * x[i] + y[i];
    }
  }
}

/* One partial sum per block, by a tree reduction in shared memory (blockDim.x a power of 2). */
BG_KERNEL(reduce_sum) {
  const float* x = BG_ARG(0, const float*);
  float* out = BG_ARG(1, float*);
  int n = BG_ARG(2, int);
  float* sh = (float*)BG_SHARED;
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      sh[threadIdx.x] = i < n ? x[i] : 0.0f;
    }
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      BG_FOR_THREADS {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
      }
    }
    out[blockIdx.x] = sh[0];
  }
}

/* C[M,N] = A[M,K] B[K,N] with 16x16 tiles staged in shared memory. */
BG_KERNEL(matmul_tiled) {
  const float* A = BG_ARG(0, const float*);
  const float* B = BG_ARG(1, const float*);
  float* C = BG_ARG(2, float*);
  int M = BG_ARG(3, int), N = BG_ARG(4, int), K = BG_ARG(5, int);
  float* As = (float*)BG_SHARED;
  float* Bs = As + 256;
  BG_FOR_BLOCKS {
    float acc[256] = {0};
    for (int t = 0; t < (K + 15) / 16; t++) {
      BG_FOR_THREADS {
        int row = blockIdx.y * 16 + threadIdx.y, col = t * 16 + threadIdx.x;
        As[threadIdx.y * 16 + threadIdx.x] = (row < M && col < K) ? A[row * K + col] : 0.0f;
        int brow = t * 16 + threadIdx.y, bcol = blockIdx.x * 16 + threadIdx.x;
        Bs[threadIdx.y * 16 + threadIdx.x] = (brow < K && bcol < N) ? B[brow * N + bcol] : 0.0f;
      }
      BG_FOR_THREADS {
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += As[threadIdx.y * 16 + k] * Bs[k * 16 + threadIdx.x];
        acc[threadIdx.y * 16 + threadIdx.x] += s;
      }
    }
    BG_FOR_THREADS {
      int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
      if (row < M && col < N) C[row * N + col] = acc[threadIdx.y * 16 + threadIdx.x];
    }
  }
}

/* Writes value into out[0..n) one element at a time, slowly: a producer to race against. */
BG_KERNEL(slow_fill) {
  float* out = BG_ARG(0, float*);
  int n = BG_ARG(1, int);
  float value = BG_ARG(2, float);
  BG_FOR_BLOCKS {
    for (int i = 0; i < n; i++) {
      volatile float* o = out;
      o[i] = value;
      for (volatile int spin = 0; spin < 200; spin++) {}
    }
  }
}

/* out[0] = sum of x[0..n) */
BG_KERNEL(sum_into) {
  const float* x = BG_ARG(0, const float*);
  float* out = BG_ARG(1, float*);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    out[0] = (float)s;
  }
}

/* Busy-waits about ms milliseconds of work. */
BG_KERNEL(spin_ms) {
  int ms = BG_ARG(0, int);
  BG_FOR_BLOCKS {
    for (volatile long i = 0; i < (long)ms * 300000L; i++) {}
  }
}

BG_KERNEL(empty) {
  BG_FOR_BLOCKS {}
}

/* x[i] += v */
BG_KERNEL(add_scalar) {
  float* x = BG_ARG(0, float*);
  float v = BG_ARG(1, float);
  int n = BG_ARG(2, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] += v;
    }
  }
}
`;

export const cudaKernels = `
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
  extern __shared__ float sh[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  sh[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[16][16];
  __shared__ float Bs[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (K + 15) / 16; t++) {
    int acol = t * 16 + threadIdx.x, brow = t * 16 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && acol < K) ? A[row * K + acol] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (brow < K && col < N) ? B[brow * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < 16; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void slow_fill(float* out, int n, float value) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int i = 0; i < n; i++) ((volatile float*)out)[i] = value;
}

extern "C" __global__ void sum_into(const float* x, float* out, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    out[0] = (float)s;
  }
}

extern "C" __global__ void spin_ms(int ms) {
  long long start = clock64();
  while (clock64() - start < (long long)ms * 1000000LL) {}
}

extern "C" __global__ void empty() {}

extern "C" __global__ void add_scalar(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += v;
}
`;

export const kernelSources = { cpu: cpuKernels, cuda: cudaKernels };

// Metal versions of the simple kernels (scalars are `constant T&` at their argument index).
// Not compilable here (no Mac): they run where the Metal backend is available.
export const metalKernels = `
#include <metal_stdlib>
using namespace metal;

kernel void vadd(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                 device float* c [[buffer(2)]], constant int& n [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) {
  if ((int)i < n) c[i] = a[i] + b[i];
}

kernel void saxpy(constant float& a [[buffer(0)]], device const float* x [[buffer(1)]],
                  device float* y [[buffer(2)]], constant int& n [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
  if ((int)i < n) y[i] = a * x[i] + y[i];
}

kernel void add_scalar(device float* x [[buffer(0)]], constant float& v [[buffer(1)]],
                       constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if ((int)i < n) x[i] += v;
}
`;

export const allKernelSources = { cpu: cpuKernels, cuda: cudaKernels, metal: metalKernels };
