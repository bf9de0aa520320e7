// KernelMode Batch vs Ring (issue 6): round-trip latency of a one-message request, and sustained
// messages per second with batched pushes, on the device BUNGPU_DEVICE names (default: cpu).
//
//   bun run bench/ring.bench.ts            # mitata, then our own percentiles over 20000 requests
//   RING_BENCH_QUICK=1 bun run bench/ring.bench.ts   # fewer iterations
//
// On the CPU backend a persistent kernel holds the device's launch lock while it runs, so each
// measurement starts its own RingKernel and stops it before the next one starts.
import { bench, do_not_optimize, group, run, summary } from "mitata";
import { Device } from "../src";
import { KernelMode, RingKernel } from "../src/ring";

const dev = Device.open(process.env.BUNGPU_DEVICE ?? "cpu");
const QUICK = !!process.env.RING_BENCH_QUICK;
const REQUESTS = QUICK ? 5000 : 20000;
const WARMUP = QUICK ? 500 : 2000;
const STREAM_MSGS = QUICK ? 1 << 20 : 1 << 22;
const CHUNK = 8192;

// 16-byte message { seq, val, 0, 0 } → 16-byte response { seq, running sum lo, count, val*3 }.
const HANDLER = `
BG_RING_HANDLER(msg, resp, state) {
  const uint32_t* m = (const uint32_t*)msg;
  uint32_t* r = (uint32_t*)resp;
  uint64_t* s = (uint64_t*)state;
  s[0] += m[1];
  s[1] += 1;
  r[0] = m[0];
  r[1] = (uint32_t)s[0];
  r[2] = (uint32_t)s[1];
  r[3] = m[1] * 3u;
}
`;

function start(mode: KernelMode, capacity = 1024): RingKernel {
  return RingKernel.launch(dev, { handler: HANDLER, messageBytes: 16, capacity, state: new BigUint64Array(2), mode });
}

function pct(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

interface Lat {
  name: string;
  p50: number;
  p99: number;
  mean: number;
}

async function latency(mode: KernelMode, sync: boolean): Promise<Lat> {
  const rk = start(mode);
  const msg = new Uint32Array([0, 1, 0, 0]);
  const ns = new Float64Array(REQUESTS);
  try {
    for (let i = 0; i < WARMUP; i++) {
      msg[0] = i;
      if (sync) rk.requestSync(msg);
      else await rk.request(msg);
    }
    for (let i = 0; i < REQUESTS; i++) {
      msg[0] = i;
      const t0 = Bun.nanoseconds();
      if (sync) rk.requestSync(msg);
      else await rk.request(msg);
      ns[i] = Bun.nanoseconds() - t0;
    }
    await rk.stop();
  } finally {
    rk.dispose();
  }
  ns.sort();
  let sum = 0;
  for (const v of ns) sum += v;
  return { name: `${mode.asStr()} ${sync ? "requestSync" : "await request"}`, p50: pct(ns, 0.5) / 1000, p99: pct(ns, 0.99) / 1000, mean: sum / ns.length / 1000 };
}

/** Messages per second: push chunks with trySendBatch, pull with tryReceiveBatch, never awaiting. */
async function throughputSync(mode: KernelMode): Promise<number> {
  const rk = start(mode, 16384);
  const msgs = new Uint32Array(CHUNK * 4);
  for (let i = 0; i < CHUNK; i++) msgs[4 * i + 1] = 1;
  const bytes = new Uint8Array(msgs.buffer);
  try {
    let sent = 0, got = 0, t0 = 0;
    const total = STREAM_MSGS + STREAM_MSGS / 8; // the first eighth is warm-up
    while (got < total) {
      if (got >= STREAM_MSGS / 8 && !t0) t0 = Bun.nanoseconds();
      if (sent < total) {
        const n = Math.min(CHUNK, total - sent);
        sent += rk.trySendBatch(n === CHUNK ? bytes : bytes.subarray(0, n * 16));
      }
      got += rk.tryReceiveBatch(16384).byteLength / 16;
    }
    const secs = (Bun.nanoseconds() - t0) / 1e9;
    await rk.stop();
    return (got - STREAM_MSGS / 8) / secs;
  } finally {
    rk.dispose();
  }
}

/** Messages per second with the awaiting API: sendBatch / receiveBatch. */
async function throughputAsync(mode: KernelMode): Promise<number> {
  const rk = start(mode, 16384);
  const msgs = new Uint8Array(CHUNK * 16);
  try {
    const total = STREAM_MSGS;
    let sent = 0, got = 0;
    const t0 = Bun.nanoseconds();
    while (got < total) {
      while (sent < total && sent - got < 4 * CHUNK) {
        void rk.sendBatch(msgs);
        sent += CHUNK;
      }
      got += (await rk.receiveBatch(16384)).byteLength / 16;
    }
    const secs = (Bun.nanoseconds() - t0) / 1e9;
    await rk.stop();
    return got / secs;
  } finally {
    rk.dispose();
  }
}

// ---- mitata: one-message round trips, each mode with its own kernel --------------------------

const msg = new Uint32Array([1, 1, 0, 0]);
for (const mode of [KernelMode.Ring, KernelMode.Batch]) {
  group(`one-message round trip (${mode})`, () => {
    summary(() => {
      // Warm each kernel first: mitata times single calls (and measures the heap between them)
      // when its first call is slow, and a kernel cold from launch would then nap between calls.
      bench(`${mode} requestSync`, function* () {
        const rk = start(mode);
        for (let i = 0; i < WARMUP; i++) rk.requestSync(msg);
        yield () => do_not_optimize(rk.requestSync(msg));
        rk.dispose();
      });
      bench(`${mode} await request`, function* () {
        const rk = start(mode);
        for (let i = 0; i < WARMUP; i++) rk.requestSync(msg);
        yield async () => do_not_optimize(await rk.request(msg));
        rk.dispose();
      });
    });
  });
}

await run();

// ---- our own percentiles and throughput --------------------------------------------------------

const cpuModel = (() => {
  try {
    return /model name\s*:\s*(.*)/.exec(require("node:fs").readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "";
  } catch {
    return "";
  }
})();
console.log(`\n${dev.spec} (${dev.name}); ${navigator.hardwareConcurrency} cores; ${cpuModel}; bun ${Bun.version}`);
console.log(`round trip of one 16-byte request over ${REQUESTS} requests (after ${WARMUP} warm-up):`);
const lats: Lat[] = [];
for (const mode of [KernelMode.Ring, KernelMode.Batch])
  for (const sync of [true, false]) {
    const l = await latency(mode, sync);
    lats.push(l);
    console.log(`  ${l.name.padEnd(26)} p50 ${l.p50.toFixed(2).padStart(8)} µs   p99 ${l.p99.toFixed(2).padStart(8)} µs   mean ${l.mean.toFixed(2).padStart(8)} µs`);
  }
const ratio = (a: string, b: string) => lats.find((l) => l.name === b)!.p50 / lats.find((l) => l.name === a)!.p50;
console.log(`  Batch/Ring p50: ${ratio("ring requestSync", "batch requestSync").toFixed(1)}x (sync), ${ratio("ring await request", "batch await request").toFixed(1)}x (await)`);
console.log(`  typicalOverheadUs(${dev.backend}): ring ${KernelMode.Ring.typicalOverheadUs(dev.backend)}, batch ${KernelMode.Batch.typicalOverheadUs(dev.backend)}`);

console.log(`sustained throughput, ${STREAM_MSGS} 16-byte messages in chunks of ${CHUNK}:`);
for (const mode of [KernelMode.Ring, KernelMode.Batch]) {
  const s = await throughputSync(mode);
  const a = await throughputAsync(mode);
  console.log(`  ${mode.asStr().padEnd(6)} trySendBatch/tryReceiveBatch ${(s / 1e6).toFixed(2).padStart(7)} M msg/s   sendBatch/await receiveBatch ${(a / 1e6).toFixed(2).padStart(7)} M msg/s`);
}
dev.dispose();
