/*
 * cpu/ipc.c: memory and events shared between processes (bungpu.h, cuIpc* on CUDA).
 *
 * Device memory of the CPU backend is host memory, so memory another process can map must live
 * in a file: a shareable allocation (BG_MEM_SHAREABLE) is a memfd named
 * "bungpu-mem-<pid>-<id>-<bytes>", mapped shared. Its handle's payload carries the memfd's number
 * and id; the importer opens /proc/<pid>/fd/<fd> (the same user may, as for ptrace reads), checks
 * that the link still names that memfd (a freed allocation's number may have been reused), and
 * maps it. The name is the exporter's own record of the allocation: a handle whose size (or
 * id, or memfd number) was edited names a memfd the exporter does not hold, and is
 * BG_ERR_INVALID_HANDLE, as are payload bytes the exporter never writes. An interprocess event's
 * numbers live in a shared page of its own (event.c).
 *
 * Each device keeps its shareable allocations and opened mappings in one list (ipc_mu). Opening
 * one handle twice in a process gives the same address and counts the opens, as
 * cuIpcOpenMemHandle does (only a handle of the same exporter, id and size: any other is forged); a mapping goes (like a free) once the work queued before its last
 * close or its free has run. Opening a handle in its own process is BG_ERR_INVALID_CONTEXT, as
 * cuIpcOpenMemHandle answers; for events too (CUDA does not document that case: refusing it
 * means what runs here runs there). Linux only: elsewhere every entry is BG_ERR_NOT_SUPPORTED.
 *
 * Calls: event.c, queue.c, capture.c, stream.c, base.c.
 */
#include "cpu.h"

#include <errno.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#endif

typedef struct cpu_ipc_map {
  struct cpu_ipc_map* next;
  void* p;
  uint64_t bytes;  /* as allocated or as the handle says */
  size_t maplen;   /* bytes rounded up to pages */
  int fd;          /* an exported allocation's memfd; -1 for an opened mapping */
  int opened;      /* 1: mapped from another process's handle */
  int32_t pid;     /* opened: the exporter */
  uint64_t id;     /* the id in the memfd's name */
  int32_t fd_remote; /* opened: the memfd's number in the exporter */
  int32_t opens;   /* opened: bg_ipc_mem_open calls not yet closed */
} cpu_ipc_map;

/* The payload of a handle (the first 16 of its 64 bytes). */
typedef struct ipc_payload {
  int32_t fd;
  uint32_t reserved;
  uint64_t id;
} ipc_payload;

static void mem_name(char* buf, size_t cap, int32_t pid, uint64_t id, uint64_t bytes) {
  snprintf(buf, cap, "bungpu-mem-%d-%llu-%llu", (int)pid, (unsigned long long)id, (unsigned long long)bytes);
}

/* Payload bytes the exporter writes as zeros (the reserved word and everything after the id):
 * anything else there is not its handle. */
static int payload_clean(const ipc_payload* pl, const uint8_t* payload) {
  if (pl->reserved != 0) return 0;
  for (size_t i = sizeof *pl; i < BG_IPC_PAYLOAD_BYTES; i++)
    if (payload[i]) return 0;
  return 1;
}

/* under ipc_mu */
static cpu_ipc_map** find(cpu_device* d, bg_devptr p) {
  for (cpu_ipc_map** m = &d->ipc_maps; *m; m = &(*m)->next)
    if ((bg_devptr)(uintptr_t)(*m)->p == p) return m;
  return NULL;
}

#ifdef __linux__
static _Atomic uint64_t next_mem_id = 1;

static void unmap(void* arg) { /* a deferred release */
  cpu_ipc_map* m = arg;
  munmap(m->p, m->maplen);
  if (m->fd >= 0) close(m->fd);
  free(m);
}

static size_t page_round(uint64_t bytes) {
  uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
  return (size_t)((bytes + pg - 1) / pg * pg);
}

int32_t cpu_mem_alloc_shareable(bg_device* dev, uint64_t bytes, bg_devptr* out) {
  cpu_device* d = (cpu_device*)dev;
  int32_t rc = cpu_capture_guard(d, "bg_mem_alloc_flags");
  if (rc) return rc;
  if (bytes > (uint64_t)SIZE_MAX / 2)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_flags: cannot allocate %llu bytes",
                        (unsigned long long)bytes);
  cpu_ipc_map* m = calloc(1, sizeof *m);
  if (!m) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_flags: out of host memory");
  char name[96];
  m->id = atomic_fetch_add(&next_mem_id, 1);
  m->bytes = bytes;
  m->maplen = page_round(bytes);
  mem_name(name, sizeof name, (int32_t)getpid(), m->id, bytes);
  m->fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
  if (m->fd < 0) {
    free(m);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_flags: memfd_create: %s", strerror(errno));
  }
  void* p = MAP_FAILED;
  if (ftruncate(m->fd, (off_t)m->maplen) == 0)
    p = mmap(NULL, m->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(m->fd);
    free(m);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_mem_alloc_flags: cannot allocate %llu shareable bytes: %s",
                        (unsigned long long)bytes, strerror(err));
  }
  m->p = p;
  pthread_mutex_lock(&d->ipc_mu);
  m->next = d->ipc_maps;
  d->ipc_maps = m;
  pthread_mutex_unlock(&d->ipc_mu);
  *out = (bg_devptr)(uintptr_t)p;
  return BG_OK;
}

int32_t cpu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes) {
  cpu_device* d = (cpu_device*)dev;
  pthread_mutex_lock(&d->ipc_mu);
  cpu_ipc_map** mp = find(d, p);
  cpu_ipc_map* m = mp ? *mp : NULL;
  if (!m || m->opened) {
    pthread_mutex_unlock(&d->ipc_mu);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        m ? "bg_ipc_mem_export: 0x%llx was opened from another process's handle "
                            "(export it there)"
                          : "bg_ipc_mem_export: 0x%llx is not the start of a shareable allocation "
                            "of this device (the cpu backend shares only memory allocated with "
                            "BG_MEM_SHAREABLE)",
                        (unsigned long long)p);
  }
  ipc_payload pl = {m->fd, 0, m->id};
  memcpy(payload, &pl, sizeof pl);
  *bytes = m->bytes;
  pthread_mutex_unlock(&d->ipc_mu);
  return BG_OK;
}

int32_t cpu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                         bg_devptr* out) {
  cpu_device* d = (cpu_device*)dev;
  if (pid == (int32_t)getpid())
    return bg_set_error(BG_ERR_INVALID_CONTEXT,
                        "bg_ipc_mem_open: the handle was exported by this process (CUDA refuses "
                        "to open it in the exporting process; use the buffer itself)");
  ipc_payload pl;
  memcpy(&pl, payload, sizeof pl);
  if (!payload_clean(&pl, payload))
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_ipc_mem_open: the handle's payload was altered "
                        "(bytes the exporter writes as zeros are not)");
  pthread_mutex_lock(&d->ipc_mu);
  for (cpu_ipc_map* m = d->ipc_maps; m; m = m->next)
    if (m->opened && m->pid == pid && m->id == pl.id) {
      /* the mapping was opened from the exporter's own record; a handle naming the same
       * allocation with another size or memfd number is not the one it exported */
      if (m->bytes != bytes || m->fd_remote != pl.fd) {
        pthread_mutex_unlock(&d->ipc_mu);
        return bg_set_error(BG_ERR_INVALID_HANDLE,
                            "bg_ipc_mem_open: the handle names %llu bytes of allocation %llu of process "
                            "%d, which is %llu bytes: not a handle that process exported",
                            (unsigned long long)bytes, (unsigned long long)pl.id, (int)pid,
                            (unsigned long long)m->bytes);
      }
      m->opens++;
      *out = (bg_devptr)(uintptr_t)m->p;
      pthread_mutex_unlock(&d->ipc_mu);
      return BG_OK;
    }
  pthread_mutex_unlock(&d->ipc_mu);
  if (bytes > (uint64_t)SIZE_MAX / 2)
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_ipc_mem_open: the handle names %llu bytes: not a "
                        "handle bungpu exported", (unsigned long long)bytes);
  char name[96];
  mem_name(name, sizeof name, pid, pl.id, bytes);
  int fd = -1;
  /* the memfd's name carries the size: a handle whose size was edited names no memfd there */
  int32_t rc = cpu_ipc_open_fd("bg_ipc_mem_open", pid, pl.fd, name, &fd);
  if (rc) return rc;
  struct stat st;
  size_t maplen = page_round(bytes);
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != maplen) {
    close(fd);
    return bg_set_error(BG_ERR_INVALID_HANDLE,
                        "bg_ipc_mem_open: the shared memory does not hold the %llu bytes the handle names",
                        (unsigned long long)bytes);
  }
  void* p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_mem_open: mmap: %s", strerror(err));
  cpu_ipc_map* m = calloc(1, sizeof *m);
  if (!m) {
    munmap(p, maplen);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_mem_open: out of host memory");
  }
  m->p = p;
  m->bytes = bytes;
  m->maplen = maplen;
  m->fd = -1;
  m->opened = 1;
  m->pid = pid;
  m->id = pl.id;
  m->fd_remote = pl.fd;
  m->opens = 1;
  pthread_mutex_lock(&d->ipc_mu);
  m->next = d->ipc_maps;
  d->ipc_maps = m;
  pthread_mutex_unlock(&d->ipc_mu);
  *out = (bg_devptr)(uintptr_t)p;
  return BG_OK;
}

int32_t cpu_ipc_mem_close(bg_device* dev, bg_devptr p) {
  cpu_device* d = (cpu_device*)dev;
  pthread_mutex_lock(&d->ipc_mu);
  cpu_ipc_map** mp = find(d, p);
  cpu_ipc_map* m = mp ? *mp : NULL;
  if (!m || !m->opened) {
    pthread_mutex_unlock(&d->ipc_mu);
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_mem_close: 0x%llx is not an address bg_ipc_mem_open gave on this device",
                        (unsigned long long)p);
  }
  if (--m->opens > 0) {
    pthread_mutex_unlock(&d->ipc_mu);
    return BG_OK;
  }
  *mp = m->next;
  pthread_mutex_unlock(&d->ipc_mu);
  cpu_defer(d, unmap, m); /* queued work that may still use it finishes first */
  return BG_OK;
}

int cpu_ipc_free(cpu_device* d, bg_devptr p, int32_t* rc) {
  pthread_mutex_lock(&d->ipc_mu);
  cpu_ipc_map** mp = find(d, p);
  cpu_ipc_map* m = mp ? *mp : NULL;
  if (!m) {
    pthread_mutex_unlock(&d->ipc_mu);
    return 0;
  }
  if (m->opened) {
    pthread_mutex_unlock(&d->ipc_mu);
    *rc = bg_set_error(BG_ERR_INVALID_VALUE,
                       "bg_mem_free: 0x%llx was opened from another process's handle: close it with "
                       "bg_ipc_mem_close", (unsigned long long)p);
    return 1;
  }
  *mp = m->next;
  pthread_mutex_unlock(&d->ipc_mu);
  cpu_defer(d, unmap, m);
  *rc = BG_OK;
  return 1;
}

void cpu_ipc_close_all(cpu_device* d) {
  pthread_mutex_lock(&d->ipc_mu);
  cpu_ipc_map* m = d->ipc_maps;
  d->ipc_maps = NULL;
  pthread_mutex_unlock(&d->ipc_mu);
  while (m) {
    cpu_ipc_map* next = m->next;
    unmap(m);
    m = next;
  }
}

int32_t cpu_ipc_event_export(void* ev, uint8_t* payload) {
  cpu_event* e = ev;
  if (!e->shm)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_event_export: the event was not created with BG_EVENT_INTERPROCESS");
  ipc_payload pl = {e->shm_fd, 0, e->shm_id};
  memcpy(payload, &pl, sizeof pl);
  return BG_OK;
}

int32_t cpu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out) {
  if (pid == (int32_t)getpid()) /* as for memory: what works here works on CUDA */
    return bg_set_error(BG_ERR_INVALID_CONTEXT,
                        "bg_ipc_event_open: the handle was exported by this process (use the event "
                        "itself)");
  ipc_payload pl;
  memcpy(&pl, payload, sizeof pl);
  if (!payload_clean(&pl, payload))
    return bg_set_error(BG_ERR_INVALID_HANDLE, "bg_ipc_event_open: the handle's payload was altered "
                        "(bytes the exporter writes as zeros are not)");
  void* ev = NULL;
  /* a local event first (no page of its own), then its numbers move to the exporter's page */
  int32_t rc = cpu_event_create(dev, BG_EVENT_DISABLE_TIMING, &ev);
  if (rc) return rc;
  cpu_event* e = ev;
  rc = cpu_event_attach(e, pid, pl.fd, pl.id);
  if (rc) {
    cpu_event_destroy(e);
    return rc;
  }
  e->flags |= BG_EVENT_INTERPROCESS;
  *out = e;
  return BG_OK;
}
#else
static int32_t no_ipc(const char* fn) {
  return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: sharing between processes needs Linux on the cpu backend", fn);
}
int32_t cpu_mem_alloc_shareable(bg_device* dev, uint64_t bytes, bg_devptr* out) {
  (void)dev, (void)bytes, (void)out;
  return no_ipc("bg_mem_alloc_flags");
}
int32_t cpu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes) {
  (void)dev, (void)p, (void)payload, (void)bytes;
  return no_ipc("bg_ipc_mem_export");
}
int32_t cpu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                         bg_devptr* out) {
  (void)dev, (void)pid, (void)payload, (void)bytes, (void)out;
  return no_ipc("bg_ipc_mem_open");
}
int32_t cpu_ipc_mem_close(bg_device* dev, bg_devptr p) {
  (void)dev, (void)p;
  return no_ipc("bg_ipc_mem_close");
}
int cpu_ipc_free(cpu_device* d, bg_devptr p, int32_t* rc) {
  (void)d, (void)p, (void)rc;
  return 0;
}
void cpu_ipc_close_all(cpu_device* d) { (void)d; }
int32_t cpu_ipc_event_export(void* ev, uint8_t* payload) {
  (void)ev, (void)payload;
  return no_ipc("bg_ipc_event_export");
}
int32_t cpu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out) {
  (void)dev, (void)pid, (void)payload, (void)out;
  return no_ipc("bg_ipc_event_open");
}
#endif
