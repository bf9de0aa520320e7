// The one symbol table of libbungpu (the "sys" layer): it mirrors shim/bungpu.h line for line.
// Every function returns an i32 status; results come back through out-pointers into a scratch
// block. Where it helps, an entry describes itself further, and result.ts derives its typed
// wrapper from that description:
//   out: ["ptr", "u32", ...]  the trailing arguments are out-pointers of these kinds ("ptr" and
//                             "u64" read as numbers); the wrapper takes the other arguments and
//                             returns the value (one out) or a tuple of them (several)
//   query: true               BG_ERR_NOT_READY is an answer, not a failure: the wrapper returns
//                             true (BG_OK) or false (not ready)
//   value: true               the return is a value, not a status (no wrapper)
// Device addresses (bg_devptr, a uint64_t) cross as "ptr" so they stay plain numbers: user-space
// and CUDA unified addresses fit in 53 bits.
import { FFIType } from "bun:ffi";
import { ImageKindId, Status, bg_device_props } from "./constants";

const { i32, u32, u64, ptr } = FFIType;

export { ABI_VERSION } from "./constants";

export const symbols = {
  // ---- library
  bg_abi_version: { args: [], returns: i32, value: true },
  bg_source_hash: { args: [ptr /* char* buf */, u64 /* cap */], returns: i32, value: true },
  bg_last_error: { args: [ptr /* char* buf */, u64 /* cap */], returns: i32, value: true },
  bg_last_error_code: { args: [], returns: i32, value: true },
  bg_init: { args: [], returns: i32 },
  bg_noop: { args: [], returns: i32 },

  // ---- backends and devices
  bg_backend_count: { args: [], returns: i32, value: true },
  bg_backend_name: { args: [i32 /* backend */, ptr /* char* buf */, u64 /* cap */], returns: i32 },
  bg_backend_info: {
    args: [i32 /* backend */, ptr /* i32* available */, ptr /* i32* count */, ptr /* char* msg */, u64 /* cap */],
    returns: i32,
  },
  bg_device_open: { args: [i32 /* backend */, i32 /* ordinal */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_device_close: { args: [ptr /* dev */], returns: i32 },
  bg_device_props_get: { args: [ptr /* dev */, ptr /* bg_device_props* */], returns: i32 },
  bg_device_mem_info: { args: [ptr /* dev */, ptr /* u64* free */, ptr /* u64* total */], returns: i32, out: ["u64", "u64"] },
  bg_device_synchronize: { args: [ptr /* dev */], returns: i32 },

  // ---- memory
  bg_mem_alloc: { args: [ptr /* dev */, u64 /* bytes */, ptr /* bg_devptr* out */], returns: i32, out: ["ptr"] },
  bg_mem_free: { args: [ptr /* dev */, ptr /* bg_devptr */], returns: i32 },
  bg_host_alloc: {
    args: [ptr /* dev */, u64 /* bytes */, u32 /* flags */, ptr /* void** host */, ptr /* bg_devptr* dev */],
    returns: i32, out: ["ptr", "ptr"],
  },
  bg_host_free: { args: [ptr /* dev */, ptr /* host */], returns: i32 },
  bg_memcpy_htod: { args: [ptr /* dev */, ptr /* dst */, ptr /* const void* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtoh: { args: [ptr /* dev */, ptr /* void* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtod: { args: [ptr /* dev */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memset: {
    args: [ptr /* dev */, ptr /* dst */, u32 /* pattern */, u32 /* elem_size */, u64 /* count */],
    returns: i32,
  },

  // ---- stream-ordered allocation and memory pools
  bg_mempool_create: { args: [ptr /* dev */, u64 /* release_threshold */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_mempool_default: { args: [ptr /* dev */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_mempool_destroy: { args: [ptr /* pool */], returns: i32 },
  bg_mempool_set_threshold: { args: [ptr /* pool */, u64 /* release_threshold */], returns: i32 },
  bg_mempool_trim: { args: [ptr /* pool */, u64 /* keep_bytes */], returns: i32 },
  bg_mempool_stats: {
    args: [ptr /* pool */, ptr /* u64* reserved */, ptr /* u64* used */, ptr /* u64* reserved_high */, ptr /* u64* used_high */],
    returns: i32, out: ["u64", "u64", "u64", "u64"],
  },
  bg_mempool_reset_peak: { args: [ptr /* pool */], returns: i32 },
  bg_mem_alloc_async: { args: [ptr /* stream */, ptr /* pool or NULL */, u64 /* bytes */, ptr /* bg_devptr* out */], returns: i32, out: ["ptr"] },
  bg_mem_free_async: { args: [ptr /* stream */, ptr /* bg_devptr */], returns: i32 },
  // ---- memory and events shared between processes (handles of BG_IPC_HANDLE_BYTES bytes)
  bg_mem_alloc_flags: { args: [ptr /* dev */, u64 /* bytes */, u32 /* flags */, ptr /* bg_devptr* out */], returns: i32, out: ["ptr"] },
  bg_ipc_mem_export: { args: [ptr /* dev */, ptr /* bg_devptr */, ptr /* void* out_handle */], returns: i32 },
  bg_ipc_mem_open: {
    args: [ptr /* dev */, ptr /* const void* handle */, ptr /* bg_devptr* out */, ptr /* u64* out_bytes */],
    returns: i32, out: ["ptr", "u64"],
  },
  bg_ipc_mem_close: { args: [ptr /* dev */, ptr /* bg_devptr */], returns: i32 },
  bg_ipc_event_export: { args: [ptr /* event */, ptr /* void* out_handle */], returns: i32 },
  bg_ipc_event_open: { args: [ptr /* dev */, ptr /* const void* handle */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  // ---- several devices: peer access and copies between devices
  bg_device_can_access_peer: { args: [ptr /* dev */, ptr /* peer */, ptr /* i32* can */], returns: i32, out: ["i32"] },
  bg_device_enable_peer_access: { args: [ptr /* dev */, ptr /* peer */], returns: i32 },
  bg_device_disable_peer_access: { args: [ptr /* dev */, ptr /* peer */], returns: i32 },
  bg_memcpy_peer_async: {
    args: [ptr /* stream */, ptr /* dst */, ptr /* dst_dev */, ptr /* src */, ptr /* src_dev */, u64 /* bytes */, ptr /* i32* path */],
    returns: i32, out: ["i32"],
  },
  // ---- collectives: communicators (NCCL on CUDA; shared memory on the CPU)
  bg_comm_unique_id: { args: [ptr /* dev */, ptr /* u8* out */, u64 /* cap */], returns: i32 },
  bg_comm_init_rank: {
    args: [ptr /* dev */, i32 /* nranks */, ptr /* const u8* id */, u64 /* id_len */, i32 /* rank */, ptr /* void** out */],
    returns: i32, out: ["ptr"],
  },
  bg_comm_init_all: { args: [ptr /* void* const* devs */, i32 /* n */, ptr /* void** out (n) */], returns: i32 },
  bg_comm_destroy: { args: [ptr /* comm */], returns: i32 },
  bg_comm_abort: { args: [ptr /* comm */], returns: i32 },
  bg_comm_info: { args: [ptr /* comm */, ptr /* i32* rank */, ptr /* i32* nranks */], returns: i32, out: ["i32", "i32"] },
  bg_comm_check: { args: [ptr /* comm */], returns: i32 },
  bg_comm_set_timeout: { args: [ptr /* comm */, u32 /* ms */], returns: i32 },
  bg_comm_collective: {
    args: [ptr /* comm */, ptr /* stream */, i32 /* coll */, ptr /* send */, ptr /* recv */, u64 /* count */, i32 /* dtype */, i32 /* redop */, i32 /* peer */],
    returns: i32,
  },
  bg_comm_group_start: { args: [], returns: i32 },
  bg_comm_group_end: { args: [], returns: i32 },
  bg_comm_group_abandon: { args: [], returns: i32 },

  // ---- streams
  bg_stream_create: { args: [ptr /* dev */, u32 /* flags */, i32 /* priority */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_stream_default: { args: [ptr /* dev */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_stream_destroy: { args: [ptr /* stream */], returns: i32 },
  bg_stream_synchronize: { args: [ptr /* stream */], returns: i32 },
  bg_stream_query: { args: [ptr /* stream */], returns: i32, query: true },
  bg_stream_wait_event: { args: [ptr /* stream */, ptr /* event */], returns: i32 },
  bg_memcpy_htod_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtoh_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtod_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memset_async: {
    args: [ptr /* stream */, ptr /* dst */, u32 /* pattern */, u32 /* elem_size */, u64 /* count */],
    returns: i32,
  },
  bg_launch_host_func: { args: [ptr /* stream */, ptr /* bg_host_fn */, ptr /* user */], returns: i32 },
  bg_stream_notify: { args: [ptr /* stream */, ptr /* bg_host_fn */, ptr /* user */], returns: i32 },

  // ---- signals
  bg_signal_create: { args: [ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_signal_destroy: { args: [ptr /* sig */], returns: i32 },
  bg_signal_address: { args: [ptr /* sig */, ptr /* void** out_word */], returns: i32, out: ["ptr"] },
  bg_signal_release: { args: [ptr /* sig */], returns: i32 },
  bg_stream_host_signal: { args: [ptr /* stream */, ptr /* sig */], returns: i32 },
  bg_stream_wait_value32: { args: [ptr /* stream */, u64 /* addr */, u32 /* value */], returns: i32 },
  bg_stream_write_value32: { args: [ptr /* stream */, u64 /* addr */, u32 /* value */], returns: i32 },

  // ---- events
  bg_event_create: { args: [ptr /* dev */, u32 /* flags */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_event_destroy: { args: [ptr /* event */], returns: i32 },
  bg_event_record: { args: [ptr /* event */, ptr /* stream */], returns: i32 },
  bg_event_query: { args: [ptr /* event */], returns: i32, query: true },
  bg_event_synchronize: { args: [ptr /* event */], returns: i32 },
  bg_event_elapsed: { args: [ptr /* float* ms */, ptr /* start */, ptr /* end */], returns: i32 },

  // ---- runtime compilation
  bg_rtc_compile: {
    args: [ptr /* dev */, ptr /* src */, ptr /* name */, ptr /* options */, i32 /* want_cubin */, ptr /* void** out */],
    returns: i32, out: ["ptr"],
  },
  bg_rtc_sizes: { args: [ptr /* result */, ptr /* u64* code */, ptr /* u64* log */], returns: i32, out: ["u64", "u64"] },
  bg_rtc_copy: { args: [ptr /* result */, ptr /* code */, ptr /* log */], returns: i32 },
  bg_rtc_free: { args: [ptr /* result */], returns: i32 },
  bg_rtc_version: { args: [ptr /* dev */, ptr /* i32* major */, ptr /* i32* minor */], returns: i32, out: ["i32", "i32"] },

  // ---- modules and kernels
  bg_module_load: {
    args: [ptr /* dev */, i32 /* image_kind */, ptr /* data */, u64 /* bytes */, ptr /* void** out */],
    returns: i32, out: ["ptr"],
  },
  bg_module_unload: { args: [ptr /* module */], returns: i32 },
  bg_module_get_kernel: { args: [ptr /* module */, ptr /* name */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_kernel_max_threads: { args: [ptr /* kernel */, ptr /* i32* out */], returns: i32, out: ["i32"] },
  bg_kernel_retarget: { args: [ptr /* kernel */, ptr /* from */], returns: i32 },
  bg_launch: {
    args: [
      ptr /* kernel */, ptr /* stream */, u32 /* gx */, u32 /* gy */, u32 /* gz */,
      u32 /* bx */, u32 /* by */, u32 /* bz */, u32 /* shared_bytes */, ptr /* args */, u32 /* nargs */,
    ],
    returns: i32,
  },

  // ---- capture and graphs
  bg_stream_begin_capture: { args: [ptr /* stream */, i32 /* mode */], returns: i32 },
  bg_stream_end_capture: { args: [ptr /* stream */, ptr /* void** graph */], returns: i32, out: ["ptr"] },
  bg_stream_capture_status: { args: [ptr /* stream */, ptr /* i32* status */], returns: i32, out: ["i32"] },
  bg_graph_destroy: { args: [ptr /* graph */], returns: i32 },
  bg_graph_node_count: { args: [ptr /* graph */, ptr /* u32* nodes */, ptr /* u32* kernel_nodes */], returns: i32, out: ["u32", "u32"] },
  bg_graph_instantiate: { args: [ptr /* graph */, ptr /* void** exec */], returns: i32, out: ["ptr"] },
  bg_graph_exec_destroy: { args: [ptr /* exec */], returns: i32 },
  bg_graph_upload: { args: [ptr /* exec */, ptr /* stream */], returns: i32 },
  bg_graph_launch: { args: [ptr /* exec */, ptr /* stream */], returns: i32 },
  bg_graph_exec_set_kernel_args: {
    args: [ptr /* exec */, u32 /* index */, ptr /* args */, u32 /* nargs */],
    returns: i32,
  },

  // ---- command buffers
  bg_submit: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */], returns: i32 },
  bg_submit_checked: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, ptr /* u64* bad */], returns: i32, out: ["u64"] },
  bg_submit_ex: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, u32 /* flags */, ptr /* u64* bad */], returns: i32, out: ["u64"] },
  bg_graph_from_commands: { args: [ptr /* device */, ptr /* bytes */, u64 /* len */, ptr /* void** graph */], returns: i32, out: ["ptr"] },

  // ---- rings
  bg_ring_create: { args: [ptr /* dev */, u32 /* msg_bytes */, u32 /* capacity */, ptr /* void** out */], returns: i32, out: ["ptr"] },
  bg_ring_destroy: { args: [ptr /* ring */], returns: i32 },
  bg_ring_address: { args: [ptr /* ring */, ptr /* void** host */, ptr /* bg_devptr* dev */], returns: i32, out: ["ptr", "ptr"] },
  bg_ring_push: { args: [ptr /* ring */, ptr /* msgs */, u32 /* n */, ptr /* u32* pushed */], returns: i32, out: ["u32"] },
  bg_ring_pop: { args: [ptr /* ring */, ptr /* out */, u32 /* max */, ptr /* u32* popped */], returns: i32, out: ["u32"] },
  bg_ring_count: { args: [ptr /* ring */, ptr /* u32* used */], returns: i32, out: ["u32"] },

  // ---- measurement helpers
  bg_bench_noop_loop: { args: [u64 /* iters */], returns: i32 },
  bg_bench_launch_loop: {
    args: [ptr /* kernel */, ptr /* stream */, u32 /* gx */, u32 /* bx */, ptr /* args */, u32 /* nargs */, u64 /* iters */],
    returns: i32,
  },
  bg_bench_issue_loop: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, u64 /* iters */], returns: i32 },
} as const;


export type Symbols = typeof symbols;

// The numbers of shim/bungpu.h, generated into constants.ts (`bun run gen:constants`), under the
// names TypeScript has always used.
export { Cmd, Signal, Status, RING_HEAD_OFFSET, RING_TAIL_OFFSET, RING_META_OFFSET, RING_DATA_OFFSET } from "./constants";

export const StatusName: Record<number, string> = Object.fromEntries(
  Object.entries(Status).map(([k, v]) => [v, k === "OK" ? "BG_OK" : `BG_ERR_${k}`]),
);

export const ImageKind = {
  sharedLibrary: ImageKindId.SHARED_LIBRARY,
  ptx: ImageKindId.PTX,
  cubin: ImageKindId.CUBIN,
  mslSource: ImageKindId.MSL_SOURCE,
  metallib: ImageKindId.METALLIB,
  symbols: ImageKindId.SYMBOLS,
} as const;

// bg_device_props layout (shim/bungpu.h)
export const PROPS_SIZE = bg_device_props.size;
