/*
 * rings.c: the entry points of signals and rings (bungpu.h): a signal a stream reaches and
 * waits on (bg_signal_run, handed to a backend as a host function), waits on and writes to
 * memory, and single-producer/single-consumer rings in memory host and device both see.
 *
 * Calls: base.c.
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

/* ---- signals ------------------------------------------------------------------------------- */
struct bg_signal {
  bg_obj h;
  _Atomic uint32_t state; /* read by TypeScript through bg_signal_address */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

BG_API int32_t bg_signal_create(void** out) {
  NONNULL(out, "bg_signal_create", "out");
  bg_signal* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_signal_create: out of host memory");
  bg_obj_init(s, BG_KIND_SIGNAL, NULL);
  atomic_init(&s->state, BG_SIGNAL_IDLE);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  *out = s;
  return BG_OK;
}

BG_API int32_t bg_signal_destroy(void* sig) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_destroy");
  bg_signal* s = sig;
  uint32_t st = atomic_load(&s->state);
  if (st == BG_SIGNAL_PENDING || st == BG_SIGNAL_REACHED)
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_signal_destroy: a stream still waits on it");
  bg_obj_kill(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return BG_OK;
}

BG_API int32_t bg_signal_address(void* sig, void** out) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_address");
  NONNULL(out, "bg_signal_address", "out");
  *out = (void*)&((bg_signal*)sig)->state;
  return BG_OK;
}

BG_API int32_t bg_signal_release(void* sig) {
  CHECK(sig, BG_KIND_SIGNAL, "bg_signal_release");
  bg_signal* s = sig;
  pthread_mutex_lock(&s->mu);
  if (atomic_load(&s->state) != BG_SIGNAL_REACHED) {
    pthread_mutex_unlock(&s->mu);
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_signal_release: the stream has not reached it");
  }
  atomic_store_explicit(&s->state, BG_SIGNAL_RELEASED, memory_order_release);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return BG_OK;
}

void bg_signal_run(void* sig) {
  bg_signal* s = sig;
  pthread_mutex_lock(&s->mu);
  atomic_store_explicit(&s->state, BG_SIGNAL_REACHED, memory_order_release);
  while (atomic_load_explicit(&s->state, memory_order_acquire) != BG_SIGNAL_RELEASED)
    pthread_cond_wait(&s->cv, &s->mu);
  atomic_store_explicit(&s->state, BG_SIGNAL_IDLE, memory_order_release);
  pthread_mutex_unlock(&s->mu);
}

BG_API int32_t bg_stream_host_signal(void* stream, void* sig) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_host_signal");
  CHECK(sig, BG_KIND_SIGNAL, "bg_stream_host_signal");
  bg_signal* s = sig;
  uint32_t expect = BG_SIGNAL_IDLE;
  if (!atomic_compare_exchange_strong(&s->state, &expect, BG_SIGNAL_PENDING))
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_stream_host_signal: signal already in use");
  BG_HOOK(DEV(stream));
  int32_t rc = OPS(stream)->launch_host_func(stream, bg_signal_run, s);
  if (rc != BG_OK) atomic_store(&s->state, BG_SIGNAL_IDLE);
  return rc;
}

BG_API int32_t bg_stream_wait_value32(void* stream, bg_devptr addr, uint32_t value) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_wait_value32");
  NONNULL(addr, "bg_stream_wait_value32", "addr");
  if (addr & 3) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_wait_value32: address not 4-byte aligned");
  NEED(stream, stream_wait_value32, "bg_stream_wait_value32");
  BG_HOOK(DEV(stream));
  return OPS(stream)->stream_wait_value32(stream, addr, value);
}

BG_API int32_t bg_stream_write_value32(void* stream, bg_devptr addr, uint32_t value) {
  CHECK(stream, BG_KIND_STREAM, "bg_stream_write_value32");
  NONNULL(addr, "bg_stream_write_value32", "addr");
  if (addr & 3) return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_write_value32: address not 4-byte aligned");
  NEED(stream, stream_write_value32, "bg_stream_write_value32");
  BG_HOOK(DEV(stream));
  return OPS(stream)->stream_write_value32(stream, addr, value);
}

/* ---- rings --------------------------------------------------------------------------------- */
typedef struct bg_ring {
  bg_obj h;
  uint8_t* base;    /* host view */
  bg_devptr dbase;  /* device view */
  uint32_t msg_bytes, capacity;
} bg_ring;

#define RING_HEAD(r) ((_Atomic uint64_t*)((r)->base + BG_RING_HEAD_OFFSET))
#define RING_TAIL(r) ((_Atomic uint64_t*)((r)->base + BG_RING_TAIL_OFFSET))

BG_API int32_t bg_ring_create(void* dev, uint32_t msg_bytes, uint32_t capacity, void** out) {
  CHECK(dev, BG_KIND_DEVICE, "bg_ring_create");
  NONNULL(out, "bg_ring_create", "out");
  NEED(dev, ring_alloc, "bg_ring_create");
  if (!msg_bytes || msg_bytes % 4 || msg_bytes > 65536)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ring_create: message size %u (want a multiple of 4, 4..65536)", msg_bytes);
  if (capacity < 2 || capacity > (1u << 24) || (capacity & (capacity - 1)))
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ring_create: capacity %u (want a power of two, 2..16777216)", capacity);
  bg_ring* r = calloc(1, sizeof *r);
  if (!r) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ring_create: out of host memory");
  uint64_t bytes = BG_RING_DATA_OFFSET + (uint64_t)msg_bytes * capacity;
  void* host = NULL;
  BG_HOOK(DEV(dev));
  int32_t rc = OPS(dev)->ring_alloc(dev, bytes, &host, &r->dbase);
  if (rc) {
    free(r);
    return rc;
  }
  r->base = host;
  memset(r->base, 0, BG_RING_DATA_OFFSET);
  uint32_t meta[4] = {msg_bytes, capacity, 0, 0};
  memcpy(r->base + BG_RING_META_OFFSET, meta, sizeof meta);
  r->msg_bytes = msg_bytes;
  r->capacity = capacity;
  bg_obj_init(r, BG_KIND_RING, dev);
  *out = r;
  return BG_OK;
}

BG_API int32_t bg_ring_destroy(void* ring) {
  CHECK(ring, BG_KIND_RING, "bg_ring_destroy");
  bg_ring* r = ring;
  bg_obj_kill(r);
  BG_HOOK(DEV(r));
  int32_t rc = DEV(r)->ops->ring_free(DEV(r), r->base);
  free(r);
  return rc;
}

BG_API int32_t bg_ring_address(void* ring, void** host, bg_devptr* d) {
  CHECK(ring, BG_KIND_RING, "bg_ring_address");
  bg_ring* r = ring;
  if (host) *host = r->base;
  if (d) *d = r->dbase;
  return BG_OK;
}

BG_API int32_t bg_ring_push(void* ring, const void* msgs, uint32_t n, uint32_t* pushed) {
  CHECK(ring, BG_KIND_RING, "bg_ring_push");
  NONNULL(pushed, "bg_ring_push", "out_pushed");
  *pushed = 0;
  if (!n) return BG_OK;
  NONNULL(msgs, "bg_ring_push", "msgs");
  bg_ring* r = ring;
  uint64_t tail = atomic_load_explicit(RING_TAIL(r), memory_order_relaxed);
  uint64_t head = atomic_load_explicit(RING_HEAD(r), memory_order_acquire);
  uint64_t room = r->capacity - (tail - head);
  uint32_t k = n < room ? n : (uint32_t)room;
  const uint8_t* src = msgs;
  uint8_t* data = r->base + BG_RING_DATA_OFFSET;
  uint32_t mask = r->capacity - 1;
  for (uint32_t i = 0; i < k;) {
    uint32_t slot = (uint32_t)((tail + i) & mask);
    uint32_t run = r->capacity - slot;
    if (run > k - i) run = k - i;
    memcpy(data + (uint64_t)slot * r->msg_bytes, src + (uint64_t)i * r->msg_bytes,
           (uint64_t)run * r->msg_bytes);
    i += run;
  }
  atomic_store_explicit(RING_TAIL(r), tail + k, memory_order_release);
  *pushed = k;
  return BG_OK;
}

BG_API int32_t bg_ring_pop(void* ring, void* out, uint32_t max, uint32_t* popped) {
  CHECK(ring, BG_KIND_RING, "bg_ring_pop");
  NONNULL(popped, "bg_ring_pop", "out_popped");
  *popped = 0;
  if (!max) return BG_OK;
  NONNULL(out, "bg_ring_pop", "out");
  bg_ring* r = ring;
  uint64_t head = atomic_load_explicit(RING_HEAD(r), memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(RING_TAIL(r), memory_order_acquire);
  uint64_t avail = tail - head;
  uint32_t k = max < avail ? max : (uint32_t)avail;
  uint8_t* dst = out;
  const uint8_t* data = r->base + BG_RING_DATA_OFFSET;
  uint32_t mask = r->capacity - 1;
  for (uint32_t i = 0; i < k;) {
    uint32_t slot = (uint32_t)((head + i) & mask);
    uint32_t run = r->capacity - slot;
    if (run > k - i) run = k - i;
    memcpy(dst + (uint64_t)i * r->msg_bytes, data + (uint64_t)slot * r->msg_bytes,
           (uint64_t)run * r->msg_bytes);
    i += run;
  }
  atomic_store_explicit(RING_HEAD(r), head + k, memory_order_release);
  *popped = k;
  return BG_OK;
}

BG_API int32_t bg_ring_count(void* ring, uint32_t* used) {
  CHECK(ring, BG_KIND_RING, "bg_ring_count");
  NONNULL(used, "bg_ring_count", "out_used");
  bg_ring* r = ring;
  *used = (uint32_t)(atomic_load_explicit(RING_TAIL(r), memory_order_acquire) -
                     atomic_load_explicit(RING_HEAD(r), memory_order_acquire));
  return BG_OK;
}
