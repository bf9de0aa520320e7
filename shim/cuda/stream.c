/*
 * cuda/stream.c: streams (the device's default one wraps the legacy NULL stream), asynchronous
 * copies and memsets, host functions and notifications, stream memory operations (how TypeScript
 * host functions hold a stream), and events. A host function or stream wait leaves a gate
 * (release.c) behind it.
 *
 * Calls: driver.c, release.c, context.c, capture.c, base.c.
 */
#include "cuda_internal.h"

/* ---- streams ---------------------------------------------------------------------------------- */
int32_t cu_stream_create(bg_device* dev, uint32_t flags, int32_t prio, void** out) {
  ENTER((cu_device*)dev);
  cu_stream* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  unsigned int cf = (flags & BG_STREAM_NON_BLOCKING) ? BGCU_STREAM_NON_BLOCKING : BGCU_STREAM_DEFAULT;
  bgcu_result r = cu.cuStreamCreateWithPriority(&s->s, cf, prio);
  if (r != BGCUDA_SUCCESS) {
    free(s);
    return cu_fail(r, "cuStreamCreateWithPriority");
  }
  bg_obj_init(s, BG_KIND_STREAM, dev);
  cu_device* d = (cu_device*)dev;
  pthread_mutex_lock(&d->str_lock);
  s->next = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->str_lock);
  *out = s;
  return BG_OK;
}

/* Waits for the stream's work (unless it is capturing, where waiting is illegal), then destroys
 * it. The first error is returned; the stream is destroyed either way. */
int32_t cu_stream_destroy(void* sp) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  int32_t rc = BG_OK;
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  bgcu_result r = cu.cuStreamIsCapturing(s->s, &st);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuStreamIsCapturing");
  else if (st == BGCU_STREAM_CAPTURE_STATUS_NONE) {
    r = cu.cuStreamSynchronize(s->s);
    if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuStreamSynchronize");
  }
  if (s->cap) {
    detach_capture(d, s->cap);
    free_capture(s->cap);
    s->cap = NULL;
  }
  pthread_mutex_lock(&d->str_lock);
  for (cu_stream** p = &d->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&d->str_lock);
  r = cu.cuStreamDestroy_v2(s->s);
  if (r != BGCUDA_SUCCESS && rc == BG_OK) rc = cu_fail(r, "cuStreamDestroy_v2");
  bg_obj_kill(s);
  free(s);
  return rc;
}

int32_t cu_stream_synchronize(void* sp) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuStreamSynchronize, (s->s));
  return BG_OK;
}

int32_t cu_stream_query(void* sp) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  bgcu_result r = cu.cuStreamQuery(s->s);
  if (r == BGCUDA_SUCCESS) return BG_OK;
  if (r == BGCUDA_ERROR_NOT_READY)
    return bg_set_error(BG_ERR_NOT_READY, "cuStreamQuery: CUDA_ERROR_NOT_READY (600)");
  return cu_fail(r, "cuStreamQuery");
}

int32_t cu_stream_wait_event(void* sp, void* ep) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuStreamWaitEvent, (s->s, ((cu_event*)ep)->e, 0));
  return BG_OK;
}

int32_t cu_memcpy_htod_async(void* sp, bg_devptr dst, const void* src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyHtoDAsync_v2, (dst, src, (size_t)n, s->s));
  return BG_OK;
}

int32_t cu_memcpy_dtoh_async(void* sp, void* dst, bg_devptr src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyDtoHAsync_v2, (dst, src, (size_t)n, s->s));
  return BG_OK;
}

int32_t cu_memcpy_dtod_async(void* sp, bg_devptr dst, bg_devptr src, uint64_t n) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuMemcpyDtoDAsync_v2, (dst, src, (size_t)n, s->s));
  return BG_OK;
}

/* cuMemcpyPeerAsync goes peer to peer where access is enabled and stages through host memory
 * otherwise: the driver picks; `peer` is what the core reports. */
int32_t cu_memcpy_peer_async(void* sp, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                             bg_device* src_dev, uint64_t n, int peer) {
  (void)peer;
  cu_stream* s = sp;
  if (!cu.cuMemcpyPeerAsync) return bg_set_error(BG_ERR_NOT_SUPPORTED, "cuMemcpyPeerAsync: not in this driver");
  ENTER(CUDEV(s));
  CALL(cuMemcpyPeerAsync, (dst, ((cu_device*)dst_dev)->ctx, src, ((cu_device*)src_dev)->ctx, (size_t)n, s->s));
  return BG_OK;
}

int32_t cu_memset_async(void* sp, bg_devptr dst, uint32_t pattern, uint32_t esz,
                        uint64_t count) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  switch (esz) {
    case 1: CALL(cuMemsetD8Async, (dst, (unsigned char)pattern, (size_t)count, s->s)); break;
    case 2: CALL(cuMemsetD16Async, (dst, (unsigned short)pattern, (size_t)count, s->s)); break;
    default: CALL(cuMemsetD32Async, (dst, pattern, (size_t)count, s->s)); break;
  }
  return BG_OK;
}

int32_t cu_launch_host_func(void* sp, bg_host_fn fn, void* user) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuLaunchHostFunc, (s->s, fn, user));
  gate_add(CUDEV(s), s); /* it may wait for a JS thread (a shim signal) */
  return BG_OK;
}

/* bg_stream_notify: a host function that only queues a wake-up and returns, so no gate (a gate
 * per await would keep releases queued on a busy device). */
int32_t cu_stream_notify(void* sp, bg_host_fn fn, void* user) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  CALL(cuLaunchHostFunc, (s->s, fn, user));
  return BG_OK;
}

/* Stream memory operations on mapped host memory: how TypeScript host functions hold a stream
 * without parking the driver's one host-function thread (a parked thread stalled every other
 * stream's host functions, so a wait across streams could deadlock). */
int32_t cu_stream_wait_value32(void* sp, bg_devptr addr, uint32_t value) {
  cu_stream* s = sp;
  if (!cu.cuStreamWaitValue32_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_stream_wait_value32: the CUDA driver lacks "
                        "cuStreamWaitValue32_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(s));
  CALL(cuStreamWaitValue32_v2, (s->s, addr, value, BGCU_STREAM_WAIT_VALUE_EQ));
  gate_add(CUDEV(s), s); /* the word may be a TypeScript host function's */
  return BG_OK;
}

int32_t cu_stream_write_value32(void* sp, bg_devptr addr, uint32_t value) {
  cu_stream* s = sp;
  if (!cu.cuStreamWriteValue32_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_stream_write_value32: the CUDA driver lacks "
                        "cuStreamWriteValue32_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(s));
  CALL(cuStreamWriteValue32_v2, (s->s, addr, value, BGCU_STREAM_WRITE_VALUE_DEFAULT));
  return BG_OK;
}

/* ---- events ----------------------------------------------------------------------------------- */
int32_t cu_event_create(bg_device* dev, uint32_t flags, void** out) {
  ENTER((cu_device*)dev);
  cu_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: out of host memory");
  unsigned int cf = BGCU_EVENT_DEFAULT;
  if (flags & BG_EVENT_BLOCKING_SYNC) cf |= BGCU_EVENT_BLOCKING_SYNC;
  if (flags & BG_EVENT_DISABLE_TIMING) cf |= BGCU_EVENT_DISABLE_TIMING;
  if (flags & BG_EVENT_INTERPROCESS) cf |= BGCU_EVENT_INTERPROCESS;
  bgcu_result r = cu.cuEventCreate(&e->e, cf);
  if (r != BGCUDA_SUCCESS) {
    free(e);
    return cu_fail(r, "cuEventCreate");
  }
  atomic_init(&e->refs, 1);
  bg_obj_init(e, BG_KIND_EVENT, dev);
  *out = e;
  return BG_OK;
}

/* Drop a reference; the last one destroys the driver's event (the context is current). */
bgcu_result event_unref(cu_event* e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return BGCUDA_SUCCESS;
  bgcu_result r = cu.cuEventDestroy_v2(e->e);
  free(e);
  return r;
}

int32_t cu_event_destroy(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  bg_obj_kill(e);
  bgcu_result r = event_unref(e);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuEventDestroy_v2");
  return BG_OK;
}

/* Holds for the core's command-list graphs: a kernel keeps its module loaded (as a captured
 * kernel node does), an event its driver event. */
void cu_event_hold(void* ep) {
  atomic_fetch_add_explicit(&((cu_event*)ep)->refs, 1, memory_order_relaxed);
}
void cu_event_unhold(void* ep) {
  cu_event* e = ep;
  cu_guard g __attribute__((cleanup(cu_leave))) = {0, NULL};
  cu_enter(CUDEV(e), &g);
  event_unref(e);
}

int32_t cu_event_record(void* ep, void* sp) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  CALL(cuEventRecord, (e->e, ((cu_stream*)sp)->s));
  return BG_OK;
}

int32_t cu_event_query(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  bgcu_result r = cu.cuEventQuery(e->e);
  if (r == BGCUDA_SUCCESS) return BG_OK;
  if (r == BGCUDA_ERROR_NOT_READY)
    return bg_set_error(BG_ERR_NOT_READY, "cuEventQuery: CUDA_ERROR_NOT_READY (600)");
  return cu_fail(r, "cuEventQuery");
}

int32_t cu_event_synchronize(void* ep) {
  cu_event* e = ep;
  ENTER(CUDEV(e));
  CALL(cuEventSynchronize, (e->e));
  return BG_OK;
}

int32_t cu_event_elapsed(float* ms, void* a, void* b) {
  ENTER(CUDEV(a));
  bgcu_event ea = ((cu_event*)a)->e, eb = ((cu_event*)b)->e;
  if (cu.cuEventElapsedTime_v2) CALL(cuEventElapsedTime_v2, (ms, ea, eb));
  else CALL(cuEventElapsedTime, (ms, ea, eb));
  return BG_OK;
}
