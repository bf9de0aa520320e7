// bun run demo: the main job. Lists the backends and devices, then round-trips a buffer on
// Device.default(). (Later issues grow it into a multi-kernel workload in every ExecMode.)
import { Device, loadInfo } from "./index";

console.log(`libbungpu: ${loadInfo.source} (${loadInfo.path.replace(process.cwd() + "/", "")})`);
for (const b of Device.backends())
  console.log(`  ${b.backend.padEnd(6)} ${b.available ? `available, ${b.devices} device(s)` : `unavailable: ${b.message}`}`);
const dev = Device.default();
const p = dev.props;
console.log(`default device: ${dev.spec} — ${p.name}, ${p.computeUnits} compute units, ${(p.totalMemory / 2 ** 30).toFixed(1)} GiB`);
const n = 1 << 20;
const data = new Float32Array(n).map((_, i) => Math.sin(i));
using buf = dev.alloc(data.byteLength);
buf.write(data);
const back = buf.read(Float32Array);
const ok = back.every((x, i) => x === data[i]);
console.log(`round trip of ${data.byteLength} bytes: ${ok ? "PASS" : "FAIL"}`);
if (!ok) process.exit(1);
