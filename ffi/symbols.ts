// The one symbol table of libbungpu: it mirrors shim/bungpu.h line for line. Every function
// returns an i32 status; results come back through out-pointers into a scratch block.
// Device addresses (bg_devptr, a uint64_t) cross as "ptr" so they stay plain numbers: user-space
// and CUDA unified addresses fit in 53 bits.
import { FFIType } from "bun:ffi";

const { i32, u32, u64, ptr } = FFIType;

export const ABI_VERSION = 2;

export const symbols = {
  // ---- library
  bg_abi_version: { args: [], returns: i32 },
  bg_source_hash: { args: [ptr /* char* buf */, u64 /* cap */], returns: i32 },
  bg_last_error: { args: [ptr /* char* buf */, u64 /* cap */], returns: i32 },
  bg_last_error_code: { args: [], returns: i32 },
  bg_init: { args: [], returns: i32 },
  bg_noop: { args: [], returns: i32 },

  // ---- backends and devices
  bg_backend_info: {
    args: [i32 /* backend */, ptr /* i32* available */, ptr /* i32* count */, ptr /* char* msg */, u64 /* cap */],
    returns: i32,
  },
  bg_device_open: { args: [i32 /* backend */, i32 /* ordinal */, ptr /* void** out */], returns: i32 },
  bg_device_close: { args: [ptr /* dev */], returns: i32 },
  bg_device_props_get: { args: [ptr /* dev */, ptr /* bg_device_props* */], returns: i32 },
  bg_device_mem_info: { args: [ptr /* dev */, ptr /* u64* free */, ptr /* u64* total */], returns: i32 },
  bg_device_synchronize: { args: [ptr /* dev */], returns: i32 },

  // ---- memory
  bg_mem_alloc: { args: [ptr /* dev */, u64 /* bytes */, ptr /* bg_devptr* out */], returns: i32 },
  bg_mem_free: { args: [ptr /* dev */, ptr /* bg_devptr */], returns: i32 },
  bg_host_alloc: {
    args: [ptr /* dev */, u64 /* bytes */, u32 /* flags */, ptr /* void** host */, ptr /* bg_devptr* dev */],
    returns: i32,
  },
  bg_host_free: { args: [ptr /* dev */, ptr /* host */], returns: i32 },
  bg_memcpy_htod: { args: [ptr /* dev */, ptr /* dst */, ptr /* const void* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtoh: { args: [ptr /* dev */, ptr /* void* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtod: { args: [ptr /* dev */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memset: {
    args: [ptr /* dev */, ptr /* dst */, u32 /* pattern */, u32 /* elem_size */, u64 /* count */],
    returns: i32,
  },

  // ---- streams
  bg_stream_create: { args: [ptr /* dev */, u32 /* flags */, i32 /* priority */, ptr /* void** out */], returns: i32 },
  bg_stream_default: { args: [ptr /* dev */, ptr /* void** out */], returns: i32 },
  bg_stream_destroy: { args: [ptr /* stream */], returns: i32 },
  bg_stream_synchronize: { args: [ptr /* stream */], returns: i32 },
  bg_stream_query: { args: [ptr /* stream */], returns: i32 },
  bg_stream_wait_event: { args: [ptr /* stream */, ptr /* event */], returns: i32 },
  bg_memcpy_htod_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtoh_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memcpy_dtod_async: { args: [ptr /* stream */, ptr /* dst */, ptr /* src */, u64 /* bytes */], returns: i32 },
  bg_memset_async: {
    args: [ptr /* stream */, ptr /* dst */, u32 /* pattern */, u32 /* elem_size */, u64 /* count */],
    returns: i32,
  },
  bg_launch_host_func: { args: [ptr /* stream */, ptr /* bg_host_fn */, ptr /* user */], returns: i32 },

  // ---- signals
  bg_signal_create: { args: [ptr /* void** out */], returns: i32 },
  bg_signal_destroy: { args: [ptr /* sig */], returns: i32 },
  bg_signal_address: { args: [ptr /* sig */, ptr /* void** out_word */], returns: i32 },
  bg_signal_release: { args: [ptr /* sig */], returns: i32 },
  bg_stream_host_signal: { args: [ptr /* stream */, ptr /* sig */], returns: i32 },
  bg_stream_wait_value32: { args: [ptr /* stream */, u64 /* addr */, u32 /* value */], returns: i32 },
  bg_stream_write_value32: { args: [ptr /* stream */, u64 /* addr */, u32 /* value */], returns: i32 },

  // ---- events
  bg_event_create: { args: [ptr /* dev */, u32 /* flags */, ptr /* void** out */], returns: i32 },
  bg_event_destroy: { args: [ptr /* event */], returns: i32 },
  bg_event_record: { args: [ptr /* event */, ptr /* stream */], returns: i32 },
  bg_event_query: { args: [ptr /* event */], returns: i32 },
  bg_event_synchronize: { args: [ptr /* event */], returns: i32 },
  bg_event_elapsed: { args: [ptr /* float* ms */, ptr /* start */, ptr /* end */], returns: i32 },

  // ---- runtime compilation
  bg_rtc_compile: {
    args: [ptr /* dev */, ptr /* src */, ptr /* name */, ptr /* options */, i32 /* want_cubin */, ptr /* void** out */],
    returns: i32,
  },
  bg_rtc_sizes: { args: [ptr /* result */, ptr /* u64* code */, ptr /* u64* log */], returns: i32 },
  bg_rtc_copy: { args: [ptr /* result */, ptr /* code */, ptr /* log */], returns: i32 },
  bg_rtc_free: { args: [ptr /* result */], returns: i32 },
  bg_rtc_version: { args: [ptr /* dev */, ptr /* i32* major */, ptr /* i32* minor */], returns: i32 },

  // ---- modules and kernels
  bg_module_load: {
    args: [ptr /* dev */, i32 /* image_kind */, ptr /* data */, u64 /* bytes */, ptr /* void** out */],
    returns: i32,
  },
  bg_module_unload: { args: [ptr /* module */], returns: i32 },
  bg_module_get_kernel: { args: [ptr /* module */, ptr /* name */, ptr /* void** out */], returns: i32 },
  bg_kernel_max_threads: { args: [ptr /* kernel */, ptr /* i32* out */], returns: i32 },
  bg_launch: {
    args: [
      ptr /* kernel */, ptr /* stream */, u32 /* gx */, u32 /* gy */, u32 /* gz */,
      u32 /* bx */, u32 /* by */, u32 /* bz */, u32 /* shared_bytes */, ptr /* args */, u32 /* nargs */,
    ],
    returns: i32,
  },

  // ---- capture and graphs
  bg_stream_begin_capture: { args: [ptr /* stream */, i32 /* mode */], returns: i32 },
  bg_stream_end_capture: { args: [ptr /* stream */, ptr /* void** graph */], returns: i32 },
  bg_stream_capture_status: { args: [ptr /* stream */, ptr /* i32* status */], returns: i32 },
  bg_graph_destroy: { args: [ptr /* graph */], returns: i32 },
  bg_graph_node_count: { args: [ptr /* graph */, ptr /* u32* nodes */, ptr /* u32* kernel_nodes */], returns: i32 },
  bg_graph_instantiate: { args: [ptr /* graph */, ptr /* void** exec */], returns: i32 },
  bg_graph_exec_destroy: { args: [ptr /* exec */], returns: i32 },
  bg_graph_upload: { args: [ptr /* exec */, ptr /* stream */], returns: i32 },
  bg_graph_launch: { args: [ptr /* exec */, ptr /* stream */], returns: i32 },
  bg_graph_exec_set_kernel_args: {
    args: [ptr /* exec */, u32 /* index */, ptr /* args */, u32 /* nargs */],
    returns: i32,
  },

  // ---- command buffers
  bg_submit: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */], returns: i32 },
  bg_submit_checked: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, ptr /* u64* bad */], returns: i32 },
  bg_submit_ex: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, u32 /* flags */, ptr /* u64* bad */], returns: i32 },
  bg_graph_from_commands: { args: [ptr /* device */, ptr /* bytes */, u64 /* len */, ptr /* void** graph */], returns: i32 },

  // ---- rings
  bg_ring_create: { args: [ptr /* dev */, u32 /* msg_bytes */, u32 /* capacity */, ptr /* void** out */], returns: i32 },
  bg_ring_destroy: { args: [ptr /* ring */], returns: i32 },
  bg_ring_address: { args: [ptr /* ring */, ptr /* void** host */, ptr /* bg_devptr* dev */], returns: i32 },
  bg_ring_push: { args: [ptr /* ring */, ptr /* msgs */, u32 /* n */, ptr /* u32* pushed */], returns: i32 },
  bg_ring_pop: { args: [ptr /* ring */, ptr /* out */, u32 /* max */, ptr /* u32* popped */], returns: i32 },
  bg_ring_count: { args: [ptr /* ring */, ptr /* u32* used */], returns: i32 },

  // ---- measurement helpers
  bg_bench_noop_loop: { args: [u64 /* iters */], returns: i32 },
  bg_bench_launch_loop: {
    args: [ptr /* kernel */, ptr /* stream */, u32 /* gx */, u32 /* bx */, ptr /* args */, u32 /* nargs */, u64 /* iters */],
    returns: i32,
  },
  bg_bench_issue_loop: { args: [ptr /* stream */, ptr /* bytes */, u64 /* len */, u64 /* iters */], returns: i32 },
} as const;


export type Symbols = typeof symbols;

// Status codes (shim/bungpu.h). CUDA's numbering where CUDA has the same error.
export const Status = {
  OK: 0,
  INVALID_VALUE: 1,
  OUT_OF_MEMORY: 2,
  NOT_INITIALIZED: 3,
  DEINITIALIZED: 4,
  NO_DEVICE: 100,
  INVALID_DEVICE: 101,
  INVALID_IMAGE: 200,
  INVALID_CONTEXT: 201,
  NO_BINARY_FOR_GPU: 209,
  INVALID_PTX: 218,
  UNSUPPORTED_PTX_VERSION: 222,
  INVALID_SOURCE: 300,
  FILE_NOT_FOUND: 301,
  INVALID_HANDLE: 400,
  ILLEGAL_STATE: 401,
  NOT_FOUND: 500,
  NOT_READY: 600,
  ILLEGAL_ADDRESS: 700,
  LAUNCH_OUT_OF_RESOURCES: 701,
  LAUNCH_TIMEOUT: 702,
  LAUNCH_FAILED: 719,
  NOT_PERMITTED: 800,
  NOT_SUPPORTED: 801,
  STREAM_CAPTURE_UNSUPPORTED: 900,
  STREAM_CAPTURE_INVALIDATED: 901,
  STREAM_CAPTURE_MERGE: 902,
  STREAM_CAPTURE_UNMATCHED: 903,
  STREAM_CAPTURE_UNJOINED: 904,
  STREAM_CAPTURE_ISOLATION: 905,
  STREAM_CAPTURE_IMPLICIT: 906,
  CAPTURED_EVENT: 907,
  STREAM_CAPTURE_WRONG_THREAD: 908,
  BACKEND_UNAVAILABLE: 990,
  COMPILE: 991,
  UNKNOWN: 999,
} as const;

export const StatusName: Record<number, string> = Object.fromEntries(
  Object.entries(Status).map(([k, v]) => [v, k === "OK" ? "BG_OK" : `BG_ERR_${k}`]),
);

export const Backend = { cpu: 0, cuda: 1, metal: 2 } as const;
export type BackendName = keyof typeof Backend;

export const ImageKind = { sharedLibrary: 0, ptx: 1, cubin: 2, mslSource: 3, metallib: 4, symbols: 5 } as const;

export const Cmd = {
  LAUNCH: 1,
  COPY: 2,
  MEMSET: 3,
  BARRIER: 4,
  EVENT_RECORD: 5,
  EVENT_WAIT: 6,
  COPY_HTOD: 7,
  COPY_DTOH: 8,
} as const;

export const Signal = { IDLE: 0, PENDING: 1, REACHED: 2, RELEASED: 3 } as const;

export const RING_HEAD_OFFSET = 0;
export const RING_TAIL_OFFSET = 128;
export const RING_META_OFFSET = 256;
export const RING_DATA_OFFSET = 384;

// bg_device_props layout (shim/bungpu.h)
export const PROPS_SIZE = 256 + 12 * 4 + 8 + 6 * 8;
