/*
 * cpu/pool_mem.c: memory pools and stream-ordered allocation (bg_mem_alloc_async,
 * bg_mem_free_async), with the rules of cuMemAllocFromPoolAsync / cuMemFreeAsync:
 *  - a block freed on stream S remembers S and the point of the free in S (S's enqueued count
 *    then). S may have it again at once (its later work runs after its earlier work); another
 *    stream gets it only once S has completed that point. Nothing waits: a block not yet
 *    reusable is passed over and fresh memory is taken.
 *  - stats: reserved (every block the pool holds), used (blocks handed out), their high-water
 *    marks. Sizes round up to BG_MEMPOOL_GRANULE.
 *  - release: at a synchronize (cpu_pmem_sync_release) a pool above its release threshold, and
 *    on bg_mempool_trim a pool above `keep`, gives back reusable blocks, largest first, until it
 *    is at or below the mark.
 *  - graph memory: an allocation on a capturing stream is taken outside every pool and belongs to
 *    the capture (cpu_gmem), then to its graph and each exec of it: one fixed address that every
 *    replay uses, freed when the last of them goes. A free of it inside the capture ends the
 *    allocation's life in the graph (no node: the CPU graph needs none).
 * capture.c, graph.c and run.c hand graph memory on.
 *
 * Calls: hostmem.c, queue.c, base.c.
 */
#include "cpu.h"

#define CPU_PBUCKETS 256u

typedef struct cpu_block {
  uint64_t addr, size;
  struct cpu_mempool* pool;
  int in_use;
  cpu_stream* fs;  /* while free: the stream that freed it (referenced) */
  uint64_t fpoint; /* and its enqueued count at the free */
  struct cpu_block* hnext;        /* hash chain (dev->pblocks) */
  struct cpu_block *fprev, *fnext; /* the pool's free list */
} cpu_block;

typedef struct cpu_mempool {
  bg_obj h;
  cpu_device* dev;
  uint64_t threshold;
  uint64_t st[4]; /* reserved, used, reserved_high, used_high */
  cpu_block* free;
  uint64_t live; /* blocks handed out */
  int dead;      /* destroyed while blocks were out */
  struct cpu_mempool* next;
} cpu_mempool;

typedef struct cpu_gblock {
  void* p;
  uint64_t size;
  int freed;
} cpu_gblock;

struct cpu_gmem {
  _Atomic int32_t refs;
  _Atomic int32_t execs; /* executable graphs of its graph living (at most one) */
  uint32_t n, cap;
  cpu_gblock* v;
};

static uint64_t round_up(uint64_t n) {
  return (n + BG_MEMPOOL_GRANULE - 1) / BG_MEMPOOL_GRANULE * BG_MEMPOOL_GRANULE;
}
/* multiplicative hash: large blocks are page-aligned, so the low address bits carry nothing */
static uint32_t bucket(uint64_t a) { return (uint32_t)(((a >> 8) * 0x9E3779B97F4A7C15ull) >> 56) % CPU_PBUCKETS; }

/* ---- the device's block table (under pmem_mu) ------------------------------------------------ */
static cpu_block* find(cpu_device* d, uint64_t a) {
  if (!d->pblocks) return NULL;
  for (cpu_block* b = d->pblocks[bucket(a)]; b; b = b->hnext)
    if (b->addr == a) return b;
  return NULL;
}

static void unhash(cpu_device* d, cpu_block* b) {
  cpu_block** pp = &d->pblocks[bucket(b->addr)];
  while (*pp && *pp != b) pp = &(*pp)->hnext;
  if (*pp) *pp = b->hnext;
}

static void free_unlink(cpu_mempool* p, cpu_block* b) {
  if (b->fprev) b->fprev->fnext = b->fnext;
  else p->free = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  b->fprev = b->fnext = NULL;
}

static void note(cpu_mempool* p, int64_t reserved, int64_t used) {
  p->st[0] += (uint64_t)reserved;
  p->st[1] += (uint64_t)used;
  if (p->st[0] > p->st[2]) p->st[2] = p->st[0];
  if (p->st[1] > p->st[3]) p->st[3] = p->st[1];
}

static int ready(const cpu_block* b, const cpu_stream* s) {
  return b->fs == s || atomic_load_explicit(&b->fs->completed, memory_order_acquire) >= b->fpoint;
}

/* Give a free block's memory back (it must be reusable by anyone: its free has completed). */
static void release_block(cpu_mempool* p, cpu_block* b) {
  free_unlink(p, b);
  unhash(p->dev, b);
  note(p, -(int64_t)b->size, 0);
  if (b->fs) cpu_stream_release(b->fs);
  cpu_memory_free((void*)(uintptr_t)b->addr, b->size);
  free(b);
}

/* Release reusable free blocks, largest first, while the pool holds more than `mark`. */
static void shrink(cpu_mempool* p, uint64_t mark) {
  while (p->st[0] > mark) {
    cpu_block* best = NULL;
    for (cpu_block* b = p->free; b; b = b->fnext)
      if (ready(b, NULL) && (!best || b->size > best->size)) best = b;
    if (!best) return;
    release_block(p, best);
  }
}

static void pool_free_struct(cpu_mempool* p) {
  cpu_device* d = p->dev;
  cpu_mempool** pp = &d->pools;
  while (*pp && *pp != p) pp = &(*pp)->next;
  if (*pp) *pp = p->next;
  free(p);
}

/* ---- the device's side ----------------------------------------------------------------------- */
void cpu_pmem_init(cpu_device* d) { pthread_mutex_init(&d->pmem_mu, NULL); }

void cpu_pmem_close(cpu_device* d) {
  pthread_mutex_lock(&d->pmem_mu);
  if (d->pblocks) {
    for (uint32_t i = 0; i < CPU_PBUCKETS; i++) {
      for (cpu_block* b = d->pblocks[i]; b;) {
        cpu_block* n = b->hnext;
        if (b->fs) cpu_stream_release(b->fs);
        cpu_memory_free((void*)(uintptr_t)b->addr, b->size);
        free(b);
        b = n;
      }
    }
    free(d->pblocks);
    d->pblocks = NULL;
  }
  while (d->pools) {
    cpu_mempool* p = d->pools;
    d->pools = p->next;
    bg_obj_kill(p);
    free(p);
  }
  d->default_pool = NULL;
  pthread_mutex_unlock(&d->pmem_mu);
  pthread_mutex_destroy(&d->pmem_mu);
}

void cpu_pmem_sync_release(cpu_device* d) {
  pthread_mutex_lock(&d->pmem_mu);
  for (cpu_mempool* p = d->pools; p; p = p->next)
    if (p->st[0] > p->threshold) shrink(p, p->threshold);
  pthread_mutex_unlock(&d->pmem_mu);
}

/* ---- pools ------------------------------------------------------------------------------------ */
static int32_t pool_new(cpu_device* d, uint64_t threshold, cpu_mempool** out) { /* under pmem_mu */
  if (!d->pblocks) {
    d->pblocks = calloc(CPU_PBUCKETS, sizeof *d->pblocks);
    if (!d->pblocks) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mempool_create: out of host memory");
  }
  cpu_mempool* p = calloc(1, sizeof *p);
  if (!p) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mempool_create: out of host memory");
  bg_obj_init(p, BG_KIND_POOL, &d->base);
  p->dev = d;
  p->threshold = threshold;
  p->next = d->pools;
  d->pools = p;
  *out = p;
  return BG_OK;
}

int32_t cpu_mempool_create(bg_device* dev, uint64_t threshold, void** out) {
  cpu_device* d = (cpu_device*)dev;
  pthread_mutex_lock(&d->pmem_mu);
  cpu_mempool* p = NULL;
  int32_t rc = pool_new(d, threshold, &p);
  pthread_mutex_unlock(&d->pmem_mu);
  if (!rc) *out = p;
  return rc;
}

static int32_t default_pool(cpu_device* d, cpu_mempool** out) { /* under pmem_mu */
  int32_t rc = BG_OK;
  if (!d->default_pool) rc = pool_new(d, 0, &d->default_pool); /* CUDA's default threshold: 0 */
  *out = d->default_pool;
  return rc;
}

int32_t cpu_mempool_default(bg_device* dev, void** out) {
  cpu_device* d = (cpu_device*)dev;
  pthread_mutex_lock(&d->pmem_mu);
  cpu_mempool* p = NULL;
  int32_t rc = default_pool(d, &p);
  pthread_mutex_unlock(&d->pmem_mu);
  if (!rc) *out = p;
  return rc;
}

int32_t cpu_mempool_destroy(void* pv) {
  cpu_mempool* p = pv;
  cpu_device* d = p->dev;
  pthread_mutex_lock(&d->pmem_mu);
  if (p == d->default_pool) {
    pthread_mutex_unlock(&d->pmem_mu);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mempool_destroy: the device's default pool belongs to the device");
  }
  bg_obj_kill(p);
  /* unused blocks go once every stream has finished the work queued so far (a free may still be
   * pending on its stream); blocks handed out stay valid until they are freed */
  while (p->free) {
    cpu_block* b = p->free;
    free_unlink(p, b);
    unhash(d, b);
    note(p, -(int64_t)b->size, 0);
    if (b->fs) cpu_stream_release(b->fs);
    cpu_defer_memory(d, (void*)(uintptr_t)b->addr, b->size);
    free(b);
  }
  if (p->live) p->dead = 1;
  else pool_free_struct(p);
  pthread_mutex_unlock(&d->pmem_mu);
  return BG_OK;
}

int32_t cpu_mempool_set_threshold(void* pv, uint64_t threshold) {
  cpu_mempool* p = pv;
  pthread_mutex_lock(&p->dev->pmem_mu);
  p->threshold = threshold;
  pthread_mutex_unlock(&p->dev->pmem_mu);
  return BG_OK;
}

int32_t cpu_mempool_trim(void* pv, uint64_t keep) {
  cpu_mempool* p = pv;
  pthread_mutex_lock(&p->dev->pmem_mu);
  shrink(p, keep);
  pthread_mutex_unlock(&p->dev->pmem_mu);
  return BG_OK;
}

int32_t cpu_mempool_stats(void* pv, uint64_t out[4]) {
  cpu_mempool* p = pv;
  pthread_mutex_lock(&p->dev->pmem_mu);
  memcpy(out, p->st, sizeof p->st);
  pthread_mutex_unlock(&p->dev->pmem_mu);
  return BG_OK;
}

int32_t cpu_mempool_reset_peak(void* pv) {
  cpu_mempool* p = pv;
  pthread_mutex_lock(&p->dev->pmem_mu);
  p->st[2] = p->st[0];
  p->st[3] = p->st[1];
  pthread_mutex_unlock(&p->dev->pmem_mu);
  return BG_OK;
}

/* ---- graph memory ---------------------------------------------------------------------------- */
void cpu_gmem_retain(struct cpu_gmem* g) {
  if (g) atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void cpu_gmem_release(struct cpu_gmem* g) {
  if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; i < g->n; i++) cpu_memory_free(g->v[i].p, g->v[i].size);
  free(g->v);
  free(g);
}

/* The driver's rule for a graph with memory allocation nodes, which the CPU backend keeps so the
 * two backends agree: one executable graph of it at a time. 0, or -1 while one lives. */
int cpu_gmem_exec_open(struct cpu_gmem* g) {
  int32_t none = 0;
  return !g || atomic_compare_exchange_strong_explicit(&g->execs, &none, 1, memory_order_acq_rel, memory_order_acquire) ? 0 : -1;
}

void cpu_gmem_exec_close(struct cpu_gmem* g) {
  if (g) atomic_store_explicit(&g->execs, 0, memory_order_release);
}

/* An allocation on a capturing stream: graph memory. *handled = 0 when `s` is not capturing. */
static int32_t capture_alloc(cpu_stream* s, uint64_t bytes, bg_devptr* out, int* handled) {
  cpu_device* d = s->dev;
  cpu_capture* c = cpu_capture_lock(s);
  *handled = c != NULL;
  if (!c) return BG_OK;
  int32_t rc = BG_OK;
  if (!c->gmem) {
    c->gmem = calloc(1, sizeof *c->gmem);
    if (!c->gmem) goto oom;
    atomic_init(&c->gmem->refs, 1);
  }
  struct cpu_gmem* g = c->gmem;
  if (g->n == g->cap) {
    uint32_t nc = g->cap ? 2 * g->cap : 8;
    cpu_gblock* v = realloc(g->v, nc * sizeof *v);
    if (!v) goto oom;
    g->v = v;
    g->cap = nc;
  }
  void* mem = cpu_memory_alloc(round_up(bytes));
  if (!mem) {
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_async: cannot allocate %llu bytes of "
                      "graph memory", (unsigned long long)bytes);
    goto out;
  }
  g->v[g->n++] = (cpu_gblock){mem, round_up(bytes), 0};
  *out = (bg_devptr)(uintptr_t)mem;
  goto out;
oom:
  rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_async: out of host memory");
out:
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

static int32_t capture_free(cpu_stream* s, bg_devptr a, int* handled) {
  cpu_device* d = s->dev;
  cpu_capture* c = cpu_capture_lock(s);
  *handled = c != NULL;
  if (!c) return BG_OK;
  int32_t rc = BG_OK;
  struct cpu_gmem* g = c->gmem;
  for (uint32_t i = 0; g && i < g->n; i++) {
    if ((bg_devptr)(uintptr_t)g->v[i].p != a) continue;
    if (g->v[i].freed)
      rc = bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mem_free_async: 0x%llx was already freed in this capture",
                        (unsigned long long)a);
    else g->v[i].freed = 1;
    goto out;
  }
  rc = bg_set_error(BG_ERR_NOT_SUPPORTED,
                    "bg_mem_free_async: 0x%llx was not allocated in this capture; the CPU backend "
                    "frees only graph memory inside a capture (free it before capturing)",
                    (unsigned long long)a);
out:
  pthread_mutex_unlock(&d->cap_mu);
  return rc;
}

/* ---- allocation ------------------------------------------------------------------------------ */
int32_t cpu_mem_alloc_async(void* sv, void* pv, uint64_t bytes, bg_devptr* out) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  int handled = 0;
  int32_t rc = capture_alloc(s, bytes, out, &handled);
  if (handled || rc) return rc;
  if (bytes > UINT64_MAX - BG_MEMPOOL_GRANULE)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_async: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
  uint64_t size = round_up(bytes);
  pthread_mutex_lock(&d->pmem_mu);
  cpu_mempool* p = pv;
  if (!p && (rc = default_pool(d, &p))) goto done;
  /* best fit among the blocks this stream may have now */
  cpu_block* best = NULL;
  for (cpu_block* b = p->free; b; b = b->fnext)
    if (b->size >= size && (!best || b->size < best->size) && ready(b, s)) best = b;
  if (best) {
    free_unlink(p, best);
    cpu_stream_release(best->fs);
    best->fs = NULL;
    best->in_use = 1;
    p->live++;
    note(p, 0, (int64_t)best->size);
    *out = best->addr;
    goto done;
  }
  void* mem = NULL;
  cpu_block* b = calloc(1, sizeof *b);
  if (!b || !(mem = cpu_memory_alloc(size))) {
    free(b);
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_async: cannot allocate %llu bytes",
                      (unsigned long long)bytes);
    goto done;
  }
  b->addr = (uint64_t)(uintptr_t)mem;
  b->size = size;
  b->pool = p;
  b->in_use = 1;
  uint32_t k = bucket(b->addr);
  b->hnext = d->pblocks[k];
  d->pblocks[k] = b;
  p->live++;
  note(p, (int64_t)size, (int64_t)size);
  *out = b->addr;
done:
  pthread_mutex_unlock(&d->pmem_mu);
  return rc;
}

int32_t cpu_mem_free_async(void* sv, bg_devptr a) {
  cpu_stream* s = sv;
  cpu_device* d = s->dev;
  int handled = 0;
  int32_t rc = capture_free(s, a, &handled);
  if (handled || rc) return rc;
  pthread_mutex_lock(&d->pmem_mu);
  cpu_block* b = find(d, a);
  if (!b || !b->in_use) {
    pthread_mutex_unlock(&d->pmem_mu);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mem_free_async: 0x%llx is not a live stream-ordered allocation of "
                        "this device%s", (unsigned long long)a, b ? " (freed already)" : "");
  }
  cpu_mempool* p = b->pool;
  b->in_use = 0;
  p->live--;
  note(p, 0, -(int64_t)b->size);
  if (p->dead) { /* its pool is gone: the memory goes after the work queued so far */
    unhash(d, b);
    note(p, -(int64_t)b->size, 0);
    cpu_defer_memory(d, (void*)(uintptr_t)b->addr, b->size);
    free(b);
    if (!p->live) pool_free_struct(p);
    pthread_mutex_unlock(&d->pmem_mu);
    return BG_OK;
  }
  cpu_stream_retain(s);
  b->fs = s;
  b->fpoint = atomic_load_explicit(&s->enqueued, memory_order_acquire);
  b->fnext = p->free;
  if (p->free) p->free->fprev = b;
  p->free = b;
  pthread_mutex_unlock(&d->pmem_mu);
  return BG_OK;
}
