/*
 * cpu/event.c: what an event is underneath its entry points (those are stream.c's): references,
 * a record reached, and waiting for one.
 *
 * An event counts records: `rec_seq` is bumped when a record is issued, `done_seq` when a
 * record is reached (the highest wins). Complete means done_seq >= rec_seq, so an event never
 * recorded is complete. A wait captures the rec_seq of its call and waits for done_seq to
 * reach it. Ops hold references to the events they name, so destroying a pending event is fine.
 * Calls no other file of the backend.
 */
#include "cpu.h"


void cpu_event_retain(cpu_event* e) { atomic_fetch_add(&e->refs, 1); }

void cpu_event_release(cpu_event* e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e->capdeps);
  free(e);
}

void cpu_event_complete(cpu_event* e, uint64_t seq) {
  pthread_mutex_lock(&e->mu);
  if (seq > atomic_load(&e->done_seq)) {
    e->ts_ns = bg_now_ns();
    atomic_store_explicit(&e->done_seq, seq, memory_order_release);
  }
  if (atomic_load(&e->waiters) > 0) pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

void cpu_event_wait_seq(cpu_event* e, uint64_t seq) {
  if (atomic_load_explicit(&e->done_seq, memory_order_acquire) >= seq) return;
  uint64_t t0 = bg_now_ns();
  for (unsigned i = 1; atomic_load_explicit(&e->done_seq, memory_order_acquire) < seq; i++) {
    if ((i & 7) == 0) sched_yield(); else cpu_relax();
    if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SYNC_SPIN_NS) break;
  }
  if (atomic_load_explicit(&e->done_seq, memory_order_acquire) >= seq) return;
  pthread_mutex_lock(&e->mu);
  atomic_fetch_add(&e->waiters, 1);
  while (atomic_load(&e->done_seq) < seq) pthread_cond_wait(&e->cv, &e->mu);
  atomic_fetch_sub(&e->waiters, 1);
  pthread_mutex_unlock(&e->mu);
}
