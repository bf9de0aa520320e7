/*
 * cpu/cpu.h: what the files of the CPU backend share. One file over 600 lines: it is the one
 * place a file of the backend declares what the others may call, in the order below, so the
 * whole backend's inner interface is read in one place.
 *
 * From the bottom up; each file calls only files above it in this list:
 *  hostmem.c the host memory behind allocations: large blocks mapped for themselves and, beyond
 *            16 MiB of freed ones kept for reuse, unmapped at free (their pages go back to the
 *            system); small ones from malloc.
 *  pool.c    the per-device kernel thread pool: running a launch's blocks (cpu_kernel_run),
 *            and a fault in a kernel (checked mode: caught; default: named on stderr).
 *  event.c   what an event is underneath: references, a record reached, waiting for one;
 *            the page an interprocess event keeps its numbers in.
 *  queue.c   a stream's queue from below its worker: putting an op in, waiting for ops to
 *            complete, references; snapshots of many streams; frees deferred until the work
 *            queued before them has run (cpu_defer).
 *  pool_mem.c memory pools and stream-ordered allocation (bg_mem_alloc_async): blocks reused in
 *            stream order, stats, release threshold and trim, and graph memory (allocations
 *            made during capture, owned by the graph and its execs: cpu_gmem).
 *  module.c  modules (dlopen, or functions compiled in memory) and kernels.
 *  run.c     what a worker does with an op: run it, release it, abandon it; graph exec replays
 *            and command lists included.
 *  capture.c stream capture: ops, records and waits on a capturing stream, the guards that
 *            invalidate by CaptureMode, begin/end/status.
 *  stream.c  streams (one worker thread each, an in-order queue of cpu_op), enqueueing with
 *            the legacy stream's implicit waits, events' and host functions' entry points,
 *            asynchronous copies, launches (cpu_launch queues an OP_KERNEL).
 *  ipc.c     memory and events shared between processes: shareable allocations in memfds,
 *            export and open (the event's shared page itself is event.c's).
 *  graph.c   graphs, graph execs (instantiate, launch, argument updates) and bg_submit command
 *            lists, each queued as one op (a waited list on an idle non-blocking stream runs on
 *            the submitting thread instead).
 *  collective.c communicators: collectives and sends/receives between the CPU devices of one
 *            process or processes of one machine, through one shared segment; each queued as a
 *            host function on the rank's stream.
 *  cmdgraph.c graphs from command lists: the list issued into a capture on a private stream.
 *  checked.c checked mode (BUNGPU_CHECK=1): guarded device memory, and the vtable whose
 *            entries return the sticky error once a kernel faulted.
 *  device.c  probe/open/close, props, memory (tracked allocations), synchronous copies, rings,
 *            and the vtable.
 *
 * The worker runs ops below it (run.c), and capture is asked below the enqueue (capture.c), so
 * nothing below stream.c calls it back; the one call that climbs is through a pointer: a
 * deferred free (cpu_defer) runs the function it was given.
 *
 * Synchronisation follows CUDA's legacy default stream (stream.c, "legacy"): work queued on the
 * device's default stream waits for the work queued before it on every blocking stream (created
 * without BG_STREAM_NON_BLOCKING), and work queued on a blocking stream waits for the work queued
 * before it on the default stream; non-blocking streams are exempt both ways. The waits are
 * OP_WAIT_STREAM ops put in front of the op at enqueue, and only where the other stream still
 * has work pending. Synchronous copies and memsets (device.c) are default-stream operations run
 * on the calling thread: they wait for the default stream and every blocking stream as of the
 * call, and return with the data in place, so work queued afterwards on any stream sees it.
 * Synchronizing or querying the default stream covers the blocking streams' work too. While a
 * blocking stream is capturing, the default stream is unusable (an implicit dependency on the
 * capture): BG_ERR_STREAM_CAPTURE_IMPLICIT, and the capture is invalidated; it cannot join a
 * capture through an event either.
 */
#ifndef BUNGPU_CPU_BACKEND_H
#define BUNGPU_CPU_BACKEND_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "../internal.h"
#include "../bungpu_cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Name a thread (shows in debuggers, top -H and /proc/<pid>/task/<tid>/comm). On Linux the
 * creator names it as soon as it exists (cpu_name_started), so no one sees it unnamed; macOS can
 * only name the calling thread, so there the thread names itself (cpu_name_thread). */
void cpu_name_thread(const char* name);
void cpu_name_started(pthread_t t, const char* name);
#include <string.h>

/* Launch limits: cpu_check_launch refuses past them and bg_device_props reports them (CUDA's). */
#define CPU_MAX_SHARED (48u * 1024u)
#define CPU_MAX_THREADS 1024
#define CPU_MAX_BLOCK_XY 1024u
#define CPU_MAX_BLOCK_Z 64u
#define CPU_MAX_GRID_X 0x7fffffffu
#define CPU_MAX_GRID_YZ 65535u
#define CPU_MAX_GRID_BLOCKS 0xffffffffull /* linear block indices are 32-bit */
#define CPU_INLINE_ARGS 8
#define CPU_SPIN_NS 30000ull      /* an idle worker spins this long before it sleeps */
#define CPU_SYNC_SPIN_NS 50000ull /* a waiting host thread spins this long before it sleeps */
#define CPU_POP_BATCH 32          /* ops a worker takes from its queue under one lock */
#define CPU_QUEUE_MAX (1u << 16)  /* ops a stream queues before enqueue blocks (CUDA blocks too) */

typedef void (*cpu_kfn)(const bg_cpu_ctx*);

struct cpu_kernel;
struct cpu_event;
struct cpu_exec;
struct cpu_xargs;
struct cpu_stream;
struct cpu_capture;
struct cpu_device;
struct cpu_mempool;
struct cpu_gmem;

enum {
  OP_KERNEL = 1,
  OP_COPY,
  OP_MEMSET,
  OP_HOST,
  OP_RECORD,
  OP_WAIT,
  OP_GRAPH,
  OP_CMDS,
  OP_RELEASE,   /* drops a reference on a cpu_deferred when the stream reaches it */
  OP_NOTIFY,    /* calls u.hf.fn after counting itself completed (bg_stream_notify) */
  OP_WAIT_STREAM /* legacy implicit sync: waits until another stream has completed `target` ops */
};

/* Something freed once every stream has finished the work queued before the free. */
typedef struct cpu_deferred {
  _Atomic int32_t refs;
  void (*fn)(void*); /* NULL: cpu_memory_free(arg, bytes) (cpu_defer_memory) */
  void* arg;
  uint64_t bytes;
} cpu_deferred;

/* One queued (or captured) operation. Owns what it points to: heap args, event references,
 * exec references, command bytes. cpu_op_release gives them back. */
typedef struct cpu_op {
  uint32_t kind;
  uint32_t nargs; /* OP_KERNEL */
  union {
    struct {
      struct cpu_kernel* k;
      uint32_t grid[3], block[3], shared;
      uint32_t knode;  /* in a graph exec: index of the kernel node (args live in the exec) */
      uint64_t* heap;  /* args when nargs > CPU_INLINE_ARGS */
      uint64_t inl[CPU_INLINE_ARGS];
    } l;
    struct {
      void* dst;
      const void* src;
      uint64_t n;
      uint32_t staged; /* a copy between devices without peer access: through a bounce buffer */
    } cp;
    struct {
      void* dst;
      uint64_t count;
      uint32_t pattern, esz;
    } ms;
    struct {
      bg_host_fn fn;
      void* user;
    } hf;
    struct {
      struct cpu_event* e;
      uint64_t seq; /* record: this record's number; wait: the record to wait for. In an exec:
                       the slot of the per-launch sequence array */
    } ev;
    struct {
      struct cpu_exec* x;
      struct cpu_xargs* a;
      uint64_t* seqs;
      uint64_t ticket; /* this launch's turn among the exec's launches (cpu_exec.serving) */
    } g;
    struct {
      uint8_t* bytes;
      uint64_t len;
      uint64_t* seqs;           /* per event command, in order */
      struct cpu_event** evs;   /* per event command, referenced */
      uint32_t nev;
    } cmd;
    struct {
      cpu_deferred* def;
    } rel;
    struct {
      struct cpu_stream* s; /* referenced (cpu_stream_retain) */
      uint64_t target;
    } ws;
  } u;
} cpu_op;

static inline const uint64_t* cpu_op_args(const cpu_op* op) {
  return op->nargs > CPU_INLINE_ARGS ? op->u.l.heap : op->u.l.inl;
}

/* ---- allocation table: address -> size, open addressing ----------------------------------- */
typedef struct cpu_table {
  uint64_t* keys; /* 0 empty, 1 deleted */
  uint64_t* vals;
  size_t cap, used, live;
} cpu_table;

int cpu_table_put(cpu_table* t, uint64_t k, uint64_t v); /* 0 ok, -1 out of memory */
int cpu_table_del(cpu_table* t, uint64_t k);             /* 1 removed, 0 absent */
void cpu_table_free_all(cpu_table* t, int free_keys);    /* cpu_memory_free(key, value) for each live key */

/* ---- host memory (hostmem.c) ------------------------------------------------------------- */
/* Blocks of at least this many bytes are mmap'ed (glibc's own initial mmap threshold), so their
 * pages go back to the system at free whatever malloc's dynamic threshold has become; freed
 * mappings totalling at most CPU_MAP_KEEP bytes are kept for reuse. */
#define CPU_MAP_MIN ((uint64_t)128 << 10)
#define CPU_MAP_KEEP ((size_t)16 << 20)
size_t cpu_page_size(void);
/* 64-byte-aligned host memory (page-aligned when mapped); NULL when out of memory. */
void* cpu_memory_alloc(uint64_t bytes);
/* Give back a block of cpu_memory_alloc; `bytes` is the size it was allocated with. */
void cpu_memory_free(void* p, uint64_t bytes);

/* ---- kernel thread pool ------------------------------------------------------------------ */
typedef struct cpu_pool_thread {
  struct cpu_pool* pool;
  uint32_t index;
} cpu_pool_thread;

typedef struct cpu_pool {
  pthread_mutex_t launch_mu; /* one launch uses the pool at a time */
  pthread_mutex_t mu;
  pthread_cond_t cv_start, cv_done;
  uint32_t nslots;   /* workers, the launching thread being slot 0 */
  uint32_t nthreads; /* pool threads started (slots 1..nthreads) */
  int started;       /* tried to start the threads (under launch_mu) */
  pthread_t* threads;
  cpu_pool_thread* targs;
  void** scratch; /* per slot, CPU_MAX_SHARED bytes */
  _Atomic uint64_t gen;
  int sleepers, stop, launcher_waiting; /* under mu */
  /* the current job, written under mu */
  cpu_kfn fn;
  const char* kname; /* for a fault's message (checked mode) */
  bg_cpu_ctx ctx;
  uint32_t nparticipants;
  uint64_t total, chunk;
  _Atomic uint64_t next;
  _Atomic uint32_t pending;
} cpu_pool;

/* ---- objects ----------------------------------------------------------------------------- */
typedef struct cpu_device {
  bg_device base;
  int32_t ncores;
  uint64_t total_mem;
  char name[256];
  pthread_mutex_t mem_mu;
  cpu_table dmem, hmem;
  pthread_mutex_t streams_mu;
  struct cpu_stream* streams; /* user streams, a list */
  _Atomic int32_t nblocking;  /* user streams created without BG_STREAM_NON_BLOCKING */
  pthread_mutex_t cap_mu;
  struct cpu_capture* caps; /* active captures */
  _Atomic int32_t ncaps;
  uint64_t next_cap_id;
  cpu_pool pool;
  /* memory pools (pool_mem.c): every block a pool holds, by address, under pmem_mu */
  pthread_mutex_t pmem_mu;
  struct cpu_block** pblocks; /* CPU_PBUCKETS chains */
  struct cpu_mempool* pools;  /* every pool, the default one included */
  struct cpu_mempool* default_pool;
  /* shareable allocations and opened mappings (ipc.c), a list under ipc_mu */
  pthread_mutex_t ipc_mu;
  struct cpu_ipc_map* ipc_maps;
  /* checked mode (BUNGPU_CHECK=1): guard pages around allocations, and a fault inside a kernel
   * becomes this sticky error (BG_ERR_ILLEGAL_ADDRESS) that every later call returns */
  int checked;
  _Atomic int32_t sticky;
  char sticky_msg[320]; /* written once, before sticky is set */
  pthread_mutex_t sticky_mu;
} cpu_device;

typedef struct cpu_stream {
  bg_obj h;
  cpu_device* dev;
  uint32_t flags;
  /* the handle plus each pending OP_WAIT_STREAM (or host wait) naming this stream: the counters,
   * mutex and condition variables outlive bg_stream_destroy until the last reference goes */
  _Atomic int32_t refs;
  int32_t prio;
  pthread_t thread;
  int thread_ok;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done, cv_space;
  cpu_op* q;
  uint32_t qcap;            /* power of two */
  uint64_t head, tail;      /* under mu */
  int sleeping, stop;       /* under mu */
  uint32_t space_waiters;   /* under mu */
  _Atomic uint64_t enqueued, completed;
  _Atomic int32_t waiters;
  _Atomic int32_t resident; /* running a persistent ring kernel (see defer_on in queue.c) */
  void* scratch; /* CPU_MAX_SHARED bytes: shared memory for launches run on this worker */
  /* capture membership: cap is read without the lock on the fast path; D (the nodes the
   * stream's next node depends on) is under dev->cap_mu */
  _Atomic(struct cpu_capture*) cap;
  uint32_t* D;
  uint32_t nD, cD;
  struct cpu_stream *prev, *next; /* dev->streams, under dev->streams_mu */
} cpu_stream;

typedef struct cpu_event {
  bg_obj h;
  cpu_device* dev;
  uint32_t flags;
  _Atomic int32_t refs; /* the handle plus each op that names it */
  _Atomic uint64_t rec_seq;  /* records issued */
  _Atomic uint64_t done_seq; /* highest record reached */
  /* where the two numbers live: rec_seq and done_seq above, or, for an interprocess event
   * (BG_EVENT_INTERPROCESS, or opened from a handle), a page shared with other processes */
  _Atomic uint64_t* recp;
  _Atomic uint64_t* donep;
  struct cpu_ipc_page* shm; /* the shared page, or NULL */
  int shm_fd;               /* its memfd (kept for re-export), or -1 */
  uint64_t shm_id;          /* its number in the memfd's name: "bungpu-event-<pid>-<id>" */
  uint64_t ts_ns;            /* time the record done_seq was reached; under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic int32_t waiters;
  /* capture: under dev->cap_mu (cap_id read atomically on fast paths) */
  _Atomic uint64_t cap_id;
  uint32_t cap_node;
  uint32_t* capdeps;
  uint32_t ncapdeps;
} cpu_event;

typedef struct cpu_module cpu_module;
typedef struct cpu_kernel {
  bg_obj h;
  cpu_module* mod;
  /* read by the workers at each launch; bg_kernel_retarget swaps it */
  _Atomic(cpu_kfn) fn;
  /* the module `fn` lies in when retargeted (held until `mod` is freed), else NULL */
  cpu_module* code_mod;
  char* name;
  int persistent; /* bungpu's persistent ring kernel (bg_ring_persistent): never ends alone */
  struct cpu_kernel* next;
} cpu_kernel;

struct cpu_module {
  bg_obj h;
  void* lib;          /* dlopen handle (BG_IMAGE_SHARED_LIBRARY), or NULL */
  char** sym_names;   /* BG_IMAGE_SYMBOLS: copied names and their functions */
  void** sym_fns;
  uint32_t nsyms;
  pthread_mutex_t mu;
  cpu_kernel* kernels;
  /* 1 for the loaded module, +1 per captured kernel node and per exec op using one of its
   * kernels: the library is closed when the last goes (after the work queued before it) */
  _Atomic int32_t refs;
};

typedef struct cpu_node {
  cpu_op op;
  uint32_t* deps;
  uint32_t ndeps;
  uint8_t internal; /* a record that only expressed a join inside the capture */
} cpu_node;

typedef struct cpu_capture {
  uint64_t id;
  int32_t mode;
  pthread_t thread;
  cpu_stream* origin;
  int invalid;
  char why[200];
  cpu_node* nodes;
  uint32_t n, cap;
  cpu_stream** streams;
  uint32_t nstreams, cstreams;
  struct cpu_gmem* gmem; /* memory allocated on its streams (pool_mem.c); passes to the graph */
  struct cpu_capture* next;
} cpu_capture;

typedef struct cpu_graph {
  bg_obj h;
  cpu_node* nodes;
  uint32_t n, nvisible, nkernels;
  struct cpu_gmem* gmem; /* memory allocated during its capture, or NULL */
} cpu_graph;

typedef struct cpu_xargs {
  _Atomic int32_t refs;
  uint64_t data[];
} cpu_xargs;

typedef struct cpu_exec {
  bg_obj h;
  _Atomic int32_t refs; /* the handle plus each queued launch */
  pthread_mutex_t mu;     /* args and launch bookkeeping */
  pthread_mutex_t run_mu; /* guards the turn below */
  /* Replays run one at a time, in launch order across all streams (as CUDA orders each launch
   * of an exec behind the previous ones): a launch takes a ticket (under mu, enqueued before mu
   * is released) and runs when `serving` reaches it. Without the order, a later launch could take
   * the exec first and wait on an event that only work queued behind an earlier launch records:
   * a deadlock. A launch that never runs (refused or abandoned) lands in `skip`. */
  pthread_cond_t turn;
  uint64_t next_ticket, serving;
  uint64_t* skip;
  uint32_t nskip, capskip;
  cpu_op* ops;
  uint32_t nops, nk, nev, nargs_total;
  uint32_t* koff;   /* per kernel node: offset into args data */
  uint32_t* knargs; /* per kernel node: its nargs */
  uint32_t* evslot_op; /* per event slot: op index */
  cpu_xargs* args;  /* current arguments (copy on write) */
  struct cpu_gmem* gmem; /* its graph's memory, held while the exec lives */
} cpu_exec;

/* ---- cross-file functions ---------------------------------------------------------------- */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* pool.c */
void cpu_fault_init(void); /* install the SIGSEGV/SIGBUS handler (once), chained to the previous one */
/* Record a kernel's fault as the device's sticky error (the first one wins). */
void cpu_set_sticky(cpu_device* d, int32_t code, const char* msg);
int32_t cpu_pool_init(cpu_pool* p, uint32_t nslots);
void cpu_pool_destroy(cpu_pool* p);
/* Run a launch to completion on the calling stream worker. */
void cpu_kernel_run(struct cpu_stream* s, cpu_kernel* k, const uint32_t g[3], const uint32_t b[3],
                    uint32_t shared, const uint64_t* args);

/* event.c */
void cpu_event_retain(cpu_event* e);
void cpu_event_release(cpu_event* e);
void cpu_event_complete(cpu_event* e, uint64_t seq);
/* Wait until record `seq` is reached. An interprocess event whose pending records were issued
 * only by processes that died: BG_ERR_ILLEGAL_STATE (a queued stream wait then ends). */
int32_t cpu_event_wait_seq(cpu_event* e, uint64_t seq);
/* Take the next record number (and, for an interprocess event, note this process issued it). */
uint64_t cpu_event_take_seq(cpu_event* e);
/* BG_ERR_ILLEGAL_STATE naming `fn` when record `seq` of an interprocess event can never be
 * reached (its issuers died); else BG_OK. */
int32_t cpu_event_check_peer(cpu_event* e, uint64_t seq, const char* fn);
/* Whether process `pid` still exists (Linux: a zombie, killed and not yet reaped, does not). */
int cpu_pid_alive(int32_t pid);
/* Interprocess events: move the numbers into a new shared page (cpu_event_share), or into the
 * page of an exporting process's event (cpu_event_attach: `pid`, its memfd number and id). Off
 * Linux: BG_ERR_NOT_SUPPORTED. */
int32_t cpu_event_share(cpu_event* e);
int32_t cpu_event_attach(cpu_event* e, int32_t pid, int32_t fd, uint64_t id);
/* Open /proc/<pid>/fd/<fd> after checking that it is the memfd named `name` (ipc.c as well). */
int32_t cpu_ipc_open_fd(const char* fn, int32_t pid, int32_t fd, const char* name, int* out);

/* queue.c */
/* Copy `op` to the end of the stream's queue (the worker owns it from then on), waking the
 * worker if it sleeps; blocks while CPU_QUEUE_MAX ops are queued. 0, or -1 when out of memory
 * for a bigger queue: nothing was queued and `op` is still the caller's. No implicit waits, no
 * capture: cpu_enqueue (stream.c) is the way in for work. */
int cpu_queue_push(cpu_stream* s, const cpu_op* op);
void cpu_stream_wait_idle(cpu_stream* s);
void cpu_stream_wait_count(cpu_stream* s, uint64_t target); /* until `target` ops completed */
void cpu_stream_retain(cpu_stream* s);
void cpu_stream_release(cpu_stream* s);
static inline int cpu_stream_is_default(const cpu_stream* s) {
  return (const void*)s == s->dev->base.default_stream;
}
static inline int cpu_stream_blocking(const cpu_stream* s) {
  return !cpu_stream_is_default(s) && !(s->flags & BG_STREAM_NON_BLOCKING);
}
/* The capture `s` records into, with the device's cap_mu held; NULL (nothing held) when it is not
 * capturing. Here, not in capture.c: pool_mem.c, below capture.c, takes it too. */
static inline struct cpu_capture* cpu_capture_lock(cpu_stream* s) {
  if (!atomic_load_explicit(&s->cap, memory_order_acquire)) return NULL;
  pthread_mutex_lock(&s->dev->cap_mu);
  struct cpu_capture* c = atomic_load(&s->cap);
  if (!c) pthread_mutex_unlock(&s->dev->cap_mu);
  return c;
}
/* A snapshot of streams and the enqueued count of each, taken at one moment; each referenced. */
typedef struct cpu_snap {
  cpu_stream* s;
  uint64_t target;
} cpu_snap;
typedef struct cpu_snaps {
  cpu_snap* v;
  uint32_t n, cap;
  cpu_snap local[8];
} cpu_snaps;
/* Streams of `d` with work pending: the default stream when `with_default`, the blocking user
 * streams, and the non-blocking ones too when `all`. 0, or -1 when out of memory. */
int cpu_snap_streams(cpu_device* d, cpu_snaps* out, int with_default, int all);
void cpu_snaps_wait(cpu_snaps* sn); /* waits for each (skipping the calling worker's own stream) */
void cpu_snaps_free(cpu_snaps* sn);
/* The host-side half of a legacy (default-stream) synchronous operation: wait for the default
 * stream and every blocking stream as of now. */
void cpu_legacy_wait_host(cpu_device* d);
void cpu_device_wait_all(cpu_device* d); /* wait for every stream's queued work */
/* Call fn(arg) once every stream has finished the work queued so far; never blocks. */
void cpu_defer(cpu_device* d, void (*fn)(void*), void* arg);
/* The same for cpu_memory_free(p, bytes): a block of cpu_memory_alloc given back. */
void cpu_defer_memory(cpu_device* d, void* p, uint64_t bytes);
void cpu_deferred_release(cpu_deferred* df);

/* pool_mem.c */
void cpu_pmem_init(cpu_device* d);
void cpu_pmem_close(cpu_device* d); /* before the streams go: frees every pool and block */
void cpu_pmem_sync_release(cpu_device* d); /* at a synchronize: pools above their threshold */
void cpu_gmem_retain(struct cpu_gmem* g);
void cpu_gmem_release(struct cpu_gmem* g); /* the last reference frees the graph's memory */
int cpu_gmem_exec_open(struct cpu_gmem* g); /* one exec at a time of a graph with memory: 0, or -1 */
void cpu_gmem_exec_close(struct cpu_gmem* g);
int32_t cpu_mempool_create(bg_device* dev, uint64_t threshold, void** out);
int32_t cpu_mempool_default(bg_device* dev, void** out);
int32_t cpu_mempool_destroy(void* pool);
int32_t cpu_mempool_set_threshold(void* pool, uint64_t threshold);
int32_t cpu_mempool_trim(void* pool, uint64_t keep);
int32_t cpu_mempool_stats(void* pool, uint64_t out[4]);
int32_t cpu_mempool_reset_peak(void* pool);
int32_t cpu_mem_alloc_async(void* s, void* pool, uint64_t bytes, bg_devptr* out);
int32_t cpu_mem_free_async(void* s, bg_devptr p);

/* module.c */
int32_t cpu_module_load(bg_device* dev, int32_t kind, const void* data, uint64_t n, void** out);
int32_t cpu_module_unload(void* m);
void cpu_module_hold(cpu_module* m);
void cpu_module_unhold(cpu_module* m);
int32_t cpu_module_get_kernel(void* m, const char* name, void** out);
int32_t cpu_kernel_max_threads(void* k, int32_t* out);
int32_t cpu_kernel_retarget(void* k, void* from);

/* run.c */
void cpu_fill(void* dst, uint32_t pattern, uint32_t esz, uint64_t count);
void cpu_copy(void* dst, const void* src, uint64_t n, uint32_t staged); /* OP_COPY */
void cpu_op_run(cpu_stream* s, cpu_op* op); /* on the stream's worker */
void cpu_op_release(cpu_op* op);
/* An op that will never run: complete the event records it issued (and pass over a graph
 * launch's turn), so nothing waits forever; then release it. */
void cpu_op_abandon(cpu_op* op);
void cpu_exec_run(cpu_stream* s, cpu_exec* x, cpu_xargs* a, const uint64_t* seqs, uint64_t ticket);
void cpu_exec_skip(cpu_exec* x, uint64_t ticket);
void cpu_exec_release(cpu_exec* x);
void cpu_xargs_release(cpu_xargs* a);
void cpu_cmds_run(cpu_stream* s, cpu_op* op);

/* capture.c */
int32_t cpu_capture_guard(cpu_device* d, const char* fn);
int32_t cpu_capture_guard_stream(cpu_stream* s, const char* fn);
int32_t cpu_capture_guard_event(cpu_event* e, const char* fn);
/* Default-stream use while a blocking stream captures: BG_ERR_STREAM_CAPTURE_IMPLICIT. */
int32_t cpu_capture_implicit(cpu_device* d, const char* fn);
int32_t cpu_capture_add(cpu_stream* s, cpu_op* op, const char* fn, int* handled);
int32_t cpu_capture_record(cpu_stream* s, cpu_event* e, int* handled);
int32_t cpu_capture_wait(cpu_stream* s, cpu_event* e, int* handled);
void cpu_capture_stream_gone(cpu_stream* s);
void cpu_capture_free_all(cpu_device* d);
void cpu_nodes_free(cpu_node* nodes, uint32_t n); /* a graph's or a capture's nodes */
int32_t cpu_begin_capture(void* s, int32_t mode);
int32_t cpu_end_capture(void* s, void** out_graph);
int32_t cpu_capture_status(void* s, int32_t* out);

/* stream.c */
int32_t cpu_stream_new(cpu_device* d, uint32_t flags, int32_t prio, cpu_stream** out);
void cpu_stream_free(cpu_stream* s); /* waits, stops, joins, frees */
int32_t cpu_enqueue(cpu_stream* s, cpu_op* op, const char* fn); /* releases op on failure */
/* cpu_enqueue in two halves, for ops that take event record numbers: the legacy default stream's
 * implicit waits (or its refusal during a global capture) first, then the op itself. */
int32_t cpu_legacy_deps(cpu_stream* s, const char* fn);
int32_t cpu_enqueue_raw(cpu_stream* s, cpu_op* op, const char* fn); /* releases op on failure */
int32_t cpu_submit_op(cpu_stream* s, cpu_op* op, const char* fn); /* capture or enqueue */

int32_t cpu_stream_create(bg_device* dev, uint32_t flags, int32_t prio, void** out);
int32_t cpu_stream_destroy(void* s);
int32_t cpu_stream_synchronize(void* s);
int32_t cpu_stream_query(void* s);
int32_t cpu_stream_wait_event(void* s, void* e);
int32_t cpu_memcpy_htod_async(void* s, bg_devptr dst, const void* src, uint64_t n);
int32_t cpu_memcpy_dtoh_async(void* s, void* dst, bg_devptr src, uint64_t n);
int32_t cpu_memcpy_dtod_async(void* s, bg_devptr dst, bg_devptr src, uint64_t n);
int32_t cpu_memcpy_peer_async(void* s, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                              bg_device* src_dev, uint64_t n, int peer);
int32_t cpu_memset_async(void* s, bg_devptr dst, uint32_t pattern, uint32_t esz, uint64_t count);
int32_t cpu_launch_host_func(void* s, bg_host_fn fn, void* user);
int32_t cpu_stream_notify(void* s, bg_host_fn fn, void* user);
int32_t cpu_event_create(bg_device* dev, uint32_t flags, void** out);
int32_t cpu_event_destroy(void* e);
int32_t cpu_event_record(void* e, void* s);
int32_t cpu_event_query(void* e);
int32_t cpu_event_synchronize(void* e);
int32_t cpu_event_elapsed(float* ms, void* a, void* b);
int32_t cpu_check_launch(const char* fn, const uint32_t g[3], const uint32_t b[3], uint32_t shared);
int32_t cpu_launch(void* k, void* s, const uint32_t grid[3], const uint32_t block[3],
                   uint32_t shared, const uint64_t* args, uint32_t nargs);

/* ipc.c: memory and events shared between processes (the vtable's mem_alloc_shareable and
 * ipc_* entries). cpu_ipc_free: 1 when `p` was a shareable allocation or an opened mapping of
 * `d` (a shareable one is released after the queued work, an opened one is refused:
 * *rc = BG_ERR_INVALID_VALUE), 0 when it is none of them. cpu_ipc_close_all: at device close. */
int32_t cpu_mem_alloc_shareable(bg_device* dev, uint64_t bytes, bg_devptr* out);
int32_t cpu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes);
int32_t cpu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                         bg_devptr* out);
int32_t cpu_ipc_mem_close(bg_device* dev, bg_devptr p);
int32_t cpu_ipc_event_export(void* e, uint8_t* payload);
int32_t cpu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out);
int cpu_ipc_free(cpu_device* d, bg_devptr p, int32_t* rc);
void cpu_ipc_close_all(cpu_device* d);

/* graph.c */
int32_t cpu_graph_destroy(void* g);
int32_t cpu_graph_node_count(void* g, uint32_t* nodes, uint32_t* kernel_nodes);
int32_t cpu_graph_instantiate(void* g, void** out_exec);
int32_t cpu_graph_exec_destroy(void* x);
int32_t cpu_graph_upload(void* x, void* s);
int32_t cpu_graph_launch(void* x, void* s);
int32_t cpu_graph_exec_set_kernel_args(void* x, uint32_t index, const uint64_t* args,
                                       uint32_t nargs);
int32_t cpu_submit(void* s, const uint8_t* bytes, uint64_t len);
int32_t cpu_submit_wait(void* s, const uint8_t* bytes, uint64_t len, uint32_t flags);
/* Set on a thread while it runs a list submitted with BG_SUBMIT_SERIAL: its launches skip the pool. */
extern _Thread_local int cpu_t_serial;
/* cmdgraph.c: a native graph from a validated command list (bg_graph_from_commands). */
int32_t cpu_graph_from_commands(bg_device* dev, const uint8_t* p, uint64_t len, void** out);

/* collective.c: communicators (bungpu.h, "collectives"), as host functions on streams. */
extern const bg_coll_ops cpu_coll_ops;

/* device.c */
extern const bg_ops bg_cpu_ops;     /* the backend's record in the table (backends.c) */

/* checked.c: checked mode */
int cpu_checked_mode(void); /* BUNGPU_CHECK=1 (read once) */
/* device_ops with each entry that runs, queues or waits for work first returning the sticky error */
const bg_ops* cpu_checked_ops(const bg_ops* device_ops);
void* cpu_guarded_alloc(uint64_t bytes); /* between PROT_NONE guard pages; NULL when out of memory */
void cpu_guarded_free(void* p, uint64_t bytes);
typedef struct cpu_guarded_block {
  void* p;
  uint64_t bytes;
} cpu_guarded_block;
void cpu_guarded_release(void* block); /* frees a malloc'd cpu_guarded_block and its memory (cpu_defer) */

#endif /* BUNGPU_CPU_BACKEND_H */
