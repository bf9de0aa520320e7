// Safetensors: reading (the header checked byte by byte, dtypes converted exactly), writing (the
// layout the format requires) and swapping a prepared plan's weights without preparing again.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, GpuError, Status, Tensor } from "../src";

const dev = Device.open("cpu");
const dir = mkdtempSync(join(tmpdir(), "bungpu-safetensors-"));
afterAll(() => {
  dev.dispose();
  rmSync(dir, { recursive: true, force: true });
});
let fileNo = 0;
const fresh = (): string => join(dir, `f${fileNo++}.safetensors`);

/** A file laid out as the reference writer does: u64 LE header length, JSON header padded with spaces to 8, data. */
function fileFrom(header: unknown, data: Uint8Array | number[], opts: { pad?: boolean; rawHeader?: string; length?: bigint } = {}): string {
  let h = opts.rawHeader ?? JSON.stringify(header);
  if (opts.pad ?? true) while (h.length % 8) h += " ";
  const hb = new TextEncoder().encode(h);
  const out = new Uint8Array(8 + hb.length + data.length);
  new DataView(out.buffer).setBigUint64(0, opts.length ?? BigInt(hb.length), true);
  out.set(hb, 8);
  out.set(data instanceof Uint8Array ? data : Uint8Array.from(data), 8 + hb.length);
  const p = fresh();
  writeFileSync(p, out);
  return p;
}
const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

function expectGpuError(f: () => unknown, code: number, ...parts: string[]): GpuError {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(GpuError);
  const g = err as GpuError;
  expect(g.code).toBe(code);
  for (const p of parts) expect(g.message).toContain(p);
  return g;
}

describe("writing and reading back", () => {
  test("several tensors of both dtypes and a 0-d one round-trip, with metadata", () => {
    const a = Tensor.from(Float32Array.from([1.5, -2, 3.25, 0, 1e-30, -7]), [2, 3]);
    const b = Tensor.arange(10).reshape([2, 5]); // int32, computed
    const c = Tensor.from([42.5], []).reshape([]);
    const d = a.mul(2).sum(1); // computed float32
    const p = fresh();
    Tensor.toSafetensors(p, { a, b, c, d }, { format: "pt", note: "round trip" }, { device: dev });
    const back = Tensor.fromSafetensors(p);
    expect(Object.keys(back)).toEqual(["a", "b", "c", "d"]);
    expect(back.a!.shape).toEqual([2, 3]);
    expect(back.a!.dtype).toBe("float32");
    expect(Array.from(back.a!.toArray({ device: dev }))).toEqual(Array.from(Float32Array.from([1.5, -2, 3.25, 0, 1e-30, -7])));
    expect(back.b!.dtype).toBe("int32");
    expect(back.b!.shape).toEqual([2, 5]);
    expect(back.b!.toList()).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(back.c!.shape).toEqual([]);
    expect(back.c!.toList()).toEqual([42.5]);
    expect(back.d!.toList()).toEqual([5.5, -14]);
    expect(Tensor.safetensorsMetadata(p)).toEqual({ format: "pt", note: "round trip" });
  });

  test("the written layout: u64 LE length, header padded with spaces to 8, offsets in key order", () => {
    const p = fresh();
    Tensor.toSafetensors(p, { w: Tensor.from([1, 2, 3]), i: Tensor.from([7], [1], { dtype: "int32" }) });
    const f = new Uint8Array(readFileSync(p));
    const n = Number(new DataView(f.buffer, f.byteOffset).getBigUint64(0, true));
    expect(n % 8).toBe(0);
    const text = new TextDecoder().decode(f.subarray(8, 8 + n));
    expect(text.trimEnd()).toBe(JSON.stringify({ w: { dtype: "F32", shape: [3], data_offsets: [0, 12] }, i: { dtype: "I32", shape: [1], data_offsets: [12, 16] } }));
    expect(text.slice(text.trimEnd().length)).toMatch(/^ *$/);
    expect(f.length).toBe(8 + n + 16);
    expect(Array.from(new Float32Array(f.slice(8 + n, 8 + n + 12).buffer))).toEqual([1, 2, 3]);
    expect(new Int32Array(f.slice(8 + n + 12).buffer)[0]).toBe(7);
  });

  test("an empty record writes a valid file", () => {
    const p = fresh();
    Tensor.toSafetensors(p, {});
    expect(Tensor.fromSafetensors(p)).toEqual({});
  });

  test("bad arguments to toSafetensors are INVALID_VALUE; a missing directory FILE_NOT_FOUND", () => {
    expectGpuError(() => Tensor.toSafetensors(3 as never, {}), Status.INVALID_VALUE, "path");
    expectGpuError(() => Tensor.toSafetensors(fresh(), { a: 3 as never }), Status.INVALID_VALUE, "a");
    expectGpuError(() => Tensor.toSafetensors(fresh(), { __metadata__: Tensor.from([1]) }), Status.INVALID_VALUE, "__metadata__");
    expectGpuError(() => Tensor.toSafetensors(fresh(), {}, { k: 3 as never }), Status.INVALID_VALUE, "metadata");
    expectGpuError(() => Tensor.toSafetensors(join(dir, "no", "such", "x.safetensors"), { a: Tensor.from([1]) }), Status.FILE_NOT_FOUND, "no");
  });
});

describe("reading files written by hand", () => {
  test("the reference layout, byte by byte, with __metadata__ and tensors in non-key order", () => {
    const f32 = Float32Array.from([0.5, -1, 2]);
    const i32 = Int32Array.from([-3, 2147483647]);
    const data = new Uint8Array(20);
    data.set(bytesOf(i32), 0);
    data.set(bytesOf(f32), 8);
    const p = fileFrom(
      { __metadata__: { format: "pt" }, weight: { dtype: "F32", shape: [3, 1], data_offsets: [8, 20] }, ids: { dtype: "I32", shape: [2], data_offsets: [0, 8] } },
      data,
    );
    const t = Tensor.fromSafetensors(p);
    expect(Object.keys(t).sort()).toEqual(["ids", "weight"]);
    expect(t.weight!.shape).toEqual([3, 1]);
    expect(t.weight!.toList()).toEqual([0.5, -1, 2]);
    expect(t.ids!.dtype).toBe("int32");
    expect(t.ids!.toList()).toEqual([-3, 2147483647]);
    expect(Tensor.safetensorsMetadata(p)).toEqual({ format: "pt" });
  });

  test("an unpadded header is accepted (the padding is the writer's duty)", () => {
    const p = fileFrom({ x: { dtype: "F32", shape: [1], data_offsets: [0, 4] } }, bytesOf(Float32Array.from([9])), { pad: false });
    expect(Tensor.fromSafetensors(p).x!.toList()).toEqual([9]);
  });

  test("F16 and BF16 load as float16 and bfloat16, their values exact", () => {
    const f16 = Uint16Array.from([0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x7c00, 0xfc00, 0x8000, 0x0400]);
    const bf16 = Uint16Array.from([0x3f80, 0x4049, 0xc2f7, 0x0000, 0x7f80]);
    const data = new Uint8Array(f16.byteLength + bf16.byteLength);
    data.set(bytesOf(f16), 0);
    data.set(bytesOf(bf16), f16.byteLength);
    const p = fileFrom(
      { h: { dtype: "F16", shape: [9], data_offsets: [0, 18] }, b: { dtype: "BF16", shape: [5], data_offsets: [18, 28] } },
      data,
    );
    const t = Tensor.fromSafetensors(p);
    expect(t.h!.dtype).toBe("float16");
    const h = t.h!.toList();
    expect(h.slice(0, 5)).toEqual([1, -2, 65504, 2 ** -24, 0.333251953125]);
    expect(h[5]).toBe(Infinity);
    expect(h[6]).toBe(-Infinity);
    expect(Object.is(h[7], -0)).toBe(true);
    expect(h[8]).toBe(2 ** -14);
    expect(t.b!.dtype).toBe("bfloat16");
    expect(t.b!.toList()).toEqual([1, 3.140625, -123.5, 0, Infinity]);
    // widened on request: exact
    expect(Array.from(t.b!.float().toArray())).toEqual([1, 3.140625, -123.5, 0, Infinity]);
  });

  test("BOOL, U8, I8 and I64 load as their own dtypes; U32 / U64 as int64 and F64 as float32 where exact, refused otherwise", () => {
    const data = [0, 1, 7, 0, 255, 0x80, 0xff, 0x7f]; // BOOL[4] = 0,1,1,0; U8[2] = 255,128; I8[2] = -1,127
    const p = fileFrom(
      { b: { dtype: "BOOL", shape: [4], data_offsets: [0, 4] }, u: { dtype: "U8", shape: [2], data_offsets: [4, 6] }, i: { dtype: "I8", shape: [2], data_offsets: [6, 8] } },
      data,
    );
    const t = Tensor.fromSafetensors(p);
    expect([t.b!.dtype, t.u!.dtype, t.i!.dtype]).toEqual(["bool", "uint8", "int8"]);
    expect(t.b!.toList()).toEqual([0, 1, 1, 0]);
    expect(t.u!.toList()).toEqual([255, 128]);
    expect(t.i!.toList()).toEqual([-1, 127]);

    const ok64 = fileFrom({ x: { dtype: "I64", shape: [3], data_offsets: [0, 24] } }, bytesOf(BigInt64Array.from([-5n, 0n, 2147483647n])));
    expect(Tensor.fromSafetensors(ok64).x!.dtype).toBe("int64");
    expect(Tensor.fromSafetensors(ok64).x!.toList()).toEqual([-5, 0, 2147483647]);
    const big64 = fileFrom({ x: { dtype: "I64", shape: [2], data_offsets: [0, 16] } }, bytesOf(BigInt64Array.from([1n, 1n << 40n])));
    expect(Array.from(Tensor.fromSafetensors(big64).x!.toArray<BigInt64Array>())).toEqual([1n, 1n << 40n]);
    const u64 = fileFrom({ x: { dtype: "U64", shape: [2], data_offsets: [0, 16] } }, bytesOf(BigUint64Array.from([1n, 1n << 63n])));
    expectGpuError(() => Tensor.fromSafetensors(u64), Status.INVALID_VALUE, "U64", "int64", u64);

    const okf64 = fileFrom({ x: { dtype: "F64", shape: [2], data_offsets: [0, 16] } }, bytesOf(Float64Array.from([0.5, -3])));
    expect(Tensor.fromSafetensors(okf64).x!.toList()).toEqual([0.5, -3]);
    const badf64 = fileFrom({ x: { dtype: "F64", shape: [1], data_offsets: [0, 8] } }, bytesOf(Float64Array.from([0.1])));
    expectGpuError(() => Tensor.fromSafetensors(badf64), Status.INVALID_VALUE, "F64", "float32");

    const f8 = fileFrom({ x: { dtype: "F8_E4M3", shape: [1], data_offsets: [0, 1] } }, [0x38]);
    expectGpuError(() => Tensor.fromSafetensors(f8), Status.INVALID_VALUE, "F8_E4M3", "no exact conversion");
  });

  test("tensors of a file are named inputs: run() takes new values by those names", async () => {
    const p = fileFrom({ w: { dtype: "F32", shape: [2], data_offsets: [0, 8] } }, bytesOf(Float32Array.from([1, 2])));
    const { w } = Tensor.fromSafetensors(p);
    const plan = w!.mul(3).prepare({ device: dev });
    try {
      expect(plan.inputNames).toEqual(["w"]);
      const out = await plan.run({ w: Float32Array.from([5, 6]) });
      expect(Array.from(out.output0!)).toEqual([15, 18]);
    } finally {
      plan.dispose();
    }
  });
});

describe("malformed files are GpuError, never a TypeError or a crash", () => {
  const ok = { x: { dtype: "F32", shape: [2], data_offsets: [0, 8] } };
  const data8 = bytesOf(Float32Array.from([1, 2]));

  test("a missing file is FILE_NOT_FOUND naming the path; a directory or a bad path INVALID_VALUE", () => {
    const p = join(dir, "absent.safetensors");
    expectGpuError(() => Tensor.fromSafetensors(p), Status.FILE_NOT_FOUND, p);
    expectGpuError(() => Tensor.fromSafetensors(dir), Status.INVALID_VALUE, "not a regular file");
    expectGpuError(() => Tensor.fromSafetensors(undefined as never), Status.INVALID_VALUE, "path");
    expectGpuError(() => Tensor.fromSafetensors("" as never), Status.INVALID_VALUE, "path");
  });

  test("a 0-byte file and a file shorter than 8 bytes", () => {
    const p = fresh();
    writeFileSync(p, new Uint8Array(0));
    expectGpuError(() => Tensor.fromSafetensors(p), Status.INVALID_VALUE, p, "0 bytes");
    const q = fresh();
    writeFileSync(q, new Uint8Array([1, 0, 0]));
    expectGpuError(() => Tensor.fromSafetensors(q), Status.INVALID_VALUE, "3 bytes");
  });

  test("a header length past the end of the file (a truncated file, a huge length)", () => {
    const full = fileFrom(ok, data8);
    const bytes = readFileSync(full);
    const cut = fresh();
    writeFileSync(cut, bytes.subarray(0, 20)); // inside the header
    expectGpuError(() => Tensor.fromSafetensors(cut), Status.INVALID_VALUE, "past the end");
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(ok, data8, { length: 1n << 62n })), Status.INVALID_VALUE, "past the end");
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(ok, data8, { length: 0xffffffffffffffffn })), Status.INVALID_VALUE, "past the end");
  });

  test("a file shorter than its header says (data truncated)", () => {
    const full = fileFrom(ok, data8);
    const bytes = readFileSync(full);
    const cut = fresh();
    writeFileSync(cut, bytes.subarray(0, bytes.length - 3));
    expectGpuError(() => Tensor.fromSafetensors(cut), Status.INVALID_VALUE, "past the data section", "truncated");
  });

  test("a header that is not a JSON object", () => {
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(null, [], { rawHeader: "{not json" })), Status.INVALID_VALUE, "not JSON");
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(null, [], { rawHeader: "[1, 2]  " })), Status.INVALID_VALUE, "start with '{'");
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(null, [], { rawHeader: "{}" + "\u0000".repeat(6), pad: false })), Status.INVALID_VALUE, "not JSON");
    expectGpuError(() => Tensor.fromSafetensors(fileFrom(null, [], { length: 1n, rawHeader: "{", pad: false })), Status.INVALID_VALUE, "too short");
    const badUtf8 = fresh();
    const b = new Uint8Array(8 + 8);
    b[0] = 8;
    b.set([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d], 8);
    writeFileSync(badUtf8, b);
    expectGpuError(() => Tensor.fromSafetensors(badUtf8), Status.INVALID_VALUE, "UTF-8");
  });

  const cases: [string, unknown, number[] | Uint8Array, string][] = [
    ["an entry that is not an object", { x: 3 }, [], "not an object"],
    ["a missing dtype", { x: { shape: [2], data_offsets: [0, 8] } }, data8, "dtype"],
    ["an unknown dtype", { x: { dtype: "F33", shape: [2], data_offsets: [0, 8] } }, data8, "unknown dtype"],
    // found by the fuzzer: Object.prototype's names were looked up as dtypes (a size of NaN bytes)
    ...["constructor", "__proto__", "toString"].map((d): [string, unknown, number[], string] => [`a dtype named ${d}`, { x: { dtype: d, shape: [], data_offsets: [0, 0] } }, [], `unknown dtype "${d}"`]),
    ["a negative dimension", { x: { dtype: "F32", shape: [-2], data_offsets: [0, 8] } }, data8, "shape"],
    ["a fractional dimension", { x: { dtype: "F32", shape: [1.5], data_offsets: [0, 8] } }, data8, "shape"],
    ["a shape that is not an array", { x: { dtype: "F32", shape: "2", data_offsets: [0, 8] } }, data8, "shape"],
    ["one data offset", { x: { dtype: "F32", shape: [2], data_offsets: [8] } }, data8, "data_offsets"],
    ["offsets that end before they begin", { x: { dtype: "F32", shape: [0], data_offsets: [8, 0] } }, data8, "end before"],
    ["offsets past the data section", { x: { dtype: "F32", shape: [4], data_offsets: [0, 16] } }, data8, "past the data section"],
    ["shape × dtype size ≠ byte length", { x: { dtype: "F32", shape: [3], data_offsets: [0, 8] } }, data8, "12 bytes"],
    ["an unknown field", { x: { dtype: "F32", shape: [2], data_offsets: [0, 8], extra: 1 } }, data8, "unknown field"],
    ["overlapping tensors", { x: { dtype: "F32", shape: [2], data_offsets: [0, 8] }, y: { dtype: "F32", shape: [1], data_offsets: [4, 8] } }, data8, "overlaps"],
    ["a hole between tensors", { x: { dtype: "F32", shape: [1], data_offsets: [4, 8] } }, data8, "hole"],
    ["bytes after the last tensor", { x: { dtype: "F32", shape: [1], data_offsets: [0, 4] } }, data8, "cover 4"],
    ["__metadata__ that is not an object", { __metadata__: "x", ...ok }, data8, "__metadata__"],
    ["__metadata__ with a non-string value", { __metadata__: { a: 1 }, ...ok }, data8, "__metadata__"],
  ];
  for (const [what, header, data, part] of cases)
    test(what, () => {
      const p = fileFrom(header, data);
      expectGpuError(() => Tensor.fromSafetensors(p), Status.INVALID_VALUE, p, part);
    });
});

describe("ExecutionPlan.setWeights: new weights without preparing again", () => {
  test("named inputs of the same shape and dtype are rewritten and stay for later runs", async () => {
    const p = fresh();
    Tensor.toSafetensors(p, { w: Tensor.from([1, 2, 3, 4], [2, 2]), b: Tensor.from([10, 20]) });
    const { w, b } = Tensor.fromSafetensors(p);
    const x = Tensor.from([1, 1], [1, 2], { name: "x" });
    const plan = x.matmul(w!).add(b!).prepare({ device: dev });
    try {
      plan.execute();
      expect(Array.from(plan.readOutput(0))).toEqual([14, 26]);
      const p2 = fresh();
      Tensor.toSafetensors(p2, { w: Tensor.from([0, 1, 1, 0], [2, 2]), b: Tensor.from([-1, -2]) });
      plan.setWeights(Tensor.fromSafetensors(p2));
      plan.execute();
      expect(Array.from(plan.readOutput(0))).toEqual([0, -1]);
      // a run with other data for x keeps the new weights; a run without inputs too
      expect(Array.from((await plan.run({ x: Float32Array.from([2, 3]) })).output0!)).toEqual([2, 0]);
      expect(Array.from((await plan.run()).at(0)!)).toEqual([0, -1]);
      // typed arrays, and a computed tensor (realized on the plan's device)
      plan.setWeights({ b: Float32Array.from([5, 5]), w: Tensor.from([1, 0, 0, 1], [2, 2]).mul(2) });
      plan.execute();
      expect(Array.from(plan.readOutput(0))).toEqual([7, 7]);
    } finally {
      plan.dispose();
    }
  });

  test("mismatches are INVALID_VALUE and write nothing", () => {
    const w = Tensor.from([1, 2, 3, 4], [2, 2], { name: "w" });
    const plan = w.sum().prepare({ device: dev });
    try {
      expectGpuError(() => plan.setWeights({ nope: Float32Array.from([1]) }), Status.INVALID_VALUE, "no input named");
      expectGpuError(() => plan.setWeights({ w: Float32Array.from([1, 2]) }), Status.INVALID_VALUE, "elements");
      expectGpuError(() => plan.setWeights({ w: Int32Array.from([1, 2, 3, 4]) }), Status.INVALID_VALUE, "Float32Array");
      expectGpuError(() => plan.setWeights({ w: Tensor.from([1, 2, 3, 4], [4]) }), Status.INVALID_VALUE, "shape");
      expectGpuError(() => plan.setWeights({ w: Tensor.from([1, 2, 3, 4], [2, 2], { dtype: "int32" }) }), Status.INVALID_VALUE, "int32");
      expectGpuError(() => plan.setWeights({ w: 3 as never }), Status.INVALID_VALUE, "Tensor");
      expectGpuError(() => plan.setWeights(null as never), Status.INVALID_VALUE, "weights");
      // the first entry is fine, the second is not: nothing is written
      const w2 = Tensor.from([0, 0, 0, 0], [2, 2], { name: "w" });
      expectGpuError(() => plan.setWeights({ w: w2, other: Float32Array.from([1]) }), Status.INVALID_VALUE, "other");
      plan.execute();
      expect(plan.readOutput(0)[0]).toBe(10);
    } finally {
      plan.dispose();
    }
    expectGpuError(() => plan.setWeights({ w: Float32Array.from([1, 2, 3, 4]) }), Status.ILLEGAL_STATE, "disposed");
  });
});

describe("files that change under the loader, and names that are only data (issue 23 items 4 and 5)", () => {
  test("a file that shrinks while it loads is a GpuError naming where it ended, not a SIGBUS (in a subprocess)", () => {
    const big = join(dir, "shrinking.safetensors");
    const t: Record<string, Tensor> = {};
    for (let i = 0; i < 8; i++) t[`w${i}`] = Tensor.from(new Float32Array(1 << 18).fill(i), [1 << 18]);
    Tensor.toSafetensors(big, t);
    // The child truncates the file after the header and the first tensors have been read (when the
    // loader allocates the third tensor's array), then reports what the load said.
    const src = `
      import { truncateSync } from "node:fs";
      import { Tensor } from "./src";
      let n = 0;
      const Real = ArrayBuffer;
      globalThis.ArrayBuffer = class extends Real { constructor(len, o) { super(len, o); if (len === ${4 << 18} && ++n === 3) truncateSync(${JSON.stringify(big)}, 4096); } };
      try { Tensor.fromSafetensors(${JSON.stringify(big)}); console.log("loaded"); }
      catch (e) { console.log(e.codeName, e.message.includes("ended at byte") ? "names where" : e.message); }`;
    const r = Bun.spawnSync([process.execPath, "-e", src], { cwd: join(import.meta.dir, ".."), stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString().trim()).toBe("BG_ERR_INVALID_VALUE names where");
    expect(r.exitCode).toBe(0);
  });

  test("a tensor or a metadata key named __proto__ survives a round trip as data", () => {
    const p = join(dir, "proto.safetensors");
    const named: Record<string, Tensor> = {};
    Object.defineProperty(named, "__proto__", { value: Tensor.from(new Float32Array([1, 2]), [2]), enumerable: true });
    named["constructor"] = Tensor.from(new Float32Array([3]), [1]);
    const meta: Record<string, string> = {};
    Object.defineProperty(meta, "__proto__", { value: "p", enumerable: true });
    Tensor.toSafetensors(p, named, meta);
    const back = Tensor.fromSafetensors(p);
    expect(Object.keys(back).sort()).toEqual(["__proto__", "constructor"]);
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    expect([...(Object.getOwnPropertyDescriptor(back, "__proto__")!.value as Tensor).toArray({ device: dev })]).toEqual([1, 2]);
    expect(Object.getOwnPropertyDescriptor(Tensor.safetensorsMetadata(p), "__proto__")!.value).toBe("p");
  });
});

describe("stated limits on what a header may declare (issue 23 item 4)", () => {
  test("more than 1,024 dimensions or 1,000,000 tensors is INVALID_VALUE naming the limit; reading stays linear below", () => {
    const deep = fileFrom({ t: { dtype: "F32", shape: new Array(1025).fill(1), data_offsets: [0, 4] } }, bytesOf(Float32Array.from([1])));
    expectGpuError(() => Tensor.fromSafetensors(deep), Status.INVALID_VALUE, "1025 dimensions", "1024");
    const ok = fileFrom({ t: { dtype: "F32", shape: new Array(1024).fill(1), data_offsets: [0, 4] } }, bytesOf(Float32Array.from([1])));
    expect(Tensor.fromSafetensors(ok).t!.shape.length).toBe(1024);
    const many: Record<string, unknown> = {};
    for (let i = 0; i <= 1_000_000; i++) many[`t${i}`] = { dtype: "F32", shape: [0], data_offsets: [0, 0] };
    many["__metadata__"] = { a: "b" };
    const p = fileFrom(many, []);
    expectGpuError(() => Tensor.fromSafetensors(p), Status.INVALID_VALUE, "1000002 entries", "1000000 tensors");
  }, 60_000);
});

describe("reading straight into device memory ({ device }; issue 21: a checkpoint takes its own size)", () => {
  test("on the CPU backend each tensor's data is a view of a device buffer that a plan's constant uses as it is: no second copy", async () => {
    const { ptr } = await import("bun:ffi");
    const { constantHolders } = await import("../src/tensor/constants");
    const dir = mkdtempSync(join(tmpdir(), "bungpu-st-device-"));
    try {
      const path = join(dir, "w.safetensors");
      const wdata = Float32Array.from({ length: 64 * 32 }, (_, i) => Math.sin(i));
      Tensor.toSafetensors(path, { W: Tensor.from(wdata, [64, 32]), b: Tensor.from(Float32Array.from({ length: 32 }, (_, i) => i / 4), [32]), n: Tensor.from(new Int32Array([7, 8]), [2]).cast("int8") });
      const t = Tensor.fromSafetensors(path, { device: dev });
      const W = t["W"]!, b = t["b"]!;
      const data = (W.node.arg as { data: Float32Array }).data; // the tensor's own data array
      expect(data).toBeInstanceOf(Float32Array);
      expect(Array.from(data)).toEqual(Array.from(wdata));
      const x = Tensor.from(new Float32Array(64), [1, 64], { name: "x" });
      const plan = x.matmul(W).add(b).prepare({ device: dev, constants: [W, b] });
      // the plan's buffer for W is the memory the file was read into
      const wBuf = plan.buffers().find((buf) => buf.byteLength === wdata.byteLength)!;
      expect(wBuf.address).toBe(ptr(data));
      expect(constantHolders(wBuf)).toBe(2); // the data array's own hold and the plan's
      const xs = Float32Array.from({ length: 64 }, (_, i) => (i % 5) - 2);
      const got = (await plan.run({ x: xs }))[plan.outputNames[0]!] as Float32Array;
      for (let j = 0; j < 32; j++) {
        let want = j / 4;
        for (let i = 0; i < 64; i++) want += xs[i]! * wdata[i * 32 + j]!;
        expect(Math.abs(got[j]! - want)).toBeLessThan(1e-4);
      }
      plan.dispose();
      expect(constantHolders(wBuf)).toBe(1);
      expect((W.toArray() as Float32Array)[5]).toBe(wdata[5]!); // the data outlives the plan
      // int8 is read as it is stored too; a tensor read on a device still works as a plain input
      expect(Array.from(t["n"]!.toArray() as unknown as ArrayLike<number>)).toEqual([7, 8]);
      const p2 = x.matmul(W).prepare({ device: dev });
      expect(p2.buffers().some((buf) => buf.address === ptr(data))).toBe(false); // an input gets its own buffer
      p2.dispose();
      expectGpuError(() => Tensor.fromSafetensors(path, { device: "cpu" as never }), Status.INVALID_VALUE, "device must be a Device");
      expectGpuError(() => Tensor.fromSafetensors(path, { devcie: dev } as never), Status.INVALID_VALUE, "did you mean device");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
