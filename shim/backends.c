/*
 * backends.c: the backend table, the one list of the backends in the library. One line per
 * backend names its bg_ops record, bg_<name>_ops, which the top file of its folder fills (name,
 * probe and open included). A line's position is its backend's number (bg_device_open's
 * `backend`; bungpu.h's BG_BACKEND_* name the first ones), so lines are only ever added at the
 * end, and a backend that runs on some platforms only keeps its line everywhere, its record
 * saying elsewhere why it is unavailable (Metal off macOS). The core (api.c) finds backends here
 * and nowhere else, and takes their names from the records.
 *
 * BG_EXTRA_BACKENDS(X) on the compiler's command line adds lines after these: a test builds the
 * library with a null backend that way (test/backend_table.test.ts, with shim/test/stub_backend.c).
 *
 * Calls: cpu/device.c, cuda/device.c, metal/backend.c.
 */
#include "internal.h"

#ifndef BG_EXTRA_BACKENDS
#define BG_EXTRA_BACKENDS(X)
#endif

#define BG_BACKEND_TABLE(X)                                                                       \
  X(cpu)   /* 0 BG_BACKEND_CPU: shim/cpu/ */                                                      \
  X(cuda)  /* 1 BG_BACKEND_CUDA: shim/cuda/ */                                                    \
  X(metal) /* 2 BG_BACKEND_METAL: shim/metal/ (unavailable off macOS) */                          \
  BG_EXTRA_BACKENDS(X)

#define BG_DECLARE(name) extern const bg_ops bg_##name##_ops;
BG_BACKEND_TABLE(BG_DECLARE)
#define BG_LINE(name) &bg_##name##_ops,
static const bg_ops* const table[] = {BG_BACKEND_TABLE(BG_LINE)};

#define COUNT ((int32_t)(sizeof table / sizeof *table))
_Static_assert(sizeof table / sizeof *table <= BG_MAX_BACKENDS, "more backends than BG_MAX_BACKENDS");

int32_t bg_backends_count(void) { return COUNT; }

const bg_ops* bg_backend_at(int32_t b) { return b >= 0 && b < COUNT ? table[b] : NULL; }
