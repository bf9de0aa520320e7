/*
 * cuda/release.c: the releases that could wait forever (cuMemFree, cuMemFreeHost, cuModuleUnload,
 * cuIpcCloseMemHandle), queued while they could and done later; the fences that let a queued
 * block be handed out again; the gates behind host functions and stream waits; the list of open
 * devices; a module's last reference. No entry guard,
 * so context.c's entry may flush what is queued here.
 *
 * Calls: driver.c.
 */
#include "cuda_internal.h"

/* ---- releases that could wait forever ----------------------------------------------------------
 * cuMemFree, cuMemFreeHost, cuModuleUnload and cuIpcCloseMemHandle wait for all work on the
 * device. Two kinds of work may never finish while the caller waits:
 *  - a persistent ring kernel (bungpu's bg_ring_persistent, counted in cu_launch until a host
 *    function queued behind it runs) never finishes on its own;
 *  - a stream parked at a TypeScript host function (a wait on a mapped word, or a shim signal's
 *    host function) waits for a JS thread, which may be the very one making the call: dispose(),
 *    a finaliser, the host-function poller, RingKernel.stop()'s polling.
 * The second shows through gates: an event recorded right behind every host function and stream
 * wait issued through bg; a gate not yet passed means a stream may be waiting for a JS thread.
 * While either is possible (blocked), those releases are queued on the device instead and done by
 * the first entry that finds neither (cu_enter), so no release can wait forever. Queued device
 * memory is not lost meanwhile: each queued free records a fence (an event on the legacy stream
 * and on each stream created on the device, but those with a resident kernel), and cu_mem_alloc
 * hands a queued block of about the size asked for out again once its fence has passed: a
 * long-lived ring kernel does not grow memory. A module is also kept loaded while a capture
 * record, graph or exec holds one of its kernel nodes, and its unload is put off during a capture
 * begun through bg (cuModuleUnload would invalidate it). Limits: only streams bg created are
 * fenced (another library's streams on the context are not), and a gate on any open device
 * counts (a stream may wait on another device's events). */

pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
cu_device* devs; /* open devices (next_open), for blocked() */

/* Unload the module and free it with its kernels; the unload's status. */
static bgcu_result module_release_now(cu_module* m) {
  bgcu_result r = cu.cuModuleUnload(m->m);
  for (cu_kernel* k = m->kernels; k;) {
    cu_kernel* next = k->next;
    free(k);
    k = next;
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
  return r;
}

static void fence_drop(cu_deferred* e) {
  for (uint32_t i = 0; i < e->nfence; i++) cu.cuEventDestroy_v2(e->fence[i]);
  free(e->fence);
  e->fence = NULL;
  e->nfence = 0;
}

/* Whether the work queued before the free has finished (its events are dropped once it has). */
static int fence_passed(cu_deferred* e) {
  for (uint32_t i = 0; i < e->nfence; i++)
    if (cu.cuEventQuery(e->fence[i]) != BGCUDA_SUCCESS) return 0;
  fence_drop(e);
  return 1;
}

static int fence_one(cu_deferred* e, bgcu_stream s) {
  bgcu_event ev = NULL;
  if (cu.cuEventCreate(&ev, BGCU_EVENT_DISABLE_TIMING) != BGCUDA_SUCCESS) return 0;
  if (cu.cuEventRecord(ev, s) != BGCUDA_SUCCESS) {
    cu.cuEventDestroy_v2(ev);
    return 0;
  }
  e->fence[e->nfence++] = ev;
  return 1;
}

/* The fence of a queued free of `bytes` of device memory (the context current): the block may be
 * handed out again once it has passed. None (never handed out) while a capture is open, since work
 * queued on a capturing stream before its capture began cannot be fenced, or if an event fails. */
static void fence_record(cu_device* d, cu_deferred* e, uint64_t bytes) {
  if (atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0) return;
  pthread_mutex_lock(&d->str_lock);
  uint32_t n = 1;
  for (cu_stream* s = d->streams; s; s = s->next) n++;
  e->fence = calloc(n, sizeof *e->fence);
  int ok = e->fence && fence_one(e, NULL); /* the legacy stream: also blocking streams' work */
  for (cu_stream* s = d->streams; ok && s; s = s->next)
    if (!atomic_load_explicit(&s->resident, memory_order_acquire)) ok = fence_one(e, s->s);
  pthread_mutex_unlock(&d->str_lock);
  if (ok) e->bytes = bytes;
  else fence_drop(e);
}

/* Queue a release (the context current); 0 if it could not be queued. */
int defer_release(cu_device* d, int kind, bg_devptr dptr, void* ptr) {
  cu_deferred* e = calloc(1, sizeof *e);
  if (!e) return 0;
  e->kind = kind;
  e->dptr = dptr;
  e->ptr = ptr;
  if (kind == 0 && cu.cuMemGetAddressRange_v2) {
    bgcu_deviceptr base = 0;
    size_t size = 0;
    if (cu.cuMemGetAddressRange_v2(&base, &size, dptr) == BGCUDA_SUCCESS && base == dptr)
      fence_record(d, e, size);
  }
  pthread_mutex_lock(&d->def_lock);
  e->next = d->deferred;
  d->deferred = e;
  atomic_fetch_add_explicit(&d->ndeferred, 1, memory_order_release);
  pthread_mutex_unlock(&d->def_lock);
  return 1;
}

/* A queued block of `bytes` up to a quarter more (any size if `loose`) whose fence has passed (the
 * smallest), taken off the queue; 0 if none. */
bg_devptr reuse_deferred(cu_device* d, uint64_t bytes, int loose) {
  if (!atomic_load_explicit(&d->ndeferred, memory_order_acquire)) return 0;
  bg_devptr out = 0;
  pthread_mutex_lock(&d->def_lock);
  cu_deferred** best = NULL;
  for (cu_deferred** p = &d->deferred; *p; p = &(*p)->next) {
    cu_deferred* e = *p;
    if (e->kind != 0 || e->bytes < bytes || (!loose && e->bytes - bytes > bytes / 4)) continue;
    if ((best && (*best)->bytes <= e->bytes) || !fence_passed(e)) continue;
    best = p;
  }
  if (best) {
    cu_deferred* e = *best;
    *best = e->next;
    atomic_fetch_sub_explicit(&d->ndeferred, 1, memory_order_relaxed);
    out = e->dptr;
    free(e);
  }
  pthread_mutex_unlock(&d->def_lock);
  return out;
}

/* cuIpcCloseMemHandle after the context's work, so queued work reading the mapping finishes. */
bgcu_result ipc_close_now(bg_devptr p) {
  bgcu_result r = cu.cuCtxSynchronize();
  bgcu_result c = cu.cuIpcCloseMemHandle(p);
  return r != BGCUDA_SUCCESS ? r : c;
}

/* With the device's context current, and nothing blocked. Failures have no caller left. */
void flush_deferred(cu_device* d) {
  pthread_mutex_lock(&d->def_lock);
  cu_deferred* e = d->deferred;
  d->deferred = NULL;
  atomic_store_explicit(&d->ndeferred, 0, memory_order_relaxed);
  pthread_mutex_unlock(&d->def_lock);
  while (e) {
    cu_deferred* next = e->next;
    fence_drop(e);
    if (e->kind == 0) cu.cuMemFree_v2(e->dptr);
    else if (e->kind == 1) cu.cuMemFreeHost(e->ptr);
    else if (e->kind == 2) (void)module_release_now(e->ptr);
    else ipc_close_now(e->dptr);
    free(e);
    e = next;
  }
}

int is_resident(cu_device* d) {
  return atomic_load_explicit(&d->resident, memory_order_acquire) > 0;
}

/* Behind a host function or a stream wait just issued on `s` (the context current): a gate. Not
 * on a capturing stream (its work runs when a graph is launched). The legacy stream (s->s NULL)
 * is never capturing, and the call just issued on it succeeded, so no capture forbids using it
 * now (a blocking stream's capture would have refused that call, 906): it gets its gate during a
 * capture too. (It used not to, and a free after the capture ended, cuMemFree, then waited
 * forever behind a TypeScript host function on the legacy stream: the fuzzer on the simulator,
 * FUZZ_BACKEND=cuda seed 2; test/hostfn_capture.test.ts.) */
void gate_add(cu_device* d, cu_stream* s) {
  if (s->s && atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0) {
    bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
    if (cu.cuStreamIsCapturing(s->s, &st) != BGCUDA_SUCCESS ||
        st != BGCU_STREAM_CAPTURE_STATUS_NONE)
      return;
  }
  pthread_mutex_lock(&d->gate_lock);
  cu_gate* g = d->spare;
  if (g) d->spare = g->next;
  pthread_mutex_unlock(&d->gate_lock);
  if (!g) {
    g = calloc(1, sizeof *g);
    if (!g) return;
    if (cu.cuEventCreate(&g->e, BGCU_EVENT_DISABLE_TIMING) != BGCUDA_SUCCESS) {
      free(g);
      return;
    }
  }
  int recorded = cu.cuEventRecord(g->e, s->s) == BGCUDA_SUCCESS;
  pthread_mutex_lock(&d->gate_lock);
  if (recorded) {
    g->next = d->gates;
    d->gates = g;
    atomic_fetch_add_explicit(&d->ngates, 1, memory_order_release);
  } else {
    g->next = d->spare;
    d->spare = g;
  }
  pthread_mutex_unlock(&d->gate_lock);
}

/* Whether a gate of `d` has not been passed yet; passed ones go back to the spares. A failed
 * query (a sticky error: the streams run nothing more) counts as passed. */
static int gates_open(cu_device* d) {
  if (!atomic_load_explicit(&d->ngates, memory_order_acquire)) return 0;
  pthread_mutex_lock(&d->gate_lock);
  for (cu_gate** p = &d->gates; *p;) {
    cu_gate* g = *p;
    if (cu.cuEventQuery(g->e) == BGCUDA_ERROR_NOT_READY) {
      p = &g->next;
      continue;
    }
    *p = g->next;
    g->next = d->spare;
    d->spare = g;
    atomic_fetch_sub_explicit(&d->ngates, 1, memory_order_relaxed);
  }
  int open = d->gates != NULL;
  pthread_mutex_unlock(&d->gate_lock);
  return open;
}

/* Could a release that waits for the device's work wait forever now? A resident persistent kernel
 * on its context (through any device handle), or a gate of any open device not yet passed. */
int blocked(cu_device* d) {
  if (is_resident(d)) return 1;
  int b = 0;
  pthread_mutex_lock(&devs_lock);
  for (cu_device* o = devs; o && !b; o = o->next_open)
    b = (o->ctx == d->ctx && is_resident(o)) || gates_open(o);
  pthread_mutex_unlock(&devs_lock);
  return b;
}

/* Drop a reference; the last one unloads (now, or once nothing is blocked and no capture is
 * open). Returns the unload's status when it happened now. */
bgcu_result module_unref(cu_module* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return BGCUDA_SUCCESS;
  cu_device* d = m->dev;
  if ((atomic_load_explicit(&d->ncaps, memory_order_relaxed) > 0 || blocked(d)) &&
      defer_release(d, 2, 0, m))
    return BGCUDA_SUCCESS;
  return module_release_now(m);
}
