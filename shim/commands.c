/*
 * commands.c: the command list (bungpu.h's bg_submit records) in the core. One decoder
 * (bg_cmd_next), one validation (bg_cmds_validate), the one-by-one issue that backends without
 * a submit of their own get, and the bg_submit* and bg_graph_from_commands entries.
 *
 * Calls: base.c.
 */
#include "internal.h"

#include <stdlib.h>

/* Body bytes (after the header) each op's record has; a launch adds 8 per argument. */
static uint32_t body_bytes(uint32_t op) {
  switch (op) {
    case BG_CMD_LAUNCH: return sizeof(bg_cmd_launch_rec) - sizeof(bg_cmd_header);
    case BG_CMD_COPY:
    case BG_CMD_COPY_HTOD:
    case BG_CMD_COPY_DTOH: return sizeof(bg_cmd_copy_rec) - sizeof(bg_cmd_header);
    case BG_CMD_MEMSET: return sizeof(bg_cmd_memset_rec) - sizeof(bg_cmd_header);
    case BG_CMD_BARRIER: return 0;
    case BG_CMD_EVENT_RECORD:
    case BG_CMD_EVENT_WAIT: return sizeof(bg_cmd_event_rec) - sizeof(bg_cmd_header);
    default: return UINT32_MAX;
  }
}

int bg_cmd_next(bg_cmd_iter* it, bg_cmd* c) {
  if (it->off >= it->len) return BG_CMD_END;
  const uint8_t* r = it->p + it->off;
  memset(c, 0, sizeof *c);
  c->offset = it->off;
  if (it->len - it->off < sizeof(bg_cmd_header)) return BG_CMD_MALFORMED;
  bg_cmd_header h;
  memcpy(&h, r, sizeof h);
  c->op = h.op;
  c->size = h.size;
  uint32_t body = body_bytes(h.op);
  if (body == UINT32_MAX) return BG_CMD_UNKNOWN;
  if (h.size < sizeof h || h.size % 8 || h.size > it->len - it->off) return BG_CMD_MALFORMED;
  if (h.size - sizeof h < body) return BG_CMD_MALFORMED;
  switch (h.op) {
    case BG_CMD_LAUNCH: {
      bg_cmd_launch_rec l;
      memcpy(&l, r, sizeof l);
      if (h.size != sizeof l + 8ull * l.nargs) return BG_CMD_MALFORMED;
      c->u.launch.kernel = (void*)(uintptr_t)l.kernel;
      memcpy(c->u.launch.grid, l.grid, sizeof l.grid);
      memcpy(c->u.launch.block, l.block, sizeof l.block);
      c->u.launch.shared = l.shared;
      c->u.launch.nargs = l.nargs;
      c->u.launch.args = (const uint64_t*)(const void*)(r + sizeof l);
      break;
    }
    case BG_CMD_COPY:
    case BG_CMD_COPY_HTOD:
    case BG_CMD_COPY_DTOH: {
      if (h.size != sizeof(bg_cmd_copy_rec)) return BG_CMD_MALFORMED;
      bg_cmd_copy_rec x;
      memcpy(&x, r, sizeof x);
      /* one struct per op; the three share a layout */
      if (h.op == BG_CMD_COPY) {
        c->u.copy.dst = x.dst;
        c->u.copy.src = x.src;
        c->u.copy.bytes = x.bytes;
      } else if (h.op == BG_CMD_COPY_HTOD) {
        c->u.htod.dst = x.dst;
        c->u.htod.src = (const void*)(uintptr_t)x.src;
        c->u.htod.bytes = x.bytes;
      } else {
        c->u.dtoh.dst = (void*)(uintptr_t)x.dst;
        c->u.dtoh.src = x.src;
        c->u.dtoh.bytes = x.bytes;
      }
      break;
    }
    case BG_CMD_MEMSET: {
      if (h.size != sizeof(bg_cmd_memset_rec)) return BG_CMD_MALFORMED;
      bg_cmd_memset_rec m;
      memcpy(&m, r, sizeof m);
      c->u.fill.dst = m.dst;
      c->u.fill.pattern = m.pattern;
      c->u.fill.elem_size = m.elem_size;
      c->u.fill.count = m.count;
      break;
    }
    case BG_CMD_BARRIER:
      if (h.size != sizeof(bg_cmd_barrier_rec)) return BG_CMD_MALFORMED;
      break;
    case BG_CMD_EVENT_RECORD:
    case BG_CMD_EVENT_WAIT: {
      if (h.size != sizeof(bg_cmd_event_rec)) return BG_CMD_MALFORMED;
      bg_cmd_event_rec e;
      memcpy(&e, r, sizeof e);
      c->u.event.event = (void*)(uintptr_t)e.event;
      break;
    }
  }
  it->off += h.size;
  return BG_CMD_NEXT;
}

#define OFF(c) ((unsigned long long)(c)->offset)

static int32_t refuse(uint64_t* bad, const bg_cmd* c, int32_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int32_t refuse(uint64_t* bad, const bg_cmd* c, int32_t code, const char* fmt, ...) {
  if (bad) *bad = c->offset;
  va_list ap;
  va_start(ap, fmt);
  bg_set_errorv(code, fmt, ap);
  va_end(ap);
  return code;
}

int32_t bg_cmds_validate(bg_device* dev, const char* fn, const void* bytes, uint64_t len,
                         uint64_t* bad) {
  bg_cmd_iter it;
  bg_cmd c;
  int r;
  bg_cmd_iter_init(&it, bytes, len);
  while ((r = bg_cmd_next(&it, &c)) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH: {
        void* k = c.u.launch.kernel;
        if (!bg_obj_is(k, BG_KIND_KERNEL) || ((bg_obj*)k)->dev != dev)
          return refuse(bad, &c, BG_ERR_INVALID_HANDLE,
                        "%s: command at byte %llu launches no live kernel of this device", fn, OFF(&c));
        const uint32_t *g = c.u.launch.grid, *b = c.u.launch.block;
        if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
          return refuse(bad, &c, BG_ERR_INVALID_VALUE,
                        "%s: command at byte %llu has a zero grid or block dimension", fn, OFF(&c));
        /* 1024 threads per block is the limit on every backend (CUDA, Metal, CPU). */
        uint64_t t = (uint64_t)b[0] * b[1] * b[2];
        if (t > 1024)
          return refuse(bad, &c, BG_ERR_INVALID_VALUE,
                        "%s: command at byte %llu has a block of %llu threads (max 1024)", fn,
                        OFF(&c), (unsigned long long)t);
        if (c.u.launch.nargs > 256)
          return refuse(bad, &c, BG_ERR_INVALID_VALUE,
                        "%s: command at byte %llu has %u arguments (max 256)", fn, OFF(&c),
                        c.u.launch.nargs);
        break;
      }
      case BG_CMD_COPY:
        if (c.u.copy.bytes && (!c.u.copy.dst || !c.u.copy.src)) goto null_copy;
        break;
      case BG_CMD_COPY_HTOD:
        if (c.u.htod.bytes && (!c.u.htod.dst || !c.u.htod.src)) goto null_copy;
        break;
      case BG_CMD_COPY_DTOH:
        if (c.u.dtoh.bytes && (!c.u.dtoh.dst || !c.u.dtoh.src)) goto null_copy;
        break;
      case BG_CMD_MEMSET: {
        if (!c.u.fill.count) break;
        uint32_t esz = c.u.fill.elem_size;
        if (!c.u.fill.dst)
          return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: dst is NULL", fn);
        if (esz != 1 && esz != 2 && esz != 4)
          return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: element size %u (want 1, 2 or 4)", fn,
                        esz);
        if (c.u.fill.dst % esz)
          return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: dst not aligned to %u", fn, esz);
        break;
      }
      case BG_CMD_EVENT_RECORD:
      case BG_CMD_EVENT_WAIT: {
        void* e = c.u.event.event;
        if (!bg_obj_is(e, BG_KIND_EVENT) || ((bg_obj*)e)->dev != dev)
          return refuse(bad, &c, BG_ERR_INVALID_HANDLE,
                        "%s: command at byte %llu names no live event of this device", fn, OFF(&c));
        break;
      }
      default: break;
    }
    continue;
  null_copy:
    return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: copy at byte %llu has a NULL address", fn,
                  OFF(&c));
  }
  if (r == BG_CMD_UNKNOWN)
    return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: unknown command %u at byte %llu", fn, c.op,
                  OFF(&c));
  if (r == BG_CMD_MALFORMED)
    return refuse(bad, &c, BG_ERR_INVALID_VALUE, "%s: malformed command at byte %llu", fn, OFF(&c));
  return BG_OK;
}

int32_t bg_issue_cmds(void* s, const uint8_t* p, uint64_t len) {
  const bg_ops* ops = ((bg_obj*)s)->dev->ops;
  bg_cmd_iter it;
  bg_cmd c;
  int32_t rc = BG_OK;
  bg_cmd_iter_init(&it, p, len);
  while (rc == BG_OK && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        rc = ops->launch(c.u.launch.kernel, s, c.u.launch.grid, c.u.launch.block,
                         c.u.launch.shared, c.u.launch.args, c.u.launch.nargs);
        break;
      case BG_CMD_COPY:
        if (c.u.copy.bytes) rc = ops->memcpy_dtod_async(s, c.u.copy.dst, c.u.copy.src, c.u.copy.bytes);
        break;
      case BG_CMD_COPY_HTOD:
        if (c.u.htod.bytes) rc = ops->memcpy_htod_async(s, c.u.htod.dst, c.u.htod.src, c.u.htod.bytes);
        break;
      case BG_CMD_COPY_DTOH:
        if (c.u.dtoh.bytes) rc = ops->memcpy_dtoh_async(s, c.u.dtoh.dst, c.u.dtoh.src, c.u.dtoh.bytes);
        break;
      case BG_CMD_MEMSET:
        if (c.u.fill.count)
          rc = ops->memset_async(s, c.u.fill.dst, c.u.fill.pattern, c.u.fill.elem_size,
                                 c.u.fill.count);
        break;
      case BG_CMD_BARRIER: break; /* a stream is in order already */
      case BG_CMD_EVENT_RECORD: rc = ops->event_record(c.u.event.event, s); break;
      case BG_CMD_EVENT_WAIT: rc = ops->stream_wait_event(s, c.u.event.event); break;
      default: break;
    }
  }
  return rc;
}

/* The backend's submit, or one by one. `p` is validated and 8-byte aligned. */
static int32_t run_cmds(void* s, const uint8_t* p, uint64_t len) {
  const bg_ops* ops = ((bg_obj*)s)->dev->ops;
  if (ops->submit) return ops->submit(s, p, len);
  return bg_issue_cmds(s, p, len);
}

/* A list whose start is not 8-byte aligned is copied, so decoders may read arguments as u64. */
static int32_t aligned(const void* bytes, uint64_t len, const char* fn, const uint8_t** out,
                       uint8_t** owned) {
  *owned = NULL;
  *out = bytes;
  if (!((uintptr_t)bytes & 7)) return BG_OK;
  if (len > SIZE_MAX || !(*owned = malloc((size_t)len)))
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  memcpy(*owned, bytes, (size_t)len);
  *out = *owned;
  return BG_OK;
}

/* bg_submit_checked's work; with `wait`, through the backend's submit_wait (which waits too). */
static int32_t submit_list(void* s, const void* bytes, uint64_t len, uint64_t* bad, int wait, uint32_t flags) {
  if (!bg_obj_is(s, BG_KIND_STREAM))
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_submit: not a live stream handle");
  if (!len) return BG_OK;
  if (!bytes) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_submit: bytes is NULL");
  int32_t rc = bg_cmds_validate(((bg_obj*)s)->dev, "bg_submit", bytes, len, bad);
  if (rc) return rc;
  const uint8_t* p;
  uint8_t* owned;
  if ((rc = aligned(bytes, len, "bg_submit", &p, &owned))) return rc;
  {
    BG_HOOK(((bg_obj*)s)->dev);
    rc = wait ? ((bg_obj*)s)->dev->ops->submit_wait(s, p, len, flags) : run_cmds(s, p, len);
  }
  free(owned);
  return rc;
}

BG_API int32_t bg_submit_checked(void* s, const void* bytes, uint64_t len, uint64_t* bad) {
  return submit_list(s, bytes, len, bad, 0, 0);
}

BG_API int32_t bg_submit_ex(void* s, const void* bytes, uint64_t len, uint32_t flags,
                            uint64_t* bad) {
  if (flags & ~(BG_SUBMIT_WAIT | BG_SUBMIT_SERIAL))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_submit_ex: unknown flags 0x%x", flags);
  if ((flags & BG_SUBMIT_WAIT) && len && bg_obj_is(s, BG_KIND_STREAM) && ((bg_obj*)s)->dev->ops->submit_wait)
    return submit_list(s, bytes, len, bad, 1, flags);
  int32_t rc = bg_submit_checked(s, bytes, len, bad);
  if (rc != BG_OK || !(flags & BG_SUBMIT_WAIT)) return rc;
  /* `s` is a live stream: bg_submit_checked said so. */
  bg_device* d = ((bg_obj*)s)->dev;
  BG_HOOK(d);
  return d->ops->stream_synchronize(s);
}

BG_API int32_t bg_submit(void* s, const void* bytes, uint64_t len) {
  return bg_submit_checked(s, bytes, len, NULL);
}

BG_API int32_t bg_graph_from_commands(void* dev, const void* bytes, uint64_t len, void** out) {
  const char* fn = "bg_graph_from_commands";
  if (!bg_obj_is(dev, BG_KIND_DEVICE))
    return bg_set_error(BG_ERR_INVALID_HANDLE, "%s: not a live device handle", fn);
  if (!out) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: out_graph is NULL", fn);
  *out = NULL;
  if (len && !bytes) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: bytes is NULL", fn);
  bg_device* d = dev;
  int32_t rc = bg_cmds_validate(d, fn, bytes, len, NULL);
  if (rc) return rc;
  const uint8_t* p;
  uint8_t* owned;
  if ((rc = aligned(bytes, len, fn, &p, &owned))) return rc;
  {
    BG_HOOK(d);
    if (d->ops->graph_from_commands) rc = d->ops->graph_from_commands(d, p, len, out);
    else rc = bg_cmdgraph_create(d, p, len, out);
  }
  free(owned);
  return rc;
}

/* Decode a command buffer and issue each command through the vtable, `iters` times: the C
 * baseline for schedules and encoders. */
BG_API int32_t bg_bench_issue_loop(void* s, const void* bytes, uint64_t len, uint64_t iters) {
  if (!bg_obj_is(s, BG_KIND_STREAM))
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_bench_issue_loop: not a live stream handle");
  if (!len) return BG_OK;
  if (!bytes) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_bench_issue_loop: bytes is NULL");
  int32_t rc = bg_cmds_validate(((bg_obj*)s)->dev, "bg_bench_issue_loop", bytes, len, NULL);
  const uint8_t* p = bytes;
  uint8_t* owned = NULL;
  if (!rc) rc = aligned(bytes, len, "bg_bench_issue_loop", &p, &owned);
  BG_HOOK(((bg_obj*)s)->dev);
  for (uint64_t i = 0; i < iters && rc == BG_OK; i++) rc = bg_issue_cmds(s, p, len);
  free(owned);
  return rc;
}

/* ---- the generic command-list graph ---------------------------------------------------------
 * A graph is its validated list; an exec is a copy of it whose launch arguments
 * bg_graph_exec_set_kernel_args patches in place; launching an exec submits its list on the
 * stream (every backend copies or encodes a list before bg_submit returns, so a later patch
 * never reaches a launch already made). Both hold every kernel and event the list names
 * (kernel_hold / event_hold), so they outlive bg_module_unload and bg_event_destroy as captured
 * graphs do. */
#include <pthread.h>

typedef struct cmd_list {
  uint8_t* bytes;
  uint64_t len;
  uint32_t nodes, nk;
  uint64_t* kargs;  /* per launch: byte offset of its first argument slot */
  uint32_t* knargs; /* per launch: its argument count */
} cmd_list;

typedef struct cmd_graph {
  bg_obj h;
  cmd_list l;
} cmd_graph;

typedef struct cmd_exec {
  bg_obj h;
  pthread_mutex_t mu; /* the argument words against a launch reading them */
  cmd_list l;
} cmd_exec;

static void list_hold(bg_device* d, const cmd_list* l, int hold) {
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, l->bytes, l->len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op == BG_CMD_LAUNCH)
      (hold ? d->ops->kernel_hold : d->ops->kernel_unhold)(c.u.launch.kernel);
    else if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT)
      (hold ? d->ops->event_hold : d->ops->event_unhold)(c.u.event.event);
  }
}

static void list_free(bg_device* d, cmd_list* l) {
  list_hold(d, l, 0);
  free(l->bytes);
  free(l->kargs);
  free(l->knargs);
  memset(l, 0, sizeof *l);
}

/* Copy a validated list, index its launches and hold what it names. */
static int32_t list_make(bg_device* d, const uint8_t* p, uint64_t len, const char* fn,
                         cmd_list* l) {
  memset(l, 0, sizeof *l);
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    int empty = (c.op == BG_CMD_COPY && !c.u.copy.bytes) ||
                (c.op == BG_CMD_COPY_HTOD && !c.u.htod.bytes) ||
                (c.op == BG_CMD_COPY_DTOH && !c.u.dtoh.bytes) ||
                (c.op == BG_CMD_MEMSET && !c.u.fill.count);
    if (c.op != BG_CMD_BARRIER && !empty) l->nodes++;
    if (c.op == BG_CMD_LAUNCH) l->nk++;
  }
  if (len > SIZE_MAX) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  l->bytes = malloc(len ? (size_t)len : 1);
  l->kargs = malloc((l->nk ? l->nk : 1) * sizeof *l->kargs);
  l->knargs = malloc((l->nk ? l->nk : 1) * sizeof *l->knargs);
  if (!l->bytes || !l->kargs || !l->knargs) {
    free(l->bytes);
    free(l->kargs);
    free(l->knargs);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  if (len) memcpy(l->bytes, p, (size_t)len);
  l->len = len;
  uint32_t k = 0;
  bg_cmd_iter_init(&it, l->bytes, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT)
    if (c.op == BG_CMD_LAUNCH) {
      l->kargs[k] = c.offset + sizeof(bg_cmd_launch_rec);
      l->knargs[k++] = c.u.launch.nargs;
    }
  list_hold(d, l, 1);
  return BG_OK;
}

int32_t bg_cmdgraph_create(bg_device* d, const uint8_t* p, uint64_t len, void** out) {
  const char* fn = "bg_graph_from_commands";
  if (!d->ops->kernel_hold || !d->ops->kernel_unhold || !d->ops->event_hold ||
      !d->ops->event_unhold)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: not supported on the %s backend", fn,
                        d->ops->name);
  cmd_graph* g = calloc(1, sizeof *g);
  if (!g) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  int32_t rc = list_make(d, p, len, fn, &g->l);
  if (rc) {
    free(g);
    return rc;
  }
  bg_obj_init(g, BG_KIND_CMD_GRAPH, d);
  *out = g;
  return BG_OK;
}

int32_t bg_cmdgraph_destroy(void* gv) {
  cmd_graph* g = gv;
  bg_device* d = g->h.dev;
  bg_obj_kill(g);
  list_free(d, &g->l);
  free(g);
  return BG_OK;
}

int32_t bg_cmdgraph_node_count(void* gv, uint32_t* nodes, uint32_t* kernel_nodes) {
  cmd_graph* g = gv;
  *nodes = g->l.nodes;
  *kernel_nodes = g->l.nk;
  return BG_OK;
}

int32_t bg_cmdgraph_instantiate(void* gv, void** out) {
  cmd_graph* g = gv;
  bg_device* d = g->h.dev;
  cmd_exec* x = calloc(1, sizeof *x);
  if (!x) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
  int32_t rc = list_make(d, g->l.bytes, g->l.len, "bg_graph_instantiate", &x->l);
  if (rc) {
    free(x);
    return rc;
  }
  pthread_mutex_init(&x->mu, NULL);
  bg_obj_init(x, BG_KIND_CMD_EXEC, d);
  *out = x;
  return BG_OK;
}

int32_t bg_cmdgraph_exec_destroy(void* xv) {
  cmd_exec* x = xv;
  bg_device* d = x->h.dev;
  bg_obj_kill(x);
  list_free(d, &x->l);
  pthread_mutex_destroy(&x->mu);
  free(x);
  return BG_OK;
}

int32_t bg_cmdgraph_launch(void* xv, void* s) {
  cmd_exec* x = xv;
  if (!x->l.len) return BG_OK;
  pthread_mutex_lock(&x->mu);
  int32_t rc = run_cmds(s, x->l.bytes, x->l.len);
  pthread_mutex_unlock(&x->mu);
  return rc;
}

int32_t bg_cmdgraph_set_kernel_args(void* xv, uint32_t index, const uint64_t* args,
                                    uint32_t nargs) {
  cmd_exec* x = xv;
  if (index >= x->l.nk)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: kernel node %u out of range (the graph has %u)",
                        index, x->l.nk);
  if (nargs != x->l.knargs[index])
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: %u arguments given, kernel node %u takes %u",
                        nargs, index, x->l.knargs[index]);
  pthread_mutex_lock(&x->mu);
  if (nargs) memcpy(x->l.bytes + x->l.kargs[index], args, 8ull * nargs);
  pthread_mutex_unlock(&x->mu);
  return BG_OK;
}
