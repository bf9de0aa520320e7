// bun run demo: what bungpu does, end to end, on Device.default().
//  1. the backends and devices found here;
//  2. a buffer round trip (host → device → host);
//  3. a real multi-kernel workload, a two-headed MLP forward pass (a few dozen kernels a run),
//     written once as a Schedule and run in every ExecMode; each mode's output is checked
//     against a float64 TypeScript reference (max abs error, PASS/FAIL; exit 1 on FAIL), and
//     the time per run and speed-up against Stream are printed.
import { Device, Program, loadInfo, type Buffer } from "./index";
import { ExecMode, Schedule, type Executable } from "./schedule";

const cpuSource = `
#include "bungpu_cpu.h"

/* C[M,N] = A[M,K] W[K,N]; one thread per output, 16x16 blocks. */
BG_KERNEL(matmul) {
  const float* A = BG_ARG(0, const float*);
  const float* W = BG_ARG(1, const float*);
  float* C = BG_ARG(2, float*);
  int M = BG_ARG(3, int), N = BG_ARG(4, int), K = BG_ARG(5, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
      if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[row * K + k] * W[k * N + col];
        C[row * N + col] = acc;
      }
    }
  }
}

/* Y[M,N] += b[N] */
BG_KERNEL(bias_add) {
  float* Y = BG_ARG(0, float*);
  const float* b = BG_ARG(1, const float*);
  int M = BG_ARG(2, int), N = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < M * N) Y[i] += b[i % N];
    }
  }
}

/* Y = max(Y, 0) */
BG_KERNEL(relu) {
  float* Y = BG_ARG(0, float*);
  int n = BG_ARG(1, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n && Y[i] < 0.0f) Y[i] = 0.0f;
    }
  }
}

/* out = a + b */
BG_KERNEL(add2) {
  const float* a = BG_ARG(0, const float*);
  const float* b = BG_ARG(1, const float*);
  float* out = BG_ARG(2, float*);
  int n = BG_ARG(3, int);
  BG_FOR_BLOCKS {
    BG_FOR_THREADS {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) out[i] = a[i] + b[i];
    }
  }
}
`;

const cudaSource = `
extern "C" __global__ void matmul(const float* A, const float* W, float* C, int M, int N, int K) {
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += A[row * K + k] * W[k * N + col];
    C[row * N + col] = acc;
  }
}
extern "C" __global__ void bias_add(float* Y, const float* b, int M, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M * N) Y[i] += b[i % N];
}
extern "C" __global__ void relu(float* Y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && Y[i] < 0.0f) Y[i] = 0.0f;
}
extern "C" __global__ void add2(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
`;

// ---- workload shape -------------------------------------------------------------------------------
const BATCH = 32;
const WIDTH = 96;
const LAYERS = 6; // per head; each layer is matmul + bias + relu (no relu on the last)
const HEADS = 2;

function rand(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296 - 0.5;
  };
}

// A progress line on stderr: rewritten in place on a terminal; elsewhere one line per phase.
const tty = process.stderr.isTTY === true;
let lastPhase = "";
const progress = (msg: string) => {
  if (tty) process.stderr.write(`\r\x1b[K${msg}`);
  else {
    const phase = msg.replace(/[\d/ ()…:]+runs?…?$|\s*\(\d+\/\d+\)…$/, "");
    if (phase !== lastPhase) process.stderr.write(`${msg}\n`);
    lastPhase = phase;
  }
};
const doneProgress = () => {
  if (tty) process.stderr.write("\r\x1b[K");
};

function main(): number {
  // 1. backends and devices
  console.log(`bungpu demo\n\nlibbungpu: ${loadInfo.source} (${loadInfo.path.replace(process.cwd() + "/", "")})\nbackends:`);
  for (const b of Device.backends())
    console.log(`  ${b.backend.padEnd(6)} ${b.available ? `available, ${b.devices} device(s)` : "unavailable"}${b.message ? `  (${b.message})` : ""}`);
  console.log(`devices: ${Device.list().join(", ") || "(none)"}`);
  const dev = Device.default();
  const p = dev.props;
  console.log(`default: ${dev.spec}: ${p.name} (${p.computeUnits} compute units, ${(p.totalMemory / 2 ** 30).toFixed(1)} GiB)\n`);

  // 2. a buffer round trip
  {
    const n = 1 << 20;
    const host = new Uint8Array(n);
    const r = rand(7);
    for (let i = 0; i < n; i++) host[i] = (r() * 256) & 255;
    using buf = dev.alloc(n);
    buf.write(host);
    const back = buf.read();
    const ok = back.length === n && back.every((v, i) => v === host[i]);
    console.log(`round trip: ${n} bytes host → ${dev.spec} → host: ${ok ? "identical" : "DIFFERENT"}`);
    if (!ok) return 1;
  }

  // 3. the MLP
  progress("compiling kernels…");
  const mod = Program.compile(dev, { cpu: cpuSource, cuda: cudaSource }, { name: "demo_mlp" });
  const matmul = mod.kernel("matmul", ["buffer", "buffer", "buffer", "i32", "i32", "i32"]);
  const biasAdd = mod.kernel("bias_add", ["buffer", "buffer", "i32", "i32"]);
  const relu = mod.kernel("relu", ["buffer", "i32"]);
  const add2 = mod.kernel("add2", ["buffer", "buffer", "buffer", "i32"]);
  const owned: Buffer[] = [];
  const alloc = (floats: number) => {
    const b = dev.alloc(floats * 4);
    owned.push(b);
    return b;
  };
  try {
    const r = rand(42);
    const scale = Math.sqrt(2 / WIDTH);
    const x = Float32Array.from({ length: BATCH * WIDTH }, () => r() * 2);
    const weights: Float32Array[][] = [], biases: Float32Array[][] = [];
    const xBuf = alloc(BATCH * WIDTH);
    const outBuf = alloc(BATCH * WIDTH);
    const schedule = new Schedule();
    const headOut: Buffer[] = [];
    for (let h = 0; h < HEADS; h++) {
      weights.push([]);
      biases.push([]);
      // two activations buffers per head, as views of one allocation (ping-pong)
      const act = alloc(2 * BATCH * WIDTH);
      const ping = [act.view(0, BATCH * WIDTH * 4), act.view(BATCH * WIDTH * 4, BATCH * WIDTH * 4)];
      let src = xBuf;
      for (let l = 0; l < LAYERS; l++) {
        const w = Float32Array.from({ length: WIDTH * WIDTH }, () => r() * 2 * scale * 1.7);
        const b = Float32Array.from({ length: WIDTH }, () => r() * 0.2);
        weights[h]!.push(w);
        biases[h]!.push(b);
        const wBuf = alloc(WIDTH * WIDTH).write(w);
        const bBuf = alloc(WIDTH).write(b);
        const dst = ping[l % 2]!;
        schedule.addKernel(matmul, {
          grid: [Math.ceil(WIDTH / 16), Math.ceil(BATCH / 16)],
          block: [16, 16],
          args: [src, wBuf, dst, BATCH, WIDTH, WIDTH],
          reads: [src, wBuf],
          writes: [dst],
          label: `h${h}.l${l}.matmul`,
        });
        schedule.addKernel(biasAdd, { grid: Math.ceil((BATCH * WIDTH) / 256), block: 256, args: [dst, bBuf, BATCH, WIDTH], reads: [dst, bBuf], writes: [dst] });
        if (l < LAYERS - 1) schedule.addKernel(relu, { grid: Math.ceil((BATCH * WIDTH) / 256), block: 256, args: [dst, BATCH * WIDTH] });
        src = dst;
      }
      headOut.push(src);
    }
    schedule.addKernel(add2, {
      grid: Math.ceil((BATCH * WIDTH) / 256),
      block: 256,
      args: [headOut[0]!, headOut[1]!, outBuf, BATCH * WIDTH],
      reads: [headOut[0]!, headOut[1]!],
      writes: [outBuf],
    });

    // float64 reference
    const ref = new Float64Array(BATCH * WIDTH);
    for (let h = 0; h < HEADS; h++) {
      let a = Float64Array.from(x);
      for (let l = 0; l < LAYERS; l++) {
        const w = weights[h]![l]!, b = biases[h]![l]!;
        const o = new Float64Array(BATCH * WIDTH);
        for (let i = 0; i < BATCH; i++)
          for (let j = 0; j < WIDTH; j++) {
            let s = 0;
            for (let k = 0; k < WIDTH; k++) s += a[i * WIDTH + k]! * w[k * WIDTH + j]!;
            s += b[j]!;
            o[i * WIDTH + j] = l < LAYERS - 1 && s < 0 ? 0 : s;
          }
        a = o;
      }
      for (let i = 0; i < ref.length; i++) ref[i]! += a[i]!;
    }
    const refMax = ref.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    const tol = 1e-4 * Math.max(1, refMax);

    const modes = [ExecMode.Stream, ExecMode.Graph, ExecMode.Eager, ExecMode.MultiStream(2), ExecMode.MultiStream(4)];
    console.log(
      `\nworkload: ${HEADS}-head MLP forward, batch ${BATCH}, width ${WIDTH}, ${LAYERS} layers per head: ${schedule.length} kernels per run; the input is copied in before every run`,
    );
    const inputs = [[xBuf, x]] as const;
    const results: { mode: string; ms: number; err: number; ok: boolean; note: string }[] = [];
    let failed = false;
    const budgetMs = Number(process.env.BUNGPU_DEMO_MS ?? 1500); // timing per mode
    for (const mode of modes) {
      outBuf.fill(0);
      const name = String(mode);
      let msPerRun: number;
      let note = "";
      if (mode.kind === "Eager") {
        // compile + run + dispose, every time
        const once = () => {
          const e = schedule.compile(dev, ExecMode.Eager);
          e.run({ inputs });
          e.synchronize(); // an Eager executable disposes itself when done
        };
        for (let i = 0; i < 3; i++) {
          progress(`warming up ${name} (${i + 1}/3)…`);
          once();
        }
        let runs = 0;
        const t0 = performance.now();
        while (performance.now() - t0 < budgetMs / 2 || runs < 5) {
          once();
          if (++runs % 10 === 0) progress(`timing ${name}: ${runs} runs…`);
        }
        msPerRun = (performance.now() - t0) / runs;
        note = "includes compile + dispose";
      } else {
        const exec: Executable = schedule.compile(dev, mode);
        try {
          for (let i = 0; i < 5; i++) {
            progress(`warming up ${name} (${i + 1}/5)…`);
            exec.run({ inputs }).synchronize();
          }
          let runs = 0;
          const t0 = performance.now();
          while (performance.now() - t0 < budgetMs || runs < 10) {
            for (let i = 0; i < 10; i++) exec.run({ inputs });
            exec.synchronize();
            runs += 10;
            progress(`timing ${name}: ${runs} runs…`);
          }
          msPerRun = (performance.now() - t0) / runs;
          if (mode.kind === "Graph") note = `${exec.stats.captures} capture, ${exec.stats.replays} replays`;
          if (mode.kind === "MultiStream") note = `${exec.plan.usedStreams.length} streams used, ${exec.plan.eventCount} cross-stream waits per run`;
        } finally {
          exec.dispose();
        }
      }
      const got = outBuf.read(Float32Array);
      let err = 0;
      for (let i = 0; i < got.length; i++) err = Math.max(err, Math.abs(got[i]! - ref[i]!));
      const ok = err <= tol && Number.isFinite(err);
      if (!ok) failed = true;
      results.push({ mode: name, ms: msPerRun, err, ok, note });
    }
    doneProgress();

    const base = results[0]!.ms;
    console.log(`\n${"mode".padEnd(16)}${"ms/run".padStart(10)}${"vs Stream".padStart(11)}${"max |err|".padStart(12)}  check  notes`);
    for (const r of results)
      console.log(
        `${r.mode.padEnd(16)}${r.ms.toFixed(3).padStart(10)}${`${(base / r.ms).toFixed(2)}×`.padStart(11)}${r.err.toExponential(2).padStart(12)}  ${r.ok ? "PASS " : "FAIL "}  ${r.note}`,
      );
    console.log(`\n(reference: float64 in TypeScript; max |ref| ${refMax.toFixed(3)}, tolerance ${tol.toExponential(1)})`);
    console.log(failed ? "\nFAIL" : "\nPASS: every ExecMode matches the reference");
    return failed ? 1 : 0;
  } finally {
    doneProgress();
    for (const b of owned) b.dispose();
    mod.dispose();
  }
}

process.exitCode = main();
