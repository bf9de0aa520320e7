/*
 * cpu/queue.c: a stream's queue seen from below the worker: putting an op in it, waiting for its
 * ops to complete, the stream's references; snapshots of many streams and waiting for them; and
 * frees deferred until the work queued before them has run (cpu_defer), which queue an
 * OP_RELEASE on every busy stream (cpu_defer_memory: a block of hostmem.c's). It knows no op but
 * OP_RELEASE: the worker that runs the ops is stream.c's, what an op does is run.c's.
 *
 * Calls: hostmem.c, base.c.
 */
#include "cpu.h"

/* ---- the queue ------------------------------------------------------------------------------- */
int cpu_queue_push(cpu_stream* s, const cpu_op* op) {
  pthread_mutex_lock(&s->mu);
  while (s->tail - s->head == s->qcap) {
    if (s->qcap >= CPU_QUEUE_MAX) {
      s->space_waiters++;
      pthread_cond_wait(&s->cv_space, &s->mu);
      s->space_waiters--;
      continue;
    }
    uint32_t ncap = s->qcap * 2;
    cpu_op* nq = malloc(sizeof(cpu_op) * ncap);
    if (!nq) {
      pthread_mutex_unlock(&s->mu);
      return -1;
    }
    for (uint64_t i = s->head; i < s->tail; i++) nq[i & (ncap - 1)] = s->q[i & (s->qcap - 1)];
    free(s->q);
    s->q = nq;
    s->qcap = ncap;
  }
  s->q[s->tail & (s->qcap - 1)] = *op;
  s->tail++;
  atomic_fetch_add_explicit(&s->enqueued, 1, memory_order_release);
  if (s->sleeping) pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* ---- waiting for a stream, and its references ------------------------------------------------ */
void cpu_stream_wait_idle(cpu_stream* s) { cpu_stream_wait_count(s, atomic_load(&s->enqueued)); }

void cpu_stream_wait_count(cpu_stream* s, uint64_t target) {
  if (atomic_load(&s->completed) >= target) return;
  uint64_t t0 = bg_now_ns();
  for (unsigned i = 1; atomic_load(&s->completed) < target; i++) {
    if ((i & 7) == 0) sched_yield(); else cpu_relax();
    if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SYNC_SPIN_NS) break;
  }
  if (atomic_load(&s->completed) >= target) return;
  pthread_mutex_lock(&s->mu);
  atomic_fetch_add(&s->waiters, 1);
  while (atomic_load(&s->completed) < target) pthread_cond_wait(&s->cv_done, &s->mu);
  atomic_fetch_sub(&s->waiters, 1);
  pthread_mutex_unlock(&s->mu);
}

void cpu_stream_retain(cpu_stream* s) { atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed); }

void cpu_stream_release(cpu_stream* s) {
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_done);
  pthread_cond_destroy(&s->cv_space);
  free(s);
}

/* ---- snapshots of streams, and waiting for them ---------------------------------------------- */
static int snap_push(cpu_snaps* sn, cpu_stream* s, uint64_t target) {
  if (sn->n == sn->cap) {
    uint32_t nc = sn->cap * 2;
    cpu_snap* nv = malloc(nc * sizeof(cpu_snap));
    if (!nv) return -1;
    memcpy(nv, sn->v, sn->n * sizeof(cpu_snap));
    if (sn->v != sn->local) free(sn->v);
    sn->v = nv;
    sn->cap = nc;
  }
  cpu_stream_retain(s);
  sn->v[sn->n].s = s;
  sn->v[sn->n].target = target;
  sn->n++;
  return 0;
}

/* Adds `s` when it has work pending. */
static int snap_add(cpu_snaps* sn, cpu_stream* s) {
  uint64_t target = atomic_load_explicit(&s->enqueued, memory_order_acquire);
  if (atomic_load_explicit(&s->completed, memory_order_acquire) >= target) return 0;
  return snap_push(sn, s, target);
}

int cpu_snap_streams(cpu_device* d, cpu_snaps* sn, int with_default, int all) {
  sn->v = sn->local;
  sn->n = 0;
  sn->cap = (uint32_t)(sizeof sn->local / sizeof sn->local[0]);
  if (with_default && snap_add(sn, (cpu_stream*)d->base.default_stream)) return -1;
  int bad = 0;
  pthread_mutex_lock(&d->streams_mu);
  for (cpu_stream* s = d->streams; s && !bad; s = s->next)
    if (all || !(s->flags & BG_STREAM_NON_BLOCKING)) bad = snap_add(sn, s);
  pthread_mutex_unlock(&d->streams_mu);
  if (bad) {
    cpu_snaps_free(sn);
    return -1;
  }
  return 0;
}

void cpu_snaps_wait(cpu_snaps* sn) {
  pthread_t self = pthread_self();
  for (uint32_t i = 0; i < sn->n; i++) {
    cpu_stream* s = sn->v[i].s;
    if (s && !(s->thread_ok && pthread_equal(s->thread, self))) cpu_stream_wait_count(s, sn->v[i].target);
  }
}

void cpu_snaps_free(cpu_snaps* sn) {
  for (uint32_t i = 0; i < sn->n; i++)
    if (sn->v[i].s) cpu_stream_release(sn->v[i].s);
  if (sn->v != sn->local) free(sn->v);
  sn->v = sn->local;
  sn->n = 0;
}

void cpu_legacy_wait_host(cpu_device* d) {
  cpu_snaps sn;
  if (cpu_snap_streams(d, &sn, 1, 0)) { /* out of memory: wait stream by stream instead */
    cpu_device_wait_all(d);
    return;
  }
  cpu_snaps_wait(&sn);
  cpu_snaps_free(&sn);
}

/* ---- waiting for every stream, and frees deferred until the work queued before them ran ------ */
void cpu_device_wait_all(cpu_device* d) {
  /* Wait on a snapshot, not under streams_mu: a host function on a stream waited for may
   * enqueue on the default stream, which takes streams_mu. */
  cpu_snaps sn;
  if (cpu_snap_streams(d, &sn, 1, 1) == 0) {
    cpu_snaps_wait(&sn);
    cpu_snaps_free(&sn);
    return;
  }
  pthread_t self = pthread_self(); /* out of memory: the old way, under the lock */
  cpu_stream* ds = (cpu_stream*)d->base.default_stream;
  if (!(ds->thread_ok && pthread_equal(ds->thread, self))) cpu_stream_wait_idle(ds);
  pthread_mutex_lock(&d->streams_mu);
  for (cpu_stream* s = d->streams; s; s = s->next)
    if (!(s->thread_ok && pthread_equal(s->thread, self))) cpu_stream_wait_idle(s);
  pthread_mutex_unlock(&d->streams_mu);
}

void cpu_deferred_release(cpu_deferred* df) {
  if (atomic_fetch_sub_explicit(&df->refs, 1, memory_order_acq_rel) != 1) return;
  if (df->fn) df->fn(df->arg);
  else cpu_memory_free(df->arg, df->bytes);
  free(df);
}

static void defer_on(cpu_stream* s, cpu_deferred* df) {
  if (atomic_load(&s->completed) >= atomic_load(&s->enqueued)) return; /* idle */
  /* Running a persistent ring kernel with nothing queued behind it: that kernel never ends on its
   * own, so a release queued here would wait until it is stopped (and a stream of frees would
   * fill the queue and block the caller). What it uses (its rings, state and module) bungpu keeps
   * until it has exited; nothing queued before this free is left to run on the stream. */
  if (atomic_load_explicit(&s->resident, memory_order_acquire) &&
      atomic_load(&s->enqueued) - atomic_load(&s->completed) == 1)
    return;
  atomic_fetch_add(&df->refs, 1);
  cpu_op op = {.kind = OP_RELEASE};
  op.u.rel.def = df;
  /* straight into the queue: a capturing stream's queued work counts too, and no implicit
   * waits go in front of it (cpu_defer holds streams_mu) */
  if (cpu_queue_push(s, &op)) { /* out of memory for the queue: wait for the stream instead */
    cpu_deferred_release(df);
    bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_free: out of host memory for the stream queue");
    cpu_stream_wait_idle(s);
  }
}

static void defer_sized(cpu_device* d, void (*fn)(void*), void* arg, uint64_t bytes) {
  cpu_deferred* df = malloc(sizeof *df);
  if (!df) { /* out of memory: fall back to waiting */
    cpu_device_wait_all(d);
    if (fn) fn(arg);
    else cpu_memory_free(arg, bytes);
    return;
  }
  atomic_init(&df->refs, 1);
  df->fn = fn;
  df->arg = arg;
  df->bytes = bytes;
  pthread_mutex_lock(&d->streams_mu);
  defer_on((cpu_stream*)d->base.default_stream, df);
  for (cpu_stream* s = d->streams; s; s = s->next) defer_on(s, df);
  pthread_mutex_unlock(&d->streams_mu);
  cpu_deferred_release(df);
}

void cpu_defer(cpu_device* d, void (*fn)(void*), void* arg) { defer_sized(d, fn, arg, 0); }

void cpu_defer_memory(cpu_device* d, void* p, uint64_t bytes) { defer_sized(d, NULL, p, bytes); }
