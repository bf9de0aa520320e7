/*
 * cpu/pool.c: running a kernel launch. A launch runs on the stream worker that reaches it (or on
 * the thread that submitted a waited command list, graph.c's cpu_submit_wait): it takes
 * the device's pool (one launch at a time), splits the linear block range into chunks that the
 * pool threads and the launching thread (slot 0) claim with an atomic counter, and returns when
 * every chunk is done. One-block launches run inline on the launching thread. Pool threads are
 * started on the first launch that needs them; idle ones spin briefly, then sleep.
 *
 * Calls: base.c.
 */
#include "cpu.h"

#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

/* ---- a fault inside a kernel -------------------------------------------------------------- */
/* The SIGSEGV/SIGBUS handler is installed when the first CPU device opens, chained to the one
 * installed before it. Every kernel call on a stream worker, pool thread or submitting thread
 * marks its thread (t_kname: the kernel's name) and counts itself in g_in_kernel.
 * With BUNGPU_CHECK=1 each call also runs under sigsetjmp: the handler jumps back when the fault
 * happened inside one (t_kjmp set on that thread), and the device takes a sticky
 * BG_ERR_ILLEGAL_ADDRESS naming the kernel, as CUDA reports an illegal address. Without it a
 * fault in a kernel is a crash, as a bad pointer in any native code is, but first the handler
 * writes one line to stderr naming the kernel and BUNGPU_CHECK=1 (write(2) only), since the
 * runtime's crash report that follows blames the runtime. Either way the fault then goes to the
 * handler installed before ours (the runtime's crash handler, or the default action, which ends
 * the process by the signal): it is not ours to swallow. The handler reads its thread-local
 * state only while some kernel call is running (g_in_kernel), so a fault elsewhere, when no
 * kernel runs, touches nothing of ours before it is passed on. */
_Thread_local int cpu_t_serial;
static _Thread_local sigjmp_buf* t_kjmp;
static _Thread_local const char* volatile t_kname;
static _Thread_local void* t_faddr;
static _Thread_local int t_fsig;
static _Atomic int g_in_kernel; /* kernel calls running now, on any thread */
static atomic_int g_told;       /* the line was written (once per process) */
static struct sigaction g_old_segv, g_old_bus;

static inline void kernel_enter(const char* kname) {
  atomic_fetch_add_explicit(&g_in_kernel, 1, memory_order_relaxed);
  t_kname = kname;
  atomic_signal_fence(memory_order_seq_cst);
}

static inline void kernel_leave(void) {
  atomic_signal_fence(memory_order_seq_cst);
  t_kname = NULL;
  atomic_fetch_sub_explicit(&g_in_kernel, 1, memory_order_relaxed);
}

/* async-signal-safe pieces of the line */
static size_t put_str(char* buf, size_t at, size_t cap, const char* s, size_t max) {
  for (size_t i = 0; s[i] && i < max && at < cap; i++) buf[at++] = s[i];
  return at;
}

static size_t put_hex(char* buf, size_t at, size_t cap, uintptr_t v) {
  char tmp[2 + 2 * sizeof v];
  size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  at = put_str(buf, at, cap, "0x", 2);
  while (n && at < cap) buf[at++] = tmp[--n];
  return at;
}

/* Default mode: one line on stderr saying which kernel faulted and how to find out where. */
static void tell_fault(int sig, const siginfo_t* si, const char* kname) {
  if (atomic_exchange(&g_told, 1)) return;
  char line[512];
  size_t cap = sizeof line - 1, at = 0;
  at = put_str(line, at, cap, "bungpu: CPU kernel \"", 64);
  at = put_str(line, at, cap, kname, 200);
  at = put_str(line, at, cap, sig == SIGBUS ? "\" faulted (SIGBUS" : "\" faulted (SIGSEGV", 64);
  if (si) {
    at = put_str(line, at, cap, " at ", 8);
    at = put_hex(line, at, cap, (uintptr_t)si->si_addr);
  }
  at = put_str(line, at, cap,
               "): an illegal memory access by the kernel, not a fault of the runtime. Run with "
               "BUNGPU_CHECK=1 to get a GpuError (ILLEGAL_ADDRESS) naming the kernel instead of a "
               "crash, and guard pages that catch a write just past a buffer.",
               400);
  line[at++] = '\n';
  for (size_t off = 0; off < at;) {
    ssize_t w = write(2, line + off, at - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
}

static void fault_handler(int sig, siginfo_t* si, void* uc) {
  if (atomic_load_explicit(&g_in_kernel, memory_order_relaxed) > 0) {
    sigjmp_buf* jb = t_kjmp;
    if (jb) {
      t_kjmp = NULL;
      t_faddr = si ? si->si_addr : NULL;
      t_fsig = sig;
      siglongjmp(*jb, 1);
    }
    const char* kname = t_kname;
    if (kname) tell_fault(sig, si, kname);
  }
  struct sigaction* old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction) old->sa_sigaction(sig, si, uc);
    return;
  }
  if (old->sa_handler == SIG_IGN) return;
  if (old->sa_handler != SIG_DFL) {
    old->sa_handler(sig);
    return;
  }
  /* the default action: restore it; the faulting instruction runs again and kills the process */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
}

static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;
static void fault_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
}

void cpu_fault_init(void) { pthread_once(&g_fault_once, fault_install); }

/* One kernel call, on this thread, marked for the fault handler (unchecked mode). */
static void call_marked(cpu_kfn fn, bg_cpu_ctx* ctx, const char* kname) {
  kernel_enter(kname ? kname : "?");
  fn(ctx);
  kernel_leave();
}

/* The first fault wins; every later call on the device returns it (device.c). */
void cpu_set_sticky(cpu_device* d, int32_t code, const char* msg) {
  pthread_mutex_lock(&d->sticky_mu);
  if (!atomic_load(&d->sticky)) {
    snprintf(d->sticky_msg, sizeof d->sticky_msg, "%s", msg);
    atomic_store_explicit(&d->sticky, code, memory_order_release);
  }
  pthread_mutex_unlock(&d->sticky_mu);
}

static cpu_device* pool_device(cpu_pool* p) {
  return (cpu_device*)((char*)p - offsetof(cpu_device, pool));
}

static void report_fault(cpu_device* d, const char* kname) {
  char msg[300];
  snprintf(msg, sizeof msg, "kernel \"%s\" faulted (%s at address %p): an illegal memory access",
           kname ? kname : "?", t_fsig == SIGBUS ? "SIGBUS" : "SIGSEGV", t_faddr);
  cpu_set_sticky(d, BG_ERR_ILLEGAL_ADDRESS, msg);
}

/* ---- pool -------------------------------------------------------------------------------- */
int32_t cpu_pool_init(cpu_pool* p, uint32_t nslots) {
  memset(p, 0, sizeof *p);
  p->nslots = nslots ? nslots : 1;
  p->scratch = calloc(p->nslots, sizeof(void*)); /* slot 0 is the launcher's own */
  if (!p->scratch) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_device_open: out of host memory");
  pthread_mutex_init(&p->launch_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_start, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  atomic_init(&p->gen, 0);
  atomic_init(&p->next, 0);
  atomic_init(&p->pending, 0);
  return BG_OK;
}

static void run_chunks(cpu_pool* p, cpu_kfn fn, const bg_cpu_ctx* tmpl, uint64_t total,
                       uint64_t chunk, uint32_t slot, void* scratch) {
  bg_cpu_ctx ctx = *tmpl;
  ctx.shared = scratch;
  ctx.worker = slot;
  for (;;) {
    uint64_t b = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
    if (b >= total) break;
    uint64_t e = b + chunk < total ? b + chunk : total;
    ctx.block_begin = (uint32_t)b;
    ctx.block_end = (uint32_t)e;
    fn(&ctx);
  }
}

void cpu_name_thread(const char* name) {
#if defined(__APPLE__)
  pthread_setname_np(name);
#else
  (void)name;
#endif
}

void cpu_name_started(pthread_t t, const char* name) {
#if defined(__linux__)
  pthread_setname_np(t, name);
#else
  (void)t;
  (void)name;
#endif
}

/* run_chunks with the thread marked for the fault handler, under the fault trap in checked mode.
 * After a caught fault the rest of the launch's chunks are given up: `next` jumps to the end so
 * no thread claims another. */
static void run_chunks_checked(cpu_pool* p, cpu_kfn fn, const bg_cpu_ctx* tmpl, uint64_t total,
                               uint64_t chunk, uint32_t slot, void* scratch, const char* kname) {
  cpu_device* d = pool_device(p);
  if (!d->checked) {
    kernel_enter(kname ? kname : "?");
    run_chunks(p, fn, tmpl, total, chunk, slot, scratch);
    kernel_leave();
    return;
  }
  sigjmp_buf jb;
  if (sigsetjmp(jb, 1) == 0) {
    kernel_enter(kname ? kname : "?");
    t_kjmp = &jb;
    run_chunks(p, fn, tmpl, total, chunk, slot, scratch);
    t_kjmp = NULL;
    kernel_leave();
  } else {
    t_kjmp = NULL;
    kernel_leave();
    atomic_store(&p->next, total);
    report_fault(d, kname);
  }
}

static void* pool_main(void* arg) {
  cpu_name_thread("bg-pool");
  cpu_pool_thread* t = arg;
  cpu_pool* p = t->pool;
  uint64_t seen = 0;
  for (;;) {
    uint64_t t0 = bg_now_ns();
    for (unsigned i = 1; atomic_load_explicit(&p->gen, memory_order_acquire) == seen; i++) {
      if ((i & 7) == 0) sched_yield(); else cpu_relax();
      if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SPIN_NS) break;
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !p->stop) {
      p->sleepers++;
      pthread_cond_wait(&p->cv_start, &p->mu);
      p->sleepers--;
    }
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      break;
    }
    seen = atomic_load(&p->gen);
    int mine = t->index <= p->nparticipants;
    cpu_kfn fn = p->fn;
    const char* kname = p->kname;
    bg_cpu_ctx ctx = p->ctx;
    uint64_t total = p->total, chunk = p->chunk;
    pthread_mutex_unlock(&p->mu);
    if (!mine) continue;
    run_chunks_checked(p, fn, &ctx, total, chunk, t->index, p->scratch[t->index], kname);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

/* Under launch_mu. On failure the pool simply runs with the threads it has. */
static void pool_start(cpu_pool* p) {
  p->started = 1;
  if (p->nslots < 2) return;
  uint32_t want = p->nslots - 1;
  p->threads = calloc(want, sizeof(pthread_t));
  p->targs = calloc(want, sizeof(cpu_pool_thread));
  if (!p->threads || !p->targs) return;
  for (uint32_t i = 0; i < want; i++) {
    if (posix_memalign(&p->scratch[i + 1], 64, CPU_MAX_SHARED)) break;
    p->targs[i].pool = p;
    p->targs[i].index = i + 1;
    if (pthread_create(&p->threads[i], NULL, pool_main, &p->targs[i])) break;
    cpu_name_started(p->threads[i], "bg-pool");
    p->nthreads = i + 1;
  }
}

void cpu_pool_destroy(cpu_pool* p) {
  if (!p->scratch) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv_start);
  pthread_mutex_unlock(&p->mu);
  for (uint32_t i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  for (uint32_t i = 0; i < p->nslots; i++) free(p->scratch[i]);
  free(p->scratch);
  free(p->threads);
  free(p->targs);
  pthread_mutex_destroy(&p->launch_mu);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_start);
  pthread_cond_destroy(&p->cv_done);
  p->scratch = NULL;
}

/* One-block launches, launches of a list submitted with BG_SUBMIT_SERIAL, and launches that find the pool busy (another stream's launch, maybe a
 * persistent kernel), run entirely on the stream worker with its own scratch, as worker 0:
 * every stream always makes progress. */
void cpu_kernel_run(cpu_stream* s, cpu_kernel* k, const uint32_t g[3], const uint32_t b[3],
                    uint32_t shared, const uint64_t* args) {
  cpu_pool* p = &s->dev->pool;
  uint64_t total = (uint64_t)g[0] * g[1] * g[2];
  bg_cpu_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.grid.x = g[0];
  ctx.grid.y = g[1];
  ctx.grid.z = g[2];
  ctx.block.x = b[0];
  ctx.block.y = b[1];
  ctx.block.z = b[2];
  ctx.args = args;
  ctx.shared_bytes = shared;
  cpu_kfn fn = k->fn;
  cpu_device* d = s->dev;
  if (d->checked && atomic_load_explicit(&d->sticky, memory_order_acquire)) return; /* dead */
  int pooled = total > 1 && !cpu_t_serial && p->nslots > 1 && pthread_mutex_trylock(&p->launch_mu) == 0;
  if (pooled && !p->started) pool_start(p);
  if (pooled && p->nthreads == 0) {
    pthread_mutex_unlock(&p->launch_mu);
    pooled = 0;
  }
  if (!pooled) {
    ctx.block_begin = 0;
    ctx.block_end = (uint32_t)total;
    ctx.shared = s->scratch;
    ctx.worker = 0;
    if (!d->checked) {
      call_marked(fn, &ctx, k->name);
      return;
    }
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1) == 0) {
      kernel_enter(k->name ? k->name : "?");
      t_kjmp = &jb;
      fn(&ctx);
      t_kjmp = NULL;
      kernel_leave();
    } else {
      t_kjmp = NULL;
      kernel_leave();
      report_fault(d, k->name);
    }
    return;
  }
  uint64_t slots = (uint64_t)p->nthreads + 1;
  uint64_t chunk = total / (slots * 4);
  if (chunk < 1) chunk = 1;
  uint64_t nchunks = (total + chunk - 1) / chunk;
  uint32_t parts = nchunks - 1 < p->nthreads ? (uint32_t)(nchunks - 1) : p->nthreads;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->kname = k->name;
  p->ctx = ctx;
  p->total = total;
  p->chunk = chunk;
  p->nparticipants = parts;
  atomic_store(&p->next, 0);
  atomic_store(&p->pending, parts);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  if (p->sleepers) pthread_cond_broadcast(&p->cv_start);
  pthread_mutex_unlock(&p->mu);
  run_chunks_checked(p, fn, &ctx, total, chunk, 0, s->scratch, k->name);
  uint64_t t0 = bg_now_ns();
  for (unsigned i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
    if ((i & 7) == 0) sched_yield(); else cpu_relax();
    if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SYNC_SPIN_NS) break;
  }
  if (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->launch_mu);
}
