// A JSON inference server: Bun.serve answers POST /predict {"x": [64 numbers]} with
// {"y": [10 probabilities], "label": k}, every request through one shared ExecutionPlan (an MLP
// 64 → 256 → 10 with a softmax). Any number of requests may be in flight: plan.run queues them,
// and each gets its own answer.
//
//   bun run examples/server.ts               # http://127.0.0.1:3000/predict, plan.run per request
//   bun run examples/server.ts --batch 64    # concurrent requests merged into runs of up to 64 rows
//   bun run examples/server.ts --port 0      # any free port; the first line printed is the URL
//
// bench/serve.bench.ts starts it and measures it under a bounded load from 127.0.0.1.
import { Device } from "../src/index";
import { Tensor, Variable, type ExecutionPlan } from "../src/tensor";

export const IN = 64;
export const HIDDEN = 256;
export const OUT = 10;

/** Seeded weights (the bench gives onnxruntime the same ones). */
export function mlpWeights(seed = 1): { w1: Float32Array; b1: Float32Array; w2: Float32Array; b2: Float32Array } {
  let s = seed >>> 0;
  const rand = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
  const fill = (n: number, scale: number) => Float32Array.from({ length: n }, () => rand() * scale);
  return { w1: fill(IN * HIDDEN, 0.25), b1: fill(HIDDEN, 0.1), w2: fill(HIDDEN * OUT, 0.125), b2: fill(OUT, 0.1) };
}

/** The answer for one row in float64 (what the bench and the tests check every answer against). */
export function mlpReference(w: ReturnType<typeof mlpWeights>, x: ArrayLike<number>): Float64Array {
  const h = new Float64Array(HIDDEN);
  for (let j = 0; j < HIDDEN; j++) {
    let a = w.b1[j]!;
    for (let i = 0; i < IN; i++) a += x[i]! * w.w1[i * HIDDEN + j]!;
    h[j] = Math.max(a, 0);
  }
  const y = new Float64Array(OUT);
  let m = -Infinity;
  for (let j = 0; j < OUT; j++) {
    let a = w.b2[j]!;
    for (let i = 0; i < HIDDEN; i++) a += h[i]! * w.w2[i * OUT + j]!;
    m = Math.max(m, (y[j] = a));
  }
  let z = 0;
  for (let j = 0; j < OUT; j++) z += y[j] = Math.exp(y[j]! - m);
  return y.map((v) => v / z);
}

/**
 * softmax(relu(x·W1 + b1)·W2 + b2) over rows of x. With `maxBatch`, x holds up to that many rows
 * and a Variable "B" says how many a run has (the shape plan.batched() merges requests into);
 * without it, x is one row.
 */
export function prepareMlp(w = mlpWeights(), opts: { maxBatch?: number; device?: Device } = {}): ExecutionPlan {
  const rows = opts.maxBatch ?? 1;
  let x = Tensor.from(new Float32Array(rows * IN), [rows, IN], { name: "x" });
  if (opts.maxBatch !== undefined) x = x.shrink([[0, new Variable("B", 1, rows).bind(1)], null]);
  const h = x.matmul(Tensor.from(w.w1, [IN, HIDDEN])).add(Tensor.from(w.b1, [HIDDEN])).relu();
  const y = h.matmul(Tensor.from(w.w2, [HIDDEN, OUT])).add(Tensor.from(w.b2, [OUT])).softmax(-1);
  return y.prepare({ outputNames: ["y"], ...(opts.device ? { device: opts.device } : {}) });
}

/** The server: `runRow(x)` answers one row. */
export function serve(port: number, runRow: (x: Float32Array) => Promise<Float32Array>): ReturnType<typeof Bun.serve> {
  return Bun.serve({
    port,
    hostname: "127.0.0.1",
    async fetch(req) {
      if (req.method !== "POST" || new URL(req.url).pathname !== "/predict") return new Response("POST /predict", { status: 404 });
      let x: Float32Array;
      try {
        const body = (await req.json()) as { x?: unknown };
        if (!Array.isArray(body.x) || body.x.length !== IN || !body.x.every((v) => typeof v === "number"))
          return Response.json({ error: `x must be ${IN} numbers` }, { status: 400 });
        x = Float32Array.from(body.x as number[]);
      } catch {
        return Response.json({ error: "the body must be JSON" }, { status: 400 });
      }
      try {
        const y = await runRow(x);
        let label = 0;
        for (let i = 1; i < y.length; i++) if (y[i]! > y[label]!) label = i;
        return Response.json({ y: Array.from(y), label });
      } catch (e) {
        return Response.json({ error: String(e) }, { status: 500 }); // a GpuError, never a crash
      }
    },
  });
}

if (import.meta.main) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const port = Number(arg("--port") ?? 3000);
  const maxBatch = arg("--batch") === undefined ? undefined : Number(arg("--batch"));
  const plan = prepareMlp(mlpWeights(), maxBatch === undefined ? {} : { maxBatch });
  let runRow: (x: Float32Array) => Promise<Float32Array>;
  if (maxBatch === undefined)
    runRow = async (x) => {
      const { y } = await plan.run({ x });
      return y as Float32Array;
    };
  else {
    const batcher = plan.batched({ variable: "B", inputs: ["x"], maxBatch, maxDelayMs: 2 });
    runRow = async (x) => {
      const { y } = await batcher.run({ x });
      return y as Float32Array;
    };
  }
  const server = serve(port, runRow);
  console.log(`${server.url}predict`);
  const stop = () => {
    void server.stop(true);
    plan.dispose();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
