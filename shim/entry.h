/*
 * entry.h: what the files of the core that hold entry points share (api.c, pools.c, multi.c,
 * graphs.c, rings.c): the checks every wrapper starts with (CHECK, NONNULL, NEED; BG_HOOK is
 * internal.h's), the device table's lock, and the plain pools' close that api.c's device close
 * calls.
 */
#ifndef BUNGPU_ENTRY_H
#define BUNGPU_ENTRY_H

#include "internal.h"

#include <pthread.h>

static inline const char* bg_kind_name(bg_kind k) {
  switch (k) {
    case BG_KIND_DEVICE: return "device";
    case BG_KIND_STREAM: return "stream";
    case BG_KIND_EVENT: return "event";
    case BG_KIND_MODULE: return "module";
    case BG_KIND_KERNEL: return "kernel";
    case BG_KIND_GRAPH: return "graph";
    case BG_KIND_EXEC: return "graph exec";
    case BG_KIND_RING: return "ring";
    case BG_KIND_SIGNAL: return "signal";
    case BG_KIND_RTC: return "compile result";
    case BG_KIND_CMD_GRAPH: return "graph";
    case BG_KIND_CMD_EXEC: return "graph exec";
    case BG_KIND_POOL: return "memory pool";
    case BG_KIND_COMM: return "communicator";
  }
  return "handle";
}

#define CHECK(h, kind, fn)                                                                      \
  do {                                                                                          \
    if (!bg_obj_is((h), (kind)))                                                                \
      return bg_set_error(BG_ERR_INVALID_HANDLE, "%s: not a live %s handle", fn,               \
                          bg_kind_name(kind));                                                     \
  } while (0)
#define NONNULL(p, fn, what)                                                                    \
  do {                                                                                          \
    if (!(p)) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s is NULL", fn, what);           \
  } while (0)
#define DEV(h) (((bg_obj*)(h))->dev)
#define OPS(h) (DEV(h)->ops)
#define NEED(h, op, fn)                                                                         \
  do {                                                                                          \
    if (!OPS(h)->op)                                                                            \
      return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: not supported on the %s backend", fn,     \
                          OPS(h)->name);                                                        \
  } while (0)

/* base.c: the device table's lock (api.c's opens and closes, pools.c's default plain pools,
 * multi.c's peer access bits). */
extern pthread_mutex_t bg_dev_lock;
/* pools.c: the core's plain pools of `d`, closed with it (under bg_dev_lock). */
void bg_plain_pools_close(bg_device* d);

#endif /* BUNGPU_ENTRY_H */
