/*
 * metal/stream.c: streams (one command queue, an open command buffer and encoder, a helper
 * thread that waits on committed work in order and runs host work) and events.
 *
 * Calls: runtime.c, base.c.
 */
#include "metal.h"

#if defined(__APPLE__)

/* ---- streams: command buffers, encoders, the helper thread ---------------------------------- */
void mtl_end_encoder_locked(mtl_stream* s) {
  if (!s->enc) return;
  m_void(s->enc, mtl_S.endEncoding);
  rel(s->enc);
  s->enc = NULL;
  s->enc_kind = ENC_NONE;
}

static int32_t ensure_cb_locked(mtl_stream* s) {
  if (s->cb) return BG_OK;
  mtl_item* it = calloc(1, sizeof *it);
  if (!it) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "Metal: out of host memory");
  oc_id cb = m_id(s->queue, mtl_S.commandBuffer);
  if (!cb) {
    free(it);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "commandBuffer: the queue gave no command buffer");
  }
  it->kind = IT_CB;
  it->cb = s->cb = ret(cb);
  s->cb_item = it;
  if (s->gate_next > s->gate_done) /* host work before it has not run yet */
    m_void_id_u64(cb, mtl_S.encodeWaitForEvent, s->gate, s->gate_next);
  return BG_OK;
}

int32_t mtl_encoder_locked(mtl_stream* s, int kind, oc_id* out) {
  if (s->enc_kind == kind) {
    *out = s->enc;
    return BG_OK;
  }
  mtl_end_encoder_locked(s);
  int32_t rc = ensure_cb_locked(s);
  if (rc) return rc;
  oc_id e = kind == ENC_BLIT      ? m_id(s->cb, mtl_S.blitCommandEncoder)
            : kind == ENC_SERIAL ? m_id(s->cb, mtl_S.computeCommandEncoder)
                                 : m_id_u64(s->cb, mtl_S.computeCommandEncoderWithDispatchType,
                                            MTL_DISPATCH_CONCURRENT);
  if (!e)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: the command buffer gave no encoder",
                        kind == ENC_BLIT ? "blitCommandEncoder" : "computeCommandEncoder");
  s->enc = ret(e);
  s->enc_kind = kind;
  *out = s->enc;
  return BG_OK;
}

static void push_locked(mtl_stream* s, mtl_item* it) {
  it->next = NULL;
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  s->nfifo++;
  s->pushed++;
  pthread_cond_signal(&s->cv_work);
}

/* Commit the open command buffer, if any. Never fails: its item was allocated with it. */
static void flush_locked(mtl_stream* s) {
  if (!s->cb) return;
  mtl_end_encoder_locked(s);
  m_void(s->cb, mtl_S.commit);
  mtl_item* it = s->cb_item;
  s->cb = NULL;
  s->cb_item = NULL;
  push_locked(s, it);
}

/* After encoding: commit now while the GPU has little of this stream's work; else the helper
 * thread commits it when earlier work completes. */
void mtl_maybe_flush_locked(mtl_stream* s) {
  if (s->cb && s->nfifo < MAX_INFLIGHT) flush_locked(s);
}

/* Host work in stream order: after all earlier work, before all later GPU work (the gate). */
int32_t mtl_push_host_locked(mtl_stream* s, int kind, bg_host_fn fn, void* user, void* dst,
                             const void* src, uint64_t n, oc_id keep) {
  mtl_item* it = calloc(1, sizeof *it);
  if (!it) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "Metal: out of host memory");
  flush_locked(s);
  it->kind = kind;
  it->fn = fn;
  it->user = user;
  it->dst = dst;
  it->src = src;
  it->n = n;
  it->keep = ret(keep);
  it->gate = ++s->gate_next;
  push_locked(s, it);
  return BG_OK;
}

static void ev_unref(mtl_event* e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  rel(e->ev);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

/* The helper thread saw the command buffer holding record (e, v) complete. */
static void ev_complete(mtl_event* e, uint64_t v, double t_gpu, uint64_t t_host, int failed) {
  pthread_mutex_lock(&e->mu);
  if (v > atomic_load(&e->done)) {
    e->t_value = v;
    e->t_gpu = t_gpu;
    e->t_host = t_host;
    atomic_store(&e->done, v);
  }
  pthread_mutex_unlock(&e->mu);
  /* A failed command buffer may not have signaled: let GPU waiters go on. */
  if (failed && m_u64(e->ev, mtl_S.signaledValue) < v) m_void_u64(e->ev, mtl_S.setSignaledValue, v);
}

/* Runs one item outside the stream lock; fills err/msg on a failure. */
static void run_item(mtl_stream* s, mtl_item* it, int32_t* err, char* msg, size_t cap) {
  if (it->kind == IT_CB) {
    m_void(it->cb, mtl_S.waitUntilCompleted);
    uint64_t t_host = bg_now_ns();
    int failed = m_u64(it->cb, mtl_S.status) == MTL_CB_ERROR;
    if (failed) {
      char buf[400];
      *err = BG_ERR_LAUNCH_FAILED;
      snprintf(msg, cap, "MTLCommandBuffer: %s", mtl_err_text(m_id(it->cb, mtl_S.error), buf, sizeof buf));
    }
    double t_gpu = it->recs ? m_f64(it->cb, mtl_S.GPUEndTime) : 0;
    for (mtl_rec* r = it->recs; r;) {
      mtl_rec* next = r->next;
      ev_complete(r->e, r->v, t_gpu, t_host, failed);
      ev_unref(r->e);
      free(r);
      r = next;
    }
    rel(it->cb);
    return;
  }
  if (it->kind == IT_HOST) it->fn(it->user);
  else memcpy(it->dst, it->src, (size_t)it->n);
  rel(it->keep);
  m_void_u64(s->gate, mtl_S.setSignaledValue, it->gate);
}

static void* stream_main(void* arg) {
  mtl_stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->quit) pthread_cond_wait(&s->cv_work, &s->mu);
    if (!s->head) break;
    mtl_item* it = s->head;
    pthread_mutex_unlock(&s->mu);
    int32_t err = BG_OK;
    char msg[512];
    void* pool = mtl_rt.pool_push();
    run_item(s, it, &err, msg, sizeof msg);
    pthread_mutex_lock(&s->mu);
    if (err && !s->err) {
      s->err = err;
      memcpy(s->errmsg, msg, sizeof msg);
    }
    if (it->kind != IT_CB) s->gate_done = it->gate;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->nfifo--;
    s->completed++;
    if (s->cb && s->nfifo < MAX_INFLIGHT) flush_locked(s); /* work held while the GPU was busy */
    mtl_rt.pool_pop(pool);
    pthread_cond_broadcast(&s->cv_done);
    free(it);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static int32_t take_error_locked(mtl_stream* s) {
  if (!s->err) return BG_OK;
  int32_t rc = bg_set_error(s->err, "%s", s->errmsg);
  s->err = BG_OK;
  return rc;
}

int32_t mtl_stream_sync(mtl_stream* s) {
  pthread_mutex_lock(&s->mu);
  flush_locked(s);
  uint64_t target = s->pushed;
  while (s->completed < target) pthread_cond_wait(&s->cv_done, &s->mu);
  int32_t rc = take_error_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int32_t mtl_stream_new(mtl_dev* d, mtl_stream** out) {
  mtl_stream* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  s->queue = m_id(d->dev, mtl_S.newCommandQueue);
  s->gate = m_id(d->dev, mtl_S.newSharedEvent);
  if (!s->queue || !s->gate) {
    const char* what = s->queue ? "newSharedEvent" : "newCommandQueue";
    rel(s->queue);
    rel(s->gate);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: the device returned nil", what);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, NULL);
  bg_obj_init(s, BG_KIND_STREAM, &d->d);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    rel(s->queue);
    rel(s->gate);
    bg_obj_kill(s);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: pthread_create failed");
  }
  *out = s;
  return BG_OK;
}

int32_t mtl_stream_free(mtl_stream* s) {
  int32_t rc = mtl_stream_sync(s);
  pthread_mutex_lock(&s->mu);
  s->quit = 1;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  bg_obj_kill(s);
  mtl_end_encoder_locked(s);
  rel(s->cb); /* not committed: nothing after the sync can be left here, but be safe */
  free(s->cb_item);
  rel(s->queue);
  rel(s->gate);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_done);
  free(s);
  return rc;
}

/* ---- stream entry points -------------------------------------------------------------------- */
static int32_t stream_create_impl(bg_device* dv, void** out) {
  mtl_dev* d = (mtl_dev*)dv;
  mtl_stream* s = NULL;
  int32_t rc = mtl_stream_new(d, &s);
  if (rc) return rc;
  pthread_mutex_lock(&d->smu);
  s->next = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->smu);
  *out = s;
  return BG_OK;
}
int32_t mtl_stream_create(bg_device* dv, uint32_t flags, int32_t prio, void** out) {
  (void)flags; /* every Metal queue is independent: non-blocking semantics */
  (void)prio;
  return stream_create_impl(dv, out);
}

static int32_t stream_destroy_impl(void* sv) {
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  pthread_mutex_lock(&d->smu);
  for (mtl_stream** p = &d->streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&d->smu);
  return mtl_stream_free(s);
}
int32_t mtl_stream_destroy(void* sv) { return stream_destroy_impl(sv); }
int32_t mtl_stream_synchronize(void* sv) { return mtl_stream_sync(sv); }

static int32_t query_impl(mtl_stream* s) {
  pthread_mutex_lock(&s->mu);
  flush_locked(s);
  int32_t rc = s->completed == s->pushed
                   ? take_error_locked(s)
                   : bg_set_error(BG_ERR_NOT_READY, "bg_stream_query: work still pending");
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_stream_query(void* sv) { return query_impl(sv); }

int32_t mtl_launch_host_func(void* sv, bg_host_fn fn, void* user) {
  mtl_stream* s = sv;
  void* pool = mtl_rt.pool_push();
  pthread_mutex_lock(&s->mu);
  int32_t rc = mtl_push_host_locked(s, IT_HOST, fn, user, NULL, NULL, 0, NULL);
  pthread_mutex_unlock(&s->mu);
  mtl_rt.pool_pop(pool);
  return rc;
}

/* ---- events --------------------------------------------------------------------------------- */
static int32_t event_create_impl(bg_device* dv, uint32_t flags, void** out) {
  mtl_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: out of host memory");
  e->ev = m_id(((mtl_dev*)dv)->dev, mtl_S.newSharedEvent);
  if (!e->ev) {
    free(e);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newSharedEvent: the device returned nil");
  }
  e->flags = flags;
  atomic_init(&e->refs, 1);
  atomic_init(&e->counter, 0);
  atomic_init(&e->target, 0);
  atomic_init(&e->done, 0);
  pthread_mutex_init(&e->mu, NULL);
  bg_obj_init(e, BG_KIND_EVENT, dv);
  *out = e;
  return BG_OK;
}
int32_t mtl_event_create(bg_device* dv, uint32_t flags, void** out) {
  return event_create_impl(dv, flags, out);
}

static int32_t event_destroy_impl(void* ev) {
  bg_obj_kill(ev);
  ev_unref(ev); /* pending records keep it until their command buffers complete */
  return BG_OK;
}
int32_t mtl_event_destroy(void* ev) { return event_destroy_impl(ev); }
void mtl_event_hold(void* ev) { atomic_fetch_add(&((mtl_event*)ev)->refs, 1); }
void mtl_event_unhold(void* ev) {
  void* pool = mtl_rt.pool_push();
  ev_unref(ev);
  mtl_rt.pool_pop(pool);
}

/* Signal the event at the end of the work encoded so far. A timing event ends its command
 * buffer there, so that buffer's GPUEndTime is the event's time. */
int32_t mtl_record_locked(mtl_stream* s, mtl_event* e) {
  mtl_rec* r = malloc(sizeof *r);
  if (!r) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_record: out of host memory");
  int32_t rc = ensure_cb_locked(s);
  if (rc) {
    free(r);
    return rc;
  }
  mtl_end_encoder_locked(s);
  uint64_t v = atomic_fetch_add(&e->counter, 1) + 1;
  m_void_id_u64(s->cb, mtl_S.encodeSignalEvent, e->ev, v);
  atomic_fetch_add(&e->refs, 1);
  r->e = e;
  r->v = v;
  r->next = s->cb_item->recs;
  s->cb_item->recs = r;
  atomic_store(&e->target, v);
  if (!(e->flags & BG_EVENT_DISABLE_TIMING)) flush_locked(s);
  return BG_OK;
}

int32_t mtl_wait_locked(mtl_stream* s, mtl_event* e) {
  uint64_t t = atomic_load(&e->target);
  if (!t) return BG_OK; /* never recorded: nothing to wait for */
  int32_t rc = ensure_cb_locked(s);
  if (rc) return rc;
  mtl_end_encoder_locked(s);
  m_void_id_u64(s->cb, mtl_S.encodeWaitForEvent, e->ev, t);
  return BG_OK;
}

static int32_t event_record_impl(void* ev, void* sv) {
  mtl_stream* s = sv;
  pthread_mutex_lock(&s->mu);
  int32_t rc = mtl_record_locked(s, ev);
  if (!rc) mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_event_record(void* ev, void* sv) { return event_record_impl(ev, sv); }

static int32_t wait_event_impl(void* sv, void* ev) {
  mtl_stream* s = sv;
  pthread_mutex_lock(&s->mu);
  int32_t rc = mtl_wait_locked(s, ev);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_stream_wait_event(void* sv, void* ev) { return wait_event_impl(sv, ev); }

/* Reached: a timing event once the helper thread stamped it (so elapsed works); any other as
 * soon as the GPU signaled it. */
static int ev_reached(mtl_event* e, uint64_t t) {
  if (atomic_load(&e->done) >= t) return 1;
  if (!(e->flags & BG_EVENT_DISABLE_TIMING)) return 0;
  void* pool = mtl_rt.pool_push();
  int ok = m_u64(e->ev, mtl_S.signaledValue) >= t;
  mtl_rt.pool_pop(pool);
  return ok;
}

int32_t mtl_event_query(void* ev) {
  mtl_event* e = ev;
  uint64_t t = atomic_load(&e->target);
  if (!t || ev_reached(e, t)) return BG_OK;
  return bg_set_error(BG_ERR_NOT_READY, "bg_event_query: not reached yet");
}

int32_t mtl_event_synchronize(void* ev) {
  mtl_event* e = ev;
  uint64_t t = atomic_load(&e->target);
  for (unsigned i = 0; t && !ev_reached(e, t); i++) {
    if (i < 64) continue; /* a short spin, then a backing-off sleep up to 1 ms */
    unsigned shift = i - 64 < 10 ? i - 64 : 10;
    struct timespec ts = {0, (long)(1000u << shift)};
    nanosleep(&ts, NULL);
  }
  return BG_OK;
}

/* Elapsed time between two timing events. GPUEndTime of the command buffers the records ended
 * (GPU clock, sub-microsecond); where the OS gives no GPU time (0), the host time at which the
 * helper thread saw them complete (tens of microseconds of wake-up jitter). */
int32_t mtl_event_elapsed(float* ms, void* a, void* b) {
  mtl_event *ea = a, *eb = b;
  if ((ea->flags | eb->flags) & BG_EVENT_DISABLE_TIMING)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_event_elapsed: an event was created with "
                        "BG_EVENT_DISABLE_TIMING");
  uint64_t ta = atomic_load(&ea->target), tb = atomic_load(&eb->target);
  if (!ta || !tb)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_event_elapsed: an event was never recorded");
  double ga, gb;
  uint64_t ha, hb, va, vb;
  pthread_mutex_lock(&ea->mu);
  va = ea->t_value, ga = ea->t_gpu, ha = ea->t_host;
  pthread_mutex_unlock(&ea->mu);
  pthread_mutex_lock(&eb->mu);
  vb = eb->t_value, gb = eb->t_gpu, hb = eb->t_host;
  pthread_mutex_unlock(&eb->mu);
  if (va != ta || vb != tb)
    return bg_set_error(BG_ERR_NOT_READY, "bg_event_elapsed: an event has not completed");
  if (ga > 0 && gb > 0) *ms = (float)((gb - ga) * 1000.0);
  else *ms = (float)(((double)hb - (double)ha) / 1e6);
  return BG_OK;
}

#endif /* __APPLE__ */
