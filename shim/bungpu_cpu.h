/*
 * bungpu_cpu.h: the header for CPU kernel authors. A CPU kernel reads like its CUDA twin:
 *
 *   #include "bungpu_cpu.h"
 *   BG_KERNEL(vadd) {
 *     const float* a = BG_ARG(0, const float*);
 *     const float* b = BG_ARG(1, const float*);
 *     float* c = BG_ARG(2, float*);
 *     int n = BG_ARG(3, int);
 *     BG_FOR_BLOCKS {
 *       BG_FOR_THREADS {
 *         int i = blockIdx.x * blockDim.x + threadIdx.x;
 *         if (i < n) c[i] = a[i] + b[i];
 *       }
 *     }
 *   }
 *
 * The shim calls a kernel once per worker with a range of linear block indices. Inside
 * BG_FOR_BLOCKS, blockIdx/blockDim/gridDim hold the CUDA values; each BG_FOR_THREADS loop runs
 * every thread of the block, so the end of one loop is a __syncthreads(). BG_SHARED gives the
 * block's dynamic shared memory (the launch's shared_bytes), private to the worker.
 */
#ifndef BUNGPU_CPU_H
#define BUNGPU_CPU_H
#include <stdint.h>

typedef struct bg_dim3 { uint32_t x, y, z; } bg_dim3;

/* Passed by pointer to every CPU kernel entry point. Layout is part of the ABI. */
typedef struct bg_cpu_ctx {
  bg_dim3 grid;
  bg_dim3 block;
  uint32_t block_begin;   /* first linear block index of this call */
  uint32_t block_end;     /* one past the last */
  const uint64_t* args;   /* 8-byte argument slots */
  void* shared;           /* shared_bytes of scratch for the block being run */
  uint32_t shared_bytes;
  uint32_t worker;        /* index of the pool worker running this call */
} bg_cpu_ctx;

#if defined(__GNUC__) || defined(__clang__) || defined(__TINYC__)
#define BG_EXPORT __attribute__((visibility("default")))
#else
#define BG_EXPORT
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BG_UNUSED __attribute__((unused))
#else
#define BG_UNUSED
#endif

#define BG_KERNEL(name) BG_EXPORT void name(const bg_cpu_ctx* bg__ctx)
#define BG_ARG(i, type) (*(type*)(void*)&bg__ctx->args[(i)])
#define BG_SHARED ((void*)bg__ctx->shared)

#define BG_FOR_BLOCKS                                                                         \
  for (uint32_t bg__lin = bg__ctx->block_begin; bg__lin < bg__ctx->block_end; ++bg__lin)       \
    for (int bg__once = 1; bg__once; bg__once = 0)                                             \
      for (const bg_dim3 BG_UNUSED gridDim = bg__ctx->grid, BG_UNUSED blockDim = bg__ctx->block,                   \
                         BG_UNUSED blockIdx = {bg__lin % bg__ctx->grid.x,                                \
                                     (bg__lin / bg__ctx->grid.x) % bg__ctx->grid.y,            \
                                     bg__lin / (bg__ctx->grid.x * bg__ctx->grid.y)};           \
           bg__once; bg__once = 0)

#define BG_FOR_THREADS                                                                        \
  for (uint32_t bg__tz = 0; bg__tz < blockDim.z; ++bg__tz)                                     \
    for (uint32_t bg__ty = 0; bg__ty < blockDim.y; ++bg__ty)                                   \
      for (uint32_t bg__tx = 0; bg__tx < blockDim.x; ++bg__tx)                                 \
        for (int bg__t1 = 1; bg__t1; bg__t1 = 0)                                               \
          for (const bg_dim3 BG_UNUSED threadIdx = {bg__tx, bg__ty, bg__tz}; bg__t1; bg__t1 = 0)

#endif /* BUNGPU_CPU_H */
