/*
 * cpu/event.c: what an event is underneath its entry points (those are stream.c's): references,
 * a record reached, and waiting for one.
 *
 * An event counts records: `rec_seq` is bumped when a record is issued, `done_seq` when a
 * record is reached (the highest wins). Complete means done_seq >= rec_seq, so an event never
 * recorded is complete. A wait captures the rec_seq of its call and waits for done_seq to
 * reach it. Ops hold references to the events they name, so destroying a pending event is fine.
 * An interprocess event keeps the two numbers in a page of a memfd that other processes map
 * (cpu_event_share, cpu_event_attach): records from any process bump the same numbers, and a
 * waiter polls the page (no condition variable reaches across processes). The page also says
 * which process issued each recent record, so a wait whose records only dead processes could
 * reach fails (BG_ERR_ILLEGAL_STATE) instead of waiting forever.
 *
 * Calls: base.c.
 */
#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#include <sys/syscall.h>
#endif

/* The shared page: the two numbers on separate cache lines, then who issued the latest records:
 * issuer[n % CPU_IPC_ISSUERS] = (n's low 32 bits << 32) | the issuing process's pid, written just
 * after n is taken. A waiter whose records were all issued by processes that no longer exist
 * (killed before reaching them) would wait forever: it fails instead (peer_lost). */
#define CPU_IPC_ISSUERS 64
typedef struct cpu_ipc_page {
  _Atomic uint64_t rec;
  uint8_t pad[56];
  _Atomic uint64_t done;
  uint8_t pad2[56];
  _Atomic uint64_t issuer[CPU_IPC_ISSUERS];
} cpu_ipc_page;
#define CPU_IPC_PAGE 4096
_Static_assert(sizeof(cpu_ipc_page) <= CPU_IPC_PAGE, "the shared page");

uint64_t cpu_event_take_seq(cpu_event* e) {
  uint64_t seq = atomic_fetch_add(e->recp, 1) + 1;
#ifdef __linux__
  if (e->shm)
    atomic_store_explicit(&e->shm->issuer[seq % CPU_IPC_ISSUERS],
                          ((seq & 0xffffffffull) << 32) | (uint32_t)getpid(), memory_order_release);
#endif
  return seq;
}

#ifdef __linux__
int cpu_pid_alive(int32_t pid) {
  if (kill(pid, 0) != 0 && errno != EPERM) return 0;
  char path[48], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = 0;
  const char* rp = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}
#endif

/* For an interprocess event not yet at `seq`: the pid of a process that issued a record at or
 * after `seq` and died before reaching it, when every such record was issued by a process now
 * gone (nothing will ever complete them); 0 while any may still complete (issued here, by a
 * live process, or too many or too new to tell). */
static int32_t peer_lost(cpu_event* e, uint64_t seq) {
#ifdef __linux__
  if (!e->shm) return 0;
  uint64_t r = atomic_load_explicit(e->recp, memory_order_acquire);
  if (atomic_load_explicit(e->donep, memory_order_acquire) >= seq || r < seq || r - seq >= CPU_IPC_ISSUERS)
    return 0;
  int32_t dead = 0, self = (int32_t)getpid();
  for (uint64_t n = seq; n <= r; n++) {
    uint64_t w = atomic_load_explicit(&e->shm->issuer[n % CPU_IPC_ISSUERS], memory_order_acquire);
    if ((w >> 32) != (n & 0xffffffffull)) return 0; /* not written yet */
    int32_t pid = (int32_t)(uint32_t)w;
    if (pid == self || cpu_pid_alive(pid)) return 0;
    dead = pid;
  }
  if (atomic_load_explicit(e->donep, memory_order_acquire) >= seq) return 0;
  return dead;
#else
  (void)e, (void)seq;
  return 0;
#endif
}
#ifndef __linux__
int cpu_pid_alive(int32_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }
#endif

static int32_t lost_error(const char* fn, int32_t pid) {
  return bg_set_error(BG_ERR_ILLEGAL_STATE,
                      "%s: the interprocess event's pending record was issued by process %d, which "
                      "exited before reaching it: it will never be reached",
                      fn, (int)pid);
}

int32_t cpu_event_check_peer(cpu_event* e, uint64_t seq, const char* fn) {
  int32_t pid = peer_lost(e, seq);
  return pid ? lost_error(fn, pid) : BG_OK;
}


void cpu_event_retain(cpu_event* e) { atomic_fetch_add(&e->refs, 1); }

void cpu_event_release(cpu_event* e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
#ifdef __linux__
  if (e->shm) munmap(e->shm, CPU_IPC_PAGE);
  if (e->shm_fd >= 0) close(e->shm_fd);
#endif
  free(e->capdeps);
  free(e);
}

void cpu_event_complete(cpu_event* e, uint64_t seq) {
  pthread_mutex_lock(&e->mu);
  /* the highest wins; another process may complete records of a shared event at the same time */
  uint64_t cur = atomic_load(e->donep);
  while (seq > cur) {
    if (atomic_compare_exchange_weak_explicit(e->donep, &cur, seq, memory_order_release,
                                              memory_order_relaxed)) {
      e->ts_ns = bg_now_ns();
      break;
    }
  }
  if (atomic_load(&e->waiters) > 0) pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

int32_t cpu_event_wait_seq(cpu_event* e, uint64_t seq) {
  if (atomic_load_explicit(e->donep, memory_order_acquire) >= seq) return BG_OK;
  uint64_t t0 = bg_now_ns();
  for (unsigned i = 1; atomic_load_explicit(e->donep, memory_order_acquire) < seq; i++) {
    if ((i & 7) == 0) sched_yield(); else cpu_relax();
    if ((i & 31) == 0 && bg_now_ns() - t0 > CPU_SYNC_SPIN_NS) break;
  }
  if (atomic_load_explicit(e->donep, memory_order_acquire) >= seq) return BG_OK;
  if (e->shm) { /* another process may reach the record: poll, sleeping up to 200 us a round, and
                 * look every 20 ms whether the processes that must reach it still exist */
    uint64_t checked = bg_now_ns();
    for (long ns = 1000; atomic_load_explicit(e->donep, memory_order_acquire) < seq;) {
      struct timespec ts = {0, ns};
      nanosleep(&ts, NULL);
      if (ns < 200000) ns *= 2;
      if (bg_now_ns() - checked > 20000000ull) {
        int32_t pid = peer_lost(e, seq);
        if (pid) return lost_error("bg_event_synchronize", pid);
        checked = bg_now_ns();
      }
    }
    return BG_OK;
  }
  pthread_mutex_lock(&e->mu);
  atomic_fetch_add(&e->waiters, 1);
  while (atomic_load(e->donep) < seq) pthread_cond_wait(&e->cv, &e->mu);
  atomic_fetch_sub(&e->waiters, 1);
  pthread_mutex_unlock(&e->mu);
  return BG_OK;
}

/* ---- interprocess events: the shared page ----------------------------------------------------- */
#ifdef __linux__
static _Atomic uint64_t next_ipc_id = 1;

static void page_name(char* buf, size_t cap, int32_t pid, uint64_t id) {
  snprintf(buf, cap, "bungpu-event-%d-%llu", (int)pid, (unsigned long long)id);
}

int32_t cpu_ipc_open_fd(const char* fn, int32_t pid, int32_t fd, const char* name, int* out) {
  char path[64], link[256], want[160];
  if (fd < 0) return bg_set_error(BG_ERR_INVALID_VALUE, "%s: not a bungpu interprocess handle", fn);
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
  snprintf(want, sizeof want, "/memfd:%s (deleted)", name);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n < 0 || (size_t)n != strlen(want) || memcmp(link, want, (size_t)n) != 0)
    return bg_set_error(BG_ERR_INVALID_HANDLE,
                        "%s: the exporting process %d does not hold %s (freed, destroyed or "
                        "exited, or the handle was altered)%s",
                        fn, (int)pid, name, n < 0 && errno == EACCES ? ": permission denied" : "");
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0)
    return bg_set_error(errno == ENOENT ? BG_ERR_INVALID_HANDLE : BG_ERR_NOT_PERMITTED,
                        "%s: open %s: %s", fn, path, strerror(errno));
  *out = f;
  return BG_OK;
}

static int32_t map_page(cpu_event* e, int fd, uint64_t id, const char* fn) {
  void* p = mmap(NULL, CPU_IPC_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: mmap of the shared page: %s", fn, strerror(errno));
  }
  e->shm = p;
  e->shm_fd = fd;
  e->shm_id = id;
  e->recp = &e->shm->rec;
  e->donep = &e->shm->done;
  return BG_OK;
}

int32_t cpu_event_share(cpu_event* e) {
  char name[96];
  uint64_t id = atomic_fetch_add(&next_ipc_id, 1);
  page_name(name, sizeof name, (int32_t)getpid(), id);
  int fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
  if (fd < 0)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: memfd_create: %s", strerror(errno));
  if (ftruncate(fd, CPU_IPC_PAGE) != 0) {
    close(fd);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_event_create: ftruncate: %s", strerror(errno));
  }
  return map_page(e, fd, id, "bg_event_create"); /* a new memfd reads as zeros: never recorded */
}

int32_t cpu_event_attach(cpu_event* e, int32_t pid, int32_t fd, uint64_t id) {
  char name[96];
  page_name(name, sizeof name, pid, id);
  int f = -1;
  int32_t rc = cpu_ipc_open_fd("bg_ipc_event_open", pid, fd, name, &f);
  if (rc) return rc;
  return map_page(e, f, id, "bg_ipc_event_open");
}
#else
int32_t cpu_ipc_open_fd(const char* fn, int32_t pid, int32_t fd, const char* name, int* out) {
  (void)pid, (void)fd, (void)name, (void)out;
  return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: sharing between processes needs Linux on the cpu backend", fn);
}
int32_t cpu_event_share(cpu_event* e) {
  (void)e;
  return bg_set_error(BG_ERR_NOT_SUPPORTED,
                      "bg_event_create: interprocess events need Linux on the cpu backend");
}
int32_t cpu_event_attach(cpu_event* e, int32_t pid, int32_t fd, uint64_t id) {
  (void)e, (void)pid, (void)fd, (void)id;
  return bg_set_error(BG_ERR_NOT_SUPPORTED,
                      "bg_ipc_event_open: interprocess events need Linux on the cpu backend");
}
#endif
