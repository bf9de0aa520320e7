// Copies between devices (Stream.copyPeer): peer to peer (Device.enablePeerAccess) against staged
// through host memory, between two CPU devices (BUNGPU_CPU_DEVICES=2; the bench re-runs itself
// with it when unset). On the CPU backend both paths are memory copies in one address space: peer
// is one pass, staged two (source to a 1 MiB bounce buffer, bounce buffer to destination), as a
// driver stages through pinned memory. Each sample is one copy queued and waited for; the table
// after mitata's gives the bandwidth of each.
//
//   bun run bench/peer.bench.ts
import { bench, do_not_optimize, run, summary } from "mitata";
import type { Buffer } from "../src";

if (!process.env.BUNGPU_CPU_DEVICES) {
  const r = Bun.spawnSync(["bun", "run", import.meta.path], { env: { ...process.env, BUNGPU_CPU_DEVICES: "2" }, stdout: "inherit", stderr: "inherit" });
  process.exit(r.exitCode ?? 1);
}

const { Device } = await import("../src");
const a = Device.open("cpu");
const b = Device.open("cpu:1");
const s = a.createStream();
const SIZES = [1 << 20, 16 << 20, 64 << 20];
const bufs = SIZES.map((n) => ({ n, x: a.alloc(n).fill(1, { type: "u8" }), y: b.alloc(n).fill(0) }));

let enabled = false;
function access(peer: boolean): void {
  if (peer === enabled) return;
  if (peer) a.enablePeerAccess(b);
  else a.disablePeerAccess(b);
  enabled = peer;
}

function copy(x: Buffer, y: Buffer): string {
  const { path } = s.copyPeer(y, x);
  s.synchronize();
  return path;
}

for (const { n, x, y } of bufs)
  summary(() => {
    for (const peer of [false, true])
      bench(`${peer ? "peer" : "staged"} ${n >> 20} MiB`, function* () {
        access(peer); // set up outside the timed part
        yield () => do_not_optimize(copy(x, y));
      });
  });
await run();

const rows: string[] = [];
for (const peer of [false, true]) {
  access(peer);
  for (const { n, x, y } of bufs) {
    const path = copy(x, y);
    if (path !== (peer ? "peer" : "staged")) throw new Error(`expected a ${peer ? "peer" : "staged"} copy, got ${path}`);
    const reps = Math.max(3, Math.round((512 << 20) / n));
    const t0 = Bun.nanoseconds();
    for (let i = 0; i < reps; i++) copy(x, y);
    const sec = (Bun.nanoseconds() - t0) / 1e9;
    rows.push(`${path.padEnd(7)} ${String(n >> 20).padStart(3)} MiB: ${((n * reps) / sec / 1e9).toFixed(2)} GB/s (${reps} copies)`);
  }
}
console.log(`\ncopy bandwidth between two CPU devices\n${rows.join("\n")}`);
