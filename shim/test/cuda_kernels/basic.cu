// CUDA twins of the CPU test kernels. Compile check (no GPU needed):
//   nvcc --ptx -arch=sm_80 -o /tmp/basic.ptx shim/test/cuda_kernels/basic.cu
// The same source compiles with NVRTC (no includes).

extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// One partial sum per block in out[blockIdx.x]. Launch with shared_bytes = blockDim.x * 4 and a
// power-of-two blockDim.x. Each thread first adds two elements (grid-stride over 2 * blockDim).
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
  extern __shared__ float partial[];
  unsigned int t = threadIdx.x;
  unsigned int i = blockIdx.x * (blockDim.x * 2u) + t;
  float v = 0.0f;
  if (i < (unsigned int)n) v += x[i];
  if (i + blockDim.x < (unsigned int)n) v += x[i + blockDim.x];
  partial[t] = v;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2u; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// C[M x N] = A[M x K] * B[K x N], row-major. Block 16x16, grid ceil(N/16) x ceil(M/16).
#define TILE 16
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N,
                                        int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    int ak = k0 + threadIdx.x;
    int bk = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
