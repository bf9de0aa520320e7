/*
 * multi.c: the entry points of several devices and processes (bungpu.h): memory and events
 * shared between processes (the handle's header is written and checked here), peer access and
 * copies between devices (the peer bits kept under the device table's lock), and communicators
 * (checks, and the groups of collective calls per thread).
 *
 * Calls: backends.c, base.c.
 */
#define _GNU_SOURCE
#include "entry.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- memory and events shared between processes -------------------------------------------- */
BG_API int32_t bg_mem_alloc_flags(void* dev, uint64_t bytes, uint32_t flags, bg_devptr* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_mem_alloc_flags");
  NONNULL(out, "bg_mem_alloc_flags", "out");
  if (flags & ~(uint32_t)BG_MEM_SHAREABLE)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_flags: unknown flags 0x%x", flags);
  if (bytes == 0) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_mem_alloc_flags: size 0");
  BG_HOOK(DEV(dev));
  if (!(flags & BG_MEM_SHAREABLE)) return OPS(dev)->mem_alloc(dev, bytes, out);
  NEED(dev, ipc_mem_export, "bg_mem_alloc_flags (BG_MEM_SHAREABLE)");
  if (OPS(dev)->mem_alloc_shareable) return OPS(dev)->mem_alloc_shareable(dev, bytes, out);
  return OPS(dev)->mem_alloc(dev, bytes, out);
}

static void ipc_header(bg_ipc_handle* h, uint32_t kind, int32_t backend, uint64_t bytes) {
  memset(h, 0, sizeof *h);
  h->magic = BG_IPC_MAGIC;
  h->kind = kind;
  h->backend = backend;
  h->pid = (int32_t)getpid();
  h->bytes = bytes;
}

/* A handle's header, read from caller memory of any alignment: BG_ERR_INVALID_VALUE unless it is
 * a bungpu handle of `kind` for `d`'s backend. */
static int32_t ipc_read(const char* fn, const void* handle, uint32_t kind, bg_device* d,
                        bg_ipc_handle* h) {
  memcpy(h, handle, sizeof *h);
  if (h->magic != BG_IPC_MAGIC || (h->kind != BG_IPC_KIND_MEM && h->kind != BG_IPC_KIND_EVENT) ||
      !bg_backend_at(h->backend) || h->pid <= 0 || h->reserved != 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: not a bungpu interprocess handle", fn);
  if (h->kind != kind)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle is of %s, not of %s", fn,
                        h->kind == BG_IPC_KIND_MEM ? "memory" : "an event",
                        kind == BG_IPC_KIND_MEM ? "memory" : "an event");
  if (h->backend != d->backend)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle comes from a %s device, not %s", fn,
                        bg_backend_at(h->backend)->name, d->ops->name);
  if (kind == BG_IPC_KIND_MEM && h->bytes == 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle names 0 bytes", fn);
  /* an event's handle names no size: its exporter writes 0 there, so anything else is altered */
  if (kind == BG_IPC_KIND_EVENT && h->bytes != 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the handle names %llu bytes; an event's handle names none", fn,
                        (unsigned long long)h->bytes);
  return BG_OK;
}

BG_API int32_t bg_ipc_mem_export(void* dev, bg_devptr p, void* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_export");
  NONNULL(out, "bg_ipc_mem_export", "out_handle");
  NONNULL(p, "bg_ipc_mem_export", "ptr");
  NEED(dev, ipc_mem_export, "bg_ipc_mem_export");
  bg_ipc_handle h;
  ipc_header(&h, BG_IPC_KIND_MEM, DEV(dev)->backend, 0);
  BG_HOOK(DEV(dev));
  int32_t rc = OPS(dev)->ipc_mem_export(dev, p, h.payload, &h.bytes);
  if (rc == BG_OK) memcpy(out, &h, sizeof h);
  return rc;
}

BG_API int32_t bg_ipc_mem_open(void* dev, const void* handle, bg_devptr* out, uint64_t* out_bytes) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_open");
  NONNULL(handle, "bg_ipc_mem_open", "handle");
  NONNULL(out, "bg_ipc_mem_open", "out");
  NEED(dev, ipc_mem_open, "bg_ipc_mem_open");
  bg_ipc_handle h;
  int32_t rc = ipc_read("bg_ipc_mem_open", handle, BG_IPC_KIND_MEM, dev, &h);
  if (rc) return rc;
  BG_HOOK(DEV(dev));
  rc = OPS(dev)->ipc_mem_open(dev, h.pid, h.payload, h.bytes, out);
  if (rc == BG_OK && out_bytes) *out_bytes = h.bytes;
  return rc;
}

BG_API int32_t bg_ipc_mem_close(void* dev, bg_devptr p) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_mem_close");
  NONNULL(p, "bg_ipc_mem_close", "ptr");
  NEED(dev, ipc_mem_close, "bg_ipc_mem_close");
  BG_HOOK(DEV(dev));
  return OPS(dev)->ipc_mem_close(dev, p);
}

BG_API int32_t bg_ipc_event_export(void* e, void* out) {
  CHECK(e, BG_KIND_EVENT, "bg_ipc_event_export");
  NONNULL(out, "bg_ipc_event_export", "out_handle");
  NEED(e, ipc_event_export, "bg_ipc_event_export");
  bg_ipc_handle h;
  ipc_header(&h, BG_IPC_KIND_EVENT, DEV(e)->backend, 0);
  BG_HOOK(DEV(e));
  int32_t rc = OPS(e)->ipc_event_export(e, h.payload);
  if (rc == BG_OK) memcpy(out, &h, sizeof h);
  return rc;
}

BG_API int32_t bg_ipc_event_open(void* dev, const void* handle, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ipc_event_open");
  NONNULL(handle, "bg_ipc_event_open", "handle");
  NONNULL(out, "bg_ipc_event_open", "out");
  NEED(dev, ipc_event_open, "bg_ipc_event_open");
  bg_ipc_handle h;
  int32_t rc = ipc_read("bg_ipc_event_open", handle, BG_IPC_KIND_EVENT, dev, &h);
  if (rc) return rc;
  BG_HOOK(DEV(dev));
  return OPS(dev)->ipc_event_open(dev, h.pid, h.payload, out);
}

/* ---- several devices: peer access and copies between devices ------------------------------- */
static uint64_t peer_bit(const bg_device* peer) { return (uint64_t)1 << (uint32_t)peer->ordinal; }

static int32_t can_access(bg_device* d, bg_device* p, int32_t* out) {
  *out = 0;
  if (d == p || d->backend != p->backend || !d->ops->device_can_access_peer) return BG_OK;
  BG_HOOK(d);
  return d->ops->device_can_access_peer(d, p, out);
}

BG_API int32_t bg_device_can_access_peer(void* dev, void* peer, int32_t* out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_device_can_access_peer");
  CHECK(peer, BG_KIND_DEVICE, "bg_device_can_access_peer");
  NONNULL(out, "bg_device_can_access_peer", "out");
  return can_access(dev, peer, out);
}

static int32_t peer_check(const char* fn, bg_device* d, bg_device* p) {
  int32_t ok = 0;
  int32_t rc = can_access(d, p, &ok);
  if (rc) return rc;
  if (!ok)
    return bg_set_error(BG_ERR_INVALID_DEVICE, "%s: %s:%d cannot access %s:%d%s", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name,
                        (int)p->ordinal,
                        d == p ? " (the same device)" : d->backend != p->backend ? " (another backend)" : "");
  return BG_OK;
}

BG_API int32_t bg_device_enable_peer_access(void* dev, void* peer) {
  const char* fn = "bg_device_enable_peer_access";
  CHECK(dev, BG_KIND_DEVICE, fn);
  CHECK(peer, BG_KIND_DEVICE, fn);
  bg_device *d = dev, *p = peer;
  int32_t rc = peer_check(fn, d, p);
  if (rc) return rc;
  pthread_mutex_lock(&bg_dev_lock);
  if (atomic_load(&d->peer_enabled) & peer_bit(p)) {
    pthread_mutex_unlock(&bg_dev_lock);
    return bg_set_error(BG_ERR_PEER_ACCESS_ALREADY_ENABLED, "%s: %s:%d already has access to %s:%d", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name, (int)p->ordinal);
  }
  if (d->ops->peer_enable) {
    BG_HOOK(d);
    rc = d->ops->peer_enable(d, p);
  }
  /* the driver's own "already enabled" (someone else enabled it in a shared context): the
   * access is there, so the bookkeeping says so too */
  if (rc == BG_OK || rc == BG_ERR_PEER_ACCESS_ALREADY_ENABLED) atomic_fetch_or(&d->peer_enabled, peer_bit(p));
  pthread_mutex_unlock(&bg_dev_lock);
  return rc;
}

BG_API int32_t bg_device_disable_peer_access(void* dev, void* peer) {
  const char* fn = "bg_device_disable_peer_access";
  CHECK(dev, BG_KIND_DEVICE, fn);
  CHECK(peer, BG_KIND_DEVICE, fn);
  bg_device *d = dev, *p = peer;
  pthread_mutex_lock(&bg_dev_lock);
  if (d == p || d->backend != p->backend || !(atomic_load(&d->peer_enabled) & peer_bit(p))) {
    pthread_mutex_unlock(&bg_dev_lock);
    return bg_set_error(BG_ERR_PEER_ACCESS_NOT_ENABLED, "%s: %s:%d has no peer access to %s:%d", fn,
                        d->ops->name, (int)d->ordinal, p->ops->name, (int)p->ordinal);
  }
  int32_t rc = BG_OK;
  if (d->ops->peer_disable) {
    BG_HOOK(d);
    rc = d->ops->peer_disable(d, p);
  }
  if (rc == BG_OK || rc == BG_ERR_PEER_ACCESS_NOT_ENABLED) atomic_fetch_and(&d->peer_enabled, ~peer_bit(p));
  pthread_mutex_unlock(&bg_dev_lock);
  return rc;
}

BG_API int32_t bg_memcpy_peer_async(void* s, bg_devptr dst, void* dst_dev, bg_devptr src,
                                    void* src_dev, uint64_t n, int32_t* out_path) {
  const char* fn = "bg_memcpy_peer_async";
  CHECK(s, BG_KIND_STREAM, fn);
  CHECK(dst_dev, BG_KIND_DEVICE, fn);
  CHECK(src_dev, BG_KIND_DEVICE, fn);
  bg_device *sd = DEV(s), *dd = dst_dev, *xd = src_dev;
  if (sd != dd && sd != xd)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the stream is on neither device of the copy", fn);
  if (dd->backend != xd->backend)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: a copy between the %s and %s backends", fn,
                        xd->ops->name, dd->ops->name);
  bg_device* other = sd == dd ? xd : dd;
  int32_t path = other == sd ? BG_COPY_PATH_DEVICE
                 : (atomic_load(&sd->peer_enabled) & peer_bit(other)) ? BG_COPY_PATH_PEER
                                                                       : BG_COPY_PATH_STAGED;
  if (out_path) *out_path = path;
  if (!n) return BG_OK;
  NONNULL(src, fn, "src");
  NONNULL(dst, fn, "dst");
  BG_HOOK(sd);
  if (path == BG_COPY_PATH_DEVICE) return OPS(s)->memcpy_dtod_async(s, dst, src, n);
  if (!OPS(s)->memcpy_peer_async)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: copies between devices are not supported on the %s backend", fn,
                        OPS(s)->name);
  return OPS(s)->memcpy_peer_async(s, dst, dd, src, xd, n, path == BG_COPY_PATH_PEER);
}

/* ---- collectives: communicators ------------------------------------------------------------ */
static const bg_coll_ops* coll_of(const bg_device* d) { return d->ops->coll; }

#define COLL_NEED(d, fn)                                                                        \
  const bg_coll_ops* co = coll_of(d);                                                           \
  if (!co)                                                                                      \
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: no communicators on the %s backend", fn,     \
                        (d)->ops->name)

BG_API int32_t bg_comm_unique_id(void* dev, uint8_t* out, uint64_t cap) {
  const char* fn = "bg_comm_unique_id";
  CHECK(dev, BG_KIND_DEVICE, fn);
  NONNULL(out, fn, "out");
  if (cap < BG_COMM_ID_BYTES)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the id takes %d bytes, the buffer has %llu", fn,
                        BG_COMM_ID_BYTES, (unsigned long long)cap);
  COLL_NEED(DEV(dev), fn);
  memset(out, 0, BG_COMM_ID_BYTES);
  BG_HOOK(DEV(dev));
  return co->unique_id(dev, out);
}

BG_API int32_t bg_comm_init_rank(void* dev, int32_t nranks, const uint8_t* id, uint64_t id_len,
                                 int32_t rank, void** out) {
  const char* fn = "bg_comm_init_rank";
  CHECK(dev, BG_KIND_DEVICE, fn);
  NONNULL(out, fn, "out");
  NONNULL(id, fn, "id");
  if (id_len != BG_COMM_ID_BYTES)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: an id is %d bytes, not %llu", fn, BG_COMM_ID_BYTES,
                        (unsigned long long)id_len);
  if (nranks < 1)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: nranks %d (at least 1)", fn, (int)nranks);
  if (rank < 0 || rank >= nranks)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: rank %d out of range [0, %d)", fn, (int)rank,
                        (int)nranks);
  COLL_NEED(DEV(dev), fn);
  BG_HOOK(DEV(dev));
  return co->init_rank(dev, nranks, id, rank, out);
}

BG_API int32_t bg_comm_init_all(void* const* devs, int32_t n, void** out) {
  const char* fn = "bg_comm_init_all";
  NONNULL(devs, fn, "devs");
  NONNULL(out, fn, "out");
  if (n < 1) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %d devices (at least 1)", fn, (int)n);
  for (int32_t i = 0; i < n; i++) {
    CHECK(devs[i], BG_KIND_DEVICE, fn);
    bg_device *a = devs[i], *b = devs[0];
    if (a->backend != b->backend)
      return bg_set_error(BG_ERR_INVALID_VALUE, "%s: device %d is %s:%d, device 0 %s:%d (one backend)",
                          fn, (int)i, a->ops->name, (int)a->ordinal,
                          b->ops->name, (int)b->ordinal);
    for (int32_t j = 0; j < i; j++)
      if (devs[j] == a)
        return bg_set_error(BG_ERR_INVALID_DEVICE, "%s: %s:%d is named twice (devices %d and %d)", fn,
                            a->ops->name, (int)a->ordinal, (int)j, (int)i);
  }
  COLL_NEED((bg_device*)devs[0], fn);
  for (int32_t i = 0; i < n; i++) out[i] = NULL;
  return co->init_all((bg_device**)devs, n, out);
}

BG_API int32_t bg_comm_destroy(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_destroy");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->destroy(c);
}

BG_API int32_t bg_comm_abort(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_abort");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->abort(c);
}

BG_API int32_t bg_comm_info(void* c, int32_t* rank, int32_t* nranks) {
  CHECK(c, BG_KIND_COMM, "bg_comm_info");
  NONNULL(rank, "bg_comm_info", "rank");
  NONNULL(nranks, "bg_comm_info", "nranks");
  return coll_of(DEV(c))->info(c, rank, nranks);
}

BG_API int32_t bg_comm_check(void* c) {
  CHECK(c, BG_KIND_COMM, "bg_comm_check");
  BG_HOOK(DEV(c));
  return coll_of(DEV(c))->check(c);
}

BG_API int32_t bg_comm_set_timeout(void* c, uint32_t ms) {
  CHECK(c, BG_KIND_COMM, "bg_comm_set_timeout");
  const bg_coll_ops* co = coll_of(DEV(c));
  if (!co->set_timeout)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_comm_set_timeout: not supported on the %s backend",
                        OPS(c)->name);
  return co->set_timeout(c, ms);
}

/* Grouping: the depth and the backends that took part (their tables), per thread. */
static _Thread_local int32_t group_depth;
static _Thread_local uint32_t group_backends;
static _Thread_local const bg_coll_ops* group_ops[BG_MAX_BACKENDS];
static _Thread_local int group_abandoned;

static uint32_t dtype_size(int32_t t) {
  switch (t) {
    case BG_DTYPE_INT8: case BG_DTYPE_UINT8: return 1;
    case BG_DTYPE_FLOAT16: case BG_DTYPE_BFLOAT16: return 2;
    case BG_DTYPE_INT32: case BG_DTYPE_UINT32: case BG_DTYPE_FLOAT32: return 4;
    case BG_DTYPE_INT64: case BG_DTYPE_UINT64: case BG_DTYPE_FLOAT64: return 8;
  }
  return 0;
}

BG_API int32_t bg_comm_collective(void* c, void* s, int32_t coll, bg_devptr send, bg_devptr recv,
                                  uint64_t count, int32_t dtype, int32_t redop, int32_t peer) {
  const char* fn = "bg_comm_collective";
  CHECK(c, BG_KIND_COMM, fn);
  CHECK(s, BG_KIND_STREAM, fn);
  if (DEV(s) != DEV(c))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the stream is on %s:%d, the communicator on %s:%d", fn,
                        OPS(s)->name, (int)DEV(s)->ordinal, OPS(c)->name, (int)DEV(c)->ordinal);
  if (coll < BG_COLL_ALL_REDUCE || coll > BG_COLL_RECV)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no collective %d", fn, (int)coll);
  if (!dtype_size(dtype)) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no data type %d", fn, (int)dtype);
  int reduces = coll == BG_COLL_ALL_REDUCE || coll == BG_COLL_REDUCE || coll == BG_COLL_REDUCE_SCATTER;
  if (reduces && (redop < BG_RED_SUM || redop > BG_RED_AVG))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: no reduction %d", fn, (int)redop);
  const bg_coll_ops* co = coll_of(DEV(c));
  int32_t rank = 0, nranks = 0;
  int32_t rc = co->info(c, &rank, &nranks);
  if (rc) return rc;
  int rooted = coll == BG_COLL_BROADCAST || coll == BG_COLL_REDUCE || coll == BG_COLL_SEND || coll == BG_COLL_RECV;
  if (rooted && (peer < 0 || peer >= nranks))
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %s %d out of range [0, %d)", fn,
                        coll == BG_COLL_SEND || coll == BG_COLL_RECV ? "peer" : "root", (int)peer,
                        (int)nranks);
  if (count && coll != BG_COLL_RECV) NONNULL(send, fn, "send");
  if (count && coll != BG_COLL_SEND) NONNULL(recv, fn, "recv");
  bg_coll_call call = {coll, dtype, reduces ? redop : 0, rooted ? peer : 0, send, recv, count};
  BG_HOOK(DEV(c));
  int grouped = group_depth > 0;
  if (grouped) {
    uint32_t bit = 1u << (uint32_t)DEV(c)->backend;
    if (!(group_backends & bit)) {
      if (co->group_start && (rc = co->group_start())) return rc;
      group_backends |= bit;
      group_ops[DEV(c)->backend] = co;
    }
  }
  return co->call(c, s, &call, grouped);
}

BG_API int32_t bg_comm_group_start(void) {
  group_depth++;
  return BG_OK;
}

BG_API int32_t bg_comm_group_end(void) {
  if (group_depth <= 0)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_end: no group was started on this thread");
  if (--group_depth) return BG_OK;
  uint32_t used = group_backends;
  int discard = group_abandoned;
  group_backends = 0;
  group_abandoned = 0;
  int32_t first = BG_OK;
  char msg[512] = {0};
  for (int32_t b = 0; b < BG_MAX_BACKENDS; b++) {
    if (!(used & (1u << (uint32_t)b))) continue;
    const bg_coll_ops* co = group_ops[b];
    group_ops[b] = NULL;
    if (!co || !co->group_end) continue;
    int32_t rc = co->group_end(discard);
    if (rc && !first) {
      first = rc;
      bg_last_error(msg, sizeof msg);
    }
  }
  if (first) return bg_set_error(first, "%s", msg);
  if (discard)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_end: the group was abandoned (bg_comm_group_abandon); "
                                              "its calls were dropped where the backend can drop them");
  return BG_OK;
}

BG_API int32_t bg_comm_group_abandon(void) {
  if (group_depth <= 0)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_group_abandon: no group was started on this thread");
  group_abandoned = 1;
  return BG_OK;
}
