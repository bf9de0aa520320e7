// Issue 21 item 4: the LLM server of examples/serve.ts (the packaged GPT-2, continuous batching,
// server-sent events) in a subprocess, under a bounded load from this process on 127.0.0.1:
// 1, 8 and 32 clients, each sending generation after generation (a prompt of 16 tokens, 64 new
// tokens; half greedy, half seeded sampling with temperature 0.8 and top-k 40) until the window
// ends, the last ones finished; 3 passes over the client counts, the best of each kept. Reported per client count: tokens/s over all clients, time to
// first token (p50, p99: request sent → first event), the gap between a stream's tokens (p50),
// the mean rows of a decode step (tokens / steps, from the server's /stats) and the share of the
// window the server spent in decode steps (the rest: prompts, HTTP, sampling, idle). Every stream is
// checked after the window: the same request gives the same tokens at every client count as the
// untimed pass at one client (each client gets exactly the tokens it gets alone). The aim: at 32
// clients ≥ 6× the tokens/s of one client.
// Run: bun run bench/llm_serve.bench.ts   (LLM_BENCH_QUICK=1: 2 s windows, one pass; LLM_BENCH_SHAPE=tiny|demo|124m, default demo)
import { join } from "node:path";
import { Device } from "../src";
import { SHAPES } from "../examples/serve";
import { GPT2, randomGPT2Weights } from "../src/models";

// Steady-state timings: kernels built at -O3 before they run (no tiered first build; see bench/coldstart.bench.ts).
process.env.BUNGPU_TIER ??= "optimized";

const quick = !!process.env.LLM_BENCH_QUICK;
const SHAPE = process.env.LLM_BENCH_SHAPE ?? "demo";
const WINDOW_MS = quick ? 2000 : 5000;
const PASSES = quick ? 1 : 3;
const PROMPT = 16, NEW = 64, KINDS = 32;
const note = (s: string) => process.stderr.write(`${s}\n`);
const cfg = SHAPES[SHAPE];
if (!cfg) throw new Error(`LLM_BENCH_SHAPE must be one of ${Object.keys(SHAPES).join(", ")}`);

// ---- the requests: KINDS distinct prompts and options ------------------------------------------
interface Req {
  prompt: number[];
  maxNewTokens: number;
  stop: number[];
  temperature?: number;
  topK?: number;
  seed?: number;
}
const reqs: Req[] = [];
{
  let s = 2024;
  const rnd = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296;
  for (let k = 0; k < KINDS; k++) {
    const prompt = Array.from({ length: PROMPT }, () => Math.floor(rnd() * cfg.vocabSize));
    reqs.push(k % 2 ? { prompt, maxNewTokens: NEW, stop: [], temperature: 0.8, topK: 40, seed: k } : { prompt, maxNewTokens: NEW, stop: [] });
  }
}

// ---- the server ----------------------------------------------------------------------------------
const argv = [process.execPath, join(import.meta.dir, "..", "examples", "serve.ts"), "--shape", SHAPE, "--slots", "32", "--context", String(Math.min(cfg.nCtx, 256)), "--port", "0"];
const t0 = performance.now();
const proc = Bun.spawn(argv, { stdout: "pipe", stderr: "pipe" });
process.on("exit", () => proc.kill());
const reader = proc.stdout.getReader();
let text = "";
while (!text.includes("\n")) {
  const { value, done } = await reader.read();
  if (done || performance.now() - t0 > 600_000) throw new Error(`the server did not start: ${await new Response(proc.stderr).text()}`);
  text += new TextDecoder().decode(value);
}
reader.releaseLock();
const url = text.split("\n")[0]!.trim();
const dev = Device.default();
note(
  `model: random GPT-2, shape ${SHAPE} (${cfg.nLayer} layers, width ${cfg.nEmbd}, ${cfg.nHead} heads, vocabulary ${cfg.vocabSize}); server: 32 slots; started in ${(performance.now() - t0).toFixed(0)} ms; ` +
    `${dev.name}, ${dev.props.computeUnits} threads in the CPU backend's pool, nproc ${navigator.hardwareConcurrency}`,
);

interface Stream {
  kind: number;
  tokens: number[];
  ttft: number;
  gaps: number[];
}
/** One generation: its tokens, time to first token, gaps between tokens (ms). */
async function generate(kind: number): Promise<Stream> {
  const a = performance.now();
  const res = await fetch(`${url}generate`, { method: "POST", body: JSON.stringify(reqs[kind]) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const r = res.body!.getReader();
  const tokens: number[] = [], gaps: number[] = [];
  let ttft = 0, last = 0, buf = "";
  for (;;) {
    const { value, done } = await r.read();
    if (done) break;
    const now = performance.now();
    buf += new TextDecoder().decode(value);
    let cut: number;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!ev.startsWith("data: ")) continue; // event: done
      tokens.push((JSON.parse(ev.slice(6)) as { token: number }).token);
      if (tokens.length === 1) ttft = now - a;
      else gaps.push(now - last);
      last = now;
    }
  }
  return { kind, tokens, ttft, gaps };
}
async function stats(): Promise<{ steps: number; tokens: number; stepMs: number }> {
  return (await (await fetch(`${url}stats`)).json()) as { steps: number; tokens: number; stepMs: number };
}

// ---- warm up (the kernels' optimised builds swap in), then the untimed reference at one client --
{
  const w = performance.now();
  while (performance.now() - w < (quick ? 3000 : 8000)) await Promise.all(Array.from({ length: 32 }, (_, k) => generate(k)));
}
const alone: number[][] = [];
for (let k = 0; k < KINDS; k++) alone.push((await generate(k)).tokens);

interface Row {
  clients: number;
  tps: number;
  ttft50: number;
  ttft99: number;
  gap50: number;
  rows: number;
  /** Of the window, the share the server spent in decode steps. */
  busy: number;
  n: number;
}
async function load(clients: number): Promise<Row> {
  const s0 = await stats();
  const streams: Stream[] = [];
  let next = 0;
  const a = performance.now(), end = a + WINDOW_MS;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) streams.push(await generate(next++ % KINDS));
    }),
  );
  const secs = (performance.now() - a) / 1e3;
  const s1 = await stats();
  for (const s of streams) {
    const want = alone[s.kind]!;
    if (s.tokens.length !== want.length || s.tokens.some((t, i) => t !== want[i]))
      throw new Error(`${clients} clients: request ${s.kind} got [${s.tokens.join(",")}], alone [${want.join(",")}]`);
  }
  const pct = (xs: number[], p: number) => xs.sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;
  const tokens = streams.reduce((p, s) => p + s.tokens.length, 0);
  return {
    clients,
    tps: tokens / secs,
    ttft50: pct(streams.map((s) => s.ttft), 0.5),
    ttft99: pct(streams.map((s) => s.ttft), 0.99),
    gap50: pct(streams.flatMap((s) => s.gaps), 0.5),
    rows: (s1.tokens - s0.tokens - streams.length) / Math.max(1, s1.steps - s0.steps), // first tokens come from the prompt, not a step
    busy: (s1.stepMs - s0.stepMs) / (secs * 1e3),
    n: streams.length,
  };
}

console.log(`\nLLM server (examples/serve.ts, ${SHAPE} shape), ${WINDOW_MS} ms windows, best of ${PASSES} passes; prompts of ${PROMPT} tokens, ${NEW} new tokens each, half greedy, half sampled (seeded)`);
// The machine may be shared: each pass runs every client count in turn, and each count keeps its
// best pass (the highest tokens/s, with that pass's latencies), so a busy moment does not decide the ratio.
const best = new Map<number, Row>();
for (let p = 0; p < PASSES; p++)
  for (const c of [1, 8, 32]) {
    const r = await load(c);
    if (!best.has(c) || r.tps > best.get(c)!.tps) best.set(c, r);
  }
const rows: Row[] = [];
for (const c of [1, 8, 32]) {
  const r = best.get(c)!;
  rows.push(r);
  console.log(
    `${String(c).padStart(2)} clients: ${r.tps.toFixed(0).padStart(6)} tokens/s  TTFT p50 ${r.ttft50.toFixed(1).padStart(6)} ms  p99 ${r.ttft99.toFixed(1).padStart(6)} ms  ` +
      `token gap p50 ${r.gap50.toFixed(2).padStart(6)} ms  ${r.rows.toFixed(1).padStart(4)} rows a step, ${(r.busy * 100).toFixed(0)}% of the time in steps  (${r.n} generations, every one the tokens it gets alone)`,
  );
}
// For reference: generate() alone in this process (the single-sequence decode plan, no HTTP).
{
  const model = GPT2.fromTensors(cfg, randomGPT2Weights(cfg, 11));
  const { prompt, ...opts } = reqs[0]!; // generate() takes the options alone
  const r = { prompt, opts };
  model.generate(r.prompt, r.opts); // warm
  let tps = 0;
  for (let p = 0; p < PASSES; p++) {
    const w = performance.now();
    let n = 0;
    while (performance.now() - w < WINDOW_MS / 2) n += model.generate(r.prompt, r.opts).tokens.length;
    tps = Math.max(tps, n / ((performance.now() - w) / 1e3));
  }
  console.log(`generate() in this process, no server: ${tps.toFixed(0)} tokens/s, best of ${PASSES} (the single-sequence decode plan; same tokens as the server's)`);
  if (model.generate(r.prompt, r.opts).tokens.join() !== alone[0]!.join()) throw new Error("generate() and the server disagree");
  model.dispose();
}
const ratio = rows[2]!.tps / rows[0]!.tps;
console.log(`32 clients / 1 client: ${ratio.toFixed(2)}× tokens/s — aim ≥ 6×: ${ratio >= 6 ? "met" : "NOT met"}`);
proc.kill();
await proc.exited;
