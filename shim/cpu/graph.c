/*
 * cpu/graph.c: graphs, graph execs and command buffers.
 *
 * A graph is the node list of a capture (capture.c builds it). Instantiating copies its visible
 * nodes into an exec: kernel arguments in one block that bg_graph_exec_set_kernel_args patches
 * (copy on write while a queued launch still reads the old block), and a slot per event node.
 * A launch takes the exec's next ticket and fresh event record numbers and queues one OP_GRAPH;
 * the replay runs on the worker (run.c). A command list (bg_submit) becomes one OP_CMDS the
 * same way; submitted with a wait onto an idle non-blocking stream, the submitting thread runs it
 * itself (cpu_submit_wait). The top of the backend's stream
 * work: stream.c enqueues for it.
 *
 * Calls: pool.c, event.c, pool_mem.c, module.c, run.c, capture.c, stream.c, commands.c, base.c.
 */
#include "cpu.h"

/* ---- graphs ---------------------------------------------------------------------------------- */
int32_t cpu_graph_destroy(void* gv) {
  cpu_graph* g = gv;
  bg_obj_kill(g);
  cpu_nodes_free(g->nodes, g->n);
  cpu_gmem_release(g->gmem); /* execs of it hold their own reference */
  free(g);
  return BG_OK;
}

int32_t cpu_graph_node_count(void* gv, uint32_t* nodes, uint32_t* kernel_nodes) {
  cpu_graph* g = gv;
  *nodes = g->nvisible;
  *kernel_nodes = g->nkernels;
  return BG_OK;
}

int32_t cpu_graph_instantiate(void* gv, void** out_exec) {
  cpu_graph* g = gv;
  if (cpu_gmem_exec_open(g->gmem) != 0)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_graph_instantiate: the graph holds stream-ordered allocations made during "
                        "its capture (memory allocation nodes), and the driver allows one executable "
                        "graph of such a graph at a time: dispose of the first GraphExec before "
                        "instantiating again, or capture the work once more for a second");
  uint32_t nops = 0, nk = 0, nev = 0;
  uint64_t total = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    const cpu_node* nd = &g->nodes[i];
    if (nd->internal) continue;
    nops++;
    if (nd->op.kind == OP_KERNEL) {
      nk++;
      total += nd->op.nargs;
    }
    if (nd->op.kind == OP_RECORD || nd->op.kind == OP_WAIT) nev++;
  }
  if (total > 0xffffffffull)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: too many arguments");
  cpu_exec* x = calloc(1, sizeof *x);
  cpu_xargs* a = malloc(sizeof(cpu_xargs) + 8 * (size_t)total);
  if (!x || !a) goto oom;
  x->ops = calloc(nops ? nops : 1, sizeof(cpu_op));
  x->koff = calloc(nk ? nk : 1, sizeof(uint32_t));
  x->knargs = calloc(nk ? nk : 1, sizeof(uint32_t));
  x->evslot_op = calloc(nev ? nev : 1, sizeof(uint32_t));
  if (!x->ops || !x->koff || !x->knargs || !x->evslot_op) goto oom;
  atomic_init(&a->refs, 1);
  uint32_t o = 0, ki = 0, ei = 0, off = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    const cpu_node* nd = &g->nodes[i];
    if (nd->internal) continue;
    cpu_op op = nd->op;
    if (op.kind == OP_KERNEL) {
      x->koff[ki] = off;
      x->knargs[ki] = op.nargs;
      if (op.nargs) memcpy(a->data + off, cpu_op_args(&nd->op), 8ull * op.nargs);
      off += op.nargs;
      op.u.l.knode = ki++;
      op.u.l.heap = NULL;
      if (op.u.l.k) cpu_module_hold(op.u.l.k->mod); /* cpu_exec_release drops it */
    } else if (op.kind == OP_RECORD || op.kind == OP_WAIT) {
      cpu_event_retain(op.u.ev.e);
      x->evslot_op[ei] = o;
      op.u.ev.seq = ei++;
    }
    x->ops[o++] = op;
  }
  x->nops = nops;
  x->nk = nk;
  x->nev = nev;
  x->nargs_total = (uint32_t)total;
  x->args = a;
  x->gmem = g->gmem;
  cpu_gmem_retain(x->gmem); /* cpu_exec_release drops it */
  atomic_init(&x->refs, 1);
  pthread_mutex_init(&x->mu, NULL);
  pthread_mutex_init(&x->run_mu, NULL);
  pthread_cond_init(&x->turn, NULL);
  bg_obj_init(x, BG_KIND_EXEC, g->h.dev);
  *out_exec = x;
  return BG_OK;
oom:
  cpu_gmem_exec_close(g->gmem);
  if (x) {
    free(x->ops);
    free(x->koff);
    free(x->knargs);
    free(x->evslot_op);
  }
  free(x);
  free(a);
  return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
}

int32_t cpu_graph_exec_destroy(void* xv) {
  cpu_exec* x = xv;
  bg_obj_kill(x);
  cpu_exec_release(x);
  return BG_OK;
}

int32_t cpu_graph_upload(void* x, void* s) {
  (void)x;
  (void)s;
  return BG_OK;
}

int32_t cpu_graph_launch(void* xv, void* sv) {
  cpu_exec* x = xv;
  cpu_stream* s = sv;
  if (atomic_load_explicit(&s->cap, memory_order_acquire))
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_graph_launch: launching a graph into a capturing stream (a child graph) "
                        "is not supported on the cpu backend");
  uint64_t* seqs = NULL;
  if (x->nev) {
    seqs = malloc(x->nev * sizeof(uint64_t));
    if (!seqs) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_launch: out of host memory");
  }
  cpu_op op = {.kind = OP_GRAPH};
  pthread_mutex_lock(&x->mu);
  /* refused before any event record number or ticket is taken (see cpu_event_record) */
  int32_t rc = cpu_legacy_deps(s, "bg_graph_launch");
  if (rc) {
    pthread_mutex_unlock(&x->mu);
    free(seqs);
    return rc;
  }
  for (uint32_t i = 0; i < x->nev; i++) {
    cpu_op* eo = &x->ops[x->evslot_op[i]];
    cpu_event* e = eo->u.ev.e;
    if (eo->kind == OP_RECORD) {
      seqs[i] = cpu_event_take_seq(e);
      atomic_store(&e->cap_id, 0);
    } else {
      seqs[i] = atomic_load(e->recp);
    }
  }
  atomic_fetch_add(&x->args->refs, 1);
  atomic_fetch_add(&x->refs, 1);
  op.u.g.x = x;
  op.u.g.a = x->args;
  op.u.g.seqs = seqs;
  op.u.g.ticket = x->next_ticket++;
  /* enqueued under mu, so two threads launching the exec on one stream queue their launches in
   * ticket order (a later ticket queued first would wait forever for the one behind it) */
  rc = cpu_enqueue_raw(s, &op, "bg_graph_launch"); /* a refused op was abandoned: skipped */
  pthread_mutex_unlock(&x->mu);
  if (rc) cpu_op_release(&op);
  return rc;
}

int32_t cpu_graph_exec_set_kernel_args(void* xv, uint32_t index, const uint64_t* args,
                                       uint32_t nargs) {
  cpu_exec* x = xv;
  if (index >= x->nk)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: kernel node %u out of range (the graph has %u)",
                        index, x->nk);
  if (nargs != x->knargs[index])
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: %u arguments given, kernel node %u takes %u",
                        nargs, index, x->knargs[index]);
  pthread_mutex_lock(&x->mu);
  cpu_xargs* a = x->args;
  if (atomic_load_explicit(&a->refs, memory_order_acquire) != 1) {
    /* a queued launch still reads the current block: copy on write */
    cpu_xargs* na = malloc(sizeof(cpu_xargs) + 8 * (size_t)x->nargs_total);
    if (!na) {
      pthread_mutex_unlock(&x->mu);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_exec_set_kernel_args: out of host memory");
    }
    atomic_init(&na->refs, 1);
    memcpy(na->data, a->data, 8 * (size_t)x->nargs_total);
    x->args = na;
    cpu_xargs_release(a);
    a = na;
  }
  if (nargs) memcpy(a->data + x->koff[index], args, 8ull * nargs);
  pthread_mutex_unlock(&x->mu);
  return BG_OK;
}

/* ---- command buffers ------------------------------------------------------------------------- */
int32_t cpu_submit(void* sv, const uint8_t* p, uint64_t len) {
  cpu_stream* s = sv;
  uint32_t nev = 0;
  int one_by_one = atomic_load_explicit(&s->cap, memory_order_acquire) != NULL;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op == BG_CMD_LAUNCH) {
      int32_t rc = cpu_check_launch("bg_submit", c.u.launch.grid, c.u.launch.block,
                                    c.u.launch.shared);
      if (rc) return rc;
    } else if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) {
      cpu_event* e = c.u.event.event;
      if (atomic_load(&e->cap_id)) one_by_one = 1;
      nev++;
    }
  }
  if (one_by_one) return bg_issue_cmds(s, p, len); /* capture, or events in an active capture */
  /* refused before any event record number is taken (see cpu_event_record) */
  int32_t rc = cpu_legacy_deps(s, "bg_submit");
  if (rc) return rc;
  cpu_op op = {.kind = OP_CMDS};
  op.u.cmd.bytes = malloc((size_t)len);
  if (nev) {
    op.u.cmd.seqs = malloc(nev * sizeof(uint64_t));
    op.u.cmd.evs = malloc(nev * sizeof(cpu_event*));
  }
  if (!op.u.cmd.bytes || (nev && (!op.u.cmd.seqs || !op.u.cmd.evs))) {
    free(op.u.cmd.bytes);
    free(op.u.cmd.seqs);
    free(op.u.cmd.evs);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_submit: out of host memory");
  }
  memcpy(op.u.cmd.bytes, p, (size_t)len);
  op.u.cmd.len = len;
  uint32_t i = 0;
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op != BG_CMD_EVENT_RECORD && c.op != BG_CMD_EVENT_WAIT) continue;
    cpu_event* e = c.u.event.event;
    cpu_event_retain(e);
    op.u.cmd.evs[i] = e;
    if (c.op == BG_CMD_EVENT_RECORD) {
      op.u.cmd.seqs[i] = cpu_event_take_seq(e);
      atomic_store(&e->cap_id, 0);
    } else {
      op.u.cmd.seqs[i] = atomic_load(e->recp);
    }
    i++;
  }
  op.u.cmd.nev = nev;
  return cpu_enqueue_raw(s, &op, "bg_submit");
}

/* bg_submit_ex with BG_SUBMIT_WAIT. On an idle non-blocking stream (no legacy waits either way),
 * not capturing, for a list of launches, copies and memsets, the calling thread runs the list
 * itself, as the pool's slot 0, instead of handing it to the stream's worker and waiting for it:
 * no hand-over and no wake-up, and no third thread (the waiter spinning) competing with the
 * worker and the pool for the cores. The stream's lock is held meanwhile, so an op enqueued by
 * another thread runs after the list, and the list counts as one op (enqueued, then completed) for
 * those that synchronize or query. With BG_SUBMIT_SERIAL its launches run on this thread alone
 * (cpu_t_serial: the pool is not woken). Anything else (checked mode included: its wrappers have
 * no submit_wait) is a submit and a synchronize. */
int32_t cpu_submit_wait(void* sv, const uint8_t* p, uint64_t len, uint32_t flags) {
  cpu_stream* s = sv;
  int inl = (s->flags & BG_STREAM_NON_BLOCKING) && !cpu_stream_is_default(s) && !s->dev->checked &&
            !atomic_load_explicit(&s->cap, memory_order_acquire);
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (inl && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op == BG_CMD_LAUNCH) {
      if (cpu_check_launch("bg_submit", c.u.launch.grid, c.u.launch.block, c.u.launch.shared))
        inl = 0; /* the submit below reports it */
      else if (((cpu_kernel*)c.u.launch.kernel)->persistent)
        inl = 0;
    } else if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) {
      inl = 0;
    }
  }
  if (inl) {
    pthread_mutex_lock(&s->mu);
    if (s->head != s->tail || atomic_load(&s->completed) != atomic_load(&s->enqueued)) {
      pthread_mutex_unlock(&s->mu);
      inl = 0;
    }
  }
  if (!inl) {
    int32_t rc = cpu_submit(s, p, len);
    return rc ? rc : cpu_stream_synchronize(s);
  }
  /* as if one op were queued and taken: the worker's count of what it saw stays in step */
  s->tail++;
  s->head++;
  atomic_fetch_add_explicit(&s->enqueued, 1, memory_order_release);
  cpu_op op = {.kind = OP_CMDS};
  op.u.cmd.bytes = (uint8_t*)p;
  op.u.cmd.len = len;
  cpu_t_serial = (flags & BG_SUBMIT_SERIAL) != 0;
  cpu_cmds_run(s, &op);
  cpu_t_serial = 0;
  atomic_fetch_add(&s->completed, 1);
  if (atomic_load(&s->waiters) > 0) pthread_cond_broadcast(&s->cv_done);
  pthread_mutex_unlock(&s->mu);
  return BG_OK;
}
