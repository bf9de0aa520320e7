/*
 * cpu/run.c: what a stream worker does with an op: run it (cpu_op_run), release what it holds
 * (cpu_op_release), or, when it will never run, complete the event records it issued so nothing
 * waits forever (cpu_op_abandon). A graph exec's replay (one at a time, in launch order) and a
 * command list's run are ops too, so they are here, with the references that end an exec. The
 * worker and enqueueing are stream.c's; building graphs and execs is graph.c's. An exec's
 * kernels hold their modules.
 *
 * Calls: pool.c, event.c, queue.c, pool_mem.c, module.c, commands.c.
 */
#include "cpu.h"

/* ---- one op ---------------------------------------------------------------------------------- */
/* A staged copy (between devices without peer access) goes through a host bounce buffer of at
 * most CPU_STAGE_BYTES, chunk by chunk: source to bounce, bounce to destination, as a driver
 * stages through pinned memory. Without memory for the bounce buffer it goes through one on the
 * stack, in smaller chunks: slower, never wrong. */
#define CPU_STAGE_BYTES (1u << 20)
void cpu_copy(void* dst, const void* src, uint64_t n, uint32_t staged) {
  if (!staged) {
    memmove(dst, src, (size_t)n);
    return;
  }
  char local[4096];
  size_t cap = n < CPU_STAGE_BYTES ? (size_t)n : CPU_STAGE_BYTES;
  char* bounce = cap > sizeof local ? malloc(cap) : NULL;
  if (!bounce) {
    bounce = local;
    if (cap > sizeof local) cap = sizeof local;
  }
  /* src and dst are on different devices, so they do not overlap */
  for (uint64_t off = 0; off < n; off += cap) {
    size_t k = n - off < cap ? (size_t)(n - off) : cap;
    memcpy(bounce, (const char*)src + off, k);
    memcpy((char*)dst + off, bounce, k);
  }
  if (bounce != local) free(bounce);
}

void cpu_fill(void* dst, uint32_t pattern, uint32_t esz, uint64_t count) {
  if (esz == 1) {
    memset(dst, (int)(pattern & 0xff), (size_t)count);
  } else if (esz == 2) {
    uint16_t v = (uint16_t)pattern, *p = dst;
    for (uint64_t i = 0; i < count; i++) p[i] = v;
  } else {
    uint32_t v = pattern, *p = dst;
    for (uint64_t i = 0; i < count; i++) p[i] = v;
  }
}

void cpu_op_release(cpu_op* op) {
  switch (op->kind) {
    case OP_KERNEL:
      if (op->nargs > CPU_INLINE_ARGS) free(op->u.l.heap);
      op->u.l.heap = NULL;
      break;
    case OP_RECORD:
    case OP_WAIT:
      if (op->u.ev.e) cpu_event_release(op->u.ev.e);
      op->u.ev.e = NULL;
      break;
    case OP_GRAPH:
      if (op->u.g.a) cpu_xargs_release(op->u.g.a);
      if (op->u.g.x) cpu_exec_release(op->u.g.x);
      free(op->u.g.seqs);
      op->u.g.a = NULL;
      op->u.g.x = NULL;
      op->u.g.seqs = NULL;
      break;
    case OP_CMDS:
      for (uint32_t i = 0; i < op->u.cmd.nev; i++)
        if (op->u.cmd.evs[i]) cpu_event_release(op->u.cmd.evs[i]);
      free(op->u.cmd.evs);
      free(op->u.cmd.seqs);
      free(op->u.cmd.bytes);
      op->u.cmd.evs = NULL;
      op->u.cmd.seqs = NULL;
      op->u.cmd.bytes = NULL;
      op->u.cmd.nev = 0;
      break;
    case OP_RELEASE:
      if (op->u.rel.def) cpu_deferred_release(op->u.rel.def);
      op->u.rel.def = NULL;
      break;
    case OP_WAIT_STREAM:
      if (op->u.ws.s) cpu_stream_release(op->u.ws.s);
      op->u.ws.s = NULL;
      break;
    default: break;
  }
}

void cpu_op_abandon(cpu_op* op) {
  switch (op->kind) {
    case OP_RECORD: cpu_event_complete(op->u.ev.e, op->u.ev.seq); break;
    case OP_GRAPH: {
      cpu_exec* x = op->u.g.x;
      for (uint32_t i = 0; i < x->nev; i++) {
        cpu_op* eo = &x->ops[x->evslot_op[i]];
        if (eo->kind == OP_RECORD) cpu_event_complete(eo->u.ev.e, op->u.g.seqs[i]);
      }
      cpu_exec_skip(x, op->u.g.ticket); /* later launches of the exec must not wait for it */
      break;
    }
    case OP_CMDS: {
      uint32_t ei = 0;
      bg_cmd_iter it;
      bg_cmd c;
      bg_cmd_iter_init(&it, op->u.cmd.bytes, op->u.cmd.len);
      while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
        if (c.op == BG_CMD_EVENT_RECORD) cpu_event_complete(op->u.cmd.evs[ei], op->u.cmd.seqs[ei]);
        if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) ei++;
      }
      break;
    }
    default: break;
  }
  cpu_op_release(op);
}

void cpu_op_run(cpu_stream* s, cpu_op* op) {
  switch (op->kind) {
    case OP_KERNEL:
      if (op->u.l.k->persistent) atomic_store_explicit(&s->resident, 1, memory_order_release);
      cpu_kernel_run(s, op->u.l.k, op->u.l.grid, op->u.l.block, op->u.l.shared,
                     cpu_op_args(op));
      if (op->u.l.k->persistent) atomic_store_explicit(&s->resident, 0, memory_order_release);
      break;
    case OP_COPY: cpu_copy(op->u.cp.dst, op->u.cp.src, op->u.cp.n, op->u.cp.staged); break;
    case OP_MEMSET: cpu_fill(op->u.ms.dst, op->u.ms.pattern, op->u.ms.esz, op->u.ms.count); break;
    case OP_HOST:
    case OP_NOTIFY: op->u.hf.fn(op->u.hf.user); break;
    case OP_RECORD: cpu_event_complete(op->u.ev.e, op->u.ev.seq); break;
    case OP_WAIT: cpu_event_wait_seq(op->u.ev.e, op->u.ev.seq); break;
    case OP_GRAPH: cpu_exec_run(s, op->u.g.x, op->u.g.a, op->u.g.seqs, op->u.g.ticket); break;
    case OP_CMDS: cpu_cmds_run(s, op); break;
    case OP_WAIT_STREAM: cpu_stream_wait_count(op->u.ws.s, op->u.ws.target); break;
    default: break;
  }
}

/* ---- graph execs: references, turns, a replay ------------------------------------------------ */
void cpu_xargs_release(cpu_xargs* a) {
  if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1) free(a);
}

void cpu_exec_release(cpu_exec* x) {
  if (atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; i < x->nops; i++) {
    if ((x->ops[i].kind == OP_RECORD || x->ops[i].kind == OP_WAIT) && x->ops[i].u.ev.e)
      cpu_event_release(x->ops[i].u.ev.e);
    if (x->ops[i].kind == OP_KERNEL && x->ops[i].u.l.k) cpu_module_unhold(x->ops[i].u.l.k->mod);
  }
  if (x->args) cpu_xargs_release(x->args);
  cpu_gmem_exec_close(x->gmem); /* its graph may be instantiated again */
  cpu_gmem_release(x->gmem); /* the last user of the graph's memory frees it */
  pthread_mutex_destroy(&x->mu);
  pthread_mutex_destroy(&x->run_mu);
  pthread_cond_destroy(&x->turn);
  free(x->skip);
  free(x->ops);
  free(x->koff);
  free(x->knargs);
  free(x->evslot_op);
  free(x);
}

/* Advance past `ticket` (under run_mu) and past every later ticket already skipped. */
static void exec_turn_done(cpu_exec* x) {
  x->serving++;
  for (uint32_t i = 0; i < x->nskip;) {
    if (x->skip[i] == x->serving) {
      x->skip[i] = x->skip[--x->nskip];
      x->serving++;
      i = 0;
    } else {
      i++;
    }
  }
  pthread_cond_broadcast(&x->turn);
}

/* A launch that will never run: its turn is passed over. */
void cpu_exec_skip(cpu_exec* x, uint64_t ticket) {
  pthread_mutex_lock(&x->run_mu);
  if (ticket == x->serving) {
    exec_turn_done(x);
  } else {
    if (x->nskip == x->capskip) {
      uint32_t nc = x->capskip ? 2 * x->capskip : 4;
      uint64_t* ns = realloc(x->skip, nc * sizeof *ns);
      if (!ns) abort(); /* a few bytes: without them later replays would wait forever */
      x->skip = ns;
      x->capskip = nc;
    }
    x->skip[x->nskip++] = ticket;
  }
  pthread_mutex_unlock(&x->run_mu);
}

void cpu_exec_run(cpu_stream* s, cpu_exec* x, cpu_xargs* a, const uint64_t* seqs, uint64_t ticket) {
  pthread_mutex_lock(&x->run_mu);
  while (x->serving != ticket) pthread_cond_wait(&x->turn, &x->run_mu);
  pthread_mutex_unlock(&x->run_mu);
  for (uint32_t i = 0; i < x->nops; i++) {
    cpu_op* op = &x->ops[i];
    switch (op->kind) {
      case OP_KERNEL:
        cpu_kernel_run(s, op->u.l.k, op->u.l.grid, op->u.l.block, op->u.l.shared,
                       a->data + x->koff[op->u.l.knode]);
        break;
      case OP_COPY: cpu_copy(op->u.cp.dst, op->u.cp.src, op->u.cp.n, op->u.cp.staged); break;
      case OP_MEMSET: cpu_fill(op->u.ms.dst, op->u.ms.pattern, op->u.ms.esz, op->u.ms.count); break;
      case OP_HOST: op->u.hf.fn(op->u.hf.user); break;
      case OP_RECORD: cpu_event_complete(op->u.ev.e, seqs[op->u.ev.seq]); break;
      case OP_WAIT:
        if (seqs[op->u.ev.seq]) cpu_event_wait_seq(op->u.ev.e, seqs[op->u.ev.seq]);
        break;
      default: break;
    }
  }
  pthread_mutex_lock(&x->run_mu);
  exec_turn_done(x);
  pthread_mutex_unlock(&x->run_mu);
}

/* ---- command lists --------------------------------------------------------------------------- */
void cpu_cmds_run(cpu_stream* s, cpu_op* op) {
  uint32_t ei = 0;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, op->u.cmd.bytes, op->u.cmd.len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        cpu_kernel_run(s, c.u.launch.kernel, c.u.launch.grid, c.u.launch.block, c.u.launch.shared,
                       c.u.launch.args);
        break;
      case BG_CMD_COPY:
        if (c.u.copy.bytes)
          memmove((void*)(uintptr_t)c.u.copy.dst, (const void*)(uintptr_t)c.u.copy.src,
                  (size_t)c.u.copy.bytes);
        break;
      case BG_CMD_COPY_HTOD:
        if (c.u.htod.bytes) memmove((void*)(uintptr_t)c.u.htod.dst, c.u.htod.src, (size_t)c.u.htod.bytes);
        break;
      case BG_CMD_COPY_DTOH:
        if (c.u.dtoh.bytes) memmove(c.u.dtoh.dst, (const void*)(uintptr_t)c.u.dtoh.src, (size_t)c.u.dtoh.bytes);
        break;
      case BG_CMD_MEMSET:
        if (c.u.fill.count)
          cpu_fill((void*)(uintptr_t)c.u.fill.dst, c.u.fill.pattern, c.u.fill.elem_size, c.u.fill.count);
        break;
      case BG_CMD_EVENT_RECORD:
        cpu_event_complete(op->u.cmd.evs[ei], op->u.cmd.seqs[ei]);
        ei++;
        break;
      case BG_CMD_EVENT_WAIT: {
        uint64_t seq = op->u.cmd.seqs[ei];
        if (seq) cpu_event_wait_seq(op->u.cmd.evs[ei], seq);
        ei++;
        break;
      }
      default: break;
    }
  }
}
