/*
 * cudasim: a CUDA driver simulator, a libcuda-shaped shared library that the CUDA backend loads
 * through BUNGPU_LIBCUDA. It exists so that the backend meets the driver's rules (asynchrony,
 * implicit synchronisation, capture legality, launch limits, sticky errors) on a machine without a
 * GPU, and fails the way the driver would.
 *
 * What it models (devices shaped like an H100 SXM, sm_90, each with its primary context: one, or
 * CUDASIM_DEVICES=n up to 8):
 *  - Streams execute asynchronously, each on its own worker thread, in order. The legacy default
 *    stream (NULL / CU_STREAM_LEGACY) waits for prior work on every blocking stream and blocking
 *    streams wait for prior legacy work; CU_STREAM_NON_BLOCKING streams are exempt.
 *  - The synchronous calls follow the driver's "API synchronization behavior": cuMemcpyHtoD from
 *    pageable memory waits for the legacy stream, stages the bytes and returns before the copy
 *    lands; from pinned memory it returns when the copy is done; cuMemcpyDtoH returns when done;
 *    cuMemcpyDtoD and cuMemsetD* on device memory are queued on the legacy stream and return at
 *    once (cuMemsetD* into pinned host memory waits). CUDASIM_DELAY_US=n (or
 *    cudasim_set_delay_us) makes every queued copy and memset take n µs longer, so a missing
 *    synchronisation shows up as a wrong result rather than as luck. CUDASIM_POISON=1 fills new
 *    cuMemAlloc memory with 0xff bytes (the driver does not clear it).
 *  - Hardware queues: created streams share CUDA_DEVICE_MAX_CONNECTIONS (default 8) in-order queues
 *    round-robin; an op starts only after the earlier ops of its queue have started, and a waiting
 *    op (cuStreamWaitValue32, an event wait, a host function) holds its queue until it is over, so
 *    it holds back the other streams that share the queue.
 *  - Host functions (cuLaunchHostFunc) run on ONE driver thread, one at a time; the stream waits
 *    for them. A CUDA call from a host function returns CUDA_ERROR_NOT_PERMITTED (800).
 *  - cuMemFree, cuMemFreeHost, cuModuleUnload and cuCtxSynchronize wait for all work on the
 *    context, so a host function or a cuStreamWaitValue32 that waits for the calling thread
 *    deadlocks them, as on the driver (test/cuda_release.test.ts). cuIpcCloseMemHandle does too on
 *    the driver; here no mapping can be open (below), so every close fails before any wait.
 *  - Capture (cuStreamBeginCapture_v2, modes global / thread-local / relaxed, and
 *    cuThreadExchangeStreamCaptureMode): kernel, memcpy, memset, host and memory-operation nodes
 *    with their dependencies, fork/join through events; the driver's codes for illegal calls: 900
 *    (sync/query of a capturing stream, legacy-stream capture, ctx sync, unsafe calls such as
 *    cuMemAlloc per the thread/capture modes), 901 (any use of an invalidated capture), 902
 *    (merging captures), 903 (end on a stream that did not begin), 904 (unjoined fork), 905
 *    (waiting on an event recorded outside the capture), 906 (legacy stream used while a blocking
 *    stream captures), 907 (query/sync/timing of an event recorded in a capture), 908 (end from
 *    another thread). An illegal call invalidates the captures it touches. Graphs:
 *    cuGraphGetNodes, cuGraphNodeGetType, cuGraphKernelNodeGetParams_v2, instantiate (a copy in
 *    topological order), cuGraphExecKernelNodeSetParams_v2, launch (on the stream's worker).
 *  - Events: record / query / synchronize / wait / elapsed time: 400 when an event was never
 *    recorded or has timing disabled, 600 while pending, 907 when recorded in a capture.
 *  - Launch checks: block ≤ 1024 threads and ≤ (1024, 1024, 64), grid x < 2^31, y and z ≤ 65535,
 *    no zero dimension (CUDA_ERROR_INVALID_VALUE); a kernel's .maxntid (701); its registers: 64K
 *    a block, given out per warp in units of 256 (a thread's count rounded up to 8), so a block
 *    of more threads than CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK reports is
 *    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701; 255 registers: 256 threads, 128: 512); dynamic
 *    shared memory above 48 KiB minus the kernel's static shared memory only after
 *    cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), up to 227 KiB (1).
 *  - Sticky errors: a kernel faults (a host twin's SIGSEGV/SIGBUS is caught on the stream's
 *    thread; CUDASIM_NO_SEGV=1 leaves faults alone) or calls cudasim_trap(700), and the context
 *    returns CUDA_ERROR_ILLEGAL_ADDRESS from nearly every call from then on, until the primary
 *    context is reset (cuDevicePrimaryCtxReset_v2) or released for the last time.
 *  - Memory: device memory is host memory, so host kernels use it directly; cuMemAlloc pointers
 *    are checked by cuMemFree and the copies (an unknown or out-of-range pointer is
 *    CUDA_ERROR_INVALID_VALUE). Mapped pinned memory (cuMemHostAlloc DEVICEMAP,
 *    cuMemHostRegister) has the same device address as host address (unified addressing) and is
 *    really shared with running kernels.
 *  - Modules: cuModuleLoadDataEx accepts PTX text (.version / .target checked: a newer ISA than
 *    the simulated driver gives 222, a newer target than sm_90 gives 218 with a JIT log) and sm_9x
 *    CUBIN (ELF, EM_CUDA; another architecture gives 209); garbage gives 200 or 218. Kernel names
 *    and parameter sizes come from the image (PTX .entry lists; CUBIN .nv.info.<name> sections,
 *    EIATTR_KPARAM_INFO), so cuModuleGetFunction finds only what the image defines (else 500).
 *    Driver versions (CUDASIM_DRIVER_VERSION, default 13000, what cuDriverGetVersion reports),
 *    after NVIDIA's compatibility rules: PTX whose .version is newer than the driver's PTX ISA
 *    (12.4: 8.4, 12.8: 8.7, 13.0: 9.0) is CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222); a CUBIN runs on
 *    a driver of its toolkit's major version or newer (minor version compatibility: a 12.8 CUBIN
 *    on a 12.4 driver loads), and a newer major's CUBIN (EIATTR_CUDA_API_VERSION, 130 for 13.0;
 *    CUDA 13's ELF is EI_OSABI 0x41, ABI version 8, which an older driver cannot read) is
 *    CUDA_ERROR_INVALID_IMAGE (200): what the driver returns for an ELF it cannot parse; 209
 *    (NO_BINARY_FOR_GPU) stays the answer for another architecture.
 *    Resources (cuFuncGetAttribute): a CUBIN's registers (EIATTR_REGCOUNT of .nv.info, by the
 *    kernel's symbol), local memory (EIATTR_FRAME_SIZE), static shared memory (.nv.shared.<name>
 *    less the 1 KiB reserved), EIATTR_MAX_THREADS / REQNTID; for PTX, which the simulator does not
 *    compile, .maxntid / .reqntid, the .shared declarations and an estimate of registers (the
 *    declared virtual registers in 32-bit units, 8 to 64, at most .maxnreg; 64 keeps a block of
 *    1024 threads launchable, so PTX alone never fails a launch for registers).
 *  - Threads of a block run in an order drawn from CUDASIM_SEED (default 1; 0: index order;
 *    "random": a seed from the clock, printed on stderr), another order for every launch and
 *    graph replay, and another between each two barriers of a block, so a missing __syncthreads()
 *    gives wrong results rather than luck; the same seed and the same calls give the same orders
 *    again, and a kernel's fault names the seed. The order is the twin's (twins.ts: each library
 *    it builds exports cudasim_twin_order, which the simulator calls before each launch on the
 *    stream's thread); twins registered by hand or the CPU kernels of last resort run in index
 *    order.
 *  - Kernels run as host functions with the CPU backend's kernel ABI (shim/bungpu_cpu.h), found
 *    by name: registered with cudasim_register_kernel, or exported by a shared library under
 *    BUNGPU_SIM_KERNELS (colon-separated files or folders, searched recursively for *.so, in the
 *    order listed). Each parameter is packed into zeroed 8-byte slots (one slot when it fits, so
 *    a 16-byte struct takes two). A launch of a kernel without a host twin fails with
 *    CUDA_ERROR_NOT_FOUND and says so in cuGetErrorString. twins.ts translates CUDA C kernels into
 *    such twins (the test suites use it); cudasim.h gives C tests the simulator's own exports.
 *
 * cuGetErrorString(code) appends "[cudasim: <why>]" when the calling thread's last failure had
 * that code, so the backend's error messages say what rule was broken. CUDASIM_VERBOSE=1 prints
 * each failure on stderr.
 *
 *  - Interprocess handles (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle,
 *    cuIpcGetEventHandle, cuIpcOpenEventHandle, with cuMemGetAddressRange_v2): as far as one
 *    process goes. Export checks the allocation base / CU_EVENT_INTERPROCESS; an open in the
 *    exporting process is CUDA_ERROR_INVALID_CONTEXT, as on the driver; an open in another
 *    process is CUDA_ERROR_NOT_SUPPORTED, because the simulator's device memory is its own
 *    process's heap (a gap: no mapping crosses processes).
 *  - Memory pools and stream-ordered allocation (cuDeviceGetDefaultMemPool, cuMemPoolCreate /
 *    Destroy / SetAttribute / GetAttribute / TrimTo, cuMemAllocAsync, cuMemAllocFromPoolAsync,
 *    cuMemFreeAsync): a block freed on stream S is handed out again to S at once, to another
 *    stream T only once S has completed the work before the free, or once T waits on an event
 *    recorded on S after the free (the driver's default reuse policies); otherwise fresh memory is
 *    taken. Stats (reserved / used current and high, the highs reset by setting 0), the release
 *    threshold applied at cuStreamSynchronize, cuEventSynchronize and cuCtxSynchronize, and
 *    cuMemPoolTrimTo release only blocks whose free has completed. Sizes round up to 256 bytes
 *    (the driver's granularity is coarser). In a capture, cuMemAllocAsync adds a memory
 *    allocation node (type 10) whose memory is reserved at once, at a fixed address, for as long
 *    as the graph or an exec of it lives; cuMemFreeAsync adds a free node (type 11); a free node
 *    of memory allocated outside the graph returns it to its pool when it runs. The driver's
 *    rules for such graphs: a graph with memory allocation or free nodes has one exec at a time
 *    (a second cuGraphInstantiate is CUDA_ERROR_NOT_SUPPORTED until the first is destroyed); a
 *    launch marks the graph's allocations without a free node as out, cuMemFreeAsync of one
 *    outside the graph frees it (a second free is 1), and a launch while one is out is
 *    CUDA_ERROR_INVALID_VALUE unless the exec was instantiated with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (flag 1). Errors: 1 for a
 *    NULL out-pointer, 0 bytes, an unknown or already freed pointer, a bad attribute or value,
 *    bad pool properties, destroying the default pool; 400 for a pool handle that is not live.
 * What it does not model: contexts other than the primary ones, per-thread default streams, real
 * timing or concurrency limits, virtual memory management, cuMemFree of pool memory (or of graph
 * memory), graph memory outliving its graph and execs (it goes with them), textures, cooperative launches,
 * child-graph nodes (a graph launch during capture is refused with 900), fatbins (200), device
 * side faults that do not fault on the host (a small overrun stays silent), and most
 * of the API beyond what bungpu uses. CUDASIM_DRIVER_VERSION (default 13000) sets the reported
 * driver version, the newest PTX ISA accepted and the newest CUBIN toolkit (see Modules).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../bungpu_cpu.h"
#include "../../cuda/cuda_api.h"

#define EXPORT __attribute__((visibility("default")))

typedef bgcu_result CUresult;
typedef unsigned long long CUdeviceptr;
typedef void (*sim_kernel_fn)(const bg_cpu_ctx*);

/* ---- result codes ------------------------------------------------------------------------------ */
enum {
  SUCCESS = 0, E_INVALID_VALUE = 1, E_OUT_OF_MEMORY = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100,
  E_INVALID_DEVICE = 101, E_INVALID_IMAGE = 200, E_INVALID_CONTEXT = 201, E_NO_BINARY = 209,
  E_INVALID_PTX = 218, E_UNSUPPORTED_PTX = 222, E_INVALID_HANDLE = 400, E_ILLEGAL_STATE = 401,
  E_NOT_FOUND = 500, E_NOT_READY = 600, E_ILLEGAL_ADDRESS = 700, E_OUT_OF_RESOURCES = 701,
  E_LAUNCH_FAILED = 719, E_NOT_PERMITTED = 800, E_NOT_SUPPORTED = 801,
  E_CAP_UNSUPPORTED = 900, E_CAP_INVALIDATED = 901, E_CAP_MERGE = 902, E_CAP_UNMATCHED = 903,
  E_CAP_UNJOINED = 904, E_CAP_ISOLATION = 905, E_CAP_IMPLICIT = 906, E_CAPTURED_EVENT = 907,
  E_CAP_WRONG_THREAD = 908, E_UNKNOWN = 999,
};

static const struct { unsigned code; const char *name, *text; } err_table[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* The detail of this thread's last failure, appended by cuGetErrorString for that code. */
static _Thread_local unsigned t_detail_code;
static _Thread_local char t_detail[512];
static _Thread_local char t_errstr[768];

static CUresult failf(unsigned code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_detail, sizeof t_detail, fmt, ap);
  va_end(ap);
  t_detail_code = code;
  if (getenv("CUDASIM_VERBOSE")) fprintf(stderr, "cudasim: %u: %s\n", code, t_detail);
  return code;
}

/* ---- global state ------------------------------------------------------------------------------ */
#define MAGIC_CTX 0x43545831u
#define MAGIC_STREAM 0x53545231u
#define MAGIC_EVENT 0x45564e31u
#define MAGIC_MODULE 0x4d4f4431u
#define MAGIC_FUNC 0x46554e31u
#define MAGIC_GRAPH 0x47525031u
#define MAGIC_NODE 0x4e4f4431u
#define MAGIC_EXEC 0x45584531u
#define MAGIC_DEAD 0xdeaddeadu

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static pthread_cond_t GCV = PTHREAD_COND_INITIALIZER; /* broadcast on any progress */
static int g_init;
static int g_driver_version = 13000;
static int g_sm = 90;
/* The simulated driver's version (CUDASIM_DRIVER_VERSION, read again at each use so a test can
 * change it; default 13000). */
static int driver_version(void) {
  const char* env = getenv("CUDASIM_DRIVER_VERSION");
  return env && atoi(env) > 0 ? atoi(env) : g_driver_version;
}

static atomic_uint g_delay_us;
static int g_poison;
/* CUDASIM_SEED: the threads of a block run in an order drawn from it, another for every launch
 * (g_launches counts them, under G, so one sequence of calls gives the same orders again); 0 runs
 * them in index order. */
static uint64_t g_seed = 1, g_launches;
static uint64_t launch_order(void) { /* G held */
  if (!g_seed) return 0;
  uint64_t x = g_seed * 0x9e3779b97f4a7c15ull + ++g_launches;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x ? x : 1;
}
/* Hardware queues ("connections", CUDA_DEVICE_MAX_CONNECTIONS, default 8, at most 32): created
 * streams are spread over them round-robin, and an op starts only after every op issued before it
 * to the same queue has started, so a stream held by a waiting op holds back the streams that
 * share its queue (a false dependency, as on the device). The legacy stream has its own. */
static struct { uint64_t issued, started; } g_conns[32];
static int g_nconns = 8;
static unsigned g_streams_created;

typedef struct CUgraphNode_st gnode;
struct capture;

typedef struct dep { struct CUstream_st* s; uint64_t seq; } dep;

enum { OP_NOP, OP_KERNEL, OP_COPY, OP_SET, OP_HOST, OP_RECORD, OP_GRAPH, OP_WAITVAL, OP_WRITEVAL };

typedef struct kparams { /* a launch's configuration and packed arguments */
  struct CUfunc_st* f;
  unsigned g[3], b[3], shared;
  uint64_t* slots;
  unsigned nslots;
  uint64_t order; /* the seed of its blocks' thread orders (set when launched; see run_kernel_body) */
} kparams;

typedef struct enode enode;

typedef struct op {
  struct op* next;
  int kind;
  uint64_t seq;
  int conn;        /* the hardware queue (connection) of a created stream's op, else -1 */
  uint64_t ticket; /* its place in that queue */
  dep* deps;
  unsigned ndeps;
  kparams k;
  void* dst;
  const void* src;
  size_t n;
  void* owned; /* staged bytes, freed after */
  uint32_t value;
  unsigned esz, flags;
  bgcu_host_fn fn;
  void* user;
  struct CUevent_st* ev;
  uint64_t gen;
  enode* nodes; /* OP_GRAPH: a snapshot of the exec's nodes */
  size_t nn;
} op;

struct CUstream_st {
  unsigned magic;
  unsigned flags;
  int conn; /* hardware queue: streams share CUDA_DEVICE_MAX_CONNECTIONS of them round-robin */
  int legacy, destroyed, exited;
  op *head, *tail;
  uint64_t submitted, completed;
  pthread_t th;
  /* capture */
  struct capture* cap;
  gnode** cdeps;
  size_t ncdeps, capcdeps;
  gnode** info; /* what cuStreamGetCaptureInfo last returned */
  size_t ninfo;
  dep* seen; /* per other stream, the latest point this stream waited for (event waits) */
  size_t nseen;
  struct CUstream_st* next_all;
  struct CUctx_st* ctx; /* the context (device) it belongs to */
};

struct CUevent_st {
  unsigned magic;
  unsigned flags;
  int refs;
  int recorded;
  struct CUstream_st* s;
  uint64_t seq, gen, done_gen;
  struct timespec t;
  struct capture* cap; /* recorded in this capture */
  gnode** cdeps;
  size_t ncdeps;
};

typedef struct kparam_info { unsigned size, offset; } kparam_info;

struct CUfunc_st {
  unsigned magic;
  struct CUmod_st* mod;
  char* name;
  unsigned nparams;
  kparam_info* params;
  unsigned maxntid; /* 0: none declared */
  unsigned regs;    /* registers per thread: the CUBIN's EIATTR_REGCOUNT, or the PTX estimate */
  unsigned local;   /* local memory per thread (the CUBIN's EIATTR_FRAME_SIZE) */
  unsigned static_shared;
  unsigned max_dyn_shared;
  sim_kernel_fn host; /* resolved on first launch */
  void (*order)(unsigned long long); /* its library's cudasim_twin_order, if it has one */
  struct CUfunc_st* next;
};

struct CUmod_st {
  unsigned magic;
  struct CUfunc_st* funcs;
};

struct CUgraphNode_st {
  unsigned magic;
  int type;
  gnode** deps;
  size_t ndeps;
  kparams k;
  void** kp; /* kernelParams as cuGraphKernelNodeGetParams reports them */
  void* dst;
  const void* src;
  size_t n;
  uint32_t value;
  unsigned esz, flags, memop;
  bgcu_host_fn fn;
  void* user;
  size_t tag; /* scratch for instantiation */
};

struct gmem;
struct CUgraph_st {
  unsigned magic;
  gnode** nodes;
  size_t n, cap;
  struct gmem* gm; /* memory of its allocation nodes (shared with its execs) */
  int mem_nodes;   /* it has memory allocation or free nodes: one exec at a time */
  struct CUgraphExec_st* exec; /* that exec, while it lives */
};

struct enode { /* a node of an instantiated graph */
  const gnode* orig;
  gnode node;
};

struct CUgraphExec_st {
  unsigned magic;
  enode* nodes; /* in topological order */
  size_t n;
  struct CUstream_st* last_s; /* the previous launch: the next one is ordered after it */
  uint64_t last_seq;
  struct gmem* gm;
  struct CUgraph_st* graph; /* a graph with memory nodes, whose one exec this is (NULL once gone) */
  unsigned long long flags;
};

typedef struct capture {
  uint64_t id;
  unsigned mode;
  pthread_t thread;
  struct CUstream_st* origin;
  int invalid, ended;
  struct CUgraph_st* g;
  struct capture* next;
} capture;

/* CUDASIM_DEVICES=n (1 to SIM_MAXDEV, default 1) devices, each with its primary context, its
 * legacy stream, its sticky error, its default memory pool and the peers it may access. */
#define SIM_MAXDEV 8
struct CUctx_st {
  unsigned magic;
  int refs;
  unsigned sticky;
  char sticky_msg[320];
  int dev;
  struct CUstream_st legacy;
  unsigned char peer[SIM_MAXDEV]; /* cuCtxEnablePeerAccess: this context may access device j */
};

static struct CUctx_st g_ctxs[SIM_MAXDEV];
static int g_ndev = 1;
static _Thread_local struct CUctx_st* t_run_ctx; /* the context of the op a stream worker runs */
static int is_ctx(const struct CUctx_st* c) {
  for (int i = 0; i < g_ndev; i++)
    if (c == &g_ctxs[i]) return 1;
  return 0;
}
static struct CUstream_st* g_streams; /* every stream ever created (never freed: waits refer to them) */
static capture* g_caps;
static uint64_t g_capture_ids;
static _Thread_local struct CUctx_st* t_ctx;
static _Thread_local struct CUctx_st* t_ctx_stack[16];
static _Thread_local int t_ctx_depth;
static _Thread_local unsigned t_capture_mode; /* cuThreadExchangeStreamCaptureMode; 0 = global */
static _Thread_local int t_in_host_fn;
static _Thread_local unsigned t_trap;

/* ---- memory registry ------------------------------------------------------------------------- */
enum { MEM_DEVICE = 1, MEM_PINNED = 2, MEM_REGISTERED = 3, MEM_POOL = 4 /* pools and graph memory */ };
struct CUmemPoolHandle_st;
typedef struct region {
  uintptr_t base;
  size_t size;
  int kind;
  unsigned flags;
  int dev;                         /* the device whose memory it is */
  struct CUmemPoolHandle_st* pool; /* stream-ordered memory: its pool (access per pool) */
} region;
static region* g_regions;
static size_t g_nregions, g_capregions;
static size_t g_used;
static const size_t g_total = 85045231616ull; /* an H100 80GB HBM3 */

static region* find_region(uintptr_t p) {
  for (size_t i = 0; i < g_nregions; i++)
    if (p >= g_regions[i].base && p < g_regions[i].base + g_regions[i].size) return &g_regions[i];
  return NULL;
}

static int add_region(uintptr_t base, size_t size, int kind, unsigned flags) {
  if (g_nregions == g_capregions) {
    size_t nc = g_capregions ? g_capregions * 2 : 64;
    region* r = realloc(g_regions, nc * sizeof *r);
    if (!r) return 0;
    g_regions = r;
    g_capregions = nc;
  }
  g_regions[g_nregions++] = (region){base, size, kind, flags, t_ctx ? t_ctx->dev : 0, NULL};
  return 1;
}

static void remove_region(region* r) { *r = g_regions[--g_nregions]; }

/* A device-visible range [p, p+n): device memory or mapped host memory. */
static int device_range(CUdeviceptr p, size_t n) {
  region* r = find_region((uintptr_t)p);
  if (!r) return 0;
  /* With unified addressing all pinned host memory is device-accessible, whatever its flags. */
  return n <= r->size - ((uintptr_t)p - r->base);
}

static int is_pinned_host(const void* p) {
  region* r = find_region((uintptr_t)p);
  return r && (r->kind == MEM_PINNED || r->kind == MEM_REGISTERED);
}

/* ---- kernels by name ----------------------------------------------------------------------- */
typedef struct reg_kernel { char* name; sim_kernel_fn fn; struct reg_kernel* next; } reg_kernel;
static reg_kernel* g_registered;
typedef struct lib { char* path; void* h; int prio; struct lib* next; } lib; /* by prio */
static lib* g_libs;
static pthread_mutex_t g_lib_lock = PTHREAD_MUTEX_INITIALIZER;

EXPORT void cudasim_register_kernel(const char* name, sim_kernel_fn fn) {
  pthread_mutex_lock(&g_lib_lock);
  reg_kernel* r = calloc(1, sizeof *r);
  if (r) {
    r->name = strdup(name);
    r->fn = fn;
    r->next = g_registered;
    g_registered = r;
  }
  pthread_mutex_unlock(&g_lib_lock);
}

/* Libraries are searched in the order of their BUNGPU_SIM_KERNELS entries (prio), then opening. */
static void open_lib(const char* path, int prio) {
  for (lib* l = g_libs; l; l = l->next)
    if (!strcmp(l->path, path)) return;
  lib* l = calloc(1, sizeof *l);
  if (!l) return;
  l->path = strdup(path);
  l->prio = prio;
  l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!l->h && getenv("CUDASIM_VERBOSE")) fprintf(stderr, "cudasim: dlopen %s: %s\n", path, dlerror());
  lib** p = &g_libs;
  while (*p && (*p)->prio <= prio) p = &(*p)->next;
  l->next = *p;
  *p = l;
}

static void scan_path(const char* path, int depth, int prio) {
  struct stat st;
  if (depth > 8 || stat(path, &st) != 0) return;
  if (S_ISREG(st.st_mode)) {
    open_lib(path, prio);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  DIR* d = opendir(path);
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    size_t len = strlen(e->d_name);
    struct stat ss;
    if (stat(sub, &ss) != 0) continue;
    if (S_ISDIR(ss.st_mode)) scan_path(sub, depth + 1, prio);
    else if (len > 3 && !strcmp(e->d_name + len - 3, ".so")) open_lib(sub, prio);
  }
  closedir(d);
}

typedef void (*sim_order_fn)(unsigned long long);

static sim_kernel_fn lookup_in_libs(const char* name, sim_order_fn* order) {
  for (lib* l = g_libs; l; l = l->next) {
    if (!l->h) continue;
    void* p = dlsym(l->h, name);
    if (p) {
      sim_kernel_fn fn;
      memcpy(&fn, &p, sizeof p);
      void* o = dlsym(l->h, "cudasim_twin_order");
      if (o) memcpy(order, &o, sizeof o);
      return fn;
    }
  }
  return NULL;
}

/* A kernel's host twin by name, and the thread-order setter of the library it came from. */
static sim_kernel_fn find_host_twin(const char* name, sim_order_fn* order) {
  pthread_mutex_lock(&g_lib_lock);
  sim_kernel_fn fn = NULL;
  for (reg_kernel* r = g_registered; r && !fn; r = r->next)
    if (!strcmp(r->name, name)) fn = r->fn;
  const char* env = getenv("BUNGPU_SIM_KERNELS");
  if (!fn && env && *env) { /* (re)scan: libraries may have been added since */
    char* copy = strdup(env);
    int prio = 0;
    for (char* save = NULL, *p = copy ? strtok_r(copy, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save))
      scan_path(p, 0, prio++);
    free(copy);
  }
  if (!fn) fn = lookup_in_libs(name, order);
  pthread_mutex_unlock(&g_lib_lock);
  return fn;
}

/* ---- time, delays ---------------------------------------------------------------------------- */
EXPORT void cudasim_set_delay_us(unsigned us) { atomic_store(&g_delay_us, us); }

static void delay_op(void) {
  unsigned us = atomic_load(&g_delay_us);
  if (us) {
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&t, NULL);
  }
}

/* The kernel being run calls this (from its host twin) to report a device fault: the context
 * takes `code` (normally 700, CUDA_ERROR_ILLEGAL_ADDRESS) as its sticky error. */
EXPORT void cudasim_trap(unsigned code) { t_trap = code ? code : E_ILLEGAL_ADDRESS; }

/* Work queued or running on any stream (for tests). */
EXPORT int cudasim_pending(void) {
  pthread_mutex_lock(&G);
  int n = 0;
  for (int d = 0; d < g_ndev; d++)
    if (g_ctxs[d].legacy.submitted != g_ctxs[d].legacy.completed) n++;
  for (struct CUstream_st* s = g_streams; s; s = s->next_all)
    if (s->submitted != s->completed) n++;
  pthread_mutex_unlock(&G);
  return n;
}

/* ---- the host-function thread ---------------------------------------------------------------- */
typedef struct host_item { bgcu_host_fn fn; void* user; int done; struct host_item* next; } host_item;
static host_item *g_host_head, *g_host_tail;

static void* host_thread(void* arg) {
  (void)arg;
  t_in_host_fn = 1;
  pthread_mutex_lock(&G);
  for (;;) {
    while (!g_host_head) pthread_cond_wait(&GCV, &G);
    host_item* it = g_host_head;
    g_host_head = it->next;
    if (!g_host_head) g_host_tail = NULL;
    pthread_mutex_unlock(&G);
    it->fn(it->user);
    pthread_mutex_lock(&G);
    it->done = 1;
    pthread_cond_broadcast(&GCV);
  }
  return NULL;
}

/* Run fn on the driver's host thread and wait for it (called by a stream worker, G held). */
static void run_host_fn_locked(bgcu_host_fn fn, void* user) {
  host_item it = {fn, user, 0, NULL};
  if (g_host_tail) g_host_tail->next = &it;
  else g_host_head = &it;
  g_host_tail = &it;
  pthread_cond_broadcast(&GCV);
  while (!it.done) pthread_cond_wait(&GCV, &G);
}

/* ---- executing work (stream workers) ----------------------------------------------------------- */
static void set_sticky_locked(struct CUctx_st* c, unsigned code, const char* what) {
  if (!c->sticky) {
    c->sticky = code;
    snprintf(c->sticky_msg, sizeof c->sticky_msg, "%s", what);
  }
  pthread_cond_broadcast(&GCV);
}

/* A fault (SIGSEGV/SIGBUS) inside a host twin is the kernel's illegal address: the handler jumps
 * back to run_kernel, which makes it the context's sticky 700. Faults elsewhere go to the handler
 * that was installed before (ASan's, or the default action). CUDASIM_NO_SEGV=1 turns this off. */
static _Thread_local sigjmp_buf* t_kernel_jmp;
static _Thread_local void* t_fault_addr;
static struct sigaction g_old_segv, g_old_bus;

static void fault_handler(int sig, siginfo_t* si, void* uc) {
  if (t_kernel_jmp) {
    t_fault_addr = si ? si->si_addr : NULL;
    siglongjmp(*t_kernel_jmp, sig);
  }
  struct sigaction* old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
  if (old->sa_flags & SA_SIGINFO) old->sa_sigaction(sig, si, uc);
  else if (old->sa_handler == SIG_IGN) return;
  else if (old->sa_handler != SIG_DFL) old->sa_handler(sig);
  else signal(sig, SIG_DFL); /* the faulting instruction runs again, with the default action */
}

static void install_fault_handler(void) {
  if (getenv("CUDASIM_NO_SEGV")) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
}

static void run_kernel_body(const kparams* k);

/* Launches of bungpu's persistent ring kernel running now: a module load waits for them (below). */
static _Atomic int g_persistent_running;

/* Run a kernel's host twin over the whole grid (G not held). */
static void run_kernel(const kparams* k) {
  const int persistent = strcmp(k->f->name, "bg_ring_persistent") == 0;
  if (persistent) atomic_fetch_add(&g_persistent_running, 1);
  run_kernel_body(k);
  if (persistent) atomic_fetch_sub(&g_persistent_running, 1);
}

static int pool_grants(const struct CUmemPoolHandle_st* p, int dev);

static void run_kernel_body(const kparams* k) {
  bg_cpu_ctx c;
  memset(&c, 0, sizeof c);
  c.grid = (bg_dim3){k->g[0], k->g[1], k->g[2]};
  c.block = (bg_dim3){k->b[0], k->b[1], k->b[2]};
  c.block_begin = 0;
  c.block_end = (uint32_t)((uint64_t)k->g[0] * k->g[1] * k->g[2]);
  c.args = k->slots;
  c.shared_bytes = k->shared;
  void* sh = malloc(k->shared ? k->shared : 16);
  c.shared = sh;
  c.worker = 0;
  t_trap = 0;
  if (k->f->order) k->f->order(k->order);
  /* Another device's memory among the arguments: a kernel may touch it only with peer access
   * (cuMemAlloc memory) or the pool's access (stream-ordered memory); otherwise it faults. Only
   * pointers passed as arguments are seen (the start of any allocation or any address in one). */
  if (g_ndev > 1 && t_run_ctx) {
    char why[300] = "";
    pthread_mutex_lock(&G);
    for (unsigned i = 0; i < k->nslots && !why[0]; i++) {
      region* r = k->slots[i] > 4096 ? find_region((uintptr_t)k->slots[i]) : NULL;
      if (!r || r->dev == t_run_ctx->dev || (r->kind != MEM_DEVICE && r->kind != MEM_POOL)) continue;
      if (r->pool && !pool_grants(r->pool, t_run_ctx->dev))
        snprintf(why, sizeof why, "kernel %s on device %d: argument %u is stream-ordered memory of device %d's pool, which device %d was not given access to (cuMemPoolSetAccess; peer access does not extend to pools)",
                 k->f->name, t_run_ctx->dev, i, r->dev, t_run_ctx->dev);
      else if (!r->pool && !t_run_ctx->peer[r->dev])
        snprintf(why, sizeof why, "kernel %s on device %d: argument %u is memory of device %d without peer access (cuCtxEnablePeerAccess)",
                 k->f->name, t_run_ctx->dev, i, r->dev);
    }
    if (why[0]) set_sticky_locked(t_run_ctx, E_ILLEGAL_ADDRESS, why);
    pthread_mutex_unlock(&G);
    if (why[0]) {
      free(sh);
      return;
    }
  }
  sigjmp_buf jb;
  int faulted = 0;
  if (sh) {
    if (sigsetjmp(jb, 1) == 0) {
      t_kernel_jmp = &jb;
      k->f->host(&c);
    } else {
      faulted = 1;
      t_trap = E_ILLEGAL_ADDRESS;
    }
    t_kernel_jmp = NULL;
  }
  free(sh);
  if (t_trap) {
    char what[300];
    if (faulted) snprintf(what, sizeof what, "kernel %s: illegal address %p (CUDASIM_SEED=%llu)", k->f->name, t_fault_addr, (unsigned long long)g_seed);
    else snprintf(what, sizeof what, "kernel %s trapped with %u (CUDASIM_SEED=%llu)", k->f->name, t_trap, (unsigned long long)g_seed);
    pthread_mutex_lock(&G);
    set_sticky_locked(t_run_ctx ? t_run_ctx : &g_ctxs[0], t_trap, what);
    pthread_mutex_unlock(&G);
    t_trap = 0;
  }
}

static void do_memset(void* dst, uint32_t v, unsigned esz, size_t count) {
  if (esz == 1) memset(dst, (int)(v & 0xff), count);
  else if (esz == 2) for (size_t i = 0; i < count; i++) ((uint16_t*)dst)[i] = (uint16_t)v;
  else for (size_t i = 0; i < count; i++) ((uint32_t*)dst)[i] = v;
}

static int wait_value_ok(uint32_t cur, uint32_t v, unsigned flags) {
  switch (flags & 0xf) {
    case 0: return (int32_t)(cur - v) >= 0;
    case 1: return cur == v;
    case 2: return (cur & v) != 0;
    default: return ~(cur | v) != 0;
  }
}

/* Wait (G not held) until *addr satisfies the condition or the context has failed. */
static void wait_value(uint32_t* addr, uint32_t v, unsigned flags) {
  unsigned spins = 0;
  for (;;) {
    uint32_t cur = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
    if (wait_value_ok(cur, v, flags)) return;
    if (t_run_ctx && __atomic_load_n(&t_run_ctx->sticky, __ATOMIC_RELAXED)) return;
    struct timespec t = {0, ++spins < 100 ? 2000 : 50000};
    nanosleep(&t, NULL);
  }
}

static void pool_free_from_graph(uintptr_t p); /* G held */

static void run_node(const gnode* n) {
  switch (n->type) {
    case 0: run_kernel(&n->k); break;
    case 1: delay_op(); memmove(n->dst, n->src, n->n); break;
    case 2: delay_op(); do_memset(n->dst, n->value, n->esz, n->n); break;
    case 3:
      pthread_mutex_lock(&G);
      run_host_fn_locked(n->fn, n->user);
      pthread_mutex_unlock(&G);
      break;
    case 10: break; /* memory allocation node: the memory is the graph's, reserved already */
    case 11: /* memory free node: memory from a pool goes back to it; the graph's stays */
      pthread_mutex_lock(&G);
      pool_free_from_graph((uintptr_t)n->dst);
      pthread_mutex_unlock(&G);
      break;
    case 12:
      if (n->memop == 1) wait_value(n->dst, n->value, n->flags);
      else __atomic_store_n((uint32_t*)n->dst, n->value, __ATOMIC_RELEASE);
      break;
    default: break;
  }
}

static void free_kparams(kparams* k) {
  free(k->slots);
  k->slots = NULL;
}

static void event_unref_locked(struct CUevent_st* e) {
  if (--e->refs == 0) {
    e->magic = MAGIC_DEAD;
    free(e->cdeps);
    free(e);
  }
}

static void free_op(op* o) {
  free(o->deps);
  free(o->owned);
  free_kparams(&o->k);
  if (o->nodes) {
    for (size_t i = 0; i < o->nn; i++) free_kparams(&o->nodes[i].node.k);
    free(o->nodes);
  }
  free(o);
}

static int deps_ready(const op* o) {
  for (unsigned i = 0; i < o->ndeps; i++)
    if (o->deps[i].s->completed < o->deps[i].seq) return 0;
  return o->conn < 0 || g_conns[o->conn].started + 1 == o->ticket;
}

static void* stream_worker(void* arg) {
  struct CUstream_st* s = arg;
  pthread_mutex_lock(&G);
  for (;;) {
    while (!s->head && !s->destroyed) pthread_cond_wait(&GCV, &G);
    if (!s->head) break;
    op* o = s->head;
    while (!deps_ready(o)) pthread_cond_wait(&GCV, &G);
    /* A kernel, copy or memset lets the next op of its hardware queue start once it has started;
     * a wait (stream memory wait, host function) holds the queue until it is over. */
    int holds = o->kind == OP_WAITVAL || o->kind == OP_HOST;
    if (o->conn >= 0 && !holds) {
      g_conns[o->conn].started = o->ticket;
      pthread_cond_broadcast(&GCV);
    }
    t_run_ctx = s->ctx;
    int dead = s->ctx->sticky != 0;
    switch (o->kind) {
      case OP_HOST:
        if (!dead) run_host_fn_locked(o->fn, o->user);
        break;
      case OP_RECORD:
        if (o->ev->gen == o->gen) {
          clock_gettime(CLOCK_MONOTONIC, &o->ev->t);
          o->ev->done_gen = o->gen;
        }
        event_unref_locked(o->ev);
        o->ev = NULL;
        break;
      case OP_NOP: break;
      default:
        pthread_mutex_unlock(&G);
        if (!dead) switch (o->kind) {
            case OP_KERNEL: run_kernel(&o->k); break;
            case OP_COPY: delay_op(); memmove(o->dst, o->src, o->n); break;
            case OP_SET: delay_op(); do_memset(o->dst, o->value, o->esz, o->n); break;
            case OP_WAITVAL: wait_value(o->dst, o->value, o->flags); break;
            case OP_WRITEVAL: __atomic_store_n((uint32_t*)o->dst, o->value, __ATOMIC_RELEASE); break;
            case OP_GRAPH:
              for (size_t i = 0; i < o->nn && !__atomic_load_n(&s->ctx->sticky, __ATOMIC_RELAXED); i++)
                run_node(&o->nodes[i].node);
              break;
          }
        pthread_mutex_lock(&G);
    }
    if (o->conn >= 0 && holds) g_conns[o->conn].started = o->ticket;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->completed = o->seq;
    pthread_cond_broadcast(&GCV);
    pthread_mutex_unlock(&G);
    free_op(o);
    pthread_mutex_lock(&G);
  }
  s->exited = 1;
  pthread_mutex_unlock(&G);
  return NULL;
}

/* ---- queueing (G held) ------------------------------------------------------------------------ */
static op* new_op(int kind) {
  op* o = calloc(1, sizeof *o);
  if (o) o->kind = kind;
  return o;
}

static int add_dep(op* o, struct CUstream_st* s, uint64_t seq) {
  if (s->completed >= seq) return 1;
  dep* d = realloc(o->deps, (o->ndeps + 1) * sizeof *d);
  if (!d) return 0;
  o->deps = d;
  o->deps[o->ndeps++] = (dep){s, seq};
  return 1;
}

/* Append o to s with the legacy stream's implicit dependencies. Returns the op's sequence. */
static uint64_t enqueue(struct CUstream_st* s, op* o) {
  struct CUstream_st* lg = &s->ctx->legacy; /* the legacy stream's rules hold within a context */
  if (s->legacy) {
    for (struct CUstream_st* t = g_streams; t; t = t->next_all)
      if (t->ctx == s->ctx && !(t->flags & BGCU_STREAM_NON_BLOCKING) && t->submitted > t->completed)
        add_dep(o, t, t->submitted);
  } else if (!(s->flags & BGCU_STREAM_NON_BLOCKING) && lg->submitted > lg->completed) {
    add_dep(o, lg, lg->submitted);
  }
  o->seq = ++s->submitted;
  o->conn = s->legacy ? -1 : s->conn;
  if (o->conn >= 0) o->ticket = ++g_conns[o->conn].issued;
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&GCV);
  return o->seq;
}

static void wait_seq(struct CUstream_st* s, uint64_t seq) {
  while (s->completed < seq) pthread_cond_wait(&GCV, &G);
}

/* Everything submitted so far on the context, finished (the implicit synchronisation). */
static void wait_all_ctx(struct CUctx_st* c) {
  uint64_t lseq = c->legacy.submitted;
  size_t n = 0;
  for (struct CUstream_st* t = g_streams; t; t = t->next_all) n++;
  uint64_t* seqs = malloc((n + 1) * sizeof *seqs);
  size_t i = 0;
  for (struct CUstream_st* t = g_streams; t; t = t->next_all) {
    if (seqs) seqs[i] = t->submitted;
    i++;
  }
  wait_seq(&c->legacy, lseq);
  i = 0;
  for (struct CUstream_st* t = g_streams; t; t = t->next_all, i++)
    if (t->ctx == c) wait_seq(t, seqs ? seqs[i] : t->submitted);
  free(seqs);
}
#define wait_all() wait_all_ctx(t_ctx)

static int start_worker(struct CUstream_st* s) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 8u << 20);
  int rc = pthread_create(&s->th, &a, stream_worker, s);
  pthread_attr_destroy(&a);
  return rc == 0;
}

/* ---- memory pools (G held) --------------------------------------------------------------------
 * Blocks of every pool in one list. A free block remembers the stream and the point (sequence)
 * of its free; fs NULL: free with nothing pending (reusable by anyone). */
#define MAGIC_POOL 0x504f4f31u
#define POOL_GRAIN 256u
typedef struct pblock {
  uintptr_t addr;
  size_t size;
  struct CUmemPoolHandle_st* pool;
  int in_use;
  struct CUstream_st* fs;
  uint64_t fseq;
  struct pblock* next;
} pblock;

struct CUmemPoolHandle_st {
  unsigned magic;
  int dead; /* destroyed with blocks still out: gone with the last of them */
  uint64_t threshold;
  uint64_t reserved, used, reserved_high, used_high;
  uint64_t live;
  struct CUmemPoolHandle_st* next;
  int dev;                         /* its memory's device */
  unsigned char access[SIM_MAXDEV]; /* cuMemPoolSetAccess: 0 none, 1 read, 3 read-write */
};

/* Each device's default pool (cuDeviceGetDefaultMemPool), linked into g_pools at cuInit. */
static struct CUmemPoolHandle_st g_dpools[SIM_MAXDEV];
static struct CUmemPoolHandle_st* g_pools;
static int is_default_pool(const struct CUmemPoolHandle_st* p) { return p >= g_dpools && p < g_dpools + SIM_MAXDEV; }
static int pool_grants(const struct CUmemPoolHandle_st* p, int dev) { return (p->access[dev] & 1) != 0; }
static pblock* g_pblocks;

/* Graph memory: the blocks of a graph's allocation nodes, shared by the graph and its execs. */
struct gmem {
  int refs;
  /* freed: the graph frees it itself (a free node); live: a launch allocated it and nothing has
   * freed it since (cuMemFreeAsync outside the graph, or AUTO_FREE_ON_LAUNCH at the next launch) */
  struct gblock { uintptr_t addr; size_t size; int freed, live; } * v;
  size_t n, cap;
  struct gmem* next_all;
};
static struct gmem* g_gmems; /* every live graph memory, for frees outside the graph */

static void gmem_ref(struct gmem* m) { m->refs++; }

static void gmem_unref(struct gmem* m) {
  if (!m || --m->refs > 0) return;
  for (struct gmem** q = &g_gmems; *q; q = &(*q)->next_all)
    if (*q == m) {
      *q = m->next_all;
      break;
    }
  for (size_t i = 0; i < m->n; i++) {
    region* r = find_region(m->v[i].addr);
    if (r && r->base == m->v[i].addr) remove_region(r);
    g_used -= m->v[i].size;
    free((void*)m->v[i].addr);
  }
  free(m->v);
  free(m);
}

static struct gblock* gmem_find(struct gmem* m, uintptr_t p) {
  for (size_t i = 0; m && i < m->n; i++)
    if (m->v[i].addr == p) return &m->v[i];
  return NULL;
}

/* The latest point of `of` that stream s has waited for through an event. */
static void note_seen(struct CUstream_st* s, struct CUstream_st* of, uint64_t seq) {
  for (size_t i = 0; i < s->nseen; i++)
    if (s->seen[i].s == of) {
      if (s->seen[i].seq < seq) s->seen[i].seq = seq;
      return;
    }
  dep* d = realloc(s->seen, (s->nseen + 1) * sizeof *d);
  if (!d) return; /* only a missed chance of reuse */
  s->seen = d;
  s->seen[s->nseen++] = (dep){of, seq};
}

/* May stream t (NULL: nobody in particular) have free block b now? */
static int block_ready(const pblock* b, const struct CUstream_st* t) {
  if (!b->fs || b->fs == t || b->fs->completed >= b->fseq) return 1;
  for (size_t i = 0; t && i < t->nseen; i++)
    if (t->seen[i].s == b->fs && t->seen[i].seq >= b->fseq) return 1;
  return 0;
}

static void pool_note(struct CUmemPoolHandle_st* p, int64_t reserved, int64_t used) {
  p->reserved += (uint64_t)reserved;
  p->used += (uint64_t)used;
  if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
  if (p->used > p->used_high) p->used_high = p->used;
}

static void pool_unlink_free(struct CUmemPoolHandle_st* p) {
  for (struct CUmemPoolHandle_st** q = &g_pools; *q; q = &(*q)->next)
    if (*q == p) {
      *q = p->next;
      break;
    }
  p->magic = MAGIC_DEAD;
  if (!is_default_pool(p)) free(p);
}

/* Give a block's memory back (b unlinked from g_pblocks by the caller's loop). */
static void block_release(pblock* b) {
  region* r = find_region(b->addr);
  if (r && r->base == b->addr) remove_region(r);
  g_used -= b->size;
  pool_note(b->pool, -(int64_t)b->size, 0);
  free((void*)b->addr);
  free(b);
}

/* Release reusable free blocks of p, largest first, while it holds more than `keep`. */
static void pool_shrink(struct CUmemPoolHandle_st* p, uint64_t keep) {
  while (p->reserved > keep) {
    pblock** best = NULL;
    for (pblock** q = &g_pblocks; *q; q = &(*q)->next) {
      pblock* b = *q;
      if (b->pool == p && !b->in_use && block_ready(b, NULL) && (!best || b->size > (*best)->size)) best = q;
    }
    if (!best) return;
    pblock* b = *best;
    *best = b->next;
    block_release(b);
  }
}

/* At a synchronize: every pool above its release threshold gives memory back. */
static void pools_release_locked(void) {
  for (struct CUmemPoolHandle_st *p = g_pools, *next; p; p = next) {
    next = p->next;
    if (p->reserved > p->threshold) pool_shrink(p, p->threshold);
    if (p->dead && !p->live && !p->reserved) pool_unlink_free(p);
  }
}

/* A block goes back to its pool, freed at point `seq` of stream s (s NULL: nothing pending). */
static void block_free(pblock* b, struct CUstream_st* s, uint64_t seq) {
  struct CUmemPoolHandle_st* p = b->pool;
  b->in_use = 0;
  b->fs = s;
  b->fseq = seq;
  pool_note(p, 0, -(int64_t)b->size);
  p->live--; /* a destroyed pool's blocks go at the next synchronize (its threshold is 0) */
}

static void pool_free_from_graph(uintptr_t p) {
  for (pblock** q = &g_pblocks; *q; q = &(*q)->next)
    if ((*q)->addr == p && (*q)->in_use) {
      block_free(*q, NULL, 0);
      pthread_cond_broadcast(&GCV);
      return;
    }
}

/* ---- entry checks (G held) ------------------------------------------------------------------- */
static CUresult enter_locked(void) {
  if (!g_init) return failf(E_NOT_INITIALIZED, "cuInit has not been called");
  if (t_in_host_fn) return failf(E_NOT_PERMITTED, "a CUDA call from a host function (cuLaunchHostFunc) is not permitted");
  if (!t_ctx || t_ctx->magic != MAGIC_CTX || t_ctx->refs <= 0)
    return failf(E_INVALID_CONTEXT, "no current context (cuCtxSetCurrent / cuCtxPushCurrent) or it was released");
  if (t_ctx->sticky) return failf(t_ctx->sticky, "the context has a sticky error: %s", t_ctx->sticky_msg);
  return SUCCESS;
}

#define ENTER()                                                                                    \
  pthread_mutex_lock(&G);                                                                          \
  do {                                                                                             \
    CUresult e_ = enter_locked();                                                                  \
    if (e_) {                                                                                      \
      pthread_mutex_unlock(&G);                                                                    \
      return e_;                                                                                   \
    }                                                                                              \
  } while (0)
#define RETURN(x)                                                                                  \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    pthread_mutex_unlock(&G);                                                                      \
    return r_;                                                                                     \
  } while (0)

static struct CUstream_st* stream_of(bgcu_stream h, CUresult* rc) {
  *rc = SUCCESS;
  if (h == NULL || h == (bgcu_stream)(uintptr_t)1) return &t_ctx->legacy;
  if (h == (bgcu_stream)(uintptr_t)2) {
    *rc = failf(E_NOT_SUPPORTED, "cudasim does not model the per-thread default stream");
    return NULL;
  }
  if (h->magic != MAGIC_STREAM) {
    *rc = failf(E_INVALID_HANDLE, "not a live stream");
    return NULL;
  }
  return h;
}

#define STREAM(var, h)                                                                             \
  CUresult var##_rc;                                                                               \
  struct CUstream_st* var = stream_of(h, &var##_rc);                                               \
  if (!var) RETURN(var##_rc)

/* ---- capture (G held) ------------------------------------------------------------------------ */
static int blocking_capture_active(void) {
  for (struct CUstream_st* t = g_streams; t; t = t->next_all)
    if (t->cap && !(t->flags & BGCU_STREAM_NON_BLOCKING)) return 1;
  return 0;
}

/* Using the legacy stream while a blocking stream captures: 906, and those captures are dead. */
static CUresult legacy_use(const char* what) {
  if (!blocking_capture_active()) return SUCCESS;
  for (struct CUstream_st* t = g_streams; t; t = t->next_all)
    if (t->cap && !(t->flags & BGCU_STREAM_NON_BLOCKING)) t->cap->invalid = 1;
  return failf(E_CAP_IMPLICIT, "%s uses the legacy stream while a blocking stream is capturing", what);
}

/* A "potentially unsafe" call (allocation, free, synchronous copy...) under the capture-mode rules
 * of cuThreadExchangeStreamCaptureMode. */
static CUresult unsafe_call(const char* what) {
  if (t_capture_mode == BGCU_STREAM_CAPTURE_MODE_RELAXED) return SUCCESS;
  pthread_t self = pthread_self();
  int bad = 0;
  for (capture* c = g_caps; c; c = c->next) {
    int mine = pthread_equal(c->thread, self);
    if ((mine && c->mode != BGCU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!mine && t_capture_mode == BGCU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == BGCU_STREAM_CAPTURE_MODE_GLOBAL)) {
      c->invalid = 1;
      bad = 1;
    }
  }
  if (bad)
    return failf(E_CAP_UNSUPPORTED, "%s is not permitted during a stream capture (the capture-mode rules)", what);
  return SUCCESS;
}

static int any_capture(void) { return g_caps != NULL; }

static void set_cdeps(struct CUstream_st* s, gnode* const* d, size_t n) {
  if (n > s->capcdeps) {
    gnode** nd = realloc(s->cdeps, n * sizeof *nd);
    if (!nd) return;
    s->cdeps = nd;
    s->capcdeps = n;
  }
  if (n) memcpy(s->cdeps, d, n * sizeof *d);
  s->ncdeps = n;
}

static void leave_capture(struct CUstream_st* s) {
  s->cap = NULL;
  s->ncdeps = 0;
}

static void graph_free(struct CUgraph_st* g);

/* End a capture sequence: every stream in it leaves capture mode. */
static void finish_capture(capture* c) {
  for (struct CUstream_st* t = g_streams; t; t = t->next_all)
    if (t->cap == c) leave_capture(t);
  for (capture** p = &g_caps; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  c->ended = 1; /* kept: events recorded in it still refer to it */
}

/* Check the stream's capture before adding to it: 901 when invalidated. */
static CUresult capture_ok(struct CUstream_st* s) {
  if (s->cap && s->cap->invalid)
    return failf(E_CAP_INVALIDATED, "the capture sequence was invalidated by an earlier illegal call");
  return SUCCESS;
}

static gnode* new_node(int type) {
  gnode* n = calloc(1, sizeof *n);
  if (n) {
    n->magic = MAGIC_NODE;
    n->type = type;
  }
  return n;
}

static int graph_add(struct CUgraph_st* g, gnode* n) {
  if (g->n == g->cap) {
    size_t nc = g->cap ? g->cap * 2 : 16;
    gnode** nn = realloc(g->nodes, nc * sizeof *nn);
    if (!nn) return 0;
    g->nodes = nn;
    g->cap = nc;
  }
  g->nodes[g->n++] = n;
  return 1;
}

/* Add n to the capture of s after the stream's current dependencies. */
static CUresult capture_node(struct CUstream_st* s, gnode* n) {
  if (!n) return failf(E_OUT_OF_MEMORY, "out of host memory");
  n->ndeps = s->ncdeps;
  if (s->ncdeps) {
    n->deps = malloc(s->ncdeps * sizeof *n->deps);
    if (!n->deps) {
      free(n);
      return failf(E_OUT_OF_MEMORY, "out of host memory");
    }
    memcpy(n->deps, s->cdeps, s->ncdeps * sizeof *n->deps);
  }
  if (!graph_add(s->cap->g, n)) {
    free(n->deps);
    free(n);
    return failf(E_OUT_OF_MEMORY, "out of host memory");
  }
  set_cdeps(s, &n, 1);
  return SUCCESS;
}

/* Is a an ancestor of (or equal to) b in the graph? */
static int reaches(const gnode* a, const gnode* b, int depth) {
  if (a == b) return 1;
  if (depth > 100000) return 0;
  for (size_t i = 0; i < b->ndeps; i++)
    if (reaches(a, b->deps[i], depth + 1)) return 1;
  return 0;
}

/* ---- initialisation, errors, device ---------------------------------------------------------- */
static pthread_t g_host_th;

EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return failf(E_INVALID_VALUE, "cuInit flags must be 0");
  pthread_mutex_lock(&G);
  if (!g_init) {
    const char* v = getenv("CUDASIM_DRIVER_VERSION");
    if (v && atoi(v) > 0) g_driver_version = atoi(v);
    const char* sm = getenv("CUDASIM_SM");
    if (sm && atoi(sm) > 0) g_sm = atoi(sm);
    g_poison = getenv("CUDASIM_POISON") && atoi(getenv("CUDASIM_POISON")) != 0;
    const char* seed = getenv("CUDASIM_SEED");
    if (seed && !strcmp(seed, "random")) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      g_seed = ((uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32) % 1000000007u + 1;
      fprintf(stderr, "cudasim: CUDASIM_SEED=%llu\n", (unsigned long long)g_seed);
    } else if (seed && *seed) {
      g_seed = strtoull(seed, NULL, 10);
    }
    const char* mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (mc && atoi(mc) > 0) g_nconns = atoi(mc) > 32 ? 32 : atoi(mc);
    const char* d = getenv("CUDASIM_DELAY_US");
    if (d && atoi(d) > 0) atomic_store(&g_delay_us, (unsigned)atoi(d));
    const char* nd = getenv("CUDASIM_DEVICES");
    if (nd && atoi(nd) > 0) g_ndev = atoi(nd) > SIM_MAXDEV ? SIM_MAXDEV : atoi(nd);
    int ok = 1;
    for (int i = 0; i < g_ndev; i++) {
      struct CUctx_st* c = &g_ctxs[i];
      c->magic = MAGIC_CTX;
      c->dev = i;
      c->legacy.magic = MAGIC_STREAM;
      c->legacy.legacy = 1;
      c->legacy.ctx = c;
      ok = ok && start_worker(&c->legacy);
      struct CUmemPoolHandle_st* p = &g_dpools[i];
      p->magic = MAGIC_POOL;
      p->dev = i;
      p->access[i] = 3;
      p->next = g_pools;
      g_pools = p;
    }
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    ok = ok && pthread_create(&g_host_th, &a, host_thread, NULL) == 0;
    pthread_attr_destroy(&a);
    if (!ok) RETURN(failf(E_UNKNOWN, "could not start the simulator's threads"));
    install_fault_handler();
    g_init = 1;
  }
  RETURN(SUCCESS);
}

EXPORT CUresult cuDriverGetVersion(int* v) {
  if (!v) return failf(E_INVALID_VALUE, "NULL version");
  *v = driver_version();
  return SUCCESS;
}

static const char* err_lookup(unsigned e, int name) {
  for (size_t i = 0; i < sizeof err_table / sizeof err_table[0]; i++)
    if (err_table[i].code == e) return name ? err_table[i].name : err_table[i].text;
  return NULL;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char** s) {
  if (!s) return E_INVALID_VALUE;
  *s = err_lookup(e, 1);
  return *s ? SUCCESS : E_INVALID_VALUE;
}

/* The driver's text, plus this thread's detail of its last failure with that code. */
EXPORT CUresult cuGetErrorString(CUresult e, const char** s) {
  if (!s) return E_INVALID_VALUE;
  const char* text = err_lookup(e, 0);
  if (!text) {
    *s = NULL;
    return E_INVALID_VALUE;
  }
  if (t_detail_code == e && t_detail[0]) {
    snprintf(t_errstr, sizeof t_errstr, "%s [cudasim: %s]", text, t_detail);
    *s = t_errstr;
  } else {
    *s = text;
  }
  return SUCCESS;
}

EXPORT const char* cudasim_last_detail(void) { return t_detail; }

#define NEED_INIT()                                                                                \
  do {                                                                                             \
    if (!g_init) return failf(E_NOT_INITIALIZED, "cuInit has not been called");                   \
    if (t_in_host_fn) return failf(E_NOT_PERMITTED, "a CUDA call from a host function is not permitted"); \
  } while (0)

EXPORT CUresult cuDeviceGetCount(int* n) {
  NEED_INIT();
  if (!n) return E_INVALID_VALUE;
  *n = g_ndev;
  return SUCCESS;
}

EXPORT CUresult cuDeviceGet(bgcu_device* d, int ordinal) {
  NEED_INIT();
  if (!d) return E_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_ndev) return failf(E_INVALID_DEVICE, "device %d: the simulator has %d (CUDASIM_DEVICES)", ordinal, g_ndev);
  *d = ordinal;
  return SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char* name, int len, bgcu_device d) {
  NEED_INIT();
  if (!name || len <= 0) return E_INVALID_VALUE;
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  if (g_ndev > 1) snprintf(name, (size_t)len, "cudasim H100 #%d (sm_%d)", (int)d, g_sm);
  else snprintf(name, (size_t)len, "cudasim H100 (sm_%d)", g_sm);
  return SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, bgcu_device d) {
  NEED_INIT();
  if (!bytes) return E_INVALID_VALUE;
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  *bytes = g_total;
  return SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int* pi, bgcu_enum attr, bgcu_device d) {
  NEED_INIT();
  if (!pi) return E_INVALID_VALUE;
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  int v;
  switch (attr) {
    case 1: v = 1024; break;           /* max threads per block */
    case 2: case 3: v = 1024; break;   /* max block x, y */
    case 4: v = 64; break;             /* max block z */
    case 5: v = 2147483647; break;     /* max grid x */
    case 6: case 7: v = 65535; break;  /* max grid y, z */
    case 8: v = 49152; break;          /* max shared per block */
    case 9: v = 65536; break;          /* total constant memory */
    case 10: v = 32; break;            /* warp size */
    case 12: v = 65536; break;         /* registers per block */
    case 13: v = 1980000; break;       /* clock rate kHz */
    case 15: v = 1; break;             /* gpu overlap */
    case 16: v = 132; break;           /* multiprocessors */
    case 17: v = 0; break;             /* kernel exec timeout */
    case 18: v = 0; break;             /* integrated */
    case 19: v = 1; break;             /* can map host memory */
    case 20: v = 0; break;             /* compute mode default */
    case 31: v = 1; break;             /* concurrent kernels */
    case 32: v = 0; break;             /* ECC */
    case 33: v = 0x1b; break;          /* PCI bus */
    case 39: v = 2048; break;          /* max threads per SM */
    case 41: v = 1; break;             /* unified addressing */
    case 75: v = g_sm / 10; break;
    case 76: v = g_sm % 10; break;
    case 81: v = 233472; break;        /* max shared per multiprocessor */
    case 82: v = 65536; break;         /* registers per multiprocessor */
    case 83: v = 1; break;             /* managed memory */
    case 97: v = 232448; break;        /* max shared per block, opt-in */
    case 115: v = 1; break;            /* memory pools supported */
    case 123: v = 1; break;            /* stream wait value NOR */
    default: v = 0; break;
  }
  *pi = v;
  return SUCCESS;
}

/* ---- contexts ------------------------------------------------------------------------------ */
EXPORT CUresult cuDevicePrimaryCtxRetain(bgcu_context* pctx, bgcu_device d) {
  NEED_INIT();
  if (!pctx) return E_INVALID_VALUE;
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  pthread_mutex_lock(&G);
  g_ctxs[d].refs++;
  *pctx = &g_ctxs[d];
  RETURN(SUCCESS);
}

static void reset_context_locked(struct CUctx_st* c) {
  wait_all_ctx(c);
  c->sticky = 0;
  c->sticky_msg[0] = 0;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(bgcu_device d) {
  NEED_INIT();
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  pthread_mutex_lock(&G);
  struct CUctx_st* c = &g_ctxs[d];
  if (c->refs <= 0) RETURN(failf(E_INVALID_CONTEXT, "the primary context is not retained"));
  if (--c->refs == 0) { /* destroyed: its sticky error and peer access go with it (queued work runs on) */
    c->sticky = 0;
    c->sticky_msg[0] = 0;
    memset(c->peer, 0, sizeof c->peer);
    for (int i = 0; i < g_ndev; i++) g_ctxs[i].peer[d] = 0;
  }
  RETURN(SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(bgcu_device d) {
  NEED_INIT();
  if (d < 0 || d >= g_ndev) return E_INVALID_DEVICE;
  pthread_mutex_lock(&G);
  reset_context_locked(&g_ctxs[d]);
  RETURN(SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(bgcu_context* pctx) {
  NEED_INIT();
  if (!pctx) return E_INVALID_VALUE;
  *pctx = t_ctx;
  return SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(bgcu_context ctx) {
  NEED_INIT();
  if (ctx && !is_ctx(ctx)) return failf(E_INVALID_CONTEXT, "not a context of the simulator");
  if (t_ctx_depth > 0) t_ctx_stack[t_ctx_depth - 1] = ctx;
  t_ctx = ctx;
  return SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(bgcu_context ctx) {
  NEED_INIT();
  if (!ctx || !is_ctx(ctx)) return failf(E_INVALID_CONTEXT, "not a context of the simulator");
  if (t_ctx_depth == (int)(sizeof t_ctx_stack / sizeof t_ctx_stack[0]))
    return failf(E_OUT_OF_MEMORY, "context stack full");
  t_ctx_stack[t_ctx_depth++] = t_ctx;
  t_ctx = ctx;
  return SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(bgcu_context* pctx) {
  NEED_INIT();
  if (!t_ctx) return failf(E_INVALID_CONTEXT, "no current context to pop");
  if (pctx) *pctx = t_ctx;
  t_ctx = t_ctx_depth > 0 ? t_ctx_stack[--t_ctx_depth] : NULL;
  return SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(bgcu_device* d) {
  NEED_INIT();
  if (!d) return E_INVALID_VALUE;
  if (!t_ctx) return E_INVALID_CONTEXT;
  *d = t_ctx->dev;
  return SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
  ENTER();
  if (any_capture()) {
    for (capture* c = g_caps; c; c = c->next) c->invalid = 1;
    RETURN(failf(E_CAP_UNSUPPORTED, "cuCtxSynchronize while a stream of the context is capturing"));
  }
  wait_all();
  pools_release_locked();
  RETURN(t_ctx->sticky ? failf(t_ctx->sticky, "%s", t_ctx->sticky_msg) : SUCCESS);
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(bgcu_enum* mode) {
  NEED_INIT();
  if (!mode || *mode > 2) return failf(E_INVALID_VALUE, "capture mode must be 0, 1 or 2");
  unsigned old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return SUCCESS;
}

/* ---- memory ---------------------------------------------------------------------------------- */
EXPORT CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total_b) {
  ENTER();
  if (!free_b || !total_b) RETURN(E_INVALID_VALUE);
  *total_b = g_total;
  *free_b = g_total - g_used;
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  ENTER();
  if (!dptr) RETURN(failf(E_INVALID_VALUE, "NULL dptr"));
  if (bytes == 0) RETURN(failf(E_INVALID_VALUE, "cuMemAlloc of 0 bytes"));
  CUresult rc = unsafe_call("cuMemAlloc");
  if (rc) RETURN(rc);
  size_t rounded = (bytes + 255) & ~(size_t)255;
  if (rounded < bytes || rounded > g_total - g_used) RETURN(failf(E_OUT_OF_MEMORY, "%zu bytes: the device has %zu free", bytes, g_total - g_used));
  void* p = aligned_alloc(256, rounded);
  if (!p || !add_region((uintptr_t)p, bytes, MEM_DEVICE, 0)) {
    free(p);
    RETURN(failf(E_OUT_OF_MEMORY, "%zu bytes: out of host memory", bytes));
  }
  g_used += rounded;
  /* cuMemAlloc does not clear memory: CUDASIM_POISON=1 fills it with 0xff bytes (NaN as float,
   * -1 as int) so code that reads before writing gives wrong results rather than lucky zeros */
  if (g_poison) memset(p, 0xff, bytes);
  *dptr = (CUdeviceptr)(uintptr_t)p;
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  ENTER();
  if (!p) RETURN(SUCCESS);
  CUresult rc = unsafe_call("cuMemFree");
  if (rc) RETURN(rc);
  region* r = find_region((uintptr_t)p);
  if (!r || r->kind != MEM_DEVICE || r->base != (uintptr_t)p)
    RETURN(failf(E_INVALID_VALUE, "cuMemFree(0x%llx): not the start of a live cuMemAlloc allocation", p));
  wait_all(); /* cuMemFree synchronises the device */
  r = find_region((uintptr_t)p);
  if (!r || r->base != (uintptr_t)p) RETURN(failf(E_INVALID_VALUE, "freed concurrently"));
  g_used -= (r->size + 255) & ~(size_t)255;
  remove_region(r);
  free((void*)(uintptr_t)p);
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  ENTER();
  if (!pp || bytes == 0 || (flags & ~7u)) RETURN(failf(E_INVALID_VALUE, "cuMemHostAlloc(%zu bytes, flags 0x%x)", bytes, flags));
  CUresult rc = unsafe_call("cuMemHostAlloc");
  if (rc) RETURN(rc);
  size_t rounded = (bytes + 4095) & ~(size_t)4095;
  void* p = aligned_alloc(4096, rounded);
  if (!p || !add_region((uintptr_t)p, bytes, MEM_PINNED, flags)) {
    free(p);
    RETURN(failf(E_OUT_OF_MEMORY, "%zu bytes of pinned memory", bytes));
  }
  *pp = p;
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pd, void* p, unsigned int flags) {
  ENTER();
  if (!pd || flags != 0) RETURN(failf(E_INVALID_VALUE, "flags must be 0"));
  region* r = find_region((uintptr_t)p);
  if (!r || r->kind == MEM_DEVICE || r->kind == MEM_POOL) RETURN(failf(E_INVALID_VALUE, "%p is not pinned host memory", p));
  *pd = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemFreeHost(void* p) {
  ENTER();
  CUresult rc = unsafe_call("cuMemFreeHost");
  if (rc) RETURN(rc);
  region* r = find_region((uintptr_t)p);
  if (!r || r->kind != MEM_PINNED || r->base != (uintptr_t)p)
    RETURN(failf(E_INVALID_VALUE, "cuMemFreeHost(%p): not a cuMemHostAlloc allocation", p));
  wait_all(); /* cuMemFreeHost synchronises the device */
  r = find_region((uintptr_t)p);
  if (!r || r->base != (uintptr_t)p) RETURN(failf(E_INVALID_VALUE, "freed concurrently"));
  remove_region(r);
  free(p);
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  ENTER();
  if (!p || bytes == 0 || (flags & ~0xfu)) RETURN(failf(E_INVALID_VALUE, "cuMemHostRegister(%p, %zu, 0x%x)", p, bytes, flags));
  CUresult rc = unsafe_call("cuMemHostRegister");
  if (rc) RETURN(rc);
  for (size_t i = 0; i < g_nregions; i++)
    if ((uintptr_t)p < g_regions[i].base + g_regions[i].size && g_regions[i].base < (uintptr_t)p + bytes)
      RETURN(failf(712, "range overlaps a registered or allocated range"));
  if (!add_region((uintptr_t)p, bytes, MEM_REGISTERED, flags)) RETURN(E_OUT_OF_MEMORY);
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemHostUnregister(void* p) {
  ENTER();
  CUresult rc = unsafe_call("cuMemHostUnregister");
  if (rc) RETURN(rc);
  region* r = find_region((uintptr_t)p);
  if (!r || r->kind != MEM_REGISTERED || r->base != (uintptr_t)p) RETURN(failf(713, "%p was not registered", p));
  wait_all();
  remove_region(r);
  RETURN(SUCCESS);
}

/* ---- copies and memsets ------------------------------------------------------------------------ */
static CUresult check_dev(CUdeviceptr p, size_t n, const char* call, const char* which) {
  if (!device_range(p, n))
    return failf(E_INVALID_VALUE, "%s: %s 0x%llx..+%zu is not inside one device allocation or pinned host allocation", call, which, p, n);
  return SUCCESS;
}

/* Queue a copy on s (G held); the stream is not capturing. stage: copy the source now. */
static CUresult queue_copy(struct CUstream_st* s, void* dst, const void* src, size_t n, int stage, uint64_t* seq) {
  op* o = new_op(OP_COPY);
  if (!o) return failf(E_OUT_OF_MEMORY, "out of host memory");
  if (stage) {
    o->owned = malloc(n);
    if (!o->owned) {
      free(o);
      return failf(E_OUT_OF_MEMORY, "out of host memory staging %zu bytes", n);
    }
    memcpy(o->owned, src, n);
    src = o->owned;
  }
  o->dst = dst;
  o->src = src;
  o->n = n;
  uint64_t q = enqueue(s, o);
  if (seq) *seq = q;
  return SUCCESS;
}

static CUresult queue_nop_and_wait(struct CUstream_st* s) {
  op* o = new_op(OP_NOP);
  if (!o) return failf(E_OUT_OF_MEMORY, "out of host memory");
  wait_seq(s, enqueue(s, o));
  return SUCCESS;
}

/* The synchronous copies: all on the legacy stream. */
static CUresult sync_copy(int kind, void* dst, const void* src, size_t n, const char* call) {
  CUresult rc = legacy_use(call);
  if (!rc) rc = unsafe_call(call);
  if (rc) return rc;
  uint64_t seq = 0;
  if (kind == 0) { /* HtoD */
    if (is_pinned_host(src)) {
      rc = queue_copy(&t_ctx->legacy, dst, src, n, 0, &seq);
      if (!rc) wait_seq(&t_ctx->legacy, seq);
    } else {
      /* Pageable: a stream sync, then the bytes are staged and the call returns before the DMA. */
      rc = queue_nop_and_wait(&t_ctx->legacy);
      if (!rc) rc = queue_copy(&t_ctx->legacy, dst, src, n, 1, NULL);
    }
  } else if (kind == 1) { /* DtoH: returns once the copy has completed */
    rc = queue_copy(&t_ctx->legacy, dst, src, n, 0, &seq);
    if (!rc) wait_seq(&t_ctx->legacy, seq);
  } else { /* DtoD: no host-side synchronisation */
    rc = queue_copy(&t_ctx->legacy, dst, src, n, 0, NULL);
  }
  if (!rc && t_ctx->sticky) rc = failf(t_ctx->sticky, "%s", t_ctx->sticky_msg);
  return rc;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(dst, n, "cuMemcpyHtoD", "dst");
  if (!rc && !src) rc = failf(E_INVALID_VALUE, "NULL src");
  if (!rc) rc = sync_copy(0, (void*)(uintptr_t)dst, src, n, "cuMemcpyHtoD");
  RETURN(rc);
}

EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(src, n, "cuMemcpyDtoH", "src");
  if (!rc && !dst) rc = failf(E_INVALID_VALUE, "NULL dst");
  if (!rc) rc = sync_copy(1, dst, (const void*)(uintptr_t)src, n, "cuMemcpyDtoH");
  RETURN(rc);
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(dst, n, "cuMemcpyDtoD", "dst");
  if (!rc) rc = check_dev(src, n, "cuMemcpyDtoD", "src");
  if (!rc) rc = sync_copy(2, (void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n, "cuMemcpyDtoD");
  RETURN(rc);
}

/* Common to the stream-ordered calls: legacy rules, capture state. */
static CUresult stream_use(struct CUstream_st* s, const char* call) {
  if (s->legacy) return legacy_use(call);
  return capture_ok(s);
}

static CUresult async_copy(bgcu_stream h, int kind, void* dst, const void* src, size_t n, const char* call) {
  CUresult rc;
  struct CUstream_st* s = stream_of(h, &rc);
  if (!s) return rc;
  if ((rc = stream_use(s, call))) return rc;
  if (s->cap) {
    gnode* nd = new_node(1);
    if (nd) {
      nd->dst = dst;
      nd->src = src;
      nd->n = n;
    }
    return capture_node(s, nd);
  }
  /* From pageable memory the bytes are staged at the call (the driver's staging buffer). */
  return queue_copy(s, dst, src, n, kind == 0 && !is_pinned_host(src), NULL);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, bgcu_stream s) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(dst, n, "cuMemcpyHtoDAsync", "dst");
  if (!rc && !src) rc = failf(E_INVALID_VALUE, "NULL src");
  if (!rc) rc = async_copy(s, 0, (void*)(uintptr_t)dst, src, n, "cuMemcpyHtoDAsync");
  RETURN(rc);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, bgcu_stream s) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(src, n, "cuMemcpyDtoHAsync", "src");
  if (!rc && !dst) rc = failf(E_INVALID_VALUE, "NULL dst");
  if (!rc) rc = async_copy(s, 1, dst, (const void*)(uintptr_t)src, n, "cuMemcpyDtoHAsync");
  RETURN(rc);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, bgcu_stream s) {
  ENTER();
  if (!n) RETURN(SUCCESS);
  CUresult rc = check_dev(dst, n, "cuMemcpyDtoDAsync", "dst");
  if (!rc) rc = check_dev(src, n, "cuMemcpyDtoDAsync", "src");
  if (!rc) rc = async_copy(s, 2, (void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n, "cuMemcpyDtoDAsync");
  RETURN(rc);
}

/* ---- several devices (CUDASIM_DEVICES=n): each context has its own legacy stream (whose implicit
 * ordering holds within the context), sticky error (a fault breaks the faulting kernel's device
 * only), default memory pool and synchronisation (cuCtxSynchronize and the implicitly
 * synchronising frees wait for their own context's streams). Memory is one address space (host
 * memory) whose allocations know their device; streams wait on events of any device. What a kernel
 * may touch: another device's cuMemAlloc memory only with peer access from its own context
 * (cuCtxEnablePeerAccess, per direction: 704 twice, 705 disabling what was not enabled, 101 for
 * its own device), another device's stream-ordered memory (pools and graph memory) only once the
 * pool grants its device access (cuMemPoolSetAccess; peer access does not extend to pools);
 * otherwise the kernel faults with 700 on its own context. Only pointers passed as arguments are
 * checked (an address inside any allocation). cuMemcpyPeerAsync copies in either case (the driver
 * stages without access). Not modelled: a stream or module of one context used from another
 * (accepted), and device memory totals (one 80 GB budget shared by all devices). */
EXPORT CUresult cuDeviceCanAccessPeer(int* can, bgcu_device dev, bgcu_device peer) {
  NEED_INIT();
  if (!can) return E_INVALID_VALUE;
  if (dev < 0 || dev >= g_ndev || peer < 0 || peer >= g_ndev)
    return failf(E_INVALID_DEVICE, "cuDeviceCanAccessPeer(%d, %d): the simulator has %d device(s)", dev, peer, g_ndev);
  *can = dev != peer; /* a device is not its own peer */
  return SUCCESS;
}

/* Peer access, per direction: the current context may then reach the peer's cuMemAlloc memory
 * from its kernels (not its pool memory: that takes cuMemPoolSetAccess). 704 when enabled
 * already, 705 when disabling what was not enabled, 101 for a context's own device. */
EXPORT CUresult cuCtxEnablePeerAccess(bgcu_context peer, unsigned int flags) {
  ENTER();
  if (flags) RETURN(failf(E_INVALID_VALUE, "cuCtxEnablePeerAccess: flags must be 0"));
  if (!peer || !is_ctx(peer) || peer->refs <= 0) RETURN(failf(E_INVALID_CONTEXT, "cuCtxEnablePeerAccess: not a live context of the simulator"));
  if (peer == t_ctx) RETURN(failf(E_INVALID_DEVICE, "cuCtxEnablePeerAccess: a device cannot be its own peer"));
  if (t_ctx->peer[peer->dev]) RETURN(failf(704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */, "cuCtxEnablePeerAccess: device %d has access to device %d already", t_ctx->dev, peer->dev));
  t_ctx->peer[peer->dev] = 1;
  RETURN(SUCCESS);
}

EXPORT CUresult cuCtxDisablePeerAccess(bgcu_context peer) {
  ENTER();
  if (!peer || !is_ctx(peer)) RETURN(failf(E_INVALID_CONTEXT, "cuCtxDisablePeerAccess: not a context of the simulator"));
  if (peer == t_ctx || !t_ctx->peer[peer->dev])
    RETURN(failf(705 /* CUDA_ERROR_PEER_ACCESS_NOT_ENABLED */, "cuCtxDisablePeerAccess: peer access was never enabled"));
  t_ctx->peer[peer->dev] = 0;
  RETURN(SUCCESS);
}

/* A copy between devices: the driver copies directly with peer access and stages through the host
 * without it; here memory is one address space, so both are the same copy on stream s. */
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, bgcu_context dst_ctx, CUdeviceptr src, bgcu_context src_ctx,
                                  size_t n, bgcu_stream s) {
  if (!dst_ctx || !src_ctx || !is_ctx(dst_ctx) || !is_ctx(src_ctx)) {
    NEED_INIT();
    return failf(E_INVALID_CONTEXT, "cuMemcpyPeerAsync: not a context of the simulator");
  }
  return cuMemcpyDtoDAsync_v2(dst, src, n, s);
}

static CUresult memset_common(CUdeviceptr dst, uint32_t v, unsigned esz, size_t count, bgcu_stream h, int sync, const char* call) {
  if (!count) return SUCCESS;
  if (dst % esz) return failf(E_INVALID_VALUE, "%s: 0x%llx is not %u-byte aligned", call, dst, esz);
  if (count > SIZE_MAX / esz) return failf(E_INVALID_VALUE, "%s: count overflows", call);
  CUresult rc = check_dev(dst, count * esz, call, "dst");
  if (rc) return rc;
  struct CUstream_st* s;
  if (sync) {
    s = &t_ctx->legacy;
    if ((rc = legacy_use(call)) || (rc = unsafe_call(call))) return rc;
  } else {
    s = stream_of(h, &rc);
    if (!s) return rc;
    if ((rc = stream_use(s, call))) return rc;
    if (s->cap) {
      gnode* nd = new_node(2);
      if (nd) {
        nd->dst = (void*)(uintptr_t)dst;
        nd->value = v;
        nd->esz = esz;
        nd->n = count;
      }
      return capture_node(s, nd);
    }
  }
  op* o = new_op(OP_SET);
  if (!o) return failf(E_OUT_OF_MEMORY, "out of host memory");
  o->dst = (void*)(uintptr_t)dst;
  o->value = v;
  o->esz = esz;
  o->n = count;
  uint64_t seq = enqueue(s, o);
  /* The synchronous memsets wait only when the target is pinned host memory. */
  if (sync && is_pinned_host((void*)(uintptr_t)dst)) wait_seq(s, seq);
  return SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { ENTER(); RETURN(memset_common(d, v, 1, n, NULL, 1, "cuMemsetD8")); }
EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { ENTER(); RETURN(memset_common(d, v, 2, n, NULL, 1, "cuMemsetD16")); }
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { ENTER(); RETURN(memset_common(d, v, 4, n, NULL, 1, "cuMemsetD32")); }
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, bgcu_stream s) { ENTER(); RETURN(memset_common(d, v, 1, n, s, 0, "cuMemsetD8Async")); }
EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, bgcu_stream s) { ENTER(); RETURN(memset_common(d, v, 2, n, s, 0, "cuMemsetD16Async")); }
EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, bgcu_stream s) { ENTER(); RETURN(memset_common(d, v, 4, n, s, 0, "cuMemsetD32Async")); }

/* ---- streams --------------------------------------------------------------------------------- */
EXPORT CUresult cuStreamCreateWithPriority(bgcu_stream* ps, unsigned int flags, int priority) {
  (void)priority; /* priorities are accepted (and clamped by the driver); not modelled */
  ENTER();
  if (!ps || (flags & ~1u)) RETURN(failf(E_INVALID_VALUE, "cuStreamCreate flags 0x%x", flags));
  struct CUstream_st* s = calloc(1, sizeof *s);
  if (!s) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  s->magic = MAGIC_STREAM;
  s->flags = flags;
  s->conn = (int)(g_streams_created++ % (unsigned)g_nconns);
  s->ctx = t_ctx;
  if (!start_worker(s)) {
    free(s);
    RETURN(failf(E_OUT_OF_MEMORY, "could not start a stream thread"));
  }
  s->next_all = g_streams;
  g_streams = s;
  *ps = s;
  RETURN(SUCCESS);
}

EXPORT CUresult cuStreamCreate(bgcu_stream* ps, unsigned int flags) { return cuStreamCreateWithPriority(ps, flags, 0); }

EXPORT CUresult cuStreamGetFlags(bgcu_stream h, unsigned int* flags) {
  ENTER();
  STREAM(s, h);
  if (!flags) RETURN(E_INVALID_VALUE);
  *flags = s->flags;
  RETURN(SUCCESS);
}

/* Pending work finishes; the stream's thread exits after it (the driver releases it likewise). */
EXPORT CUresult cuStreamDestroy_v2(bgcu_stream h) {
  pthread_mutex_lock(&G);
  CUresult rc = enter_locked();
  if (rc && rc != t_ctx->sticky) RETURN(rc);
  CUresult srcrc;
  struct CUstream_st* s = stream_of(h, &srcrc);
  if (!s) RETURN(srcrc);
  if (s->legacy) RETURN(failf(E_INVALID_HANDLE, "the legacy stream cannot be destroyed"));
  if (s->cap) {
    capture* c = s->cap;
    c->invalid = 1;
    if (c->origin == s) finish_capture(c);
    else leave_capture(s);
  }
  s->magic = MAGIC_DEAD;
  s->destroyed = 1;
  pthread_cond_broadcast(&GCV);
  RETURN(rc);
}

EXPORT CUresult cuStreamSynchronize(bgcu_stream h) {
  ENTER();
  STREAM(s, h);
  CUresult rc;
  if (s->legacy) {
    if ((rc = legacy_use("cuStreamSynchronize(legacy stream)"))) RETURN(rc);
    rc = queue_nop_and_wait(s); /* the legacy stream also waits for the blocking streams */
    if (rc) RETURN(rc);
  } else {
    if ((rc = capture_ok(s))) RETURN(rc);
    if (s->cap) {
      s->cap->invalid = 1;
      RETURN(failf(E_CAP_UNSUPPORTED, "cuStreamSynchronize of a capturing stream"));
    }
    wait_seq(s, s->submitted);
  }
  pools_release_locked();
  RETURN(t_ctx->sticky ? failf(t_ctx->sticky, "%s", t_ctx->sticky_msg) : SUCCESS);
}

EXPORT CUresult cuStreamQuery(bgcu_stream h) {
  ENTER();
  STREAM(s, h);
  CUresult rc;
  if (s->legacy) {
    if ((rc = legacy_use("cuStreamQuery(legacy stream)"))) RETURN(rc);
    for (struct CUstream_st* t = g_streams; t; t = t->next_all)
      if (!(t->flags & BGCU_STREAM_NON_BLOCKING) && t->completed < t->submitted) RETURN(E_NOT_READY);
  } else {
    if ((rc = capture_ok(s))) RETURN(rc);
    if (s->cap) {
      s->cap->invalid = 1;
      RETURN(failf(E_CAP_UNSUPPORTED, "cuStreamQuery of a capturing stream"));
    }
  }
  RETURN(s->completed < s->submitted ? E_NOT_READY : SUCCESS);
}

static struct CUevent_st* event_of(bgcu_event h, CUresult* rc) {
  *rc = SUCCESS;
  if (!h || h->magic != MAGIC_EVENT) {
    *rc = failf(E_INVALID_HANDLE, "not a live event");
    return NULL;
  }
  return h;
}

#define EVENT(var, h)                                                                              \
  CUresult var##_rc;                                                                               \
  struct CUevent_st* var = event_of(h, &var##_rc);                                                 \
  if (!var) RETURN(var##_rc)

static int live_capture(const struct CUevent_st* e) { return e->cap && !e->cap->ended; }

EXPORT CUresult cuStreamWaitEvent(bgcu_stream h, bgcu_event he, unsigned int flags) {
  ENTER();
  STREAM(s, h);
  EVENT(e, he);
  if (flags & ~1u) RETURN(failf(E_INVALID_VALUE, "cuStreamWaitEvent flags 0x%x", flags));
  CUresult rc;
  if (live_capture(e)) {
    capture* c = e->cap;
    if (s->legacy) {
      c->invalid = 1;
      RETURN(failf(E_CAP_IMPLICIT, "the legacy stream cannot join a capture"));
    }
    if (s->cap && s->cap != c) {
      s->cap->invalid = 1;
      c->invalid = 1;
      RETURN(failf(E_CAP_MERGE, "waiting on an event of another capture sequence"));
    }
    if (c->invalid) RETURN(failf(E_CAP_INVALIDATED, "the capture sequence was invalidated"));
    if (!s->cap) { /* fork: the stream joins the capture */
      s->cap = c;
      set_cdeps(s, e->cdeps, e->ncdeps);
    } else { /* join: the union of both dependency sets */
      for (size_t i = 0; i < e->ncdeps; i++) {
        int have = 0;
        for (size_t j = 0; j < s->ncdeps; j++) have |= s->cdeps[j] == e->cdeps[i];
        if (!have) {
          gnode** nd = realloc(s->cdeps, (s->ncdeps + 1) * sizeof *nd);
          if (!nd) RETURN(E_OUT_OF_MEMORY);
          s->cdeps = nd;
          s->capcdeps = s->ncdeps + 1;
          s->cdeps[s->ncdeps++] = e->cdeps[i];
        }
      }
    }
    RETURN(SUCCESS);
  }
  if (s->cap) {
    if ((rc = capture_ok(s))) RETURN(rc);
    if (!(flags & 1u)) {
      s->cap->invalid = 1;
      RETURN(failf(E_CAP_ISOLATION, "a capturing stream waits on an event recorded outside the capture"));
    }
    RETURN(capture_node(s, new_node(6)));
  }
  if (s->legacy && (rc = legacy_use("cuStreamWaitEvent(legacy stream)"))) RETURN(rc);
  if (!e->recorded || e->cap) RETURN(SUCCESS); /* nothing to wait for */
  note_seen(s, e->s, e->seq);
  op* o = new_op(OP_NOP);
  if (!o || !add_dep(o, e->s, e->seq)) {
    if (o) free_op(o);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  enqueue(s, o);
  RETURN(SUCCESS);
}

EXPORT CUresult cuLaunchHostFunc(bgcu_stream h, bgcu_host_fn fn, void* user) {
  ENTER();
  STREAM(s, h);
  if (!fn) RETURN(failf(E_INVALID_VALUE, "NULL host function"));
  CUresult rc = stream_use(s, "cuLaunchHostFunc");
  if (rc) RETURN(rc);
  if (s->cap) {
    gnode* nd = new_node(3);
    if (nd) {
      nd->fn = fn;
      nd->user = user;
    }
    RETURN(capture_node(s, nd));
  }
  op* o = new_op(OP_HOST);
  if (!o) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  o->fn = fn;
  o->user = user;
  enqueue(s, o);
  RETURN(SUCCESS);
}

static CUresult mem_op(bgcu_stream h, CUdeviceptr addr, uint32_t value, unsigned flags, int wait, const char* call) {
  CUresult rc;
  struct CUstream_st* s = stream_of(h, &rc);
  if (!s) return rc;
  if (addr % 4) return failf(E_INVALID_VALUE, "%s: address not 4-byte aligned", call);
  if ((rc = check_dev(addr, 4, call, "addr"))) return rc;
  if (wait ? (flags & ~(0x3u | (1u << 30))) : (flags & ~1u)) return failf(E_INVALID_VALUE, "%s: flags 0x%x", call, flags);
  if ((rc = stream_use(s, call))) return rc;
  if (s->cap) {
    gnode* nd = new_node(12);
    if (nd) {
      nd->memop = wait ? 1 : 2;
      nd->dst = (void*)(uintptr_t)addr;
      nd->value = value;
      nd->flags = flags;
    }
    return capture_node(s, nd);
  }
  op* o = new_op(wait ? OP_WAITVAL : OP_WRITEVAL);
  if (!o) return failf(E_OUT_OF_MEMORY, "out of host memory");
  o->dst = (void*)(uintptr_t)addr;
  o->value = value;
  o->flags = flags;
  enqueue(s, o);
  return SUCCESS;
}

EXPORT CUresult cuStreamWaitValue32_v2(bgcu_stream s, CUdeviceptr addr, uint32_t value, unsigned int flags) {
  ENTER();
  RETURN(mem_op(s, addr, value, flags, 1, "cuStreamWaitValue32"));
}
EXPORT CUresult cuStreamWriteValue32_v2(bgcu_stream s, CUdeviceptr addr, uint32_t value, unsigned int flags) {
  ENTER();
  RETURN(mem_op(s, addr, value, flags, 0, "cuStreamWriteValue32"));
}
EXPORT CUresult cuStreamWaitValue32(bgcu_stream s, CUdeviceptr addr, uint32_t value, unsigned int flags) { return cuStreamWaitValue32_v2(s, addr, value, flags); }
EXPORT CUresult cuStreamWriteValue32(bgcu_stream s, CUdeviceptr addr, uint32_t value, unsigned int flags) { return cuStreamWriteValue32_v2(s, addr, value, flags); }

/* ---- events ------------------------------------------------------------------------------------ */
EXPORT CUresult cuEventCreate(bgcu_event* pe, unsigned int flags) {
  ENTER();
  if (!pe || (flags & ~7u) || ((flags & 4u) && !(flags & 2u))) RETURN(failf(E_INVALID_VALUE, "cuEventCreate flags 0x%x", flags));
  struct CUevent_st* e = calloc(1, sizeof *e);
  if (!e) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  e->magic = MAGIC_EVENT;
  e->flags = flags;
  e->refs = 1;
  *pe = e;
  RETURN(SUCCESS);
}

EXPORT CUresult cuEventDestroy_v2(bgcu_event h) {
  pthread_mutex_lock(&G);
  CUresult rc = enter_locked();
  if (rc && rc != t_ctx->sticky) RETURN(rc);
  EVENT(e, h);
  e->magic = MAGIC_DEAD; /* a pending record still completes; the memory goes with the last ref */
  event_unref_locked(e);
  RETURN(rc);
}

EXPORT CUresult cuEventRecordWithFlags(bgcu_event he, bgcu_stream h, unsigned int flags) {
  ENTER();
  EVENT(e, he);
  STREAM(s, h);
  if (flags & ~1u) RETURN(failf(E_INVALID_VALUE, "cuEventRecordWithFlags flags 0x%x", flags));
  CUresult rc = stream_use(s, "cuEventRecord");
  if (rc) RETURN(rc);
  if (s->cap && (flags & 1u)) /* CU_EVENT_RECORD_EXTERNAL: an event-record node */
    RETURN(capture_node(s, new_node(7)));
  if (s->cap) {
    gnode** d = NULL;
    if (s->ncdeps) {
      d = malloc(s->ncdeps * sizeof *d);
      if (!d) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
      memcpy(d, s->cdeps, s->ncdeps * sizeof *d);
    }
    free(e->cdeps);
    e->cdeps = d;
    e->ncdeps = s->ncdeps;
    e->cap = s->cap;
    RETURN(SUCCESS);
  }
  op* o = new_op(OP_RECORD);
  if (!o) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  e->cap = NULL;
  e->recorded = 1;
  e->s = s;
  o->ev = e;
  o->gen = ++e->gen;
  e->refs++;
  e->seq = enqueue(s, o);
  RETURN(SUCCESS);
}

EXPORT CUresult cuEventRecord(bgcu_event e, bgcu_stream s) { return cuEventRecordWithFlags(e, s, 0); }

EXPORT CUresult cuEventQuery(bgcu_event he) {
  ENTER();
  EVENT(e, he);
  if (e->cap) RETURN(failf(E_CAPTURED_EVENT, "cuEventQuery of an event recorded in a capture"));
  if (!e->recorded || e->done_gen == e->gen) RETURN(SUCCESS);
  RETURN(E_NOT_READY);
}

EXPORT CUresult cuEventSynchronize(bgcu_event he) {
  ENTER();
  EVENT(e, he);
  if (e->cap) RETURN(failf(E_CAPTURED_EVENT, "cuEventSynchronize of an event recorded in a capture"));
  if (e->recorded) {
    e->refs++;
    uint64_t gen = e->gen;
    while (e->done_gen < gen && !(e->s ? e->s->ctx : t_ctx)->sticky) pthread_cond_wait(&GCV, &G);
    event_unref_locked(e);
  }
  pools_release_locked();
  RETURN(t_ctx->sticky ? failf(t_ctx->sticky, "%s", t_ctx->sticky_msg) : SUCCESS);
}

EXPORT CUresult cuEventElapsedTime_v2(float* ms, bgcu_event ha, bgcu_event hb) {
  ENTER();
  EVENT(a, ha);
  EVENT(b, hb);
  if (!ms) RETURN(failf(E_INVALID_VALUE, "NULL ms"));
  if ((a->flags | b->flags) & BGCU_EVENT_DISABLE_TIMING)
    RETURN(failf(E_INVALID_HANDLE, "an event was created with CU_EVENT_DISABLE_TIMING"));
  if ((!a->recorded && !a->cap) || (!b->recorded && !b->cap))
    RETURN(failf(E_INVALID_HANDLE, "an event was never recorded"));
  if (a->cap || b->cap) RETURN(failf(E_CAPTURED_EVENT, "an event was last recorded in a capture"));
  if (a->done_gen != a->gen || b->done_gen != b->gen) RETURN(E_NOT_READY);
  double d = (double)(b->t.tv_sec - a->t.tv_sec) * 1e3 + (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6;
  *ms = (float)d;
  RETURN(SUCCESS);
}

EXPORT CUresult cuEventElapsedTime(float* ms, bgcu_event a, bgcu_event b) { return cuEventElapsedTime_v2(ms, a, b); }

/* ---- modules: PTX and CUBIN images ------------------------------------------------------------- */
typedef struct jit_log { char* buf; size_t cap; } jit_log;

static void logf_(jit_log* l, const char* fmt, ...) {
  if (!l->buf || !l->cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->buf, l->cap, fmt, ap);
  va_end(ap);
}

static struct CUfunc_st* new_func(struct CUmod_st* m, const char* name, size_t len) {
  struct CUfunc_st* f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->name = strndup(name, len);
  if (!f->name) {
    free(f);
    return NULL;
  }
  f->magic = MAGIC_FUNC;
  f->mod = m;
  f->next = m->funcs;
  m->funcs = f;
  return f;
}

static int add_param(struct CUfunc_st* f, unsigned size, unsigned offset) {
  kparam_info* p = realloc(f->params, (f->nparams + 1) * sizeof *p);
  if (!p) return 0;
  f->params = p;
  f->params[f->nparams++] = (kparam_info){size, offset};
  return 1;
}

/* The most threads a block of f can have on sm_90: 1024, its .maxntid / __launch_bounds__, and
 * the register file: 64K 32-bit registers per block, handed out per warp in units of 256 (a
 * thread's count rounded up to 8), so 255 registers a thread allow 256 threads, 128 allow 512. */
static unsigned func_max_threads(const struct CUfunc_st* f) {
  unsigned per_warp = (f->regs + 7u) / 8u * 8u * 32u, t = per_warp ? 65536u / per_warp * 32u : 1024u;
  if (t > 1024u) t = 1024u;
  if (f->maxntid && f->maxntid < t) t = f->maxntid;
  return t;
}

static void finish_func(struct CUfunc_st* f) {
  if (!f->regs) f->regs = 32; /* an image that does not say: the simulator's old constant */
  unsigned max = 232448u > f->static_shared ? 232448u - f->static_shared : 0;
  f->max_dyn_shared = 49152u > f->static_shared ? 49152u - f->static_shared : 0;
  if (f->max_dyn_shared > max) f->max_dyn_shared = max;
}

static int ptx_isa_supported(void) { /* newest PTX ISA (x10) the simulated driver JITs */
  int v = driver_version(), major = v / 1000, minor = (v % 1000) / 10;
  if (major >= 13) return 90 + minor;
  if (major == 12) return minor <= 5 ? 80 + minor : minor == 6 ? 85 : 79 + minor;
  if (major == 11) return 70 + minor;
  return 60;
}

static const char* skip_ws(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '.';
}

/* Size of a PTX scalar type token (.u32 etc.), 0 if not one. */
static unsigned ptx_type_size(const char* t, size_t n) {
  if (n < 3 || t[0] != '.') return 0;
  char k = t[1];
  if (k != 'u' && k != 's' && k != 'b' && k != 'f') return 0;
  int bits = 0;
  for (size_t i = 2; i < n; i++) {
    if (t[i] < '0' || t[i] > '9') return 0;
    bits = bits * 10 + (t[i] - '0');
  }
  return bits == 8 || bits == 16 || bits == 32 || bits == 64 || bits == 128 ? (unsigned)bits / 8 : 0;
}

/* One ".param ..." declaration: its size and alignment. */
static int ptx_param(const char* p, const char* end, unsigned* size, unsigned* align) {
  unsigned elem = 0, al = 0;
  unsigned long count = 1;
  while (p < end) {
    p = skip_ws(p, end);
    const char* t = p;
    while (p < end && is_ident(*p)) p++;
    size_t n = (size_t)(p - t);
    if (n == 0) {
      if (p < end && *p == '[') {
        count = strtoul(p + 1, NULL, 10);
        break;
      }
      p++;
      continue;
    }
    if (n == 6 && !memcmp(t, ".align", 6)) {
      p = skip_ws(p, end);
      al = (unsigned)strtoul(p, NULL, 10);
      while (p < end && *p >= '0' && *p <= '9') p++;
      continue;
    }
    unsigned sz = ptx_type_size(t, n);
    if (sz && !elem) elem = sz;
  }
  if (!elem) return 0;
  *size = elem * (unsigned)count;
  *align = al ? al : elem;
  return 1;
}

/* Registers of a PTX kernel, estimated (the simulator runs no ptxas): its declared virtual
 * registers in 32-bit units (`.reg .f32 %f<12>;` is 12, a 64-bit type counts twice, predicates
 * not at all), at least 8 and at most 64 (ptxas reuses registers, and 64 still lets a block of
 * 1024 threads launch, so the estimate alone never refuses a launch the JIT might accept), and at
 * most .maxnreg. A CUBIN carries the real count. */
static unsigned ptx_reg_estimate(const char* body, const char* end, unsigned maxnreg) {
  unsigned long units = 0;
  for (const char* r = body; (r = strstr(r, ".reg")) && r < end; r += 4) {
    if (is_ident(r[4]) || (r > body && is_ident(r[-1]))) continue;
    const char* semi = memchr(r, ';', (size_t)(end - r));
    if (!semi) break;
    const char* ty = skip_ws(r + 4, semi);
    const char* te = ty;
    while (te < semi && is_ident(*te)) te++;
    if ((size_t)(te - ty) == 5 && !memcmp(ty, ".pred", 5)) continue;
    unsigned w = ptx_type_size(ty, (size_t)(te - ty)) >= 8 ? 2 : 1;
    const char* lt = memchr(te, '<', (size_t)(semi - te));
    unsigned long n = 1;
    if (lt) n = strtoul(lt + 1, NULL, 10);
    else
      for (const char* c = te; c < semi; c++) n += *c == ',';
    units += n * w;
  }
  unsigned est = units < 8 ? 8 : units > 64 ? 64 : (unsigned)units;
  return maxnreg && maxnreg < est ? maxnreg : est;
}

static CUresult load_ptx(struct CUmod_st* m, const char* src, size_t len, jit_log* log) {
  /* a copy without comments */
  char* s = malloc(len + 1);
  if (!s) return failf(E_OUT_OF_MEMORY, "out of host memory");
  for (size_t i = 0; i < len;) {
    if (src[i] == '/' && i + 1 < len && src[i + 1] == '/') {
      while (i < len && src[i] != '\n') s[i++] = ' ';
    } else if (src[i] == '/' && i + 1 < len && src[i + 1] == '*') {
      while (i < len && !(src[i] == '*' && i + 1 < len && src[i + 1] == '/')) s[i] = src[i] == '\n' ? '\n' : ' ', i++;
      if (i < len) s[i++] = ' ';
      if (i < len) s[i++] = ' ';
    } else {
      s[i] = src[i];
      i++;
    }
  }
  s[len] = 0;
  const char* end = s + len;
  CUresult rc = SUCCESS;
  const char* v = strstr(s, ".version");
  if (!v) {
    logf_(log, "ptxas application ptx input, line 1; fatal   : Missing .version directive at start of file");
    rc = failf(E_INVALID_PTX, "PTX without a .version directive");
    goto done;
  }
  int vmaj = 0, vmin = 0;
  if (sscanf(v + 8, " %d.%d", &vmaj, &vmin) != 2) {
    logf_(log, "ptxas application ptx input, line 1; fatal   : Parsing error near '.version'");
    rc = failf(E_INVALID_PTX, "malformed .version");
    goto done;
  }
  int isa = vmaj * 10 + vmin, max = ptx_isa_supported();
  if (isa > max) {
    logf_(log, "ptxas application ptx input, line 1; fatal   : Unsupported .version %d.%d; current version is '%d.%d'", vmaj, vmin, max / 10, max % 10);
    rc = failf(E_UNSUPPORTED_PTX, "PTX ISA %d.%d is newer than this driver (%d.%d) supports", vmaj, vmin, max / 10, max % 10);
    goto done;
  }
  const char* t = strstr(s, ".target");
  if (!t) {
    logf_(log, "ptxas application ptx input; fatal   : Missing .target directive");
    rc = failf(E_INVALID_PTX, "PTX without a .target directive");
    goto done;
  }
  int sm = 0;
  if (sscanf(t + 7, " sm_%d", &sm) != 1) {
    logf_(log, "ptxas application ptx input; fatal   : Parsing error near '.target'");
    rc = failf(E_INVALID_PTX, "malformed .target");
    goto done;
  }
  if (sm > g_sm) {
    logf_(log, "ptxas fatal   : SM version specified by .target (sm_%d) is higher than default SM version assumed (sm_%d)", sm, g_sm);
    rc = failf(E_INVALID_PTX, "PTX .target sm_%d is newer than the device (sm_%d)", sm, g_sm);
    goto done;
  }
  for (const char* p = s; (p = strstr(p, ".entry")) != NULL;) {
    if (p > s && is_ident(p[-1])) {
      p += 6;
      continue;
    }
    p = skip_ws(p + 6, end);
    const char* name = p;
    while (p < end && is_ident(*p)) p++;
    if (p == name) {
      logf_(log, "ptxas application ptx input; fatal   : Parsing error near '.entry'");
      rc = failf(E_INVALID_PTX, ".entry without a name");
      goto done;
    }
    struct CUfunc_st* f = new_func(m, name, (size_t)(p - name));
    if (!f) {
      rc = failf(E_OUT_OF_MEMORY, "out of host memory");
      goto done;
    }
    p = skip_ws(p, end);
    unsigned offset = 0;
    if (p < end && *p == '(') {
      const char* close = strchr(p, ')');
      if (!close) {
        logf_(log, "ptxas application ptx input; fatal   : Parsing error: unterminated parameter list of %s", f->name);
        rc = failf(E_INVALID_PTX, "unterminated parameter list");
        goto done;
      }
      const char* q = p + 1;
      while (q < close) {
        const char* comma = memchr(q, ',', (size_t)(close - q));
        const char* stop = comma ? comma : close;
        const char* par = strstr(q, ".param");
        if (par && par < stop) {
          unsigned size, align;
          if (!ptx_param(par + 6, stop, &size, &align)) {
            logf_(log, "ptxas application ptx input; fatal   : Parsing error in the parameters of %s", f->name);
            rc = failf(E_INVALID_PTX, "unparsable .param");
            goto done;
          }
          offset = (offset + align - 1) / align * align;
          if (!add_param(f, size, offset)) {
            rc = failf(E_OUT_OF_MEMORY, "out of host memory");
            goto done;
          }
          offset += size;
        }
        q = stop + 1;
      }
      p = close + 1;
    }
    /* performance directives up to the body, then the body's .shared declarations */
    const char* body = strchr(p, '{');
    if (!body) body = end;
    const char* mx = strstr(p, ".maxntid");
    if (!mx || mx > body) mx = strstr(p, ".reqntid");
    if (mx && mx < body) {
      unsigned a = 1, b = 1, c = 1;
      int k = sscanf(mx + 8, " %u , %u , %u", &a, &b, &c);
      if (k >= 1) f->maxntid = a * (k >= 2 ? b : 1) * (k >= 3 ? c : 1);
    }
    const char* mr = strstr(p, ".maxnreg");
    unsigned maxnreg = mr && mr < body ? (unsigned)strtoul(mr + 8, NULL, 10) : 0;
    if (body < end) {
      int depth = 0;
      const char* q = body;
      for (; q < end; q++) {
        if (*q == '{') depth++;
        else if (*q == '}' && --depth == 0) break;
      }
      for (const char* sh = body; (sh = strstr(sh, ".shared")) && sh < q; sh += 7) {
        const char* semi = memchr(sh, ';', (size_t)(q - sh));
        if (!semi) break;
        const char* br = memchr(sh, '[', (size_t)(semi - sh));
        const char* ty = sh + 7;
        unsigned elem = 0;
        while (ty < semi && !elem) {
          ty = skip_ws(ty, semi);
          const char* tk = ty;
          while (ty < semi && is_ident(*ty)) ty++;
          if (ty == tk) ty++;
          else elem = ptx_type_size(tk, (size_t)(ty - tk));
        }
        if (br && elem && br[1] != ']') f->static_shared += elem * (unsigned)strtoul(br + 1, NULL, 10);
        else if (!br && elem) f->static_shared += elem;
      }
      f->regs = ptx_reg_estimate(body, q, maxnreg);
      p = q;
    }
    finish_func(f);
  }
done:
  free(s);
  return rc;
}

/* CUBIN: an ELF64 with e_machine EM_CUDA (190). */
static CUresult load_cubin(struct CUmod_st* m, const unsigned char* img, size_t len) {
#define RD16(o) ((unsigned)img[o] | (unsigned)img[(o) + 1] << 8)
#define RD32(o) (RD16(o) | (uint32_t)RD16((o) + 2) << 16)
#define RD64(o) ((uint64_t)RD32(o) | (uint64_t)RD32((o) + 4) << 32)
  if (len < 64 || img[4] != 2 || img[5] != 1) return failf(E_INVALID_IMAGE, "not a 64-bit little-endian ELF");
  if (RD16(18) != 190) return failf(E_INVALID_IMAGE, "ELF e_machine %u is not EM_CUDA (190)", RD16(18));
  uint32_t flags = RD32(48);
  unsigned sm = (flags >> 8) & 0xff;
  if (sm < 30 || sm > 200) sm = flags & 0xff;
  if (sm / 10 != (unsigned)g_sm / 10 || sm % 10 > (unsigned)g_sm % 10)
    return failf(E_NO_BINARY, "the CUBIN is for sm_%u, the device is sm_%d", sm, g_sm);
  uint64_t shoff = RD64(40);
  unsigned shentsize = RD16(58), shnum = RD16(60), shstrndx = RD16(62);
  if (shentsize < 64 || shoff > len || (uint64_t)shnum * shentsize > len - shoff || shstrndx >= shnum)
    return failf(E_INVALID_IMAGE, "malformed ELF section table");
#define SH(i, f) (shoff + (uint64_t)(i) * shentsize + (f))
  uint64_t stroff = RD64(SH(shstrndx, 24)), strsize = RD64(SH(shstrndx, 32));
  if (stroff > len || strsize > len - stroff) return failf(E_INVALID_IMAGE, "malformed section names");
  unsigned api = 0;
  for (unsigned i = 0; i < shnum; i++) {
    uint32_t nameoff = RD32(SH(i, 0));
    if (nameoff >= strsize) return failf(E_INVALID_IMAGE, "malformed section name");
    const char* nm = (const char*)img + stroff + nameoff;
    size_t maxn = strsize - nameoff;
    if (!memchr(nm, 0, maxn)) return failf(E_INVALID_IMAGE, "unterminated section name");
    if (strncmp(nm, ".nv.info.", 9) != 0) continue;
    const char* kname = nm + 9;
    uint64_t off = RD64(SH(i, 24)), size = RD64(SH(i, 32));
    if (off > len || size > len - off) return failf(E_INVALID_IMAGE, "malformed .nv.info section");
    struct CUfunc_st* f = new_func(m, kname, strlen(kname));
    if (!f) return failf(E_OUT_OF_MEMORY, "out of host memory");
    /* EIATTR records: format byte, attribute byte, payload; every record is a multiple of 4
     * bytes (a 1-byte value is padded to 2: "02 4c 01 00") */
    kparam_info tmp[512];
    unsigned np = 0;
    for (uint64_t p = off; p + 2 <= off + size;) {
      unsigned fmt = img[p], attr = img[p + 1];
      uint64_t pl = p + 2, plen = 0;
      if (fmt >= 1 && fmt <= 3) plen = 2;
      else if (fmt == 4) {
        if (pl + 2 > off + size) break;
        plen = RD16(pl);
        pl += 2;
      } else break;
      if (pl + plen > off + size) break;
      if (fmt == 4 && attr == 0x17 && plen >= 12) { /* EIATTR_KPARAM_INFO */
        unsigned ordinal = RD16(pl + 4), poff = RD16(pl + 6), psize = (RD32(pl + 8) >> 18) & 0x3fff;
        if (ordinal < 512) {
          tmp[ordinal] = (kparam_info){psize, poff};
          if (ordinal + 1 > np) np = ordinal + 1;
        }
      } else if (fmt == 4 && (attr == 0x05 || attr == 0x10) && plen >= 12) { /* MAX_THREADS, REQNTID */
        f->maxntid = RD32(pl) * RD32(pl + 4) * RD32(pl + 8);
      } else if (fmt == 4 && attr == 0x37 && plen >= 4) { /* EIATTR_CUDA_API_VERSION: 130 = 13.0 */
        api = RD32(pl);
      }
      p = pl + plen;
    }
    for (unsigned k = 0; k < np; k++)
      if (!add_param(f, tmp[k].size, tmp[k].offset)) return failf(E_OUT_OF_MEMORY, "out of host memory");
  }
  /* The toolkit that wrote it (EIATTR_CUDA_API_VERSION, e.g. 130 for CUDA 13.0; CUDA 13's ELF
   * is also marked EI_OSABI 0x41, ABI version 8). NVIDIA's compatibility rules: a CUBIN runs on a
   * driver of its toolkit's major version or newer (minor version compatibility within a major:
   * a 12.8 CUBIN loads on a 12.4 driver); a newer major's CUBIN is outside the policy, and the
   * older driver, which cannot read its ELF, refuses it as an invalid image. */
  unsigned tk_major = api ? api / 10 : img[7] == 0x41 ? 13 : 0;
  if (tk_major && tk_major > (unsigned)(driver_version() / 1000))
    return failf(E_INVALID_IMAGE, "the CUBIN was built by CUDA %u.%u (NVRTC/ptxas %u), newer than this driver (CUDA %d.%d): a CUBIN needs a driver of its toolkit's major version or newer",
                 api ? api / 10 : tk_major, api ? api % 10 : 0, tk_major, driver_version() / 1000, driver_version() % 1000 / 10);
  /* Registers and local memory: EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11) records of
   * the module-wide .nv.info, {symbol index, value}, the symbol a kernel's in .symtab. */
  uint64_t symoff = 0, symsize = 0, symstr = 0, symstrsize = 0;
  for (unsigned i = 0; i < shnum; i++)
    if (RD32(SH(i, 4)) == 2) { /* SHT_SYMTAB */
      unsigned link = RD32(SH(i, 40));
      symoff = RD64(SH(i, 24));
      symsize = RD64(SH(i, 32));
      if (link < shnum) symstr = RD64(SH(link, 24)), symstrsize = RD64(SH(link, 32));
      if (symoff > len || symsize > len - symoff || symstr > len || symstrsize > len - symstr) symsize = 0;
    }
  for (unsigned i = 0; i < shnum && symsize; i++) {
    if (strcmp((const char*)img + stroff + RD32(SH(i, 0)), ".nv.info") != 0) continue;
    uint64_t off = RD64(SH(i, 24)), size = RD64(SH(i, 32));
    if (off > len || size > len - off) return failf(E_INVALID_IMAGE, "malformed .nv.info section");
    for (uint64_t p = off; p + 4 <= off + size;) {
      unsigned fmt = img[p], attr = img[p + 1];
      uint64_t plen = fmt == 4 ? RD16(p + 2) : 2, pl = fmt == 4 ? p + 4 : p + 2;
      if (fmt < 1 || fmt > 4 || pl + plen > off + size) break;
      if (fmt == 4 && (attr == 0x2f || attr == 0x11) && plen >= 8) {
        uint64_t sym = RD32(pl), so = sym * 24;
        if (so + 24 <= symsize) {
          uint32_t nameoff = RD32(symoff + so);
          const char* sname = nameoff < symstrsize ? (const char*)img + symstr + nameoff : NULL;
          if (sname && memchr(sname, 0, symstrsize - nameoff))
            for (struct CUfunc_st* f = m->funcs; f; f = f->next)
              if (!strcmp(f->name, sname)) {
                if (attr == 0x2f) f->regs = RD32(pl + 4);
                else f->local = RD32(pl + 4);
              }
        }
      }
      p = pl + plen;
    }
  }
  /* Static shared memory: the size of .nv.shared.<kernel>, less the 1 KiB the system reserves at
   * its start on sm_80 and newer (marked by a .nv.shared.reserved.* section). */
  unsigned reserved = 0;
  for (unsigned i = 0; i < shnum; i++)
    if (!strncmp((const char*)img + stroff + RD32(SH(i, 0)), ".nv.shared.reserved.", 20)) reserved = 1024;
  for (unsigned i = 0; i < shnum; i++) {
    const char* nm = (const char*)img + stroff + RD32(SH(i, 0));
    if (strncmp(nm, ".nv.shared.", 11) != 0) continue;
    unsigned size = (unsigned)RD64(SH(i, 32));
    for (struct CUfunc_st* f = m->funcs; f; f = f->next)
      if (!strcmp(f->name, nm + 11)) f->static_shared = size > reserved ? size - reserved : 0;
  }
  for (struct CUfunc_st* f = m->funcs; f; f = f->next) finish_func(f);
  return SUCCESS;
#undef SH
#undef RD16
#undef RD32
#undef RD64
}

static void module_free(struct CUmod_st* m) {
  for (struct CUfunc_st* f = m->funcs; f;) {
    struct CUfunc_st* next = f->next;
    f->magic = MAGIC_DEAD;
    free(f->name);
    free(f->params);
    free(f);
    f = next;
  }
  m->magic = MAGIC_DEAD;
  free(m);
}

EXPORT CUresult cuModuleLoadDataEx(bgcu_module* pm, const void* image, unsigned int nopts, bgcu_enum* opts, void** values) {
  /* A module load can wait for the device to drain (reported for cuModuleLoadDataEx and
   * cuLibraryLoadData): with a persistent kernel resident, that is forever. */
  while (atomic_load(&g_persistent_running) > 0) usleep(1000);
  ENTER();
  if (!pm || !image || (nopts && (!opts || !values))) RETURN(failf(E_INVALID_VALUE, "NULL argument"));
  jit_log log = {NULL, 0};
  for (unsigned i = 0; i < nopts; i++) {
    if (opts[i] == BGCU_JIT_ERROR_LOG_BUFFER) log.buf = values[i];
    else if (opts[i] == BGCU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) log.cap = (size_t)(uintptr_t)values[i];
  }
  if (log.buf && log.cap) log.buf[0] = 0;
  CUresult rc = unsafe_call("cuModuleLoadData");
  if (rc) RETURN(rc);
  struct CUmod_st* m = calloc(1, sizeof *m);
  if (!m) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  m->magic = MAGIC_MODULE;
  const unsigned char* img = image;
  if (!memcmp(img, "\x7f" "ELF", 4)) {
    /* an ELF's size comes from its section table: e_shoff + e_shnum * e_shentsize */
    uint64_t shoff, end;
    memcpy(&shoff, img + 40, 8);
    end = shoff + (uint64_t)(img[60] | img[61] << 8) * (img[58] | img[59] << 8);
    rc = load_cubin(m, img, (size_t)end);
  } else if (!memcmp(img, "\x50\xed\x55\xba", 4) || !memcmp(img, "\xb1\x43\x62\x46", 4)) {
    rc = failf(E_INVALID_IMAGE, "fatbin images are not modelled by cudasim");
  } else {
    size_t len = strlen((const char*)img);
    int text = len > 0;
    for (size_t i = 0; i < len && i < 4096 && text; i++)
      if ((img[i] < 0x20 && img[i] != '\n' && img[i] != '\r' && img[i] != '\t') || img[i] >= 0x7f) text = 0;
    rc = text ? load_ptx(m, (const char*)img, len, &log) : failf(E_INVALID_IMAGE, "neither PTX text nor a CUBIN");
  }
  for (unsigned i = 0; i < nopts; i++)
    if (opts[i] == BGCU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES && log.buf) values[i] = (void*)(uintptr_t)strlen(log.buf);
  if (rc) {
    module_free(m);
    RETURN(rc);
  }
  *pm = m;
  RETURN(SUCCESS);
}

EXPORT CUresult cuModuleLoadData(bgcu_module* pm, const void* image) { return cuModuleLoadDataEx(pm, image, 0, NULL, NULL); }

EXPORT CUresult cuModuleUnload(bgcu_module m) {
  ENTER();
  if (!m || m->magic != MAGIC_MODULE) RETURN(failf(E_INVALID_HANDLE, "not a live module"));
  CUresult rc = unsafe_call("cuModuleUnload");
  if (rc) RETURN(rc);
  wait_all(); /* cuModuleUnload synchronises the device */
  module_free(m);
  RETURN(SUCCESS);
}

EXPORT CUresult cuModuleGetFunction(bgcu_function* pf, bgcu_module m, const char* name) {
  ENTER();
  if (!pf || !name) RETURN(failf(E_INVALID_VALUE, "NULL argument"));
  if (!m || m->magic != MAGIC_MODULE) RETURN(failf(E_INVALID_HANDLE, "not a live module"));
  for (struct CUfunc_st* f = m->funcs; f; f = f->next)
    if (!strcmp(f->name, name)) {
      *pf = f;
      RETURN(SUCCESS);
    }
  RETURN(failf(E_NOT_FOUND, "no kernel named %s in the module's image", name));
}

#define FUNC(f)                                                                                    \
  if (!(f) || (f)->magic != MAGIC_FUNC) RETURN(failf(E_INVALID_HANDLE, "not a live function"))

EXPORT CUresult cuFuncGetAttribute(int* pi, bgcu_enum attr, bgcu_function f) {
  ENTER();
  if (!pi) RETURN(E_INVALID_VALUE);
  FUNC(f);
  switch (attr) {
    case 0: *pi = (int)func_max_threads(f); break;
    case 1: *pi = (int)f->static_shared; break;
    case 2: *pi = 0; break;
    case 3: *pi = (int)f->local; break;
    case 4: *pi = (int)f->regs; break;
    case 5: case 6: *pi = g_sm; break;
    case 7: *pi = 0; break;
    case 8: *pi = (int)f->max_dyn_shared; break;
    case 9: *pi = -1; break;
    default: RETURN(failf(E_INVALID_VALUE, "function attribute %u", attr));
  }
  RETURN(SUCCESS);
}

EXPORT CUresult cuFuncSetAttribute(bgcu_function f, bgcu_enum attr, int value) {
  ENTER();
  FUNC(f);
  if (attr == 8) { /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    if (value < 0 || (unsigned)value + f->static_shared > 232448u)
      RETURN(failf(E_INVALID_VALUE, "dynamic shared memory %d + static %u exceeds the opt-in limit 232448", value, f->static_shared));
    f->max_dyn_shared = (unsigned)value;
    RETURN(SUCCESS);
  }
  if (attr == 9) RETURN(SUCCESS); /* preferred carveout: accepted */
  RETURN(failf(E_INVALID_VALUE, "function attribute %u cannot be set", attr));
}

/* ---- launches ------------------------------------------------------------------------------ */
static unsigned slot_count(const struct CUfunc_st* f, unsigned* first, unsigned i) {
  unsigned at = 0;
  for (unsigned k = 0; k < i; k++) at += f->params[k].size > 8 ? (f->params[k].size + 7) / 8 : 1;
  if (first) *first = at;
  return at;
}

/* kernelParams / extra → the host twin's 8-byte slots (each parameter zero-extended). */
static CUresult pack_args(struct CUfunc_st* f, void** params, void** extra, kparams* k) {
  unsigned n = slot_count(f, NULL, f->nparams);
  uint64_t* slots = calloc(n ? n : 1, 8);
  if (!slots) return failf(E_OUT_OF_MEMORY, "out of host memory");
  const unsigned char* buf = NULL;
  size_t bufsize = 0;
  if (params && extra) {
    free(slots);
    return failf(E_INVALID_VALUE, "both kernelParams and extra given");
  }
  if (extra) {
    for (size_t i = 0; extra[i] != NULL; i += 2) {
      uintptr_t key = (uintptr_t)extra[i];
      if (key == 1) buf = extra[i + 1];
      else if (key == 2 && extra[i + 1]) bufsize = *(size_t*)extra[i + 1];
      else {
        free(slots);
        return failf(E_INVALID_VALUE, "unknown extra key %lu", (unsigned long)key);
      }
    }
  }
  if (f->nparams && !params && !buf) {
    free(slots);
    return failf(E_INVALID_VALUE, "kernel %s takes %u parameters; none given", f->name, f->nparams);
  }
  for (unsigned i = 0; i < f->nparams; i++) {
    unsigned first;
    slot_count(f, &first, i);
    const void* src;
    if (params) {
      src = params[i];
    } else {
      if (f->params[i].offset + f->params[i].size > bufsize) {
        free(slots);
        return failf(E_INVALID_VALUE, "extra buffer of %zu bytes is too small for parameter %u", bufsize, i);
      }
      src = buf + f->params[i].offset;
    }
    if (!src) {
      free(slots);
      return failf(E_INVALID_VALUE, "kernelParams[%u] is NULL", i);
    }
    memcpy(&slots[first], src, f->params[i].size);
  }
  free(k->slots);
  k->slots = slots;
  k->nslots = n;
  k->f = f;
  return SUCCESS;
}

static CUresult check_launch(struct CUfunc_st* f, const unsigned g[3], const unsigned b[3], unsigned shared) {
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
    return failf(E_INVALID_VALUE, "a zero grid or block dimension");
  if (b[0] > 1024 || b[1] > 1024 || b[2] > 64 || (uint64_t)b[0] * b[1] * b[2] > 1024)
    return failf(E_INVALID_VALUE, "block %ux%ux%u exceeds 1024 threads or (1024, 1024, 64)", b[0], b[1], b[2]);
  if (g[0] > 2147483647u || g[1] > 65535u || g[2] > 65535u)
    return failf(E_INVALID_VALUE, "grid %ux%ux%u exceeds (2^31-1, 65535, 65535)", g[0], g[1], g[2]);
  if (f->maxntid && (uint64_t)b[0] * b[1] * b[2] > f->maxntid)
    return failf(E_OUT_OF_RESOURCES, "block of %llu threads exceeds %s's .maxntid %u", (unsigned long long)b[0] * b[1] * b[2], f->name, f->maxntid);
  if ((uint64_t)b[0] * b[1] * b[2] > func_max_threads(f))
    return failf(E_OUT_OF_RESOURCES, "block of %llu threads needs more registers than an SM has: %s uses %u a thread, so at most %u threads a block (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
                 (unsigned long long)b[0] * b[1] * b[2], f->name, f->regs, func_max_threads(f));
  if (shared > f->max_dyn_shared)
    return failf(E_INVALID_VALUE, "%u bytes of dynamic shared memory exceed %s's limit of %u (raise it with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))", shared, f->name, f->max_dyn_shared);
  if ((uint64_t)g[0] * g[1] * g[2] > 0xffffffffull)
    return failf(E_NOT_SUPPORTED, "cudasim runs at most 2^32-1 blocks per launch");
  if (!f->host && !(f->host = find_host_twin(f->name, &f->order)))
    return failf(E_NOT_FOUND, "kernel %s has no host twin: register one with cudasim_register_kernel or put a library exporting it under BUNGPU_SIM_KERNELS", f->name);
  return SUCCESS;
}

EXPORT CUresult cuLaunchKernel(bgcu_function f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, bgcu_stream h, void** params, void** extra) {
  ENTER();
  FUNC(f);
  STREAM(s, h);
  unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  CUresult rc = check_launch(f, g, b, shared);
  if (rc) RETURN(rc);
  if ((rc = stream_use(s, "cuLaunchKernel"))) RETURN(rc);
  kparams k;
  memset(&k, 0, sizeof k);
  if ((rc = pack_args(f, params, extra, &k))) RETURN(rc);
  memcpy(k.g, g, sizeof g);
  memcpy(k.b, b, sizeof b);
  k.shared = shared;
  k.order = launch_order();
  if (s->cap) {
    gnode* nd = new_node(0);
    void** kp = nd ? calloc(f->nparams ? f->nparams : 1, sizeof *kp) : NULL;
    if (!nd || !kp) {
      free(nd);
      free_kparams(&k);
      RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
    }
    nd->k = k;
    nd->kp = kp;
    for (unsigned i = 0; i < f->nparams; i++) {
      unsigned first;
      slot_count(f, &first, i);
      kp[i] = &nd->k.slots[first];
    }
    RETURN(capture_node(s, nd));
  }
  op* o = new_op(OP_KERNEL);
  if (!o) {
    free_kparams(&k);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  o->k = k;
  enqueue(s, o);
  RETURN(SUCCESS);
}

/* ---- capture and graphs ------------------------------------------------------------------- */
static struct CUgraph_st* graph_new(void) {
  struct CUgraph_st* g = calloc(1, sizeof *g);
  if (g) g->magic = MAGIC_GRAPH;
  return g;
}

static void node_free(gnode* n) {
  n->magic = MAGIC_DEAD;
  free(n->deps);
  free(n->kp);
  free_kparams(&n->k);
  free(n);
}

static void gmem_unref(struct gmem* m);
static void gmem_ref(struct gmem* m);

static void graph_free(struct CUgraph_st* g) {
  if (!g) return;
  if (g->exec) g->exec->graph = NULL;
  gmem_unref(g->gm);
  for (size_t i = 0; i < g->n; i++) node_free(g->nodes[i]);
  free(g->nodes);
  g->magic = MAGIC_DEAD;
  free(g);
}

EXPORT CUresult cuStreamBeginCapture_v2(bgcu_stream h, bgcu_enum mode) {
  ENTER();
  STREAM(s, h);
  if (mode > 2) RETURN(failf(E_INVALID_VALUE, "capture mode %u", mode));
  if (s->legacy) RETURN(failf(E_CAP_UNSUPPORTED, "capture cannot begin on the legacy stream"));
  if (s->cap) RETURN(failf(E_ILLEGAL_STATE, "the stream is already capturing"));
  capture* c = calloc(1, sizeof *c);
  struct CUgraph_st* g = graph_new();
  if (!c || !g) {
    free(c);
    free(g);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  c->id = ++g_capture_ids;
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->g = g;
  c->next = g_caps;
  g_caps = c;
  s->cap = c;
  s->ncdeps = 0;
  RETURN(SUCCESS);
}

EXPORT CUresult cuStreamEndCapture(bgcu_stream h, bgcu_graph* pg) {
  ENTER();
  STREAM(s, h);
  if (!pg) RETURN(failf(E_INVALID_VALUE, "NULL graph out-pointer"));
  *pg = NULL;
  capture* c = s->cap;
  if (!c) RETURN(failf(E_ILLEGAL_STATE, "the stream is not capturing"));
  if (c->origin != s) {
    c->invalid = 1;
    RETURN(failf(E_CAP_UNMATCHED, "the capture was not begun on this stream"));
  }
  if (c->mode != BGCU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
    c->invalid = 1;
    RETURN(failf(E_CAP_WRONG_THREAD, "a capture not begun in relaxed mode must end on the thread that began it"));
  }
  *pg = NULL;
  if (c->invalid) {
    finish_capture(c);
    graph_free(c->g);
    c->g = NULL;
    RETURN(failf(E_CAP_INVALIDATED, "the capture was invalidated by an earlier illegal call"));
  }
  for (struct CUstream_st* t = g_streams; t; t = t->next_all) {
    if (t->cap != c || t == s) continue;
    for (size_t i = 0; i < t->ncdeps; i++) {
      int joined = 0;
      for (size_t j = 0; j < s->ncdeps && !joined; j++) joined = reaches(t->cdeps[i], s->cdeps[j], 0);
      if (!joined) {
        finish_capture(c);
        graph_free(c->g);
        c->g = NULL;
        RETURN(failf(E_CAP_UNJOINED, "a stream forked into the capture was not joined back to the origin stream"));
      }
    }
  }
  *pg = c->g;
  c->g = NULL;
  finish_capture(c);
  RETURN(SUCCESS);
}

EXPORT CUresult cuStreamIsCapturing(bgcu_stream h, bgcu_enum* status) {
  ENTER();
  STREAM(s, h);
  if (!status) RETURN(E_INVALID_VALUE);
  if (s->legacy) {
    CUresult rc = legacy_use("cuStreamIsCapturing(legacy stream)");
    if (rc) RETURN(rc);
  }
  *status = !s->cap ? BGCU_STREAM_CAPTURE_STATUS_NONE : s->cap->invalid ? BGCU_STREAM_CAPTURE_STATUS_INVALIDATED : BGCU_STREAM_CAPTURE_STATUS_ACTIVE;
  RETURN(SUCCESS);
}

static CUresult capture_info(bgcu_stream h, bgcu_enum* status, uint64_t* id, bgcu_graph* g, const bgcu_graph_node** deps, const struct CUgraphEdgeData_st** edges, size_t* nd) {
  CUresult rc;
  struct CUstream_st* s = stream_of(h, &rc);
  if (!s) return rc;
  if (!status) return failf(E_INVALID_VALUE, "NULL status");
  if (s->legacy && (rc = legacy_use("cuStreamGetCaptureInfo(legacy stream)"))) return rc;
  if (!s->cap) {
    *status = BGCU_STREAM_CAPTURE_STATUS_NONE;
    return SUCCESS;
  }
  *status = s->cap->invalid ? BGCU_STREAM_CAPTURE_STATUS_INVALIDATED : BGCU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id) *id = s->cap->id;
  if (g) *g = s->cap->g;
  if (deps || nd) {
    if (s->ncdeps > s->ninfo || !s->info) {
      gnode** ni = realloc(s->info, (s->ncdeps ? s->ncdeps : 1) * sizeof *ni);
      if (!ni) return failf(E_OUT_OF_MEMORY, "out of host memory");
      s->info = ni;
    }
    if (s->ncdeps) memcpy(s->info, s->cdeps, s->ncdeps * sizeof *s->info);
    s->ninfo = s->ncdeps;
    if (deps) *deps = (const bgcu_graph_node*)s->info;
    if (nd) *nd = s->ncdeps;
  }
  if (edges) *edges = NULL; /* all edges are default */
  return SUCCESS;
}

EXPORT CUresult cuStreamGetCaptureInfo_v3(bgcu_stream h, bgcu_enum* status, uint64_t* id, bgcu_graph* g, const bgcu_graph_node** deps, const struct CUgraphEdgeData_st** edges, size_t* nd) {
  ENTER();
  RETURN(capture_info(h, status, id, g, deps, edges, nd));
}

EXPORT CUresult cuStreamGetCaptureInfo_v2(bgcu_stream h, bgcu_enum* status, uint64_t* id, bgcu_graph* g, const bgcu_graph_node** deps, size_t* nd) {
  ENTER();
  RETURN(capture_info(h, status, id, g, deps, NULL, nd));
}

#define GRAPH(g)                                                                                   \
  if (!(g) || (g)->magic != MAGIC_GRAPH) RETURN(failf(E_INVALID_HANDLE, "not a live graph"))
#define NODE(n)                                                                                    \
  if (!(n) || (n)->magic != MAGIC_NODE) RETURN(failf(E_INVALID_HANDLE, "not a live graph node"))
#define EXEC(x)                                                                                    \
  if (!(x) || (x)->magic != MAGIC_EXEC) RETURN(failf(E_INVALID_HANDLE, "not a live graph exec"))

EXPORT CUresult cuGraphCreate(bgcu_graph* pg, unsigned int flags) {
  ENTER();
  if (!pg || flags) RETURN(E_INVALID_VALUE);
  *pg = graph_new();
  RETURN(*pg ? SUCCESS : E_OUT_OF_MEMORY);
}

EXPORT CUresult cuGraphDestroy(bgcu_graph g) {
  ENTER();
  GRAPH(g);
  graph_free(g);
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphGetNodes(bgcu_graph g, bgcu_graph_node* nodes, size_t* n) {
  ENTER();
  GRAPH(g);
  if (!n) RETURN(E_INVALID_VALUE);
  if (nodes) {
    for (size_t i = 0; i < *n; i++) nodes[i] = i < g->n ? g->nodes[i] : NULL;
  }
  *n = g->n;
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphNodeGetType(bgcu_graph_node node, bgcu_enum* type) {
  ENTER();
  NODE(node);
  if (!type) RETURN(E_INVALID_VALUE);
  *type = (bgcu_enum)node->type;
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphKernelNodeGetParams_v2(bgcu_graph_node node, bgcu_kernel_node_params* p) {
  ENTER();
  NODE(node);
  if (!p) RETURN(E_INVALID_VALUE);
  if (node->type != 0) RETURN(failf(E_INVALID_VALUE, "not a kernel node"));
  memset(p, 0, sizeof *p);
  p->func = node->k.f;
  p->gridDimX = node->k.g[0];
  p->gridDimY = node->k.g[1];
  p->gridDimZ = node->k.g[2];
  p->blockDimX = node->k.b[0];
  p->blockDimY = node->k.b[1];
  p->blockDimZ = node->k.b[2];
  p->sharedMemBytes = node->k.shared;
  p->kernelParams = node->kp;
  p->ctx = t_ctx;
  RETURN(SUCCESS);
}

static void copy_node(gnode* dst, const gnode* src) {
  *dst = *src;
  dst->deps = NULL;
  dst->ndeps = 0;
  dst->kp = NULL;
  dst->k.slots = NULL;
  if (src->type == 0) {
    dst->k.slots = malloc((src->k.nslots ? src->k.nslots : 1) * 8);
    if (dst->k.slots) memcpy(dst->k.slots, src->k.slots, src->k.nslots * 8);
  }
}

EXPORT CUresult cuGraphInstantiateWithFlags(bgcu_graph_exec* px, bgcu_graph g, unsigned long long flags) {
  ENTER();
  GRAPH(g);
  if (!px || (flags & ~0xfull)) RETURN(failf(E_INVALID_VALUE, "instantiate flags 0x%llx", flags));
  if (g->mem_nodes && g->exec)
    RETURN(failf(E_NOT_SUPPORTED, "the graph has memory allocation or free nodes, and such a graph can have one executable graph at a time: destroy the first (cuGraphExecDestroy) before instantiating it again"));
  struct CUgraphExec_st* x = calloc(1, sizeof *x);
  enode* nodes = calloc(g->n ? g->n : 1, sizeof *nodes);
  size_t* indeg = calloc(g->n ? g->n : 1, sizeof *indeg);
  if (!x || !nodes || !indeg) {
    free(x);
    free(nodes);
    free(indeg);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  /* Kahn's algorithm, stable in insertion order */
  for (size_t i = 0; i < g->n; i++) g->nodes[i]->tag = i;
  for (size_t i = 0; i < g->n; i++) indeg[i] = g->nodes[i]->ndeps;
  size_t out = 0;
  char* done = calloc(g->n ? g->n : 1, 1);
  while (done && out < g->n) {
    size_t before = out;
    for (size_t i = 0; i < g->n; i++) {
      if (done[i] || indeg[i]) continue;
      done[i] = 1;
      nodes[out].orig = g->nodes[i];
      copy_node(&nodes[out].node, g->nodes[i]);
      out++;
      for (size_t j = 0; j < g->n; j++)
        for (size_t d = 0; d < g->nodes[j]->ndeps; d++)
          if (g->nodes[j]->deps[d] == g->nodes[i]) indeg[j]--;
    }
    if (out == before) break; /* a cycle */
  }
  free(done);
  free(indeg);
  if (out != g->n) {
    for (size_t i = 0; i < out; i++) free_kparams(&nodes[i].node.k);
    free(nodes);
    free(x);
    RETURN(failf(E_INVALID_VALUE, "the graph has a cycle"));
  }
  x->magic = MAGIC_EXEC;
  x->nodes = nodes;
  x->n = g->n;
  x->gm = g->gm;
  if (x->gm) gmem_ref(x->gm);
  x->flags = flags;
  if (g->mem_nodes) {
    x->graph = g;
    g->exec = x;
  }
  *px = x;
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphExecDestroy(bgcu_graph_exec x) {
  ENTER();
  EXEC(x);
  for (size_t i = 0; i < x->n; i++) free_kparams(&x->nodes[i].node.k);
  free(x->nodes);
  if (x->graph && x->graph->exec == x) x->graph->exec = NULL;
  gmem_unref(x->gm);
  x->magic = MAGIC_DEAD;
  free(x);
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphUpload(bgcu_graph_exec x, bgcu_stream h) {
  ENTER();
  EXEC(x);
  STREAM(s, h);
  CUresult rc = stream_use(s, "cuGraphUpload");
  RETURN(rc);
}

EXPORT CUresult cuGraphLaunch(bgcu_graph_exec x, bgcu_stream h) {
  ENTER();
  EXEC(x);
  STREAM(s, h);
  CUresult rc = stream_use(s, "cuGraphLaunch");
  if (rc) RETURN(rc);
  if (s->cap) RETURN(failf(E_CAP_UNSUPPORTED, "cudasim does not model child-graph nodes (a graph launch during capture)"));
  /* Graph allocations a launch made and nobody freed: another launch would allocate them again,
   * which the driver refuses unless the exec frees them itself (AUTO_FREE_ON_LAUNCH). */
  for (size_t i = 0; x->gm && i < x->gm->n; i++)
    if (!x->gm->v[i].freed && x->gm->v[i].live && !(x->flags & 1))
      RETURN(failf(E_INVALID_VALUE, "the graph's allocation at 0x%llx from an earlier launch was not freed: free it (cuMemFreeAsync) before relaunching, or instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH",
                   (unsigned long long)x->gm->v[i].addr));
  op* o = new_op(OP_GRAPH);
  enode* snap = calloc(x->n ? x->n : 1, sizeof *snap);
  if (!o || !snap) {
    free(o);
    free(snap);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  for (size_t i = 0; i < x->n; i++) {
    snap[i].orig = x->nodes[i].orig;
    copy_node(&snap[i].node, &x->nodes[i].node);
    snap[i].node.k.order = launch_order(); /* each replay's blocks in new orders */
  }
  o->nodes = snap;
  o->nn = x->n;
  if (x->last_s) add_dep(o, x->last_s, x->last_seq); /* launches of one exec do not overlap */
  for (size_t i = 0; x->gm && i < x->gm->n; i++)
    if (!x->gm->v[i].freed) x->gm->v[i].live = 1;
  x->last_seq = enqueue(s, o);
  x->last_s = s;
  RETURN(SUCCESS);
}

EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(bgcu_graph_exec x, bgcu_graph_node node, const bgcu_kernel_node_params* p) {
  ENTER();
  EXEC(x);
  if (!p) RETURN(E_INVALID_VALUE);
  enode* e = NULL;
  for (size_t i = 0; i < x->n && !e; i++)
    if (x->nodes[i].orig == node) e = &x->nodes[i];
  if (!e) RETURN(failf(E_INVALID_VALUE, "the node is not part of the graph this exec was instantiated from"));
  if (e->node.type != 0) RETURN(failf(E_INVALID_VALUE, "not a kernel node"));
  struct CUfunc_st* f = p->func;
  FUNC(f);
  unsigned g[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult rc = check_launch(f, g, b, p->sharedMemBytes);
  if (rc) RETURN(rc);
  kparams k;
  memset(&k, 0, sizeof k);
  if ((rc = pack_args(f, p->kernelParams, p->extra, &k))) RETURN(rc);
  memcpy(k.g, g, sizeof g);
  memcpy(k.b, b, sizeof b);
  k.shared = p->sharedMemBytes;
  free_kparams(&e->node.k);
  e->node.k = k;
  RETURN(SUCCESS);
}

/* ---- building a graph node by node -------------------------------------------------------------
 * cuGraphAdd{Kernel,Memcpy,Memset,EventRecord,EventWait}Node: the node joins the graph after
 * `deps` (each a node of that graph). Event nodes run as no-ops, as captured ones do. */
static CUresult add_node(bgcu_graph_node* out, struct CUgraph_st* g, const bgcu_graph_node* deps, size_t nd, gnode* n) {
  if (!n) return failf(E_OUT_OF_MEMORY, "out of host memory");
  if (nd && !deps) {
    free(n);
    return failf(E_INVALID_VALUE, "dependencies is NULL with a count of %zu", nd);
  }
  for (size_t i = 0; i < nd; i++) {
    int in = 0;
    for (size_t j = 0; j < g->n && !in; j++) in = g->nodes[j] == deps[i];
    if (!in) {
      free(n);
      return failf(E_INVALID_VALUE, "dependency %zu is not a node of this graph", i);
    }
  }
  if (nd) {
    n->deps = malloc(nd * sizeof *n->deps);
    if (!n->deps) {
      free(n);
      return failf(E_OUT_OF_MEMORY, "out of host memory");
    }
    memcpy(n->deps, deps, nd * sizeof *n->deps);
    n->ndeps = nd;
  }
  if (!graph_add(g, n)) {
    free(n->deps);
    free(n);
    return failf(E_OUT_OF_MEMORY, "out of host memory");
  }
  *out = n;
  return SUCCESS;
}

EXPORT CUresult cuGraphAddKernelNode_v2(bgcu_graph_node* out, bgcu_graph g, const bgcu_graph_node* deps, size_t nd, const bgcu_kernel_node_params* p) {
  ENTER();
  GRAPH(g);
  if (!out || !p) RETURN(E_INVALID_VALUE);
  struct CUfunc_st* f = p->func;
  FUNC(f);
  if (p->kern) RETURN(failf(E_NOT_SUPPORTED, "cudasim does not model CUkernel nodes"));
  unsigned gd[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult rc = check_launch(f, gd, b, p->sharedMemBytes);
  if (rc) RETURN(rc);
  kparams k;
  memset(&k, 0, sizeof k);
  if ((rc = pack_args(f, p->kernelParams, p->extra, &k))) RETURN(rc);
  memcpy(k.g, gd, sizeof gd);
  memcpy(k.b, b, sizeof b);
  k.shared = p->sharedMemBytes;
  gnode* n = new_node(0);
  void** kp = n ? calloc(f->nparams ? f->nparams : 1, sizeof *kp) : NULL;
  if (!n || !kp) {
    free(n);
    free_kparams(&k);
    RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  }
  n->k = k;
  n->kp = kp;
  for (unsigned i = 0; i < f->nparams; i++) {
    unsigned first;
    slot_count(f, &first, i);
    kp[i] = &n->k.slots[first];
  }
  rc = add_node(out, g, deps, nd, n);
  if (rc) {
    free(kp);
    free_kparams(&k);
  }
  RETURN(rc);
}

EXPORT CUresult cuGraphAddMemcpyNode(bgcu_graph_node* out, bgcu_graph g, const bgcu_graph_node* deps, size_t nd, const bgcu_memcpy3d* p, bgcu_context ctx) {
  ENTER();
  GRAPH(g);
  if (!out || !p) RETURN(E_INVALID_VALUE);
  if (ctx != t_ctx) RETURN(failf(E_INVALID_CONTEXT, "cuGraphAddMemcpyNode: not the current context"));
  if (p->srcXInBytes || p->srcY || p->srcZ || p->srcLOD || p->dstXInBytes || p->dstY || p->dstZ ||
      p->dstLOD || p->Height != 1 || p->Depth != 1 || p->srcArray || p->dstArray || p->reserved0 || p->reserved1)
    RETURN(failf(E_NOT_SUPPORTED, "cudasim models 1D memcpy nodes only (offsets 0, Height = Depth = 1, no arrays)"));
  if (!p->WidthInBytes) RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemcpyNode: WidthInBytes is 0"));
  /* cuMemcpy3D's rules for host and device memory: a row fits its pitch, the copy's rows its height */
  if (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes || p->srcHeight < p->Height || p->dstHeight < p->Height)
    RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemcpyNode: srcPitch %zu / dstPitch %zu below WidthInBytes %zu, or srcHeight %zu / dstHeight %zu below Height %zu",
                 p->srcPitch, p->dstPitch, p->WidthInBytes, p->srcHeight, p->dstHeight, p->Height));
  const void* src;
  void* dst;
  CUresult rc = SUCCESS;
  if (p->srcMemoryType == 1) src = p->srcHost;
  else if (p->srcMemoryType == 2) {
    src = (const void*)(uintptr_t)p->srcDevice;
    rc = check_dev(p->srcDevice, p->WidthInBytes, "cuGraphAddMemcpyNode", "src");
  } else RETURN(failf(E_NOT_SUPPORTED, "cudasim: memcpy node source memory type %u", p->srcMemoryType));
  if (rc) RETURN(rc);
  if (p->dstMemoryType == 1) dst = p->dstHost;
  else if (p->dstMemoryType == 2) {
    dst = (void*)(uintptr_t)p->dstDevice;
    rc = check_dev(p->dstDevice, p->WidthInBytes, "cuGraphAddMemcpyNode", "dst");
  } else RETURN(failf(E_NOT_SUPPORTED, "cudasim: memcpy node destination memory type %u", p->dstMemoryType));
  if (rc) RETURN(rc);
  if (!src || !dst) RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemcpyNode: NULL host pointer"));
  gnode* n = new_node(1);
  if (n) {
    n->dst = dst;
    n->src = src;
    n->n = p->WidthInBytes;
  }
  RETURN(add_node(out, g, deps, nd, n));
}

EXPORT CUresult cuGraphAddMemsetNode(bgcu_graph_node* out, bgcu_graph g, const bgcu_graph_node* deps, size_t nd, const bgcu_memset_params* p, bgcu_context ctx) {
  ENTER();
  GRAPH(g);
  if (!out || !p) RETURN(E_INVALID_VALUE);
  if (ctx != t_ctx) RETURN(failf(E_INVALID_CONTEXT, "cuGraphAddMemsetNode: not the current context"));
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
    RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemsetNode: elementSize %u", p->elementSize));
  if (p->height != 1) RETURN(failf(E_NOT_SUPPORTED, "cudasim models 1D memset nodes only (height 1)"));
  if (!p->width) RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemsetNode: width is 0"));
  if (p->dst % p->elementSize) RETURN(failf(E_INVALID_VALUE, "cuGraphAddMemsetNode: dst not aligned to %u", p->elementSize));
  CUresult rc = check_dev(p->dst, p->width * p->elementSize, "cuGraphAddMemsetNode", "dst");
  if (rc) RETURN(rc);
  gnode* n = new_node(2);
  if (n) {
    n->dst = (void*)(uintptr_t)p->dst;
    n->value = p->value;
    n->esz = p->elementSize;
    n->n = p->width;
  }
  RETURN(add_node(out, g, deps, nd, n));
}

EXPORT CUresult cuGraphAddEventRecordNode(bgcu_graph_node* out, bgcu_graph g, const bgcu_graph_node* deps, size_t nd, bgcu_event he) {
  ENTER();
  GRAPH(g);
  EVENT(e, he);
  (void)e;
  if (!out) RETURN(E_INVALID_VALUE);
  RETURN(add_node(out, g, deps, nd, new_node(7)));
}

EXPORT CUresult cuGraphAddEventWaitNode(bgcu_graph_node* out, bgcu_graph g, const bgcu_graph_node* deps, size_t nd, bgcu_event he) {
  ENTER();
  GRAPH(g);
  EVENT(e, he);
  (void)e;
  if (!out) RETURN(E_INVALID_VALUE);
  RETURN(add_node(out, g, deps, nd, new_node(6)));
}

/* ---- memory pools and stream-ordered allocation ------------------------------------------------ */
#define POOL(p)                                                                                    \
  if (!(p) || (p)->magic != MAGIC_POOL) RETURN(failf(E_INVALID_HANDLE, "not a live memory pool"))

EXPORT CUresult cuDeviceGetDefaultMemPool(bgcu_mempool* pool, bgcu_device d) {
  ENTER();
  if (!pool) RETURN(failf(E_INVALID_VALUE, "NULL pool out-pointer"));
  if (d < 0 || d >= g_ndev) RETURN(failf(E_INVALID_DEVICE, "device %d", d));
  *pool = &g_dpools[d];
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemPoolCreate(bgcu_mempool* pool, const bgcu_mempool_props* props) {
  ENTER();
  if (!pool || !props) RETURN(failf(E_INVALID_VALUE, "NULL pool or props"));
  if (props->allocType != BGCU_MEM_ALLOCATION_TYPE_PINNED)
    RETURN(failf(E_INVALID_VALUE, "allocType %u (must be CU_MEM_ALLOCATION_TYPE_PINNED)", props->allocType));
  if (props->location.type != BGCU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 || props->location.id >= g_ndev)
    RETURN(failf(E_INVALID_VALUE, "location (%u, %d): cudasim has devices 0 to %d", props->location.type, props->location.id, g_ndev - 1));
  if (props->handleTypes != BGCU_MEM_HANDLE_TYPE_NONE)
    RETURN(failf(E_NOT_SUPPORTED, "cudasim does not model exportable pools"));
  for (size_t i = 0; i < sizeof props->reserved; i++)
    if (props->reserved[i]) RETURN(failf(E_INVALID_VALUE, "reserved bytes of CUmemPoolProps must be 0"));
  struct CUmemPoolHandle_st* p = calloc(1, sizeof *p);
  if (!p) RETURN(failf(E_OUT_OF_MEMORY, "out of host memory"));
  p->magic = MAGIC_POOL;
  p->dev = props->location.id;
  p->access[p->dev] = 3;
  p->next = g_pools;
  g_pools = p;
  *pool = p;
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemPoolDestroy(bgcu_mempool p) {
  ENTER();
  POOL(p);
  if (is_default_pool(p)) RETURN(failf(E_INVALID_VALUE, "the device's default pool cannot be destroyed"));
  /* "If any pointers obtained from this pool haven't been freed or the pool has free operations
   * that haven't completed, the function returns immediately and the resources are released once
   * there are no more outstanding allocations." */
  p->magic = MAGIC_DEAD;
  p->dead = 1;
  p->threshold = 0;
  pool_shrink(p, 0);
  if (!p->live && !p->reserved) pool_unlink_free(p);
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemPoolSetAttribute(bgcu_mempool p, bgcu_enum attr, void* value) {
  ENTER();
  POOL(p);
  if (!value) RETURN(failf(E_INVALID_VALUE, "NULL value"));
  uint64_t v = *(uint64_t*)value;
  switch (attr) {
    case BGCU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = v; RETURN(SUCCESS);
    case BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (v) RETURN(failf(E_INVALID_VALUE, "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH can only be reset to 0"));
      p->reserved_high = p->reserved;
      RETURN(SUCCESS);
    case BGCU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (v) RETURN(failf(E_INVALID_VALUE, "CU_MEMPOOL_ATTR_USED_MEM_HIGH can only be reset to 0"));
      p->used_high = p->used;
      RETURN(SUCCESS);
    case BGCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case BGCU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      RETURN(failf(E_INVALID_VALUE, "attribute %u is read-only", attr));
    case 1: case 2: case 3:
      RETURN(failf(E_NOT_SUPPORTED, "cudasim does not model the reuse-policy attributes (%u)", attr));
    default: RETURN(failf(E_INVALID_VALUE, "unknown pool attribute %u", attr));
  }
}

EXPORT CUresult cuMemPoolGetAttribute(bgcu_mempool p, bgcu_enum attr, void* value) {
  ENTER();
  POOL(p);
  if (!value) RETURN(failf(E_INVALID_VALUE, "NULL value"));
  uint64_t* out = value;
  switch (attr) {
    case BGCU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out = p->threshold; break;
    case BGCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out = p->reserved; break;
    case BGCU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out = p->reserved_high; break;
    case BGCU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out = p->used; break;
    case BGCU_MEMPOOL_ATTR_USED_MEM_HIGH: *out = p->used_high; break;
    case 1: case 2: case 3: *(int*)value = 1; break; /* the reuse policies: all on */
    default: RETURN(failf(E_INVALID_VALUE, "unknown pool attribute %u", attr));
  }
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemPoolTrimTo(bgcu_mempool p, size_t keep) {
  ENTER();
  POOL(p);
  pool_shrink(p, keep);
  RETURN(SUCCESS);
}

/* cuMemPoolSetAccess / cuMemPoolGetAccess: which devices may touch a pool's memory (its own
 * always: read-write; others none until granted, whatever their peer access). */
typedef struct sim_location { bgcu_enum type; int id; } sim_location;

EXPORT CUresult cuMemPoolSetAccess(bgcu_mempool p, const bgcu_mem_access_desc* map, size_t count) {
  ENTER();
  POOL(p);
  if (!map && count) RETURN(failf(E_INVALID_VALUE, "cuMemPoolSetAccess: NULL map"));
  for (size_t i = 0; i < count; i++) {
    int id = map[i].location.id;
    if (map[i].location.type != BGCU_MEM_LOCATION_TYPE_DEVICE || id < 0 || id >= g_ndev)
      RETURN(failf(E_INVALID_DEVICE, "cuMemPoolSetAccess: location (%u, %d) is not a device", map[i].location.type, id));
    if (map[i].flags != 0 && map[i].flags != 1 && map[i].flags != 3)
      RETURN(failf(E_INVALID_VALUE, "cuMemPoolSetAccess: flags %u", map[i].flags));
    if (id == p->dev && map[i].flags != 3)
      RETURN(failf(E_INVALID_VALUE, "cuMemPoolSetAccess: a pool's own device keeps read-write access"));
  }
  for (size_t i = 0; i < count; i++) p->access[map[i].location.id] = (unsigned char)map[i].flags;
  RETURN(SUCCESS);
}

EXPORT CUresult cuMemPoolGetAccess(bgcu_enum* flags, bgcu_mempool p, const sim_location* loc) {
  ENTER();
  POOL(p);
  if (!flags || !loc) RETURN(failf(E_INVALID_VALUE, "NULL argument"));
  if (loc->type != BGCU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 || loc->id >= g_ndev)
    RETURN(failf(E_INVALID_DEVICE, "cuMemPoolGetAccess: location (%u, %d) is not a device", loc->type, loc->id));
  *flags = p->access[loc->id];
  RETURN(SUCCESS);
}

static CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, struct CUmemPoolHandle_st* p, bgcu_stream h, const char* call) {
  if (!dptr) return failf(E_INVALID_VALUE, "%s: NULL dptr", call);
  *dptr = 0;
  if (bytes == 0) return failf(E_INVALID_VALUE, "%s of 0 bytes", call);
  CUresult rc;
  struct CUstream_st* s = stream_of(h, &rc);
  if (!s) return rc;
  if ((rc = stream_use(s, call))) return rc;
  size_t size = (bytes + POOL_GRAIN - 1) & ~(size_t)(POOL_GRAIN - 1);
  if (size < bytes || size > g_total - g_used) return failf(E_OUT_OF_MEMORY, "%s: %zu bytes: the device has %zu free", call, bytes, g_total - g_used);
  if (s->cap) { /* a memory allocation node: the graph's memory, at a fixed address */
    struct CUgraph_st* g = s->cap->g;
    if (!g->gm) {
      if (!(g->gm = calloc(1, sizeof *g->gm))) return failf(E_OUT_OF_MEMORY, "out of host memory");
      g->gm->next_all = g_gmems;
      g_gmems = g->gm;
    }
    if (!g->gm->refs) g->gm->refs = 1;
    g->mem_nodes = 1;
    struct gmem* m = g->gm;
    if (m->n == m->cap) {
      size_t nc = m->cap ? 2 * m->cap : 8;
      struct gblock* v = realloc(m->v, nc * sizeof *v);
      if (!v) return failf(E_OUT_OF_MEMORY, "out of host memory");
      m->v = v;
      m->cap = nc;
    }
    void* mem = aligned_alloc(POOL_GRAIN, size);
    if (!mem || !add_region((uintptr_t)mem, bytes, MEM_POOL, 0)) {
      free(mem);
      return failf(E_OUT_OF_MEMORY, "%s: out of host memory", call);
    }
    g_regions[g_nregions - 1].dev = s->ctx->dev; /* graph memory: access as the device's default pool's */
    g_regions[g_nregions - 1].pool = &g_dpools[s->ctx->dev];
    g_used += size;
    m->v[m->n++] = (struct gblock){(uintptr_t)mem, size, 0, 0};
    gnode* nd = new_node(10);
    if (nd) {
      nd->dst = mem;
      nd->n = bytes;
    }
    if ((rc = capture_node(s, nd))) return rc;
    *dptr = (CUdeviceptr)(uintptr_t)mem;
    return SUCCESS;
  }
  pblock* best = NULL;
  for (pblock* b = g_pblocks; b; b = b->next)
    if (b->pool == p && !b->in_use && b->size >= size && (!best || b->size < best->size) && block_ready(b, s)) best = b;
  if (!best) {
    void* mem = aligned_alloc(POOL_GRAIN, size);
    best = calloc(1, sizeof *best);
    if (!mem || !best || !add_region((uintptr_t)mem, size, MEM_POOL, 0)) {
      free(mem);
      free(best);
      return failf(E_OUT_OF_MEMORY, "%s: out of host memory", call);
    }
    g_regions[g_nregions - 1].dev = p->dev;
    g_regions[g_nregions - 1].pool = p;
    if (g_poison) memset(mem, 0xff, size);
    g_used += size;
    best->addr = (uintptr_t)mem;
    best->size = size;
    best->pool = p;
    best->next = g_pblocks;
    g_pblocks = best;
    pool_note(p, (int64_t)size, 0);
  }
  best->in_use = 1;
  best->fs = NULL;
  p->live++;
  pool_note(p, 0, (int64_t)best->size);
  *dptr = (CUdeviceptr)best->addr;
  return SUCCESS;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, bgcu_stream h) {
  ENTER();
  struct CUstream_st* as = NULL;
  CUresult arc;
  if (!(as = stream_of(h, &arc))) RETURN(arc);
  RETURN(alloc_async(dptr, bytes, &g_dpools[as->ctx->dev], h, "cuMemAllocAsync"));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, bgcu_mempool p, bgcu_stream h) {
  ENTER();
  POOL(p);
  RETURN(alloc_async(dptr, bytes, p, h, "cuMemAllocFromPoolAsync"));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, bgcu_stream h) {
  ENTER();
  STREAM(s, h);
  CUresult rc = stream_use(s, "cuMemFreeAsync");
  if (rc) RETURN(rc);
  pblock* b = NULL;
  for (pblock* q = g_pblocks; q && !b; q = q->next)
    if (q->addr == (uintptr_t)dptr) b = q;
  if (s->cap) { /* a memory free node */
    struct gblock* gb = gmem_find(s->cap->g->gm, (uintptr_t)dptr);
    if (gb && gb->freed) RETURN(failf(E_INVALID_VALUE, "cuMemFreeAsync(0x%llx): freed twice in the graph", dptr));
    if (!gb && !(b && b->in_use))
      RETURN(failf(E_INVALID_VALUE, "cuMemFreeAsync(0x%llx): not a live stream-ordered allocation", dptr));
    if (gb) gb->freed = 1;
    s->cap->g->mem_nodes = 1;
    gnode* nd = new_node(11);
    if (nd) nd->dst = (void*)(uintptr_t)dptr;
    RETURN(capture_node(s, nd));
  }
  if (!b) /* a graph's allocation, freed after a launch made it */
    for (struct gmem* m = g_gmems; m; m = m->next_all) {
      struct gblock* gb = gmem_find(m, (uintptr_t)dptr);
      if (!gb) continue;
      if (!gb->live)
        RETURN(failf(E_INVALID_VALUE, "cuMemFreeAsync(0x%llx): a graph allocation that no launch has made since it was last freed", dptr));
      gb->live = 0;
      RETURN(SUCCESS);
    }
  if (!b || !b->in_use)
    RETURN(failf(E_INVALID_VALUE, "cuMemFreeAsync(0x%llx): not a live stream-ordered allocation%s", dptr,
                 b ? " (freed already)" : ""));
  block_free(b, s, s->submitted);
  RETURN(SUCCESS);
}

/* ---- interprocess handles (cuIpc*) --------------------------------------------------------------
 * Modelled as far as one process goes: the simulator's device memory is its own process's heap,
 * so nothing can be mapped into another process. A handle names the exporting process, the
 * allocation's base and a generation (so a handle of freed memory is recognised); opening it in
 * the exporting process is CUDA_ERROR_INVALID_CONTEXT, as on the driver; opening it in another
 * process is CUDA_ERROR_NOT_SUPPORTED (the simulator's gap); garbage is CUDA_ERROR_INVALID_VALUE.
 * cuIpcGetMemHandle needs the base of a live cuMemAlloc allocation, cuIpcGetEventHandle an event
 * created with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, cuIpcOpenMemHandle the flag
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (its documentation says it must be given). */
#define SIM_IPC_MAGIC 0x49504353u /* "SCPI" */
typedef struct sim_ipc {
  unsigned magic, kind; /* 1 memory, 2 event */
  int pid;
  unsigned reserved;
  uint64_t addr, size;
} sim_ipc;
_Static_assert(sizeof(sim_ipc) <= sizeof(bgcu_ipc_handle), "a simulated handle fits CU_IPC_HANDLE_SIZE");

static CUresult ipc_open(const bgcu_ipc_handle* h, unsigned kind, const char* fn) {
  sim_ipc s;
  memcpy(&s, h, sizeof s);
  if (s.magic != SIM_IPC_MAGIC || s.kind != kind) return failf(E_INVALID_VALUE, "%s: not an interprocess handle of the simulator", fn);
  if (s.pid == (int)getpid()) return failf(E_INVALID_CONTEXT, "%s: the handle was exported by this process", fn);
  return failf(E_NOT_SUPPORTED, "%s: the simulator's device memory is private to its process (a gap of the simulator)", fn);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  ENTER();
  region* r = find_region((uintptr_t)dptr);
  if (!r || r->kind != MEM_DEVICE) RETURN(failf(E_NOT_FOUND, "cuMemGetAddressRange(0x%llx): not in a cuMemAlloc allocation", dptr));
  if (base) *base = (CUdeviceptr)r->base;
  if (size) *size = r->size;
  RETURN(SUCCESS);
}

EXPORT CUresult cuIpcGetMemHandle(bgcu_ipc_handle* h, CUdeviceptr dptr) {
  ENTER();
  if (!h) RETURN(failf(E_INVALID_VALUE, "cuIpcGetMemHandle: NULL handle"));
  region* r = find_region((uintptr_t)dptr);
  if (!r || r->kind != MEM_DEVICE || r->base != (uintptr_t)dptr)
    RETURN(failf(E_INVALID_VALUE, "cuIpcGetMemHandle(0x%llx): not the base of a live cuMemAlloc allocation", dptr));
  sim_ipc s = {SIM_IPC_MAGIC, 1, (int)getpid(), 0, dptr, r->size};
  memset(h, 0, sizeof *h);
  memcpy(h, &s, sizeof s);
  RETURN(SUCCESS);
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, bgcu_ipc_handle h, unsigned int flags) {
  ENTER();
  if (!dptr || flags != 1u) RETURN(failf(E_INVALID_VALUE, "cuIpcOpenMemHandle: flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS"));
  RETURN(ipc_open(&h, 1, "cuIpcOpenMemHandle"));
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ENTER();
  RETURN(failf(E_INVALID_VALUE, "cuIpcCloseMemHandle(0x%llx): not a mapping cuIpcOpenMemHandle returned", dptr));
}

EXPORT CUresult cuIpcGetEventHandle(bgcu_ipc_handle* h, bgcu_event he) {
  ENTER();
  EVENT(e, he);
  if (!h) RETURN(failf(E_INVALID_VALUE, "cuIpcGetEventHandle: NULL handle"));
  if (!(e->flags & 4u)) RETURN(failf(E_INVALID_VALUE, "cuIpcGetEventHandle: the event was not created with CU_EVENT_INTERPROCESS"));
  sim_ipc s = {SIM_IPC_MAGIC, 2, (int)getpid(), 0, (uint64_t)(uintptr_t)e, 0};
  memset(h, 0, sizeof *h);
  memcpy(h, &s, sizeof s);
  RETURN(SUCCESS);
}

EXPORT CUresult cuIpcOpenEventHandle(bgcu_event* pe, bgcu_ipc_handle h) {
  ENTER();
  if (!pe) RETURN(failf(E_INVALID_VALUE, "cuIpcOpenEventHandle: NULL event"));
  RETURN(ipc_open(&h, 2, "cuIpcOpenEventHandle"));
}

/* ---- the check that every entry point the backend loads exists with its exact type ---------- */
#define SIM_CHECK(ret, name, params)                                                               \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), PFN_bg_##name), #name " has the wrong type");
#define SIM_CHECK_LEGACY(ret, name, params, real) SIM_CHECK(ret, name, params)
BGCU_DRIVER_REQUIRED(SIM_CHECK)
BGCU_DRIVER_OPTIONAL(SIM_CHECK)
BGCU_DRIVER_LEGACY(SIM_CHECK_LEGACY)

