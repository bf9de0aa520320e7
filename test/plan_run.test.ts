// ExecutionPlan.run: inputs in, outputs out, safe under any number of concurrent callers; and
// execute/executeAsync never interleave (they refuse with "plan busy" instead).
import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Device, ExecMode, GpuError, Status, Tensor, Variable } from "../src";

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
