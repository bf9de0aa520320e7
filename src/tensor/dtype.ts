// The tensor dtypes: their sizes, promotion, rounding to each on store, and the typed arrays the
// host side reads and writes. Plain data and functions (no imports), so the
// IR, the interpreter, the reference, the plan's I/O and the Tensor class share one table.
//
// Promotion (numpy's and tinygrad's lattice, with no int16 / uint32 / float64 here):
//
//   bool < int8, uint8 < int32 < int64 < float16, bfloat16 < float32
//
//   - equal dtypes: that dtype;
//   - int8 with uint8: int32 (numpy gives int16, which this project does not have);
//   - float16 with bfloat16: float32;
//   - otherwise the larger of the two in the order above (an integer with a float: the float).
//
// JS numbers are "weak" scalars: an integer number keeps the tensor's dtype (bool: int32, see
// below), a non-integer number with an integer or bool tensor gives float32, and any number with
// a float tensor keeps its dtype (so half stays half).
//
// Arithmetic (add, sub, mul, div, pow, mod, fmod, unary math) on bool operands first promotes the
// bools to int32 (True + True = 2; numpy's bool + bool is a logical or, which surprises more than
// it helps); max and min of two bools stay bool (or / and), comparisons of any dtypes give bool,
// and where() keeps its branches' promoted dtype. Sums and products of bool, int8 and uint8 give
// int32 (tinygrad's accumulation dtype), of the other dtypes their own; max and min keep the dtype.

/** The element types. */
export type DType = "float32" | "int32" | "float16" | "bfloat16" | "int8" | "uint8" | "bool" | "int64";

/** Every dtype, in the order documented above (also the order tests and errors list them). */
export const DTYPES: readonly DType[] = ["bool", "int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32"];

/** Bytes per element. */
export const ITEMSIZE: Readonly<Record<DType, number>> = {
  bool: 1, int8: 1, uint8: 1, int32: 4, int64: 8, float16: 2, bfloat16: 2, float32: 4,
};

export function isDType(x: unknown): x is DType {
  return typeof x === "string" && (DTYPES as readonly string[]).includes(x);
}

export function isFloat(d: DType): boolean {
  return d === "float32" || d === "float16" || d === "bfloat16";
}

/** float16 or bfloat16: computed in float32, rounded to the dtype after every operation. */
export function isHalf(d: DType): boolean {
  return d === "float16" || d === "bfloat16";
}

const RANK: Readonly<Record<DType, number>> = { bool: 0, int8: 1, uint8: 1, int32: 2, int64: 3, float16: 4, bfloat16: 4, float32: 5 };

/** The dtype two operands promote to (the table at the top of this file). */
export function promoteTypes(a: DType, b: DType): DType {
  if (a === b) return a;
  const ra = RANK[a], rb = RANK[b];
  if (ra === rb) return ra === 1 ? "int32" : "float32"; // int8 with uint8, float16 with bfloat16
  return ra > rb ? a : b;
}

/** The dtype of `t op x` for a JS number x (a weak scalar). */
export function promoteScalar(t: DType, x: number): DType {
  if (isFloat(t)) return t;
  if (!Number.isInteger(x)) return "float32";
  return t;
}

// ---- rounding ---------------------------------------------------------------------------------

/** x rounded to a binary float with `p` significand bits and minimum normal exponent `emin`, ties to even; past `emax` ±Infinity. */
function roundFloat(x: number, p: number, emin: number, emax: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  const ulp = 2 ** (Math.max(e, emin) - (p - 1));
  const q = a / ulp; // exact: a power-of-two scaling
  const f = Math.floor(q), d = q - f;
  const r = (d < 0.5 ? f : d > 0.5 ? f + 1 : f % 2 === 0 ? f : f + 1) * ulp;
  const max = (2 - 2 ** (1 - p)) * 2 ** emax;
  const out = r > max ? Infinity : r;
  return x < 0 ? -out : out;
}

const f16round: ((x: number) => number) | undefined = (Math as unknown as { f16round?: (x: number) => number }).f16round;

/** x as the dtype stores it: float rounding to nearest even (inf and NaN kept), integer wrap-around, bool 0/1. */
export function roundTo(d: DType, x: number): number {
  switch (d) {
    case "float32": return Math.fround(x);
    case "float16": return f16round ? f16round(x) : roundFloat(x, 11, -14, 15);
    case "bfloat16": return roundFloat(x, 8, -126, 127);
    case "int32": return x | 0;
    case "int8": return (x << 24) >> 24;
    case "uint8": return x & 255;
    case "bool": return x !== 0 ? 1 : 0;
    case "int64": return x; // exact only within ±2^53 on the host (JS numbers)
  }
}

// ---- bits of the 16-bit floats ----------------------------------------------------------------

const cvBuf = new ArrayBuffer(8);
const cvF32 = new Float32Array(cvBuf);
const cvU32 = new Uint32Array(cvBuf);

/** The float16 bits of x (rounded to nearest even; NaN stays a quiet NaN with its sign). */
export function f16Bits(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  if (Number.isNaN(x)) return 0x7e00 | (signBitOf(x) ? 0x8000 : 0);
  const v = Math.abs(roundTo("float16", x));
  if (v === Infinity) return sign | 0x7c00;
  if (v === 0) return sign;
  if (v < 2 ** -14) return sign | Math.round(v / 2 ** -24); // subnormal: exact multiple
  let e = Math.floor(Math.log2(v));
  if (2 ** e > v) e--;
  else if (2 ** (e + 1) <= v) e++;
  const m = Math.round((v / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | m;
}

/** The value of float16 bits. */
export function f16Value(b: number): number {
  const s = b & 0x8000 ? -1 : 1, e = (b >> 10) & 31, m = b & 1023;
  if (e === 31) return m ? NaN : s * Infinity;
  if (e === 0) return s * m * 2 ** -24;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function signBitOf(x: number): boolean {
  cvF32[0] = x;
  return (cvU32[0]! >>> 31) === 1;
}

/** The bfloat16 bits of x (through float32, rounded to nearest even; NaN stays a quiet NaN). */
export function bf16Bits(x: number): number {
  const r = roundTo("bfloat16", x);
  cvF32[0] = Number.isNaN(r) ? x : r;
  const u = cvU32[0]!;
  if (Number.isNaN(r)) return ((u >>> 16) | 0x40) & 0xffff;
  return u >>> 16; // r is a bfloat16 value: its low 16 float32 bits are zero
}

/** The value of bfloat16 bits. */
export function bf16Value(b: number): number {
  cvU32[0] = (b & 0xffff) << 16;
  return cvF32[0]!;
}

// ---- host arrays ------------------------------------------------------------------------------

/** Whether this runtime has Float16Array (Bun 1.4.5 does): float16 data is one when it exists. */
export const HAS_FLOAT16_ARRAY = typeof (globalThis as { Float16Array?: unknown }).Float16Array === "function";
type F16Ctor = new (n: number | ArrayBufferLike, byteOffset?: number, length?: number) => ArrayLike<number> & { buffer: ArrayBufferLike; length: number };
const Float16Ctor = (globalThis as unknown as { Float16Array?: F16Ctor }).Float16Array;

/**
 * A tensor's host data: the natural typed array of its dtype.
 * float32 Float32Array · int32 Int32Array · float16 Float16Array where the runtime has it, else
 * Uint16Array of the bits · bfloat16 Uint16Array of the bits · int8 Int8Array · uint8 Uint8Array ·
 * bool Uint8Array of 0 / 1 · int64 BigInt64Array.
 */
export type HostArray = Float32Array | Int32Array | Float16Array | Uint16Array | Int8Array | Uint8Array | BigInt64Array;

/**
 * How reads (Tensor.toArray, ExecutionPlan.readOutput / run) are typed by default: the float32 and
 * int32 arrays, the common case. The array really returned is the dtype's HostArray; a caller
 * reading another dtype names it (`t.toArray<BigInt64Array>()`) or narrows with instanceof.
 */
export type DefaultHostArray = Float32Array | Int32Array;

/**
 * The host array each dtype reads as, for reads that name their dtype (`plan.readOutput(0,
 * "float16")`, `t.toArray("int64")`): the type follows the dtype and the read checks it at run time.
 * float16 is Float16Array, which every Bun this package supports has.
 */
export interface HostArrayOfDType {
  float32: Float32Array;
  int32: Int32Array;
  float16: Float16Array;
  bfloat16: Uint16Array;
  int8: Int8Array;
  uint8: Uint8Array;
  bool: Uint8Array;
  int64: BigInt64Array;
}
export type HostArrayOf<D extends DType> = HostArrayOfDType[D];

/** The name of the typed array class of `d` (for messages and docs). */
export function hostArrayName(d: DType): string {
  switch (d) {
    case "float32": return "Float32Array";
    case "int32": return "Int32Array";
    case "float16": return HAS_FLOAT16_ARRAY ? "Float16Array" : "Uint16Array (float16 bits)";
    case "bfloat16": return "Uint16Array (bfloat16 bits)";
    case "int8": return "Int8Array";
    case "uint8": return "Uint8Array";
    case "bool": return "Uint8Array (0 / 1)";
    case "int64": return "BigInt64Array";
  }
}

/** A zeroed host array of `n` elements of `d`. */
export function hostArray(d: DType, n: number | ArrayBuffer): HostArray {
  switch (d) {
    case "float32": return new Float32Array(n as number);
    case "int32": return new Int32Array(n as number);
    case "float16": return Float16Ctor ? (new Float16Ctor(n as number) as unknown as HostArray) : new Uint16Array(n as number);
    case "bfloat16": return new Uint16Array(n as number);
    case "int8": return new Int8Array(n as number);
    case "uint8": case "bool": return new Uint8Array(n as number);
    case "int64": return new BigInt64Array(n as number);
  }
}

/**
 * A host array of `d` over `length` elements of `ab` from `byteOffset` (no copy): for copying
 * between memory and a caller's array of the same type without asking the caller's array for its
 * `.buffer` (which makes the engine give a small array a buffer of its own, a slow path).
 */
export function hostView(d: DType, ab: ArrayBuffer, byteOffset: number, length: number): HostArray {
  switch (d) {
    case "float32": return new Float32Array(ab, byteOffset, length);
    case "int32": return new Int32Array(ab, byteOffset, length);
    case "float16": return Float16Ctor ? (new Float16Ctor(ab, byteOffset, length) as unknown as HostArray) : new Uint16Array(ab, byteOffset, length);
    case "bfloat16": return new Uint16Array(ab, byteOffset, length);
    case "int8": return new Int8Array(ab, byteOffset, length);
    case "uint8": case "bool": return new Uint8Array(ab, byteOffset, length);
    case "int64": return new BigInt64Array(ab, byteOffset, length);
  }
}

/** Whether `a` is the natural host array of `d` (its exact class; Uint8Array is uint8 and bool). */
export function isHostArrayOf(d: DType, a: unknown): boolean {
  if (!ArrayBuffer.isView(a)) return false;
  const c = (a as object).constructor;
  switch (d) {
    case "float32": return c === Float32Array;
    case "int32": return c === Int32Array;
    case "float16": return Float16Ctor ? c === Float16Ctor : c === Uint16Array;
    case "bfloat16": return c === Uint16Array;
    case "int8": return c === Int8Array;
    case "uint8": case "bool": return c === Uint8Array;
    case "int64": return c === BigInt64Array;
  }
}

/** The dtype a typed array means by itself (Uint16Array and Uint8Array are ambiguous: null for Uint16Array, uint8 for Uint8Array). */
export function dtypeOfArray(a: unknown): DType | null {
  if (!ArrayBuffer.isView(a)) return null;
  const c = (a as object).constructor;
  if (c === Float32Array) return "float32";
  if (c === Int32Array) return "int32";
  if (Float16Ctor && c === Float16Ctor) return "float16";
  if (c === Int8Array) return "int8";
  if (c === Uint8Array) return "uint8";
  if (c === BigInt64Array) return "int64";
  return null;
}

/** Element i of host data of `d` as a number (16-bit floats decoded, int64 through Number). */
export function hostGet(d: DType, a: HostArray, i: number): number {
  const v = (a as ArrayLike<number | bigint>)[i]!;
  if (d === "int64") return Number(v);
  if (d === "bfloat16") return bf16Value(v as number);
  if (d === "float16" && !Float16Ctor) return f16Value(v as number);
  return v as number;
}

/** Store number `x` (already of dtype `d`'s values) as element i of host data of `d`. */
export function hostSet(d: DType, a: HostArray, i: number, x: number): void {
  const w = a as unknown as (number | bigint)[];
  if (d === "int64") w[i] = Number.isFinite(x) ? BigInt.asIntN(64, BigInt(Math.trunc(x))) : 0n;
  else if (d === "bfloat16") w[i] = bf16Bits(x);
  else if (d === "float16" && !Float16Ctor) w[i] = f16Bits(x);
  else w[i] = x;
}

/** Host data of `d` as numbers. */
export function hostToNumbers(d: DType, a: HostArray): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = hostGet(d, a, i);
  return out;
}

/** Host data of `d` from numbers: each value rounded (floats) or truncated toward zero and wrapped (integers), bool x != 0. */
export function hostFromNumbers(d: DType, xs: ArrayLike<number>): HostArray {
  const n = xs.length;
  const out = hostArray(d, n);
  for (let i = 0; i < n; i++) {
    const x = xs[i]!;
    switch (d) {
      case "int64": (out as BigInt64Array)[i] = Number.isFinite(x) ? BigInt.asIntN(64, BigInt(Math.trunc(x))) : 0n; break;
      case "bfloat16": (out as Uint16Array)[i] = bf16Bits(x); break;
      case "float16": (out as unknown as number[])[i] = Float16Ctor ? x : f16Bits(x); break;
      case "float32": (out as Float32Array)[i] = x; break;
      case "bool": (out as Uint8Array)[i] = x !== 0 ? 1 : 0; break;
      default: (out as Int32Array)[i] = Number.isFinite(x) ? roundTo(d, Math.trunc(x)) : 0;
    }
  }
  return out;
}

/** A copy of host data (same class). */
export function hostCopy(a: HostArray): HostArray {
  return (a as unknown as { slice(): HostArray }).slice();
}

/** Bytes of a value of `from` reinterpreted as `to` (equal sizes), on numbers as the IR holds them. */
export function bitcastValue(from: DType, to: DType, x: number): number {
  const src = hostFromNumbers(from, [x]);
  const dst = hostArray(to, src.buffer as ArrayBuffer);
  return hostGet(to, dst, 0);
}
