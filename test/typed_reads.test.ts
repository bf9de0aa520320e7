// Reads that name their dtype: ExecutionPlan.readOutput(position, dtype) and Tensor.toArray(dtype)
// are typed as that dtype's host array (test/strict_types.test.ts checks the types) and check at
// run time that the output has that dtype.
import { expect, test } from "bun:test";
import { GpuError, Tensor } from "../src";

function code(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (!(e instanceof GpuError)) throw e;
    return `${e.codeName} ${e.call}`;
  }
  return "no error";
}

test("readOutput(position, dtype) returns each dtype's own array, with the values computed", () => {
  const x = Tensor.from(new Float32Array([1.5, -2, 3.25, 4]), [4]);
  using plan = Tensor.prepareBatch([x.mul(2), x.half(), x.cast("int64"), x.cmpgt(0)]);
  plan.execute();
  const f = plan.readOutput(0, "float32");
  const h = plan.readOutput(1, "float16");
  const l = plan.readOutput(2, "int64");
  const b = plan.readOutput(3, "bool");
  expect(f).toBeInstanceOf(Float32Array);
  expect([...f]).toEqual([3, -4, 6.5, 8]);
  expect(h).toBeInstanceOf(Float16Array);
  expect([...h]).toEqual([1.5, -2, 3.25, 4]);
  expect(l).toBeInstanceOf(BigInt64Array);
  expect([...l]).toEqual([1n, -2n, 3n, 4n]);
  expect(b).toBeInstanceOf(Uint8Array);
  expect([...b]).toEqual([1, 0, 1, 1]);
  // the old signatures still work, typed as before
  expect([...plan.readOutput(0)]).toEqual([3, -4, 6.5, 8]);
  expect(plan.readOutput<BigInt64Array>(2)[3]).toBe(4n);
});

test("a read named with the wrong dtype, or with no dtype at all, is INVALID_VALUE", () => {
  const x = Tensor.from(new Float32Array([1, 2]), [2]);
  using plan = x.add(1).prepare();
  plan.execute();
  expect(code(() => plan.readOutput(0, "int32"))).toBe("BG_ERR_INVALID_VALUE ExecutionPlan.readOutput");
  expect(code(() => plan.readOutput(0, "float64" as never))).toBe("BG_ERR_INVALID_VALUE ExecutionPlan.readOutput");
  expect(code(() => plan.readOutput(0, null as never))).toBe("BG_ERR_INVALID_VALUE ExecutionPlan.readOutput");
  expect(code(() => plan.readOutput(1, "float32"))).toBe("BG_ERR_INVALID_VALUE ExecutionPlan.readOutput");
  let msg = "";
  try {
    plan.readOutput(0, "int32");
  } catch (e) {
    msg = (e as Error).message;
  }
  expect(msg).toContain("output 0 is float32 (a Float32Array), not the int32 it was read as");
});

test("toArray(dtype) checks the tensor's dtype and keeps its options", () => {
  const x = Tensor.from(new Int32Array([7, -3]), [2]);
  const l = x.cast("int64").toArray("int64");
  expect(l).toBeInstanceOf(BigInt64Array);
  expect([...l]).toEqual([7n, -3n]);
  const i = x.mul(3).toArray("int32", {});
  expect([...i]).toEqual([21, -9]);
  expect(code(() => x.toArray("float32"))).toBe("BG_ERR_INVALID_VALUE Tensor.toArray");
  expect(code(() => x.toArray("uint16" as never))).toBe("BG_ERR_INVALID_VALUE Tensor.toArray");
  expect(code(() => x.toArray("int32", 5 as never))).toBe("BG_ERR_INVALID_VALUE Tensor.toArray");
  expect([...x.toArray()]).toEqual([7, -3]);
});
