/*
 * bungpu.h: the one flat C ABI of libbungpu.
 *
 * Conventions:
 *  - Every function returns int32_t: BG_OK (0) or a BG_ERR_* code. Results come back through
 *    out-pointers. bg_last_error() gives the calling thread's last message, naming the backend
 *    call and its native code.
 *  - Handles are opaque pointers. A device handle carries its backend; every other handle knows
 *    its device, so one symbol serves every backend.
 *  - Device memory is addressed by a 64-bit device address (bg_devptr), like CUdeviceptr. A view
 *    of a buffer is an address plus an offset. On the CPU backend it is a host address; on Metal
 *    it is the shared-storage contents address, which the shim maps back to its MTLBuffer.
 *  - No struct crosses by value. Arrays cross as pointer + length.
 *  - The library never aborts, never prints, never exits.
 *
 * Error codes share CUDA's numbering where CUDA has the same error, so a driver code passes
 * through unchanged and a CPU misuse returns what CUDA would return.
 */
#ifndef BUNGPU_H
#define BUNGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define BG_API __declspec(dllexport)
#else
#define BG_API __attribute__((visibility("default")))
#endif

/* Bump on any change of a signature, a struct layout, a constant or the command format. */
#define BG_ABI_VERSION 5

/* ---- status codes ------------------------------------------------------------------------ */
enum {
  BG_OK = 0,
  BG_ERR_INVALID_VALUE = 1,
  BG_ERR_OUT_OF_MEMORY = 2,
  BG_ERR_NOT_INITIALIZED = 3,
  BG_ERR_DEINITIALIZED = 4,
  BG_ERR_NO_DEVICE = 100,
  BG_ERR_INVALID_DEVICE = 101,
  BG_ERR_INVALID_IMAGE = 200,
  BG_ERR_INVALID_CONTEXT = 201,
  BG_ERR_NO_BINARY_FOR_GPU = 209,       /* no code in the image for this GPU's architecture */
  BG_ERR_INVALID_PTX = 218,
  BG_ERR_UNSUPPORTED_PTX_VERSION = 222, /* PTX newer than the driver: compile to CUBIN instead */
  BG_ERR_INVALID_SOURCE = 300,
  BG_ERR_FILE_NOT_FOUND = 301,
  BG_ERR_INVALID_HANDLE = 400,
  BG_ERR_ILLEGAL_STATE = 401,
  BG_ERR_NOT_FOUND = 500,
  BG_ERR_NOT_READY = 600,
  BG_ERR_ILLEGAL_ADDRESS = 700,
  BG_ERR_LAUNCH_OUT_OF_RESOURCES = 701,
  BG_ERR_LAUNCH_TIMEOUT = 702,
  BG_ERR_PEER_ACCESS_ALREADY_ENABLED = 704, /* bg_device_enable_peer_access twice */
  BG_ERR_PEER_ACCESS_NOT_ENABLED = 705,     /* bg_device_disable_peer_access without an enable */
  /* Sticky kernel faults: the context is unusable afterwards, as with 700 and 719. */
  BG_ERR_ASSERT = 710,                /* a device-side assert() failed */
  BG_ERR_HARDWARE_STACK_ERROR = 714,  /* the call stack overflowed (deep recursion) */
  BG_ERR_ILLEGAL_INSTRUCTION = 715,
  BG_ERR_MISALIGNED_ADDRESS = 716,
  BG_ERR_INVALID_ADDRESS_SPACE = 717, /* an address of the wrong space (shared, local, global) */
  BG_ERR_INVALID_PC = 718,
  BG_ERR_LAUNCH_FAILED = 719,
  BG_ERR_NOT_PERMITTED = 800,
  BG_ERR_NOT_SUPPORTED = 801,
  BG_ERR_STREAM_CAPTURE_UNSUPPORTED = 900,
  BG_ERR_STREAM_CAPTURE_INVALIDATED = 901,
  BG_ERR_STREAM_CAPTURE_MERGE = 902,
  BG_ERR_STREAM_CAPTURE_UNMATCHED = 903,
  BG_ERR_STREAM_CAPTURE_UNJOINED = 904,
  BG_ERR_STREAM_CAPTURE_ISOLATION = 905,
  BG_ERR_STREAM_CAPTURE_IMPLICIT = 906,
  BG_ERR_CAPTURED_EVENT = 907,
  BG_ERR_STREAM_CAPTURE_WRONG_THREAD = 908,
  BG_ERR_BACKEND_UNAVAILABLE = 990, /* the backend's driver or framework is absent */
  BG_ERR_COMPILE = 991,             /* runtime compilation failed; the log says why */
  BG_ERR_UNKNOWN = 999
};

/* ---- backends ---------------------------------------------------------------------------- */
/* A backend's number is its line in the library's backend table (shim/backends.c); these name
 * the lines every build has. bg_backend_count and bg_backend_name list them all. */
enum { BG_BACKEND_CPU = 0, BG_BACKEND_CUDA = 1, BG_BACKEND_METAL = 2 };

/* ---- flags ------------------------------------------------------------------------------- */
enum { BG_HOST_ALLOC_MAPPED = 1u, BG_HOST_ALLOC_PORTABLE = 2u };
enum { BG_STREAM_DEFAULT = 0u, BG_STREAM_NON_BLOCKING = 1u };
enum {
  BG_EVENT_DEFAULT = 0u,
  BG_EVENT_BLOCKING_SYNC = 1u,
  BG_EVENT_DISABLE_TIMING = 2u,
  BG_EVENT_INTERPROCESS = 4u /* with DISABLE_TIMING: can be shared between processes (bg_ipc_*) */
};

/* Capture modes: values equal CUstreamCaptureMode. */
enum { BG_CAPTURE_MODE_GLOBAL = 0, BG_CAPTURE_MODE_THREAD_LOCAL = 1, BG_CAPTURE_MODE_RELAXED = 2 };
/* Capture status: values equal CUstreamCaptureStatus. */
enum { BG_CAPTURE_NONE = 0, BG_CAPTURE_ACTIVE = 1, BG_CAPTURE_INVALIDATED = 2 };

/* Module image kinds for bg_module_load. */
enum {
  BG_IMAGE_SHARED_LIBRARY = 0, /* CPU: data is a NUL-terminated path to a shared library */
  BG_IMAGE_PTX = 1,            /* CUDA: NUL-terminated PTX text */
  BG_IMAGE_CUBIN = 2,          /* CUDA: cubin / fatbin bytes */
  BG_IMAGE_MSL_SOURCE = 3,     /* Metal: Metal Shading Language source text */
  BG_IMAGE_METALLIB = 4,       /* Metal: a compiled metallib */
  BG_IMAGE_SYMBOLS = 5         /* CPU: bytes/16 pairs {u64 name (char*), u64 function}: kernels
                                  compiled in memory (Bun's TinyCC); the caller keeps the code
                                  loaded for as long as the process may run them */
};

typedef uint64_t bg_devptr;

typedef struct bg_device_props {
  char name[256];
  int32_t backend;
  int32_t ordinal;
  int32_t compute_units;         /* SMs on CUDA, cores on CPU, GPU cores (or 0) on Metal */
  int32_t cc_major;              /* CUDA compute capability; 0 elsewhere */
  int32_t cc_minor;
  int32_t max_threads_per_block;
  int32_t warp_size;             /* 32 on CUDA, SIMD width on Metal, 1 on CPU */
  int32_t unified_memory;        /* 1 where host and device share memory (CPU, Apple silicon) */
  int32_t can_map_host_memory;
  int32_t concurrent_kernels;
  int32_t max_shared_bytes_per_block;
  int32_t reserved0;
  uint64_t total_mem;
  /* Launch limits, the one source of them (TypeScript checks every launch against these): */
  int32_t max_block_dim[3];      /* block x, y, z */
  int32_t max_grid_dim[3];       /* grid x, y, z */
  uint64_t max_grid_blocks;      /* most blocks in one grid; 0: the per-dimension limits only */
  uint64_t reserved[2];
} bg_device_props;

/* ---- library ----------------------------------------------------------------------------- */
BG_API int32_t bg_abi_version(void);                  /* returns BG_ABI_VERSION, not a status */
BG_API int32_t bg_source_hash(char* buf, uint64_t cap); /* sha-256 hex of shim/ sources */
BG_API int32_t bg_last_error(char* buf, uint64_t cap);  /* returns the message length */
BG_API int32_t bg_last_error_code(void);                /* this thread's last status */
BG_API int32_t bg_init(void);
BG_API int32_t bg_noop(void);                          /* the cheapest possible crossing */

/* ---- backends and devices ---------------------------------------------------------------- */
/* Backends are numbered 0 .. bg_backend_count() - 1; bg_backend_name gives each one's name
 * ("cpu", "cuda", "metal"); a number past the end is BG_ERR_INVALID_VALUE everywhere. */
BG_API int32_t bg_backend_count(void); /* returns the count, not a status */
BG_API int32_t bg_backend_name(int32_t backend, char* buf, uint64_t cap);
/* available: 1 if the backend loaded; count: its devices; msg: why not, naming what was tried. */
BG_API int32_t bg_backend_info(int32_t backend, int32_t* available, int32_t* count, char* msg,
                               uint64_t cap);
BG_API int32_t bg_device_open(int32_t backend, int32_t ordinal, void** out_dev);
BG_API int32_t bg_device_close(void* dev);
BG_API int32_t bg_device_props_get(void* dev, bg_device_props* out);
BG_API int32_t bg_device_mem_info(void* dev, uint64_t* free_bytes, uint64_t* total_bytes);
BG_API int32_t bg_device_synchronize(void* dev);

/* ---- memory ------------------------------------------------------------------------------ */
BG_API int32_t bg_mem_alloc(void* dev, uint64_t bytes, bg_devptr* out);
BG_API int32_t bg_mem_free(void* dev, bg_devptr ptr);
/* Pinned host memory; with BG_HOST_ALLOC_MAPPED, out_dev receives its device address. */
BG_API int32_t bg_host_alloc(void* dev, uint64_t bytes, uint32_t flags, void** out_host,
                             bg_devptr* out_dev);
BG_API int32_t bg_host_free(void* dev, void* host);
/* Synchronous copies and memset. Each is an operation of the device's default stream, which is
 * CUDA's legacy stream: it starts after all work queued before the call on the default stream
 * and on every blocking stream (one created without BG_STREAM_NON_BLOCKING), but not on
 * non-blocking streams. Each returns only when its data is in place, so work queued afterwards on
 * any stream, non-blocking ones included, sees it (stronger than cuMemsetD* and device-to-device
 * or pageable cuMemcpy, which may return before the data lands: the CUDA backend waits for them).
 * During capture: refused per CaptureMode (BG_ERR_STREAM_CAPTURE_UNSUPPORTED), and whenever a
 * blocking stream is capturing (BG_ERR_STREAM_CAPTURE_IMPLICIT); either invalidates the capture.
 * Not to be called from a host function of a stream they wait for (it would wait for itself). */
BG_API int32_t bg_memcpy_htod(void* dev, bg_devptr dst, const void* src, uint64_t bytes);
BG_API int32_t bg_memcpy_dtoh(void* dev, void* dst, bg_devptr src, uint64_t bytes);
BG_API int32_t bg_memcpy_dtod(void* dev, bg_devptr dst, bg_devptr src, uint64_t bytes);
/* Fill `count` elements of `elem_size` (1, 2 or 4) bytes with the low bits of `pattern`. */
BG_API int32_t bg_memset(void* dev, bg_devptr dst, uint32_t pattern, uint32_t elem_size,
                         uint64_t count);

/* ---- stream-ordered allocation and memory pools --------------------------------------------
 * A pool (per device; bg_mempool_default is the device's own, bg_mempool_create makes more) hands
 * out device memory in stream order, as cuMemAllocFromPoolAsync / cuMemFreeAsync do.
 *  - bg_mem_alloc_async(stream, pool, bytes, &ptr): memory usable by work queued on `stream`
 *    after the call (pool NULL: the device's default pool). Sizes are rounded up to a multiple
 *    of BG_MEMPOOL_GRANULE on the CPU backend (the CUDA driver rounds as it likes).
 *  - bg_mem_free_async(stream, ptr): the block returns to its pool at that point of `stream`.
 *    Work queued on `stream` afterwards may get it again at once; another stream gets it only
 *    once `stream` has completed the work queued before the free. A pointer that is not a live
 *    stream-ordered allocation of this device (freed twice, foreign) is BG_ERR_INVALID_VALUE.
 *  - Stats (bg_mempool_stats): reserved (bytes the pool holds), used (bytes handed out and not
 *    freed), and the high-water mark of each since creation or bg_mempool_reset_peak.
 *  - Release threshold: at a synchronize of a stream or the device, a pool holding more than
 *    its threshold of reserved bytes releases unused blocks (whose frees have completed) until
 *    it holds no more than the threshold. bg_mempool_trim(pool, keep) does the same now, down to
 *    `keep` bytes.
 *  - During stream capture, an allocation on a capturing stream becomes graph memory (CUDA: a
 *    memory allocation node): the graph owns it, its address is fixed, every replay uses the
 *    same memory, and it is released with the last of the graph and its execs. Free it inside
 *    the same capture; a free of other memory inside a capture is BG_ERR_NOT_SUPPORTED.
 *  - bg_mempool_destroy: the default pool cannot be destroyed (BG_ERR_INVALID_VALUE); a pool
 *    with blocks still handed out keeps them valid until they are freed.
 * Backends without pools (Metal) use plain allocations with the same calls: the alloc is
 * bg_mem_alloc's, the free waits for the stream first; the stats count them alike. */
#define BG_MEMPOOL_GRANULE 256
BG_API int32_t bg_mempool_create(void* dev, uint64_t release_threshold, void** out);
BG_API int32_t bg_mempool_default(void* dev, void** out); /* owned by the device */
BG_API int32_t bg_mempool_destroy(void* pool);
BG_API int32_t bg_mempool_set_threshold(void* pool, uint64_t release_threshold);
BG_API int32_t bg_mempool_trim(void* pool, uint64_t keep_bytes);
BG_API int32_t bg_mempool_stats(void* pool, uint64_t* reserved, uint64_t* used,
                                uint64_t* reserved_high, uint64_t* used_high);
BG_API int32_t bg_mempool_reset_peak(void* pool);
BG_API int32_t bg_mem_alloc_async(void* stream, void* pool, uint64_t bytes, bg_devptr* out);
BG_API int32_t bg_mem_free_async(void* stream, bg_devptr ptr);
/* ---- memory and events shared between processes (CUDA IPC) ---------------------------------
 * A process exports a device allocation or an event as a handle of BG_IPC_HANDLE_BYTES opaque
 * bytes, sends them to another process by any means (a pipe, a socket, a file), and that process
 * opens them on a device of the same backend (cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcGetEventHandle / cuIpcOpenEventHandle).
 *  - Memory: CUDA exports any cuMemAlloc allocation; the CPU backend exports only memory
 *    allocated with BG_MEM_SHAREABLE (bg_mem_alloc_flags), which lives in a shared-memory file
 *    (Linux memfd; the importer opens it through /proc/<pid>/fd). `ptr` must be the start of an
 *    allocation (else BG_ERR_INVALID_VALUE). bg_ipc_mem_open maps it and gives its address and
 *    size; opening the same handle again in one process returns the same address and counts;
 *    bg_ipc_mem_close undoes one open (unmapped at the last, once queued work is done).
 *    Opening a handle in the process that exported it is BG_ERR_INVALID_CONTEXT, as on CUDA.
 *    The exporter must keep the allocation until every importer has closed it (CUDA: freeing it
 *    earlier is undefined; on the CPU backend the pages live on until the last unmap, and a
 *    handle opened after the free is BG_ERR_INVALID_HANDLE).
 *  - Events: created with BG_EVENT_INTERPROCESS | BG_EVENT_DISABLE_TIMING (only together, as
 *    CU_EVENT_INTERPROCESS requires: else BG_ERR_INVALID_VALUE). The opened event behaves as a
 *    local one created with BG_EVENT_DISABLE_TIMING: record, query, synchronize and stream waits
 *    work in both processes, and a wait waits for the latest record issued, in either process,
 *    before the wait call. Exporting another event is BG_ERR_INVALID_VALUE; opening a handle in
 *    the exporting process BG_ERR_INVALID_CONTEXT (as for memory; CUDA leaves it undocumented). The exporter's event
 *    must outlive the importers' use. CPU: the record numbers live in a shared page; a waiting
 *    stream polls it. A pending record whose issuing process died is never reached: query,
 *    synchronize and new stream waits are BG_ERR_ILLEGAL_STATE (a stream wait already queued ends).
 *  - A handle whose bytes were altered (its size, its payload) names no allocation the exporter
 *    holds: BG_ERR_INVALID_HANDLE (the CPU backend checks the size against the exporter's
 *    record; an opened mapping is exactly the exported allocation).
 *  - A handle of another kind, another backend or garbage: BG_ERR_INVALID_VALUE. Backends
 *    without sharing (Metal; the CPU backend off Linux): BG_ERR_NOT_SUPPORTED. */
#define BG_IPC_HANDLE_BYTES 96
enum { BG_MEM_SHAREABLE = 1u };
BG_API int32_t bg_mem_alloc_flags(void* dev, uint64_t bytes, uint32_t flags, bg_devptr* out);
BG_API int32_t bg_ipc_mem_export(void* dev, bg_devptr ptr, void* out_handle);
BG_API int32_t bg_ipc_mem_open(void* dev, const void* handle, bg_devptr* out, uint64_t* out_bytes);
BG_API int32_t bg_ipc_mem_close(void* dev, bg_devptr ptr);
BG_API int32_t bg_ipc_event_export(void* event, void* out_handle);
BG_API int32_t bg_ipc_event_open(void* dev, const void* handle, void** out_event);
/* ---- several devices: peer access and copies between devices ------------------------------
 * Peer access is directional, as cuCtxEnablePeerAccess: after bg_device_enable_peer_access(a, b)
 * device a's work may address device b's memory directly. Enabling it twice is
 * BG_ERR_PEER_ACCESS_ALREADY_ENABLED, disabling it when not enabled BG_ERR_PEER_ACCESS_NOT_ENABLED,
 * enabling it where bg_device_can_access_peer says 0 (the device itself, another backend, or
 * hardware without a path) BG_ERR_INVALID_DEVICE. Closing a device drops the access others had
 * to it. CPU devices (BUNGPU_CPU_DEVICES=N) share one address space, so each can access every
 * other, but only once enabled. */
BG_API int32_t bg_device_can_access_peer(void* dev, void* peer, int32_t* out_can);
BG_API int32_t bg_device_enable_peer_access(void* dev, void* peer);
BG_API int32_t bg_device_disable_peer_access(void* dev, void* peer);
/* Copy `bytes` from `src` on src_dev to `dst` on dst_dev in the order of `stream`, which belongs
 * to either device (cuMemcpyPeerAsync): the copy starts after the work queued before it on that
 * stream and later work on it sees the data; work on the other device orders itself with an
 * event recorded after the copy. It goes directly when the stream's device has peer access to
 * the other device, otherwise it is staged through host memory (never refused for want of
 * access); *out_path (when not NULL) says which: BG_COPY_PATH_*. On one device it is an
 * ordinary device-to-device copy. Devices of different backends: BG_ERR_NOT_SUPPORTED. */
enum { BG_COPY_PATH_DEVICE = 0, BG_COPY_PATH_PEER = 1, BG_COPY_PATH_STAGED = 2 };
BG_API int32_t bg_memcpy_peer_async(void* stream, bg_devptr dst, void* dst_dev, bg_devptr src,
                                    void* src_dev, uint64_t bytes, int32_t* out_path);

/* ---- collectives: communicators over several devices (NCCL's model) ---------------------------
 * A communicator joins one device of each of `nranks` ranks. bg_comm_init_all makes the ranks of
 * one process's devices at once (ncclCommInitAll); across processes or machines each rank calls
 * bg_comm_init_rank with the same id, made once by bg_comm_unique_id and passed however the
 * caller likes (ncclGetUniqueId + ncclCommInitRank). CUDA: NCCL (libnccl.so.2, loaded at first
 * use). CPU: the devices of one process, or processes of one machine through a shared-memory
 * segment named from the id.
 * A collective is stream-ordered: bg_comm_collective queues it on `stream` (a stream of the
 * communicator's device) and returns; it completes once every rank's contribution is in, so,
 * as in NCCL, every rank must issue the same collectives in the same order, and a rank that
 * never gets there keeps the others waiting (bg_comm_abort, or a timeout where the backend has
 * bg_comm_set_timeout, ends the wait; the communicator is then unusable and bg_comm_check says
 * why; CPU: a rank whose process died, or bg_comm_destroy of a rank whose calls wait for ranks
 * that no longer move, aborts it too, BG_ERR_ILLEGAL_STATE). CPU: bg_comm_init_rank with a rank
 * that a live communicator of the id holds is BG_ERR_INVALID_VALUE, also after all joined.
 * Between bg_comm_group_start and bg_comm_group_end (a per-thread depth, ncclGroupStart)
 * calls are only recorded; the outermost group end issues them together, so sends and receives
 * between the same ranks cannot block each other. Collectives may be captured into graphs
 * where the stream's backend captures; the communicator must outlive such graphs.
 * Values below equal NCCL's: ncclRedOp_t and ncclDataType_t. */
#define BG_COMM_ID_BYTES 128
enum {
  BG_COLL_ALL_REDUCE = 0,     /* recv[i] = op over ranks of send[i]; count elements */
  BG_COLL_BROADCAST = 1,      /* recv = root's send; count elements */
  BG_COLL_REDUCE = 2,         /* root's recv = op over ranks of send */
  BG_COLL_ALL_GATHER = 3,     /* recv[r*count + i] = rank r's send[i]; recv holds nranks*count */
  BG_COLL_REDUCE_SCATTER = 4, /* recv[i] = op over ranks of send[rank*count + i] */
  BG_COLL_SEND = 5,           /* send count elements to rank `peer` */
  BG_COLL_RECV = 6            /* receive count elements from rank `peer` into recv */
};
enum { BG_RED_SUM = 0, BG_RED_PROD = 1, BG_RED_MAX = 2, BG_RED_MIN = 3, BG_RED_AVG = 4 };
enum {
  BG_DTYPE_INT8 = 0,
  BG_DTYPE_UINT8 = 1,
  BG_DTYPE_INT32 = 2,
  BG_DTYPE_UINT32 = 3,
  BG_DTYPE_INT64 = 4,
  BG_DTYPE_UINT64 = 5,
  BG_DTYPE_FLOAT16 = 6,
  BG_DTYPE_FLOAT32 = 7,
  BG_DTYPE_FLOAT64 = 8,
  BG_DTYPE_BFLOAT16 = 9
};
BG_API int32_t bg_comm_unique_id(void* dev, uint8_t* out, uint64_t cap); /* cap >= BG_COMM_ID_BYTES */
BG_API int32_t bg_comm_init_rank(void* dev, int32_t nranks, const uint8_t* id, uint64_t id_len,
                                 int32_t rank, void** out);
/* out[i] is rank i, on devs[i]; all devices of one backend, none twice. */
BG_API int32_t bg_comm_init_all(void* const* devs, int32_t n, void** out);
BG_API int32_t bg_comm_destroy(void* comm); /* waits for its queued collectives first (CPU: aborts them once no rank moves) */
BG_API int32_t bg_comm_abort(void* comm);   /* ends waits of every rank; never waits */
BG_API int32_t bg_comm_info(void* comm, int32_t* rank, int32_t* nranks);
BG_API int32_t bg_comm_check(void* comm);   /* BG_OK, or the error that ended the communicator */
BG_API int32_t bg_comm_set_timeout(void* comm, uint32_t ms); /* 0: wait forever (the default) */
BG_API int32_t bg_comm_collective(void* comm, void* stream, int32_t coll, bg_devptr send,
                                  bg_devptr recv, uint64_t count, int32_t dtype, int32_t redop,
                                  int32_t peer);
BG_API int32_t bg_comm_group_start(void);
BG_API int32_t bg_comm_group_end(void);
/* The group failed part-way (a call the caller could not make): the outermost bg_comm_group_end
 * then issues nothing where the backend can drop recorded calls (CPU), and returns
 * BG_ERR_ILLEGAL_STATE. NCCL cannot drop them: on CUDA ncclGroupEnd runs as usual. */
BG_API int32_t bg_comm_group_abandon(void);

/* ---- streams -----------------------------------------------------------------------------
 * The device's default stream is CUDA's legacy default stream: work queued on it waits for the
 * work queued before it on every blocking stream, and work queued on a blocking stream waits for
 * the work queued before it on the default stream. Streams created with BG_STREAM_NON_BLOCKING
 * take no part, either way. Synchronizing or querying the default stream therefore covers the
 * blocking streams' work queued so far. While a blocking stream captures, any use of the default
 * stream returns BG_ERR_STREAM_CAPTURE_IMPLICIT and invalidates that capture; the default stream
 * never joins a capture (waiting on a captured event: the same). */
BG_API int32_t bg_stream_create(void* dev, uint32_t flags, int32_t priority, void** out);
BG_API int32_t bg_stream_default(void* dev, void** out);  /* owned by the device */
BG_API int32_t bg_stream_destroy(void* stream);           /* waits for its work first */
BG_API int32_t bg_stream_synchronize(void* stream);
BG_API int32_t bg_stream_query(void* stream);             /* BG_OK or BG_ERR_NOT_READY */
BG_API int32_t bg_stream_wait_event(void* stream, void* event);
BG_API int32_t bg_memcpy_htod_async(void* stream, bg_devptr dst, const void* src, uint64_t bytes);
BG_API int32_t bg_memcpy_dtoh_async(void* stream, void* dst, bg_devptr src, uint64_t bytes);
BG_API int32_t bg_memcpy_dtod_async(void* stream, bg_devptr dst, bg_devptr src, uint64_t bytes);
BG_API int32_t bg_memset_async(void* stream, bg_devptr dst, uint32_t pattern, uint32_t elem_size,
                               uint64_t count);
/* A C callback run in stream order (on a shim thread). */
typedef void (*bg_host_fn)(void* user);
BG_API int32_t bg_launch_host_func(void* stream, bg_host_fn fn, void* user);
/* fn(user) once the work queued on `stream` before this call has finished, for waking a waiter
 * (a thread-safe callback into a runtime's event loop): the work counts as finished for
 * bg_stream_query and bg_stream_synchronize before fn is called, and fn holds nothing up. Where
 * a backend cannot call back after completion it is a host function (bg_launch_host_func, which
 * the stream waits for: keep fn short). Not on a capturing stream. */
BG_API int32_t bg_stream_notify(void* stream, bg_host_fn fn, void* user);

/* ---- signals: stream-order hand-off to a polling host thread (TypeScript host functions) ---
 * A signal is a 32-bit state word in shim memory. bg_stream_host_signal enqueues an operation
 * that, when the stream reaches it, stores BG_SIGNAL_REACHED and holds the stream until the
 * host stores BG_SIGNAL_RELEASED with bg_signal_release. TypeScript polls the word (its address
 * comes from bg_signal_address) and never needs a callback from a native thread. */
enum { BG_SIGNAL_IDLE = 0, BG_SIGNAL_PENDING = 1, BG_SIGNAL_REACHED = 2, BG_SIGNAL_RELEASED = 3 };
BG_API int32_t bg_signal_create(void** out);
BG_API int32_t bg_signal_destroy(void* sig);
BG_API int32_t bg_signal_address(void* sig, void** out_word);
BG_API int32_t bg_signal_release(void* sig);
BG_API int32_t bg_stream_host_signal(void* stream, void* sig);
/* Stream memory operations on a 32-bit word of mapped host memory (bg_host_alloc with
 * BG_HOST_ALLOC_MAPPED, the device address): the stream waits until the word equals `value`, or
 * writes `value` to it, with no host thread involved. CUDA only (cuStreamWaitValue32 /
 * cuStreamWriteValue32); BG_ERR_NOT_SUPPORTED elsewhere. TypeScript host functions on CUDA use
 * them so that no driver thread is parked while JavaScript runs. */
BG_API int32_t bg_stream_wait_value32(void* stream, bg_devptr addr, uint32_t value);
BG_API int32_t bg_stream_write_value32(void* stream, bg_devptr addr, uint32_t value);

/* ---- events ------------------------------------------------------------------------------ */
BG_API int32_t bg_event_create(void* dev, uint32_t flags, void** out);
BG_API int32_t bg_event_destroy(void* event);
BG_API int32_t bg_event_record(void* event, void* stream);
BG_API int32_t bg_event_query(void* event);               /* BG_OK or BG_ERR_NOT_READY */
BG_API int32_t bg_event_synchronize(void* event);
BG_API int32_t bg_event_elapsed(float* out_ms, void* start, void* end);

/* ---- runtime compilation (NVRTC on CUDA; the CPU compiles in TypeScript; Metal at load) --- */
/* Compile `src` with newline-separated `options`. On success *out_result holds the code; on
 * BG_ERR_COMPILE it holds the log. Either way free it with bg_rtc_free. */
BG_API int32_t bg_rtc_compile(void* dev, const char* src, const char* name, const char* options,
                              int32_t want_cubin, void** out_result);
BG_API int32_t bg_rtc_sizes(void* result, uint64_t* code_bytes, uint64_t* log_bytes);
BG_API int32_t bg_rtc_copy(void* result, void* code, void* log);
BG_API int32_t bg_rtc_free(void* result);
BG_API int32_t bg_rtc_version(void* dev, int32_t* major, int32_t* minor);

/* ---- modules and kernels ----------------------------------------------------------------- */
BG_API int32_t bg_module_load(void* dev, int32_t image_kind, const void* data, uint64_t bytes,
                              void** out);
BG_API int32_t bg_module_unload(void* module);
BG_API int32_t bg_module_get_kernel(void* module, const char* name, void** out);  /* module-owned */
BG_API int32_t bg_kernel_max_threads(void* kernel, int32_t* out);
/* From now on, launches of `kernel` (queued, captured and future ones) run the code of `from`, a
 * kernel of another module on the same device with the same arguments: how a kernel compiled
 * quickly is swapped for its optimized build. `from`'s module stays loaded while `kernel`'s
 * does. CPU only (BG_ERR_NOT_SUPPORTED elsewhere); a persistent ring kernel is not retargeted. */
BG_API int32_t bg_kernel_retarget(void* kernel, void* from);
/* Launch. `args` is `nargs` 8-byte slots: a device address, or an i32/u32/f32 in the low bytes,
 * or an i64/f64. The shim copies the slots before returning. */
BG_API int32_t bg_launch(void* kernel, void* stream, uint32_t gx, uint32_t gy, uint32_t gz,
                         uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared_bytes,
                         const void* args, uint32_t nargs);

/* ---- capture and graphs ------------------------------------------------------------------ */
BG_API int32_t bg_stream_begin_capture(void* stream, int32_t mode);
BG_API int32_t bg_stream_end_capture(void* stream, void** out_graph);
BG_API int32_t bg_stream_capture_status(void* stream, int32_t* out_status);
BG_API int32_t bg_graph_destroy(void* graph);
BG_API int32_t bg_graph_node_count(void* graph, uint32_t* out_nodes, uint32_t* out_kernel_nodes);
BG_API int32_t bg_graph_instantiate(void* graph, void** out_exec);
BG_API int32_t bg_graph_exec_destroy(void* exec);
BG_API int32_t bg_graph_upload(void* exec, void* stream);
BG_API int32_t bg_graph_launch(void* exec, void* stream);
/* Replace the argument slots of the `index`-th kernel node, in capture order. */
BG_API int32_t bg_graph_exec_set_kernel_args(void* exec, uint32_t index, const void* args,
                                             uint32_t nargs);

/* ---- command buffers ----------------------------------------------------------------------
 * bg_submit runs a packed list of commands on a stream as if each were issued in turn, in one
 * crossing. The shim copies the bytes before returning. The list is a sequence of the records
 * below, back to back: each starts with a bg_cmd_header whose `size` is the record's total
 * size in bytes (header included, a multiple of 8). Fields are little endian; every record
 * starts 8-byte aligned relative to the list. These structs are the one definition of the
 * format (the _Static_asserts pin every offset); TypeScript's encoder writes the same bytes. */
enum {
  BG_CMD_LAUNCH = 1,       /* bg_cmd_launch_rec, then u64 args[nargs] */
  BG_CMD_COPY = 2,         /* bg_cmd_copy_rec: device to device */
  BG_CMD_MEMSET = 3,       /* bg_cmd_memset_rec */
  BG_CMD_BARRIER = 4,      /* bg_cmd_header only: later commands see all earlier writes */
  BG_CMD_EVENT_RECORD = 5, /* bg_cmd_event_rec */
  BG_CMD_EVENT_WAIT = 6,   /* bg_cmd_event_rec */
  BG_CMD_COPY_HTOD = 7,    /* bg_cmd_copy_rec: dst device; src host (pinned, kept alive) */
  BG_CMD_COPY_DTOH = 8     /* bg_cmd_copy_rec: dst host (pinned, kept alive); src device */
};

typedef struct bg_cmd_header {
  uint32_t op;   /* BG_CMD_* */
  uint32_t size; /* bytes of the whole record, header included */
} bg_cmd_header;

typedef struct bg_cmd_launch_rec {
  bg_cmd_header h;
  uint64_t kernel; /* a kernel handle */
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared;
  uint32_t nargs;
  uint64_t args[]; /* nargs slots, as bg_launch takes them */
} bg_cmd_launch_rec;

/* BG_CMD_COPY, BG_CMD_COPY_HTOD and BG_CMD_COPY_DTOH: the same fields. */
typedef struct bg_cmd_copy_rec {
  bg_cmd_header h;
  uint64_t dst;
  uint64_t src;
  uint64_t bytes;
} bg_cmd_copy_rec;
typedef bg_cmd_copy_rec bg_cmd_copy_htod_rec;
typedef bg_cmd_copy_rec bg_cmd_copy_dtoh_rec;

typedef struct bg_cmd_memset_rec {
  bg_cmd_header h;
  uint64_t dst;
  uint32_t pattern;
  uint32_t elem_size; /* 1, 2 or 4 */
  uint64_t count;     /* elements */
} bg_cmd_memset_rec;

typedef bg_cmd_header bg_cmd_barrier_rec;

/* BG_CMD_EVENT_RECORD and BG_CMD_EVENT_WAIT. */
typedef struct bg_cmd_event_rec {
  bg_cmd_header h;
  uint64_t event; /* an event handle */
} bg_cmd_event_rec;

#if !defined(__cplusplus)
#define BG_CMD_PIN_(c) _Static_assert(c, "bg_submit record layout moved: " #c)
BG_CMD_PIN_(sizeof(bg_cmd_header) == 8);
BG_CMD_PIN_(offsetof(bg_cmd_header, op) == 0 && offsetof(bg_cmd_header, size) == 4);
BG_CMD_PIN_(sizeof(bg_cmd_launch_rec) == 48);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, kernel) == 8);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, grid) == 16);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, block) == 28);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, shared) == 40);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, nargs) == 44);
BG_CMD_PIN_(offsetof(bg_cmd_launch_rec, args) == 48);
BG_CMD_PIN_(sizeof(bg_cmd_copy_rec) == 32);
BG_CMD_PIN_(offsetof(bg_cmd_copy_rec, dst) == 8 && offsetof(bg_cmd_copy_rec, src) == 16);
BG_CMD_PIN_(offsetof(bg_cmd_copy_rec, bytes) == 24);
BG_CMD_PIN_(sizeof(bg_cmd_memset_rec) == 32);
BG_CMD_PIN_(offsetof(bg_cmd_memset_rec, dst) == 8 && offsetof(bg_cmd_memset_rec, pattern) == 16);
BG_CMD_PIN_(offsetof(bg_cmd_memset_rec, elem_size) == 20);
BG_CMD_PIN_(offsetof(bg_cmd_memset_rec, count) == 24);
BG_CMD_PIN_(sizeof(bg_cmd_barrier_rec) == 8);
BG_CMD_PIN_(sizeof(bg_cmd_event_rec) == 16 && offsetof(bg_cmd_event_rec, event) == 8);
#undef BG_CMD_PIN_
#endif

BG_API int32_t bg_submit(void* stream, const void* bytes, uint64_t len);
/* Commands are validated before any runs: on error nothing is enqueued and *out_bad_offset
 * (when not NULL) holds the offset of the offending command. */
BG_API int32_t bg_submit_checked(void* stream, const void* bytes, uint64_t len,
                                 uint64_t* out_bad_offset);
/* bg_submit_checked, then with BG_SUBMIT_WAIT a bg_stream_synchronize of the same stream: a
 * whole plan submitted and waited for in one crossing. BG_SUBMIT_SERIAL (a hint, with
 * BG_SUBMIT_WAIT): a backend whose device work runs on host threads (CPU) runs the list's
 * launches on the calling thread alone, without waking its pool, for lists too small to repay
 * the pool's hand-off; other backends ignore it. Other flags are BG_ERR_INVALID_VALUE. */
#define BG_SUBMIT_WAIT 1u
#define BG_SUBMIT_SERIAL 2u
BG_API int32_t bg_submit_ex(void* stream, const void* bytes, uint64_t len, uint32_t flags,
                            uint64_t* out_bad_offset);
/* A graph from a command list, validated as bg_submit validates it (a refused list returns
 * BG_ERR_INVALID_VALUE or BG_ERR_INVALID_HANDLE, naming the offending byte offset in the
 * message). The result is an ordinary graph handle: bg_graph_node_count (every command is a
 * node but barriers and copies or memsets of nothing; launches are the kernel nodes; the nodes
 * run in list order), bg_graph_instantiate, bg_graph_upload,
 * bg_graph_launch (the list runs as one bg_submit on that stream), bg_graph_exec_set_kernel_args
 * (index: the n-th BG_CMD_LAUNCH of the list) and bg_graph_destroy all work on it. The graph and
 * each exec keep the kernels and events the list names alive, as captured graphs do: unloading
 * a module or destroying an event does not break them. */
BG_API int32_t bg_graph_from_commands(void* dev, const void* bytes, uint64_t len,
                                      void** out_graph);

/* ---- rings: single-producer single-consumer queues in memory both sides see ---------------
 * Layout at the ring's base address (host and device views alike):
 *   offset   0: u64 head   (consumer's next index; written by the consumer only)
 *   offset 128: u64 tail   (producer's next index; written by the producer only)
 *   offset 256: u32 msg_bytes, u32 capacity (power of two), u32 closed, u32 reserved
 *   offset 272: u32 bell (a consumer waiting: 1), u32 reserved, u64 bell_fn, u64 bell_user: a
 *               doorbell a producer that can call host code (the CPU ring kernel) rings after it
 *               publishes: it swaps bell to 0 and, if it was 1, calls bell_fn(bell_user)
 *   offset 384: capacity * msg_bytes of messages; slot i lives at (i & (capacity - 1))
 * head == tail is empty; tail - head == capacity is full. Producer writes the slot, then stores
 * tail with release; consumer loads tail with acquire, reads, then stores head with release. */
#define BG_RING_HEAD_OFFSET 0
#define BG_RING_TAIL_OFFSET 128
#define BG_RING_META_OFFSET 256
#define BG_RING_DATA_OFFSET 384
BG_API int32_t bg_ring_create(void* dev, uint32_t msg_bytes, uint32_t capacity, void** out);
BG_API int32_t bg_ring_destroy(void* ring);
/* Host address and device address of the ring's base. */
BG_API int32_t bg_ring_address(void* ring, void** out_host, bg_devptr* out_dev);
/* Push up to n messages; *out_pushed says how many fitted (0 when full: never overwrites). */
BG_API int32_t bg_ring_push(void* ring, const void* msgs, uint32_t n, uint32_t* out_pushed);
/* Pop up to max messages; *out_popped says how many (0 when empty). */
BG_API int32_t bg_ring_pop(void* ring, void* out, uint32_t max, uint32_t* out_popped);
BG_API int32_t bg_ring_count(void* ring, uint32_t* out_used);

/* ---- measurement helpers: the same work issued from a C loop, for the benches ------------ */
BG_API int32_t bg_bench_noop_loop(uint64_t iters);
BG_API int32_t bg_bench_launch_loop(void* kernel, void* stream, uint32_t gx, uint32_t bx,
                                    const void* args, uint32_t nargs, uint64_t iters);
/* Decode a command buffer and issue each command through the ordinary bg_* calls (no batching),
 * `iters` times: the C baseline for schedules and encoders. */
BG_API int32_t bg_bench_issue_loop(void* stream, const void* bytes, uint64_t len, uint64_t iters);

#ifdef __cplusplus
}
#endif
#endif /* BUNGPU_H */
