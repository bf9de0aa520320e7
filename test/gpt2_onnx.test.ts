// The GPT-2-style decoder of examples/gpt2.ts against onnxruntime-node on the same weights: the
// committed fixture test/fixtures/gpt2_tiny/ (config.json; weights.safetensors, written by
// writeRandomGPT2; model.onnx, written from those weights by bench/onnx/export_gpt2.py;
// regenerate all three with `bun run bench/onnx/make_fixture.ts`). Greedy generation with bungpu
// and with onnxruntime (CPU execution provider, as many intra-op threads as bungpu's CPU pool) must
// choose the same tokens as the float64 reference, with logits close to each other and to it. The
// fixture is checked against its sources (the generator's bytes, the ONNX initializers), so it
// cannot drift silently. No Python is needed here.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device } from "../src";
import { Tensor } from "../src/tensor";
import { GPT2, gpt2Shapes, writeRandomGPT2, type GPT2Config } from "../src/models";
import { OrtGPT2, TINY_CONFIG, TINY_SEED } from "../bench/onnx/ort_gpt2";
import { refGenerate } from "./gpt2_reference";

const FIX = join(import.meta.dir, "fixtures", "gpt2_tiny");
const WEIGHTS = join(FIX, "weights.safetensors"), MODEL = join(FIX, "model.onnx");
// Both float32, the same formulas, summed in different orders over two layers: their logits
// (magnitude ~1-10) agree to this bound (observed ~2e-6).
const TOL_ORT = 1e-4;
// float32 against the float64 reference (test/gpt2.test.ts's bound).
const TOL_REF = 2e-3;

const tmp = mkdtempSync(join(tmpdir(), "bungpu-gpt2-onnx-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// ---- a minimal protobuf reader: the ONNX model's initializers, opset and metadata -----------------

type Field = { no: number; wire: number; int: bigint; bytes: Uint8Array };

function fields(b: Uint8Array): Field[] {
  const out: Field[] = [];
  let p = 0;
  const varint = (): bigint => {
    let v = 0n, s = 0n;
    for (;;) {
      if (p >= b.length) throw new Error("truncated varint");
      const c = b[p++]!;
      v |= BigInt(c & 0x7f) << s;
      s += 7n;
      if (!(c & 0x80)) return v;
    }
  };
  while (p < b.length) {
    const key = Number(varint()), no = key >>> 3, wire = key & 7;
    if (wire === 0) out.push({ no, wire, int: varint(), bytes: new Uint8Array(0) });
    else if (wire === 2) {
      const n = Number(varint());
      out.push({ no, wire, int: 0n, bytes: b.subarray(p, p + n) });
      p += n;
    } else if (wire === 5) (out.push({ no, wire, int: 0n, bytes: b.subarray(p, p + 4) }), (p += 4));
    else if (wire === 1) (out.push({ no, wire, int: 0n, bytes: b.subarray(p, p + 8) }), (p += 8));
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}
const str = (f: Field) => new TextDecoder().decode(f.bytes);
/** A repeated int64 field, packed or not. */
function ints(fs: Field[], no: number): number[] {
  const r: number[] = [];
  for (const f of fs.filter((x) => x.no === no)) {
    if (f.wire === 0) r.push(Number(f.int));
    else {
      // packed: the bytes are back-to-back varints
      let v = 0, s = 1;
      for (const c of f.bytes) {
        v += (c & 0x7f) * s;
        s *= 128;
        if (!(c & 0x80)) (r.push(v), (v = 0), (s = 1));
      }
    }
  }
  return r;
}

interface OnnxModel {
  opset: number;
  meta: Record<string, string>;
  inits: Map<string, { dims: number[]; dataType: number; raw: Uint8Array }>;
  nodeOps: string[];
}

function readOnnx(path: string): OnnxModel {
  const model = fields(new Uint8Array(readFileSync(path)));
  const graph = fields(model.find((f) => f.no === 7)!.bytes);
  const inits = new Map<string, { dims: number[]; dataType: number; raw: Uint8Array }>();
  for (const f of graph.filter((g) => g.no === 5)) {
    const t = fields(f.bytes);
    const name = str(t.find((x) => x.no === 8)!);
    const raw = t.find((x) => x.no === 9);
    inits.set(name, { dims: ints(t, 1), dataType: Number(t.find((x) => x.no === 2)!.int), raw: raw ? raw.bytes : new Uint8Array(0) });
  }
  const meta: Record<string, string> = {};
  for (const f of model.filter((m) => m.no === 14)) {
    const e = fields(f.bytes);
    meta[str(e.find((x) => x.no === 1)!)] = str(e.find((x) => x.no === 2)!);
  }
  const opset = fields(model.find((f) => f.no === 8)!.bytes);
  const nodeOps = graph.filter((g) => g.no === 1).map((n) => str(fields(n.bytes).find((x) => x.no === 4)!));
  return { opset: Number(opset.find((x) => x.no === 2)!.int), meta, inits, nodeOps };
}

// ---- the fixture ---------------------------------------------------------------------------------

describe("the gpt2_tiny fixture", () => {
  const cfg = JSON.parse(readFileSync(join(FIX, "config.json"), "utf8")) as GPT2Config;

  test("config.json, the safetensors metadata and the ONNX metadata hold the same config", () => {
    expect(cfg).toEqual(TINY_CONFIG);
    const strs = Object.fromEntries(Object.entries(cfg).map(([k, v]) => [k, String(v)]));
    expect(Tensor.safetensorsMetadata(WEIGHTS)).toEqual(strs);
    expect(readOnnx(MODEL).meta).toEqual(strs);
  });

  test("weights.safetensors is what writeRandomGPT2 writes for the config and seed, byte for byte", () => {
    const again = join(tmp, "again.safetensors");
    writeRandomGPT2(again, cfg, TINY_SEED);
    expect(Buffer.compare(readFileSync(again), readFileSync(WEIGHTS))).toBe(0);
  });

  test("every weight is an ONNX initializer of the same shape and the same float32 bytes", () => {
    const onnx = readOnnx(MODEL);
    const w = Tensor.fromSafetensors(WEIGHTS);
    const shapes = gpt2Shapes(cfg);
    expect(Object.keys(w).sort()).toEqual(Object.keys(shapes).sort());
    for (const [name, shape] of Object.entries(shapes)) {
      const init = onnx.inits.get(name);
      expect(init, name).toBeDefined();
      expect(init!.dims, name).toEqual(shape);
      expect(init!.dataType, name).toBe(1); // FLOAT
      const ours = w[name]!.toArray() as Float32Array;
      expect(init!.raw.byteLength, name).toBe(ours.byteLength);
      const theirs = new Float32Array(init!.raw.slice().buffer);
      expect(Buffer.compare(Buffer.from(theirs.buffer), Buffer.from(ours.buffer, ours.byteOffset, ours.byteLength)), name).toBe(0);
    }
    // standard ops only, opset 17: attention and GELU written out, not fused contrib ops
    expect(onnx.opset).toBe(17);
    const ops = new Set(onnx.nodeOps);
    for (const op of ["LayerNormalization", "MatMul", "Softmax", "Tanh", "Concat"]) expect(ops.has(op), op).toBe(true);
  });
});

// ---- bungpu against onnxruntime and the float64 reference ----------------------------------------

describe("GPT-2-style decoder: bungpu and onnxruntime-node on the same weights", () => {
  const threads = Device.default().props.computeUnits; // the CPU backend's pool: one thread per online core
  const model = GPT2.load(WEIGHTS);
  const weights: Record<string, Float32Array> = {};
  for (const [k, t] of Object.entries(Tensor.fromSafetensors(WEIGHTS))) weights[k] = t.toArray() as Float32Array;
  let ort: OrtGPT2;
  beforeAll(async () => {
    ort = await OrtGPT2.create(MODEL, TINY_CONFIG, threads);
  });
  afterAll(async () => {
    model.dispose();
    await ort?.dispose();
  });

  const maxDiff = (a: readonly ArrayLike<number>[], b: readonly ArrayLike<number>[]) => {
    let m = 0;
    a.forEach((l, k) => {
      expect(l.length).toBe(b[k]!.length);
      for (let i = 0; i < l.length; i++) m = Math.max(m, Math.abs(l[i]! - b[k]![i]!));
    });
    return m;
  };

  for (const prompt of [[3, 17, 42, 5], [9], [60, 1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
    const n = Math.min(8, TINY_CONFIG.nCtx - prompt.length + 1);
    test(`${prompt.length}-token prompt, ${n} greedy tokens: the same tokens as onnxruntime and the float64 reference`, async () => {
      const ref = refGenerate(weights, TINY_CONFIG, prompt, n);
      const ours = model.generate(prompt, n);
      const theirs = await ort.generate(prompt, n);
      expect(ours.tokens).toEqual(ref.tokens);
      expect(theirs.tokens).toEqual(ref.tokens);
      expect(theirs.logits.length).toBe(n);
      expect(maxDiff(ours.logits, theirs.logits)).toBeLessThan(TOL_ORT);
      expect(maxDiff(theirs.logits, ref.logits)).toBeLessThan(TOL_REF);
      expect(maxDiff(ours.logits, ref.logits)).toBeLessThan(TOL_REF);
    });
  }

  test("the ONNX model's prompt path gives every position's logits, as bungpu's prompt and head plans", async () => {
    const prompt = [5, 40, 2, 33, 7, 11];
    const out = await ort.run(prompt);
    expect(out.logits!.dims).toEqual([1, prompt.length, TINY_CONFIG.vocabSize]);
    expect(out["present_key.1"]!.dims).toEqual([1, TINY_CONFIG.nHead, prompt.length, TINY_CONFIG.nEmbd / TINY_CONFIG.nHead]);
    const ours = model.logits(prompt);
    expect(ours.length).toBe(prompt.length * TINY_CONFIG.vocabSize);
    expect(maxDiff([ours], [out.logits!.data as Float32Array])).toBeLessThan(TOL_ORT);
    // each position's logits are the reference's for the prefix ending there
    for (const t of [1, 3, prompt.length]) {
      const ref = refGenerate(weights, TINY_CONFIG, prompt.slice(0, t), 1).logits[0]!;
      const V = TINY_CONFIG.vocabSize;
      expect(maxDiff([ours.subarray((t - 1) * V, t * V)], [ref])).toBeLessThan(TOL_REF);
    }
  });

  test("onnxruntime runs with bungpu's CPU thread count", () => {
    expect(ort.threads).toBe(threads);
    expect(threads).toBeGreaterThanOrEqual(1);
  });
});
