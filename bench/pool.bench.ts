// Issue 14: stream-ordered allocation from a memory pool (Stream.alloc + Buffer.free, the shim's
// bg_mem_alloc_async / bg_mem_free_async) against plain allocation (Device.alloc + dispose,
// bg_mem_alloc / bg_mem_free), for a buffer used by one launch and dropped, as a tensor plan's
// intermediates are. Then allocations per second, one timed run of each. BUNGPU_DEVICE picks the
// device (default: the CPU backend).
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { api } from "../ffi/result";
import { Device, MemoryPool, Program } from "../src";
import { kernelSources } from "../test/kernels";

const dev = Device.open(process.env.BUNGPU_DEVICE ?? "cpu");
const mod = Program.compile(dev, kernelSources, { name: "basic" });
const addScalar = mod.kernel("add_scalar", ["buffer", "f32", "i32"]);
const s = dev.createStream();
const pool = new MemoryPool(dev, { releaseThreshold: Number.MAX_SAFE_INTEGER });
const calls = api(dev.backend);
const ITER = 1000;

for (const bytes of [64 * 1024, 4 * 1024 * 1024]) {
  const label = bytes >= 1 << 20 ? `${bytes >> 20} MiB` : `${bytes >> 10} KiB`;
  group(`${ITER} × allocate ${label}, one launch on it, free; then synchronize`, () => {
    summary(() => {
      bench("plain: Device.alloc + dispose()", () => {
        for (let i = 0; i < ITER; i++) {
          const b = dev.alloc(bytes);
          addScalar.launch(s, { grid: 1, block: 64, args: [b, 1, 64] });
          b.dispose(); // the shim defers the free past the queued launch
        }
        s.synchronize();
      }).baseline(true);
      bench("stream-ordered: stream.alloc + free(stream)", () => {
        for (let i = 0; i < ITER; i++) {
          const b = s.alloc(bytes, { pool });
          addScalar.launch(s, { grid: 1, block: 64, args: [b, 1, 64] });
          b.free(s);
        }
        s.synchronize();
      });
    });
  });
  group(`${ITER} × allocate and free ${label}, the shim calls alone`, () => {
    summary(() => {
      bench("bg_mem_alloc + bg_mem_free", () => {
        const d = dev.handle;
        for (let i = 0; i < ITER; i++) {
          const p = calls.mem_alloc(d, bytes);
          do_not_optimize(p);
          calls.mem_free(d, p);
        }
      }).baseline(true);
      bench("bg_mem_alloc_async + bg_mem_free_async", () => {
        const h = s.handle;
        const ph = pool.handle;
        for (let i = 0; i < ITER; i++) {
          const p = calls.mem_alloc_async(h, ph, bytes);
          do_not_optimize(p);
          calls.mem_free_async(h, p);
        }
      });
    });
  });
}

await run();

// Allocations per second: one timed run of each, 20,000 allocate/free pairs of 64 KiB.
const N = 20_000;
function perSecond(name: string, f: () => void): void {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) f();
  s.synchronize();
  const ms = performance.now() - t0;
  console.log(`${name.padEnd(48)} ${Math.round((N / ms) * 1000).toLocaleString("en-US").padStart(12)} allocations/s`);
}
console.log(`\nallocations per second on ${dev.spec} (64 KiB, allocate + free, ${N.toLocaleString("en-US")} of each):`);
perSecond("plain: Device.alloc + dispose()", () => dev.alloc(65536).dispose());
perSecond("stream-ordered: stream.alloc + free(stream)", () => s.alloc(65536, { pool }).free(s));
const st = pool.stats;
console.log(`pool after the runs: reserved ${st.reserved} B, used ${st.used} B, peak used ${st.usedPeak} B`);

pool.dispose();
s.dispose();
mod.dispose();
dev.dispose();
