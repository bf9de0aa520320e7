/*
 * cpu/capture.c: stream capture: what a stream does with an op, an event record or an event
 * wait while it captures (cpu_capture_add, _record, _wait), the guards that refuse or invalidate
 * by CaptureMode, begin, end (giving a graph of the captured nodes) and status. Below stream.c,
 * which asks it at enqueue; a captured kernel node holds its
 * module.
 *
 * A capture owns a list of nodes (each a cpu_op plus the indices of the nodes it depends on).
 * Every stream in the capture has a dependency set D: its next node depends on D, then D
 * becomes that node. Nodes are created in issue order and only ever depend on earlier
 * nodes, so creation order is a topological order and an exec replays nodes in that order.
 * Recording an event on a capturing stream makes a record node and marks the event as captured
 * (capture id, node, and a copy of D). Waiting on a captured event joins the waiting stream to
 * the capture (D := the event's D) or merges (D := D ∪ the event's D), and turns the record node
 * into a pure dependency that the exec skips. A capture ends on its origin stream; it is
 * unjoined when some other stream's D is not among the origin's ancestors.
 *
 * Illegal calls (cpu_capture_guard*) invalidate captures by mode: Global for any thread,
 * ThreadLocal for the thread that began it, Relaxed never; a call on the capturing stream or
 * captured event itself always does. All state is under the device's cap_mu.
 *
 * One file over 600 lines: every part reads and writes the same state under that one lock (the
 * node list, each stream's D, the captured events' marks), and the thread-exit watch ends
 * captures the same way end_capture does.
 *
 * Calls: event.c, pool_mem.c, module.c, run.c, base.c.
 */
#include "cpu.h"

static const char* mode_name(int32_t m) {
  switch (m) {
    case BG_CAPTURE_MODE_GLOBAL: return "Global";
    case BG_CAPTURE_MODE_THREAD_LOCAL: return "ThreadLocal";
    case BG_CAPTURE_MODE_RELAXED: return "Relaxed";
  }
  return "unknown";
}

static cpu_capture* find_capture(cpu_device* d, uint64_t id) {
  for (cpu_capture* c = d->caps; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static void invalidate(cpu_capture* c, const char* fn, const char* extra) {
  if (c->invalid) return;
  c->invalid = 1;
  snprintf(c->why, sizeof c->why, "%s (mode %s%s)", fn, mode_name(c->mode), extra ? extra : "");
}

static void node_release(cpu_node* n) {
  if (n->op.kind == OP_KERNEL && n->op.u.l.k) cpu_module_unhold(n->op.u.l.k->mod);
  cpu_op_release(&n->op);
  free(n->deps);
  n->deps = NULL;
}

void cpu_nodes_free(cpu_node* nodes, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) node_release(&nodes[i]);
  free(nodes);
}

/* Take every stream out of capture and free the capture (its nodes unless `keep_nodes`).
 * Under cap_mu. */
static void capture_end(cpu_device* d, cpu_capture* c, int keep_nodes) {
  for (uint32_t i = 0; i < c->nstreams; i++) {
    cpu_stream* s = c->streams[i];
    free(s->D);
    s->D = NULL;
    s->nD = s->cD = 0;
    atomic_store_explicit(&s->cap, NULL, memory_order_release);
  }
  cpu_capture** pp = &d->caps;
  while (*pp && *pp != c) pp = &(*pp)->next;
  if (*pp) *pp = c->next;
  atomic_fetch_sub(&d->ncaps, 1);
  if (!keep_nodes) cpu_nodes_free(c->nodes, c->n);
  cpu_gmem_release(c->gmem); /* NULL when its graph took it */
  free(c->streams);
  free(c);
}

/* ---- captures of threads that exit ------------------------------------------------------------
 * A thread (a Worker that is terminated, say) can exit with a capture open. In Global mode that
 * capture would refuse every other thread's allocation for the rest of the process, and no one
 * else may end it. A thread-specific key's destructor runs as the thread exits: it discards the
 * Global and ThreadLocal captures the thread began, on every device still open (a Relaxed
 * capture may be ended from any thread, and refuses nothing, so it is left to its owner). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static cpu_device** reg; /* devices on which a capture was begun, until they close */
static size_t nreg, creg;
static pthread_key_t exit_key;
static int exit_key_ok;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void thread_exiting(void* unused) {
  (void)unused;
  pthread_t self = pthread_self();
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < nreg; i++) {
    cpu_device* d = reg[i];
    pthread_mutex_lock(&d->cap_mu);
    cpu_capture** pp = &d->caps;
    while (*pp) {
      cpu_capture* c = *pp;
      if (c->mode != BG_CAPTURE_MODE_RELAXED && pthread_equal(c->thread, self))
        capture_end(d, c, 0); /* unlinks c: *pp is now the next one */
      else
        pp = &c->next;
    }
    pthread_mutex_unlock(&d->cap_mu);
  }
  pthread_mutex_unlock(&reg_mu);
}

static void exit_key_init(void) { exit_key_ok = pthread_key_create(&exit_key, thread_exiting) == 0; }

/* The calling thread begins a capture on d: have its exit end it. */
static void watch_thread(cpu_device* d) {
  pthread_once(&exit_once, exit_key_init);
  if (!exit_key_ok) return;
  pthread_mutex_lock(&reg_mu);
  size_t i = 0;
  while (i < nreg && reg[i] != d) i++;
  if (i == nreg) {
    if (nreg == creg) {
      size_t nc = creg ? 2 * creg : 8;
      cpu_device** nr = realloc(reg, nc * sizeof *nr);
      if (!nr) {
        pthread_mutex_unlock(&reg_mu);
        return; /* out of memory: the capture just is not watched */
      }
      reg = nr;
      creg = nc;
    }
    reg[nreg++] = d;
  }
  pthread_mutex_unlock(&reg_mu);
  if (!pthread_getspecific(exit_key)) pthread_setspecific(exit_key, (void*)1);
}

static void unwatch_device(cpu_device* d) {
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < nreg; i++)
    if (reg[i] == d) {
      reg[i] = reg[--nreg];
      break;
    }
  pthread_mutex_unlock(&reg_mu);
}

void cpu_capture_free_all(cpu_device* d) {
  unwatch_device(d);
  pthread_mutex_lock(&d->cap_mu);
  while (d->caps) capture_end(d, d->caps, 0);
  pthread_mutex_unlock(&d->cap_mu);
}

void cpu_capture_stream_gone(cpu_stream* s) {
  if (!atomic_load_explicit(&s->cap, memory_order_acquire)) return;
  cpu_device* d = s->dev;
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* c = atomic_load(&s->cap);
  if (c) {
    if (c->origin == s) {
      capture_end(d, c, 0);
    } else {
      for (uint32_t i = 0; i < c->nstreams; i++)
        if (c->streams[i] == s) {
          c->streams[i] = c->streams[--c->nstreams];
          break;
        }
      invalidate(c, "bg_stream_destroy", ", a joined stream was destroyed");
      free(s->D);
      s->D = NULL;
      s->nD = s->cD = 0;
      atomic_store(&s->cap, NULL);
    }
  }
  pthread_mutex_unlock(&d->cap_mu);
}

/* ---- guards ---------------------------------------------------------------------------------- */
int32_t cpu_capture_guard(cpu_device* d, const char* fn) {
  if (atomic_load_explicit(&d->ncaps, memory_order_acquire) == 0) return BG_OK;
  pthread_t self = pthread_self();
  const char* mode = NULL;
  int same = 0;
  pthread_mutex_lock(&d->cap_mu);
  for (cpu_capture* c = d->caps; c; c = c->next) {
    int mine = pthread_equal(c->thread, self) != 0;
    int hit = c->mode == BG_CAPTURE_MODE_GLOBAL || (c->mode == BG_CAPTURE_MODE_THREAD_LOCAL && mine);
    if (!hit) continue;
    invalidate(c, fn, NULL);
    if (!mode) {
      mode = mode_name(c->mode);
      same = mine;
    }
  }
  pthread_mutex_unlock(&d->cap_mu);
  if (!mode) return BG_OK;
  return bg_set_error(BG_ERR_STREAM_CAPTURE_UNSUPPORTED,
                      "%s: not permitted while stream capture is active (capture mode %s, begun on "
                      "%s thread); the capture is invalidated",
                      fn, mode, same ? "this" : "another");
}

/* The capture `s` records into, returned with the device's cap_mu held; NULL (the lock not held)
 * when `s` is not capturing. */
int32_t cpu_capture_guard_stream(cpu_stream* s, const char* fn) {
  if (!atomic_load_explicit(&s->cap, memory_order_acquire)) return BG_OK;
  cpu_device* d = s->dev;
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* c = atomic_load(&s->cap);
  int32_t rc = BG_OK;
  if (c) {
    if (c->invalid) {
      rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                        "%s: the stream's capture was invalidated by %s", fn, c->why);
    } else {
      invalidate(c, fn, ", on the capturing stream");
      rc = bg_set_error(BG_ERR_STREAM_CAPTURE_UNSUPPORTED,
                        "%s: not permitted on a capturing stream (capture mode %s); the capture is "
                        "invalidated",
                        fn, mode_name(c->mode));
    }
  }
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

int32_t cpu_capture_guard_event(cpu_event* e, const char* fn) {
  uint64_t id = atomic_load(&e->cap_id);
  if (!id) return BG_OK;
  cpu_device* d = e->dev;
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* c = find_capture(d, id);
  int32_t rc = BG_OK;
  if (!c) {
    uint64_t expect = id;
    atomic_compare_exchange_strong(&e->cap_id, &expect, 0);
  } else {
    invalidate(c, fn, ", on a captured event");
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_UNSUPPORTED,
                      "%s: not permitted on an event recorded in an active capture (capture mode "
                      "%s); the capture is invalidated",
                      fn, mode_name(c->mode));
  }
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

/* The legacy default stream cannot be used while a blocking stream captures: its work would
 * depend on the capture (CUDA: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). Whatever the mode and the
 * thread, the capture is invalidated. A capture made only of non-blocking streams is untouched. */
int32_t cpu_capture_implicit(cpu_device* d, const char* fn) {
  if (atomic_load_explicit(&d->ncaps, memory_order_acquire) == 0) return BG_OK;
  int hit = 0;
  pthread_mutex_lock(&d->cap_mu);
  for (cpu_capture* c = d->caps; c; c = c->next)
    for (uint32_t i = 0; i < c->nstreams; i++)
      if (cpu_stream_blocking(c->streams[i])) {
        invalidate(c, fn, ", the default stream used while a blocking stream captures");
        hit = 1;
        break;
      }
  pthread_mutex_unlock(&d->cap_mu);
  if (!hit) return BG_OK;
  return bg_set_error(BG_ERR_STREAM_CAPTURE_IMPLICIT,
                      "%s: the device's default stream cannot be used while a blocking stream "
                      "(one created without the non-blocking flag) is capturing: it would depend "
                      "on the capture; the capture is invalidated",
                      fn);
}

/* ---- building the node list (under cap_mu) --------------------------------------------------- */
static int set_push(uint32_t** a, uint32_t* n, uint32_t* cap, uint32_t v) {
  for (uint32_t i = 0; i < *n; i++)
    if ((*a)[i] == v) return 0;
  if (*n == *cap) {
    uint32_t nc = *cap ? *cap * 2 : 4;
    uint32_t* na = realloc(*a, nc * sizeof(uint32_t));
    if (!na) return -1;
    *a = na;
    *cap = nc;
  }
  (*a)[(*n)++] = v;
  return 0;
}

static uint32_t* dup_u32(const uint32_t* a, uint32_t n, int* oom) {
  *oom = 0;
  if (!n) return NULL;
  uint32_t* r = malloc(n * sizeof(uint32_t));
  if (!r) {
    *oom = 1;
    return NULL;
  }
  memcpy(r, a, n * sizeof(uint32_t));
  return r;
}

/* Append `op` as a node depending on s->D (then, when `advance`, s->D := {node}); takes
 * ownership of op on success. */
static int32_t add_node(cpu_capture* c, cpu_stream* s, cpu_op* op, int advance, uint32_t* out_idx,
                        const char* fn) {
  if (c->n == c->cap) {
    uint32_t nc = c->cap ? c->cap * 2 : 16;
    cpu_node* nn = realloc(c->nodes, nc * sizeof(cpu_node));
    if (!nn) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory for the capture", fn);
    c->nodes = nn;
    c->cap = nc;
  }
  if (advance && s->cD < 1) {
    uint32_t* nd = realloc(s->D, 4 * sizeof(uint32_t));
    if (!nd) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory for the capture", fn);
    s->D = nd;
    s->cD = 4;
  }
  int oom = 0;
  uint32_t ndeps = s->nD;
  uint32_t* deps = dup_u32(s->D, ndeps, &oom);
  if (oom) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory for the capture", fn);
  uint32_t idx = c->n;
  if (advance) {
    s->D[0] = idx;
    s->nD = 1;
  }
  cpu_node* nd = &c->nodes[idx];
  nd->op = *op;
  if (op->kind == OP_KERNEL && op->u.l.k) cpu_module_hold(op->u.l.k->mod); /* node_release drops it */
  nd->deps = deps;
  nd->ndeps = ndeps;
  nd->internal = 0;
  c->n++;
  if (out_idx) *out_idx = idx;
  return BG_OK;
}

int32_t cpu_capture_add(cpu_stream* s, cpu_op* op, const char* fn, int* handled) {
  cpu_device* d = s->dev;
  cpu_capture* c = cpu_capture_lock(s);
  if (!c) {
    *handled = 0;
    return BG_OK;
  }
  *handled = 1;
  int32_t rc;
  if (c->invalid) {
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                      "%s: the stream's capture was invalidated by %s", fn, c->why);
  } else {
    rc = add_node(c, s, op, 1, NULL, fn);
  }
  pthread_mutex_unlock(&d->cap_mu);
  if (rc) cpu_op_release(op);
  return rc;
}

int32_t cpu_capture_record(cpu_stream* s, cpu_event* e, int* handled) {
  cpu_device* d = s->dev;
  cpu_capture* c = cpu_capture_lock(s);
  if (!c) {
    *handled = 0;
    return BG_OK;
  }
  *handled = 1;
  int32_t rc = BG_OK;
  if (c->invalid) {
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                      "bg_event_record: the stream's capture was invalidated by %s", c->why);
    goto out;
  }
  int oom = 0;
  uint32_t* capdeps = dup_u32(s->D, s->nD, &oom);
  if (oom) {
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_record: out of host memory for the capture");
    goto out;
  }
  cpu_op op = {.kind = OP_RECORD};
  op.u.ev.e = e;
  op.u.ev.seq = 0;
  uint32_t idx = 0;
  rc = add_node(c, s, &op, 0, &idx, "bg_event_record");
  if (rc) {
    free(capdeps);
    goto out;
  }
  cpu_event_retain(e);
  free(e->capdeps);
  e->capdeps = capdeps;
  e->ncapdeps = s->nD;
  e->cap_node = idx;
  atomic_store(&e->cap_id, c->id);
out:
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

int32_t cpu_capture_wait(cpu_stream* s, cpu_event* e, int* handled) {
  cpu_device* d = s->dev;
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* cs = atomic_load(&s->cap);
  uint64_t id = atomic_load(&e->cap_id);
  cpu_capture* ce = id ? find_capture(d, id) : NULL;
  if (id && !ce) {
    uint64_t expect = id;
    atomic_compare_exchange_strong(&e->cap_id, &expect, 0);
  }
  int32_t rc = BG_OK;
  *handled = 1;
  if (ce) {
    if (cpu_stream_is_default(s)) {
      invalidate(ce, "bg_stream_wait_event", ", the default stream waited on a captured event");
      rc = bg_set_error(BG_ERR_STREAM_CAPTURE_IMPLICIT,
                        "bg_stream_wait_event: the device's default stream cannot join a capture "
                        "(the capture is invalidated)");
      goto out;
    }
    if (cs && cs != ce) {
      rc = bg_set_error(BG_ERR_STREAM_CAPTURE_ISOLATION,
                        "bg_stream_wait_event: the event belongs to a different capture than the "
                        "stream's");
      goto out;
    }
    if (ce->invalid) {
      rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                        "bg_stream_wait_event: the event's capture was invalidated by %s", ce->why);
      goto out;
    }
    if (!cs) {
      /* fork: the stream joins the capture */
      if (ce->nstreams == ce->cstreams) {
        uint32_t nc = ce->cstreams ? ce->cstreams * 2 : 4;
        cpu_stream** ns = realloc(ce->streams, nc * sizeof(cpu_stream*));
        if (!ns) {
          rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_wait_event: out of host memory");
          goto out;
        }
        ce->streams = ns;
        ce->cstreams = nc;
      }
      int oom = 0;
      uint32_t* nd = dup_u32(e->capdeps, e->ncapdeps, &oom);
      if (oom) {
        rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_wait_event: out of host memory");
        goto out;
      }
      free(s->D);
      s->D = nd;
      s->nD = s->cD = e->ncapdeps;
      ce->streams[ce->nstreams++] = s;
      atomic_store_explicit(&s->cap, ce, memory_order_release);
    } else {
      for (uint32_t i = 0; i < e->ncapdeps; i++)
        if (set_push(&s->D, &s->nD, &s->cD, e->capdeps[i])) {
          rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_wait_event: out of host memory");
          goto out;
        }
    }
    if (e->cap_node < ce->n) ce->nodes[e->cap_node].internal = 1;
    goto out;
  }
  if (!cs) {
    *handled = 0;
    goto out;
  }
  if (cs->invalid) {
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                      "bg_stream_wait_event: the stream's capture was invalidated by %s", cs->why);
    goto out;
  }
  if (atomic_load(e->recp) == 0) goto out; /* never recorded: nothing to wait for */
  {
    /* an event from outside the capture: a wait node, resolved when the exec launches */
    cpu_op op = {.kind = OP_WAIT};
    op.u.ev.e = e;
    rc = add_node(cs, s, &op, 1, NULL, "bg_stream_wait_event");
    if (rc == BG_OK) cpu_event_retain(e);
  }
out:
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

/* ---- begin / end / status -------------------------------------------------------------------- */
int32_t cpu_begin_capture(void* sv, int32_t mode) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  cpu_capture* c = calloc(1, sizeof *c);
  cpu_stream** streams = malloc(4 * sizeof(cpu_stream*));
  if (!c || !streams) {
    free(c);
    free(streams);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_begin_capture: out of host memory");
  }
  if (mode != BG_CAPTURE_MODE_RELAXED) watch_thread(d);
  pthread_mutex_lock(&d->cap_mu);
  if (atomic_load(&s->cap)) {
    pthread_mutex_unlock(&d->cap_mu);
    free(c);
    free(streams);
    return bg_set_error(BG_ERR_ILLEGAL_STATE,
                        "bg_stream_begin_capture: the stream is already capturing");
  }
  c->id = ++d->next_cap_id;
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->streams = streams;
  c->cstreams = 4;
  c->streams[c->nstreams++] = s;
  free(s->D);
  s->D = NULL;
  s->nD = s->cD = 0;
  c->next = d->caps;
  d->caps = c;
  atomic_fetch_add(&d->ncaps, 1);
  atomic_store_explicit(&s->cap, c, memory_order_release);
  pthread_mutex_unlock(&d->cap_mu);
  return BG_OK;
}

static int unjoined(cpu_capture* c, const cpu_stream** who) {
  uint8_t* mark = calloc(c->n ? c->n : 1, 1);
  uint32_t* stack = malloc((c->n ? c->n : 1) * sizeof(uint32_t));
  int bad = 0;
  if (!mark || !stack) {
    free(mark);
    free(stack);
    return 0; /* cannot check: assume joined */
  }
  uint32_t sp = 0;
  cpu_stream* o = c->origin;
  for (uint32_t i = 0; i < o->nD; i++)
    if (!mark[o->D[i]]) {
      mark[o->D[i]] = 1;
      stack[sp++] = o->D[i];
    }
  while (sp) {
    cpu_node* nd = &c->nodes[stack[--sp]];
    for (uint32_t i = 0; i < nd->ndeps; i++)
      if (!mark[nd->deps[i]]) {
        mark[nd->deps[i]] = 1;
        stack[sp++] = nd->deps[i];
      }
  }
  for (uint32_t k = 0; k < c->nstreams && !bad; k++) {
    cpu_stream* s = c->streams[k];
    if (s == o) continue;
    for (uint32_t i = 0; i < s->nD; i++)
      if (!mark[s->D[i]]) {
        bad = 1;
        *who = s;
        break;
      }
  }
  free(mark);
  free(stack);
  return bad;
}

int32_t cpu_end_capture(void* sv, void** out_graph) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  cpu_graph* g = calloc(1, sizeof *g);
  if (!g) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_stream_end_capture: out of host memory");
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* c = atomic_load(&s->cap);
  int32_t rc = BG_OK;
  if (!c) {
    rc = bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_stream_end_capture: the stream is not capturing");
    goto fail;
  }
  if (c->origin != s) {
    invalidate(c, "bg_stream_end_capture", ", called on a joined stream, not the origin");
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_UNMATCHED,
                      "bg_stream_end_capture: the stream joined a capture begun on another stream; "
                      "end it on that stream (the capture is invalidated)");
    goto fail;
  }
  if (c->mode != BG_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
    invalidate(c, "bg_stream_end_capture", ", called from another thread");
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_WRONG_THREAD,
                      "bg_stream_end_capture: a capture in mode %s must end on the thread that "
                      "began it (the capture is invalidated)",
                      mode_name(c->mode));
    goto fail;
  }
  if (c->invalid) {
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_INVALIDATED,
                      "bg_stream_end_capture: capture invalidated by %s", c->why);
    capture_end(d, c, 0);
    goto fail;
  }
  const cpu_stream* who = NULL;
  if (unjoined(c, &who)) {
    rc = bg_set_error(BG_ERR_STREAM_CAPTURE_UNJOINED,
                      "bg_stream_end_capture: a stream forked into the capture (%p) was not joined "
                      "back into the origin stream; the capture is discarded",
                      (const void*)who);
    capture_end(d, c, 0);
    goto fail;
  }
  bg_obj_init(g, BG_KIND_GRAPH, &d->base);
  g->nodes = c->nodes;
  g->n = c->n;
  for (uint32_t i = 0; i < g->n; i++) {
    if (g->nodes[i].internal) continue;
    g->nvisible++;
    if (g->nodes[i].op.kind == OP_KERNEL) g->nkernels++;
  }
  g->gmem = c->gmem; /* the graph owns the memory allocated during the capture */
  c->gmem = NULL;
  capture_end(d, c, 1);
  pthread_mutex_unlock(&d->cap_mu);
  *out_graph = g;
  return BG_OK;
fail:
  pthread_mutex_unlock(&d->cap_mu);
  free(g);
  return rc;
}

int32_t cpu_capture_status(void* sv, int32_t* out) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  pthread_mutex_lock(&d->cap_mu);
  cpu_capture* c = atomic_load(&s->cap);
  *out = !c ? BG_CAPTURE_NONE : c->invalid ? BG_CAPTURE_INVALIDATED : BG_CAPTURE_ACTIVE;
  pthread_mutex_unlock(&d->cap_mu);
  return BG_OK;
}
