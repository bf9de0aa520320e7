/*
 * cpu/stream.c: streams, events, host functions, and launches (validated and queued here).
 *
 * A stream is one worker thread and an in-order queue (a growable ring of cpu_op under the
 * stream's mutex): enqueue (queue.c) copies the op in and signals the worker only when it
 * sleeps; the worker here takes ops out and has run.c run them. The worker spins briefly when
 * the queue runs dry, then sleeps on a condition variable, so an idle stream costs nothing.
 * `enqueued` and `completed` are counters: a stream is idle when they are equal; synchronize
 * waits for `completed` to reach the `enqueued` it saw.
 *
 * Events: the entry points are here; what an event is underneath (records counted, waits on
 * them) is event.c's. An op on a capturing stream, or on an event recorded in a capture, goes to
 * capture.c instead of the queue.
 *
 * Legacy synchronisation (CUDA's legacy default stream). An op enqueued on the default stream
 * is preceded by an OP_WAIT_STREAM for each blocking stream that has work pending, waiting until
 * that stream has completed what it had enqueued at that moment; an op enqueued on a blocking
 * stream is preceded by one OP_WAIT_STREAM on the default stream, when it has work pending.
 * A wait names work enqueued before the op it guards, so these waits never form a cycle.
 * Non-blocking streams take no part. A wait op references the stream it waits on, so a stream
 * destroyed meanwhile keeps its counters until the wait has run.
 *
 * Calls: pool.c, event.c, queue.c, pool_mem.c, run.c, capture.c, base.c.
 */
#include "cpu.h"

/* ---- the worker ------------------------------------------------------------------------------ */
static void* worker_main(void* arg) {
  cpu_name_thread("bg-stream");
  cpu_stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (s->head == s->tail) {
      if (s->stop) break;
      uint64_t taken = s->head;
      pthread_mutex_unlock(&s->mu);
      uint64_t t0 = bg_now_ns();
      for (unsigned i = 1; atomic_load_explicit(&s->enqueued, memory_order_acquire) == taken; i++) {
        if ((i & 7) == 0) sched_yield(); else cpu_relax();
        if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SPIN_NS) break;
      }
      pthread_mutex_lock(&s->mu);
      while (s->head == s->tail && !s->stop) {
        s->sleeping = 1;
        pthread_cond_wait(&s->cv_work, &s->mu);
        s->sleeping = 0;
      }
      continue;
    }
    /* Take what is queued (up to a batch) under one lock: with a backlog, the worker and the
     * threads enqueuing hand the lock over once per batch rather than once per op. */
    cpu_op batch[CPU_POP_BATCH];
    uint32_t nb = 0;
    while (nb < CPU_POP_BATCH && s->head != s->tail) {
      batch[nb++] = s->q[s->head & (s->qcap - 1)];
      s->head++;
    }
    if (s->space_waiters) pthread_cond_broadcast(&s->cv_space); /* a full queue has room */
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < nb; i++) {
      int notify = batch[i].kind == OP_NOTIFY; /* counted first, called after */
      if (!notify) cpu_op_run(s, &batch[i]);
      cpu_op_release(&batch[i]);
      atomic_fetch_add(&s->completed, 1); /* per op: query and events see each one finish */
      if (atomic_load(&s->waiters) > 0) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv_done);
        pthread_mutex_unlock(&s->mu);
      }
      if (notify) batch[i].u.hf.fn(batch[i].u.hf.user);
    }
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- enqueueing: implicit waits, capture ----------------------------------------------------- */
int32_t cpu_enqueue_raw(cpu_stream* s, cpu_op* op, const char* fn) {
  if (cpu_queue_push(s, op) == 0) return BG_OK;
  cpu_op_abandon(op);
  return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory for the stream queue", fn);
}

/* Queue an OP_WAIT_STREAM on `s` for `on` reaching `target` completed ops; takes over the
 * caller's reference on `on`. */
static int32_t enqueue_wait_stream(cpu_stream* s, cpu_stream* on, uint64_t target, const char* fn) {
  cpu_op w = {.kind = OP_WAIT_STREAM};
  w.u.ws.s = on;
  w.u.ws.target = target;
  return cpu_enqueue_raw(s, &w, fn);
}

/* The implicit waits of the legacy default stream, queued on `s` ahead of an op. */
int32_t cpu_legacy_deps(cpu_stream* s, const char* fn) {
  cpu_device* d = s->dev;
  if (cpu_stream_is_default(s)) {
    int32_t rc = cpu_capture_implicit(d, fn);
    if (rc) return rc;
    if (atomic_load_explicit(&d->nblocking, memory_order_acquire) == 0) return BG_OK;
    cpu_snaps sn;
    if (cpu_snap_streams(d, &sn, 0, 0))
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (uint32_t i = 0; i < sn.n; i++) {
      rc = enqueue_wait_stream(s, sn.v[i].s, sn.v[i].target, fn);
      sn.v[i].s = NULL; /* the op owns the reference (or released it on failure) */
      if (rc) break;
    }
    cpu_snaps_free(&sn);
    return rc;
  }
  if (s->flags & BG_STREAM_NON_BLOCKING) return BG_OK;
  cpu_stream* ds = (cpu_stream*)d->base.default_stream;
  uint64_t target = atomic_load_explicit(&ds->enqueued, memory_order_acquire);
  if (atomic_load_explicit(&ds->completed, memory_order_acquire) >= target) return BG_OK;
  cpu_stream_retain(ds);
  return enqueue_wait_stream(s, ds, target, fn);
}

int32_t cpu_enqueue(cpu_stream* s, cpu_op* op, const char* fn) {
  int32_t rc = cpu_legacy_deps(s, fn);
  if (rc) {
    cpu_op_abandon(op);
    return rc;
  }
  return cpu_enqueue_raw(s, op, fn);
}

int32_t cpu_submit_op(cpu_stream* s, cpu_op* op, const char* fn) {
  if (atomic_load_explicit(&s->cap, memory_order_acquire)) {
    int handled = 0;
    int32_t rc = cpu_capture_add(s, op, fn, &handled);
    if (handled) return rc;
  }
  return cpu_enqueue(s, op, fn);
}

/* ---- streams --------------------------------------------------------------------------------- */
int32_t cpu_stream_new(cpu_device* d, uint32_t flags, int32_t prio, cpu_stream** out) {
  cpu_stream* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  s->qcap = 64;
  s->q = malloc(sizeof(cpu_op) * s->qcap);
  if (!s->q || posix_memalign(&s->scratch, 64, CPU_MAX_SHARED)) {
    free(s->q);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: out of host memory");
  }
  bg_obj_init(s, BG_KIND_STREAM, &d->base);
  s->dev = d;
  s->flags = flags;
  s->prio = prio;
  atomic_init(&s->refs, 1);
  atomic_init(&s->enqueued, 0);
  atomic_init(&s->completed, 0);
  atomic_init(&s->waiters, 0);
  atomic_init(&s->resident, 0);
  atomic_init(&s->cap, NULL);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, NULL);
  pthread_cond_init(&s->cv_space, NULL);
  int err = pthread_create(&s->thread, NULL, worker_main, s);
  if (err) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    pthread_cond_destroy(&s->cv_space);
    bg_obj_kill(s);
    free(s->q);
    free(s->scratch);
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_create: cannot start a worker thread (%s)",
                        strerror(err));
  }
  s->thread_ok = 1;
  cpu_name_started(s->thread, "bg-stream");
  *out = s;
  return BG_OK;
}

void cpu_stream_free(cpu_stream* s) {
  if (!s) return;
  cpu_capture_stream_gone(s);
  bg_obj_kill(s);
  if (s->thread_ok) {
    cpu_stream_wait_idle(s);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
  }
  /* nothing is left queued, but be thorough */
  for (uint64_t i = s->head; i < s->tail; i++) cpu_op_release(&s->q[i & (s->qcap - 1)]);
  free(s->q);
  free(s->D);
  free(s->scratch);
  s->q = NULL;
  s->D = NULL;
  s->scratch = NULL;
  cpu_stream_release(s); /* the struct itself goes with the last wait that names it */
}

int32_t cpu_stream_create(bg_device* dev, uint32_t flags, int32_t prio, void** out) {
  cpu_device* d = (cpu_device*)dev;
  cpu_stream* s = NULL;
  int32_t rc = cpu_stream_new(d, flags, prio, &s);
  if (rc) return rc;
  if (!(flags & BG_STREAM_NON_BLOCKING)) atomic_fetch_add(&d->nblocking, 1);
  pthread_mutex_lock(&d->streams_mu);
  s->next = d->streams;
  if (d->streams) d->streams->prev = s;
  d->streams = s;
  pthread_mutex_unlock(&d->streams_mu);
  *out = s;
  return BG_OK;
}

int32_t cpu_stream_destroy(void* sv) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  if (s->thread_ok && pthread_equal(s->thread, pthread_self()))
    return bg_set_error(BG_ERR_ILLEGAL_STATE,
                        "bg_stream_destroy: called from the stream's own host function");
  pthread_mutex_lock(&d->streams_mu);
  if (s->prev) s->prev->next = s->next;
  else d->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&d->streams_mu);
  if (!(s->flags & BG_STREAM_NON_BLOCKING)) atomic_fetch_sub(&d->nblocking, 1);
  cpu_stream_free(s);
  return BG_OK;
}

/* Synchronizing or querying the default stream covers what an op queued on it now would wait
 * for: its own work and every blocking stream's (CUDA's legacy stream behaves so). */
int32_t cpu_stream_synchronize(void* sv) {
  cpu_stream* s = sv;
  int legacy = cpu_stream_is_default(s);
  int32_t rc = legacy ? cpu_capture_implicit(s->dev, "bg_stream_synchronize")
                      : cpu_capture_guard_stream(s, "bg_stream_synchronize");
  if (rc) return rc;
  if (s->thread_ok && pthread_equal(s->thread, pthread_self()))
    return bg_set_error(BG_ERR_ILLEGAL_STATE,
                        "bg_stream_synchronize: called from the stream's own host function");
  if (legacy) cpu_legacy_wait_host(s->dev);
  else cpu_stream_wait_idle(s);
  cpu_pmem_sync_release(s->dev); /* pools above their release threshold give memory back */
  return BG_OK;
}

static int stream_busy(cpu_stream* s) {
  return atomic_load(&s->completed) < atomic_load(&s->enqueued);
}

int32_t cpu_stream_query(void* sv) {
  cpu_stream* s = sv;
  int legacy = cpu_stream_is_default(s);
  int32_t rc = legacy ? cpu_capture_implicit(s->dev, "bg_stream_query")
                      : cpu_capture_guard_stream(s, "bg_stream_query");
  if (rc) return rc;
  int busy = stream_busy(s);
  if (!busy && legacy && atomic_load(&s->dev->nblocking) > 0) {
    cpu_device* d = s->dev;
    pthread_mutex_lock(&d->streams_mu);
    for (cpu_stream* u = d->streams; u && !busy; u = u->next)
      busy = !(u->flags & BG_STREAM_NON_BLOCKING) && stream_busy(u);
    pthread_mutex_unlock(&d->streams_mu);
  }
  if (!busy) return BG_OK;
  return bg_set_error(BG_ERR_NOT_READY, legacy ? "bg_stream_query: work is still queued on the "
                                                 "default stream or a blocking stream"
                                               : "bg_stream_query: work is still queued");
}

int32_t cpu_memcpy_htod_async(void* s, bg_devptr dst, const void* src, uint64_t n) {
  cpu_op op = {.kind = OP_COPY};
  op.u.cp.dst = (void*)(uintptr_t)dst;
  op.u.cp.src = src;
  op.u.cp.n = n;
  return cpu_submit_op(s, &op, "bg_memcpy_htod_async");
}

int32_t cpu_memcpy_dtoh_async(void* s, void* dst, bg_devptr src, uint64_t n) {
  cpu_op op = {.kind = OP_COPY};
  op.u.cp.dst = dst;
  op.u.cp.src = (const void*)(uintptr_t)src;
  op.u.cp.n = n;
  return cpu_submit_op(s, &op, "bg_memcpy_dtoh_async");
}

int32_t cpu_memcpy_dtod_async(void* s, bg_devptr dst, bg_devptr src, uint64_t n) {
  cpu_op op = {.kind = OP_COPY};
  op.u.cp.dst = (void*)(uintptr_t)dst;
  op.u.cp.src = (const void*)(uintptr_t)src;
  op.u.cp.n = n;
  return cpu_submit_op(s, &op, "bg_memcpy_dtod_async");
}

/* A copy between CPU devices: the same address space, so with peer access a plain copy; without
 * it staged through a host bounce buffer in chunks, as a driver stages through pinned memory
 * (run.c), so the two paths differ as they would on hardware: one pass or two. */
int32_t cpu_memcpy_peer_async(void* s, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                              bg_device* src_dev, uint64_t n, int peer) {
  (void)dst_dev;
  (void)src_dev;
  cpu_op op = {.kind = OP_COPY};
  op.u.cp.dst = (void*)(uintptr_t)dst;
  op.u.cp.src = (const void*)(uintptr_t)src;
  op.u.cp.n = n;
  op.u.cp.staged = !peer;
  return cpu_submit_op(s, &op, "bg_memcpy_peer_async");
}

int32_t cpu_memset_async(void* s, bg_devptr dst, uint32_t pattern, uint32_t esz, uint64_t count) {
  cpu_op op = {.kind = OP_MEMSET};
  op.u.ms.dst = (void*)(uintptr_t)dst;
  op.u.ms.pattern = pattern;
  op.u.ms.esz = esz;
  op.u.ms.count = count;
  return cpu_submit_op(s, &op, "bg_memset_async");
}

int32_t cpu_launch_host_func(void* s, bg_host_fn fn, void* user) {
  cpu_op op = {.kind = OP_HOST};
  op.u.hf.fn = fn;
  op.u.hf.user = user;
  return cpu_submit_op(s, &op, "bg_launch_host_func");
}

/* The worker counts it completed, then calls fn (worker_main): a waiter woken by fn finds the
 * stream idle when nothing was queued after it. A capture could only record it as a host node that
 * every replay calls, which is not what a wait means: refused there. */
int32_t cpu_stream_notify(void* sv, bg_host_fn fn, void* user) {
  cpu_stream* s = sv;
  int32_t rc = cpu_capture_guard_stream(s, "bg_stream_notify");
  if (rc) return rc;
  cpu_op op = {.kind = OP_NOTIFY};
  op.u.hf.fn = fn;
  op.u.hf.user = user;
  return cpu_enqueue(s, &op, "bg_stream_notify");
}

/* ---- events ---------------------------------------------------------------------------------- */
int32_t cpu_event_create(bg_device* dev, uint32_t flags, void** out) {
  cpu_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: out of host memory");
  bg_obj_init(e, BG_KIND_EVENT, dev);
  e->dev = (cpu_device*)dev;
  e->flags = flags;
  atomic_init(&e->refs, 1);
  atomic_init(&e->rec_seq, 0);
  atomic_init(&e->done_seq, 0);
  e->recp = &e->rec_seq;
  e->donep = &e->done_seq;
  e->shm_fd = -1;
  atomic_init(&e->waiters, 0);
  atomic_init(&e->cap_id, 0);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (flags & BG_EVENT_INTERPROCESS) {
    int32_t rc = cpu_event_share(e);
    if (rc) {
      bg_obj_kill(e);
      cpu_event_release(e);
      return rc;
    }
  }
  *out = e;
  return BG_OK;
}

int32_t cpu_event_destroy(void* ev) {
  cpu_event* e = ev;
  bg_obj_kill(e);
  cpu_event_release(e);
  return BG_OK;
}

int32_t cpu_event_record(void* ev, void* sv) {
  cpu_event* e = ev;
  cpu_stream* s = sv;
  if (atomic_load_explicit(&s->cap, memory_order_acquire)) {
    int handled = 0;
    int32_t rc = cpu_capture_record(s, e, &handled);
    if (handled) return rc;
  }
  /* A refused record (the legacy default stream during a global capture) must leave the event as
   * it was: its record number is taken only once the stream's implicit waits are queued. Taken
   * first, the refused record was abandoned, i.e. completed, and its number (newer than the
   * event's pending record) let a wait on that pending record pass before the record ran. */
  int32_t rc = cpu_legacy_deps(s, "bg_event_record");
  if (rc) return rc;
  cpu_op op = {.kind = OP_RECORD};
  uint64_t seq = cpu_event_take_seq(e);
  atomic_store(&e->cap_id, 0);
  cpu_event_retain(e);
  op.u.ev.e = e;
  op.u.ev.seq = seq;
  return cpu_enqueue_raw(s, &op, "bg_event_record");
}

int32_t cpu_stream_wait_event(void* sv, void* ev) {
  cpu_stream* s = sv;
  cpu_event* e = ev;
  if (e->dev != s->dev && (atomic_load(&e->cap_id) || atomic_load_explicit(&s->cap, memory_order_acquire)))
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_stream_wait_event: a capture across cpu devices (the stream or the event is "
                        "captured and they are on different devices)");
  if (atomic_load(&e->cap_id) || atomic_load_explicit(&s->cap, memory_order_acquire)) {
    int handled = 0;
    int32_t rc = cpu_capture_wait(s, e, &handled);
    if (handled) return rc;
  }
  uint64_t seq = atomic_load(e->recp);
  if (seq == 0 || atomic_load(e->donep) >= seq) return BG_OK; /* nothing to wait for */
  int32_t lost = cpu_event_check_peer(e, seq, "bg_stream_wait_event");
  if (lost) return lost;
  cpu_op op = {.kind = OP_WAIT};
  cpu_event_retain(e);
  op.u.ev.e = e;
  op.u.ev.seq = seq;
  return cpu_enqueue(s, &op, "bg_stream_wait_event");
}

int32_t cpu_event_query(void* ev) {
  cpu_event* e = ev;
  int32_t rc = cpu_capture_guard_event(e, "bg_event_query");
  if (rc) return rc;
  uint64_t seq = atomic_load(e->recp);
  if (atomic_load(e->donep) >= seq) return BG_OK;
  rc = cpu_event_check_peer(e, seq, "bg_event_query");
  if (rc) return rc;
  return bg_set_error(BG_ERR_NOT_READY, "bg_event_query: the event's record is not reached yet");
}

int32_t cpu_event_synchronize(void* ev) {
  cpu_event* e = ev;
  int32_t rc = cpu_capture_guard_event(e, "bg_event_synchronize");
  if (rc) return rc;
  return cpu_event_wait_seq(e, atomic_load(e->recp));
}

int32_t cpu_event_elapsed(float* ms, void* av, void* bv) {
  cpu_event* a = av;
  cpu_event* b = bv;
  if ((a->flags | b->flags) & BG_EVENT_DISABLE_TIMING)
    return bg_set_error(BG_ERR_INVALID_HANDLE,
                        "bg_event_elapsed: an event was created with BG_EVENT_DISABLE_TIMING");
  uint64_t ra = atomic_load(a->recp), rb = atomic_load(b->recp);
  if (!ra || !rb)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_event_elapsed: an event was never recorded");
  if (atomic_load(a->donep) < ra || atomic_load(b->donep) < rb)
    return bg_set_error(BG_ERR_NOT_READY, "bg_event_elapsed: an event is not complete yet");
  pthread_mutex_lock(&a->mu);
  uint64_t ta = a->ts_ns;
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_lock(&b->mu);
  uint64_t tb = b->ts_ns;
  pthread_mutex_unlock(&b->mu);
  *ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
  return BG_OK;
}

/* ---- launches: validated, then queued as an OP_KERNEL (pool.c runs it) ----------------------- */
int32_t cpu_check_launch(const char* fn, const uint32_t g[3], const uint32_t b[3],
                         uint32_t shared) {
  uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
  if (b[0] > CPU_MAX_BLOCK_XY || b[1] > CPU_MAX_BLOCK_XY || b[2] > CPU_MAX_BLOCK_Z ||
      threads > CPU_MAX_THREADS)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "%s: block %ux%ux%u exceeds the limits (%d threads; x,y <= %u, z <= %u)",
                        fn, b[0], b[1], b[2], CPU_MAX_THREADS, CPU_MAX_BLOCK_XY, CPU_MAX_BLOCK_Z);
  if (g[0] > CPU_MAX_GRID_X || g[1] > CPU_MAX_GRID_YZ || g[2] > CPU_MAX_GRID_YZ)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "%s: grid %ux%ux%u exceeds the limits (x < 2^31, y,z <= %u)", fn, g[0],
                        g[1], g[2], CPU_MAX_GRID_YZ);
  if ((uint64_t)g[0] * g[1] * g[2] > CPU_MAX_GRID_BLOCKS)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "%s: grid %ux%ux%u has more than 2^32-1 blocks (the cpu backend's limit)",
                        fn, g[0], g[1], g[2]);
  if (shared > CPU_MAX_SHARED)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u bytes of shared memory (max %u)", fn, shared,
                        CPU_MAX_SHARED);
  return BG_OK;
}

int32_t cpu_launch(void* kv, void* s, const uint32_t grid[3], const uint32_t block[3],
                   uint32_t shared, const uint64_t* args, uint32_t nargs) {
  int32_t rc = cpu_check_launch("bg_launch", grid, block, shared);
  if (rc) return rc;
  cpu_op op;
  op.kind = OP_KERNEL;
  op.nargs = nargs;
  op.u.l.k = kv;
  memcpy(op.u.l.grid, grid, sizeof op.u.l.grid);
  memcpy(op.u.l.block, block, sizeof op.u.l.block);
  op.u.l.shared = shared;
  op.u.l.knode = 0;
  op.u.l.heap = NULL;
  if (nargs > CPU_INLINE_ARGS) {
    op.u.l.heap = malloc(8ull * nargs);
    if (!op.u.l.heap) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_launch: out of host memory");
    memcpy(op.u.l.heap, args, 8ull * nargs);
  } else if (nargs) {
    memcpy(op.u.l.inl, args, 8ull * nargs);
  }
  return cpu_submit_op(s, &op, "bg_launch");
}
