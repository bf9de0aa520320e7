// References for collectives (test/communicator.test.ts and its fixture): each rank's data made
// from a seed, and what every collective must produce, computed the way the definition says:
// ranks combined in order 0..n-1, float32 in float32 steps, float16 and bfloat16 in float32 then
// rounded once, integers wrapping, avg = sum / n (integers truncating).
import type { CollectiveDtype, ReduceOp } from "../src";
import { rng } from "./helpers";

export const DTYPES: CollectiveDtype[] = ["float32", "float16", "bfloat16", "int32", "int8", "uint8", "int64", "float64", "uint32", "uint64"];
export const OPS: ReduceOp[] = ["sum", "prod", "max", "min", "avg"];

/** An element as the reference handles it: number, or bigint for 64-bit integers. */
type V = number | bigint;

const SIZE: Record<CollectiveDtype, number> = { int8: 1, uint8: 1, int32: 4, uint32: 4, int64: 8, uint64: 8, float16: 2, float32: 4, float64: 8, bfloat16: 2 };
export const sizeOf = (t: CollectiveDtype) => SIZE[t];

const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
const f16 = new Float16Array(1), u16 = new Uint16Array(f16.buffer);
const bf16ToF = (b: number) => ((u32[0] = b << 16), f32[0]!);
const fToBf16 = (v: number) => {
  f32[0] = v;
  const b = u32[0]!;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
};
const h16ToF = (b: number) => ((u16[0] = b), f16[0]!);
const fToH16 = (v: number) => ((f16[0] = v), u16[0]!);

/** The typed array of `t` over `bytes` (halves as their 16-bit patterns). */
export function view(t: CollectiveDtype, bytes: Uint8Array): ArrayLike<V> & { [i: number]: V } {
  const b = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  switch (t) {
    case "int8": return new Int8Array(b);
    case "uint8": return new Uint8Array(b);
    case "int32": return new Int32Array(b);
    case "uint32": return new Uint32Array(b);
    case "int64": return new BigInt64Array(b);
    case "uint64": return new BigUint64Array(b);
    case "float32": return new Float32Array(b);
    case "float64": return new Float64Array(b);
    case "float16": case "bfloat16": return new Uint16Array(b);
  }
}

/** `count` stored elements of type `t` for (seed): halves as bit patterns. */
export function data(t: CollectiveDtype, count: number, seed: number): Uint8Array {
  const r = rng(seed * 7919 + 17);
  const out = view(t, new Uint8Array(count * SIZE[t]));
  for (let i = 0; i < count; i++) {
    const u = r(), w = r();
    const small = ((u >>> 8) / 16777216) * 8 - 4; // [-4, 4)
    switch (t) {
      case "int8": out[i] = (u & 0xff) - 128; break;
      case "uint8": out[i] = u & 0xff; break;
      case "int32": out[i] = u | 0; break;
      case "uint32": out[i] = u >>> 0; break;
      case "int64": out[i] = BigInt.asIntN(64, (BigInt(u) << 32n) | BigInt(w)); break;
      case "uint64": out[i] = (BigInt(u) << 32n) | BigInt(w); break;
      case "float32": out[i] = Math.fround(small); break;
      case "float64": out[i] = small + w / 2 ** 40; break;
      case "float16": out[i] = fToH16(small); break;
      case "bfloat16": out[i] = fToBf16(small); break;
    }
  }
  return new Uint8Array((out as unknown as { buffer: ArrayBuffer }).buffer);
}

function wrapInt(t: CollectiveDtype, v: V): V {
  switch (t) {
    case "int8": return ((Number(v) << 24) >> 24);
    case "uint8": return Number(v) & 0xff;
    case "int32": return Number(v) | 0;
    case "uint32": return Number(v) >>> 0;
    case "int64": return BigInt.asIntN(64, v as bigint);
    case "uint64": return BigInt.asUintN(64, v as bigint);
    default: return v;
  }
}

function combine(t: CollectiveDtype, op: ReduceOp, a: V, b: V): V {
  const big = t === "int64" || t === "uint64";
  const float = t === "float32" || t === "float64" || t === "float16" || t === "bfloat16";
  const round = t === "float64" ? (x: number) => x : Math.fround;
  switch (op) {
    case "sum":
    case "avg":
      if (float) return round((a as number) + (b as number));
      return wrapInt(t, big ? (a as bigint) + (b as bigint) : (a as number) + (b as number));
    case "prod":
      if (float) return round((a as number) * (b as number));
      if (big) return wrapInt(t, (a as bigint) * (b as bigint));
      return wrapInt(t, t === "int32" || t === "uint32" ? Math.imul(a as number, b as number) : (a as number) * (b as number));
    case "max": return b > a ? b : a;
    case "min": return b < a ? b : a;
  }
}

/** op over ranks of the stored element values `xs` (rank order), as stored. */
export function reduceElems(t: CollectiveDtype, op: ReduceOp, xs: V[]): V {
  const load = (x: V): V => (t === "float16" ? h16ToF(x as number) : t === "bfloat16" ? bf16ToF(x as number) : x);
  let acc = load(xs[0]!);
  for (let r = 1; r < xs.length; r++) acc = combine(t === "float16" || t === "bfloat16" ? "float32" : t, op, acc, load(xs[r]!));
  const n = xs.length;
  if (op === "avg") {
    if (t === "int64" || t === "uint64") acc = wrapInt(t, (acc as bigint) / BigInt(n));
    else if (t === "float64") acc = (acc as number) / n;
    else if (t === "float32" || t === "float16" || t === "bfloat16") acc = Math.fround((acc as number) / n);
    else acc = wrapInt(t, Math.trunc((acc as number) / n));
  }
  if (t === "float16") return fToH16(acc as number);
  if (t === "bfloat16") return fToBf16(acc as number);
  return acc;
}

/** Indices where `got` differs from `want` (as stored), at most `max` of them, described. */
export function differences(t: CollectiveDtype, got: Uint8Array, want: V[], max = 3): string[] {
  const g = view(t, got);
  const out: string[] = [];
  if (g.length < want.length) return [`${g.length} elements, want ${want.length}`];
  for (let i = 0; i < want.length && out.length < max; i++) if (g[i] !== want[i]) out.push(`[${i}] ${g[i]} != ${want[i]}`);
  return out;
}
