/*
 * cuda/nccl.c: communicators of the CUDA backend (bungpu.h, "collectives") over NCCL, loaded with
 * dlopen at the first use (BUNGPU_LIBNCCL names the library, else libnccl.so.2, libnccl.so). The
 * declarations are nccl_api.h's, checked against the real nccl.h. bungpu's reduction and data
 * type codes are NCCL's, so they pass straight through; stream capture is CUDA's own (NCCL's
 * kernels join the capture like any launch). Groups map onto ncclGroupStart / ncclGroupEnd.
 * Every entry makes the device's primary context current for its length (NCCL_ENTER: pushed, then
 * popped, so the thread's own context is as it was), as NCCL works on the runtime's current device. ncclCommInitRank blocks until every rank has joined (NCCL's
 * rule): ranks of one process join from separate threads, or through bg_comm_init_all. device.c's table
 * names bg_cuda_coll_ops.
 *
 * Calls: context.c, base.c.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include "../internal.h"
#include "nccl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_api {
#define BGNCCL_FIELD(ret, name, params) PFN_bg_##name name;
  BGNCCL_FUNCS(BGNCCL_FIELD)
  BGNCCL_FUNCS_OPTIONAL(BGNCCL_FIELD)
#undef BGNCCL_FIELD
} nccl_api;

static nccl_api nc;
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int nccl_state; /* 0 not tried, 1 loaded, -1 failed (nccl_msg says why) */
static char nccl_msg[512];

static int32_t load_nccl(const char* fn) {
  int st = atomic_load_explicit(&nccl_state, memory_order_acquire);
  if (st == 0) {
    pthread_mutex_lock(&nccl_lock);
    st = atomic_load(&nccl_state);
    if (st == 0) {
#if defined(__APPLE__)
      snprintf(nccl_msg, sizeof nccl_msg, "NCCL is not available on macOS");
      st = -1;
#else
      const char* env = getenv("BUNGPU_LIBNCCL");
      const char* names[3] = {env, "libnccl.so.2", "libnccl.so"};
      void* h = NULL;
      char err[256] = {0};
      for (int i = env && *env ? 0 : 1; i < 3 && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && !err[0]) {
          const char* e = dlerror();
          if (e) snprintf(err, sizeof err, "%s", e);
        }
        if (env && *env) break; /* a named library is the only one tried */
      }
      const char* missing = NULL;
      if (h) {
#define BGNCCL_LOAD(ret, name, params)                                                             \
  {                                                                                                \
    void* p_ = dlsym(h, #name);                                                                    \
    memcpy(&nc.name, &p_, sizeof p_);                                                              \
    if (!p_ && !missing) missing = #name;                                                          \
  }
#define BGNCCL_LOAD_OPT(ret, name, params)                                                         \
  {                                                                                                \
    void* p_ = dlsym(h, #name);                                                                    \
    memcpy(&nc.name, &p_, sizeof p_);                                                              \
  }
        BGNCCL_FUNCS(BGNCCL_LOAD)
        BGNCCL_FUNCS_OPTIONAL(BGNCCL_LOAD_OPT)
#undef BGNCCL_LOAD
#undef BGNCCL_LOAD_OPT
      }
      if (!h) {
        snprintf(nccl_msg, sizeof nccl_msg,
                 env && *env ? "BUNGPU_LIBNCCL=%s could not be loaded (dlopen: %s)"
                             : "%slibnccl.so.2, libnccl.so not found (dlopen: %s); install NCCL (e.g. pip install "
                               "nvidia-nccl-cu13) or set BUNGPU_LIBNCCL to its path",
                 env && *env ? env : "", err);
        st = -1;
      } else if (missing) {
        snprintf(nccl_msg, sizeof nccl_msg, "the loaded NCCL lacks %s", missing);
        dlclose(h);
        st = -1;
      } else {
        st = 1;
      }
#endif
      atomic_store_explicit(&nccl_state, st, memory_order_release);
    }
    pthread_mutex_unlock(&nccl_lock);
  }
  if (st < 0) return bg_set_error(BG_ERR_BACKEND_UNAVAILABLE, "%s: %s", fn, nccl_msg);
  return BG_OK;
}

static int32_t code_of(bgnccl_result r) {
  switch (r) {
    case BGncclSuccess: return BG_OK;
    case BGncclInvalidArgument:
    case BGncclInvalidUsage: return BG_ERR_INVALID_VALUE;
    case BGncclUnhandledCudaError: return BG_ERR_LAUNCH_FAILED;
    case BGncclRemoteError: return BG_ERR_ILLEGAL_STATE;
    case BGncclInProgress: return BG_ERR_NOT_READY;
    case 8: return BG_ERR_LAUNCH_TIMEOUT; /* ncclTimeout (NCCL 2.24+) */
    default: return BG_ERR_UNKNOWN;
  }
}

static int32_t fail(bgnccl_result r, const char* call, bgnccl_comm comm) {
  const char* last = comm && nc.ncclGetLastError ? nc.ncclGetLastError(comm) : NULL;
  return bg_set_error(code_of(r), "%s: NCCL error %u (%s)%s%s", call, r,
                      nc.ncclGetErrorString ? nc.ncclGetErrorString(r) : "?", last && *last ? ": " : "",
                      last && *last ? last : "");
}

#define NCALL(comm, fn, args)                                                                      \
  do {                                                                                             \
    bgnccl_result r_ = nc.fn args;                                                                 \
    if (r_ != BGncclSuccess) return fail(r_, #fn, comm);                                           \
  } while (0)

typedef struct nccl_comm {
  bg_obj h;
  bgnccl_comm c;
  int32_t rank, nranks;
} nccl_comm;

static int32_t nc_unique_id(bg_device* dev, uint8_t out[BG_COMM_ID_BYTES]) {
  int32_t rc = load_nccl("bg_comm_unique_id");
  if (rc) return rc;
  NCCL_ENTER(dev);
  bgnccl_unique_id id;
  NCALL(NULL, ncclGetUniqueId, (&id));
  memcpy(out, id.internal, BG_COMM_ID_BYTES);
  return BG_OK;
}

static nccl_comm* wrap(bg_device* dev, bgnccl_comm c, int32_t rank, int32_t n) {
  nccl_comm* w = calloc(1, sizeof *w);
  if (!w) return NULL;
  bg_obj_init(w, BG_KIND_COMM, dev);
  w->c = c;
  w->rank = rank;
  w->nranks = n;
  return w;
}

static int32_t nc_init_rank(bg_device* dev, int32_t n, const uint8_t id[BG_COMM_ID_BYTES], int32_t rank, void** out) {
  int32_t rc = load_nccl("bg_comm_init_rank");
  if (rc) return rc;
  NCCL_ENTER(dev);
  bgnccl_unique_id uid;
  memcpy(uid.internal, id, BG_COMM_ID_BYTES);
  bgnccl_comm c = NULL;
  NCALL(NULL, ncclCommInitRank, (&c, n, uid, rank));
  nccl_comm* w = wrap(dev, c, rank, n);
  if (!w) {
    nc.ncclCommDestroy(c);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_rank: out of host memory");
  }
  *out = w;
  return BG_OK;
}

static int32_t nc_init_all(bg_device** devs, int32_t n, void** out) {
  int32_t rc = load_nccl("bg_comm_init_all");
  if (rc) return rc;
  int* list = calloc((size_t)n, sizeof *list);
  bgnccl_comm* cs = calloc((size_t)n, sizeof *cs);
  if (!list || !cs) {
    free(list);
    free(cs);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_all: out of host memory");
  }
  for (int32_t i = 0; i < n; i++) list[i] = bgcu_nccl_ordinal(devs[i]);
  {
    bgcu_nccl_guard g = {0, NULL};
    rc = bgcu_nccl_enter(devs[0], &g);
    if (!rc) {
      bgnccl_result r = nc.ncclCommInitAll(cs, n, list);
      if (r != BGncclSuccess) rc = fail(r, "ncclCommInitAll", NULL);
      bgcu_nccl_leave(&g);
    }
  }
  for (int32_t i = 0; i < n && !rc; i++) {
    out[i] = wrap(devs[i], cs[i], i, n);
    if (!out[i]) rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_comm_init_all: out of host memory");
  }
  if (rc)
    for (int32_t i = 0; i < n; i++) {
      if (cs[i]) nc.ncclCommDestroy(cs[i]);
      free(out[i]);
      out[i] = NULL;
    }
  free(list);
  free(cs);
  return rc;
}

static int32_t nc_destroy(void* comm) {
  nccl_comm* w = comm;
  NCCL_ENTER(w->h.dev);
  bgnccl_result r = nc.ncclCommDestroy(w->c);
  bg_obj_kill(w);
  free(w);
  return r == BGncclSuccess ? BG_OK : fail(r, "ncclCommDestroy", NULL);
}

static int32_t nc_abort(void* comm) {
  nccl_comm* w = comm;
  NCCL_ENTER(w->h.dev);
  /* ncclCommAbort frees the communicator: the handle stays, answering that it was aborted */
  bgnccl_comm c = w->c;
  if (!c) return BG_OK;
  w->c = NULL;
  NCALL(NULL, ncclCommAbort, (c));
  return BG_OK;
}

static int32_t nc_info(void* comm, int32_t* rank, int32_t* nranks) {
  nccl_comm* w = comm;
  *rank = w->rank;
  *nranks = w->nranks;
  return BG_OK;
}

static int32_t nc_check(void* comm) {
  nccl_comm* w = comm;
  if (!w->c) return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_check: the communicator was aborted");
  bgnccl_result e = 0;
  NCALL(w->c, ncclCommGetAsyncError, (w->c, &e));
  if (e != BGncclSuccess) return fail(e, "ncclCommGetAsyncError", w->c);
  return BG_OK;
}

static int32_t nc_call(void* comm, void* s, const bg_coll_call* a, int grouped) {
  (void)grouped; /* ncclGroupStart was called by group_start */
  nccl_comm* w = comm;
  if (!w->c) return bg_set_error(BG_ERR_ILLEGAL_STATE, "bg_comm_collective: the communicator was aborted");
  NCCL_ENTER(w->h.dev);
  bgnccl_stream st = bgcu_stream_handle(s);
  const void* send = (const void*)(uintptr_t)a->send;
  void* recv = (void*)(uintptr_t)a->recv;
  bgnccl_enum t = (bgnccl_enum)a->dtype, op = (bgnccl_enum)a->redop;
  switch (a->coll) {
    case BG_COLL_ALL_REDUCE: NCALL(w->c, ncclAllReduce, (send, recv, a->count, t, op, w->c, st)); break;
    case BG_COLL_BROADCAST: NCALL(w->c, ncclBroadcast, (send, recv, a->count, t, a->peer, w->c, st)); break;
    case BG_COLL_REDUCE: NCALL(w->c, ncclReduce, (send, recv, a->count, t, op, a->peer, w->c, st)); break;
    case BG_COLL_ALL_GATHER: NCALL(w->c, ncclAllGather, (send, recv, a->count, t, w->c, st)); break;
    case BG_COLL_REDUCE_SCATTER: NCALL(w->c, ncclReduceScatter, (send, recv, a->count, t, op, w->c, st)); break;
    case BG_COLL_SEND: NCALL(w->c, ncclSend, (send, a->count, t, a->peer, w->c, st)); break;
    case BG_COLL_RECV: NCALL(w->c, ncclRecv, (recv, a->count, t, a->peer, w->c, st)); break;
    default: return bg_set_error(BG_ERR_INVALID_VALUE, "bg_comm_collective: no collective %d", (int)a->coll);
  }
  return BG_OK;
}

static int32_t nc_group_start(void) {
  int32_t rc = load_nccl("bg_comm_group_start");
  if (rc) return rc;
  NCALL(NULL, ncclGroupStart, ());
  return BG_OK;
}

static int32_t nc_group_end(int discard) {
  (void)discard; /* NCCL cannot drop what a group recorded */
  NCALL(NULL, ncclGroupEnd, ());
  return BG_OK;
}

const bg_coll_ops bg_cuda_coll_ops = {
    .unique_id = nc_unique_id,
    .init_rank = nc_init_rank,
    .init_all = nc_init_all,
    .destroy = nc_destroy,
    .abort = nc_abort,
    .info = nc_info,
    .check = nc_check,
    .set_timeout = NULL,
    .call = nc_call,
    .group_start = nc_group_start,
    .group_end = nc_group_end,
};
