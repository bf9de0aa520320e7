/*
 * cpu/hostmem.c: the host memory behind the CPU device's allocations (bg_mem_alloc,
 * bg_host_alloc, memory pool blocks, graph memory). Blocks of CPU_MAP_MIN bytes or more are
 * mapped for themselves; smaller ones come from malloc. Through malloc alone, glibc raises its
 * mmap threshold to the size of the first large block freed (up to 32 MiB), after which large
 * blocks come from its heap and freed ones stay resident there: a loop of forgotten 8 MiB buffers
 * held RSS far above the live bytes the native-memory budget counts. A freed mapping is kept for
 * reuse while the kept ones total at most CPU_MAP_KEEP bytes (a block allocated and freed in a
 * loop then costs no page faults; a larger kept block is cut to the size asked for), and
 * unmapped otherwise, oldest first, so its pages go back to the system.
 *
 * Calls: nothing.
 */
#include "cpu.h"

#include <sys/mman.h>
#include <unistd.h>

#define KEEP_MAX 16 /* kept mappings at most */

size_t cpu_page_size(void) {
  static size_t ps;
  if (!ps) {
    long v = sysconf(_SC_PAGESIZE);
    ps = v > 0 ? (size_t)v : 4096;
  }
  return ps;
}

typedef struct kept_map {
  char* p;
  size_t len;
} kept_map;

static pthread_mutex_t g_keep_mu = PTHREAD_MUTEX_INITIALIZER;
static kept_map g_kept[KEEP_MAX]; /* oldest first */
static unsigned g_nkept;
static size_t g_kept_bytes;

static size_t map_len(uint64_t bytes) {
  size_t ps = cpu_page_size();
  return (size_t)((bytes + ps - 1) / ps * ps);
}

/* The smallest kept mapping of at least `len` bytes, taken out of the list; NULL if none. */
static kept_map take_kept(size_t len) {
  kept_map got = {NULL, 0};
  pthread_mutex_lock(&g_keep_mu);
  unsigned best = KEEP_MAX;
  for (unsigned i = 0; i < g_nkept; i++)
    if (g_kept[i].len >= len && (best == KEEP_MAX || g_kept[i].len < g_kept[best].len)) best = i;
  if (best != KEEP_MAX) {
    got = g_kept[best];
    g_kept_bytes -= got.len;
    memmove(&g_kept[best], &g_kept[best + 1], (g_nkept - best - 1) * sizeof *g_kept);
    g_nkept--;
  }
  pthread_mutex_unlock(&g_keep_mu);
  return got;
}

void* cpu_memory_alloc(uint64_t bytes) {
  if (bytes >= CPU_MAP_MIN) {
    if (bytes > (uint64_t)SIZE_MAX - cpu_page_size()) return NULL;
    size_t len = map_len(bytes);
    kept_map k = take_kept(len);
    if (k.p) {
      if (k.len > len) munmap(k.p + len, k.len - len); /* the rest goes back */
      return k.p;
    }
    void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  void* p = NULL;
  size_t n = (size_t)((bytes + 63) / 64 * 64);
  if (posix_memalign(&p, 64, n)) return NULL;
  return p;
}

void cpu_memory_free(void* p, uint64_t bytes) {
  if (!p) return;
  if (bytes < CPU_MAP_MIN) {
    free(p);
    return;
  }
  size_t len = map_len(bytes);
  if (len > CPU_MAP_KEEP) {
    munmap(p, len);
    return;
  }
  kept_map out[KEEP_MAX + 1];
  unsigned nout = 0;
  pthread_mutex_lock(&g_keep_mu);
  while (g_nkept && (g_nkept == KEEP_MAX || g_kept_bytes + len > CPU_MAP_KEEP)) {
    out[nout++] = g_kept[0];
    g_kept_bytes -= g_kept[0].len;
    memmove(&g_kept[0], &g_kept[1], (g_nkept - 1) * sizeof *g_kept);
    g_nkept--;
  }
  g_kept[g_nkept++] = (kept_map){(char*)p, len};
  g_kept_bytes += len;
  pthread_mutex_unlock(&g_keep_mu);
  for (unsigned i = 0; i < nout; i++) munmap(out[i].p, out[i].len);
}
