// ExecutionPlan.run: inputs in, outputs out, safe under any number of concurrent callers; and
// execute/executeAsync never interleave (they refuse with "plan busy" instead).
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, ExecMode, GpuError, Status, Tensor, Variable, memoryStats } from "../src";

const dev = Device.open("cpu");
afterAll(() => dev.dispose());

const R = 4, C = 8;
// y[r] = Σ_c (2·x[r, c] + w[c]) and z = max over everything of x: two inputs, two outputs.
function makePlan() {
  const x = Tensor.from(new Float32Array(R * C), [R, C], { name: "x" });
  const w = Tensor.from(new Float32Array(C).fill(1), [C], { name: "w" });
  const plan = Tensor.prepareBatch([x.mul(2).add(w).sum(1), x.max()], { device: dev, outputNames: ["y", "z"] });
  return { plan, xId: x.id };
}
function input(i: number): Float32Array {
  const a = new Float32Array(R * C);
  for (let j = 0; j < a.length; j++) a[j] = ((i * 31 + j * 7) % 97) - 40;
  return a;
}
function reference(x: Float32Array, w: Float32Array = new Float32Array(C).fill(1)): { y: number[]; z: number } {
  const y: number[] = [];
  for (let r = 0; r < R; r++) {
    let s = 0;
    for (let c = 0; c < C; c++) s += 2 * x[r * C + c]! + w[c]!;
    y.push(s);
  }
  return { y, z: Math.max(...x) };
}

describe("ExecutionPlan.run", () => {
  test("1,000 concurrent calls with distinct inputs each get their own answer", async () => {
    const { plan } = makePlan();
    try {
      expect(plan.inputNames).toEqual(["x", "w"]);
      expect(plan.outputNames).toEqual(["y", "z"]);
      const inputs = Array.from({ length: 1000 }, (_, i) => input(i));
      // Half by position, half by name.
      const results = await Promise.all(
        inputs.map(async (x, i) => {
          if (i % 2) {
            const { y, z } = await plan.run({ x });
            return { y: [...y!], z: z![0]! };
          }
          const [y, z] = await plan.run([x]);
          return { y: [...y!], z: z![0]! };
        }),
      );
      const wrong = results.flatMap((r, i) => (JSON.stringify(r) === JSON.stringify(reference(inputs[i]!)) ? [] : [i]));
      expect(wrong).toEqual([]);
    } finally {
      plan.dispose();
    }
  }, 60_000);

  test("inputs not given keep their prepared data; outputs are the caller's copies", async () => {
    const { plan } = makePlan();
    try {
      const w2 = new Float32Array(C).map((_, c) => c);
      const x = input(5);
      const [a, b, c] = await Promise.all([plan.run({ x, w: w2 }), plan.run({ x }), plan.run([x, w2])]);
      expect([...a.y!]).toEqual(reference(x, w2).y);
      expect([...b.y!]).toEqual(reference(x).y); // w back to its prepared ones
      expect([...c[0]!]).toEqual(reference(x, w2).y);
      // The caller may change its input after run() returns, and owns the outputs.
      const x2 = input(9);
      const p = plan.run({ x: x2 });
      x2.fill(1000);
      const r = await p;
      expect([...r.y!]).toEqual(reference(input(9)).y);
      r.y!.fill(-1);
      const again = await plan.run({ x: input(9) });
      expect([...again.y!]).toEqual(reference(input(9)).y);
    } finally {
      plan.dispose();
    }
  });

  test("variables by name or in vars, each run with its own values", async () => {
    const S = new Variable("S", 1, 16);
    const plan = Tensor.arange(S).cast("float32").mul(3).sum().prepare({ device: dev });
    try {
      const ns = Array.from({ length: 64 }, (_, i) => 1 + (i % 16));
      const got = await Promise.all(ns.map((n, i) => (i % 2 ? plan.run({ S: n }) : plan.run([], { vars: { S: n } }))));
      const values = got.map((g) => (Array.isArray(g) ? g[0]![0] : (g as Record<string, Float32Array>).output0![0]));
      expect(values).toEqual(ns.map((n) => (3 * n * (n - 1)) / 2));
      // Other modes give the same answers.
      const [g] = await plan.run([], { vars: { S: 10 }, mode: ExecMode.Graph });
      expect(g![0]).toBe(135);
    } finally {
      plan.dispose();
    }
  });

  test("bad inputs reject with GpuError INVALID_VALUE and leave the queue working", async () => {
    const { plan } = makePlan();
    try {
      const bad: unknown[] = [null, "x", 3, [new Float64Array(R * C)], [new Float32Array(3)], { x: new Int32Array(R * C) }, { nope: input(0) }, [input(0), input(1), input(2)]];
      for (const f of bad) {
        const e = await plan.run(f as never).then(() => null, (e) => e);
        expect(e).toBeInstanceOf(GpuError);
        expect((e as GpuError).code).toBe(Status.INVALID_VALUE);
      }
      const { y } = await plan.run({ x: input(3) });
      expect([...y!]).toEqual(reference(input(3)).y);
    } finally {
      plan.dispose();
    }
  });

  test("dispose with runs queued: the one in flight finishes, the rest reject with GpuError", async () => {
    const { plan } = makePlan();
    const ps = Array.from({ length: 20 }, (_, i) => plan.run({ x: input(i) }).then((r) => [...r.y!], (e) => e));
    await Promise.resolve();
    plan.dispose();
    expect(() => plan.dispose()).not.toThrow();
    const out = await Promise.all(ps);
    out.forEach((r, i) => {
      if (Array.isArray(r)) expect(r).toEqual(reference(input(i)).y);
      else {
        expect(r).toBeInstanceOf(GpuError);
        expect((r as GpuError).code).toBe(Status.ILLEGAL_STATE);
      }
    });
    await expect(plan.run({ x: input(0) })).rejects.toBeInstanceOf(GpuError);
  });
});

describe("execute and executeAsync never interleave", () => {
  test("200 concurrent write/executeAsync/read callers: each gets its own answer or GpuError 'plan busy', never another's", async () => {
    const { plan, xId } = makePlan();
    try {
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, async (_, i) => {
          try {
            plan.bufferMutById(xId)!.write(input(i));
            await plan.executeAsync();
            return [...plan.readOutput(0)];
          } catch (e) {
            return e;
          }
        }),
      );
      let right = 0;
      const wrong: string[] = [];
      outcomes.forEach((o, i) => {
        if (Array.isArray(o)) {
          if (JSON.stringify(o) === JSON.stringify(reference(input(i)).y)) right++;
          else wrong.push(`${i}: got another's result`);
        } else if (!(o instanceof GpuError) || o.code !== Status.ILLEGAL_STATE || !/plan busy/.test(o.message)) wrong.push(`${i}: ${String(o)}`);
      });
      expect(wrong).toEqual([]);
      expect(right).toBeGreaterThan(0);
    } finally {
      plan.dispose();
    }
  });

  test("execute during a run is refused; a run waits for an executeAsync in flight", async () => {
    const { plan } = makePlan();
    try {
      const p = plan.run({ x: input(1) });
      await Promise.resolve();
      await Promise.resolve();
      const e = (() => {
        try {
          plan.execute();
          return null;
        } catch (err) {
          return err;
        }
      })();
      const r = await p;
      expect([...r.y!]).toEqual(reference(input(1)).y);
      if (e !== null) expect((e as GpuError).code).toBe(Status.ILLEGAL_STATE);
      // Variables cannot change under a run in flight either.
      const S = new Variable("S", 1, 16);
      const vplan = Tensor.arange(S).cast("float32").sum().prepare({ device: dev });
      try {
        const q = vplan.run({ S: 10 });
        await Promise.resolve();
        await Promise.resolve();
        let changed: unknown = null;
        try {
          vplan.executeWithVars({ S: 3 });
        } catch (err) {
          changed = err;
        }
        const { output0 } = await q;
        expect(output0![0]).toBe(45);
        if (changed !== null) expect((changed as GpuError).code).toBe(Status.ILLEGAL_STATE);
      } finally {
        vplan.dispose();
      }
      // executeAsync first, then a run queued behind it.
      const a = plan.executeAsync();
      const b = plan.run({ x: input(2) });
      await a;
      expect([...(await b).y!]).toEqual(reference(input(2)).y);
      // After they are done, execute works again.
      plan.execute();
    } finally {
      plan.dispose();
    }
  });
});

test("the serving guide's server block is the fixture, line for line but the import", () => {
  const readme = readFileSync(join(import.meta.dir, "..", "docs", "guide", "serving.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const block = blocks.find((b) => b.includes("Bun.serve") && b.includes("plan.run"));
  expect(block).toBeDefined();
  const fixture = readFileSync(join(import.meta.dir, "fixtures", "plan_server.ts"), "utf8");
  const body = (text: string) => text.split("\n").filter((l) => !l.startsWith("//") && !l.startsWith("import ")).join("\n").trim();
  expect(body(fixture)).toBe(body(block!));
  expect(block!).toContain('import { Tensor } from "bungpu";');
});

test("the serving guide's server example runs as pasted and answers every request", () => {
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", "plan_server.ts")], { stdout: "pipe", stderr: "pipe", timeout: 60_000 });
  expect(r.stderr.toString()).toBe("");
  const lines = r.stdout.toString().trim().split("\n");
  expect(lines[0]).toBe("Float32Array(4) [ 120, 120, 120, 120 ]");
  expect(lines[1]).toMatch(/^400 GpuError: .*INVALID_VALUE.*ExecutionPlan\.run: input "x" has 5 elements/);
  expect(r.exitCode).toBe(0);
}, 60_000);

describe("constant weights are the plan's own, not inputs (issue 25 item 5)", () => {
  const IN = 4, HID = 3, OUT = 2, B = 2;
  const w1d = Float32Array.from({ length: IN * HID }, (_, i) => ((i * 5) % 7) / 4 - 0.6);
  const b1d = Float32Array.from([0.5, -0.25, 1]);
  const w2d = Float32Array.from({ length: HID * OUT }, (_, i) => 1 - i / 4);
  // float64 reference of relu(x·W1 + b1)·W2 + r, r the plan's random row (read back below)
  const mlp = (x: Float32Array, rows: number, r: ArrayLike<number>) =>
    Array.from({ length: rows * OUT }, (_, k) => {
      const row = Math.floor(k / OUT), o = k % OUT;
      let y = r[o]!;
      for (let h = 0; h < HID; h++) {
        let a = b1d[h]!;
        for (let i = 0; i < IN; i++) a += x[row * IN + i]! * w1d[i * HID + h]!;
        y += Math.max(a, 0) * w2d[h * OUT + o]!;
      }
      return y;
    });
  const xs = Float32Array.from({ length: B * IN }, (_, i) => i - 3.5);

  test("Tensor.from(…, { constant: true }), prepare({ constants }) and random sources computed once: inputNames is only x", async () => {
    // the weights come first, so their buffers come before x's: run's positions skip them
    const w1 = Tensor.from(w1d, [IN, HID], { constant: true, name: "w1" });
    const b1 = Tensor.from(b1d, [HID], { constant: true });
    const w2 = Tensor.from(w2d, [HID, OUT], { name: "w2" });
    const r = Tensor.randn([1, 4], { seed: 3 }).matmul(Tensor.ones([4, OUT])); // computed once at prepare: a constant too
    const x = Tensor.from(new Float32Array(B * IN), [B, IN], { name: "x" });
    const y = x.matmul(w1).add(b1).relu().matmul(w2).add(r);
    await using plan = y.prepare({ device: dev, outputNames: ["y"], constants: [w2] });
    expect(plan.inputNames).toEqual(["x"]);
    expect(String(plan)).toContain(`inputs x [${B}, ${IN}] float32; outputs y`);
    const rrow = r.toArray({ device: dev });
    const want = mlp(xs, B, rrow);
    const byName = await plan.run({ x: xs });
    expect(byName.y.length).toBe(B * OUT);
    byName.y.forEach((v, k) => expect(v).toBeCloseTo(want[k]!, 4));
    const [byPosition] = plan.runSync([xs]);
    expect([...byPosition!]).toEqual([...byName.y]);
    // a run cannot give a constant: by name it is refused as one, by position there is no room
    await expect(plan.run({ x: xs, w1: w1d } as never)).rejects.toThrow(`"w1" is one of the plan's constants, not an input`);
    await expect(plan.run({ x: xs, w2: w2d } as never)).rejects.toMatchObject({ code: Status.INVALID_VALUE });
    await expect(plan.run([xs, w1d])).rejects.toThrow("2 inputs given, the plan has 1");
    expect(() => plan.setWeights({ w1: w1d })).toThrow("constant");
    expect(() => plan.bufferMutById(w1.id)).toThrow("w1, a constant of the plan");
    expect(plan.bufferMutById(x.id)).toBe(plan.buffer(x.id)); // an input's is the caller's to write
    // and after all that, the plan still computes the same
    expect([...(await plan.run({ x: xs })).y]).toEqual([...byName.y]);
  });

  test("a constant is shared by the plans prepared with it; unnamed inputs are numbered among the inputs only", () => {
    const w = Tensor.from(w1d, [IN, HID], { constant: true });
    const a = Tensor.from(new Float32Array(IN), [1, IN]); // unnamed: input0, though it is the plan's second buffer
    using p = a.matmul(w).prepare({ device: dev });
    using q = a.matmul(w).relu().prepare({ device: dev });
    expect(p.inputNames).toEqual(["input0"]);
    expect(p.buffer(w.id)!.address).toBe(q.buffer(w.id)!.address);
    const one = Float32Array.from({ length: IN }, (_, i) => i + 1);
    const want = Array.from({ length: HID }, (_, h) => one.reduce((s, v, i) => s + v * w1d[i * HID + h]!, 0));
    p.runSync({ input0: one })["output0"]!.forEach((v, h) => expect(v).toBeCloseTo(want[h]!, 5));
    q.runSync([one])[0]!.forEach((v, h) => expect(v).toBeCloseTo(Math.max(want[h]!, 0), 5));
    expect(() => Tensor.from(w1d, [IN, HID], { constant: "yes" as never })).toThrow('constant must be a boolean, got the string "yes"');
  });

  test("a checkpoint's tensors, loaded with fromSafetensors(path, { constant: true }), are constants", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-const-"));
    try {
      const path = join(dir, "w.safetensors");
      Tensor.toSafetensors(path, { w1: Tensor.from(w1d, [IN, HID]), b1: Tensor.from(b1d, [HID]) });
      const w = Tensor.fromSafetensors(path, { constant: true });
      const x = Tensor.from(new Float32Array(B * IN), [B, IN], { name: "x" });
      using plan = x.matmul(w["w1"]!).add(w["b1"]!).prepare({ device: dev, inputNames: ["x"] });
      const want = Array.from({ length: B * HID }, (_, k) => {
        const r = Math.floor(k / HID), h = k % HID;
        return b1d[h]! + Array.from({ length: IN }, (_, i) => xs[r * IN + i]! * w1d[i * HID + h]!).reduce((p, q) => p + q, 0);
      });
      plan.runSync({ x: xs })["output0"]!.forEach((v, k) => expect(v).toBeCloseTo(want[k]!, 4));
      expect(() => plan.runSync({ x: xs, w1: w1d } as never)).toThrow('"w1" is one of the plan\'s constants');
      const loaded = Tensor.fromSafetensors(path); // without the option they are inputs, named by their keys
      using open = x.matmul(loaded["w1"]!).add(loaded["b1"]!).prepare({ device: dev });
      expect(open.inputNames).toEqual(["x", "w1", "b1"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a batched plan's inputs are its real inputs", async () => {
    const S = new Variable("S", 1, 8);
    const w1 = Tensor.from(w1d, [IN, HID], { constant: true });
    const x = Tensor.from(new Float32Array(8 * IN), [8, IN], { name: "x" }).shrink([[0, S], null]);
    await using plan = x.matmul(w1).prepare({ device: dev, outputNames: ["h"] });
    expect(plan.inputNames).toEqual(["x"]);
    const batcher = plan.batched({ variable: "S", maxBatch: 8, maxDelayMs: 1 });
    const row = xs.subarray(0, IN);
    const got = (await batcher.run({ x: row })).h!;
    const want = Array.from({ length: HID }, (_, h) => row.reduce((s, v, i) => s + v * w1d[i * HID + h]!, 0));
    got.forEach((v, h) => expect(v).toBeCloseTo(want[h]!, 5));
    expect(batcher.stats.rows).toBe(1);
  });
});

describe("prepare({ inputNames }): the inputs a caller expects, checked, and typed (issue 25 item 5)", () => {
  test("the names match: runs by name take exactly them; a mismatch names the plan's inputs and its constants", async () => {
    const w = Tensor.from([1, 2, 3, 4], [2, 2], { constant: true, name: "w" });
    const x = Tensor.from(new Float32Array(2), [1, 2], { name: "x" });
    await using plan = x.matmul(w).prepare({ device: dev, inputNames: ["x"], outputNames: ["y"] });
    expect([...(await plan.run({ x: Float32Array.from([1, 1]) })).y]).toEqual([4, 6]);
    // @ts-expect-error a name the plan's inputs do not have is a compile error once inputNames are literal
    await expect(plan.run({ X: Float32Array.from([1, 1]) })).rejects.toThrow('no input or variable named "X"');
    const live = { ...memoryStats };
    const v = Tensor.from(new Float32Array(4), [2, 2]); // a weight left an input
    expectGpuErrorHere(() => x.matmul(v).prepare({ device: dev, inputNames: ["x"] }), "inputNames says [x], the plan's inputs are [x, input1]; weights that never change can be made constant");
    expectGpuErrorHere(() => x.matmul(w).prepare({ device: dev, inputNames: ["y"] }), "the plan's inputs are [x] (constants: w)");
    expect({ ...memoryStats }).toEqual(live); // nothing stays allocated
  });
});

function expectGpuErrorHere(f: () => unknown, text: string): void {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(GpuError);
    expect((e as GpuError).code).toBe(Status.INVALID_VALUE);
    expect((e as GpuError).message).toContain(text);
    return;
  }
  throw new Error("no error");
}
