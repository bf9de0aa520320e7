// All-reduce across CPU devices (Communicator.initAll, BUNGPU_CPU_DEVICES=4; the bench re-runs
// itself with it when unset): float32 sums over 2 and 4 devices of one process, 1, 16 and 64 MiB
// per rank. Each sample queues one allReduce per rank on its device's default stream and waits for
// every stream. The CPU backend stages each rank's data through one 1 MiB slot per rank per
// round; each rank reduces its 1/n share of the round over every slot, then every rank copies the
// whole result out (three barriers a round). Bandwidth
// is reported as NCCL's tests do: algorithm bandwidth = bytes / time, bus bandwidth = algorithm
// bandwidth × 2(n-1)/n.
//
//   bun run bench/collective.bench.ts
import { bench, do_not_optimize, run, summary } from "mitata";
import type { Buffer, Communicator as CommunicatorT, Device as DeviceT } from "../src";

if (!process.env.BUNGPU_CPU_DEVICES) {
  const r = Bun.spawnSync(["bun", "run", import.meta.path], { env: { ...process.env, BUNGPU_CPU_DEVICES: "4" }, stdout: "inherit", stderr: "inherit" });
  process.exit(r.exitCode ?? 1);
}

const { Communicator, Device } = await import("../src");
const all = [0, 1, 2, 3].map((i) => Device.open(i ? `cpu:${i}` : "cpu"));
const SIZES = [1 << 20, 16 << 20, 64 << 20];

type Setup = { n: number; devs: DeviceT[]; comms: CommunicatorT[]; bufs: Map<number, { x: Buffer; y: Buffer }[]> };
const setups: Setup[] = [2, 4].map((n) => {
  const devs = all.slice(0, n);
  const comms = Communicator.initAll(devs);
  const bufs = new Map(SIZES.map((bytes) => [bytes, devs.map((d) => ({ x: d.alloc(bytes).fill(1, { type: "f32" }), y: d.alloc(bytes).fill(0) }))]));
  return { n, devs, comms, bufs };
});

function allReduce(s: Setup, bytes: number): number {
  const bs = s.bufs.get(bytes)!;
  s.comms.forEach((c, r) => c.allReduce(bs[r]!.x, bs[r]!.y));
  for (const d of s.devs) d.defaultStream.synchronize();
  return bs.length;
}

for (const s of setups)
  summary(() => {
    for (const bytes of SIZES) bench(`allReduce float32 sum, ${s.n} CPU devices, ${bytes >> 20} MiB per rank`, () => do_not_optimize(allReduce(s, bytes)));
  });
await run();

const rows: string[] = [];
for (const s of setups)
  for (const bytes of SIZES) {
    allReduce(s, bytes);
    const got = new Float32Array(s.bufs.get(bytes)![s.n - 1]!.y.read().slice(0, 16).buffer);
    if (got.some((v) => v !== s.n)) throw new Error(`wrong sum: ${got[0]} (want ${s.n})`);
    const reps = Math.max(3, Math.round((256 << 20) / bytes));
    const t0 = Bun.nanoseconds();
    for (let i = 0; i < reps; i++) allReduce(s, bytes);
    const sec = (Bun.nanoseconds() - t0) / 1e9 / reps;
    const alg = bytes / sec / 1e9;
    rows.push(`${s.n} devices ${String(bytes >> 20).padStart(3)} MiB: ${(sec * 1e3).toFixed(2)} ms, algbw ${alg.toFixed(2)} GB/s, busbw ${((alg * 2 * (s.n - 1)) / s.n).toFixed(2)} GB/s (${reps} runs)`);
  }
console.log(`\nall-reduce bandwidth across CPU devices (float32 sum)\n${rows.join("\n")}`);
for (const s of setups) s.comms.forEach((c) => c.dispose());
