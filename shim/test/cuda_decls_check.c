/*
 * cuda_decls_check.c: proves shim/cuda/cuda_api.h against the real CUDA headers. It is never
 * linked; it only has to compile:
 *
 *   gcc -std=c11 -fsyntax-only -I/usr/local/cuda/include -Ishim shim/test/cuda_decls_check.c
 *
 * A wrong parameter type, a wrong return type, a missing or extra parameter, a wrong exported
 * symbol name (one cuda.h does not declare), a wrong constant or a wrong struct layout fails the
 * build with the name of the offending declaration. nvrtc.h is checked when it can be found (the
 * NVRTC headers ship in a separate package: add its include folder with another -I); without
 * it the NVRTC part is skipped, and BG_REQUIRE_NVRTC_H turns that into an error.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stddef.h>

#if defined(__has_include)
#if __has_include(<nvrtc.h>)
#include <nvrtc.h>
#define BG_HAVE_NVRTC_H 1
#endif
#endif
#if !defined(BG_HAVE_NVRTC_H) && defined(BG_REQUIRE_NVRTC_H)
#error "nvrtc.h not found: add the NVRTC include folder with -I"
#endif

/* Compare the kernel-node PFNs with the real struct in place; the struct itself is proven below. */
#define BGCU_KNP CUDA_KERNEL_NODE_PARAMS_v2
#define BGCU_MEMCPY3D CUDA_MEMCPY3D_v2
#define BGCU_MEMSETP CUDA_MEMSET_NODE_PARAMS_v1
#define BGCU_POOLPROPS CUmemPoolProps_v1
#define BGCU_ACCESSDESC CUmemAccessDesc_v1
#define BGCU_IPCMEM CUipcMemHandle_v1
#define BGCU_IPCEVENT CUipcEventHandle_v1
#include "cuda/cuda_api.h"
#include "bungpu.h"

#define SAME(a, b) __builtin_types_compatible_p(a, b)

/* ---- entry points: the real declaration of each exported symbol has our PFN's type ----------- */
/* The stringified name is the one dlsym looks up: if cuda.h maps it to another (cuMemAlloc ->
 * cuMemAlloc_v2), the backend would load the old entry point, so the name must expand to itself. */
#define BG_XSTR(x) BG_STR(x)
#define BG_STR(x) #x
#define CHECK_FN(ret, name, params)                                                                \
  _Static_assert(SAME(__typeof__(&name), PFN_bg_##name), "signature of " #name);                   \
  _Static_assert(sizeof(#name) == sizeof(BG_XSTR(name)), #name " is a macro in cuda.h: use the "  \
                 "exported name it maps to");
BGCU_DRIVER_REQUIRED(CHECK_FN)
BGCU_DRIVER_OPTIONAL(CHECK_FN)
#ifdef BG_HAVE_NVRTC_H
BGNVRTC_FUNCS(CHECK_FN)
BGNVRTC_FUNCS_OPTIONAL(CHECK_FN)
#endif

#define CHECK_LEGACY(ret, name, params, real)                                                      \
  _Static_assert(SAME(real, PFN_bg_##name), "signature of " #name " (" #real ")");
BGCU_DRIVER_LEGACY(CHECK_LEGACY)

/* ---- constants -------------------------------------------------------------------------------- */
#define CHECK_CONST(name, value)                                                                   \
  _Static_assert((long long)BG##name == (long long)(name) && (long long)(value) == (long long)(name), \
                 "value of " #name);
BGCU_CONSTANTS(CHECK_CONST)
#ifdef BG_HAVE_NVRTC_H
BGNVRTC_CONSTANTS(CHECK_CONST)
#endif

/* bungpu.h's codes and enums that the backend passes straight through. */
#define CHECK_EQ(ours, real) \
  _Static_assert((long long)(ours) == (long long)(real), #ours " == " #real);
CHECK_EQ(BG_OK, CUDA_SUCCESS)
CHECK_EQ(BG_ERR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE)
CHECK_EQ(BG_ERR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY)
CHECK_EQ(BG_ERR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED)
CHECK_EQ(BG_ERR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED)
CHECK_EQ(BG_ERR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)
CHECK_EQ(BG_ERR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE)
CHECK_EQ(BG_ERR_INVALID_IMAGE, CUDA_ERROR_INVALID_IMAGE)
CHECK_EQ(BG_ERR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT)
CHECK_EQ(BG_ERR_INVALID_PTX, CUDA_ERROR_INVALID_PTX)
CHECK_EQ(BG_ERR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU)
CHECK_EQ(BG_ERR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
CHECK_EQ(BG_ERR_INVALID_SOURCE, CUDA_ERROR_INVALID_SOURCE)
CHECK_EQ(BG_ERR_FILE_NOT_FOUND, CUDA_ERROR_FILE_NOT_FOUND)
CHECK_EQ(BG_ERR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE)
CHECK_EQ(BG_ERR_ILLEGAL_STATE, CUDA_ERROR_ILLEGAL_STATE)
CHECK_EQ(BG_ERR_NOT_FOUND, CUDA_ERROR_NOT_FOUND)
CHECK_EQ(BG_ERR_NOT_READY, CUDA_ERROR_NOT_READY)
CHECK_EQ(BG_ERR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS)
CHECK_EQ(BG_ERR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
CHECK_EQ(BG_ERR_LAUNCH_TIMEOUT, CUDA_ERROR_LAUNCH_TIMEOUT)
CHECK_EQ(BG_ERR_PEER_ACCESS_ALREADY_ENABLED, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
CHECK_EQ(BG_ERR_PEER_ACCESS_NOT_ENABLED, CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
CHECK_EQ(BG_ERR_ASSERT, CUDA_ERROR_ASSERT)
CHECK_EQ(BG_ERR_HARDWARE_STACK_ERROR, CUDA_ERROR_HARDWARE_STACK_ERROR)
CHECK_EQ(BG_ERR_ILLEGAL_INSTRUCTION, CUDA_ERROR_ILLEGAL_INSTRUCTION)
CHECK_EQ(BG_ERR_MISALIGNED_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS)
CHECK_EQ(BG_ERR_INVALID_ADDRESS_SPACE, CUDA_ERROR_INVALID_ADDRESS_SPACE)
CHECK_EQ(BG_ERR_INVALID_PC, CUDA_ERROR_INVALID_PC)
CHECK_EQ(BG_ERR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED)
CHECK_EQ(BG_ERR_NOT_PERMITTED, CUDA_ERROR_NOT_PERMITTED)
CHECK_EQ(BG_ERR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_MERGE, CUDA_ERROR_STREAM_CAPTURE_MERGE)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_UNMATCHED, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_UNJOINED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_ISOLATION, CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_IMPLICIT, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
CHECK_EQ(BG_ERR_CAPTURED_EVENT, CUDA_ERROR_CAPTURED_EVENT)
CHECK_EQ(BG_ERR_STREAM_CAPTURE_WRONG_THREAD, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
CHECK_EQ(BG_ERR_UNKNOWN, CUDA_ERROR_UNKNOWN)
CHECK_EQ(BG_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL)
CHECK_EQ(BG_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
CHECK_EQ(BG_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_RELAXED)
CHECK_EQ(BG_CAPTURE_NONE, CU_STREAM_CAPTURE_STATUS_NONE)
CHECK_EQ(BG_CAPTURE_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE)
CHECK_EQ(BG_CAPTURE_INVALIDATED, CU_STREAM_CAPTURE_STATUS_INVALIDATED)

/* ---- types: handles are the real types; scalars and enums have the real size and type ------- */
CHECK_EQ(sizeof(bgcu_result), sizeof(CUresult))
_Static_assert(SAME(bgcu_result, CUresult), "bgcu_result is CUresult");
_Static_assert(SAME(bgcu_enum, CUdevice_attribute), "bgcu_enum as CUdevice_attribute");
_Static_assert(SAME(bgcu_enum, CUstreamCaptureMode), "bgcu_enum as CUstreamCaptureMode");
_Static_assert(SAME(bgcu_enum, CUstreamCaptureStatus), "bgcu_enum as CUstreamCaptureStatus");
_Static_assert(SAME(bgcu_enum, CUfunction_attribute), "bgcu_enum as CUfunction_attribute");
_Static_assert(SAME(bgcu_enum, CUgraphNodeType), "bgcu_enum as CUgraphNodeType");
_Static_assert(SAME(bgcu_enum, CUjit_option), "bgcu_enum as CUjit_option");
_Static_assert(SAME(bgcu_enum, CUstreamWaitValue_flags), "bgcu_enum as CUstreamWaitValue_flags");
_Static_assert(SAME(bgcu_device, CUdevice), "bgcu_device is CUdevice");
_Static_assert(SAME(bgcu_deviceptr, CUdeviceptr), "bgcu_deviceptr is CUdeviceptr");
_Static_assert(SAME(bgcu_context, CUcontext), "bgcu_context is CUcontext");
_Static_assert(SAME(bgcu_module, CUmodule), "bgcu_module is CUmodule");
_Static_assert(SAME(bgcu_function, CUfunction), "bgcu_function is CUfunction");
_Static_assert(SAME(bgcu_kernel, CUkernel), "bgcu_kernel is CUkernel");
_Static_assert(SAME(bgcu_stream, CUstream), "bgcu_stream is CUstream");
_Static_assert(SAME(bgcu_event, CUevent), "bgcu_event is CUevent");
_Static_assert(SAME(bgcu_graph, CUgraph), "bgcu_graph is CUgraph");
_Static_assert(SAME(bgcu_graph_node, CUgraphNode), "bgcu_graph_node is CUgraphNode");
_Static_assert(SAME(bgcu_graph_exec, CUgraphExec), "bgcu_graph_exec is CUgraphExec");
_Static_assert(SAME(bgcu_host_fn, CUhostFn), "bgcu_host_fn is CUhostFn");
_Static_assert(sizeof(bgcu_context) == sizeof(void*) && sizeof(bgcu_stream) == sizeof(void*) &&
                   sizeof(bgcu_graph_node) == sizeof(void*),
               "handles are pointer-sized");
_Static_assert(sizeof(bgcu_deviceptr) == 8 && sizeof(CUdeviceptr) == sizeof(bg_devptr),
               "CUdeviceptr is bg_devptr's size");
#ifdef BG_HAVE_NVRTC_H
_Static_assert(SAME(bgnvrtc_result, nvrtcResult), "bgnvrtc_result is nvrtcResult");
_Static_assert(SAME(bgnvrtc_program, nvrtcProgram), "bgnvrtc_program is nvrtcProgram");
#endif
/* bg_host_fn (bungpu.h) is handed to cuLaunchHostFunc as is. */
_Static_assert(SAME(bg_host_fn, CUhostFn), "bg_host_fn is CUhostFn");

/* ---- CUDA_KERNEL_NODE_PARAMS_v2, mirrored as bgcu_kernel_node_params -------------------------- */
#define CHECK_FIELD(f)                                                                             \
  _Static_assert(offsetof(bgcu_kernel_node_params, f) == offsetof(CUDA_KERNEL_NODE_PARAMS_v2, f) && \
                     SAME(__typeof__(((bgcu_kernel_node_params*)0)->f),                            \
                          __typeof__(((CUDA_KERNEL_NODE_PARAMS_v2*)0)->f)),                        \
                 "field " #f " of CUDA_KERNEL_NODE_PARAMS_v2");
_Static_assert(sizeof(bgcu_kernel_node_params) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2) &&
                   _Alignof(bgcu_kernel_node_params) == _Alignof(CUDA_KERNEL_NODE_PARAMS_v2),
               "size of CUDA_KERNEL_NODE_PARAMS_v2");
CHECK_FIELD(func)
CHECK_FIELD(gridDimX)
CHECK_FIELD(gridDimY)
CHECK_FIELD(gridDimZ)
CHECK_FIELD(blockDimX)
CHECK_FIELD(blockDimY)
CHECK_FIELD(blockDimZ)
CHECK_FIELD(sharedMemBytes)
CHECK_FIELD(kernelParams)
CHECK_FIELD(extra)
CHECK_FIELD(kern)
CHECK_FIELD(ctx)
/* The real type is what cuda.h's unversioned kernel-node calls take since CUDA 12.0. */
_Static_assert(SAME(CUDA_KERNEL_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS_v2), "CUDA_KERNEL_NODE_PARAMS");

/* ---- CUDA_MEMCPY3D_v2 and CUDA_MEMSET_NODE_PARAMS_v1, mirrored ---------------------------------- */
#define CHECK_FIELD_OF(ours, real, f)                                                              \
  _Static_assert(offsetof(ours, f) == offsetof(real, f) &&                                         \
                     SAME(__typeof__(((ours*)0)->f), __typeof__(((real*)0)->f)),                   \
                 "field " #f " of " #real);
#define CHECK_M3(f) CHECK_FIELD_OF(bgcu_memcpy3d, CUDA_MEMCPY3D_v2, f)
#define CHECK_MS(f) CHECK_FIELD_OF(bgcu_memset_params, CUDA_MEMSET_NODE_PARAMS_v1, f)
_Static_assert(sizeof(bgcu_memcpy3d) == sizeof(CUDA_MEMCPY3D_v2) &&
                   _Alignof(bgcu_memcpy3d) == _Alignof(CUDA_MEMCPY3D_v2),
               "size of CUDA_MEMCPY3D_v2");
CHECK_M3(srcXInBytes) CHECK_M3(srcY) CHECK_M3(srcZ) CHECK_M3(srcLOD) CHECK_M3(srcMemoryType)
CHECK_M3(srcHost) CHECK_M3(srcDevice) CHECK_M3(srcArray) CHECK_M3(reserved0) CHECK_M3(srcPitch)
CHECK_M3(srcHeight) CHECK_M3(dstXInBytes) CHECK_M3(dstY) CHECK_M3(dstZ) CHECK_M3(dstLOD)
CHECK_M3(dstMemoryType) CHECK_M3(dstHost) CHECK_M3(dstDevice) CHECK_M3(dstArray)
CHECK_M3(reserved1) CHECK_M3(dstPitch) CHECK_M3(dstHeight) CHECK_M3(WidthInBytes)
CHECK_M3(Height) CHECK_M3(Depth)
_Static_assert(SAME(CUDA_MEMCPY3D, CUDA_MEMCPY3D_v2), "CUDA_MEMCPY3D");
_Static_assert(sizeof(bgcu_memset_params) == sizeof(CUDA_MEMSET_NODE_PARAMS_v1) &&
                   _Alignof(bgcu_memset_params) == _Alignof(CUDA_MEMSET_NODE_PARAMS_v1),
               "size of CUDA_MEMSET_NODE_PARAMS_v1");
CHECK_MS(dst) CHECK_MS(pitch) CHECK_MS(value) CHECK_MS(elementSize) CHECK_MS(width) CHECK_MS(height)
_Static_assert(SAME(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS_v1), "CUDA_MEMSET_NODE_PARAMS");
_Static_assert(SAME(bgcu_array, CUarray), "bgcu_array is CUarray");
_Static_assert(SAME(bgcu_enum, CUmemorytype), "bgcu_enum as CUmemorytype");

/* ---- CUmemPoolProps_v1, mirrored as bgcu_mempool_props ------------------------------------------ */
#define CHECK_PP(f) CHECK_FIELD_OF(bgcu_mempool_props, CUmemPoolProps_v1, f)
_Static_assert(sizeof(bgcu_mempool_props) == sizeof(CUmemPoolProps_v1) &&
                   _Alignof(bgcu_mempool_props) == _Alignof(CUmemPoolProps_v1),
               "size of CUmemPoolProps_v1");
CHECK_PP(allocType) CHECK_PP(handleTypes) CHECK_PP(win32SecurityAttributes) CHECK_PP(maxSize)
CHECK_PP(usage) CHECK_PP(reserved)
_Static_assert(offsetof(bgcu_mempool_props, location.type) == offsetof(CUmemPoolProps_v1, location.type) &&
                   offsetof(bgcu_mempool_props, location.id) == offsetof(CUmemPoolProps_v1, location.id) &&
                   sizeof(((bgcu_mempool_props*)0)->location) == sizeof(CUmemLocation),
               "field location of CUmemPoolProps_v1");
_Static_assert(SAME(CUmemPoolProps, CUmemPoolProps_v1), "CUmemPoolProps");
_Static_assert(sizeof(bgcu_mem_access_desc) == sizeof(CUmemAccessDesc_v1) &&
                   offsetof(bgcu_mem_access_desc, location.type) == offsetof(CUmemAccessDesc_v1, location.type) &&
                   offsetof(bgcu_mem_access_desc, location.id) == offsetof(CUmemAccessDesc_v1, location.id) &&
                   offsetof(bgcu_mem_access_desc, flags) == offsetof(CUmemAccessDesc_v1, flags),
               "layout of CUmemAccessDesc_v1");
_Static_assert(SAME(bgcu_enum, CUmemAccess_flags), "bgcu_enum as CUmemAccess_flags");
_Static_assert(SAME(bgcu_mempool, CUmemoryPool), "bgcu_mempool is CUmemoryPool");
_Static_assert(SAME(bgcu_enum, CUmemPool_attribute), "bgcu_enum as CUmemPool_attribute");
_Static_assert(SAME(bgcu_enum, CUmemAllocationType), "bgcu_enum as CUmemAllocationType");
_Static_assert(SAME(bgcu_enum, CUmemLocationType), "bgcu_enum as CUmemLocationType");

/* ---- CUipcMemHandle_v1 / CUipcEventHandle_v1, mirrored as bgcu_ipc_handle ---------------------- */
_Static_assert(sizeof(bgcu_ipc_handle) == sizeof(CUipcMemHandle_v1) &&
                   sizeof(bgcu_ipc_handle) == sizeof(CUipcEventHandle_v1) &&
                   _Alignof(bgcu_ipc_handle) == _Alignof(CUipcMemHandle_v1) &&
                   _Alignof(bgcu_ipc_handle) == _Alignof(CUipcEventHandle_v1),
               "size of CUipc*Handle_v1");
_Static_assert(SAME(CUipcMemHandle, CUipcMemHandle_v1) && SAME(CUipcEventHandle, CUipcEventHandle_v1),
               "CUipc*Handle");
_Static_assert(sizeof(((CUipcMemHandle_v1*)0)->reserved) == 64, "CUipcMemHandle_v1 payload");
/* bungpu's handle carries the driver's whole handle as its payload */
_Static_assert(CU_IPC_HANDLE_SIZE <= 64, "CU_IPC_HANDLE_SIZE fits bungpu's payload");

/* The driver API version these declarations were proven against. */
_Static_assert(CUDA_VERSION >= 12080, "check against cuda.h 12.8 or newer");
