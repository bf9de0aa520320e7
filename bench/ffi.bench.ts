// Issue 2: the cost of one FFI crossing against the same call looped in C, and copy bandwidth
// host→device→host against the C memcpy bound (device-to-device on the CPU backend is memcpy).
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { N } from "../ffi/native";
import { Device } from "../src";

const dev = Device.open("cpu");
const ITER = 1000;

group("one FFI crossing (1000 calls)", () => {
  summary(() => {
    bench("C loop: bg_noop ×1000 inside the shim", () => do_not_optimize(N.bg_bench_noop_loop(ITER))).baseline(true);
    bench("TypeScript: bg_noop ×1000", () => {
      let acc = 0;
      for (let i = 0; i < ITER; i++) acc |= N.bg_noop();
      do_not_optimize(acc);
    });
  });
});

const MB = 1 << 20;
for (const size of [64 * 1024, 4 * MB, 64 * MB]) {
  const host = new Uint8Array(size).fill(7);
  const back = new Uint8Array(size);
  const a = dev.alloc(size);
  const b = dev.alloc(size);
  group(`copies of ${size >= MB ? `${size / MB} MiB` : `${size / 1024} KiB`}`, () => {
    summary(() => {
      bench("C memcpy bound: device→device", () => a.copyTo(b)).baseline(true);
      bench("host→device (Buffer.write)", () => a.write(host));
      bench("device→host (Buffer.read)", () => b.read(back));
    });
  });
}

await run({ format: process.env.BENCH_JSON ? "json" : "mitata" });
