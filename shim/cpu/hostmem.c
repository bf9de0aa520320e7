/*
 * cpu/hostmem.c: the host memory behind the CPU device's allocations (bg_mem_alloc,
 * bg_host_alloc, memory pool blocks, graph memory). Blocks of CPU_MAP_MIN bytes or more are
 * mapped and unmapped directly, so a freed block's pages go back to the system at once; smaller
 * ones come from malloc. Through malloc alone, glibc raises its mmap threshold to the size of the
 * first large block freed (up to 32 MiB), after which large blocks come from its heap and freed
 * ones stay resident there: a loop of forgotten 8 MiB buffers held RSS far above the live bytes
 * the native-memory budget counts. Calls nothing else of the backend.
 */
#include "cpu.h"

#include <sys/mman.h>
#include <unistd.h>

size_t cpu_page_size(void) {
  static size_t ps;
  if (!ps) {
    long v = sysconf(_SC_PAGESIZE);
    ps = v > 0 ? (size_t)v : 4096;
  }
  return ps;
}

void* cpu_memory_alloc(uint64_t bytes) {
  if (bytes >= CPU_MAP_MIN) {
    size_t ps = cpu_page_size();
    if (bytes > (uint64_t)SIZE_MAX - ps) return NULL;
    size_t len = (size_t)((bytes + ps - 1) / ps * ps);
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
  if (bytes >= CPU_MAP_MIN) {
    size_t ps = cpu_page_size();
    munmap(p, (size_t)((bytes + ps - 1) / ps * ps));
  } else {
    free(p);
  }
}
