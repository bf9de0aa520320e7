// A plan over two Variables: a new value of one re-patches only the launches that read it (their
// grid or their arguments), and every output stays right whichever variable changes.
import { expect, test } from "bun:test";
import { CommandList } from "../src/commands";
import { Tensor, Variable } from "../src/tensor";

const N = 16, C = 24;
const xs = Float32Array.from({ length: N * C }, (_, i) => Math.sin(i * 0.37) * 3);
const ys = Float32Array.from({ length: N * C }, (_, i) => Math.cos(i * 0.11) * 2);

/** Column sums of the first `rows` rows, and the sum of squares of each of those rows. */
function ref(data: Float32Array, rows: number): { col: number[]; sq: number[] } {
  const col = new Array<number>(C).fill(0), sq: number[] = [];
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let c = 0; c < C; c++) { const v = data[r * C + c]!; col[c]! += v; s += v * v; }
    sq.push(s);
  }
  return { col, sq };
}

function close(got: Float32Array | Int32Array, want: number[], what: string): void {
  expect(got.length).toBe(want.length);
  want.forEach((w, i) => { if (Math.abs(got[i]! - w) > 1e-4 * (1 + Math.abs(w))) throw new Error(`${what}[${i}]: ${got[i]} != ${w}`); });
}

test("changing one of two variables patches only the launches that read it, and every output is right", () => {
  const A = new Variable("A", 1, N).bind(4), B = new Variable("B", 1, N).bind(6);
  const x = Tensor.from(xs, [N, C]).shrink([[0, A], null]);
  const y = Tensor.from(ys, [N, C]).shrink([[0, B], null]);
  const outs = [x.sum(0), x.mul(x).sum(1), y.sum(0), y.mul(y).sum(1)];
  const plan = Tensor.prepareBatch(outs);
  const proto = CommandList.prototype as unknown as { patchLaunch: (...a: unknown[]) => void };
  const orig = proto.patchLaunch;
  let patched = 0;
  proto.patchLaunch = function (this: unknown, ...a: unknown[]) { patched++; return orig.apply(this, a); };
  try {
    const check = (a: number, b: number): void => {
      const ra = ref(xs, a), rb = ref(ys, b);
      close(plan.readOutput(0), ra.col, `x col A=${a}`);
      close(plan.readOutput(1), ra.sq, `x sq A=${a}`);
      close(plan.readOutput(2), rb.col, `y col B=${b}`);
      close(plan.readOutput(3), rb.sq, `y sq B=${b}`);
    };
    plan.execute();
    check(4, 6);
    const kernels = plan.preparedKernels().length;
    const readsA = plan.preparedKernels().filter((k) => k.vars.includes("A") || k.ir.dims.some((d) => typeof d !== "number" && d.var === "A")).length;
    expect(readsA).toBeGreaterThan(0);
    expect(readsA).toBeLessThan(kernels);
    for (const [a, b] of [[7, 6], [7, 2], [1, 9], [1, 9], [16, 16], [3, 16]] as const) {
      patched = 0;
      plan.executeWithVars({ A: a, B: b });
      check(a, b);
      expect(patched).toBeLessThan(kernels + 1);
      if (a === 7 && b === 6) expect(patched).toBe(readsA); // only A changed
    }
    // nothing changed: nothing patched
    patched = 0;
    plan.executeWithVars({ A: 3, B: 16 });
    expect(patched).toBe(0);
    check(3, 16);
  } finally {
    proto.patchLaunch = orig;
    plan.dispose();
  }
});
