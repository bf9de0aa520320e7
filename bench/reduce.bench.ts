// Reductions on the default device (BUNGPU_DEVICE): the shapes that GPUs run as block-tree
// reductions (one block of 256 threads per output, src/tensor/codegen.ts) against the device's
// copy bandwidth over the same bytes. Each line's GB/s counts the bytes the reduction reads once.
//   full sum of 2^25 float32 · row sums [4096, 4096] · column sums [4096, 4096] (strided) ·
//   softmax [4096, 4096] · layerNorm [8192, 1024] · argmax [1024, 32768]
// On a GPU, compare with the same run on a checkout before the tree (one thread per output).
// Run: bun run bench/reduce.bench.ts   (REDUCE_BENCH_QUICK=1 for a short run)
import { bench, group, run, summary } from "mitata";
import { Device } from "../src";
import { ExecMode } from "../src/schedule";
import { Tensor, type ExecutionPlan } from "../src/tensor";
import { seededRandom } from "../src/tensor/reference";

// Steady-state timings: kernels built at -O3 before they run (no tiered first build; see bench/coldstart.bench.ts).
process.env.BUNGPU_TIER ??= "optimized";

const quick = !!process.env.REDUCE_BENCH_QUICK;
const dev = Device.default();

function data(n: number, seed: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}

interface Case {
  name: string;
  plan: ExecutionPlan;
  bytes: number;
}

function make(name: string, shape: number[], f: (x: Tensor) => Tensor): Case {
  const n = shape.reduce((p, q) => p * q, 1);
  const plan = f(Tensor.from(data(n, n % 977), shape)).prepare({ device: dev });
  const tree = plan.kernels().filter((k) => k.source.includes("bg_sh[")).length;
  return { name: `${name} (${plan.kernels().length} kernels, ${tree} block-tree)`, plan, bytes: n * 4 };
}

const S = quick ? 1024 : 4096;
const cases: Case[] = [
  make(`full sum of ${quick ? "2^22" : "2^25"}`, [quick ? 2 ** 22 : 2 ** 25], (x) => x.sum()),
  make(`row sums [${S}, ${S}]`, [S, S], (x) => x.sum(1)),
  make(`column sums [${S}, ${S}]`, [S, S], (x) => x.sum(0)),
  make(`softmax [${S}, ${S}]`, [S, S], (x) => x.softmax(-1)),
  make(`layerNorm [${quick ? 2048 : 8192}, 1024]`, [quick ? 2048 : 8192, 1024], (x) => x.layerNorm()),
  make(`argmax [${quick ? 256 : 1024}, 32768]`, [quick ? 256 : 1024, 32768], (x) => x.argmax(1)),
];

const copyBytes = Math.max(...cases.map((c) => c.bytes));
const copySrc = dev.alloc(copyBytes).fill(0);
const copyDst = dev.alloc(copyBytes).fill(0);

group(`reductions on ${dev.backend} (${dev.props.name})`, () => {
  summary(() => {
    bench(`Buffer.copyTo, ${copyBytes >> 20} MiB`, () => {
      copySrc.copyTo(copyDst);
      dev.defaultStream.synchronize();
    }).baseline(true);
    for (const c of cases) bench(c.name, () => c.plan.execute({ mode: ExecMode.Graph }));
  });
});

const res = await run();
const p50 = new Map<string, number>();
for (const t of res.benchmarks) for (const r of t.runs) if (r.stats) p50.set(r.name, r.stats.p50);
const gbs = (bytes: number, ns: number | undefined) => (ns ? ((bytes / ns).toFixed(1)) : "-");
console.log(`\nGB/s read (p50): copy ${gbs(2 * copyBytes, p50.get(`Buffer.copyTo, ${copyBytes >> 20} MiB`))} (read + write)`);
for (const c of cases) console.log(`  ${c.name}: ${gbs(c.bytes, p50.get(c.name))}`);
for (const c of cases) c.plan.dispose();
copySrc.dispose();
copyDst.dispose();
