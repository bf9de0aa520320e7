/*
 * cpu/collective.c: communicators of the CPU backend (bungpu.h, "collectives"): the CPU devices
 * of one process (bg_comm_init_all), or ranks in processes of one machine (bg_comm_init_rank with
 * an id from bg_comm_unique_id), through one segment of memory every rank maps: anonymous memory
 * for init_all, a shared-memory file named from the id otherwise (/dev/shm on Linux, shm_open on
 * macOS). Above stream.c: a collective is a host function on the rank's stream (cpu_launch_host_func),
 * so it is stream-ordered and stream capture records it like any host function.
 *
 * The segment: a header (the rank count, who joined, the abort word and its message, one
 * barrier counter and one call descriptor per rank), then one staging slot per rank for
 * collectives, then one single-slot channel per ordered pair of ranks for sends and receives.
 *  - Collectives run in rounds over the data, a slot's worth at a time: each rank copies its part
 *    into its slot, all meet at a barrier, each rank computes its own result from every slot,
 *    all meet again (then the slots may be reused). A collective begins with a barrier on the
 *    ranks' descriptors (kind, count, type, reduction, root): a mismatch aborts the communicator
 *    on every rank alike, with a message naming both calls.
 *  - A barrier is a counter per rank: rank r stores its n-th arrival, and waits until every
 *    counter reaches n. Counters only grow, so no reset races.
 *  - Sends and receives: channel (a -> b) holds one chunk; the sender posts when the receiver took
 *    the previous one. A job's sends and receives progress together without blocking on any one,
 *    so grouped sends and receives between the same ranks cannot deadlock; the operations to one
 *    peer keep their order.
 * Waiting spins a little, then yields, then sleeps briefly; it ends early when the communicator is
 * aborted (bg_comm_abort on any rank, or a timeout, which aborts it with BG_ERR_LAUNCH_TIMEOUT,
 * or a rank's process found dead, or a rank destroyed while its calls wait for ranks that do not
 * move: both BG_ERR_ILLEGAL_STATE). A rank of an id is claimed by an abstract socket name held
 * while its communicator lives (Linux), so a second init_rank with a taken rank is refused even
 * after the segment's file is gone.
 * Reductions run in the element type (float16 and bfloat16 in float, rounded once at the end),
 * over ranks in order 0..n-1, so every rank gets the same bits; integer sums and products wrap.
 * The calls of one communicator run one at a time (a mutex), in the order their streams reach
 * them.
 *
 * One file over 600 lines: the segment's layout, the waits on it, the rounds of each collective,
 * the channels and the reductions they run all read the same private types (the header, the
 * slots, the channels), which nothing else in the backend needs to see.
 *
 * Calls: event.c, capture.c, stream.c, base.c.
 */
#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/socket.h>
#include <sys/un.h>
#endif

#define COLL_MAX_RANKS 16
#define COLL_SLOT (1024u * 1024u) /* staging bytes per rank */
#define P2P_SLOT (64u * 1024u)   /* bytes per channel chunk */
#define COLL_MAGIC 0x62676d6d6f633031ull
static const char ID_MAGIC[16] = "bungpu-cpu-comm";

typedef struct coll_desc {
  int32_t coll, dtype, redop, peer;
  uint64_t count;
} coll_desc;

typedef struct seg_hdr {
  uint64_t magic;
  _Atomic int32_t nranks;
  _Atomic int32_t joined;
  _Atomic int32_t attached;
  _Atomic int32_t aborted; /* 0, -1 while the message is written, or the code */
  char why[384];
  _Atomic int32_t claimed[COLL_MAX_RANKS];
  _Atomic int32_t pid[COLL_MAX_RANKS]; /* each joined rank's process (a wait notices it died) */
  struct {
    _Atomic uint64_t v;
    char pad[56];
  } arrive[COLL_MAX_RANKS];
  coll_desc desc[COLL_MAX_RANKS];
} seg_hdr;

typedef struct chan {
  _Atomic uint64_t posted, taken;
  uint64_t bytes, total;
  char pad[32];
} chan;

static size_t slots_off(void) { return (sizeof(seg_hdr) + 63) & ~(size_t)63; }
static size_t chans_off(int n) { return slots_off() + (size_t)n * COLL_SLOT; }
static size_t chan_stride(void) { return sizeof(chan) + P2P_SLOT; }
static size_t seg_size(int n) { return chans_off(n) + (size_t)n * (size_t)n * chan_stride(); }

/* The local view of a segment; init_all's ranks share one. */
typedef struct cpu_seg {
  uint8_t* base;
  size_t size;
  int shm;
  char name[64];
  _Atomic int32_t refs;
} cpu_seg;

typedef struct cpu_job cpu_job;

typedef struct cpu_comm {
  bg_obj h;
  cpu_seg* seg;
  int32_t rank, nranks;
  uint64_t bar; /* barriers this rank passed (under run_mu) */
  uint64_t ncalls;
  pthread_mutex_t run_mu;
  _Atomic uint32_t timeout_ms;
  _Atomic int64_t pending; /* one-shot jobs queued and not yet run */
  pthread_mutex_t keep_mu;
  cpu_job* keep; /* jobs recorded into captures: they live as long as the communicator */
  int claim_fd;  /* init_rank on Linux: the socket bound to the rank's name, or -1 */
} cpu_comm;

struct cpu_job {
  cpu_comm* comm;
  int once;
  uint32_t n;
  cpu_job* next;
  bg_coll_call calls[];
};

static seg_hdr* HDR(cpu_comm* c) { return (seg_hdr*)c->seg->base; }
static uint8_t* SLOT(cpu_comm* c, int r) { return c->seg->base + slots_off() + (size_t)r * COLL_SLOT; }
static chan* CHAN(cpu_comm* c, int from, int to) {
  return (chan*)(c->seg->base + chans_off(c->nranks) + ((size_t)from * (size_t)c->nranks + (size_t)to) * chan_stride());
}

static const char* coll_name(int32_t k) {
  static const char* n[] = {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send", "recv"};
  return k >= 0 && k <= 6 ? n[k] : "?";
}
static const char* dtype_name(int32_t t) {
  static const char* n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
  return t >= 0 && t <= 9 ? n[t] : "?";
}
static uint32_t esize(int32_t t) {
  switch (t) {
    case BG_DTYPE_INT8: case BG_DTYPE_UINT8: return 1;
    case BG_DTYPE_FLOAT16: case BG_DTYPE_BFLOAT16: return 2;
    case BG_DTYPE_INT32: case BG_DTYPE_UINT32: case BG_DTYPE_FLOAT32: return 4;
    default: return 8;
  }
}

/* ---- aborting and waiting ------------------------------------------------------------------ */
static void seg_abort(cpu_comm* c, int32_t code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void seg_abort(cpu_comm* c, int32_t code, const char* fmt, ...) {
  seg_hdr* h = HDR(c);
  int32_t zero = 0;
  if (!atomic_compare_exchange_strong(&h->aborted, &zero, -1)) return; /* the first reason wins */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->why, sizeof h->why, fmt, ap);
  va_end(ap);
  atomic_store_explicit(&h->aborted, code, memory_order_release);
}

static int aborted(cpu_comm* c) { return atomic_load_explicit(&HDR(c)->aborted, memory_order_acquire) != 0; }

typedef struct waiter {
  uint64_t spins, start_ns, checked_ns;
} waiter;

/* A joined rank's process that no longer exists, or -1. */
static int dead_rank(cpu_comm* c, int32_t* pid_out) {
  seg_hdr* h = HDR(c);
  int32_t self = (int32_t)getpid();
  for (int r = 0; r < c->nranks; r++) {
    int32_t pid = atomic_load_explicit(&h->pid[r], memory_order_acquire);
    if (pid > 0 && pid != self && !cpu_pid_alive(pid)) {
      *pid_out = pid;
      return r;
    }
  }
  return -1;
}

/* One step of a wait: 0 to keep waiting, 1 when the communicator is aborted (or timed out). */
static int wait_step(cpu_comm* c, waiter* w, const char* what) {
  if (aborted(c)) return 1;
  w->spins++;
  if (w->spins < 2000) {
    cpu_relax();
    return 0;
  }
  if (!w->start_ns) w->start_ns = bg_now_ns();
  if (w->spins < 2200) {
    sched_yield();
    return 0;
  }
  uint64_t now = bg_now_ns();
  if (now - w->checked_ns > 50000000ull) { /* every 50 ms: has a rank's process died? */
    w->checked_ns = now;
    int32_t pid = 0;
    int r = dead_rank(c, &pid);
    if (r >= 0) {
      seg_abort(c, BG_ERR_ILLEGAL_STATE, "rank %d's process %d exited; rank %d of %d waited for it in %s",
                r, (int)pid, (int)c->rank, (int)c->nranks, what);
      return 1;
    }
  }
  uint32_t ms = atomic_load_explicit(&c->timeout_ms, memory_order_relaxed);
  if (ms && now - w->start_ns > (uint64_t)ms * 1000000ull) {
    seg_abort(c, BG_ERR_LAUNCH_TIMEOUT, "rank %d of %d waited more than %u ms for %s (timeout)", (int)c->rank,
              (int)c->nranks, ms, what);
    return 1;
  }
  struct timespec ts = {0, w->spins < 4000 ? 20000 : 200000};
  nanosleep(&ts, NULL);
  return 0;
}

/* 0 when every rank arrived, 1 when aborted. */
static int barrier(cpu_comm* c, const char* what) {
  seg_hdr* h = HDR(c);
  uint64_t mine = ++c->bar;
  atomic_store_explicit(&h->arrive[c->rank].v, mine, memory_order_release);
  waiter w = {0, 0, 0};
  for (int r = 0; r < c->nranks; r++)
    while (atomic_load_explicit(&h->arrive[r].v, memory_order_acquire) < mine)
      if (wait_step(c, &w, what)) return 1;
  return 0;
}

/* ---- half precision ---------------------------------------------------------------------- */
static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
  if (e == 0) {
    if (!m) u = s;
    else {
      e = 113;
      while (!(m & 1024)) m <<= 1, e--;
      u = s | (e << 23) | ((m & 1023) << 13);
    }
  } else if (e == 31) u = s | 0x7f800000u | (m << 13);
  else u = s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* rounds to infinity */
  if (a < 0x38800000u) {                                /* subnormal or zero */
    if (a < 0x33000000u) return (uint16_t)s;
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(s | r);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1); /* round to nearest even */
  return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}
static float b2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2b(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* ---- reductions: out[i] = op over r of src[r][i], in rank order (out may be src[0]) ------------ */
#define RED_INT(T, UT)                                                                          \
  {                                                                                             \
    T* o = out;                                                                                 \
    if ((const void*)o != (const void*)src[0]) memcpy(o, src[0], m * sizeof(T));                \
    for (int r = 1; r < n; r++) {                                                               \
      const T* x = (const T*)src[r];                                                            \
      switch (op) {                                                                             \
        case BG_RED_SUM: case BG_RED_AVG:                                                       \
          for (uint64_t i = 0; i < m; i++) o[i] = (T)((UT)o[i] + (UT)x[i]);                    \
          break;                                                                                \
        case BG_RED_PROD:                                                                       \
          for (uint64_t i = 0; i < m; i++) o[i] = (T)((UT)o[i] * (UT)x[i]);                    \
          break;                                                                                \
        case BG_RED_MAX:                                                                        \
          for (uint64_t i = 0; i < m; i++) o[i] = x[i] > o[i] ? x[i] : o[i];                   \
          break;                                                                                \
        default:                                                                                \
          for (uint64_t i = 0; i < m; i++) o[i] = x[i] < o[i] ? x[i] : o[i];                   \
          break;                                                                                \
      }                                                                                         \
    }                                                                                           \
    if (op == BG_RED_AVG)                                                                       \
      for (uint64_t i = 0; i < m; i++) o[i] = (T)(o[i] / (T)n);                                 \
  }

#define RED_FLOAT(T)                                                                            \
  {                                                                                             \
    T* o = out;                                                                                 \
    if ((const void*)o != (const void*)src[0]) memcpy(o, src[0], m * sizeof(T));                \
    for (int r = 1; r < n; r++) {                                                               \
      const T* x = (const T*)src[r];                                                            \
      switch (op) {                                                                             \
        case BG_RED_SUM: case BG_RED_AVG: for (uint64_t i = 0; i < m; i++) o[i] = o[i] + x[i]; break; \
        case BG_RED_PROD: for (uint64_t i = 0; i < m; i++) o[i] = o[i] * x[i]; break;          \
        case BG_RED_MAX:                                                                        \
          for (uint64_t i = 0; i < m; i++) o[i] = o[i] != o[i] ? o[i] : (x[i] != x[i] || x[i] > o[i]) ? x[i] : o[i]; \
          break;                                                                                \
        default:                                                                                \
          for (uint64_t i = 0; i < m; i++) o[i] = o[i] != o[i] ? o[i] : (x[i] != x[i] || x[i] < o[i]) ? x[i] : o[i]; \
          break;                                                                                \
      }                                                                                         \
    }                                                                                           \
    if (op == BG_RED_AVG)                                                                       \
      for (uint64_t i = 0; i < m; i++) o[i] = o[i] / (T)n;                                      \
  }

static void reduce_half(void* out, const uint8_t* const* src, int n, uint64_t m, int32_t op, int bf) {
  float acc[256];
  uint16_t* o = out;
  for (uint64_t b = 0; b < m; b += 256) {
    uint64_t k = m - b < 256 ? m - b : 256;
    const uint16_t* x0 = (const uint16_t*)src[0] + b;
    for (uint64_t i = 0; i < k; i++) acc[i] = bf ? b2f(x0[i]) : h2f(x0[i]);
    for (int r = 1; r < n; r++) {
      const uint16_t* x = (const uint16_t*)src[r] + b;
      for (uint64_t i = 0; i < k; i++) {
        float v = bf ? b2f(x[i]) : h2f(x[i]);
        switch (op) {
          case BG_RED_SUM: case BG_RED_AVG: acc[i] += v; break;
          case BG_RED_PROD: acc[i] *= v; break;
          case BG_RED_MAX: if (acc[i] == acc[i] && (v != v || v > acc[i])) acc[i] = v; break;
          default: if (acc[i] == acc[i] && (v != v || v < acc[i])) acc[i] = v; break;
        }
      }
    }
    for (uint64_t i = 0; i < k; i++) {
      float v = op == BG_RED_AVG ? acc[i] / (float)n : acc[i];
      o[b + i] = bf ? f2b(v) : f2h(v);
    }
  }
}

static void reduce(void* out, const uint8_t* const* src, int n, uint64_t m, int32_t dtype, int32_t op) {
  switch (dtype) {
    case BG_DTYPE_INT8: RED_INT(int8_t, uint8_t) break;
    case BG_DTYPE_UINT8: RED_INT(uint8_t, uint8_t) break;
    case BG_DTYPE_INT32: RED_INT(int32_t, uint32_t) break;
    case BG_DTYPE_UINT32: RED_INT(uint32_t, uint32_t) break;
    case BG_DTYPE_INT64: RED_INT(int64_t, uint64_t) break;
    case BG_DTYPE_UINT64: RED_INT(uint64_t, uint64_t) break;
    case BG_DTYPE_FLOAT32: RED_FLOAT(float) break;
    case BG_DTYPE_FLOAT64: RED_FLOAT(double) break;
    case BG_DTYPE_FLOAT16: reduce_half(out, src, n, m, op, 0); break;
    case BG_DTYPE_BFLOAT16: reduce_half(out, src, n, m, op, 1); break;
  }
}

/* ---- one collective, on this rank ------------------------------------------------------------ */
static void run_collective(cpu_comm* c, const bg_coll_call* a) {
  seg_hdr* h = HDR(c);
  int n = c->nranks, me = c->rank;
  uint64_t nth = ++c->ncalls;
  h->desc[me] = (coll_desc){a->coll, a->dtype, a->redop, a->peer, a->count};
  if (barrier(c, coll_name(a->coll))) return;
  const coll_desc* d0 = &h->desc[0];
  for (int r = 1; r < n; r++) {
    const coll_desc* d = &h->desc[r];
    if (d->coll != d0->coll || d->dtype != d0->dtype || d->redop != d0->redop || d->peer != d0->peer ||
        d->count != d0->count) {
      /* every rank sees the same descriptors, so every rank stops here alike, with one message */
      seg_abort(c, BG_ERR_INVALID_VALUE,
                "collective #%llu does not match across ranks: rank 0 called %s(count %llu, %s, op %d, root %d), "
                "rank %d %s(count %llu, %s, op %d, root %d)",
                (unsigned long long)nth, coll_name(d0->coll), (unsigned long long)d0->count, dtype_name(d0->dtype),
                (int)d0->redop, (int)d0->peer, r, coll_name(d->coll), (unsigned long long)d->count,
                dtype_name(d->dtype), (int)d->redop, (int)d->peer);
      return;
    }
  }
  uint32_t es = esize(a->dtype);
  uint8_t* send = (uint8_t*)(uintptr_t)a->send;
  uint8_t* recv = (uint8_t*)(uintptr_t)a->recv;
  const uint8_t* slots[COLL_MAX_RANKS];
  for (int r = 0; r < n; r++) slots[r] = SLOT(c, r);
  uint8_t* mine = SLOT(c, me);
  if (!a->count) { /* no rounds: one more barrier before anyone writes the next descriptor */
    barrier(c, coll_name(a->coll));
    return;
  }
  uint64_t per = a->coll == BG_COLL_REDUCE_SCATTER ? COLL_SLOT / es / (uint64_t)n : COLL_SLOT / es;
  for (uint64_t off = 0; off < a->count; off += per) {
    uint64_t m = a->count - off < per ? a->count - off : per;
    uint64_t b = m * es, at = off * es;
    switch (a->coll) {
      case BG_COLL_ALL_REDUCE:
      case BG_COLL_REDUCE: {
        /* each rank reduces its share of the round (only it reads that share of every slot) into
         * slot 0, then the result is copied out of slot 0 */
        memcpy(mine, send + at, b);
        if (barrier(c, coll_name(a->coll))) return;
        uint64_t lo = m * (uint64_t)me / (uint64_t)n, hi = m * (uint64_t)(me + 1) / (uint64_t)n;
        if (hi > lo) {
          const uint8_t* part[COLL_MAX_RANKS];
          for (int r = 0; r < n; r++) part[r] = slots[r] + lo * es;
          reduce(SLOT(c, 0) + lo * es, part, n, hi - lo, a->dtype, a->redop);
        }
        if (barrier(c, coll_name(a->coll))) return;
        if (a->coll == BG_COLL_ALL_REDUCE || me == a->peer) memcpy(recv + at, slots[0], b);
        break;
      }
      case BG_COLL_BROADCAST:
        if (me == a->peer) memcpy(mine, send + at, b);
        if (barrier(c, coll_name(a->coll))) return;
        memcpy(recv + at, slots[a->peer], b);
        break;
      case BG_COLL_ALL_GATHER:
        memcpy(mine, send + at, b);
        if (barrier(c, coll_name(a->coll))) return;
        for (int r = 0; r < n; r++) memcpy(recv + ((uint64_t)r * a->count + off) * es, slots[r], b);
        break;
      case BG_COLL_REDUCE_SCATTER: {
        for (int r = 0; r < n; r++) memcpy(mine + (uint64_t)r * b, send + ((uint64_t)r * a->count + off) * es, b);
        if (barrier(c, coll_name(a->coll))) return;
        const uint8_t* part[COLL_MAX_RANKS];
        for (int r = 0; r < n; r++) part[r] = slots[r] + (uint64_t)me * b;
        reduce(recv + at, part, n, m, a->dtype, a->redop);
        break;
      }
    }
    if (barrier(c, coll_name(a->coll))) return;
  }
}

/* ---- sends and receives, progressed together ------------------------------------------------- */
typedef struct p2p_state {
  const bg_coll_call* a;
  uint64_t total, done;
  uint64_t chunks, moved; /* chunks to move (at least one, so empty messages match too) */
} p2p_state;

/* One attempt: 1 when a chunk moved. */
static int p2p_try(cpu_comm* c, p2p_state* p) {
  const bg_coll_call* a = p->a;
  if (a->coll == BG_COLL_SEND) {
    chan* ch = CHAN(c, c->rank, a->peer);
    uint64_t posted = atomic_load_explicit(&ch->posted, memory_order_relaxed);
    if (atomic_load_explicit(&ch->taken, memory_order_acquire) != posted) return 0;
    uint64_t k = p->total - p->done < P2P_SLOT ? p->total - p->done : P2P_SLOT;
    if (k) memcpy((uint8_t*)(ch + 1), (const uint8_t*)(uintptr_t)a->send + p->done, k);
    ch->bytes = k;
    ch->total = p->total;
    atomic_store_explicit(&ch->posted, posted + 1, memory_order_release);
    p->done += k;
    p->moved++;
    return 1;
  }
  chan* ch = CHAN(c, a->peer, c->rank);
  uint64_t taken = atomic_load_explicit(&ch->taken, memory_order_relaxed);
  if (atomic_load_explicit(&ch->posted, memory_order_acquire) == taken) return 0;
  if (ch->total != p->total) {
    seg_abort(c, BG_ERR_INVALID_VALUE,
              "rank %d receives %llu bytes from rank %d, which sends %llu bytes (counts or types differ)",
              (int)c->rank, (unsigned long long)p->total, (int)a->peer, (unsigned long long)ch->total);
    return 0;
  }
  if (ch->bytes) memcpy((uint8_t*)(uintptr_t)a->recv + p->done, (const uint8_t*)(ch + 1), ch->bytes);
  p->done += ch->bytes;
  atomic_store_explicit(&ch->taken, taken + 1, memory_order_release);
  p->moved++;
  return 1;
}

static void run_p2p(cpu_comm* c, const bg_coll_call* calls, uint32_t ncalls) {
  p2p_state local[16];
  p2p_state* st = ncalls <= 16 ? local : malloc(ncalls * sizeof *st);
  if (!st) {
    seg_abort(c, BG_ERR_OUT_OF_MEMORY, "rank %d: out of host memory for %u sends and receives", (int)c->rank, ncalls);
    return;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < ncalls; i++) {
    if (calls[i].coll != BG_COLL_SEND && calls[i].coll != BG_COLL_RECV) continue;
    uint64_t total = calls[i].count * esize(calls[i].dtype);
    st[n++] = (p2p_state){&calls[i], total, 0, total ? (total + P2P_SLOT - 1) / P2P_SLOT : 1, 0};
  }
  waiter w = {0, 0, 0};
  for (;;) {
    uint64_t send_busy[2] = {0, 0}, recv_busy[2] = {0, 0}; /* peers with an earlier unfinished op */
    int left = 0, moved = 0;
    for (uint32_t i = 0; i < n; i++) {
      p2p_state* p = &st[i];
      if (p->moved == p->chunks) continue;
      left = 1;
      uint64_t* busy = p->a->coll == BG_COLL_SEND ? send_busy : recv_busy;
      uint32_t peer = (uint32_t)p->a->peer;
      if (busy[peer / 64] & (1ull << (peer % 64))) continue;
      busy[peer / 64] |= 1ull << (peer % 64);
      while (p->moved < p->chunks && p2p_try(c, p)) moved = 1;
    }
    if (!left) break;
    if (moved) {
      w = (waiter){0, 0, 0};
      continue;
    }
    if (wait_step(c, &w, "a matching send or receive")) break;
  }
  if (st != local) free(st);
}

static void job_run(void* user) {
  cpu_job* j = user;
  cpu_comm* c = j->comm;
  pthread_mutex_lock(&c->run_mu);
  int any_p2p = 0;
  for (uint32_t i = 0; i < j->n && !aborted(c); i++) {
    if (j->calls[i].coll == BG_COLL_SEND || j->calls[i].coll == BG_COLL_RECV) any_p2p = 1;
    else run_collective(c, &j->calls[i]);
  }
  if (any_p2p && !aborted(c)) run_p2p(c, j->calls, j->n);
  pthread_mutex_unlock(&c->run_mu);
  if (j->once) {
    free(j);
    atomic_fetch_sub(&c->pending, 1);
  }
}

/* Queue a job of `n` calls on stream `s`. */
static int32_t enqueue(cpu_comm* c, void* s, const bg_coll_call* calls, uint32_t n) {
  cpu_job* j = malloc(sizeof *j + n * sizeof *calls);
  if (!j) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_collective: out of host memory");
  j->comm = c;
  j->n = n;
  j->next = NULL;
  memcpy(j->calls, calls, n * sizeof *calls);
  int32_t st = BG_CAPTURE_NONE;
  cpu_capture_status(s, &st);
  /* a one-shot job frees itself when it has run, maybe before the launch below returns */
  int once = j->once = st == BG_CAPTURE_NONE;
  if (once) atomic_fetch_add(&c->pending, 1);
  int32_t rc = cpu_launch_host_func(s, job_run, j);
  if (rc) {
    if (once) atomic_fetch_sub(&c->pending, 1);
    free(j);
    return rc;
  }
  if (!once) {
    pthread_mutex_lock(&c->keep_mu);
    j->next = c->keep;
    c->keep = j;
    pthread_mutex_unlock(&c->keep_mu);
  }
  return BG_OK;
}

/* ---- groups: calls recorded per thread, issued at the end, one job per (communicator, stream) -- */
typedef struct grouped {
  cpu_comm* c;
  void* s;
  bg_coll_call call;
} grouped;
static _Thread_local grouped* gq;
static _Thread_local uint32_t gn, gcap;

static int32_t cpu_group_start(void) {
  gn = 0;
  return BG_OK;
}

static int32_t cpu_group_end(int discard) {
  int32_t first = BG_OK;
  if (discard) gn = 0;
  bg_coll_call* tmp = gn ? malloc(gn * sizeof *tmp) : NULL;
  if (gn && !tmp) first = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_group_end: out of host memory");
  for (uint32_t i = 0; tmp && i < gn; i++) {
    if (!gq[i].c) continue;
    cpu_comm* c = gq[i].c;
    void* s = gq[i].s;
    uint32_t k = 0;
    for (uint32_t j = i; j < gn; j++)
      if (gq[j].c == c && gq[j].s == s) {
        tmp[k++] = gq[j].call;
        gq[j].c = NULL;
      }
    int32_t rc = enqueue(c, s, tmp, k);
    if (rc && !first) first = rc;
  }
  free(tmp);
  free(gq);
  gq = NULL;
  gn = gcap = 0;
  return first;
}

/* ---- the table ---------------------------------------------------------------------------- */
static int32_t cpu_comm_call(void* comm, void* s, const bg_coll_call* a, int grouped_call) {
  cpu_comm* c = comm;
  if (aborted(c))
    return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_collective: the communicator was aborted: %s", HDR(c)->why);
  if (!grouped_call) return enqueue(c, s, a, 1);
  if (gn == gcap) {
    uint32_t nc = gcap ? gcap * 2 : 16;
    grouped* q = realloc(gq, nc * sizeof *q);
    if (!q) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_collective: out of host memory");
    gq = q;
    gcap = nc;
  }
  gq[gn++] = (grouped){c, s, *a};
  return BG_OK;
}

static int32_t cpu_unique_id(bg_device* dev, uint8_t out[BG_COMM_ID_BYTES]) {
  (void)dev;
  memcpy(out, ID_MAGIC, 16);
  uint8_t rnd[16];
  int ok = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ok = read(fd, rnd, sizeof rnd) == (ssize_t)sizeof rnd;
    close(fd);
  }
  if (!ok) {
    uint64_t t = bg_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)out;
    for (int i = 0; i < 16; i++) {
      t = t * 6364136223846793005ull + 1442695040888963407ull;
      rnd[i] = (uint8_t)(t >> 56);
    }
  }
  memcpy(out + 16, rnd, 16);
  return BG_OK;
}

static cpu_comm* comm_new(bg_device* dev, cpu_seg* seg, int32_t rank, int32_t n) {
  cpu_comm* c = calloc(1, sizeof *c);
  if (!c) return NULL;
  bg_obj_init(c, BG_KIND_COMM, dev);
  c->seg = seg;
  c->rank = rank;
  c->nranks = n;
  c->claim_fd = -1;
  pthread_mutex_init(&c->run_mu, NULL);
  pthread_mutex_init(&c->keep_mu, NULL);
  return c;
}

static void seg_release(cpu_seg* s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  seg_hdr* h = (seg_hdr*)s->base;
  if (s->shm && atomic_fetch_sub(&h->attached, 1) == 1) {
#ifdef __linux__
    unlink(s->name);
#else
    shm_unlink(s->name);
#endif
  }
  munmap(s->base, s->size);
  free(s);
}

static int32_t cpu_init_all(bg_device** devs, int32_t n, void** out) {
  if (n > COLL_MAX_RANKS)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_comm_init_all: %d devices; the CPU backend joins at most %d",
                        (int)n, COLL_MAX_RANKS);
  cpu_seg* s = calloc(1, sizeof *s);
  if (!s) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_all: out of host memory");
  s->size = seg_size(n);
  void* base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    free(s);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_all: mmap of %zu bytes failed (errno %d)", seg_size(n), errno);
  }
  s->base = base;
  seg_hdr* h = base;
  h->magic = COLL_MAGIC;
  atomic_store(&h->nranks, n);
  atomic_store(&h->joined, n);
  atomic_store(&s->refs, n);
  for (int32_t i = 0; i < n; i++) atomic_store(&h->pid[i], (int32_t)getpid());
  for (int32_t i = 0; i < n; i++) {
    out[i] = comm_new(devs[i], s, i, n);
    if (!out[i]) {
      for (int32_t k = 0; k < i; k++) free(out[k]), out[k] = NULL;
      munmap(base, s->size);
      free(s);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_all: out of host memory");
    }
  }
  return BG_OK;
}

#ifdef __linux__
/* Bind a socket to the abstract name of (id, rank): EADDRINUSE while another communicator holds
 * that rank, in any process of this machine's network namespace. Where sockets cannot be made,
 * the segment's claim alone answers (as before). */
static int32_t claim_rank(const char* fn, const char* hex, int32_t rank, int* out) {
  *out = -1;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return BG_OK;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "bungpu-comm-%s-%d", hex, (int)rank);
  if (bind(fd, (struct sockaddr*)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE)
      return bg_set_error(BG_ERR_INVALID_VALUE, "%s: rank %d already joined the communicator of this id", fn, (int)rank);
    return BG_OK;
  }
  *out = fd;
  return BG_OK;
}
#else
static int32_t claim_rank(const char* fn, const char* hex, int32_t rank, int* out) {
  (void)fn, (void)hex, (void)rank;
  *out = -1;
  return BG_OK;
}
#endif

static int32_t cpu_init_rank(bg_device* dev, int32_t n, const uint8_t id[BG_COMM_ID_BYTES], int32_t rank, void** out) {
  const char* fn = "bg_comm_init_rank";
  if (memcmp(id, ID_MAGIC, 16) != 0)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: not an id of the CPU backend (make it with bg_comm_unique_id on a CPU device)", fn);
  if (n > COLL_MAX_RANKS)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %d ranks; the CPU backend joins at most %d", fn, (int)n, COLL_MAX_RANKS);
  char hex[21];
  for (int i = 0; i < 10; i++) snprintf(hex + 2 * i, 3, "%02x", id[16 + i]);
  /* The rank is claimed by a name only one socket can hold, for as long as its communicator (or
   * its process) lives: the segment's file is unlinked once every rank joined, and a late
   * initRank with a taken rank would otherwise make a new segment and wait there forever. */
  int claim = -1;
  int32_t rc = claim_rank(fn, hex, rank, &claim);
  if (rc) return rc;
  cpu_seg* s = calloc(1, sizeof *s);
  if (!s) {
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
#ifdef __linux__
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  snprintf(s->name, sizeof s->name, "%s/bgc-%s", dir, hex);
  int fd = open(s->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
#else
  snprintf(s->name, sizeof s->name, "/bgc-%s", hex);
  int fd = shm_open(s->name, O_RDWR | O_CREAT, 0600);
#endif
  if (fd < 0) {
    int e = errno;
    free(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_NOT_PERMITTED, "%s: cannot open the shared segment (errno %d)", fn, e);
  }
  s->size = seg_size(n);
  struct stat sb;
  if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < s->size && ftruncate(fd, (off_t)s->size) != 0 &&
      (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < s->size)) {
    int e = errno;
    close(fd);
    free(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: cannot size the shared segment (errno %d)", fn, e);
  }
  void* base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    int e = errno;
    free(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: cannot map the shared segment (errno %d)", fn, e);
  }
  s->base = base;
  s->shm = 1;
  atomic_store(&s->refs, 1);
  seg_hdr* h = base;
  int32_t zero = 0;
  if (!atomic_compare_exchange_strong(&h->nranks, &zero, n) && zero != n) {
    munmap(base, s->size);
    free(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: the communicator of this id has %d ranks, not %d", fn, (int)zero, (int)n);
  }
  int32_t unclaimed = 0;
  if (!atomic_compare_exchange_strong(&h->claimed[rank], &unclaimed, 1)) {
    munmap(base, s->size);
    free(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: rank %d already joined the communicator of this id", fn, (int)rank);
  }
  atomic_fetch_add(&h->attached, 1);
  cpu_comm* c = comm_new(dev, s, rank, n);
  if (!c) {
    atomic_store(&h->claimed[rank], 0);
    seg_release(s);
    if (claim >= 0) close(claim);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  c->claim_fd = claim;
  atomic_store_explicit(&h->pid[rank], (int32_t)getpid(), memory_order_release);
  /* the last to join frees the name: everyone has the segment mapped by then */
  if (atomic_fetch_add(&h->joined, 1) + 1 == n) {
#ifdef __linux__
    unlink(s->name);
#else
    shm_unlink(s->name);
#endif
  }
  *out = c;
  return BG_OK;
}

static int32_t cpu_comm_abort(void* comm) {
  cpu_comm* c = comm;
  seg_abort(c, BG_ERR_ILLEGAL_STATE, "rank %d aborted the communicator (bg_comm_abort)", (int)c->rank);
  return BG_OK;
}

/* A number that grows while any rank of the segment moves: barrier arrivals, chunks posted and
 * taken. */
static uint64_t seg_progress(cpu_comm* c) {
  seg_hdr* h = HDR(c);
  uint64_t sum = 0;
  for (int r = 0; r < c->nranks; r++) sum += atomic_load_explicit(&h->arrive[r].v, memory_order_relaxed);
  for (int a = 0; a < c->nranks; a++)
    for (int b = 0; b < c->nranks; b++) {
      chan* ch = CHAN(c, a, b);
      sum += atomic_load_explicit(&ch->posted, memory_order_relaxed) + atomic_load_explicit(&ch->taken, memory_order_relaxed);
    }
  return sum;
}

#define DESTROY_STALL_NS 250000000ull /* no rank moved for this long: the pending calls are stuck */

static int32_t cpu_comm_destroy(void* comm) {
  cpu_comm* c = comm;
  /* Its queued one-shot jobs run first, as long as the ranks make progress. Jobs waiting for a
   * rank that does not come would keep this (the caller's thread) waiting forever: once no rank
   * moved for DESTROY_STALL_NS, the communicator is aborted, which ends them on every rank. */
  uint64_t seen = seg_progress(c), since = bg_now_ns();
  while (atomic_load(&c->pending) > 0) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    uint64_t p = seg_progress(c), now = bg_now_ns();
    if (p != seen) {
      seen = p;
      since = now;
    } else if (now - since > DESTROY_STALL_NS && !aborted(c)) {
      seg_abort(c, BG_ERR_ILLEGAL_STATE,
                "rank %d of %d was destroyed while %lld of its collectives waited for other ranks",
                (int)c->rank, (int)c->nranks, (long long)atomic_load(&c->pending));
    }
  }
  pthread_mutex_lock(&c->run_mu); /* a replay of a captured job may be running */
  pthread_mutex_unlock(&c->run_mu);
  for (cpu_job* j = c->keep; j;) {
    cpu_job* nx = j->next;
    free(j);
    j = nx;
  }
  bg_obj_kill(c);
  pthread_mutex_destroy(&c->run_mu);
  pthread_mutex_destroy(&c->keep_mu);
  if (c->claim_fd >= 0) close(c->claim_fd);
  seg_release(c->seg);
  free(c);
  return BG_OK;
}

static int32_t cpu_comm_info(void* comm, int32_t* rank, int32_t* nranks) {
  cpu_comm* c = comm;
  *rank = c->rank;
  *nranks = c->nranks;
  return BG_OK;
}

static int32_t cpu_comm_check(void* comm) {
  cpu_comm* c = comm;
  int32_t code = atomic_load_explicit(&HDR(c)->aborted, memory_order_acquire);
  if (code == 0) return BG_OK;
  if (code < 0) return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_check: the communicator is being aborted");
  return bg_set_error(code, "bg_comm_check: %s", HDR(c)->why);
}

static int32_t cpu_comm_set_timeout(void* comm, uint32_t ms) {
  atomic_store(&((cpu_comm*)comm)->timeout_ms, ms);
  return BG_OK;
}

const bg_coll_ops cpu_coll_ops = {
    .unique_id = cpu_unique_id,
    .init_rank = cpu_init_rank,
    .init_all = cpu_init_all,
    .destroy = cpu_comm_destroy,
    .abort = cpu_comm_abort,
    .info = cpu_comm_info,
    .check = cpu_comm_check,
    .set_timeout = cpu_comm_set_timeout,
    .call = cpu_comm_call,
    .group_start = cpu_group_start,
    .group_end = cpu_group_end,
};
