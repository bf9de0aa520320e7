// Test helpers: seeded random data and GpuError assertions.
import { expect } from "bun:test";
import { GpuError } from "../src";

/** xorshift128+ style generator: deterministic per seed. */
export function rng(seed = 1): () => number {
  let a = seed >>> 0 || 1, b = 0x9e3779b9, c = 0x243f6a88, d = 0xb7e15162;
  return () => {
    const t = a ^ (a << 11);
    a = b; b = c; c = d;
    d = (d ^ (d >>> 19) ^ (t ^ (t >>> 8))) >>> 0;
    return d;
  };
}

export function randomBytes(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n);
  const r = rng(seed);
  const words = Math.floor(n / 4);
  const u32 = new Uint32Array(out.buffer, 0, words);
  for (let i = 0; i < words; i++) u32[i] = r();
  for (let i = words * 4; i < n; i++) out[i] = r() & 0xff;
  return out;
}

export function randomFloats(n: number, seed = 1, lo = -1, hi = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + ((r() >>> 8) / 16777216) * (hi - lo);
  return out;
}

function checkGpuError(caught: unknown, code: number, fragment?: string | RegExp): GpuError {
  expect(caught).toBeInstanceOf(GpuError);
  const g = caught as GpuError;
  expect(g.code).toBe(code);
  if (fragment) expect(g.message).toMatch(fragment);
  return g;
}

/** Expect `fn` to throw a GpuError with `code` (and optionally a message fragment). */
export function expectGpuError(fn: () => unknown, code: number, fragment?: string | RegExp): GpuError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  return checkGpuError(caught, code, fragment);
}

/** The same for a function whose promise must reject. */
export async function expectGpuErrorAsync(fn: () => Promise<unknown>, code: number, fragment?: string | RegExp): Promise<GpuError> {
  let caught: unknown;
  try {
    await fn();
  } catch (e) {
    caught = e;
  }
  return checkGpuError(caught, code, fragment);
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  return Buffer.compare(a, b) === 0;
}

/** Same length, and no element further than `tol` from the reference (an absolute tolerance). */
export function expectWithin(got: ArrayLike<number>, want: ArrayLike<number>, tol: number): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
  expect(worst).toBeLessThanOrEqual(tol);
}
