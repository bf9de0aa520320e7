/*
 * cuda/context.c: entering and leaving the driver. Every entry point makes its device's primary
 * context current for the length of the call (cu_enter / cu_leave behind ENTER), and flushes the
 * releases release.c queued once nothing can block them; a failed driver call becomes a bg status
 * and message here (cu_fail, CALL), naming the call that invalidated a capture begun through bg.
 * Also the two calls nccl.c makes (nccl_api.h).
 *
 * Calls: driver.c, release.c, base.c.
 */
#include "cuda_internal.h"
#include "nccl_api.h"

static void note_capture_failure(bgcu_result rc, const char* call);

/* The one place a failed driver call becomes a bg status and message. */
int32_t cu_fail(bgcu_result rc, const char* call) {
  note_capture_failure(rc, call);
  return bg_set_error(map_cu(rc), "%s: %s (%u): %s", call, cu_err_name(rc), rc, cu_err_text(rc));
}

int32_t cu_fail_at(bgcu_result rc, const char* call, const char* what) {
  note_capture_failure(rc, call);
  return bg_set_error(map_cu(rc), "%s(%s): %s (%u): %s", call, what, cu_err_name(rc), rc,
                      cu_err_text(rc));
}

static _Thread_local struct cu_device* cur_dev;

void cu_leave(cu_guard* g) {
  if (g->pushed) {
    bgcu_context popped = NULL;
    cu.cuCtxPopCurrent_v2(&popped);
  }
  cur_dev = g->prev;
}

int32_t cu_enter(cu_device* d, cu_guard* g) {
  g->prev = cur_dev;
  cur_dev = d;
  bgcu_context cur = NULL;
  if (cu.cuCtxGetCurrent(&cur) != BGCUDA_SUCCESS || cur != d->ctx) {
    if (cu.cuCtxPushCurrent_v2 && cu.cuCtxPopCurrent_v2) {
      CALL(cuCtxPushCurrent_v2, (d->ctx));
      g->pushed = 1;
    } else {
      CALL(cuCtxSetCurrent, (d->ctx));
    }
  }
  /* releases put off while they could have waited forever (see blocked) */
  if (atomic_load_explicit(&d->ndeferred, memory_order_acquire) &&
      !atomic_load_explicit(&d->ncaps, memory_order_relaxed) && !blocked(d))
    flush_deferred(d);
  return BG_OK;
}

/* A failed call with a stream-capture error: every live capture of the entry's device that is now
 * invalidated and has no cause yet records this call as its cause. */
static void note_capture_failure(bgcu_result rc, const char* call) {
  cu_device* d = cur_dev;
  if (!d || rc < 900 || rc > 908 || rc == 901 || !atomic_load_explicit(&d->ncaps, memory_order_relaxed))
    return;
  pthread_mutex_lock(&d->cap_lock);
  for (cu_capture* c = d->caps; c; c = c->next) {
    if (c->why[0]) continue;
    bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
    if (cu.cuStreamIsCapturing(c->origin, &st) == BGCUDA_SUCCESS &&
        st == BGCU_STREAM_CAPTURE_STATUS_INVALIDATED)
      snprintf(c->why, sizeof c->why, "%s (%s)", call, cu_err_name(rc));
  }
  pthread_mutex_unlock(&d->cap_lock);
}

/* ---- for nccl.c (declared in nccl_api.h) ------------------------------------------------------ */
int32_t bgcu_nccl_enter(bg_device* dev, bgcu_nccl_guard* g) {
  cu_guard cg = {0, NULL};
  int32_t rc = cu_enter((cu_device*)dev, &cg);
  g->pushed = cg.pushed;
  g->prev = cg.prev;
  return rc;
}

void bgcu_nccl_leave(bgcu_nccl_guard* g) {
  cu_guard cg = {g->pushed, g->prev};
  cu_leave(&cg);
}

int bgcu_nccl_ordinal(bg_device* dev) { return ((cu_device*)dev)->cudev; }

struct CUstream_st* bgcu_stream_handle(void* s) { return ((cu_stream*)s)->s; }
