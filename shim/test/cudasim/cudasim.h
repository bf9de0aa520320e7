/*
 * cudasim.h: the simulator's own exports, for tests. The simulator is loaded by the CUDA backend
 * with dlopen(BUNGPU_LIBCUDA); a test opens the same path and so reaches the same instance:
 *
 *   cudasim_api sim;
 *   if (!cudasim_open(&sim)) ... // uses getenv("BUNGPU_LIBCUDA")
 *   sim.register_kernel("vadd", my_vadd);   // the host twin of the kernel named vadd
 *
 * A host twin has the CPU backend's kernel ABI (bungpu_cpu.h): BG_KERNEL(name) { ... }.
 */
#ifndef CUDASIM_H
#define CUDASIM_H
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "../../bungpu_cpu.h"

typedef struct cudasim_api {
  void (*register_kernel)(const char* name, void (*fn)(const bg_cpu_ctx*));
  void (*trap)(unsigned code);              /* from a host twin: the kernel faults with `code` */
  void (*set_delay_us)(unsigned us);        /* every queued copy/memset takes this much longer */
  int (*pending)(void);                     /* streams with work queued or running */
  const char* (*last_detail)(void);         /* this thread's last failure, in words */
} cudasim_api;

static inline int cudasim_open(cudasim_api* api) {
  const char* path = getenv("BUNGPU_LIBCUDA");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) return 0;
  void* p;
#define CUDASIM_SYM(field, name) \
  if (!(p = dlsym(h, name))) return 0; \
  memcpy(&api->field, &p, sizeof p);
  CUDASIM_SYM(register_kernel, "cudasim_register_kernel")
  CUDASIM_SYM(trap, "cudasim_trap")
  CUDASIM_SYM(set_delay_us, "cudasim_set_delay_us")
  CUDASIM_SYM(pending, "cudasim_pending")
  CUDASIM_SYM(last_detail, "cudasim_last_detail")
#undef CUDASIM_SYM
  return 1;
}
#endif
