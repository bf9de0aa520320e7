/*
 * cuda/capture.c: stream capture begun through bg: the capture records (kept per device, keyed by
 * the driver's capture id) and the kernel nodes launches append to them in capture order, begin,
 * end (the record becomes the graph's kernel node list) and status. A record holds
 * references on its modules.
 *
 * Calls: driver.c, release.c, context.c, base.c.
 */
#include "cuda_internal.h"

void free_capture(cu_capture* c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->n; i++) module_unref(c->mods[i]);
  free(c->nodes);
  free(c->nargs);
  free(c->mods);
  free(c);
}

void detach_capture(cu_device* d, cu_capture* c) {
  pthread_mutex_lock(&d->cap_lock);
  for (cu_capture** p = &d->caps; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      atomic_fetch_sub_explicit(&d->ncaps, 1, memory_order_relaxed);
      break;
    }
  pthread_mutex_unlock(&d->cap_lock);
}

static bgcu_result capture_info(bgcu_stream s, bgcu_enum* st, uint64_t* id,
                                const bgcu_graph_node** deps, size_t* nd, const char** call) {
  if (cu.cuStreamGetCaptureInfo_v3) {
    *call = "cuStreamGetCaptureInfo_v3";
    return cu.cuStreamGetCaptureInfo_v3(s, st, id, NULL, deps, NULL, nd);
  }
  *call = "cuStreamGetCaptureInfo_v2";
  return cu.cuStreamGetCaptureInfo_v2(s, st, id, NULL, deps, nd);
}

/* After a launch on a capturing stream: append the new kernel node to its capture's record. */
int32_t record_kernel_node(cu_device* d, cu_stream* s, cu_kernel* k, uint32_t nargs) {
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  const bgcu_graph_node* deps = NULL;
  size_t nd = 0;
  const char* call;
  bgcu_result r = capture_info(s->s, &st, &id, &deps, &nd, &call);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, call);
  if (st != BGCU_STREAM_CAPTURE_STATUS_ACTIVE || nd == 0 || !deps) return BG_OK;
  int32_t rc = BG_OK;
  pthread_mutex_lock(&d->cap_lock);
  cu_capture* c = d->caps;
  while (c && c->id != id) c = c->next;
  if (c) {
    if (c->n == c->cap) {
      uint32_t ncap = c->cap ? c->cap * 2 : 16;
      bgcu_graph_node* nn = realloc(c->nodes, ncap * sizeof *nn);
      if (nn) c->nodes = nn;
      uint32_t* na = nn ? realloc(c->nargs, ncap * sizeof *na) : NULL;
      if (na) c->nargs = na;
      cu_module** nm = na ? realloc(c->mods, ncap * sizeof *nm) : NULL;
      if (nm) c->mods = nm;
      if (nn && na && nm) c->cap = ncap;
      else rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_launch: out of host memory recording a "
                             "captured kernel node");
    }
    if (rc == BG_OK) {
      c->nodes[c->n] = deps[0];
      c->nargs[c->n] = nargs;
      c->mods[c->n] = k->mod;
      atomic_fetch_add_explicit(&k->mod->refs, 1, memory_order_relaxed);
      c->n++;
    }
  }
  pthread_mutex_unlock(&d->cap_lock);
  return rc;
}

/* ---- capture and graphs ----------------------------------------------------------------------- */
int32_t cu_begin_capture(void* sp, int32_t mode) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  CALL(cuStreamBeginCapture_v2, (s->s, (bgcu_enum)mode));
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  const bgcu_graph_node* deps = NULL;
  size_t nd = 0;
  const char* call;
  int32_t rc = BG_OK;
  cu_capture* c = calloc(1, sizeof *c);
  bgcu_result r = capture_info(s->s, &st, &id, &deps, &nd, &call);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, call);
  else if (!c) rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_begin_capture: out of host memory");
  if (rc != BG_OK) {
    /* Undo the capture so the stream is usable again. */
    bgcu_graph g = NULL;
    if (cu.cuStreamEndCapture(s->s, &g) == BGCUDA_SUCCESS && g) cu.cuGraphDestroy(g);
    free(c);
    return rc;
  }
  c->id = id;
  c->origin = s->s;
  pthread_mutex_lock(&d->cap_lock);
  c->next = d->caps;
  d->caps = c;
  atomic_fetch_add_explicit(&d->ncaps, 1, memory_order_relaxed);
  pthread_mutex_unlock(&d->cap_lock);
  s->cap = c;
  return BG_OK;
}

int32_t cu_end_capture(void* sp, void** out) {
  cu_stream* s = sp;
  cu_device* d = CUDEV(s);
  ENTER(d);
  cu_capture* c = s->cap;
  bgcu_graph g = NULL;
  char why[sizeof c->why];
  why[0] = 0;
  if (c) {
    pthread_mutex_lock(&d->cap_lock);
    memcpy(why, c->why, sizeof why);
    pthread_mutex_unlock(&d->cap_lock);
  }
  bgcu_result r = cu.cuStreamEndCapture(s->s, &g);
  if (r != BGCUDA_SUCCESS) {
    /* A capture that failed to end is over too (invalidated) unless this stream never began it. */
    if (c) {
      bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
      if (cu.cuStreamIsCapturing(s->s, &st) != BGCUDA_SUCCESS ||
          st == BGCU_STREAM_CAPTURE_STATUS_NONE) {
        detach_capture(d, c);
        free_capture(c);
        s->cap = NULL;
      }
    }
    /* Name the call that invalidated the capture, as the CPU backend does. */
    if (r == BGCUDA_ERROR_STREAM_CAPTURE_INVALIDATED && why[0])
      return bg_set_error(map_cu(r), "cuStreamEndCapture: %s (%u): capture invalidated by %s",
                          cu_err_name(r), r, why);
    return cu_fail(r, "cuStreamEndCapture");
  }
  if (c) {
    detach_capture(d, c);
    s->cap = NULL;
  }
  cu_graph* gr = calloc(1, sizeof *gr);
  if (!gr) {
    free_capture(c);
    if (g) cu.cuGraphDestroy(g);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_end_capture: out of host memory");
  }
  gr->g = g;
  atomic_init(&gr->refs, 1);
  gr->mem_nodes = -1; /* a capture may hold stream-ordered allocations: graph.c looks */
  if (c) {
    gr->nk = c->n;
    gr->knodes = c->nodes;
    gr->knargs = c->nargs;
    gr->kmods = c->mods;
    free(c);
  }
  bg_obj_init(gr, BG_KIND_GRAPH, &d->base);
  *out = gr;
  return BG_OK;
}

int32_t cu_capture_status(void* sp, int32_t* out) {
  cu_stream* s = sp;
  ENTER(CUDEV(s));
  bgcu_enum st = BGCU_STREAM_CAPTURE_STATUS_NONE;
  CALL(cuStreamIsCapturing, (s->s, &st));
  *out = (int32_t)st;
  return BG_OK;
}
