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
  // tanh: the prelude's vectorizable bg_tanhf (libm's tanhf is a call per element)
  math: { ...C_MATH, tanh: "bg_tanhf" },
  int64: "int64_t",
  index64: false,
  u32: "uint32_t",
  helperQualifiers: "static inline",
  preludeHead: `#include "bungpu_cpu.h"\n#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n`,
  hostVectorHelpers: true,
  gpu: null,
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
} as const satisfies Dialect;

/** Every dialect by its language name: what codegen's `Lang` is derived from. */
export const dialects = { c: cDialect, cuda: cudaDialect, metal: metalDialect } as const;
export type Lang = keyof typeof dialects;
