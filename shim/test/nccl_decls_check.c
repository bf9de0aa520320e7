/*
 * nccl_decls_check.c: proves shim/cuda/nccl_api.h against the real nccl.h. It is never linked; it
 * only has to compile:
 *
 *   gcc -std=c11 -fsyntax-only -I<cuda include> -I<nccl include> -Ishim shim/test/nccl_decls_check.c
 *
 * (nccl.h includes cuda_runtime.h). A wrong parameter or return type, a missing or extra
 * parameter, a name nccl.h does not declare, a wrong constant, or a bungpu.h reduction or data
 * type code that is not NCCL's fails the build naming the declaration.
 */
#include <nccl.h>

#define BGNCCL_UID ncclUniqueId
#include "cuda/nccl_api.h"
#include "bungpu.h"

#define SAME(a, b) __builtin_types_compatible_p(a, b)
#define BG_XSTR(x) BG_STR(x)
#define BG_STR(x) #x

#define CHECK_FN(ret, name, params)                                                                \
  _Static_assert(SAME(__typeof__(&name), PFN_bg_##name), "signature of " #name);                   \
  _Static_assert(sizeof(#name) == sizeof(BG_XSTR(name)), #name " is a macro in nccl.h");
BGNCCL_FUNCS(CHECK_FN)
BGNCCL_FUNCS_OPTIONAL(CHECK_FN)

#define CHECK_CONST(name, value)                                                                   \
  _Static_assert((long long)BG##name == (long long)(name) && (long long)(value) == (long long)(name), \
                 "value of " #name);
BGNCCL_CONSTANTS(CHECK_CONST)

_Static_assert(sizeof(bgnccl_unique_id) == sizeof(ncclUniqueId), "ncclUniqueId size");
_Static_assert(BG_COMM_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "BG_COMM_ID_BYTES");
_Static_assert(SAME(bgnccl_comm, ncclComm_t), "ncclComm_t");
_Static_assert(SAME(bgnccl_stream, cudaStream_t), "cudaStream_t");
_Static_assert(SAME(bgnccl_result, ncclResult_t), "ncclResult_t");
_Static_assert(SAME(bgnccl_enum, ncclDataType_t), "ncclDataType_t");
_Static_assert(SAME(bgnccl_enum, ncclRedOp_t), "ncclRedOp_t");

#define CHECK_EQ(ours, real) _Static_assert((long long)(ours) == (long long)(real), #ours " == " #real);
CHECK_EQ(BG_RED_SUM, ncclSum)
CHECK_EQ(BG_RED_PROD, ncclProd)
CHECK_EQ(BG_RED_MAX, ncclMax)
CHECK_EQ(BG_RED_MIN, ncclMin)
CHECK_EQ(BG_RED_AVG, ncclAvg)
CHECK_EQ(BG_DTYPE_INT8, ncclInt8)
CHECK_EQ(BG_DTYPE_UINT8, ncclUint8)
CHECK_EQ(BG_DTYPE_INT32, ncclInt32)
CHECK_EQ(BG_DTYPE_UINT32, ncclUint32)
CHECK_EQ(BG_DTYPE_INT64, ncclInt64)
CHECK_EQ(BG_DTYPE_UINT64, ncclUint64)
CHECK_EQ(BG_DTYPE_FLOAT16, ncclFloat16)
CHECK_EQ(BG_DTYPE_FLOAT32, ncclFloat32)
CHECK_EQ(BG_DTYPE_FLOAT64, ncclFloat64)
CHECK_EQ(BG_DTYPE_BFLOAT16, ncclBfloat16)
