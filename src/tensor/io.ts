// The synchronous way through an ExecutionPlan (ExecutionPlan.runSync): the outputs a run reads,
// into arrays the caller gives (checked before anything is written: dtype, element count, no array
// named twice) or into fresh ones.
import type { Buffer } from "../buffer";
import { describeGot, invalid } from "../errors";
import type { ValueShape } from "./ast";
import { DTYPES, hostArrayName, hostView, isDType, isHostArrayOf, type DType, type HostArray } from "./dtype";
import { readValue } from "./memory";
import type { PlanRunOptions, RunOutput } from "./options";
import { dimValue } from "./variable";
import { maxNumel } from "./view";

/**
 * A read that names its dtype (readOutput(0, "float16"), toArray("int64")): the name must be a
 * dtype and the one `what` has, or the read is INVALID_VALUE (its result would be typed wrong).
 */
export function expectDType(call: string, what: string, actual: DType, named: unknown): void {
  if (!isDType(named)) invalid(call, `dtype must be one of ${DTYPES.join(", ")}, got ${describeGot(named)}`);
  if (named !== actual) invalid(call, `${what} is ${actual} (a ${hostArrayName(actual)}), not the ${named} it was read as`);
}

/** What ExecutionPlan.runSync takes besides the inputs. */
export interface PlanRunSyncOptions extends PlanRunOptions {
  /**
   * Arrays to read the outputs into, by position or by output name, each of its output's dtype
   * and element count (under this run's variable values); outputs not named get fresh arrays.
   */
  outputs?: readonly (RunOutput | null | undefined)[] | Readonly<Record<string, RunOutput>>;
}

/** The array each output is read into (undefined: a fresh one), checked against `nodes` under `vals`. */
export function outputTargets(
  call: string,
  outputs: unknown,
  names: readonly string[],
  nodes: readonly ValueShape[],
  vals: ReadonlyMap<string, number>,
): (RunOutput | undefined)[] {
  const at: (RunOutput | undefined)[] = names.map(() => undefined);
  if (outputs === undefined) return at;
  const put = (i: number, what: string, given: unknown) => {
    const node = nodes[i]!;
    if (!isHostArrayOf(node.dtype, given)) invalid(call, `${what} must be a ${hostArrayName(node.dtype)} (the output is ${node.dtype}), got ${describeGot(given)}`);
    const a = given as HostArray;
    const numel = node.shape.reduce((p: number, d) => p * dimValue(d, vals), 1);
    if (a.length !== numel) invalid(call, `${what} has ${a.length} elements, the output has ${numel}`);
    if (at.some((x) => x !== undefined && x.buffer === a.buffer && x.byteOffset < a.byteOffset + a.byteLength && a.byteOffset < x.byteOffset + x.byteLength))
      invalid(call, `${what} overlaps another output's array`);
    at[i] = a as RunOutput;
  };
  if (Array.isArray(outputs)) {
    if (outputs.length > names.length) invalid(call, `${outputs.length} output arrays given, the plan has ${names.length} outputs`);
    outputs.forEach((a, i) => {
      if (a !== undefined && a !== null) put(i, `output ${i} (${names[i]})`, a);
    });
  } else if (outputs !== null && typeof outputs === "object" && !ArrayBuffer.isView(outputs)) {
    for (const [name, a] of Object.entries(outputs)) {
      const i = names.indexOf(name);
      if (i < 0) invalid(call, `no output named ${JSON.stringify(name)} (outputs: ${names.join(", ")})`);
      put(i, `output ${JSON.stringify(name)}`, a);
    }
  } else invalid(call, `outputs must be an array or an object of typed arrays by output name, got ${describeGot(outputs)}`);
  return at;
}

/**
 * The value of `node` held in `buf` (or in `buf`'s bytes, a view of host memory) under `vals`,
 * read into `into` (checked by outputTargets) or a fresh array.
 */
export function readOutputInto(call: string, buf: Buffer | Uint8Array, node: ValueShape, vals: ReadonlyMap<string, number>, into: RunOutput | undefined): RunOutput {
  if (!into) return readValue(call, buf, node, vals) as RunOutput; // typed as the default arrays, as readOutput is
  if (into.length === maxNumel(node.shape)) {
    // the buffer's layout is the value's
    if (!(buf instanceof Uint8Array)) return buf.read(into);
    (into as Float32Array).set(hostView(node.dtype, buf.buffer as ArrayBuffer, buf.byteOffset, into.length) as Float32Array);
    return into;
  }
  into.set(readValue(call, buf, node, vals) as never);
  return into;
}
