// The kernel dialects the tensor code generator writes: what differs between C for the CPU,
// CUDA C and the Metal Shading Language, as data, so codegen has no per-language branches.
// Plain text only (no imports): the code generator stays free of the runtime.

/** How a dialect spreads an index space over the hardware. */
export type DialectShape =
  /** CPU: the output is cut into tiles, one tile a "block" of the shim's thread pool. */
  | "tiles"
  /**
   * GPU: one thread per output element, the reduce loop in the thread; or, for a reduce long
   * against its number of outputs, one block per output element (a shared-memory tree).
   */
  | "threads";

/** Names of the float math functions codegen calls (abs, pow, exp, log, sqrt, sin, cos, tanh, ...). */
export type MathNames = Readonly<
  Record<
    | "exp" | "log" | "sqrt" | "sin" | "cos" | "tanh" | "pow" | "abs"
    | "exp2" | "log2" | "tan" | "atan" | "asin" | "acos" | "sinh" | "cosh" | "floor" | "ceil" | "trunc" | "rint" | "fmod"
    | "asinh" | "acosh" | "atanh",
    string
  >
>;

/** The tensor dtypes, by name (the same union as src/tensor/dtype.ts's DType; no import here). */
export type ElemType = "float32" | "int32" | "float16" | "bfloat16" | "int8" | "uint8" | "bool" | "int64";

/**
 * Helper text a kernel needs for some dtypes, emitted once per module behind an include guard:
 * f16 / bf16: bg_ld_<t> (stored → float), bg_st_<t> (float → stored, to nearest even),
 * bg_rnd_<t> (float rounded to the dtype, as float); i64: bg_lneg, bg_ldiv, bg_lmod, bg_lpow;
 * bc32: bg_bc_f32_i32 / bg_bc_i32_f32; bc16: bg_bc_f16_bf16 / bg_bc_bf16_f16 (on float values).
 */
export type DTypeHelper = "f16" | "bf16" | "i64" | "bc32" | "bc16";

export interface Dialect {
  /** The language's name in generated kernels and caches: "c", "cuda", "metal". */
  readonly lang: string;
  readonly shape: DialectShape;
  /** Float literals with no decimal spelling. */
  readonly nan: string;
  readonly inf: string;
  readonly negInf: string;
  /** A comparison's result as an int (MSL's comparisons give bool). */
  bool(x: string): string;
  /** Float max/min helpers (the C prelude's branch-free selects), or null for the ternary. */
  readonly fmax: string | null;
  readonly fmin: string | null;
  readonly math: MathNames;
  /** The 64-bit signed integer type. */
  readonly int64: string;
  /** Whether kernels switch to 64-bit indices when an index can pass 2³¹-1 (CPU tiles never do). */
  readonly index64: boolean;
  /** The unsigned 32-bit type the prelude's helpers use. */
  readonly u32: string;
  /** The qualifiers of the prelude's helper functions. */
  readonly helperQualifiers: string;
  /** Text before the prelude's helpers (includes). */
  readonly preludeHead: string;
  /** Whether the prelude ends with the C math and vector helpers (bg_fsel, bg_tanhf, bg_f8, ...). */
  readonly hostVectorHelpers: boolean;
  /** GPU dialects: a kernel's parameters and opening. */
  readonly gpu: GpuDialect | null;
  /** Per dtype: the element type of its buffers and the type of locals computing it (half types compute in float). */
  readonly types: Readonly<Record<ElemType, { readonly store: string; readonly compute: string }>>;
  /** The helper texts of DTypeHelper (their qualifiers included). */
  readonly dtypeHelpers: Readonly<Record<DTypeHelper, string>>;
}

/** How a one-thread-per-element kernel is declared. */
export interface GpuDialect {
  /** Buffer parameter `i` (`out`: the written one) of element type `t`. */
  buffer(i: number, t: string, out: boolean): string;
  /** Variable parameter `v`, the `at`-th parameter overall. */
  variable(v: string, at: number): string;
  /** Parameters after the buffers and variables (thread position builtins). */
  readonly builtins: readonly string[];
  /** Separator between parameters. */
  readonly paramSep: string;
  /** The kernel's opening, without its parameter list's parentheses. */
  head(name: string): string;
  /** The global thread id statement, 32-bit or 64-bit. */
  gid(wide: boolean): string;
  /** Block-tree reductions: the statement declaring `gid` as the block's index, 32-bit or 64-bit. */
  blockGid(wide: boolean): string;
  /** The statement declaring the int `bg_t`, the thread's index in its block. */
  readonly lane: string;
  /** The declaration of an `n`-element array of `t` shared by the block's threads. */
  shared(t: string, name: string, n: number): string;
  /** A barrier of the block's threads that orders their shared-memory reads and writes. */
  readonly barrier: string;
}

const C_MATH: MathNames = {
  exp: "expf", log: "logf", sqrt: "sqrtf", sin: "sinf", cos: "cosf", tanh: "tanhf", pow: "powf", abs: "fabsf",
  exp2: "exp2f", log2: "log2f", tan: "tanf", atan: "atanf", asin: "asinf", acos: "acosf", sinh: "sinhf", cosh: "coshf",
  floor: "floorf", ceil: "ceilf", trunc: "truncf", rint: "rintf", fmod: "fmodf", asinh: "asinhf", acosh: "acoshf", atanh: "atanhf",
};
const MSL_MATH: MathNames = {
  exp: "exp", log: "log", sqrt: "sqrt", sin: "sin", cos: "cos", tanh: "tanh", pow: "pow", abs: "fabs",
  exp2: "exp2", log2: "log2", tan: "tan", atan: "atan", asin: "asin", acos: "acos", sinh: "sinh", cosh: "cosh",
  floor: "floor", ceil: "ceil", trunc: "trunc", rint: "rint", fmod: "fmod", asinh: "asinh", acosh: "acosh", atanh: "atanh",
};


function i64Helpers(fn: string, L: string): string {
  return [
    `${fn} ${L} bg_lneg(${L} a) { return -a; }`,
    `${fn} ${L} bg_ldiv(${L} a, ${L} b) { return b == 0 ? (${L})0 : b == -1 ? -a : a / b; }`,
    `${fn} ${L} bg_lmod(${L} a, ${L} b) { return (b == 0 || b == -1) ? (${L})0 : a % b; }`,
    `${fn} ${L} bg_lpow(${L} a, ${L} b) { if (b < 0) return a == 1 ? (${L})1 : a == -1 ? ((b & 1) ? (${L})-1 : (${L})1) : (${L})0; ${L} r = 1; while (b > 0) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }`,
  ].join("\n");
}

// C: float16 and bfloat16 as their bits (uint16_t), converted with integer operations (no
// compiler extension): float16 to nearest even with subnormals, overflow to inf and NaN kept quiet;
// the float16 load has no branch (selects only), so a loop reading float16 weights vectorizes.
const C_HALF = `static inline float bg_ld_f16(uint16_t h) { uint32_t o = (uint32_t)(h & 0x7fffu) << 13, e = o & 0x0f800000u, u; float f, g; o += e == 0x0f800000u ? 0x70000000u : 0x38000000u; o += e ? 0u : 0x00800000u; memcpy(&f, &o, 4); g = f - 6.103515625e-05f; f = e ? f : g; memcpy(&u, &f, 4); u |= (uint32_t)(h & 0x8000u) << 16; memcpy(&f, &u, 4); return f; }
static inline uint16_t bg_st_f16(float f) { uint32_t u, a, s; memcpy(&u, &f, 4); s = (u >> 16) & 0x8000u; a = u & 0x7fffffffu; if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu)); if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); if (a >= 0x38800000u) return (uint16_t)(s | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13)); { float v; memcpy(&v, &a, 4); v = (v * 16777216.0f + 8388608.0f) - 8388608.0f; return (uint16_t)(s | (uint32_t)v); } }
static inline float bg_rnd_f16(float x) { return bg_ld_f16(bg_st_f16(x)); }`;
const C_BF16 = `static inline float bg_ld_bf16(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t bg_st_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float bg_rnd_bf16(float x) { return bg_ld_bf16(bg_st_bf16(x)); }`;

// CUDA: the same bits. A float16 load is the C dialect's integer code on the device too, not
// cvt.f32.f16: on an H200 cvt turned every NaN into 0x7fffffff, where the CPU backend and the
// simulator keep the payload (the first GPU run's one wrong value); a store rounds with cvt (to
// nearest even, as __float2half_rn) on the device, with integer code elsewhere (the driver
// simulator's host twins); bfloat16 by integer code everywhere (cvt to bf16 needs sm_80).
const CUDA_HALF = `static __device__ __forceinline__ float bg_ld_f16(unsigned short h) {
  unsigned int o = (unsigned int)(h & 0x7fffu) << 13, e = o & 0x0f800000u; float f, g; o += e == 0x0f800000u ? 0x70000000u : 0x38000000u; o += e ? 0u : 0x00800000u; f = __uint_as_float(o); g = f - 6.103515625e-05f; f = e ? f : g; return __uint_as_float(__float_as_uint(f) | ((unsigned int)(h & 0x8000u) << 16));
}
static __device__ __forceinline__ unsigned short bg_st_f16(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned int u = __float_as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu; if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu)); if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u); if (a >= 0x38800000u) return (unsigned short)(s | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13)); { float v = (__uint_as_float(a) * 16777216.0f + 8388608.0f) - 8388608.0f; return (unsigned short)(s | (unsigned int)v); }
#endif
}
static __device__ __forceinline__ float bg_rnd_f16(float x) { return bg_ld_f16(bg_st_f16(x)); }`;
const CUDA_BF16 = `static __device__ __forceinline__ float bg_ld_bf16(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }
static __device__ __forceinline__ unsigned short bg_st_bf16(float f) { unsigned int u = __float_as_uint(f); if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static __device__ __forceinline__ float bg_rnd_bf16(float x) { return bg_ld_bf16(bg_st_bf16(x)); }`;

/** C11 for the CPU backend, with shim/bungpu_cpu.h. */
export const cDialect = {
  lang: "c",
  shape: "tiles",
  nan: "NAN",
  inf: "INFINITY",
  negInf: "(-INFINITY)",
  bool: (x: string) => `(${x})`,
  fmax: "bg_fmaxf",
  fmin: "bg_fminf",
  // tanh, exp: the prelude's vectorizable bg_tanhf, bg_expf (libm's are a call per element)
  math: { ...C_MATH, tanh: "bg_tanhf", exp: "bg_expf" },
  int64: "int64_t",
  index64: false,
  u32: "uint32_t",
  helperQualifiers: "static inline",
  preludeHead: `#include "bungpu_cpu.h"\n#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n`,
  hostVectorHelpers: true,
  gpu: null,
  types: {
    float32: { store: "float", compute: "float" }, int32: { store: "int", compute: "int" },
    float16: { store: "uint16_t", compute: "float" }, bfloat16: { store: "uint16_t", compute: "float" },
    int8: { store: "int8_t", compute: "int8_t" }, uint8: { store: "uint8_t", compute: "uint8_t" },
    bool: { store: "uint8_t", compute: "uint8_t" }, int64: { store: "int64_t", compute: "int64_t" },
  },
  dtypeHelpers: {
    f16: C_HALF,
    bf16: C_BF16,
    i64: i64Helpers("static inline", "int64_t"),
    bc32: `static inline int bg_bc_f32_i32(float x) { int r; memcpy(&r, &x, 4); return r; }\nstatic inline float bg_bc_i32_f32(int x) { float r; memcpy(&r, &x, 4); return r; }`,
    bc16: `static inline float bg_bc_f16_bf16(float x) { return bg_ld_bf16(bg_st_f16(x)); }\nstatic inline float bg_bc_bf16_f16(float x) { return bg_ld_f16(bg_st_bf16(x)); }`,
  },
} as const satisfies Dialect;

/** CUDA C (compiled by NVRTC as C++). */
export const cudaDialect = {
  lang: "cuda",
  shape: "threads",
  nan: "__int_as_float(0x7fffffff)",
  inf: "__int_as_float(0x7f800000)",
  negInf: "__int_as_float(0xff800000)",
  bool: (x: string) => `(${x})`,
  fmax: null,
  fmin: null,
  math: C_MATH,
  int64: "long long",
  index64: true,
  u32: "unsigned int",
  helperQualifiers: "static __device__ __forceinline__",
  preludeHead: "",
  hostVectorHelpers: false,
  gpu: {
    buffer: (i, t, out) => `${out ? "" : "const "}${t}* __restrict__ b${i}`,
    variable: (v) => `int v_${v}`,
    builtins: [],
    paramSep: ", ",
    head: (name) => `extern "C" __global__ void ${name}`,
    gid: (wide) => (wide ? "const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;" : "const int gid = (int)(blockIdx.x * blockDim.x + threadIdx.x);"),
    blockGid: (wide) => (wide ? "const long long gid = (long long)blockIdx.x;" : "const int gid = (int)blockIdx.x;"),
    lane: "const int bg_t = (int)threadIdx.x;",
    shared: (t, name, n) => `__shared__ ${t} ${name}[${n}];`,
    barrier: "__syncthreads();",
  },
  // float16 and bfloat16 stored as their bits (unsigned short, the layout of __half and
  // __nv_bfloat16), arithmetic in float: no cuda_fp16.h / cuda_bf16.h, which NVRTC does not carry
  // (a machine with only the driver and NVRTC has no toolkit headers to include)
  types: {
    float32: { store: "float", compute: "float" }, int32: { store: "int", compute: "int" },
    float16: { store: "unsigned short", compute: "float" }, bfloat16: { store: "unsigned short", compute: "float" },
    int8: { store: "signed char", compute: "signed char" }, uint8: { store: "unsigned char", compute: "unsigned char" },
    bool: { store: "unsigned char", compute: "unsigned char" }, int64: { store: "long long", compute: "long long" },
  },
  dtypeHelpers: {
    f16: CUDA_HALF,
    bf16: CUDA_BF16,
    i64: i64Helpers("static __device__ __forceinline__", "long long"),
    bc32: `static __device__ __forceinline__ int bg_bc_f32_i32(float x) { return __float_as_int(x); }\nstatic __device__ __forceinline__ float bg_bc_i32_f32(int x) { return __int_as_float(x); }`,
    bc16: `static __device__ __forceinline__ float bg_bc_f16_bf16(float x) { return bg_ld_bf16(bg_st_f16(x)); }\nstatic __device__ __forceinline__ float bg_bc_bf16_f16(float x) { return bg_ld_f16(bg_st_bf16(x)); }`,
  },
} as const satisfies Dialect;

/** The Metal Shading Language. */
export const metalDialect = {
  lang: "metal",
  shape: "threads",
  nan: "NAN",
  inf: "INFINITY",
  negInf: "(-INFINITY)",
  bool: (x: string) => `((int)(${x}))`,
  fmax: null,
  fmin: null,
  math: MSL_MATH,
  int64: "long",
  index64: true,
  u32: "unsigned int",
  helperQualifiers: "static inline",
  preludeHead: "#include <metal_stdlib>\nusing namespace metal;\n",
  hostVectorHelpers: false,
  gpu: {
    buffer: (i, t, out) => `${out ? "device " : "const device "}${t}* b${i} [[buffer(${i})]]`,
    variable: (v, at) => `constant int& v_${v} [[buffer(${at})]]`,
    builtins: ["uint3 bg_tgid [[threadgroup_position_in_grid]]", "uint3 bg_tid [[thread_position_in_threadgroup]]", "uint3 bg_tpg [[threads_per_threadgroup]]"],
    paramSep: ",\n    ",
    head: (name) => `kernel void ${name}`,
    gid: (wide) => (wide ? "const long gid = (long)bg_tgid.x * bg_tpg.x + bg_tid.x;" : "const int gid = (int)(bg_tgid.x * bg_tpg.x + bg_tid.x);"),
    blockGid: (wide) => (wide ? "const long gid = (long)bg_tgid.x;" : "const int gid = (int)bg_tgid.x;"),
    lane: "const int bg_t = (int)bg_tid.x;",
    shared: (t, name, n) => `threadgroup ${t} ${name}[${n}];`,
    barrier: "threadgroup_barrier(mem_flags::mem_threadgroup);",
  },
  // half and bfloat (MSL 3.1) in buffers; arithmetic in float
  types: {
    float32: { store: "float", compute: "float" }, int32: { store: "int", compute: "int" },
    float16: { store: "half", compute: "float" }, bfloat16: { store: "bfloat", compute: "float" },
    int8: { store: "char", compute: "char" }, uint8: { store: "uchar", compute: "uchar" },
    bool: { store: "uchar", compute: "uchar" }, int64: { store: "long", compute: "long" },
  },
  dtypeHelpers: {
    f16: `static inline float bg_ld_f16(half x) { return float(x); }\nstatic inline half bg_st_f16(float x) { return half(x); }\nstatic inline float bg_rnd_f16(float x) { return float(half(x)); }`,
    bf16: `static inline float bg_ld_bf16(bfloat x) { return float(x); }\nstatic inline bfloat bg_st_bf16(float x) { return bfloat(x); }\nstatic inline float bg_rnd_bf16(float x) { return float(bfloat(x)); }`,
    i64: i64Helpers("static inline", "long"),
    bc32: `static inline int bg_bc_f32_i32(float x) { return as_type<int>(x); }\nstatic inline float bg_bc_i32_f32(int x) { return as_type<float>(x); }`,
    bc16: `static inline float bg_bc_f16_bf16(float x) { return float(as_type<bfloat>(half(x))); }\nstatic inline float bg_bc_bf16_f16(float x) { return float(as_type<half>(bfloat(x))); }`,
  },
} as const satisfies Dialect;

/** Every dialect by its language name: what codegen's `Lang` is derived from. */
export const dialects = { c: cDialect, cuda: cudaDialect, metal: metalDialect } as const;
export type Lang = keyof typeof dialects;
