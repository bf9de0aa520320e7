/*
 * nccl_api.h: the NCCL entry points the CUDA backend's communicators use (shim/cuda/nccl.c),
 * declared by hand so libbungpu builds without NCCL and loads libnccl.so.2 with dlopen at the
 * first use of a communicator. As cuda_api.h: prefixed names (bgnccl_, BGNCCL_, PFN_bg_) so that
 * this header and the real <nccl.h> can share a translation unit, and shim/test/nccl_decls_check.c
 * proves with _Static_assert that every PFN_bg_<symbol> is the real declaration's type, every
 * constant the real value, and bungpu.h's BG_RED_* / BG_DTYPE_* NCCL's ncclRedOp_t /
 * ncclDataType_t. C enums (ncclResult_t, ncclDataType_t, ncclRedOp_t) are spelled `unsigned int`,
 * the compatible type GCC gives an enum without negative values.
 */
#ifndef BUNGPU_NCCL_API_H
#define BUNGPU_NCCL_API_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned int bgnccl_result; /* ncclResult_t */
typedef unsigned int bgnccl_enum;   /* ncclDataType_t, ncclRedOp_t */
struct ncclComm;
struct CUstream_st;
typedef struct ncclComm* bgnccl_comm;       /* ncclComm_t */
typedef struct CUstream_st* bgnccl_stream;  /* cudaStream_t (= CUstream) */

/* ncclUniqueId: an unnamed struct in nccl.h, so the check file sets BGNCCL_UID to the real type
 * for the signature comparison and proves the size separately. */
typedef struct bgnccl_unique_id {
  char internal[128];
} bgnccl_unique_id;
#ifndef BGNCCL_UID
#define BGNCCL_UID bgnccl_unique_id
#endif

/* X(ret, name, params) */
#define BGNCCL_FUNCS(X)                                                                            \
  X(bgnccl_result, ncclGetVersion, (int* version))                                                 \
  X(bgnccl_result, ncclGetUniqueId, (BGNCCL_UID * uniqueId))                                       \
  X(bgnccl_result, ncclCommInitRank, (bgnccl_comm * comm, int nranks, BGNCCL_UID commId, int rank)) \
  X(bgnccl_result, ncclCommInitAll, (bgnccl_comm * comm, int ndev, const int* devlist))           \
  X(bgnccl_result, ncclCommDestroy, (bgnccl_comm comm))                                            \
  X(bgnccl_result, ncclCommAbort, (bgnccl_comm comm))                                              \
  X(bgnccl_result, ncclCommGetAsyncError, (bgnccl_comm comm, bgnccl_result * asyncError))         \
  X(bgnccl_result, ncclCommCount, (const bgnccl_comm comm, int* count))                            \
  X(bgnccl_result, ncclCommUserRank, (const bgnccl_comm comm, int* rank))                          \
  X(const char*, ncclGetErrorString, (bgnccl_result result))                                       \
  X(bgnccl_result, ncclAllReduce, (const void* sendbuff, void* recvbuff, size_t count,             \
                                   bgnccl_enum datatype, bgnccl_enum op, bgnccl_comm comm,         \
                                   bgnccl_stream stream))                                          \
  X(bgnccl_result, ncclBroadcast, (const void* sendbuff, void* recvbuff, size_t count,             \
                                   bgnccl_enum datatype, int root, bgnccl_comm comm,               \
                                   bgnccl_stream stream))                                          \
  X(bgnccl_result, ncclReduce, (const void* sendbuff, void* recvbuff, size_t count,                \
                                bgnccl_enum datatype, bgnccl_enum op, int root, bgnccl_comm comm,  \
                                bgnccl_stream stream))                                             \
  X(bgnccl_result, ncclAllGather, (const void* sendbuff, void* recvbuff, size_t sendcount,         \
                                   bgnccl_enum datatype, bgnccl_comm comm, bgnccl_stream stream))  \
  X(bgnccl_result, ncclReduceScatter, (const void* sendbuff, void* recvbuff, size_t recvcount,     \
                                       bgnccl_enum datatype, bgnccl_enum op, bgnccl_comm comm,     \
                                       bgnccl_stream stream))                                      \
  X(bgnccl_result, ncclSend, (const void* sendbuff, size_t count, bgnccl_enum datatype, int peer,  \
                              bgnccl_comm comm, bgnccl_stream stream))                             \
  X(bgnccl_result, ncclRecv, (void* recvbuff, size_t count, bgnccl_enum datatype, int peer,        \
                              bgnccl_comm comm, bgnccl_stream stream))                             \
  X(bgnccl_result, ncclGroupStart, (void))                                                         \
  X(bgnccl_result, ncclGroupEnd, (void))

/* Present since NCCL 2.13; looked up, not required. */
#define BGNCCL_FUNCS_OPTIONAL(X) X(const char*, ncclGetLastError, (bgnccl_comm comm))

#define BGNCCL_TYPEDEF(ret, name, params) typedef ret(*PFN_bg_##name) params;
BGNCCL_FUNCS(BGNCCL_TYPEDEF)
BGNCCL_FUNCS_OPTIONAL(BGNCCL_TYPEDEF)
#undef BGNCCL_TYPEDEF

/* X(name, value): checked against the real enumerators. */
#define BGNCCL_CONSTANTS(X)                                                                        \
  X(ncclSuccess, 0)                                                                                \
  X(ncclUnhandledCudaError, 1)                                                                     \
  X(ncclSystemError, 2)                                                                            \
  X(ncclInternalError, 3)                                                                          \
  X(ncclInvalidArgument, 4)                                                                        \
  X(ncclInvalidUsage, 5)                                                                           \
  X(ncclRemoteError, 6)                                                                            \
  X(ncclInProgress, 7)                                                                             \
  X(NCCL_UNIQUE_ID_BYTES, 128)
#define BGNCCL_DEFINE_CONST(name, value) enum { BG##name = value };
BGNCCL_CONSTANTS(BGNCCL_DEFINE_CONST)
#undef BGNCCL_DEFINE_CONST

/* From context.c, for nccl.c: make the device's primary context current on the calling thread
 * for the length of one NCCL call (NCCL's calls use the runtime's current device), pushed as every
 * entry point's is and popped by bgcu_nccl_leave, so a thread's own context is as it left it
 * (NCCL_ENTER does both, leaving at the end of the enclosing block); the device's CUdevice
 * ordinal; and the driver stream behind a bungpu stream (NULL: the legacy stream). */
struct bg_device;
typedef struct bgcu_nccl_guard {
  int pushed;
  void* prev;
} bgcu_nccl_guard;
int32_t bgcu_nccl_enter(struct bg_device* dev, bgcu_nccl_guard* g);
void bgcu_nccl_leave(bgcu_nccl_guard* g);
int bgcu_nccl_ordinal(struct bg_device* dev);
bgnccl_stream bgcu_stream_handle(void* stream);
#define NCCL_ENTER(dev)                                                                         \
  __attribute__((cleanup(bgcu_nccl_leave))) bgcu_nccl_guard bgcu__guard = {0, NULL};            \
  do {                                                                                          \
    int32_t bgcu__rc = bgcu_nccl_enter((dev), &bgcu__guard);                                    \
    if (bgcu__rc) return bgcu__rc;                                                              \
  } while (0)

#endif /* BUNGPU_NCCL_API_H */
