// A tensor plan's intermediates come from the device's default memory pool: the pool counts them
// while the plan lives, gives them back when it is disposed, and a later plan reuses the memory.
import { expect, test } from "bun:test";
import { Device } from "../src";
import { Tensor } from "../src/tensor";
import { seededRandom } from "../src/tensor/reference";

test("a plan's arena is pool memory: counted while the plan lives, reused by the next plan, results right", () => {
  const dev = Device.open("cpu");
  const pool = dev.defaultPool;
  const keep = pool.releaseThreshold;
  pool.releaseThreshold = 64 << 20; // keep freed blocks, so the reuse shows
  try {
    const r = seededRandom(3);
    const xs = Float32Array.from({ length: 32 * 48 }, () => r() - 0.5);
    const ws = Float32Array.from({ length: 48 * 64 }, () => r() - 0.5);
    const w2 = Float32Array.from({ length: 64 * 16 }, () => r() - 0.5);
    const build = () => Tensor.from(xs, [32, 48]).matmul(Tensor.from(ws, [48, 64])).relu().matmul(Tensor.from(w2, [64, 16])).sum(1);
    // float64 reference
    const want: number[] = [];
    for (let i = 0; i < 32; i++) {
      const h = new Array<number>(64).fill(0);
      for (let j = 0; j < 64; j++) {
        for (let k = 0; k < 48; k++) h[j]! += xs[i * 48 + k]! * ws[k * 64 + j]!;
        h[j] = Math.max(0, h[j]!);
      }
      let s = 0;
      for (let c = 0; c < 16; c++) for (let j = 0; j < 64; j++) s += h[j]! * w2[j * 16 + c]!;
      want.push(s);
    }
    const used0 = pool.stats.used;
    const p1 = build().prepare({ device: dev, fusion: false, planCache: false });
    const arena = p1.intermediateBytes;
    expect(arena).toBeGreaterThan(0);
    expect(pool.stats.used - used0).toBeGreaterThanOrEqual(arena);
    p1.execute();
    const got = p1.readOutput(0);
    want.forEach((w, i) => expect(Math.abs(got[i]! - w)).toBeLessThan(1e-4 * (1 + Math.abs(w))));
    p1.dispose();
    expect(pool.stats.used).toBe(used0);
    const reserved = pool.stats.reserved;
    const p2 = build().prepare({ device: dev, fusion: false, planCache: false });
    expect(pool.stats.reserved).toBe(reserved); // the freed arena served the second plan
    p2.execute();
    const again = p2.readOutput(0);
    want.forEach((w, i) => expect(Math.abs(again[i]! - w)).toBeLessThan(1e-4 * (1 + Math.abs(w))));
    p2.dispose();
    expect(pool.stats.used).toBe(used0);
  } finally {
    pool.releaseThreshold = keep;
    pool.trim(0);
  }
});
