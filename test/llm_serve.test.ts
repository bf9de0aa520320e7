// examples/serve.ts end to end (issue 21 item 4): the LLM server in a subprocess (a tiny seeded
// random GPT-2, 4 slots), clients on 127.0.0.1 reading server-sent events. Concurrent clients —
// more than the slots, greedy and seeded sampling, joining while others run — each get exactly
// generate()'s tokens for their request alone; a client that goes away stops being computed and
// frees its slot; bad requests are 400 and the server goes on. Every wait has a time limit.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { GPT2, randomGPT2Weights, type GenerateOptions } from "../src/models";
import { SHAPES } from "../examples/serve";

const CFG = SHAPES["tiny"]!;
const SLOTS = 4;
let proc: ReturnType<typeof Bun.spawn> | null = null;
let url = "";
let model: GPT2;

async function startServer(extra: string[]): Promise<{ proc: ReturnType<typeof Bun.spawn>; url: string }> {
  const p = Bun.spawn([process.execPath, join(import.meta.dir, "..", "examples", "serve.ts"), "--shape", "tiny", "--seed", "11", "--slots", String(SLOTS), "--port", "0", ...extra], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const reader = p.stdout.getReader();
  let text = "";
  const limit = setTimeout(() => p.kill(), 60_000);
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the server did not start: ${await new Response(p.stderr).text()}`);
    text += new TextDecoder().decode(value);
  }
  clearTimeout(limit);
  reader.releaseLock();
  return { proc: p, url: text.split("\n")[0]!.trim() };
}

interface SSE {
  event: string;
  data: Record<string, unknown>;
}
/** POST /generate and read its events (at most `take`, then the request is aborted: the client goes away). */
async function generate(body: Record<string, unknown>, take = Infinity, base = url): Promise<{ status: number; events: SSE[]; error?: string }> {
  const ac = new AbortController();
  const limit = setTimeout(() => ac.abort(), 30_000);
  try {
    const res = await fetch(`${base}generate`, { method: "POST", body: JSON.stringify(body), signal: ac.signal });
    if (res.status !== 200) return { status: res.status, events: [], error: ((await res.json()) as { error: string }).error };
    const reader = res.body!.getReader();
    const events: SSE[] = [];
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += new TextDecoder().decode(value);
      let cut: number;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const chunk = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = "message", data = "";
        for (const line of chunk.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        events.push({ event, data: JSON.parse(data) as Record<string, unknown> });
        if (events.length >= take) {
          ac.abort();
          return { status: 200, events };
        }
      }
    }
    return { status: 200, events };
  } finally {
    clearTimeout(limit);
  }
}
const tokensOf = (r: { events: SSE[] }) => r.events.filter((e) => e.event === "message").map((e) => e.data["token"] as number);
async function stats(base = url): Promise<Record<string, number>> {
  return (await (await fetch(`${base}stats`)).json()) as Record<string, number>;
}

beforeAll(async () => {
  ({ proc, url } = await startServer([]));
  model = GPT2.fromTensors(CFG, randomGPT2Weights(CFG, 11)); // the server's model, for generate() alone
});
afterAll(async () => {
  proc?.kill();
  await proc?.exited;
  model?.dispose();
});

describe("examples/serve.ts: continuous batching over HTTP", () => {
  test("concurrent clients (more than the slots) each get generate()'s tokens for their request alone, streamed as events", async () => {
    const reqs: (GenerateOptions & { prompt: number[] })[] = [];
    for (let k = 0; k < 10; k++)
      reqs.push({
        prompt: Array.from({ length: 1 + (k % 5) }, (_, i) => (k * 13 + i * 7) % 64),
        maxNewTokens: 6 + ((k * 5) % 17),
        ...(k % 2 ? { temperature: 1.2, seed: k, topK: k % 4 ? undefined : 10 } : {}),
        stop: [],
      });
    const got = await Promise.all(reqs.map((r) => generate(r as unknown as Record<string, unknown>)));
    reqs.forEach((r, k) => {
      const { prompt, ...opts } = r;
      const alone = model.generate(prompt, opts).tokens;
      expect(got[k]!.status).toBe(200);
      expect(tokensOf(got[k]!)).toEqual(alone);
      const last = got[k]!.events[got[k]!.events.length - 1]!;
      expect(last).toEqual({ event: "done", data: { tokens: alone.length, reason: "length" } });
    });
    const s = await stats();
    expect(s["active"]).toBe(0);
    expect(s["slots"]).toBe(SLOTS);
    expect(s["steps"]!).toBeLessThan(reqs.reduce((a, r) => a + r.maxNewTokens - 1, 0)); // steps were shared
  });

  test("a stop token ends the stream with reason stop", async () => {
    const alone = model.generate([5, 6], { maxNewTokens: 10, temperature: 1.5, seed: 3, stop: [] }).tokens;
    const stop = alone[4]!, at = alone.indexOf(stop);
    const r = await generate({ prompt: [5, 6], maxNewTokens: 10, temperature: 1.5, seed: 3, stop: [stop] });
    expect(tokensOf(r)).toEqual(alone.slice(0, at + 1));
    expect(r.events[r.events.length - 1]!.data).toEqual({ tokens: at + 1, reason: "stop" });
  });

  test("bad requests are 400 with the reason; the server goes on", async () => {
    const bad = async (body: string) => {
      const res = await fetch(`${url}generate`, { method: "POST", body });
      return { status: res.status, error: ((await res.json()) as { error: string }).error };
    };
    expect(await bad("{not json")).toEqual({ status: 400, error: "the body must be JSON" });
    expect((await bad(JSON.stringify({ prompt: [64] }))).error).toContain("outside [0, 64)");
    expect((await bad(JSON.stringify({ prompt: [1], maxNewTokens: 99 }))).error).toContain("exceed the context 64");
    expect((await bad(JSON.stringify({ prompt: "hi" }))).error).toContain("prompt must be");
    expect((await bad(JSON.stringify({ text: "hi" }))).error).toContain("no tokenizer");
    expect((await fetch(`${url}nothing`)).status).toBe(404);
    expect(tokensOf(await generate({ prompt: [1], maxNewTokens: 3 }))).toEqual(model.generate([1], 3).tokens);
  });
});

describe("examples/serve.ts: cancellation", () => {
  let slow: { proc: ReturnType<typeof Bun.spawn>; url: string };
  beforeAll(async () => {
    slow = await startServer(["--min-step-ms", "20"]); // steps of 20 ms: a client can leave mid-stream
  });
  afterAll(async () => {
    slow.proc.kill();
    await slow.proc.exited;
  });

  test("a client that goes away stops being computed and frees its slot; the others are unaffected", async () => {
    const long = { prompt: [3], maxNewTokens: 60, stop: [] };
    const other = { prompt: [9, 8], maxNewTokens: 30, temperature: 1, seed: 5, stop: [] };
    const [cut, full] = await Promise.all([generate(long, 3, slow.url), generate(other, Infinity, slow.url)]);
    const { prompt: longPrompt, ...longOpts } = long, { prompt: otherPrompt, ...otherOpts } = other; // generate() refuses unknown options
    expect(tokensOf(cut)).toEqual(model.generate(longPrompt, longOpts).tokens.slice(0, 3));
    expect(tokensOf(full)).toEqual(model.generate(otherPrompt, otherOpts).tokens);
    // the server noticed: nothing active, one cancelled, and far fewer than 60 + 30 tokens computed
    let s = await stats(slow.url);
    for (const t0 = Date.now(); s["active"] !== 0 && Date.now() - t0 < 10_000; s = await stats(slow.url)) await Bun.sleep(20);
    expect(s["active"]).toBe(0);
    expect(s["cancelled"]).toBe(1);
    expect(s["tokens"]!).toBeLessThan(30 + 30);
    const before = s["tokens"]!;
    await Bun.sleep(100);
    expect((await stats(slow.url))["tokens"]).toBe(before); // no work goes on for it
    // every slot is free: SLOTS new clients run at once
    const after = await Promise.all(Array.from({ length: SLOTS }, (_, k) => generate({ prompt: [k], maxNewTokens: 4 }, Infinity, slow.url)));
    after.forEach((r, k) => expect(tokensOf(r)).toEqual(model.generate([k], 4).tokens));
  });
});
