/*
 * cpu/device.c: the CPU device (checked mode's table and memory are checked.c's). Memory is
 * 64-byte-aligned host memory (hostmem.c) whose device address is its host address; live
 * allocations are tracked with their sizes so a bad free is an error, not a crash, and a large
 * block is unmapped whole at its free.
 *
 * Calls: hostmem.c, pool.c, event.c, queue.c, pool_mem.c, module.c, run.c, capture.c, stream.c,
 * collective.c, ipc.c, graph.c, cmdgraph.c, checked.c, base.c.
 */
#include "cpu.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- allocation table --------------------------------------------------------------------- */
static size_t tbl_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return (size_t)k;
}

static int tbl_grow(cpu_table* t) {
  size_t ncap = t->cap ? t->cap * 2 : 64;
  while (t->live * 2 >= ncap) ncap *= 2;
  uint64_t* nk = calloc(ncap, sizeof *nk);
  uint64_t* nv = calloc(ncap, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -1;
  }
  for (size_t i = 0; i < t->cap; i++) {
    uint64_t k = t->keys[i];
    if (k > 1) {
      size_t j = tbl_hash(k) & (ncap - 1);
      while (nk[j]) j = (j + 1) & (ncap - 1);
      nk[j] = k;
      nv[j] = t->vals[i];
    }
  }
  free(t->keys);
  free(t->vals);
  t->keys = nk;
  t->vals = nv;
  t->cap = ncap;
  t->used = t->live;
  return 0;
}

int cpu_table_put(cpu_table* t, uint64_t k, uint64_t v) {
  if ((t->used + 1) * 2 > t->cap && tbl_grow(t)) return -1;
  size_t j = tbl_hash(k) & (t->cap - 1);
  while (t->keys[j] > 1) j = (j + 1) & (t->cap - 1);
  if (t->keys[j] == 0) t->used++;
  t->keys[j] = k;
  t->vals[j] = v;
  t->live++;
  return 0;
}

int cpu_table_del(cpu_table* t, uint64_t k) {
  if (!t->cap || k <= 1) return 0;
  size_t j = tbl_hash(k) & (t->cap - 1);
  while (t->keys[j]) {
    if (t->keys[j] == k) {
      t->keys[j] = 1;
      t->live--;
      return 1;
    }
    j = (j + 1) & (t->cap - 1);
  }
  return 0;
}

static int cpu_table_get(cpu_table* t, uint64_t k, uint64_t* v) {
  if (!t->cap || k <= 1) return 0;
  size_t j = tbl_hash(k) & (t->cap - 1);
  while (t->keys[j]) {
    if (t->keys[j] == k) {
      *v = t->vals[j];
      return 1;
    }
    j = (j + 1) & (t->cap - 1);
  }
  return 0;
}

void cpu_table_free_all(cpu_table* t, int free_keys) {
  if (free_keys)
    for (size_t i = 0; i < t->cap; i++)
      if (t->keys[i] > 1) cpu_memory_free((void*)(uintptr_t)t->keys[i], t->vals[i]);
  free(t->keys);
  free(t->vals);
  memset(t, 0, sizeof *t);
}

/* ---- probe and open ------------------------------------------------------------------------ */
/* The cores this process may run on: its affinity mask where the system has one (taskset, a
 * container's cpuset), so a process pinned to one core does not start a thread per machine core
 * that then share it. */
static int32_t online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int k = CPU_COUNT(&set);
    if (k >= 1 && (n < 1 || k < n)) n = k;
  }
#endif
  return n < 1 ? 1 : n > 4096 ? 4096 : (int32_t)n;
}

static uint64_t phys_total(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psz > 0) return (uint64_t)pages * (uint64_t)psz;
#endif
  return 0;
}

static uint64_t phys_free(void) {
#ifdef __linux__
  FILE* f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb = 0;
    int found = 0;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        found = 1;
        break;
      }
    fclose(f);
    if (found) return (uint64_t)kb * 1024ull;
  }
#endif
#if defined(_SC_AVPHYS_PAGES) && defined(_SC_PAGESIZE)
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psz > 0) return (uint64_t)pages * (uint64_t)psz;
#endif
  return phys_total() / 2;
}

static void cpu_model_name(char* out, size_t cap, int32_t n) {
  char model[200] = {0};
#ifdef __linux__
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) == 0) {
        char* c = strchr(line, ':');
        if (c) {
          c++;
          while (*c == ' ' || *c == '\t') c++;
          size_t l = strcspn(c, "\n");
          if (l >= sizeof model) l = sizeof model - 1;
          memcpy(model, c, l);
          model[l] = 0;
        }
        break;
      }
    }
    fclose(f);
  }
#endif
  if (model[0])
    snprintf(out, cap, "CPU %s (%d threads)", model, (int)n);
  else
    snprintf(out, cap, "CPU (%d threads)", (int)n);
}

/* BUNGPU_CPU_DEVICES=N (1..16) exposes N independent CPU devices (own pools, streams and memory
 * tables), so multi-device code paths can be exercised without several GPUs. Default 1. */
static int32_t cpu_device_count(void) {
  const char* e = getenv("BUNGPU_CPU_DEVICES");
  if (!e || !*e) return 1;
  char* end = NULL;
  long n = strtol(e, &end, 10);
  if (*end || n < 1) return 1;
  return n > 16 ? 16 : (int32_t)n;
}

static int32_t cpu_probe(int32_t* count, char* msg, uint64_t cap) {
  *count = cpu_device_count();
  if (msg && cap)
    snprintf(msg, (size_t)cap, "cpu backend: %d threads, %d device(s)", (int)online_cores(), (int)*count);
  return BG_OK;
}

static int32_t cpu_open(int32_t ordinal, bg_device** out) {
  if (ordinal < 0 || ordinal >= cpu_device_count())
    return bg_set_error(BG_ERR_INVALID_DEVICE, "bg_device_open: the cpu backend has %d device(s) (BUNGPU_CPU_DEVICES)",
                        (int)cpu_device_count());
  cpu_device* d = calloc(1, sizeof *d);
  if (!d) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_device_open: out of host memory");
  bg_obj_init(d, BG_KIND_DEVICE, &d->base);
  d->checked = cpu_checked_mode();
  cpu_fault_init(); /* a fault in a kernel is named (default mode) or caught (checked mode) */
  atomic_init(&d->sticky, 0);
  pthread_mutex_init(&d->sticky_mu, NULL);
  d->base.ops = d->checked ? cpu_checked_ops(&bg_cpu_ops) : &bg_cpu_ops;
  d->base.ordinal = ordinal;
  d->ncores = online_cores();
  d->total_mem = phys_total();
  cpu_model_name(d->name, sizeof d->name, d->ncores);
  pthread_mutex_init(&d->mem_mu, NULL);
  pthread_mutex_init(&d->ipc_mu, NULL);
  pthread_mutex_init(&d->streams_mu, NULL);
  pthread_mutex_init(&d->cap_mu, NULL);
  cpu_pmem_init(d);
  atomic_init(&d->ncaps, 0);
  atomic_init(&d->nblocking, 0);
  int32_t rc = cpu_pool_init(&d->pool, (uint32_t)d->ncores);
  if (rc == BG_OK) {
    cpu_stream* s = NULL;
    rc = cpu_stream_new(d, BG_STREAM_DEFAULT, 0, &s);
    if (rc == BG_OK) {
      d->base.default_stream = s;
      *out = &d->base;
      return BG_OK;
    }
    cpu_pool_destroy(&d->pool);
  }
  pthread_mutex_destroy(&d->mem_mu);
  pthread_mutex_destroy(&d->streams_mu);
  pthread_mutex_destroy(&d->cap_mu);
  pthread_mutex_destroy(&d->sticky_mu);
  free(d);
  return rc;
}

static int32_t cpu_device_close(bg_device* dev) {
  cpu_device* d = (cpu_device*)dev;
  cpu_capture_free_all(d);
  /* streams the caller forgot: drain and stop them */
  for (;;) {
    pthread_mutex_lock(&d->streams_mu);
    cpu_stream* s = d->streams;
    if (s) {
      d->streams = s->next;
      if (s->next) s->next->prev = NULL;
    }
    pthread_mutex_unlock(&d->streams_mu);
    if (!s) break;
    cpu_stream_free(s);
  }
  cpu_stream_free((cpu_stream*)d->base.default_stream);
  d->base.default_stream = NULL;
  cpu_pmem_close(d); /* every stream drained: no queued work uses pool memory any more */
  cpu_ipc_close_all(d);
  cpu_pool_destroy(&d->pool);
  pthread_mutex_lock(&d->mem_mu);
  if (d->checked) {
    for (size_t i = 0; i < d->dmem.cap; i++)
      if (d->dmem.keys[i] > 1) cpu_guarded_free((void*)(uintptr_t)d->dmem.keys[i], d->dmem.vals[i]);
    cpu_table_free_all(&d->dmem, 0);
  } else {
    cpu_table_free_all(&d->dmem, 1);
  }
  cpu_table_free_all(&d->hmem, 1);
  pthread_mutex_unlock(&d->mem_mu);
  bg_obj_kill(d);
  pthread_mutex_destroy(&d->mem_mu);
  pthread_mutex_destroy(&d->ipc_mu);
  pthread_mutex_destroy(&d->streams_mu);
  pthread_mutex_destroy(&d->cap_mu);
  pthread_mutex_destroy(&d->sticky_mu);
  free(d);
  return BG_OK;
}

static int32_t cpu_device_props(bg_device* dev, bg_device_props* out) {
  cpu_device* d = (cpu_device*)dev;
  snprintf(out->name, sizeof out->name, "%s", d->name);
  out->ordinal = dev->ordinal;
  out->compute_units = d->ncores;
  out->cc_major = 0;
  out->cc_minor = 0;
  out->max_threads_per_block = CPU_MAX_THREADS;
  out->warp_size = 1;
  out->unified_memory = 1;
  out->can_map_host_memory = 1;
  out->concurrent_kernels = 1;
  out->max_shared_bytes_per_block = (int32_t)CPU_MAX_SHARED;
  out->total_mem = d->total_mem;
  out->max_block_dim[0] = out->max_block_dim[1] = (int32_t)CPU_MAX_BLOCK_XY;
  out->max_block_dim[2] = (int32_t)CPU_MAX_BLOCK_Z;
  out->max_grid_dim[0] = (int32_t)CPU_MAX_GRID_X;
  out->max_grid_dim[1] = out->max_grid_dim[2] = (int32_t)CPU_MAX_GRID_YZ;
  out->max_grid_blocks = CPU_MAX_GRID_BLOCKS;
  return BG_OK;
}

static int32_t cpu_device_mem_info(bg_device* dev, uint64_t* free_b, uint64_t* total_b) {
  cpu_device* d = (cpu_device*)dev;
  uint64_t f = phys_free();
  *total_b = d->total_mem;
  *free_b = f > d->total_mem ? d->total_mem : f;
  return BG_OK;
}

static int32_t cpu_device_synchronize(bg_device* dev) {
  cpu_device* d = (cpu_device*)dev;
  int32_t rc = cpu_capture_guard(d, "bg_device_synchronize");
  if (rc) return rc;
  cpu_device_wait_all(d);
  cpu_pmem_sync_release(d);
  return BG_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */
static void* aligned(uint64_t bytes, size_t align) {
  if (bytes > (uint64_t)SIZE_MAX - align) return NULL;
  void* p = NULL;
  size_t n = (size_t)((bytes + align - 1) / align * align);
  if (posix_memalign(&p, align, n)) return NULL;
  return p;
}

static int32_t cpu_mem_alloc(bg_device* dev, uint64_t bytes, bg_devptr* out) {
  cpu_device* d = (cpu_device*)dev;
  int32_t rc = cpu_capture_guard(d, "bg_mem_alloc");
  if (rc) return rc;
  void* p = d->checked ? cpu_guarded_alloc(bytes) : cpu_memory_alloc(bytes);
  if (!p)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
  pthread_mutex_lock(&d->mem_mu);
  int bad = cpu_table_put(&d->dmem, (uint64_t)(uintptr_t)p, bytes);
  pthread_mutex_unlock(&d->mem_mu);
  if (bad) {
    if (d->checked) cpu_guarded_free(p, bytes);
    else cpu_memory_free(p, bytes);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc: out of host memory for the table");
  }
  *out = (bg_devptr)(uintptr_t)p;
  return BG_OK;
}

static int32_t cpu_mem_free(bg_device* dev, bg_devptr p) {
  cpu_device* d = (cpu_device*)dev;
  int32_t rc = cpu_capture_guard(d, "bg_mem_free");
  if (rc) return rc;
  if (cpu_ipc_free(d, p, &rc)) return rc; /* shareable or opened memory (ipc.c) */
  cpu_guarded_block* g = NULL;
  if (d->checked) {
    g = malloc(sizeof *g);
    if (!g) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_free: out of host memory");
  }
  pthread_mutex_lock(&d->mem_mu);
  uint64_t bytes = 0;
  int found = cpu_table_get(&d->dmem, p, &bytes);
  if (found) found = cpu_table_del(&d->dmem, p);
  pthread_mutex_unlock(&d->mem_mu);
  if (!found) {
    free(g);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_mem_free: 0x%llx is not the start of a live allocation of this device",
                        (unsigned long long)p);
  }
  /* queued work that may still use it finishes first; the caller does not wait for it */
  if (g) {
    g->p = (void*)(uintptr_t)p;
    g->bytes = bytes;
    cpu_defer(d, cpu_guarded_release, g);
  } else {
    cpu_defer_memory(d, (void*)(uintptr_t)p, bytes);
  }
  return BG_OK;
}

static int32_t cpu_host_alloc(bg_device* dev, uint64_t bytes, uint32_t flags, void** host,
                              bg_devptr* dptr) {
  (void)flags;
  cpu_device* d = (cpu_device*)dev;
  int32_t rc = cpu_capture_guard(d, "bg_host_alloc");
  if (rc) return rc;
  void* p = cpu_memory_alloc(bytes);
  if (!p)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_host_alloc: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
  pthread_mutex_lock(&d->mem_mu);
  int bad = cpu_table_put(&d->hmem, (uint64_t)(uintptr_t)p, bytes);
  pthread_mutex_unlock(&d->mem_mu);
  if (bad) {
    cpu_memory_free(p, bytes);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_host_alloc: out of host memory for the table");
  }
  *host = p;
  *dptr = (bg_devptr)(uintptr_t)p;
  return BG_OK;
}

static int32_t cpu_host_free(bg_device* dev, void* host) {
  cpu_device* d = (cpu_device*)dev;
  pthread_mutex_lock(&d->mem_mu);
  uint64_t bytes = 0;
  int found = cpu_table_get(&d->hmem, (uint64_t)(uintptr_t)host, &bytes);
  if (found) found = cpu_table_del(&d->hmem, (uint64_t)(uintptr_t)host);
  pthread_mutex_unlock(&d->mem_mu);
  if (!found)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_host_free: %p is not a live host allocation of this device", host);
  cpu_defer_memory(d, host, bytes);
  return BG_OK;
}

/* Synchronous copies and memsets are operations of the legacy default stream run on the
 * calling thread: they start once the work queued before the call on the default stream and on
 * every blocking stream has finished (not non-blocking streams), and they return with the data in
 * place, so work queued afterwards on any stream, non-blocking ones included, sees it. Later
 * blocking-stream work is ordered after them trivially: they are complete before it is queued.
 * Refused by CaptureMode like any illegal call during capture, and while a blocking stream
 * captures (the default stream would depend on the capture). */
static int32_t sync_prologue(cpu_device* d, const char* fn) {
  int32_t rc = cpu_capture_implicit(d, fn); /* first, as the driver checks it */
  if (rc) return rc;
  rc = cpu_capture_guard(d, fn);
  if (rc) return rc;
  cpu_legacy_wait_host(d);
  return BG_OK;
}

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#endif
/* A host-to-device copy of at least 16 KiB (not overlapping) is written with streaming stores
 * where the CPU has them (x86-64: SSE2): the data goes past this core's caches, so the pool
 * threads that read it next do not fetch each line from this core, and this core does not first
 * take every line away from the cores that read the previous contents. */
static void copy_in(void* dst, const void* src, size_t n) {
#if defined(__x86_64__) || defined(_M_X64)
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (n >= 16384 && (d + n <= s || s + n <= d)) {
    size_t head = (16 - (d & 15)) & 15;
    memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i*)(s + i));
      __m128i b = _mm_loadu_si128((const __m128i*)(s + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i*)(s + i + 32));
      __m128i e = _mm_loadu_si128((const __m128i*)(s + i + 48));
      _mm_stream_si128((__m128i*)(d + i), a);
      _mm_stream_si128((__m128i*)(d + i + 16), b);
      _mm_stream_si128((__m128i*)(d + i + 32), c);
      _mm_stream_si128((__m128i*)(d + i + 48), e);
    }
    _mm_sfence();
    memcpy((void*)(d + i), (const void*)(s + i), n - i);
    return;
  }
#endif
  memmove(dst, src, n);
}

static int32_t cpu_memcpy_htod(bg_device* dev, bg_devptr dst, const void* src, uint64_t n) {
  int32_t rc = sync_prologue((cpu_device*)dev, "bg_memcpy_htod");
  if (rc) return rc;
  copy_in((void*)(uintptr_t)dst, src, (size_t)n);
  return BG_OK;
}

static int32_t cpu_memcpy_dtoh(bg_device* dev, void* dst, bg_devptr src, uint64_t n) {
  int32_t rc = sync_prologue((cpu_device*)dev, "bg_memcpy_dtoh");
  if (rc) return rc;
  memmove(dst, (const void*)(uintptr_t)src, (size_t)n);
  return BG_OK;
}

static int32_t cpu_memcpy_dtod(bg_device* dev, bg_devptr dst, bg_devptr src, uint64_t n) {
  int32_t rc = sync_prologue((cpu_device*)dev, "bg_memcpy_dtod");
  if (rc) return rc;
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, (size_t)n);
  return BG_OK;
}

static int32_t cpu_memset(bg_device* dev, bg_devptr dst, uint32_t pattern, uint32_t esz,
                          uint64_t count) {
  int32_t rc = sync_prologue((cpu_device*)dev, "bg_memset");
  if (rc) return rc;
  cpu_fill((void*)(uintptr_t)dst, pattern, esz, count);
  return BG_OK;
}

/* ---- rings ---------------------------------------------------------------------------------- */
static int32_t cpu_ring_alloc(bg_device* dev, uint64_t bytes, void** host, bg_devptr* dptr) {
  (void)dev;
  void* p = aligned(bytes, 128);
  if (!p)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ring_create: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
  memset(p, 0, (size_t)bytes);
  *host = p;
  *dptr = (bg_devptr)(uintptr_t)p;
  return BG_OK;
}

static int32_t cpu_ring_free(bg_device* dev, void* host) {
  (void)dev;
  free(host);
  return BG_OK;
}

/* Holds for the core's command-list graphs: a kernel keeps its module (as a captured kernel
 * node does), an event its storage. */
static void cpu_kernel_hold(void* k) { cpu_module_hold(((cpu_kernel*)k)->mod); }
static void cpu_kernel_unhold(void* k) { cpu_module_unhold(((cpu_kernel*)k)->mod); }
static void cpu_event_hold(void* e) { cpu_event_retain(e); }
static void cpu_event_unhold(void* e) { cpu_event_release(e); }

/* CPU devices share one address space: each can reach every other (the core asks only about two
 * different devices of this backend), once peer access is enabled, as on CUDA. */
static int32_t cpu_device_can_access_peer(bg_device* dev, bg_device* peer, int32_t* out) {
  (void)dev;
  (void)peer;
  *out = 1;
  return BG_OK;
}

/* ---- the vtable ------------------------------------------------------------------------------ */
/* The backend's record in the table (backends.c). */
const bg_ops bg_cpu_ops = {
    .name = "cpu",
    .probe = cpu_probe,
    .open = cpu_open,
    .coll = &cpu_coll_ops,
    .device_close = cpu_device_close,
    .device_props = cpu_device_props,
    .device_mem_info = cpu_device_mem_info,
    .device_synchronize = cpu_device_synchronize,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .memcpy_htod = cpu_memcpy_htod,
    .memcpy_dtoh = cpu_memcpy_dtoh,
    .memcpy_dtod = cpu_memcpy_dtod,
    .memset = cpu_memset,
    .device_can_access_peer = cpu_device_can_access_peer,
    .memcpy_peer_async = cpu_memcpy_peer_async,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_query = cpu_stream_query,
    .stream_wait_event = cpu_stream_wait_event,
    .memcpy_htod_async = cpu_memcpy_htod_async,
    .memcpy_dtoh_async = cpu_memcpy_dtoh_async,
    .memcpy_dtod_async = cpu_memcpy_dtod_async,
    .memset_async = cpu_memset_async,
    .launch_host_func = cpu_launch_host_func,
    .stream_notify = cpu_stream_notify,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .event_elapsed = cpu_event_elapsed,
    .rtc_compile = NULL,
    .rtc_version = NULL,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .module_get_kernel = cpu_module_get_kernel,
    .kernel_max_threads = cpu_kernel_max_threads,
    .kernel_retarget = cpu_kernel_retarget,
    .launch = cpu_launch,
    .begin_capture = cpu_begin_capture,
    .end_capture = cpu_end_capture,
    .capture_status = cpu_capture_status,
    .graph_destroy = cpu_graph_destroy,
    .graph_node_count = cpu_graph_node_count,
    .graph_instantiate = cpu_graph_instantiate,
    .graph_exec_destroy = cpu_graph_exec_destroy,
    .graph_upload = cpu_graph_upload,
    .graph_launch = cpu_graph_launch,
    .graph_exec_set_kernel_args = cpu_graph_exec_set_kernel_args,
    .submit = cpu_submit,
    .submit_wait = cpu_submit_wait,
    .graph_from_commands = cpu_graph_from_commands,
    .kernel_hold = cpu_kernel_hold,
    .kernel_unhold = cpu_kernel_unhold,
    .event_hold = cpu_event_hold,
    .event_unhold = cpu_event_unhold,
    .ring_alloc = cpu_ring_alloc,
    .ring_free = cpu_ring_free,
    .mempool_create = cpu_mempool_create,
    .mempool_default = cpu_mempool_default,
    .mempool_destroy = cpu_mempool_destroy,
    .mempool_set_threshold = cpu_mempool_set_threshold,
    .mempool_trim = cpu_mempool_trim,
    .mempool_stats = cpu_mempool_stats,
    .mempool_reset_peak = cpu_mempool_reset_peak,
    .mem_alloc_async = cpu_mem_alloc_async,
    .mem_free_async = cpu_mem_free_async,
    .mem_alloc_shareable = cpu_mem_alloc_shareable,
    .ipc_mem_export = cpu_ipc_mem_export,
    .ipc_mem_open = cpu_ipc_mem_open,
    .ipc_mem_close = cpu_ipc_mem_close,
    .ipc_event_export = cpu_ipc_event_export,
    .ipc_event_open = cpu_ipc_event_open,
};
