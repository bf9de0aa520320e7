/*
 * cuda_api.h: the CUDA driver and NVRTC entry points the CUDA backend uses, declared by hand so
 * libbungpu builds without the CUDA toolkit and loads libcuda / libnvrtc with dlopen.
 *
 * Everything here is prefixed (bgcu_, BGCU_, BGNVRTC_, PFN_bg_) so that this header and the real
 * <cuda.h> / <nvrtc.h> can be included in one translation unit: shim/test/cuda_decls_check.c
 * does exactly that and proves, with _Static_assert, that
 *   - every PFN_bg_<symbol> below is type-compatible with the real declaration of <symbol>
 *     (the exported, versioned name: cuMemAlloc_v2, cuStreamGetCaptureInfo_v3, ...);
 *   - every constant below equals the real enumerator or #define of the same name;
 *   - every mirrored struct has the real size, field offsets and field types;
 *   - every handle type is the real one (same struct tag, so the very same C type).
 *
 * Conventions that make that proof possible:
 *   - Handles use the real struct tags (struct CUctx_st *, ...): the types are identical to
 *     cuda.h's, not merely pointer-sized.
 *   - C enums (CUresult, nvrtcResult, CUdevice_attribute, ...) are spelled `unsigned int`: GCC
 *     gives an enum without negative values the compatible type unsigned int, and that is what
 *     __builtin_types_compatible_p checks against. Same size and calling convention everywhere.
 *   - The lists are X-macros, so the backend's function table, its dlsym names and the check
 *     file are generated from one place and cannot drift apart.
 */
#ifndef BUNGPU_CUDA_API_H
#define BUNGPU_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- types ----------------------------------------------------------------------------------- */
typedef unsigned int bgcu_result;       /* CUresult (enum cudaError_enum) */
typedef unsigned int bgcu_enum;         /* any other C enum of the driver API */
typedef unsigned int bgnvrtc_result;    /* nvrtcResult */
typedef int bgcu_device;                /* CUdevice (CUdevice_v1 = int) */
typedef unsigned long long bgcu_deviceptr; /* CUdeviceptr (CUdeviceptr_v2 on 64-bit hosts) */

struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUkern_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphNode_st;
struct CUgraphExec_st;
struct CUgraphEdgeData_st;
struct CUarray_st;
struct CUmemPoolHandle_st;
struct _nvrtcProgram;
typedef struct CUctx_st* bgcu_context;
typedef struct CUmod_st* bgcu_module;
typedef struct CUfunc_st* bgcu_function;
typedef struct CUkern_st* bgcu_kernel;
typedef struct CUstream_st* bgcu_stream;
typedef struct CUevent_st* bgcu_event;
typedef struct CUgraph_st* bgcu_graph;
typedef struct CUgraphNode_st* bgcu_graph_node;
typedef struct CUgraphExec_st* bgcu_graph_exec;
typedef struct CUarray_st* bgcu_array;
typedef struct CUmemPoolHandle_st* bgcu_mempool;
typedef struct _nvrtcProgram* bgnvrtc_program;
typedef void (*bgcu_host_fn)(void* user); /* CUhostFn (CUDA_CB is empty off Windows) */

/* CUDA_KERNEL_NODE_PARAMS_v2 (= CUDA_KERNEL_NODE_PARAMS since CUDA 12.0). */
typedef struct bgcu_kernel_node_params {
  bgcu_function func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
  bgcu_kernel kern;
  bgcu_context ctx;
} bgcu_kernel_node_params;

/* The check file sets this to the real CUDA_KERNEL_NODE_PARAMS_v2, so the PFN comparison covers
 * every other parameter, and proves the layout of bgcu_kernel_node_params field by field. */
#ifndef BGCU_KNP
#define BGCU_KNP bgcu_kernel_node_params
#endif

/* CUDA_MEMCPY3D_v2 (= CUDA_MEMCPY3D): a graph's memcpy node. bungpu fills only the 1D fields. */
typedef struct bgcu_memcpy3d {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  bgcu_enum srcMemoryType;
  const void* srcHost;
  bgcu_deviceptr srcDevice;
  bgcu_array srcArray;
  void* reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  bgcu_enum dstMemoryType;
  void* dstHost;
  bgcu_deviceptr dstDevice;
  bgcu_array dstArray;
  void* reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} bgcu_memcpy3d;

/* CUDA_MEMSET_NODE_PARAMS_v1 (= CUDA_MEMSET_NODE_PARAMS): a graph's memset node. */
typedef struct bgcu_memset_params {
  bgcu_deviceptr dst;
  size_t pitch;
  unsigned int value;
  unsigned int elementSize;
  size_t width, height;
} bgcu_memset_params;

/* As BGCU_KNP: the check file sets these to the real structs. */
#ifndef BGCU_MEMCPY3D
#define BGCU_MEMCPY3D bgcu_memcpy3d
#endif
#ifndef BGCU_MEMSETP
#define BGCU_MEMSETP bgcu_memset_params
#endif

/* CUmemPoolProps_v1: a pool's properties (cuMemPoolCreate). bungpu sets the allocation type and
 * the location; everything after them must be zero. */
typedef struct bgcu_mempool_props {
  bgcu_enum allocType;   /* CUmemAllocationType */
  bgcu_enum handleTypes; /* CUmemAllocationHandleType */
  struct {
    bgcu_enum type; /* CUmemLocationType */
    int id;
  } location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} bgcu_mempool_props;
#ifndef BGCU_POOLPROPS
#define BGCU_POOLPROPS bgcu_mempool_props
#endif

/* CUmemAccessDesc_v1: a device's access to a pool's memory (cuMemPoolSetAccess). */
typedef struct bgcu_mem_access_desc {
  struct {
    bgcu_enum type; /* CUmemLocationType */
    int id;
  } location;
  bgcu_enum flags; /* CUmemAccess_flags */
} bgcu_mem_access_desc;
#ifndef BGCU_ACCESSDESC
#define BGCU_ACCESSDESC bgcu_mem_access_desc
#endif

/* CUipcMemHandle_v1 and CUipcEventHandle_v1: CU_IPC_HANDLE_SIZE opaque bytes, passed by value to
 * the open calls. The check file sets BGCU_IPCMEM / BGCU_IPCEVENT to the real structs. */
typedef struct bgcu_ipc_handle {
  char reserved[64];
} bgcu_ipc_handle;
#ifndef BGCU_IPCMEM
#define BGCU_IPCMEM bgcu_ipc_handle
#endif
#ifndef BGCU_IPCEVENT
#define BGCU_IPCEVENT bgcu_ipc_handle
#endif

/* ---- constants: X(real name, value); declared here as BG<real name> ---------------------------- */
#define BGCU_CONSTANTS(X)                                                                          \
  X(CUDA_SUCCESS, 0)                                                                               \
  X(CUDA_ERROR_NOT_READY, 600)                                                                     \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901)                                                    \
  X(CUDA_ERROR_NO_DEVICE, 100)                                                                     \
  X(CUDA_ERROR_INVALID_IMAGE, 200)                                                                 \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)                                                             \
  X(CUDA_ERROR_INVALID_PTX, 218)                                                                   \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)                                                       \
  X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1)                                                  \
  X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 2)                                                        \
  X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 3)                                                        \
  X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 4)                                                        \
  X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5)                                                         \
  X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 6)                                                         \
  X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 7)                                                         \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 8)                                            \
  X(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 10)                                                             \
  X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                                                  \
  X(CU_DEVICE_ATTRIBUTE_INTEGRATED, 18)                                                            \
  X(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 19)                                                   \
  X(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 31)                                                    \
  X(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 41)                                                    \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                                              \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                                              \
  X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 97)                                     \
  X(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 123)                                        \
  X(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0)                                                    \
  X(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 1)                                                        \
  X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)                                            \
  X(CU_STREAM_WAIT_VALUE_GEQ, 0)                                                                   \
  X(CU_STREAM_WAIT_VALUE_EQ, 1)                                                                    \
  X(CU_STREAM_WRITE_VALUE_DEFAULT, 0)                                                              \
  X(CU_STREAM_DEFAULT, 0)                                                                          \
  X(CU_STREAM_NON_BLOCKING, 1)                                                                     \
  X(CU_EVENT_DEFAULT, 0)                                                                           \
  X(CU_EVENT_BLOCKING_SYNC, 1)                                                                     \
  X(CU_EVENT_DISABLE_TIMING, 2)                                                                    \
  X(CU_EVENT_INTERPROCESS, 4)                                                                      \
  X(CU_IPC_HANDLE_SIZE, 64)                                                                        \
  X(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 1)                                                         \
  X(CU_STREAM_CAPTURE_MODE_GLOBAL, 0)                                                              \
  X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1)                                                        \
  X(CU_STREAM_CAPTURE_MODE_RELAXED, 2)                                                             \
  X(CU_STREAM_CAPTURE_STATUS_NONE, 0)                                                              \
  X(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1)                                                            \
  X(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)                                                       \
  X(CU_MEMHOSTALLOC_PORTABLE, 1)                                                                   \
  X(CU_MEMHOSTALLOC_DEVICEMAP, 2)                                                                  \
  X(CU_GRAPH_NODE_TYPE_KERNEL, 0)                                                                  \
  X(CU_GRAPH_NODE_TYPE_MEM_ALLOC, 10)                                                              \
  X(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, 1)                                            \
  X(CU_MEMORYTYPE_HOST, 1)                                                                         \
  X(CU_MEMORYTYPE_DEVICE, 2)                                                                       \
  X(CU_JIT_ERROR_LOG_BUFFER, 5)                                                                    \
  X(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 6)                                                         \
  X(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 115)                                               \
  X(CU_MEM_ALLOCATION_TYPE_PINNED, 1)                                                              \
  X(CU_MEM_HANDLE_TYPE_NONE, 0)                                                                    \
  X(CU_MEM_LOCATION_TYPE_DEVICE, 1)                                                                \
  X(CU_MEM_ACCESS_FLAGS_PROT_NONE, 0)                                                              \
  X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 3)                                                         \
  X(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 4)                                                          \
  X(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 5)                                                       \
  X(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 6)                                                          \
  X(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 7)                                                           \
  X(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 8)

#define BGNVRTC_CONSTANTS(X)                                                                       \
  X(NVRTC_SUCCESS, 0)                                                                              \
  X(NVRTC_ERROR_OUT_OF_MEMORY, 1)                                                                  \
  X(NVRTC_ERROR_INVALID_INPUT, 3)                                                                  \
  X(NVRTC_ERROR_INVALID_PROGRAM, 4)                                                                \
  X(NVRTC_ERROR_INVALID_OPTION, 5)                                                                 \
  X(NVRTC_ERROR_COMPILATION, 6)                                                                    \
  X(NVRTC_ERROR_BUILTIN_OPERATION_FAILURE, 7)

#define BGCU_DECLARE_CONSTANT(name, value) BG##name = (value),
enum { BGCU_CONSTANTS(BGCU_DECLARE_CONSTANT) BGNVRTC_CONSTANTS(BGCU_DECLARE_CONSTANT) };
#undef BGCU_DECLARE_CONSTANT

/* ---- driver entry points: X(return type, exported symbol, parameter list) --------------------
 * Required: the backend reports unavailable when one is missing. All exist since CUDA 11.4. */
#define BGCU_DRIVER_REQUIRED(X)                                                                    \
  X(bgcu_result, cuInit, (unsigned int flags))                                                     \
  X(bgcu_result, cuDriverGetVersion, (int* version))                                               \
  X(bgcu_result, cuGetErrorName, (bgcu_result error, const char** str))                           \
  X(bgcu_result, cuGetErrorString, (bgcu_result error, const char** str))                         \
  X(bgcu_result, cuDeviceGetCount, (int* count))                                                   \
  X(bgcu_result, cuDeviceGet, (bgcu_device * device, int ordinal))                                 \
  X(bgcu_result, cuDeviceGetName, (char* name, int len, bgcu_device dev))                          \
  X(bgcu_result, cuDeviceTotalMem_v2, (size_t * bytes, bgcu_device dev))                           \
  X(bgcu_result, cuDeviceGetAttribute, (int* pi, bgcu_enum attrib, bgcu_device dev))               \
  X(bgcu_result, cuDevicePrimaryCtxRetain, (bgcu_context * pctx, bgcu_device dev))                 \
  X(bgcu_result, cuDevicePrimaryCtxRelease_v2, (bgcu_device dev))                                  \
  X(bgcu_result, cuCtxGetCurrent, (bgcu_context * pctx))                                           \
  X(bgcu_result, cuCtxSetCurrent, (bgcu_context ctx))                                              \
  X(bgcu_result, cuCtxSynchronize, (void))                                                         \
  X(bgcu_result, cuMemGetInfo_v2, (size_t * free_b, size_t * total_b))                             \
  X(bgcu_result, cuMemAlloc_v2, (bgcu_deviceptr * dptr, size_t bytes))                             \
  X(bgcu_result, cuMemFree_v2, (bgcu_deviceptr dptr))                                              \
  X(bgcu_result, cuMemHostAlloc, (void** pp, size_t bytes, unsigned int flags))                   \
  X(bgcu_result, cuMemHostGetDevicePointer_v2, (bgcu_deviceptr * pdptr, void* p, unsigned int flags)) \
  X(bgcu_result, cuMemFreeHost, (void* p))                                                         \
  X(bgcu_result, cuMemcpyHtoD_v2, (bgcu_deviceptr dst, const void* src, size_t n))                 \
  X(bgcu_result, cuMemcpyDtoH_v2, (void* dst, bgcu_deviceptr src, size_t n))                       \
  X(bgcu_result, cuMemcpyDtoD_v2, (bgcu_deviceptr dst, bgcu_deviceptr src, size_t n))              \
  X(bgcu_result, cuMemcpyHtoDAsync_v2,                                                             \
    (bgcu_deviceptr dst, const void* src, size_t n, bgcu_stream s))                                \
  X(bgcu_result, cuMemcpyDtoHAsync_v2, (void* dst, bgcu_deviceptr src, size_t n, bgcu_stream s))  \
  X(bgcu_result, cuMemcpyDtoDAsync_v2,                                                             \
    (bgcu_deviceptr dst, bgcu_deviceptr src, size_t n, bgcu_stream s))                             \
  X(bgcu_result, cuMemsetD8_v2, (bgcu_deviceptr dst, unsigned char v, size_t n))                   \
  X(bgcu_result, cuMemsetD16_v2, (bgcu_deviceptr dst, unsigned short v, size_t n))                 \
  X(bgcu_result, cuMemsetD32_v2, (bgcu_deviceptr dst, unsigned int v, size_t n))                   \
  X(bgcu_result, cuMemsetD8Async, (bgcu_deviceptr dst, unsigned char v, size_t n, bgcu_stream s)) \
  X(bgcu_result, cuMemsetD16Async,                                                                 \
    (bgcu_deviceptr dst, unsigned short v, size_t n, bgcu_stream s))                               \
  X(bgcu_result, cuMemsetD32Async, (bgcu_deviceptr dst, unsigned int v, size_t n, bgcu_stream s)) \
  X(bgcu_result, cuStreamCreateWithPriority, (bgcu_stream * s, unsigned int flags, int priority)) \
  X(bgcu_result, cuStreamDestroy_v2, (bgcu_stream s))                                              \
  X(bgcu_result, cuStreamSynchronize, (bgcu_stream s))                                             \
  X(bgcu_result, cuStreamQuery, (bgcu_stream s))                                                   \
  X(bgcu_result, cuStreamWaitEvent, (bgcu_stream s, bgcu_event e, unsigned int flags))            \
  X(bgcu_result, cuLaunchHostFunc, (bgcu_stream s, bgcu_host_fn fn, void* user))                  \
  X(bgcu_result, cuEventCreate, (bgcu_event * e, unsigned int flags))                              \
  X(bgcu_result, cuEventDestroy_v2, (bgcu_event e))                                                \
  X(bgcu_result, cuEventRecord, (bgcu_event e, bgcu_stream s))                                     \
  X(bgcu_result, cuEventQuery, (bgcu_event e))                                                     \
  X(bgcu_result, cuEventSynchronize, (bgcu_event e))                                               \
  X(bgcu_result, cuModuleLoadDataEx,                                                               \
    (bgcu_module * m, const void* image, unsigned int nopts, bgcu_enum* opts, void** values))      \
  X(bgcu_result, cuModuleUnload, (bgcu_module m))                                                  \
  X(bgcu_result, cuModuleGetFunction, (bgcu_function * f, bgcu_module m, const char* name))       \
  X(bgcu_result, cuFuncGetAttribute, (int* pi, bgcu_enum attrib, bgcu_function f))                 \
  X(bgcu_result, cuLaunchKernel,                                                                   \
    (bgcu_function f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
     unsigned int by, unsigned int bz, unsigned int shared, bgcu_stream s, void** params,          \
     void** extra))                                                                                \
  X(bgcu_result, cuStreamBeginCapture_v2, (bgcu_stream s, bgcu_enum mode))                         \
  X(bgcu_result, cuStreamEndCapture, (bgcu_stream s, bgcu_graph * g))                              \
  X(bgcu_result, cuStreamIsCapturing, (bgcu_stream s, bgcu_enum * status))                         \
  X(bgcu_result, cuGraphGetNodes, (bgcu_graph g, bgcu_graph_node * nodes, size_t * n))             \
  X(bgcu_result, cuGraphNodeGetType, (bgcu_graph_node node, bgcu_enum * type))                     \
  X(bgcu_result, cuGraphInstantiateWithFlags,                                                      \
    (bgcu_graph_exec * x, bgcu_graph g, unsigned long long flags))                                 \
  X(bgcu_result, cuGraphUpload, (bgcu_graph_exec x, bgcu_stream s))                                \
  X(bgcu_result, cuGraphLaunch, (bgcu_graph_exec x, bgcu_stream s))                                \
  X(bgcu_result, cuGraphExecDestroy, (bgcu_graph_exec x))                                          \
  X(bgcu_result, cuGraphDestroy, (bgcu_graph g))

/* Newer entry points, each with a fallback or a feature that reports NOT_SUPPORTED without it:
 *   cuEventElapsedTime_v2 (12.8; else cuEventElapsedTime), cuStreamGetCaptureInfo_v3 (12.3; else
 *   _v2), the kernel-node parameter calls (12.0; else bg_graph_exec_set_kernel_args is refused),
 *   cuFuncSetAttribute (9.0; else more than 48 KiB of dynamic shared memory is refused),
 *   cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2 (else the context is made current with
 *   cuCtxSetCurrent and left current), the stream memory operations (12.0 as _v2; else
 *   TypeScript host functions use cuLaunchHostFunc), the explicit graph construction calls
 *   (cuGraphAddKernelNode_v2 12.0; else bg_graph_from_commands uses the core's generic graph),
 *   the memory pool calls (11.2; else the core's plain pool serves bg_mem_alloc_async),
 *   peer access and cuMemcpyPeerAsync (4.0; optional so that a driver or simulator without them
 *   still loads: then no device reports a peer and copies between devices are refused), the
 *   interprocess calls and cuMemGetAddressRange_v2 (4.1 / 3.2; without them sharing between
 *   processes is refused). */
#define BGCU_DRIVER_OPTIONAL(X)                                                                    \
  X(bgcu_result, cuEventElapsedTime_v2, (float* ms, bgcu_event start, bgcu_event end))            \
  X(bgcu_result, cuStreamGetCaptureInfo_v3,                                                        \
    (bgcu_stream s, bgcu_enum * status, uint64_t * id, bgcu_graph * g,                             \
     const bgcu_graph_node** deps, const struct CUgraphEdgeData_st** edges, size_t* ndeps))        \
  X(bgcu_result, cuGraphKernelNodeGetParams_v2, (bgcu_graph_node node, BGCU_KNP * params))         \
  X(bgcu_result, cuGraphExecKernelNodeSetParams_v2,                                                \
    (bgcu_graph_exec x, bgcu_graph_node node, const BGCU_KNP* params))                             \
  X(bgcu_result, cuFuncSetAttribute, (bgcu_function f, bgcu_enum attrib, int value))              \
  X(bgcu_result, cuCtxPushCurrent_v2, (bgcu_context ctx))                                          \
  X(bgcu_result, cuCtxPopCurrent_v2, (bgcu_context * pctx))                                        \
  X(bgcu_result, cuStreamWaitValue32_v2,                                                           \
    (bgcu_stream s, bgcu_deviceptr addr, uint32_t value, unsigned int flags))                      \
  X(bgcu_result, cuStreamWriteValue32_v2,                                                          \
    (bgcu_stream s, bgcu_deviceptr addr, uint32_t value, unsigned int flags))                      \
  X(bgcu_result, cuGraphCreate, (bgcu_graph * g, unsigned int flags))                              \
  X(bgcu_result, cuGraphAddKernelNode_v2,                                                          \
    (bgcu_graph_node * node, bgcu_graph g, const bgcu_graph_node* deps, size_t ndeps,              \
     const BGCU_KNP* params))                                                                      \
  X(bgcu_result, cuGraphAddMemcpyNode,                                                             \
    (bgcu_graph_node * node, bgcu_graph g, const bgcu_graph_node* deps, size_t ndeps,              \
     const BGCU_MEMCPY3D* params, bgcu_context ctx))                                               \
  X(bgcu_result, cuGraphAddMemsetNode,                                                             \
    (bgcu_graph_node * node, bgcu_graph g, const bgcu_graph_node* deps, size_t ndeps,              \
     const BGCU_MEMSETP* params, bgcu_context ctx))                                                \
  X(bgcu_result, cuGraphAddEventRecordNode,                                                        \
    (bgcu_graph_node * node, bgcu_graph g, const bgcu_graph_node* deps, size_t ndeps,              \
     bgcu_event e))                                                                                \
  X(bgcu_result, cuGraphAddEventWaitNode,                                                          \
    (bgcu_graph_node * node, bgcu_graph g, const bgcu_graph_node* deps, size_t ndeps,              \
     bgcu_event e))                                                                                \
  X(bgcu_result, cuDeviceGetDefaultMemPool, (bgcu_mempool * pool, bgcu_device dev))                \
  X(bgcu_result, cuMemPoolCreate, (bgcu_mempool * pool, const BGCU_POOLPROPS* props))              \
  X(bgcu_result, cuMemPoolSetAccess, (bgcu_mempool pool, const BGCU_ACCESSDESC* map, size_t count)) \
  X(bgcu_result, cuMemPoolDestroy, (bgcu_mempool pool))                                            \
  X(bgcu_result, cuMemPoolSetAttribute, (bgcu_mempool pool, bgcu_enum attr, void* value))          \
  X(bgcu_result, cuMemPoolGetAttribute, (bgcu_mempool pool, bgcu_enum attr, void* value))          \
  X(bgcu_result, cuMemPoolTrimTo, (bgcu_mempool pool, size_t keep))                                \
  X(bgcu_result, cuMemAllocAsync, (bgcu_deviceptr * dptr, size_t bytes, bgcu_stream s))            \
  X(bgcu_result, cuMemAllocFromPoolAsync,                                                          \
    (bgcu_deviceptr * dptr, size_t bytes, bgcu_mempool pool, bgcu_stream s))                       \
  X(bgcu_result, cuMemFreeAsync, (bgcu_deviceptr dptr, bgcu_stream s))                                                                     \
  X(bgcu_result, cuDeviceCanAccessPeer, (int* can, bgcu_device dev, bgcu_device peer))             \
  X(bgcu_result, cuCtxEnablePeerAccess, (bgcu_context peer, unsigned int flags))                   \
  X(bgcu_result, cuCtxDisablePeerAccess, (bgcu_context peer))                                      \
  X(bgcu_result, cuMemcpyPeerAsync,                                                                \
    (bgcu_deviceptr dst, bgcu_context dst_ctx, bgcu_deviceptr src, bgcu_context src_ctx,           \
     size_t n, bgcu_stream s))                                                                     \
  X(bgcu_result, cuMemGetAddressRange_v2,                                                          \
    (bgcu_deviceptr * base, size_t * size, bgcu_deviceptr dptr))                                   \
  X(bgcu_result, cuIpcGetMemHandle, (BGCU_IPCMEM * handle, bgcu_deviceptr dptr))                  \
  X(bgcu_result, cuIpcOpenMemHandle_v2,                                                            \
    (bgcu_deviceptr * dptr, BGCU_IPCMEM handle, unsigned int flags))                               \
  X(bgcu_result, cuIpcCloseMemHandle, (bgcu_deviceptr dptr))                                       \
  X(bgcu_result, cuIpcGetEventHandle, (BGCU_IPCEVENT * handle, bgcu_event e))                      \
  X(bgcu_result, cuIpcOpenEventHandle, (bgcu_event * e, BGCU_IPCEVENT handle))

/* Fallbacks for older drivers. Their real declarations are hidden by cuda.h's versioning macros,
 * so the check compares these with cudaTypedefs.h's PFN_<name>_v<version>: X(..., real PFN). */
#define BGCU_DRIVER_LEGACY(X)                                                                      \
  X(bgcu_result, cuEventElapsedTime, (float* ms, bgcu_event start, bgcu_event end),               \
    PFN_cuEventElapsedTime_v2000)                                                                  \
  X(bgcu_result, cuStreamGetCaptureInfo_v2,                                                        \
    (bgcu_stream s, bgcu_enum * status, uint64_t * id, bgcu_graph * g,                             \
     const bgcu_graph_node** deps, size_t* ndeps),                                                 \
    PFN_cuStreamGetCaptureInfo_v11030)

/* NVRTC, loaded on first use. */
#define BGNVRTC_FUNCS(X)                                                                           \
  X(bgnvrtc_result, nvrtcVersion, (int* major, int* minor))                                        \
  X(const char*, nvrtcGetErrorString, (bgnvrtc_result result))                                     \
  X(bgnvrtc_result, nvrtcCreateProgram,                                                            \
    (bgnvrtc_program * prog, const char* src, const char* name, int nheaders,                     \
     const char* const* headers, const char* const* include_names))                                \
  X(bgnvrtc_result, nvrtcDestroyProgram, (bgnvrtc_program * prog))                                 \
  X(bgnvrtc_result, nvrtcCompileProgram,                                                           \
    (bgnvrtc_program prog, int nopts, const char* const* opts))                                    \
  X(bgnvrtc_result, nvrtcGetPTXSize, (bgnvrtc_program prog, size_t * n))                           \
  X(bgnvrtc_result, nvrtcGetPTX, (bgnvrtc_program prog, char* ptx))                                \
  X(bgnvrtc_result, nvrtcGetCUBINSize, (bgnvrtc_program prog, size_t * n))                         \
  X(bgnvrtc_result, nvrtcGetCUBIN, (bgnvrtc_program prog, char* cubin))                            \
  X(bgnvrtc_result, nvrtcGetProgramLogSize, (bgnvrtc_program prog, size_t * n))                    \
  X(bgnvrtc_result, nvrtcGetProgramLog, (bgnvrtc_program prog, char* log))

/* NVRTC, optional: the architectures it can target (11.2), for the PTX fallback. */
#define BGNVRTC_FUNCS_OPTIONAL(X)                                                                  \
  X(bgnvrtc_result, nvrtcGetNumSupportedArchs, (int* n))                                           \
  X(bgnvrtc_result, nvrtcGetSupportedArchs, (int* archs))

/* ---- function pointer types: PFN_bg_<exported symbol> ---------------------------------------- */
#define BGCU_DECLARE_PFN(ret, name, params) typedef ret(*PFN_bg_##name) params;
#define BGCU_DECLARE_PFN_LEGACY(ret, name, params, real) typedef ret(*PFN_bg_##name) params;
BGCU_DRIVER_REQUIRED(BGCU_DECLARE_PFN)
BGCU_DRIVER_OPTIONAL(BGCU_DECLARE_PFN)
BGCU_DRIVER_LEGACY(BGCU_DECLARE_PFN_LEGACY)
BGNVRTC_FUNCS(BGCU_DECLARE_PFN)
BGNVRTC_FUNCS_OPTIONAL(BGCU_DECLARE_PFN)
#undef BGCU_DECLARE_PFN
#undef BGCU_DECLARE_PFN_LEGACY

#endif /* BUNGPU_CUDA_API_H */
