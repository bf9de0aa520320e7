// An LLM server: Bun.serve over the packaged GPT-2 (bungpu/models) with continuous batching. Every
// request is a generation; all the running ones are decoded together, one run of the model's
// batched decode plan per token (GPT2.batch()): a request joins between two steps (its prompt runs
// alone, its first token is sent at once), takes a KV-cache slot, and leaves when it is done or
// when its client goes away (its slot is free for the next step). Tokens reach each client as
// server-sent events. Each client gets exactly the tokens it would get alone.
//
//   bun run examples/serve.ts --model ./gpt2            # a transformers folder (text in and out if it has tokenizer.json)
//   bun run examples/serve.ts                           # no checkpoint: a seeded random model (--shape tiny|demo|124m)
//   bun run examples/serve.ts --slots 32 --context 256 --port 0
//   bun run examples/serve.ts --shape tiny --min-step-ms 20   # slow steps down (tests watch a stream being cancelled)
//
// The first line printed is the server's URL. Then:
//   curl -N localhost:3000/generate -d '{"prompt":[464, 2068], "maxNewTokens":20}'
//   → data: {"token":7586}  …  event: done / data: {"tokens":20,"reason":"length"}
// Body: {"prompt": [ids]} or {"text": "..."} (with a tokenizer), and generate()'s options
// maxNewTokens (default 16), temperature, topK, topP, seed, stop. A bad request is 400 with
// {"error"}. GET /stats: slots, active, queued, steps, tokens, finished, cancelled, stepMs.
// bench/llm_serve.bench.ts starts it and measures it under a bounded load from 127.0.0.1.
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { GpuError } from "../src/errors";
import { Tensor } from "../src/tensor";
import { GPT2, configFromTransformers, loadTokenizer, randomGPT2Weights, type GenerateOptions, type GPT2Config, type TextTokenizer } from "../src/models";

export const SHAPES: Record<string, GPT2Config> = {
  tiny: { nLayer: 2, nEmbd: 32, nHead: 2, vocabSize: 64, nCtx: 64 },
  demo: { nLayer: 4, nEmbd: 256, nHead: 4, vocabSize: 2048, nCtx: 256 },
  "124m": { nLayer: 12, nEmbd: 768, nHead: 12, vocabSize: 50257, nCtx: 1024 },
};

export interface LLMServerStats {
  slots: number;
  active: number;
  queued: number;
  steps: number;
  /** Tokens sent (first tokens included). */
  tokens: number;
  finished: number;
  cancelled: number;
  /** Milliseconds spent in decode steps (the model; the rest of the time is prompts, HTTP and idle). */
  stepMs: number;
}

interface Job {
  prompt: number[];
  opts: GenerateOptions;
  /** Send an event; `data` is JSON text, or a value to write as JSON. */
  send(event: string | null, data: unknown): void;
  close(): void;
  /** The batch's id once joined. */
  id: number;
  gone: boolean;
}

/** Serve `model` (loaded with `{ batch: { slots } }`) on `port`, each step taking at least `minStepMs`; stop() ends the server and the loop. */
export function serveLLM(model: GPT2, port: number, tokenizer: TextTokenizer | null = null, minStepMs = 0): { url: string; stats(): LLMServerStats; stop(): Promise<void> } {
  const batch = model.batch();
  const queue: Job[] = [];
  const live = new Map<number, Job>();
  const st = { tokens: 0, finished: 0, cancelled: 0, stepMs: 0 };
  let wake: (() => void) | null = null;
  let stopped = false;
  const enc = new TextEncoder();

  const finish = (j: Job, reason: string, count: number) => {
    j.send("done", { tokens: count, reason });
    j.close();
    st.finished++;
  };
  const emit = (j: Job, token: number) => {
    st.tokens++;
    j.send(null, tokenizer ? JSON.stringify({ token, text: tokenizer.decode([token]) }) : `{"token":${token}}`);
  };
  const counts = new Map<number, number>();
  const reasonOf = (j: Job, token: number) => (new Set(typeof j.opts.stop === "number" ? [j.opts.stop] : (j.opts.stop ?? (model.config.eosTokenId === undefined ? [] : [model.config.eosTokenId]))).has(token) ? "stop" : "length");

  /** The decode loop: admit waiting requests into free slots, then one step for all; yield to I/O between steps. */
  async function loop(): Promise<void> {
    while (!stopped) {
      // waiting requests join together: their prompts run in one batched prompt run (one alone: join)
      const admit: Job[] = [];
      while (queue.length > 0 && admit.length < batch.free) {
        const j = queue.shift()!;
        if (!j.gone) admit.push(j);
      }
      if (admit.length > 0) {
        const firsts = admit.length === 1 ? [batch.join(admit[0]!.prompt, admit[0]!.opts)] : batch.joinAll(admit.map((j) => j.prompt), admit.map((j) => j.opts)); // checked when they queued
        admit.forEach((j, k) => {
          const t = firsts[k]!;
          j.id = t.id;
          emit(j, t.token);
          if (t.done) finish(j, reasonOf(j, t.token), 1);
          else {
            live.set(t.id, j);
            counts.set(t.id, 1);
          }
        });
      }
      if (batch.active === 0) {
        await new Promise<void>((r) => (wake = r));
        wake = null;
        continue;
      }
      const s0 = performance.now();
      const step = batch.step();
      st.stepMs += performance.now() - s0;
      for (const t of step) {
        const j = live.get(t.id)!;
        const n = counts.get(t.id)! + 1;
        counts.set(t.id, n);
        emit(j, t.token);
        if (t.done) {
          live.delete(t.id);
          counts.delete(t.id);
          finish(j, reasonOf(j, t.token), n);
        }
      }
      // requests arrive and clients go between steps
      if (minStepMs > 0) await Bun.sleep(minStepMs);
      else await new Promise<void>((r) => setImmediate(r));
    }
  }
  /** A client went away: stop computing for it; its slot is free at the next step. */
  const cancel = (j: Job) => {
    if (j.gone) return;
    j.gone = true;
    if (j.id && batch.leave(j.id)) {
      live.delete(j.id);
      counts.delete(j.id);
      st.cancelled++;
    } else if (!j.id) st.cancelled++;
  };

  const bad = (error: string) => Response.json({ error }, { status: 400 });
  const server = Bun.serve({
    port,
    hostname: "127.0.0.1",
    idleTimeout: 0, // a request may wait for a slot longer than the default 10 s
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (req.method === "GET" && path === "/stats") return Response.json(stats());
      if (req.method !== "POST" || path !== "/generate") return new Response("POST /generate, GET /stats", { status: 404 });
      let body: Record<string, unknown>;
      try {
        body = (await req.json()) as Record<string, unknown>;
        if (body === null || typeof body !== "object" || Array.isArray(body)) return bad("the body must be a JSON object");
      } catch {
        return bad("the body must be JSON");
      }
      let prompt: number[];
      if (typeof body["text"] === "string") {
        if (!tokenizer) return bad("this server has no tokenizer: send {\"prompt\": [token ids]}");
        prompt = tokenizer.encode(body["text"]);
      } else prompt = body["prompt"] as number[];
      const opts: GenerateOptions = { maxNewTokens: (body["maxNewTokens"] as number | undefined) ?? 16 };
      for (const k of ["temperature", "topK", "topP", "seed", "stop"] as const) if (body[k] !== undefined) (opts as unknown as Record<string, unknown>)[k] = body[k];
      try {
        batch.check(prompt, opts);
      } catch (e) {
        if (e instanceof GpuError) return bad(e.message);
        throw e;
      }
      let job!: Job;
      const stream = new ReadableStream<Uint8Array>({
        start(c) {
          job = {
            prompt,
            opts,
            id: 0,
            gone: false,
            send(event, data) {
              if (job.gone) return;
              try {
                c.enqueue(enc.encode(`${event ? `event: ${event}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`));
              } catch {
                cancel(job); // the stream is closed: the client went away
              }
            },
            close() {
              if (job.gone) return;
              job.gone = true;
              try {
                c.close();
              } catch {}
            },
          };
        },
        cancel() {
          cancel(job);
        },
      });
      req.signal.addEventListener("abort", () => cancel(job));
      queue.push(job);
      wake?.();
      return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
    },
  });
  function stats(): LLMServerStats {
    return { slots: batch.slots, active: batch.active, queued: queue.filter((j) => !j.gone).length, steps: batch.steps, ...st };
  }
  const done = loop().catch((e) => {
    console.error(e);
    process.exit(1);
  });
  return {
    url: server.url.href,
    stats,
    async stop() {
      stopped = true;
      wake?.();
      await done;
      await server.stop(true);
      batch.dispose();
    },
  };
}

/** The checkpoint's nCtx, from its config.json or its metadata (undefined if neither says). */
function contextOf(path: string): number | undefined {
  try {
    const dir = statSync(path).isDirectory();
    const cfg = join(dir ? path : dirname(path), "config.json");
    if (existsSync(cfg)) return configFromTransformers(JSON.parse(readFileSync(cfg, "utf8"))).nCtx;
    if (!dir) return Number(Tensor.safetensorsMetadata(path)["nCtx"]) || undefined;
  } catch {}
  return undefined; // fromPretrained says what is wrong
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const arg = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const num = (name: string, dflt: number) => {
    const v = arg(name);
    if (v === undefined) return dflt;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) {
      console.error(`${name} must be a non-negative integer, got ${v}`);
      process.exit(2);
    }
    return n;
  };
  const path = arg("--model");
  const slots = num("--slots", 32);
  let model: GPT2;
  let tokenizer: TextTokenizer | null = null;
  const t0 = performance.now();
  try {
    if (path) {
      const nCtx = contextOf(path);
      const context = arg("--context") !== undefined ? num("--context", 0) : nCtx === undefined ? undefined : Math.min(nCtx, 256);
      model = GPT2.fromPretrained(path, { batch: { slots, context } });
      if (statSync(path).isDirectory() && existsSync(join(path, "tokenizer.json"))) tokenizer = await loadTokenizer(path);
    } else {
      const shape = arg("--shape") ?? "demo";
      const cfg = SHAPES[shape];
      if (!cfg) {
        console.error(`--shape must be one of ${Object.keys(SHAPES).join(", ")}, got ${shape}`);
        process.exit(2);
      }
      const context = num("--context", Math.min(cfg.nCtx, 256));
      model = GPT2.fromTensors(cfg, randomGPT2Weights(cfg, num("--seed", 11)), { batch: { slots, context } });
    }
  } catch (e) {
    console.error(e instanceof Error ? e.message : String(e));
    process.exit(2);
  }
  const s = serveLLM(model, num("--port", 3000), tokenizer, num("--min-step-ms", 0));
  console.log(s.url);
  const c = model.config;
  console.error(`loaded and prepared in ${(performance.now() - t0).toFixed(0)} ms: ${c.nLayer} layers, width ${c.nEmbd}, vocabulary ${c.vocabSize}; ${slots} slots of ${model.batchContext} positions`);
  const stop = async () => {
    await s.stop();
    model.dispose();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop());
  process.on("SIGINT", () => void stop());
}
