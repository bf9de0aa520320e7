/*
 * internal.h: what the core (the entry points of api.c, pools.c, multi.c, graphs.c and rings.c,
 * with entry.h; commands.c, base.c, backends.c) and the backends (one folder
 * each, listed in backends.c's table) share.
 *
 * Every handle begins with bg_obj, so the core can check a handle's kind before it trusts it
 * and find its device. The core validates arguments, then calls the device's vtable. Backends
 * hold mechanism only: no caching decisions, no scheduling policy.
 */
#ifndef BUNGPU_INTERNAL_H
#define BUNGPU_INTERNAL_H

#include "bungpu.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define BG_MAGIC 0x42475055u /* "BGPU" */

typedef enum bg_kind {
  BG_KIND_DEVICE = 1,
  BG_KIND_STREAM,
  BG_KIND_EVENT,
  BG_KIND_MODULE,
  BG_KIND_KERNEL,
  BG_KIND_GRAPH,
  BG_KIND_EXEC,
  BG_KIND_RING,
  BG_KIND_SIGNAL,
  BG_KIND_RTC,
  BG_KIND_CMD_GRAPH, /* a graph of the core's generic command-list kind (commands.c) */
  BG_KIND_CMD_EXEC,
  BG_KIND_POOL, /* a memory pool: the backend's, or the core's plain one (pools.c) */
  BG_KIND_COMM  /* a communicator (bg_coll_ops) */
} bg_kind;

struct bg_device;

typedef struct bg_obj {
  uint32_t magic;
  uint32_t kind;
  struct bg_device* dev;
} bg_obj;

typedef struct bg_ops bg_ops;

typedef struct bg_device {
  bg_obj h;
  const bg_ops* ops;
  int32_t backend;
  int32_t ordinal;
  void* default_stream; /* a backend stream object, created at open */
  void* plain_pool;     /* the core's default plain pool (pools.c), for backends without pools */
  /* Bit i: this device has peer access to the ordinal-i device of its backend (multi.c keeps it,
   * under the device table's lock, so every backend sees the same CUDA rules). */
  _Atomic uint64_t peer_enabled;
} bg_device;

/* A signal is backend-independent: a state word, a mutex and a condition variable. */
typedef struct bg_signal bg_signal;

/* One function per device-level operation. Handles arrive already checked for kind; `dev` is
 * always the handle's own device. Each returns BG_OK or a code, having called bg_set_error.
 *
 * Required: name, probe, open; device_close, device_props, device_mem_info,
 * device_synchronize; mem_alloc, mem_free, host_alloc, host_free; stream_create, stream_destroy,
 * stream_synchronize, stream_query, stream_wait_event; memcpy_htod_async, memcpy_dtoh_async, memcpy_dtod_async,
 * memset_async, launch_host_func; event_create, event_destroy, event_record, event_query,
 * event_synchronize, event_elapsed; module_load, module_unload, module_get_kernel,
 * kernel_max_threads, launch. That is a whole backend.
 *
 * Optional (NULL), and what the core does instead:
 *  - memcpy_htod, memcpy_dtoh, memcpy_dtod, memset (synchronous): the asynchronous op on the
 *    device's default stream, then stream_synchronize of that stream.
 *  - submit: the core issues each decoded command through the entries above (bg_issue_cmds).
 *  - graph_from_commands: the core's generic command-list graph (commands.c), which needs
 *    kernel_hold/kernel_unhold/event_hold/event_unhold (without them: BG_ERR_NOT_SUPPORTED).
 *  - begin_capture, end_capture, capture_status and the graph_* entries: no stream capture
 *    (BG_ERR_NOT_SUPPORTED); a backend that captures provides all of them, and its graph
 *    handles are BG_KIND_GRAPH / BG_KIND_EXEC; the generic graphs never reach these entries.
 *  - rtc_compile, rtc_version, stream_wait_value32, stream_write_value32, ring_alloc,
 *    ring_free: BG_ERR_NOT_SUPPORTED.
 *  - mempool_* and mem_alloc_async / mem_free_async: the core's plain pool (pools.c): mem_alloc
 *    per allocation, stream_synchronize then mem_free per free, stats counted in the core.
 *  - stream_notify: launch_host_func (the stream waits for the callback, which only queues a
 *    wake-up, so it returns at once). The CPU backend counts the work finished first.
 *  - submit_wait's BG_SUBMIT_SERIAL flag may be ignored (only a host backend has a pool to spare).
 *  - enter, leave: no per-call setup. With them the core wraps every call that reaches the
 *    backend (Metal: an autorelease pool). CUDA keeps its context push/pop in its entries: it
 *    can fail, and the backend's own threads and internal paths need it too. */
struct bg_ops {
  /* The backend: its name (bg_backend_name, error messages), and its entry points, read from the
   * record in backends.c's table (a device may carry another record of the same backend, as the
   * CPU's checked mode does). probe loads the driver once; on failure it fills msg (naming what
   * was tried) and returns its code. open makes the device `ordinal` (< probe's count), its ops
   * set; the core sets its backend number and ordinal. */
  const char* name;
  int32_t (*probe)(int32_t* count, char* msg, uint64_t cap);
  int32_t (*open)(int32_t ordinal, bg_device** out);
  int32_t (*device_close)(bg_device* dev);
  int32_t (*device_props)(bg_device* dev, bg_device_props* out);
  int32_t (*device_mem_info)(bg_device* dev, uint64_t* free_b, uint64_t* total_b);
  int32_t (*device_synchronize)(bg_device* dev);

  int32_t (*mem_alloc)(bg_device* dev, uint64_t bytes, bg_devptr* out);
  int32_t (*mem_free)(bg_device* dev, bg_devptr p);
  int32_t (*host_alloc)(bg_device* dev, uint64_t bytes, uint32_t flags, void** host, bg_devptr* d);
  int32_t (*host_free)(bg_device* dev, void* host);
  int32_t (*memcpy_htod)(bg_device* dev, bg_devptr dst, const void* src, uint64_t n);
  int32_t (*memcpy_dtoh)(bg_device* dev, void* dst, bg_devptr src, uint64_t n);
  int32_t (*memcpy_dtod)(bg_device* dev, bg_devptr dst, bg_devptr src, uint64_t n);
  int32_t (*memset)(bg_device* dev, bg_devptr dst, uint32_t pattern, uint32_t esz, uint64_t count);
  /* Several devices (optional). device_can_access_peer NULL: no device of the backend can
   * access another (copies between them are staged). peer_enable / peer_disable NULL: the
   * core's bookkeeping is all there is (CPU). memcpy_peer_async NULL: copies between devices are
   * BG_ERR_NOT_SUPPORTED. `s` belongs to src_dev or dst_dev; `peer` says whether its device has
   * access to the other (else the backend stages the copy through host memory). */
  int32_t (*device_can_access_peer)(bg_device* dev, bg_device* peer, int32_t* out);
  int32_t (*peer_enable)(bg_device* dev, bg_device* peer);
  int32_t (*peer_disable)(bg_device* dev, bg_device* peer);
  int32_t (*memcpy_peer_async)(void* s, bg_devptr dst, bg_device* dst_dev, bg_devptr src,
                               bg_device* src_dev, uint64_t n, int peer);

  int32_t (*stream_create)(bg_device* dev, uint32_t flags, int32_t prio, void** out);
  int32_t (*stream_destroy)(void* s);
  int32_t (*stream_synchronize)(void* s);
  int32_t (*stream_query)(void* s);
  int32_t (*stream_wait_event)(void* s, void* e);
  int32_t (*memcpy_htod_async)(void* s, bg_devptr dst, const void* src, uint64_t n);
  int32_t (*memcpy_dtoh_async)(void* s, void* dst, bg_devptr src, uint64_t n);
  int32_t (*memcpy_dtod_async)(void* s, bg_devptr dst, bg_devptr src, uint64_t n);
  int32_t (*memset_async)(void* s, bg_devptr dst, uint32_t pattern, uint32_t esz, uint64_t count);
  int32_t (*launch_host_func)(void* s, bg_host_fn fn, void* user);
  /* NULL: bg_stream_notify is launch_host_func. */
  int32_t (*stream_notify)(void* s, bg_host_fn fn, void* user);
  /* NULL where streams cannot wait on / write memory (then BG_ERR_NOT_SUPPORTED). */
  int32_t (*stream_wait_value32)(void* s, bg_devptr addr, uint32_t value);
  int32_t (*stream_write_value32)(void* s, bg_devptr addr, uint32_t value);

  int32_t (*event_create)(bg_device* dev, uint32_t flags, void** out);
  int32_t (*event_destroy)(void* e);
  int32_t (*event_record)(void* e, void* s);
  int32_t (*event_query)(void* e);
  int32_t (*event_synchronize)(void* e);
  int32_t (*event_elapsed)(float* ms, void* start, void* end);

  /* NULL where the backend compiles elsewhere (CPU: TypeScript drives the C compiler). */
  int32_t (*rtc_compile)(bg_device* dev, const char* src, const char* name, const char* options,
                         int32_t want_cubin, void** out_result);
  int32_t (*rtc_version)(bg_device* dev, int32_t* major, int32_t* minor);

  int32_t (*module_load)(bg_device* dev, int32_t kind, const void* data, uint64_t n, void** out);
  int32_t (*module_unload)(void* m);
  int32_t (*module_get_kernel)(void* m, const char* name, void** out);
  int32_t (*kernel_max_threads)(void* k, int32_t* out);
  /* NULL: bg_kernel_retarget is BG_ERR_NOT_SUPPORTED. */
  int32_t (*kernel_retarget)(void* k, void* from);
  int32_t (*launch)(void* k, void* s, const uint32_t grid[3], const uint32_t block[3],
                    uint32_t shared, const uint64_t* args, uint32_t nargs);

  int32_t (*begin_capture)(void* s, int32_t mode);
  int32_t (*end_capture)(void* s, void** out_graph);
  int32_t (*capture_status)(void* s, int32_t* out);
  int32_t (*graph_destroy)(void* g);
  int32_t (*graph_node_count)(void* g, uint32_t* nodes, uint32_t* kernel_nodes);
  int32_t (*graph_instantiate)(void* g, void** out_exec);
  int32_t (*graph_exec_destroy)(void* x);
  int32_t (*graph_upload)(void* x, void* s);
  int32_t (*graph_launch)(void* x, void* s);
  int32_t (*graph_exec_set_kernel_args)(void* x, uint32_t index, const uint64_t* args,
                                        uint32_t nargs);

  /* Commands already validated by the core (sizes, kinds of handles); walk them with
   * bg_cmd_next. NULL: the core issues them one by one through the other entries. */
  int32_t (*submit)(void* s, const uint8_t* bytes, uint64_t len);
  /* Optional: submit validated commands and wait for the stream (bg_submit_ex with
   * BG_SUBMIT_WAIT). NULL: submit, then stream_synchronize. */
  int32_t (*submit_wait)(void* s, const uint8_t* bytes, uint64_t len, uint32_t flags);

  /* A graph of the backend's own kind from a validated command list (bg_graph_from_commands);
   * its handle must answer the graph_* entries above. NULL: the core's generic command-list
   * graph (commands.c), which replays the list through submit. */
  int32_t (*graph_from_commands)(bg_device* dev, const uint8_t* bytes, uint64_t len, void** out);
  /* Called by the core around every entry point that reaches the backend (device close
   * excepted): enter's result is handed to leave. For per-call setup that cannot fail (Metal:
   * an autorelease pool); a backend whose setup can fail does it in its entries (CUDA: making
   * its context current, which also runs on its internal paths). */
  void* (*enter)(bg_device* dev);
  void (*leave)(bg_device* dev, void* token);
  /* Keep a kernel's code, or an event, alive while a generic graph names it, past the
   * destruction of its handle (module unload, event destroy); unhold drops one hold. A backend
   * without them has no generic graphs (BG_ERR_NOT_SUPPORTED). */
  void (*kernel_hold)(void* k);
  void (*kernel_unhold)(void* k);
  void (*event_hold)(void* e);
  void (*event_unhold)(void* e);

  /* Stream-ordered allocation and memory pools (bungpu.h). A backend provides all of them or
   * none; pool handles are BG_KIND_POOL objects of its own, and `pool` arguments arrive
   * checked (NULL in mem_alloc_async: the device's default pool, as mempool_default gives it).
   * mempool_stats fills reserved, used, reserved_high, used_high. NULL: the core's plain pool
   * (pools.c): mem_alloc for each allocation, a stream_synchronize before each free. */
  int32_t (*mempool_create)(bg_device* dev, uint64_t threshold, void** out);
  int32_t (*mempool_default)(bg_device* dev, void** out);
  int32_t (*mempool_destroy)(void* pool);
  int32_t (*mempool_set_threshold)(void* pool, uint64_t threshold);
  int32_t (*mempool_trim)(void* pool, uint64_t keep);
  int32_t (*mempool_stats)(void* pool, uint64_t out[4]);
  int32_t (*mempool_reset_peak)(void* pool);
  int32_t (*mem_alloc_async)(void* s, void* pool, uint64_t bytes, bg_devptr* out);
  int32_t (*mem_free_async)(void* s, bg_devptr p);

  /* Memory and events shared between processes (bungpu.h, "shared between processes").
   * Optional: without ipc_mem_export every memory call is BG_ERR_NOT_SUPPORTED, without
   * ipc_event_export every event call and BG_EVENT_INTERPROCESS. mem_alloc_shareable NULL:
   * mem_alloc serves BG_MEM_SHAREABLE (CUDA: every cuMemAlloc allocation can be exported).
   * The core writes and checks the handle's header (bg_ipc_handle below); a backend fills and
   * reads only its payload. `pid` is the exporting process's. */
  int32_t (*mem_alloc_shareable)(bg_device* dev, uint64_t bytes, bg_devptr* out);
  int32_t (*ipc_mem_export)(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes);
  int32_t (*ipc_mem_open)(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                          bg_devptr* out);
  int32_t (*ipc_mem_close)(bg_device* dev, bg_devptr p);
  int32_t (*ipc_event_export)(void* e, uint8_t* payload);
  int32_t (*ipc_event_open)(bg_device* dev, int32_t pid, const uint8_t* payload, void** out);

  /* Memory for rings that host and device both see. */
  int32_t (*ring_alloc)(bg_device* dev, uint64_t bytes, void** host, bg_devptr* d);
  int32_t (*ring_free)(bg_device* dev, void* host);

  /* Communicators (bg_coll_ops below). NULL: none (BG_ERR_NOT_SUPPORTED). */
  const struct bg_coll_ops* coll;
};

/* The BG_IPC_HANDLE_BYTES of a handle shared between processes: a header the core writes and
 * checks, then the backend's payload (CUDA: the driver's 64-byte CUipc*Handle). */
#define BG_IPC_MAGIC 0x50494742u /* "BGIP" */
#define BG_IPC_PAYLOAD_BYTES 64
enum { BG_IPC_KIND_MEM = 1, BG_IPC_KIND_EVENT = 2 };
typedef struct bg_ipc_handle {
  uint32_t magic;
  uint32_t kind;    /* BG_IPC_KIND_* */
  int32_t backend;
  int32_t pid;      /* the exporting process */
  uint64_t bytes;   /* memory: the allocation's size */
  uint64_t reserved;
  uint8_t payload[BG_IPC_PAYLOAD_BYTES];
} bg_ipc_handle;
_Static_assert(sizeof(bg_ipc_handle) == BG_IPC_HANDLE_BYTES, "bg_ipc_handle size");

/* ---- shared helpers (base.c) -------------------------------------------------------------- */
/* Record the thread's last error; returns code so `return bg_set_error(...)` reads naturally. */
int32_t bg_set_error(int32_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
int32_t bg_set_errorv(int32_t code, const char* fmt, va_list ap);
void bg_clear_error(void);
const char* bg_status_name(int32_t code);
bool bg_obj_is(const void* h, bg_kind kind);
void bg_obj_init(void* h, bg_kind kind, bg_device* dev);
void bg_obj_kill(void* h); /* clears the magic so a stale handle is caught */

/* A bg_rtc_compile result. Build one with bg_rtc_make (code and log are copied). */
typedef struct bg_rtc {
  bg_obj h;
  uint8_t* code;
  uint64_t code_len;
  char* log;
  uint64_t log_len;
} bg_rtc;
int32_t bg_rtc_make(bg_device* dev, const void* code, uint64_t code_len, const char* log,
                    uint64_t log_len, void** out);

/* A device handle's bg_obj.dev points at the device itself: bg_obj_init(d, BG_KIND_DEVICE, d). */

/* Signals (rings.c): the stream operation that a backend runs to hand off to the host. */
void bg_signal_run(void* sig); /* a bg_host_fn: mark reached, wait for release, reset */

/* BG_HOOK(dev): the device's enter hook now, its leave hook when the enclosing block ends. */
typedef struct bg_hook {
  bg_device* dev;
  void* token;
} bg_hook;
static inline bg_hook bg_hook_enter(bg_device* d) {
  bg_hook h = {d, NULL};
  if (d->ops->enter) h.token = d->ops->enter(d);
  return h;
}
static inline void bg_hook_leave(bg_hook* h) {
  if (h->dev->ops->leave) h->dev->ops->leave(h->dev, h->token);
}
#define BG_HOOK(devp)                                                                           \
  bg_hook bg_hook_ __attribute__((cleanup(bg_hook_leave), unused)) = bg_hook_enter(devp)

/* ---- command lists (commands.c) ------------------------------------------------------------
 * The one decoder of the bg_submit format (bungpu.h's records). Backends never read command
 * bytes themselves: they walk a list the core has validated with bg_cmd_next and get each
 * command decoded. A validated list starts 8-byte aligned (the core copies one that does not),
 * so `launch.args` may be read as u64s. */
typedef struct bg_cmd {
  uint32_t op;     /* BG_CMD_* */
  uint32_t size;   /* bytes of the record, header included */
  uint64_t offset; /* of the record in its list */
  union {
    struct {
      void* kernel;
      uint32_t grid[3], block[3], shared, nargs;
      const uint64_t* args; /* points into the list */
    } launch;
    struct {
      bg_devptr dst, src;
      uint64_t bytes;
    } copy; /* BG_CMD_COPY */
    struct {
      bg_devptr dst;
      const void* src;
      uint64_t bytes;
    } htod; /* BG_CMD_COPY_HTOD */
    struct {
      void* dst;
      bg_devptr src;
      uint64_t bytes;
    } dtoh; /* BG_CMD_COPY_DTOH */
    struct {
      bg_devptr dst;
      uint32_t pattern, elem_size;
      uint64_t count;
    } fill; /* BG_CMD_MEMSET */
    struct {
      void* event;
    } event; /* BG_CMD_EVENT_RECORD, BG_CMD_EVENT_WAIT */
  } u;
} bg_cmd;

typedef struct bg_cmd_iter {
  const uint8_t* p;
  uint64_t len, off;
} bg_cmd_iter;

static inline void bg_cmd_iter_init(bg_cmd_iter* it, const void* bytes, uint64_t len) {
  it->p = (const uint8_t*)bytes;
  it->len = len;
  it->off = 0;
}

enum { BG_CMD_END = 0, BG_CMD_NEXT = 1, BG_CMD_MALFORMED = -1, BG_CMD_UNKNOWN = -2 };
/* Decode the command at it->off into *c and step past it: BG_CMD_NEXT; BG_CMD_END at the end of
 * the list; BG_CMD_MALFORMED (a truncated record, a size that is not a multiple of 8 or does not
 * suit the op) or BG_CMD_UNKNOWN (c->op holds the op), with c->offset naming the record and the
 * iterator left there. Checks the structure only; bg_cmds_validate checks the rest. */
int bg_cmd_next(bg_cmd_iter* it, bg_cmd* c);

/* Everything bg_submit checks before anything runs: structure, live kernel and event handles of
 * `dev`, launch dimensions, copy and memset addresses. On error *bad (when not NULL) holds the
 * offending offset and the message names `fn`. */
int32_t bg_cmds_validate(bg_device* dev, const char* fn, const void* bytes, uint64_t len,
                         uint64_t* bad);

/* Issue validated commands one by one through the stream's vtable. A backend's submit can fall
 * back to it, e.g. while capturing. */
int32_t bg_issue_cmds(void* stream, const uint8_t* bytes, uint64_t len);

/* The generic command-list graph (commands.c): what bg_graph_* do for graphs built by
 * bg_graph_from_commands where the backend has no graph_from_commands of its own. Its handles
 * have kinds BG_KIND_CMD_GRAPH and BG_KIND_CMD_EXEC. */
int32_t bg_cmdgraph_create(bg_device* dev, const uint8_t* bytes, uint64_t len, void** out);
int32_t bg_cmdgraph_destroy(void* g);
int32_t bg_cmdgraph_node_count(void* g, uint32_t* nodes, uint32_t* kernel_nodes);
int32_t bg_cmdgraph_instantiate(void* g, void** out_exec);
int32_t bg_cmdgraph_exec_destroy(void* x);
int32_t bg_cmdgraph_launch(void* x, void* stream);
int32_t bg_cmdgraph_set_kernel_args(void* x, uint32_t index, const uint64_t* args, uint32_t nargs);

/* ---- collectives (bungpu.h, "collectives") ---------------------------------------------------
 * A backend's communicators. The core checks handles, devices, streams, codes and counts; a
 * communicator handle begins with bg_obj (BG_KIND_COMM, its device). Grouping is the core's:
 * a per-thread depth; the first grouped call of a backend in a group calls its group_start, and
 * the outermost bg_comm_group_end calls group_end of each backend that took part (discarding
 * the recorded calls where the backend can, after bg_comm_group_abandon). */
typedef struct bg_coll_call {
  int32_t coll, dtype, redop, peer; /* peer: the root, or the other rank of a send/recv */
  bg_devptr send, recv;
  uint64_t count;
} bg_coll_call;

typedef struct bg_coll_ops { /* bg_ops.coll */
  int32_t (*unique_id)(bg_device* dev, uint8_t out[BG_COMM_ID_BYTES]);
  int32_t (*init_rank)(bg_device* dev, int32_t nranks, const uint8_t id[BG_COMM_ID_BYTES],
                       int32_t rank, void** out);
  int32_t (*init_all)(bg_device** devs, int32_t n, void** out);
  int32_t (*destroy)(void* comm);
  int32_t (*abort)(void* comm);
  int32_t (*info)(void* comm, int32_t* rank, int32_t* nranks);
  int32_t (*check)(void* comm);
  int32_t (*set_timeout)(void* comm, uint32_t ms); /* NULL: BG_ERR_NOT_SUPPORTED */
  int32_t (*call)(void* comm, void* stream, const bg_coll_call* c, int grouped);
  int32_t (*group_start)(void);
  int32_t (*group_end)(int discard); /* discard: bg_comm_group_abandon was called */
} bg_coll_ops;

/* ---- the backend table (backends.c) -------------------------------------------------------- */
/* Backends are numbered by their line in the table (bungpu.h's BG_BACKEND_* name the first
 * ones); at most BG_MAX_BACKENDS (the core keeps a bit per backend). */
#define BG_MAX_BACKENDS 32
int32_t bg_backends_count(void);
/* The record of backend `b`, or NULL where the table has no such line. */
const bg_ops* bg_backend_at(int32_t b);

/* Portable monotonic nanoseconds (base.c). */
uint64_t bg_now_ns(void);

#endif /* BUNGPU_INTERNAL_H */
