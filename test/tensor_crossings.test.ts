// A tensor plan executes through one prebuilt command list: a sync execute() is one FFI crossing
// (submit and wait together), whatever the number of kernels; new variable values patch the list;
// the paths that must not wait in C (host functions pending) or must not use the list still give
// right results. Crossings are counted by wrapping every function of the native symbol table.
import { describe, expect, test } from "bun:test";
import { N } from "../ffi/native";
import { Device, GpuError } from "../src";
import { Tensor, Variable } from "../src/tensor";

/** Run `f` with every native function counted; the names of the functions called, in order. */
function crossings(f: () => void): string[] {
  const table = N as unknown as Record<string, unknown>;
  const saved = new Map<string, (...a: unknown[]) => unknown>();
  const calls: string[] = [];
  for (const k of Object.keys(table)) {
    const fn = table[k];
    if (typeof fn !== "function") continue;
    saved.set(k, fn as (...a: unknown[]) => unknown);
    table[k] = (...a: unknown[]) => {
      calls.push(k);
      return (fn as (...a: unknown[]) => unknown)(...a);
    };
  }
  try {
    f();
  } finally {
    for (const [k, fn] of saved) table[k] = fn;
  }
  return calls;
}

const N_ELEMS = 37;
const input = Float32Array.from({ length: N_ELEMS }, (_, i) => (i - 18) / 7);
/** The chain below, in float32 steps. */
const chain = (x: number) => {
  const f = Math.fround;
  let v = f(x + 1);
  v = f(v * 2);
  v = Math.max(v, 0);
  v = f(v - 0.5);
  v = f(Math.exp(v));
  return -v;
};

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol = 1e-5): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < got.length; i++)
    if (!(Math.abs(got[i]! - want[i]!) <= tol * (1 + Math.abs(want[i]!)))) throw new Error(`element ${i}: got ${got[i]}, want ${want[i]}`);
}

/** Six kernels (no fusion): add, mul, relu, sub, exp, neg. */
function sixKernels() {
  const x = Tensor.from(input, [N_ELEMS]);
  const y = x.add(1).mul(2).relu().sub(0.5).exp().neg();
  const plan = y.prepare({ fusion: false });
  return { plan, x };
}

describe("one crossing per execute", () => {
  test("a sync execute() of a six-kernel plan makes exactly one FFI crossing, with right results", () => {
    const { plan, x } = sixKernels();
    try {
      expect(plan.preparedKernels().length).toBe(6);
      plan.execute(); // builds the list and the plan's stream
      for (let r = 0; r < 3; r++) {
        const data = Float32Array.from(input, (v) => v * (r + 1));
        plan.bufferMutById(x.node.id)!.write(data);
        const calls = crossings(() => plan.execute());
        expect(calls).toEqual(["bg_submit_ex"]);
        expectClose(plan.readOutput(0), Array.from(data, chain));
      }
    } finally {
      plan.dispose();
    }
  });

  test("a new variable value patches the list in place: still one crossing, right results", () => {
    const S = new Variable("S", 1, 64).bind(5);
    const a = Tensor.arange(S).float();
    const y = a.mul(3).add(Tensor.fromDims([S], "float32")).relu();
    const plan = y.prepare({ fusion: false });
    try {
      expect(plan.preparedKernels().length).toBeGreaterThan(1);
      plan.execute();
      for (const s of [5, 17, 64, 1, 33]) {
        const calls = crossings(() => plan.executeWithVars({ S: s }));
        expect(calls).toEqual(["bg_submit_ex"]);
        expect([...plan.readOutput(0)]).toEqual(Array.from({ length: s }, (_, i) => 3 * i + s));
      }
    } finally {
      plan.dispose();
    }
  });

  test("a value that leaves kernels with no work rebuilds the list without them: still one crossing", () => {
    const S = new Variable("S", 0, 16).bind(3);
    const y = Tensor.arange(S).float().mul(2).add(Tensor.fromDims([S], "float32"));
    const plan = y.prepare({ fusion: false });
    try {
      expect(plan.preparedKernels().length).toBeGreaterThan(1);
      plan.execute();
      for (const s of [3, 0, 5, 0, 16, 7]) {
        const calls = crossings(() => plan.executeWithVars({ S: s }));
        expect(calls).toEqual(["bg_submit_ex"]);
        expect([...plan.readOutput(0)]).toEqual(Array.from({ length: s }, (_, i) => 2 * i + s));
      }
    } finally {
      plan.dispose();
    }
  });

  test("kernel by kernel (launch: each) crosses once per kernel at least, with the same results", () => {
    const { plan } = sixKernels();
    try {
      plan.execute({ launch: "each" });
      const calls = crossings(() => plan.execute({ launch: "each" }));
      expect(calls.filter((c) => c === "bg_launch").length).toBe(6);
      expectClose(plan.readOutput(0), Array.from(input, chain));
    } finally {
      plan.dispose();
    }
  });

  test("on a given stream: submit, then Stream.synchronize", () => {
    const { plan } = sixKernels();
    const st = plan.device.createStream();
    try {
      plan.execute({ stream: st });
      const calls = crossings(() => plan.execute({ stream: st }));
      expect(calls).toEqual(["bg_submit_ex", "bg_stream_synchronize"]);
      expectClose(plan.readOutput(0), Array.from(input, chain));
    } finally {
      plan.dispose();
      st.dispose();
    }
  });

  test("with a host function pending, the wait goes through Stream.synchronize (no wait in C)", async () => {
    const { plan } = sixKernels();
    const st = plan.device.createStream();
    try {
      let ran = false;
      st.hostFn(() => {
        ran = true;
      });
      plan.execute();
      expectClose(plan.readOutput(0), Array.from(input, chain));
      await st.done();
      expect(ran).toBe(true);
    } finally {
      plan.dispose();
      st.dispose();
    }
  });

  test("executeAsync and run() go through the list too", async () => {
    const { plan } = sixKernels();
    try {
      await plan.executeAsync();
      expectClose(plan.readOutput(0), Array.from(input, chain));
      const data = Float32Array.from(input, (v) => -v);
      const [out] = await plan.run([data]);
      expectClose(out!, Array.from(data, chain));
      plan.execute({ async: true });
      await plan.executeAsync();
      expectClose(plan.readOutput(0), Array.from(data, chain));
    } finally {
      plan.dispose();
    }
  });

  test("a disposed plan buffer or intermediates released: GpuError naming the plan call, or a rebuilt list", () => {
    const { plan } = sixKernels();
    try {
      plan.execute();
      plan.releaseIntermediateBuffers(); // the list is rebuilt against the new arena
      plan.execute();
      expectClose(plan.readOutput(0), Array.from(input, chain));
      plan.outputBuffer()!.dispose();
      let err: unknown;
      try {
        plan.execute();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(GpuError);
      expect((err as GpuError).call).toBe("ExecutionPlan.execute");
      expect((err as GpuError).message).toMatch(/disposed/);
    } finally {
      plan.dispose();
    }
  });

  test("a stream of another device, or a bad launch option, is refused with GpuError", () => {
    const { plan } = sixKernels();
    try {
      expect(() => plan.execute({ launch: "some" as "each" })).toThrow(GpuError);
      const other = Device.list().find((spec) => spec !== plan.device.spec);
      if (other) {
        const dev = Device.open(other);
        try {
          expect(() => plan.execute({ stream: dev.defaultStream })).toThrow(/another device/);
        } finally {
          dev.dispose();
        }
      }
    } finally {
      plan.dispose();
    }
  });
});
