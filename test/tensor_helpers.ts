// Helpers the tensor test files share: realize several tensors in one plan, and a float64
// reference as an input tensor.
import { expect } from "bun:test";
import { GpuError, Status } from "../src";
import type { Ref } from "../src/tensor/reference";
import { Tensor, type PrepareOptions } from "../src/tensor";

export type Arr = Float32Array | Int32Array;

/** Realize several tensors in one plan (one compile), return their arrays. */
export function run(ts: Tensor[], opts: PrepareOptions = {}): Arr[] {
  const plan = Tensor.prepareBatch(ts, opts);
  try {
    plan.execute();
    return ts.map((_, i) => plan.readOutput(i));
  } finally {
    plan.dispose();
  }
}

/** A reference's values as an input tensor of `dtype`. */
export function toTensor(r: Ref, dtype: "float32" | "int32" = "float32"): Tensor {
  return Tensor.from(dtype === "float32" ? Float32Array.from(r.data) : Int32Array.from(r.data), r.shape, { dtype });
}

/** `f` throws a GpuError with `code` (never a TypeError); `what` names the case. */
export function expectCode(f: () => unknown, code: number, what: string): void {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  if (!(err instanceof GpuError)) throw new Error(`${what}: expected GpuError, got ${err === undefined ? "no error" : String(err)}`);
  expect({ what, code: err.code }).toEqual({ what, code });
}

/** `f` throws a GpuError with code INVALID_VALUE (never a TypeError); `what` names the case. */
export function expectInvalid(f: () => unknown, what: string): void {
  expectCode(f, Status.INVALID_VALUE, what);
}
