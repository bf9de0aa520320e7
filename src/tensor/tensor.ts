// Tensor: a lazy value. Operations build the graph (ast.ts); nothing runs until a plan is
// prepared and executed, or a result is read with toArray().
//
// dtypes: bool, int8, uint8, int32, int64, float16, bfloat16, float32 (dtype.ts: the promotion
// table, weak JS-number scalars, rounding, host arrays). Comparisons give bool. Integer division
// truncates toward zero (x / 0 gives 0). Broadcasting follows numpy.
//
// Over 600 lines on purpose: the file is the Tensor class alone, the whole public op surface, one
// short method per op; split, one class would be spread over several files.
import { Device } from "../device";
import { GpuError, describeGot, describeValue, finiteNumber, invalid, options, reword, type OptionKeys } from "../errors";
import { INSPECT } from "../inspect";
import { LazyNode, constantData, inputNames, type BinaryOp, type DType, type ReduceOp, type UnaryOp } from "./ast";
import { seedMix } from "./ir";
import { DTYPES, ITEMSIZE, hostGet as hostToNumber, dtypeOfArray, hostArrayName, hostCopy, hostFromNumbers, isDType, isFloat, isHostArrayOf, promoteScalar, promoteTypes, roundTo, type DefaultHostArray, type HostArray, type HostArrayOf } from "./dtype";
import { Variable, type Dim, dimMax, dimValue, shapeStr } from "./variable";
import { ShapeTracker, checkShapeDims, maxStrides } from "./view";
import { expectDType } from "./io";
import { ExecutionPlan, type PrepareOptions } from "./plan";
import { own, readSafetensors, writeSafetensors, type SafetensorsEntry } from "./safetensors";
import { deviceReader } from "./constants";
import * as conv from "./ops_conv";
import type { AvgPoolOptions, Conv2dOptions, ConvTranspose2dOptions, InterpolateMode, PoolOptions } from "./ops_conv";
import * as attention from "./ops_attention";
import type { AttentionOptions } from "./ops_attention";
import * as more from "./ops_more";
import type { MoreMake } from "./ops_more";

// The keys each options argument may have (errors.ts `options` refuses any other).
const PREPARE_KEYS: OptionKeys<PrepareOptions> = { fusion: true, outputNames: true, inputNames: true, device: true, noMemoryPlanning: true, constants: true, planCache: true };
/** Tensor.from's options. */
export interface FromOptions {
  /** The dtype the data is (or is converted to). */
  dtype?: DType | undefined;
  /** Its name as an input of the plans it is prepared into (ExecutionPlan.run by name). */
  name?: string | undefined;
  /**
   * Weights that never change: every plan holds the data as its own (uploaded once per device,
   * shared by the plans prepared with it), not as an input: not in `plan.inputNames`, not given to
   * `run`, not changed by `setWeights` (as PrepareOptions.constants, without listing it there).
   */
  constant?: boolean | undefined;
}
const FROM_KEYS: OptionKeys<FromOptions> = { dtype: true, name: true, constant: true };
const DTYPE_KEYS: OptionKeys<{ dtype?: DType }> = { dtype: true };
const SEED_KEYS: OptionKeys<{ seed?: number | undefined }> = { seed: true };
const RAND_LIKE_KEYS: OptionKeys<{ seed?: number | undefined; dtype?: DType | undefined }> = { seed: true, dtype: true };
const FROM_SAFETENSORS_KEYS: OptionKeys<{ device?: Device; constant?: boolean | undefined }> = { device: true, constant: true };
const CROSS_ENTROPY_KEYS: OptionKeys<{ reduction?: "none" | "sum" | "mean"; labelSmoothing?: number }> = { reduction: true, labelSmoothing: true };
const CONV_KEYS: OptionKeys<Conv2dOptions> = { stride: true, padding: true, dilation: true, groups: true };
const CONV_T_KEYS: OptionKeys<ConvTranspose2dOptions> = { ...CONV_KEYS, outputPadding: true };
const POOL_KEYS: OptionKeys<PoolOptions> = { stride: true, padding: true, dilation: true };
const AVG_POOL_KEYS: OptionKeys<AvgPoolOptions> = { ...POOL_KEYS, countIncludePad: true };
const ATTENTION_KEYS: OptionKeys<AttentionOptions<Tensor>> = { attnMask: true, isCausal: true, scale: true };
const SPARSE_CE_KEYS: OptionKeys<{ ignoreIndex?: number; labelSmoothing?: number; reduction?: "none" | "sum" | "mean" }> = { ignoreIndex: true, labelSmoothing: true, reduction: true };
const NLL_KEYS: OptionKeys<{ weight?: Tensor; ignoreIndex?: number; reduction?: "none" | "sum" | "mean" }> = { weight: true, ignoreIndex: true, reduction: true };
const ISCLOSE_KEYS: OptionKeys<{ rtol?: number; atol?: number; equalNan?: boolean }> = { rtol: true, atol: true, equalNan: true };
const LAYER_NORM_KEYS: OptionKeys<{ axis?: number | readonly number[]; eps?: number; weight?: Tensor; bias?: Tensor }> = { axis: true, eps: true, weight: true, bias: true };

export type TensorLike = Tensor | number;
export type Shape = readonly Dim[];
export type PadMode = "constant" | "reflect" | "replicate" | "circular";

const PAD_MODES: readonly PadMode[] = ["constant", "reflect", "replicate", "circular"];

let globalSeed = 0;
let randCounter = 0;

function sameDim(a: Dim, b: Dim): boolean {
  return a === b || (a instanceof Variable && b instanceof Variable && a.name === b.name);
}

/** An axis in [-nd, nd); a 0-d tensor takes 0 and -1 (as tinygrad and torch), both giving 0. */
function normAxis(call: string, axis: number, nd: number, shape: Shape): number {
  const n = Math.max(nd, 1);
  if (!Number.isInteger(axis) || axis < -n || axis >= n) invalid(call, `axis ${String(axis)} is out of range for shape ${shapeStr(shape)}`);
  return axis < 0 ? axis + n : axis;
}

function numelNumeric(shape: Shape): number {
  let n = 1;
  for (const d of shape) if (typeof d === "number") n *= d;
  return n;
}

/** A dtype option: undefined (the default applies) or one of DTYPES; "float64", "int16" and the like refuse. */
function dtypeOf(call: string, dt: unknown): DType | undefined {
  if (dt === undefined) return undefined;
  if (!isDType(dt)) invalid(call, `dtype must be one of ${DTYPES.join(", ")}, got ${describeGot(dt)}`);
  return dt;
}

/** A constant's stored value in dtype `dt` (floats kept: the IR rounds them; integers truncated toward zero and wrapped). */
function constValue(dt: DType, value: number): number {
  if (isFloat(dt)) return value;
  if (dt === "bool") return value !== 0 ? 1 : 0;
  if (!Number.isFinite(value)) return 0;
  return dt === "int64" ? Math.trunc(value) : roundTo(dt, Math.trunc(value));
}

// each integer dtype's range (int64's top: the largest double below 2^63)
const INT_RANGE: Partial<Record<DType, readonly [number, number]>> = { bool: [0, 1], int8: [-128, 127], uint8: [0, 255], int32: [-(2 ** 31), 2 ** 31 - 1], int64: [-(2 ** 63), 2 ** 63 - 1024] };

/** The dtype of JS number `v` beside a tensor of dtype `like` (dtype.ts: weak scalars). */
function scalarDType(like: DType, v: number): DType {
  const dt = promoteScalar(like, v);
  if (isFloat(dt)) return dt;
  // bool with an integer, or an integer outside the tensor's range: as an int32 (int64) tensor would
  const r = INT_RANGE[dt];
  if (dt === "bool" || (r && (v < r[0] || v > r[1]))) return Math.abs(v) < 2 ** 31 ? "int32" : "int64";
  return dt;
}

/** A Tensor argument, else INVALID_VALUE. */
function tensorArg(call: string, what: string, t: unknown): Tensor {
  if (!(t instanceof Tensor)) invalid(call, `${what} must be a Tensor, got ${describeGot(t)}`);
  return t;
}

/** A Tensor or a finite-or-not number (NaN and ±Infinity are values), else INVALID_VALUE. */
function tensorLike(call: string, what: string, t: unknown): TensorLike {
  if (typeof t === "number" || t instanceof Tensor) return t;
  invalid(call, `${what} must be a Tensor or a number, got ${describeGot(t)}`);
}

/** An axis list argument: undefined, a number or an array of numbers (range checked later). */
function axesArg(call: string, axis: unknown): number | readonly number[] | undefined {
  if (axis === undefined || typeof axis === "number") return axis;
  if (Array.isArray(axis)) return axis as number[];
  invalid(call, `axis must be a number or an array of numbers, got ${describeGot(axis)}`);
}

/**
 * `f`, the body of a composite op, with an error of an op it calls reported under `call`, the op
 * the user called: `x.clamp(0, y)` with a y that does not broadcast names Tensor.clamp, not the
 * Tensor.cmplt inside it (issue 25: ops report under their own names).
 */
function under<T>(call: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    const inner = e instanceof GpuError ? e.call : undefined;
    if (inner === undefined || inner === call || !inner.startsWith("Tensor.")) throw e;
    throw reword(e as GpuError, (d) => (d.startsWith(`${inner}: `) ? `${call}: ${d.slice(inner.length + 2)}` : `${call}: ${d}`), call);
  }
}

function boolArg(call: string, what: string, v: unknown): boolean {
  if (typeof v !== "boolean") invalid(call, `${what} must be a boolean, got ${describeGot(v)}`);
  return v;
}

/** PrepareOptions: an object whose device, when given, is a Device. */
function prepareOpts(call: string, opts: PrepareOptions | undefined): PrepareOptions {
  const o = options(call, opts, PREPARE_KEYS);
  if (o.device !== undefined && !(o.device instanceof Device)) invalid(call, `device must be a Device, got ${describeGot(o.device)}`);
  return o;
}

function varsOf(shape: Shape): string[] {
  return shape.filter((d): d is Variable => d instanceof Variable).map((d) => d.name);
}


/** Element i of host data of `d` as a number. */
function hostGetNum(d: DType, a: HostArray, i: number): number {
  return hostToNumber(d, a, i);
}

export class Tensor {
  readonly node: LazyNode;
  #cache: HostArray | undefined;

  constructor(node: LazyNode) {
    this.node = node;
  }

  /** Stable AST id of this tensor's node. */
  get id(): number {
    return this.node.id;
  }
  get shape(): readonly Dim[] {
    return this.node.shape;
  }
  get dtype(): DType {
    return this.node.dtype;
  }
  get ndim(): number {
    return this.node.shape.length;
  }
  /** Number of elements (variables at their bound values). */
  get numel(): number {
    return this.node.shape.reduce<number>((p, d) => p * dimValue(d), 1);
  }

  toString(): string {
    return `Tensor(${shapeStr(this.shape)}, ${this.dtype}, id ${this.id})`;
  }

  [INSPECT](): string {
    return this.toString();
  }

  // ---- creation ------------------------------------------------------------------------------

  /**
   * A tensor from host data (copied at prepare time). `shape` defaults to [data.length].
   * `name` names it as an input of the plans it is prepared into (ExecutionPlan.run by name);
   * `constant: true` makes it weights the plans hold as their own instead of an input (FromOptions).
   *
   * `data` is the natural typed array of a dtype (dtype.ts HostArray: Float32Array float32,
   * Int32Array int32, Float16Array float16 where the runtime has it (else a Uint16Array of bits,
   * which needs `dtype`), Uint16Array bfloat16 bits (needs `dtype: "bfloat16"`), Int8Array int8,
   * Uint8Array uint8 (or bool with `dtype: "bool"`, values 0 / 1), BigInt64Array int64), taken as it
   * is; or a Float32Array, Int32Array, Float64Array or number[] converted by value to `dtype`
   * (default float32: floats round to nearest even, integers truncate toward zero and wrap, bool
   * is x != 0). Any other array, or a typed array that is neither, is INVALID_VALUE.
   */
  static from(data: HostArray | Float64Array | readonly number[] | number, shape?: readonly number[], opts: FromOptions = {}): Tensor {
    const call = "Tensor.from";
    opts = options(call, opts, FROM_KEYS);
    const dtype = dtypeOf(call, opts.dtype);
    if (shape !== undefined && shape !== null) checkShapeDims(call, shape);
    else shape = undefined;
    let arr: HostArray;
    let dt: DType;
    if (typeof data === "number") {
      return Tensor.full(shape ?? [], data, { dtype: dtype ?? "float32" });
    }
    if (ArrayBuffer.isView(data)) {
      const own = dtypeOfArray(data);
      dt = dtype ?? own ?? invalid(call, `${describeValue(data)} needs a dtype (a Uint16Array: bfloat16 bits)`);
      if (isHostArrayOf(dt, data)) arr = hostCopy(data as HostArray);
      else if (data instanceof Float32Array || data instanceof Int32Array || data instanceof Float64Array) arr = hostFromNumbers(dt, data);
      else invalid(call, `data for dtype ${dt} must be a ${hostArrayName(dt)}, or a Float32Array, Int32Array or Float64Array to convert; got ${describeGot(data)}`);
    } else if (Array.isArray(data)) {
      dt = dtype ?? "float32";
      for (let i = 0; i < data.length; i++)
        if (typeof data[i] !== "number") invalid(call, `data[${i}] must be a number, got ${describeGot(data[i])}`);
      arr = hostFromNumbers(dt, data as readonly number[]);
    } else invalid(call, "data must be a typed array, number[] or number");
    const sh = shape ? [...shape] : [arr.length];
    checkShapeDims(call, sh);
    const n = sh.reduce((p, q) => p * q, 1);
    if (n !== arr.length) invalid(call, `shape ${shapeStr(sh)} holds ${n} elements but the data has ${arr.length}`);
    if (opts.name !== undefined && (typeof opts.name !== "string" || !opts.name)) invalid(call, `name must be a non-empty string, got ${describeGot(opts.name)}`);
    const node = new LazyNode({ op: "buffer", data: arr }, dt, sh);
    if (opts.constant !== undefined && typeof opts.constant !== "boolean") invalid(call, `constant must be a boolean, got ${describeGot(opts.constant)}`);
    if (opts.name !== undefined) inputNames.set(node, opts.name);
    if (opts.constant) constantData.add(node);
    return new Tensor(node);
  }

  static full(shape: Shape, value: number, opts: { dtype?: DType } = {}): Tensor {
    const call = "Tensor.full";
    checkShapeDims(call, shape);
    if (typeof value !== "number") invalid(call, `value must be a number, got ${describeGot(value)}`);
    const dt = dtypeOf(call, options(call, opts, DTYPE_KEYS).dtype) ?? "float32";
    const c = new Tensor(new LazyNode({ op: "const", value: constValue(dt, value) }, dt, []));
    if (shape.length === 0) return c;
    return c.reshape(shape.map(() => 1)).expand(shape);
  }
  static zeros(shape: Shape, opts: { dtype?: DType } = {}): Tensor {
    return under("Tensor.zeros", () => Tensor.full(shape, 0, opts));
  }
  static ones(shape: Shape, opts: { dtype?: DType } = {}): Tensor {
    return under("Tensor.ones", () => Tensor.full(shape, 1, opts));
  }

  /** arange(stop) | arange(start, stop, step?): numbers start, start+step, … below stop. */
  static arange(start: number | Variable, stop?: number, step = 1, opts: { dtype?: DType } = {}): Tensor {
    const call = "Tensor.arange";
    const dtype = dtypeOf(call, options(call, opts, DTYPE_KEYS).dtype);
    if (start instanceof Variable) {
      return new Tensor(new LazyNode({ op: "arange", start: 0, step: 1 }, dtype ?? "int32", [start]));
    }
    if (stop === undefined) [start, stop] = [0, start];
    finiteNumber(call, "start", start);
    finiteNumber(call, "stop", stop);
    if (typeof step !== "number" || step === 0 || !Number.isFinite(step)) invalid(call, `step must be a finite non-zero number, got ${describeGot(step)}`);
    const n = Math.max(0, Math.ceil((stop - start) / step));
    checkShapeDims(call, [n]);
    const allInt = Number.isInteger(start) && Number.isInteger(step);
    const dt = dtype ?? (allInt ? "int32" : "float32");
    return new Tensor(new LazyNode({ op: "arange", start, step }, dt, [n]));
  }

  /** Set the seed used by rand/randn calls that give none. */
  static manualSeed(seed: number): void {
    finiteNumber("Tensor.manualSeed", "seed", seed);
    globalSeed = seed >>> 0;
    randCounter = 0;
  }

  /**
   * Uniform [0, 1) float32. Counter-based and computed in the kernel: element i of a tensor
   * with seed s is lowbias32(lowbias32(i) ^ mix(s)) >> 8 scaled by 2^-24, so a value depends
   * only on (seed, index), never on fusion or device. Without a seed: the global seed and a
   * call counter.
   */
  static rand(shape: Shape, opts: { seed?: number | undefined } = {}): Tensor {
    const call = "Tensor.rand";
    checkShapeDims(call, shape);
    const o = options(call, opts, SEED_KEYS);
    if (o.seed !== undefined) finiteNumber(call, "seed", o.seed);
    const seed = o.seed ?? (globalSeed * 1000003 + randCounter++) >>> 0;
    return new Tensor(new LazyNode({ op: "rand", seed: seedMix(seed), normal: false }, "float32", [...shape]));
  }

  /** Standard normal float32 by Box-Muller over counters 2i and 2i+1 (see rand). */
  static randn(shape: Shape, opts: { seed?: number | undefined } = {}): Tensor {
    const call = "Tensor.randn";
    checkShapeDims(call, shape);
    const o = options(call, opts, SEED_KEYS);
    if (o.seed !== undefined) finiteNumber(call, "seed", o.seed);
    const seed = o.seed ?? (globalSeed * 1000003 + randCounter++) >>> 0;
    return new Tensor(new LazyNode({ op: "rand", seed: seedMix(seed), normal: true }, "float32", [...shape]));
  }

  // ---- weights and realized values (safetensors.ts) ----------------------------------------------

  /**
   * The tensors of a safetensors file, by name. Each is an input named by its key (so
   * ExecutionPlan.run and ExecutionPlan.setWeights take new values for it by that name). F32, I32,
   * F16, BF16, I8, U8, BOOL and I64 load as their own dtypes; I16 and U16 become int32 (exact);
   * U64 and U32 load as int64 where every value fits, F64 as float32 where every value is exact. A
   * missing file is FILE_NOT_FOUND; a truncated or inconsistent one, or a dtype with no exact
   * conversion, INVALID_VALUE naming the path and the reason.
   *
   * With `{ device }` on a backend whose device memory is host memory (the CPU backend), each
   * tensor is read straight into a buffer of that device, its data array a view of it: preparing
   * with it as a constant (`prepare({ constants })`) then copies nothing, so a checkpoint takes
   * its own size in memory, not twice it. Elsewhere the option changes nothing.
   *
   * With `{ constant: true }` every tensor is a constant of the plans it is prepared into, as
   * `Tensor.from(…, { constant: true })` makes one: weights the plans hold as their own, not inputs.
   */
  static fromSafetensors(path: string, opts: { device?: Device; constant?: boolean | undefined } = {}): Record<string, Tensor> {
    const call = "Tensor.fromSafetensors";
    const { device, constant } = options(call, opts, FROM_SAFETENSORS_KEYS);
    if (device !== undefined && !(device instanceof Device)) invalid(call, `device must be a Device, got ${describeGot(device)}`);
    if (constant !== undefined && typeof constant !== "boolean") invalid(call, `constant must be a boolean, got ${describeGot(constant)}`);
    const reader = device ? deviceReader(device) : null;
    const out: Record<string, Tensor> = {};
    try {
      const file = readSafetensors(path, call, false, reader?.alloc);
      for (const [name, e] of file.tensors) {
        reader?.keep(e.data);
        const node = new LazyNode({ op: "buffer", data: e.data }, e.dtype, [...e.shape]);
        inputNames.set(node, name);
        if (constant) constantData.add(node);
        own(out, name, new Tensor(node)); // a tensor named __proto__ is a tensor, not the record's prototype
      }
    } finally {
      reader?.drop(); // memory read into but converted to another array
    }
    return out;
  }

  /** The `__metadata__` strings of a safetensors file (the header checked as fromSafetensors does). */
  static safetensorsMetadata(path: string): Record<string, string> {
    return readSafetensors(path, "Tensor.safetensorsMetadata", true).metadata;
  }

  /**
   * Realize every tensor of `tensors` (one plan) and write them to `path` as a safetensors file
   * (each tensor under its own dtype's name: F32, I32, F16, BF16, I8, U8, BOOL, I64; offsets in key order, the header padded with spaces to 8 bytes), with `metadata`
   * as its `__metadata__`. Shapes must not hold unbound variables.
   */
  static toSafetensors(path: string, tensors: Readonly<Record<string, Tensor>>, metadata?: Readonly<Record<string, string>>, opts: PrepareOptions = {}): void {
    const call = "Tensor.toSafetensors";
    if (typeof path !== "string" || !path) invalid(call, `path must be a non-empty string, got ${describeGot(path)}`);
    if (tensors === null || typeof tensors !== "object" || Array.isArray(tensors)) invalid(call, `tensors must be an object of Tensors, got ${describeGot(tensors)}`);
    const names = Object.keys(tensors);
    const list = names.map((n) => tensorArg(call, `tensors[${JSON.stringify(n)}]`, tensors[n]));
    for (const [i, t] of list.entries())
      if (varsOf(t.shape).length) invalid(call, `tensor ${JSON.stringify(names[i])} has a symbolic shape ${shapeStr(t.shape)}; bind its variables first`);
    const entries = new Map<string, SafetensorsEntry>();
    if (list.length) {
      const plan = Tensor.prepareBatch(list, prepareOpts(call, opts));
      try {
        plan.execute();
        list.forEach((t, i) => entries.set(names[i]!, { dtype: t.dtype, shape: t.shape.map((d) => dimValue(d)), data: plan.readOutput(i) }));
      } finally {
        plan.dispose();
      }
    }
    writeSafetensors(path, entries, metadata, call);
  }

  /**
   * This tensor computed now and held as data: a Tensor whose node is a buffer (an input of the
   * plans it is prepared into), so a random or costly value is no longer recomputed by every
   * kernel that reads it. A tensor that is already data is returned as it is.
   */
  realize(opts: PrepareOptions = {}): Tensor {
    const call = "Tensor.realize";
    const o = prepareOpts(call, opts);
    if (this.node.op === "buffer") return this;
    if (varsOf(this.shape).length) invalid(call, `the shape ${shapeStr(this.shape)} holds variables; only a concrete shape can be realized`);
    const data = this.toArray(o);
    return new Tensor(new LazyNode({ op: "buffer", data }, this.dtype, this.shape.map((d) => dimValue(d))));
  }

  /** The value of a variable (or a product of dims) as a scalar tensor. */
  static fromDims(dims: readonly Dim[], dtype: DType = "int32"): Tensor {
    checkShapeDims("Tensor.fromDims", dims);
    dtypeOf("Tensor.fromDims", dtype);
    return new Tensor(new LazyNode({ op: "varconst", dims: [...dims] }, dtype, []));
  }

  static where(cond: Tensor, a: TensorLike, b: TensorLike): Tensor {
    return tensorArg("Tensor.where", "cond", cond).where(a, b);
  }

  // ---- plans -----------------------------------------------------------------------------------

  /**
   * Prepare this tensor's program on a device. Literal `outputNames` type the plan's outputs:
   * `prepare({ outputNames: ["y"] })` gives an `ExecutionPlan<"y">`, whose `run({...})` resolves
   * to `{ y }` (reading `.z` does not compile); literal `inputNames` (checked against the plan's
   * inputs) type what `run({...})` takes: `{ x }` only.
   */
  prepare<const N extends readonly string[] = readonly string[], const M extends readonly string[] = readonly string[]>(
    opts: PrepareOptions & { outputNames?: N; inputNames?: M } = {},
  ): ExecutionPlan<N[number], M[number]> {
    return Tensor.prepareBatch([this], prepareOpts("Tensor.prepare", opts)) as ExecutionPlan<N[number], M[number]>;
  }

  static prepareBatch<const N extends readonly string[] = readonly string[], const M extends readonly string[] = readonly string[]>(
    tensors: readonly Tensor[],
    opts: PrepareOptions & { outputNames?: N; inputNames?: M } = {},
  ): ExecutionPlan<N[number], M[number]> {
    const call = "Tensor.prepareBatch";
    if (!Array.isArray(tensors)) invalid(call, `tensors must be an array of Tensors, got ${describeGot(tensors)}`);
    tensors.forEach((t, i) => tensorArg(call, `tensors[${i}]`, t));
    if (tensors.length === 0) invalid(call, "give at least one tensor");
    return new ExecutionPlan<N[number], M[number]>(tensors, prepareOpts(call, opts));
  }

  /**
   * Realize and read this tensor (variables at their bound values), in its actual shape: a fresh
   * array of the dtype's HostArray (Float32Array, Int32Array, Float16Array or Uint16Array bits,
   * Uint16Array bfloat16 bits, Int8Array, Uint8Array, Uint8Array 0/1 for bool, BigInt64Array),
   * typed as T (default: the float32 / int32 arrays). `toArray("int64")` names the dtype: the
   * result is typed as its array, and a tensor of another dtype is INVALID_VALUE.
   */
  toArray(opts?: PrepareOptions): DefaultHostArray;
  toArray<T extends HostArray>(opts?: PrepareOptions): T;
  toArray<D extends DType>(dtype: D, opts?: PrepareOptions): HostArrayOf<D>;
  toArray(dtypeOrOpts?: DType | PrepareOptions, maybeOpts?: PrepareOptions): HostArray {
    let opts: PrepareOptions | undefined = dtypeOrOpts as PrepareOptions | undefined;
    if (typeof dtypeOrOpts === "string") {
      expectDType("Tensor.toArray", "the tensor", this.dtype, dtypeOrOpts);
      opts = maybeOpts;
    }
    opts = prepareOpts("Tensor.toArray", opts);
    if (this.#cache && !varsOf(this.shape).length && !opts.device) return hostCopy(this.#cache);
    const plan = this.prepare(opts);
    try {
      plan.execute();
      const out = plan.readOutput<HostArray>(0);
      if (!varsOf(this.shape).length && !opts.device) this.#cache = hostCopy(out);
      return out;
    } finally {
      plan.dispose();
    }
  }

  /** toArray as a plain number[] (float16 / bfloat16 decoded, int64 through Number). */
  toList(): number[] {
    const a = this.toArray<HostArray>();
    return Array.from({ length: a.length }, (_, i) => hostGetNum(this.dtype, a, i));
  }

  // ---- elementwise -----------------------------------------------------------------------------

  // float math keeps a float dtype and turns any other into float32; neg, abs, relu keep the
  // dtype (bool: int32)
  #unary(fn: UnaryOp): Tensor {
    const float = fn !== "neg" && fn !== "abs" && fn !== "relu";
    const dt: DType = float ? (isFloat(this.dtype) ? this.dtype : "float32") : this.dtype === "bool" ? "int32" : this.dtype;
    return new Tensor(new LazyNode({ op: "unary", fn }, dt, this.shape, [this.node]));
  }
  neg(): Tensor { return this.#unary("neg"); }
  exp(): Tensor { return this.#unary("exp"); }
  log(): Tensor { return this.#unary("log"); }
  sqrt(): Tensor { return this.#unary("sqrt"); }
  rsqrt(): Tensor { return this.#unary("sqrt").#unary("recip"); }
  sin(): Tensor { return this.#unary("sin"); }
  cos(): Tensor { return this.#unary("cos"); }
  abs(): Tensor { return this.#unary("abs"); }
  recip(): Tensor { return this.#unary("recip"); }
  relu(): Tensor { return this.#unary("relu"); }
  sigmoid(): Tensor { return this.#unary("sigmoid"); }
  tanh(): Tensor { return this.#unary("tanh"); }
  /**
   * GELU as tinygrad: approximate "tanh" (the default) is 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)));
   * "none" is the exact x·Φ(x) = 0.5·x·(1 + erf(x/√2)).
   */
  gelu(approximate: "tanh" | "none" = "tanh"): Tensor {
    if (approximate === "tanh") return this.#unary("gelu");
    if (approximate === "none") return this.mul(0.5).mul(this.mul(Math.SQRT1_2).erf().add(1));
    invalid("Tensor.gelu", `approximate must be "tanh" or "none", got ${describeGot(approximate)}`);
  }
  square(): Tensor { return this.mul(this); }

  // ---- more elementwise ops (tinygrad's names and argument order) -----------------------------
  // float32 results for integer operands (float dtypes kept) except where noted: floor, ceil, trunc,
  // round of an integer are the value itself; sign, mod, fmod of integers keep the dtype; isnan,
  // isinf, isfinite give bool.

  erf(): Tensor { return this.#unary("erf"); }
  exp2(): Tensor { return this.#unary("exp2"); }
  log2(): Tensor { return this.#unary("log2"); }
  tan(): Tensor { return this.#unary("tan"); }
  atan(): Tensor { return this.#unary("atan"); }
  asin(): Tensor { return this.#unary("asin"); }
  acos(): Tensor { return this.#unary("acos"); }
  sinh(): Tensor { return this.#unary("sinh"); }
  cosh(): Tensor { return this.#unary("cosh"); }
  asinh(): Tensor { return this.#unary("asinh"); }
  acosh(): Tensor { return this.#unary("acosh"); }
  atanh(): Tensor { return this.#unary("atanh"); }
  floor(): Tensor { return !isFloat(this.dtype) ? this : this.#unary("floor"); }
  ceil(): Tensor { return !isFloat(this.dtype) ? this : this.#unary("ceil"); }
  trunc(): Tensor { return !isFloat(this.dtype) ? this : this.#unary("trunc"); }
  /** Round half to even (numpy, tinygrad): 0.5 → 0, 1.5 → 2, -2.5 → -2. */
  round(): Tensor { return !isFloat(this.dtype) ? this : this.#unary("round"); }
  /** Remainder with the divisor's sign (Python's %, tinygrad's mod); int32 x mod 0 is 0, float32 NaN. */
  mod(o: TensorLike): Tensor { return this.#binary("mod", o, "Tensor.mod"); }
  /** C's remainder (the dividend's sign); int32 x fmod 0 is 0, float32 NaN. */
  fmod(o: TensorLike): Tensor { return this.#binary("fmod", o, "Tensor.fmod"); }
  /** -1, 0 or 1 (the dtype kept); NaN stays NaN as in numpy, -0 gives 0. */
  sign(): Tensor {
    const s = this.cmpgt(0).sub(this.cmplt(0));
    return !isFloat(this.dtype) ? s.cast(this.dtype) : this.isnan().where(this, s.cast(this.dtype));
  }
  isnan(): Tensor { return this.cmpne(this); }
  isinf(detectPositive = true, detectNegative = true): Tensor {
    boolArg("Tensor.isinf", "detectPositive", detectPositive);
    boolArg("Tensor.isinf", "detectNegative", detectNegative);
    if (detectPositive && detectNegative) return this.abs().cmpeq(Infinity);
    return detectPositive ? this.cmpeq(Infinity) : detectNegative ? this.cmpeq(-Infinity) : this.cmpne(this).mul(0).cast("bool");
  }
  isfinite(): Tensor { return this.sub(this).cmpeq(0); }
  /** Clamp to [min, max] (either may be omitted, not both); NaN stays NaN. */
  clip(min?: TensorLike, max?: TensorLike): Tensor {
    const call = "Tensor.clip";
    if (min === undefined && max === undefined) invalid(call, "at least one of min and max must be given");
    if (min !== undefined) tensorLike(call, "min", min);
    if (max !== undefined) tensorLike(call, "max", max);
    return under(call, () => {
      let r: Tensor = this;
      if (min !== undefined) r = r.cmplt(min).where(min, r);
      if (max !== undefined) r = r.cmpgt(max).where(max, r);
      return r;
    });
  }
  clamp(min?: TensorLike, max?: TensorLike): Tensor { return under("Tensor.clamp", () => this.clip(min, max)); }
  /** this + (end - this)·weight. */
  lerp(end: TensorLike, weight: TensorLike): Tensor {
    tensorLike("Tensor.lerp", "end", end);
    tensorLike("Tensor.lerp", "weight", weight);
    return under("Tensor.lerp", () => this.add(this.rsub(end).mul(weight)));
  }
  silu(): Tensor { return this.mul(this.sigmoid()); }
  swish(): Tensor { return this.silu(); }
  /** log(1 + e^(βx))/β, as max(βx, 0) + log(1 + e^-|βx|) so that it never overflows. */
  softplus(beta = 1): Tensor {
    finiteNumber("Tensor.softplus", "beta", beta);
    const y = this.mul(beta);
    return y.relu().add(y.abs().neg().exp().add(1).log()).div(beta);
  }
  leakyRelu(negSlope = 0.01): Tensor {
    finiteNumber("Tensor.leakyRelu", "negSlope", negSlope);
    return this.cmplt(0).where(this.mul(negSlope), this);
  }
  /** x for x > 0, α·(eˣ - 1) otherwise (NaN stays NaN). */
  elu(alpha = 1): Tensor {
    finiteNumber("Tensor.elu", "alpha", alpha);
    return this.cmpgt(0).where(this, this.exp().sub(1).mul(alpha));
  }
  hardswish(): Tensor { return this.mul(this.add(3).clip(0, 6)).mul(1 / 6); }
  mish(): Tensor { return this.mul(this.softplus().tanh()); }
  relu6(): Tensor { return this.relu().minimum(6); }
  /** max(0, min(1, α·x + β)) (torch's defaults α = 1/6, β = 0.5). */
  hardsigmoid(alpha = 1 / 6, beta = 0.5): Tensor {
    finiteNumber("Tensor.hardsigmoid", "alpha", alpha);
    finiteNumber("Tensor.hardsigmoid", "beta", beta);
    return this.mul(alpha).add(beta).clip(0, 1);
  }
  hardtanh(minVal = -1, maxVal = 1): Tensor { return under("Tensor.hardtanh", () => this.clip(minVal, maxVal)); }
  softsign(): Tensor { return this.div(this.abs().add(1)); }
  /** log(sigmoid(x)) = -softplus(-x), without overflow. */
  logsigmoid(): Tensor { return this.neg().softplus().neg(); }
  /** x·sigmoid(1.702·x). */
  quickGelu(): Tensor { return this.mul(this.mul(1.702).sigmoid()); }
  /** x for x > 0, α·(e^(x/α) - 1) otherwise (NaN stays NaN). */
  celu(alpha = 1): Tensor {
    finiteNumber("Tensor.celu", "alpha", alpha);
    return this.cmpgt(0).where(this, this.div(alpha).exp().sub(1).mul(alpha));
  }
  /** γ·(x for x >= 0, α·(eˣ - 1) otherwise), with tinygrad's α and γ. */
  selu(alpha = 1.67326, gamma = 1.0507): Tensor {
    finiteNumber("Tensor.selu", "alpha", alpha);
    finiteNumber("Tensor.selu", "gamma", gamma);
    return this.cmpge(0).where(this, this.exp().sub(1).mul(alpha)).mul(gamma);
  }

  #scalar(v: number, like: DType): Tensor {
    return Tensor.full([], v, { dtype: scalarDType(like, v) });
  }

  /** Broadcast this and `o` to one shape (numpy rules); throws naming both shapes. */
  static broadcastShapes(call: string, a: Shape, b: Shape): Dim[] {
    if (typeof call !== "string") call = "Tensor.broadcastShapes";
    if (!Array.isArray(a)) checkShapeDims(call, a);
    if (!Array.isArray(b)) checkShapeDims(call, b);
    const nd = Math.max(a.length, b.length);
    const out: Dim[] = [];
    for (let i = 0; i < nd; i++) {
      const x = a[a.length - nd + i] ?? 1;
      const y = b[b.length - nd + i] ?? 1;
      if (sameDim(x, y)) out.push(x);
      else if (x === 1) out.push(y);
      else if (y === 1) out.push(x);
      else invalid(call, `shapes ${shapeStr(a)} and ${shapeStr(b)} cannot be broadcast together (dimension ${i}: ${String(x)} vs ${String(y)})`);
    }
    return out;
  }

  /** This tensor broadcast to `shape` (leading dims added, size-1 dims expanded). */
  broadcastTo(shape: Shape): Tensor {
    checkShapeDims("Tensor.broadcastTo", shape);
    if (this.shape.length === shape.length && this.shape.every((d, i) => sameDim(d, shape[i]!))) return this;
    if (this.shape.length > shape.length) invalid("Tensor.broadcastTo", `cannot broadcast ${shapeStr(this.shape)} to ${shapeStr(shape)}`);
    const padded = [...shape.slice(0, shape.length - this.shape.length).map(() => 1), ...this.shape];
    return under("Tensor.broadcastTo", () => this.reshape(padded).expand(shape));
  }

  #binary(fn: BinaryOp, o: TensorLike, call: string, reverse = false): Tensor {
    let other = typeof o === "number" ? this.#scalar(o, this.dtype) : o;
    if (!(other instanceof Tensor)) invalid(call, "operand must be a Tensor or a number");
    let self: Tensor = this;
    if (reverse) [self, other] = [other, self];
    const shape = Tensor.broadcastShapes(call, self.shape, other.shape);
    const a = self.broadcastTo(shape), b = other.broadcastTo(shape);
    // dtype.ts: comparisons give bool; arithmetic on two bools counts in int32 (max / min stay bool)
    const cmp = fn.startsWith("cmp");
    const p = promoteTypes(a.dtype, b.dtype);
    const dt: DType = cmp ? "bool" : p === "bool" && fn !== "max" && fn !== "min" ? "int32" : p;
    return new Tensor(new LazyNode({ op: "binary", fn }, dt, shape, [a.node, b.node]));
  }
  add(o: TensorLike): Tensor { return this.#binary("add", o, "Tensor.add"); }
  sub(o: TensorLike): Tensor { return this.#binary("sub", o, "Tensor.sub"); }
  rsub(o: TensorLike): Tensor { return this.#binary("sub", o, "Tensor.rsub", true); }
  mul(o: TensorLike): Tensor { return this.#binary("mul", o, "Tensor.mul"); }
  div(o: TensorLike): Tensor { return this.#binary("div", o, "Tensor.div"); }
  rdiv(o: TensorLike): Tensor { return this.#binary("div", o, "Tensor.rdiv", true); }
  /** Elementwise maximum (the reduction is max()). */
  maximum(o: TensorLike): Tensor { return this.#binary("max", o, "Tensor.maximum"); }
  minimum(o: TensorLike): Tensor { return this.#binary("min", o, "Tensor.minimum"); }
  pow(o: TensorLike): Tensor { return this.#binary("pow", o, "Tensor.pow"); }
  cmplt(o: TensorLike): Tensor { return this.#binary("cmplt", o, "Tensor.cmplt"); }
  cmple(o: TensorLike): Tensor { return this.#binary("cmple", o, "Tensor.cmple"); }
  cmpgt(o: TensorLike): Tensor { return this.#binary("cmpgt", o, "Tensor.cmpgt"); }
  cmpge(o: TensorLike): Tensor { return this.#binary("cmpge", o, "Tensor.cmpge"); }
  cmpeq(o: TensorLike): Tensor { return this.#binary("cmpeq", o, "Tensor.cmpeq"); }
  cmpne(o: TensorLike): Tensor { return this.#binary("cmpne", o, "Tensor.cmpne"); }

  /** Elementwise select: this != 0 ? a : b (broadcast). */
  where(a: TensorLike, b: TensorLike): Tensor {
    const call = "Tensor.where";
    tensorLike(call, "a", a);
    tensorLike(call, "b", b);
    // two numbers: int32 or float32; a number beside a tensor: a weak scalar (dtype.ts)
    const plain = (v: number): DType => (Number.isInteger(v) ? "int32" : "float32");
    const dtA = typeof a === "number" ? (typeof b === "number" ? plain(a) : scalarDType(b.dtype, a)) : a.dtype;
    const dtB = typeof b === "number" ? (typeof a === "number" ? plain(b) : scalarDType(a.dtype, b)) : b.dtype;
    const dt: DType = promoteTypes(dtA, dtB);
    const ta = typeof a === "number" ? Tensor.full([], a, { dtype: dt }) : a;
    const tb = typeof b === "number" ? Tensor.full([], b, { dtype: dt }) : b;
    const s1 = Tensor.broadcastShapes(call, this.shape, ta.shape);
    const shape = Tensor.broadcastShapes(call, s1, tb.shape);
    return new Tensor(
      new LazyNode({ op: "where" }, dt, shape, [this.broadcastTo(shape).node, ta.broadcastTo(shape).node, tb.broadcastTo(shape).node]),
    );
  }

  /**
   * The values as `dtype`: float → integer truncates toward zero (out of range is undefined, as in
   * C), → bool is x != 0, → float16 / bfloat16 rounds to nearest even (inf and NaN kept), integer
   * → narrower integer wraps. An unknown dtype is INVALID_VALUE.
   */
  cast(dtype: DType): Tensor {
    if (!isDType(dtype)) invalid("Tensor.cast", `unknown dtype ${describeValue(dtype)} (dtypes: ${DTYPES.join(", ")})`);
    if (dtype === this.dtype) return this;
    return new Tensor(new LazyNode({ op: "cast" }, dtype, this.shape, [this.node]));
  }
  /**
   * The same bytes read as `dtype`, of the same element size (float32 ↔ int32, float16 ↔ bfloat16,
   * int8 ↔ uint8); any other pair, bool included, is INVALID_VALUE.
   */
  bitcast(dtype: DType): Tensor {
    const call = "Tensor.bitcast";
    if (!isDType(dtype)) invalid(call, `unknown dtype ${describeValue(dtype)} (dtypes: ${DTYPES.join(", ")})`);
    if (dtype === this.dtype) return this;
    if (ITEMSIZE[dtype] !== ITEMSIZE[this.dtype]) invalid(call, `${this.dtype} is ${ITEMSIZE[this.dtype]} bytes an element, ${dtype} ${ITEMSIZE[dtype]}: a bitcast needs equal sizes`);
    if (dtype === "bool" || this.dtype === "bool") invalid(call, `bool has no bitcast (${this.dtype} to ${dtype}): a byte other than 0 or 1 is no bool; use cast`);
    return new Tensor(new LazyNode({ op: "bitcast" }, dtype, this.shape, [this.node]));
  }
  float(): Tensor { return this.cast("float32"); }
  int(): Tensor { return this.cast("int32"); }
  half(): Tensor { return this.cast("float16"); }
  bfloat16(): Tensor { return this.cast("bfloat16"); }
  long(): Tensor { return this.cast("int64"); }
  bool(): Tensor { return this.cast("bool"); }

  /** Force this value into its own buffer (a kernel boundary). */
  contiguous(): Tensor {
    return new Tensor(new LazyNode({ op: "contiguous" }, this.dtype, this.shape, [this.node]));
  }

  // ---- movement (views: index arithmetic, never copies) ---------------------------------------

  #view(fn: (st: ShapeTracker) => ShapeTracker): Tensor {
    const n = this.node;
    const base = n.base;
    const st0 = n.arg.op === "view" ? n.arg.st : ShapeTracker.contiguous(base.shape);
    const st = fn(st0);
    if (st.contiguous && st.shape.length === base.shape.length && st.shape.every((d, i) => sameDim(d, base.shape[i]!)))
      return new Tensor(base);
    return new Tensor(new LazyNode({ op: "view", st }, base.dtype, st.shape, [base]));
  }

  reshape(shape: readonly Dim[]): Tensor {
    const call = "Tensor.reshape";
    if (!Array.isArray(shape)) invalid(call, `shape must be an array of dimensions, got ${describeGot(shape)}`);
    const sh = [...shape];
    const neg = sh.filter((d) => d === -1).length;
    if (neg > 1) invalid(call, `at most one -1 in ${shapeStr(sh)}`);
    if (neg === 1) {
      const known = numelNumeric(sh.filter((d) => d !== -1));
      const have = numelNumeric(this.shape);
      if (known === 0 || have % known) invalid(call, `cannot reshape ${shapeStr(this.shape)} to ${shapeStr(shape)}`);
      sh[sh.indexOf(-1)] = have / known;
    }
    checkShapeDims(call, sh);
    const va = varsOf(this.shape), vb = varsOf(sh);
    if (numelNumeric(this.shape) !== numelNumeric(sh) || va.join(",") !== vb.join(","))
      invalid(call, `cannot reshape ${shapeStr(this.shape)} to ${shapeStr(sh)}: element counts differ`);
    return this.#view((st) => st.reshape(sh));
  }

  permute(order: readonly number[]): Tensor {
    const call = "Tensor.permute";
    const nd = this.ndim;
    if (!Array.isArray(order)) invalid(call, `order must be an array of axes, got ${describeGot(order)}`);
    const o = order.map((a) => normAxis(call, a, nd, this.shape));
    if (o.length !== nd || new Set(o).size !== nd) invalid(call, `[${order.join(", ")}] is not a permutation of the axes of ${shapeStr(this.shape)}`);
    return this.#view((st) => st.permute(o));
  }

  /** Swap two axes (default: the last two). */
  transpose(a = -2, b = -1): Tensor {
    const call = "Tensor.transpose";
    const nd = this.ndim;
    if (nd < 2 && a === -2 && b === -1) return this;
    const x = normAxis(call, a, nd, this.shape), y = normAxis(call, b, nd, this.shape);
    if (nd === 0) return this;
    const order = [...Array(nd).keys()];
    [order[x], order[y]] = [order[y]!, order[x]!];
    return this.permute(order);
  }
  get T(): Tensor {
    return this.permute([...Array(this.ndim).keys()].reverse());
  }

  /** Broadcast size-1 dims to `shape` (-1 keeps a dim; extra leading dims are added). */
  expand(shape: readonly Dim[]): Tensor {
    const call = "Tensor.expand";
    if (!Array.isArray(shape)) invalid(call, `shape must be an array of dimensions, got ${describeGot(shape)}`);
    if (shape.length < this.ndim) invalid(call, `cannot expand ${shapeStr(this.shape)} to ${shapeStr(shape)}`);
    const lead = shape.length - this.ndim;
    const src = lead ? this.reshape([...Array(lead).fill(1), ...this.shape]) : this;
    const sh = shape.map((d, i) => (d === -1 ? src.shape[i]! : d));
    checkShapeDims(call, sh);
    sh.forEach((d, i) => {
      const s = src.shape[i]!;
      if (!sameDim(s, d) && s !== 1) invalid(call, `cannot expand ${shapeStr(this.shape)} to ${shapeStr(shape)} (dimension ${i}: ${String(s)} is not 1)`);
    });
    return src.#view((st) => st.expand(sh));
  }

  /** Keep [lo, hi) of each dim (null keeps the dim); hi may be a Variable when lo is 0. */
  shrink(arg: readonly (readonly [number, Dim] | null)[]): Tensor {
    const call = "Tensor.shrink";
    if (!Array.isArray(arg)) invalid(call, `ranges must be an array, got ${describeGot(arg)}`);
    arg.forEach((r, i) => {
      if (r !== null && (!Array.isArray(r) || r.length !== 2)) invalid(call, `range ${i} must be [lo, hi] or null, got ${describeGot(r)}`);
    });
    if (arg.length !== this.ndim) invalid(call, `${arg.length} ranges for shape ${shapeStr(this.shape)}`);
    const full = arg.map((r, i): readonly [number, Dim] => r ?? [0, this.shape[i]!]);
    full.forEach(([lo, hi], i) => {
      const d = this.shape[i]!;
      if (hi instanceof Variable) {
        if (lo !== 0 || (!sameDim(hi, d) && (typeof d !== "number" || hi.max > d)))
          invalid(call, `range [${lo}, ${hi.name}] does not fit dimension ${i} of ${shapeStr(this.shape)}`);
        return;
      }
      if (d instanceof Variable) {
        if (lo !== 0 || hi !== d.max) invalid(call, `a variable dimension (${d.name}) can only be kept whole`);
        return;
      }
      if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo < 0 || hi > d || lo > hi)
        invalid(call, `range [${lo}, ${hi}) is outside dimension ${i} of ${shapeStr(this.shape)}`);
    });
    const norm = full.map(([lo, hi], i): readonly [number, Dim] => (this.shape[i] instanceof Variable ? [0, this.shape[i]!] : [lo, hi]));
    if (norm.every(([lo, hi], i) => lo === 0 && sameDim(hi, this.shape[i]!))) return this;
    return this.#view((st) => st.shrink(norm));
  }

  /**
   * Python slicing per dim: an integer index (the dim is kept, size 1), [start?, end?, step?]
   * with negative indices from the end and null or undefined for a default (a negative step reads
   * the dim backwards), or null to keep the dim. Views only: flip, shrink and a stride.
   */
  slice(ranges: readonly (readonly [(number | null)?, (number | null)?, (number | null)?] | number | null)[]): Tensor {
    const call = "Tensor.slice";
    if (!Array.isArray(ranges)) invalid(call, `ranges must be an array, got ${describeGot(ranges)}`);
    const optInt = (x: unknown) => x === null || x === undefined || Number.isInteger(x);
    ranges.forEach((r, i) => {
      const ok =
        r === null ||
        r === undefined ||
        (typeof r === "number" && Number.isInteger(r)) ||
        (Array.isArray(r) && r.length <= 3 && optInt(r[0]) && optInt(r[1]) && optInt(r[2]) && r[2] !== 0);
      if (!ok) invalid(call, `range ${i} must be an integer index, [start?, end?, step?] of integers (step non-zero) or null, got ${describeGot(r)}`);
    });
    if (ranges.length > this.ndim) invalid(call, `${ranges.length} ranges for shape ${shapeStr(this.shape)}`);
    const flips: number[] = [];
    const steps = this.shape.map(() => 1);
    const arg = this.shape.map((d, i): readonly [number, number] | null => {
      const r = ranges[i];
      if (r === null || r === undefined) return null;
      if (typeof d !== "number") invalid(call, `cannot slice variable dimension ${i} of ${shapeStr(this.shape)}; use shrink`);
      if (typeof r === "number") {
        const s = r < 0 ? r + d : r;
        if (s < 0 || s >= d) invalid(call, `index ${r} is outside dimension ${i} of ${shapeStr(this.shape)}`);
        return [s, s + 1];
      }
      const step = r[2] ?? 1;
      const lo = step > 0 ? 0 : -1, hi = step > 0 ? d : d - 1;
      const fix = (x: number | null | undefined, dflt: number) => (x === null || x === undefined ? dflt : Math.min(Math.max(x < 0 ? x + d : x, lo), hi));
      const s = fix(r[0], step > 0 ? 0 : d - 1), e = fix(r[1], step > 0 ? d : -1);
      const n = Math.max(0, Math.ceil((e - s) / step));
      steps[i] = Math.abs(step);
      if (step > 0) return [s, n ? s + (n - 1) * step + 1 : s];
      flips.push(i);
      const fs = d - 1 - s; // s in the flipped dim
      return n ? [fs, fs + (n - 1) * -step + 1] : [0, 0];
    });
    const t = (flips.length ? this.flip(flips) : this).shrink(arg);
    return steps.some((s) => s !== 1) ? t.#view((st) => st.stride(steps)) : t;
  }

  /**
   * Pad each dim by [before, after] (null: none; a negative amount crops), or torch's flat form
   * [left, right, top, bottom, …] from the last dim backwards. `mode`: "constant" (with `value`,
   * default 0), "reflect", "replicate" or "circular"; a number in place of the mode is the value.
   */
  pad(arg: readonly (readonly [number, number] | null)[] | readonly number[], mode: PadMode | number = "constant", value = 0): Tensor {
    const call = "Tensor.pad";
    if (!Array.isArray(arg)) invalid(call, `pads must be an array, got ${describeGot(arg)}`);
    if (typeof mode === "number") [mode, value] = ["constant", mode];
    if (!PAD_MODES.includes(mode)) invalid(call, `mode must be one of ${PAD_MODES.join(", ")}, got ${describeGot(mode)}`);
    if (typeof value !== "number") invalid(call, `value must be a number, got ${describeGot(value)}`);
    let p: (readonly [number, number])[];
    if (arg.length && arg.every((x) => typeof x === "number")) {
      const flat = arg as readonly number[];
      if (flat.length % 2 || flat.length / 2 > this.ndim) invalid(call, `flat pads [${flat.join(", ")}] need an even count of at most 2 per dim of ${shapeStr(this.shape)}`);
      p = this.shape.map(() => [0, 0] as const);
      for (let k = 0; k < flat.length / 2; k++) p[this.ndim - 1 - k] = [flat[2 * k]!, flat[2 * k + 1]!];
    } else {
      arg.forEach((r, i) => {
        if (r !== null && (!Array.isArray(r) || r.length !== 2)) invalid(call, `pad ${i} must be [before, after] or null, got ${describeGot(r)}`);
      });
      if (arg.length !== this.ndim) invalid(call, `${arg.length} pads for shape ${shapeStr(this.shape)}`);
      p = (arg as readonly (readonly [number, number] | null)[]).map((r) => r ?? ([0, 0] as const));
    }
    p.forEach(([b, a], i) => {
      const d = this.shape[i]!;
      if (!Number.isSafeInteger(b) || !Number.isSafeInteger(a)) invalid(call, `pad [${describeValue(b)}, ${describeValue(a)}] must be integers`);
      if (!b && !a) return;
      if (typeof d !== "number") invalid(call, `cannot pad variable dimension ${i} of ${shapeStr(this.shape)}`);
      if (Math.max(-b, 0) + Math.max(-a, 0) > d) invalid(call, `pad [${b}, ${a}] crops more than dimension ${i} of ${shapeStr(this.shape)}`);
      if (mode === "reflect" && (b >= d || a >= d)) invalid(call, `reflect pad [${b}, ${a}] must be less than dimension ${i} of ${shapeStr(this.shape)}`);
      if (mode === "replicate" && d === 0) invalid(call, `cannot replicate-pad empty dimension ${i} of ${shapeStr(this.shape)}`);
      if (mode === "circular" && (b < 0 || a < 0 || b > d || a > d))
        invalid(call, `circular pad [${b}, ${a}] must be non-negative and at most dimension ${i} of ${shapeStr(this.shape)}`);
    });
    const crop = p.map(([b, a], i): readonly [number, number] | null => (b < 0 || a < 0 ? [Math.max(-b, 0), (this.shape[i] as number) - Math.max(-a, 0)] : null));
    const grow = p.map(([b, a]) => [Math.max(b, 0), Math.max(a, 0)] as const);
    if (mode === "constant") return (crop.some((c) => c) ? this.shrink(crop) : this).#padConstant(call, grow, value);
    let x: Tensor = this;
    grow.forEach(([b, a], d) => {
      if (!b && !a) return;
      const n = x.shape[d] as number;
      const part = (lo: number, hi: number) => x.shrink(x.shape.map((_, i) => (i === d ? [lo, hi] : null)));
      const along = (k: number) => x.shape.map((s, i) => (i === d ? k : s));
      const [before, after] =
        mode === "reflect" ? [part(1, b + 1).flip(d), part(n - 1 - a, n - 1).flip(d)]
        : mode === "replicate" ? [part(0, 1).expand(along(b)), part(n - 1, n).expand(along(a))]
        : [part(n - b, n), part(0, a)];
      x = Tensor.#catChecked([...(b ? [before] : []), x, ...(a ? [after] : [])], d);
    });
    // crop the grown tensor: a dim with a negative amount grew only on its other side
    const grown = x.shape as readonly number[];
    return crop.some((c) => c) ? x.shrink(crop.map((c, i) => (c ? [c[0], c[1] + grown[i]! - (this.shape[i] as number)] : null))) : x;
  }

  /** Constant padding by non-negative amounts (checked by the caller). */
  #padConstant(call: string, p: readonly (readonly [number, number])[], value: number): Tensor {
    checkShapeDims(call, this.shape.map((d, i) => (typeof d === "number" ? d + p[i]![0] + p[i]![1] : d)));
    if (p.every(([b, a]) => !b && !a)) return this;
    const padded = this.#view((st) => st.pad(p));
    if (value === 0) return padded;
    const inside = Tensor.ones(this.shape, { dtype: "int32" }).#view((st) => st.pad(p));
    return inside.where(padded, value);
  }

  flip(axes: number | readonly number[]): Tensor {
    const call = "Tensor.flip";
    if (typeof axes !== "number" && !Array.isArray(axes)) invalid(call, `axes must be a number or an array of numbers, got ${describeGot(axes)}`);
    const list = (typeof axes === "number" ? [axes] : axes).map((a) => normAxis(call, a, this.ndim, this.shape));
    if (this.ndim === 0) return this;
    for (const a of list) if (typeof this.shape[a] !== "number") invalid(call, `cannot flip variable dimension ${a}`);
    return this.#view((st) => st.flip(list));
  }

  unsqueeze(axis: number): Tensor {
    const nd = this.ndim + 1;
    const a = normAxis("Tensor.unsqueeze", axis, nd, this.shape);
    const sh = [...this.shape];
    sh.splice(a, 0, 1);
    return this.reshape(sh);
  }

  squeeze(axis?: number): Tensor {
    if (axis === undefined) return this.reshape(this.shape.filter((d) => d !== 1));
    const a = normAxis("Tensor.squeeze", axis, this.ndim, this.shape);
    if (this.ndim === 0) return this;
    if (this.shape[a] !== 1) invalid("Tensor.squeeze", `dimension ${a} of ${shapeStr(this.shape)} is not 1`);
    return this.reshape(this.shape.filter((_, i) => i !== a));
  }

  flatten(): Tensor {
    return this.reshape([numelNumeric(this.shape)]);
  }

  // ---- movement and construction built on views (cat, split, repeat, roll, tri, eye, indexing)

  /** Join `tensors` along `dim` (equal shapes elsewhere; mixed dtypes promote as dtype.ts says). */
  static cat(tensors: readonly Tensor[], dim = 0): Tensor {
    const call = "Tensor.cat";
    if (!Array.isArray(tensors) || !tensors.length) invalid(call, `tensors must be a non-empty array of Tensors, got ${describeGot(tensors)}`);
    tensors.forEach((t, i) => tensorArg(call, `tensors[${i}]`, t));
    const t0 = tensors[0]!;
    if (!t0.ndim) invalid(call, "cannot concatenate 0-d tensors");
    const d = normAxis(call, dim, t0.ndim, t0.shape);
    tensors.forEach((t: Tensor, i: number) => {
      const ok = t.ndim === t0.ndim && t.shape.every((s, k) => k === d || sameDim(s, t0.shape[k]!));
      if (!ok) invalid(call, `tensors[${i}] has shape ${shapeStr(t.shape)}, not ${shapeStr(t0.shape)} outside dimension ${d}`);
      if (tensors.length > 1 && typeof t.shape[d] !== "number") invalid(call, `cannot concatenate along variable dimension ${d} of ${shapeStr(t.shape)}`);
    });
    return Tensor.#catChecked(tensors, d);
  }
  /** this, then `others`, along `dim` (tinygrad's x.cat(y, z, dim)). */
  cat(others: Tensor | readonly Tensor[], dim = 0): Tensor {
    return Tensor.cat([this, ...(Array.isArray(others) ? others : [others as Tensor])], dim);
  }

  /** cat of checked operands: each is padded to the whole extent and the pads are summed (one fused kernel). */
  static #catChecked(tensors: readonly Tensor[], d: number): Tensor {
    const dt: DType = tensors.map((t) => t.dtype).reduce(promoteTypes);
    const ts = tensors.map((t) => t.cast(dt));
    if (ts.length === 1) return ts[0]!;
    const total = ts.reduce((p, t) => p + (t.shape[d] as number), 0);
    let off = 0, out: Tensor | null = null;
    for (const t of ts) {
      const n = t.shape[d] as number;
      if (n || (!out && off + n === total)) {
        const p = t.#padConstant("Tensor.cat", t.shape.map((_, i) => (i === d ? [off, total - off - n] : [0, 0])), 0);
        out = out ? out.add(p) : p;
      }
      off += n;
    }
    return out ?? ts[0]!.#padConstant("Tensor.cat", ts[0]!.shape.map((_, i) => (i === d ? [0, total] : [0, 0])), 0);
  }

  /** Stack equal-shaped `tensors` along a new axis `dim`. */
  static stack(tensors: readonly Tensor[], dim = 0): Tensor {
    const call = "Tensor.stack";
    if (!Array.isArray(tensors) || !tensors.length) invalid(call, `tensors must be a non-empty array of Tensors, got ${describeGot(tensors)}`);
    tensors.forEach((t, i) => tensorArg(call, `tensors[${i}]`, t));
    const t0 = tensors[0]!;
    const d = normAxis(call, dim, t0.ndim + 1, t0.shape);
    tensors.forEach((t: Tensor, i: number) => {
      if (t.ndim !== t0.ndim || !t.shape.every((s, k) => sameDim(s, t0.shape[k]!)))
        invalid(call, `tensors[${i}] has shape ${shapeStr(t.shape)}, not ${shapeStr(t0.shape)}`);
    });
    return Tensor.cat(tensors.map((t) => t.unsqueeze(d)), d);
  }
  stack(others: Tensor | readonly Tensor[], dim = 0): Tensor {
    return Tensor.stack([this, ...(Array.isArray(others) ? others : [others as Tensor])], dim);
  }

  /** Pieces along `dim`: of `sizes` each (the last may be smaller), or of the listed sizes (summing to the dim). */
  split(sizes: number | readonly number[], dim = 0): Tensor[] {
    const call = "Tensor.split";
    const d = normAxis(call, dim, this.ndim, this.shape);
    if (!this.ndim) invalid(call, "cannot split a 0-d tensor");
    const n = this.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot split variable dimension ${d} of ${shapeStr(this.shape)}`);
    let list: number[];
    if (typeof sizes === "number") {
      if (!Number.isSafeInteger(sizes) || sizes <= 0) invalid(call, `split size must be a positive integer, got ${describeGot(sizes)}`);
      list = [];
      for (let i = 0; i < Math.max(1, n); i += sizes) list.push(Math.min(sizes, n - i));
    } else {
      if (!Array.isArray(sizes)) invalid(call, `sizes must be a number or an array of numbers, got ${describeGot(sizes)}`);
      list = [...sizes];
      if (list.some((s) => !Number.isSafeInteger(s) || s < 0) || list.reduce((p, q) => p + q, 0) !== n)
        invalid(call, `sizes [${list.map((s) => describeValue(s)).join(", ")}] must be non-negative integers summing to ${n}`);
    }
    let off = 0;
    return list.map((s) => this.shrink(this.shape.map((_, i) => (i === d ? [off, (off += s)] : null))));
  }

  /** `chunks` pieces of ceil(n / chunks) along `dim` (fewer when they run out, as tinygrad). */
  chunk(chunks: number, dim = 0): Tensor[] {
    const call = "Tensor.chunk";
    if (!Number.isSafeInteger(chunks) || chunks <= 0) invalid(call, `chunks must be a positive integer, got ${describeGot(chunks)}`);
    const d = normAxis(call, dim, this.ndim, this.shape);
    const n = this.shape[d];
    if (typeof n !== "number") invalid(call, `cannot chunk variable dimension ${d} of ${shapeStr(this.shape)}`);
    return n ? this.split(Math.ceil(n / chunks), d) : this.split(new Array<number>(chunks).fill(0), d);
  }

  /** Tile: repeats[i] copies along dim i (leading repeats add dims). A view, never a copy. */
  repeat(repeats: number | readonly number[], ...more: number[]): Tensor {
    const call = "Tensor.repeat";
    const reps = typeof repeats === "number" ? [repeats, ...more] : Array.isArray(repeats) ? [...repeats] : invalid(call, `repeats must be numbers, got ${describeGot(repeats)}`);
    if (reps.some((r) => !Number.isSafeInteger(r) || r < 0)) invalid(call, `repeats [${reps.map((r) => describeValue(r)).join(", ")}] must be non-negative integers`);
    if (reps.length < this.ndim) invalid(call, `${reps.length} repeats for shape ${shapeStr(this.shape)}`);
    const base: Dim[] = [...new Array<number>(reps.length - this.ndim).fill(1), ...this.shape];
    base.forEach((b, i) => {
      if (typeof b !== "number" && reps[i] !== 1) invalid(call, `cannot repeat variable dimension ${i} of ${shapeStr(this.shape)}`);
    });
    const out = base.map((b, i) => (typeof b === "number" ? b * reps[i]! : b));
    checkShapeDims(call, out);
    return this.reshape(base.flatMap((b) => [1, b])).expand(base.flatMap((b, i) => [reps[i]!, b])).reshape(out);
  }

  /** Rotate by `shifts` along `dims` (none: over the flattened tensor). */
  roll(shifts: number | readonly number[], dims?: number | readonly number[]): Tensor {
    const call = "Tensor.roll";
    const ss = typeof shifts === "number" ? [shifts] : Array.isArray(shifts) ? [...shifts] : invalid(call, `shifts must be a number or an array, got ${describeGot(shifts)}`);
    if (ss.some((s) => !Number.isSafeInteger(s))) invalid(call, `shifts [${ss.map((s) => describeValue(s)).join(", ")}] must be integers`);
    if (dims === undefined) {
      if (ss.length !== 1) invalid(call, `${ss.length} shifts without dims`);
      if (this.shape.some((d) => typeof d !== "number")) invalid(call, `cannot roll variable shape ${shapeStr(this.shape)}`);
      return this.flatten().roll(ss[0]!, 0).reshape(this.shape);
    }
    const ds = (typeof dims === "number" ? [dims] : Array.isArray(dims) ? dims : invalid(call, `dims must be a number or an array, got ${describeGot(dims)}`)).map((a) => normAxis(call, a, this.ndim, this.shape));
    if (ds.length !== ss.length) invalid(call, `${ss.length} shifts for ${ds.length} dims`);
    const total = this.shape.map(() => 0);
    ds.forEach((d, k) => {
      if (typeof this.shape[d] !== "number") invalid(call, `cannot roll variable dimension ${d} of ${shapeStr(this.shape)}`);
      total[d]! += ss[k]!;
    });
    const reps = this.shape.map((_, i) => (ds.includes(i) ? 2 : 1));
    const keep = this.shape.map((d, i): readonly [number, number] | null => {
      const n = d as number;
      if (!ds.includes(i) || !n) return null;
      const delta = n - (((total[i]! % n) + n) % n);
      return [delta, delta + n];
    });
    if (this.ndim === 0) return this;
    return this.repeat(reps).shrink(keep);
  }

  /** int32 mask [r, c]: row + k <= col. */
  static #tri(r: Dim, c: Dim, k: number): Tensor {
    return Tensor.arange(r).unsqueeze(-1).add(k).cmple(Tensor.arange(c));
  }
  #triArgs(call: string, diagonal: number): [Dim, Dim] {
    if (this.ndim < 2) invalid(call, `needs at least 2 dims, got ${shapeStr(this.shape)}`);
    if (!Number.isSafeInteger(diagonal)) invalid(call, `diagonal must be an integer, got ${describeGot(diagonal)}`);
    return [this.shape[this.ndim - 2]!, this.shape[this.ndim - 1]!];
  }
  /** The upper triangle of the last two dims (col - row >= diagonal); the rest is 0. */
  triu(diagonal = 0): Tensor {
    const [r, c] = this.#triArgs("Tensor.triu", diagonal);
    return Tensor.#tri(r, c, diagonal).where(this, 0).cast(this.dtype);
  }
  /** The lower triangle of the last two dims (col - row <= diagonal); the rest is 0. */
  tril(diagonal = 0): Tensor {
    const [r, c] = this.#triArgs("Tensor.tril", diagonal);
    return Tensor.#tri(r, c, diagonal + 1).where(0, this).cast(this.dtype);
  }

  /** The n×m identity (m defaults to n), built from views of one constant. */
  static eye(n: number, m?: number, opts: { dtype?: DType } = {}): Tensor {
    const call = "Tensor.eye";
    const dtype = dtypeOf(call, options(call, opts, DTYPE_KEYS).dtype) ?? "float32";
    if (!Number.isSafeInteger(n) || n < 0 || (m !== undefined && (!Number.isSafeInteger(m) || m < 0)))
      invalid(call, `sizes must be non-negative integers, got ${describeGot(n)}, ${describeGot(m)}`);
    checkShapeDims(call, [n, n + 1]);
    const x = Tensor.ones([n, 1], { dtype }).pad([null, [0, n]]).flatten().shrink([[0, n * n]]).reshape([n, n]);
    if (m === undefined || m === n) return x;
    return m > n ? x.pad([null, [0, m - n]]) : x.shrink([null, [0, m]]);
  }

  /** `steps` evenly spaced values from start to stop inclusive (float32 unless dtype says). */
  static linspace(start: number, stop: number, steps: number, opts: { dtype?: DType } = {}): Tensor {
    const call = "Tensor.linspace";
    const dtype = dtypeOf(call, options(call, opts, DTYPE_KEYS).dtype) ?? "float32";
    finiteNumber(call, "start", start);
    finiteNumber(call, "stop", stop);
    if (!Number.isSafeInteger(steps) || steps < 0) invalid(call, `steps must be a non-negative integer, got ${describeGot(steps)}`);
    checkShapeDims(call, [steps]);
    if (steps === 1) return Tensor.full([1], start).cast(dtype);
    return new Tensor(new LazyNode({ op: "arange", start, step: steps > 1 ? (stop - start) / (steps - 1) : 0 }, "float32", [steps])).cast(dtype);
  }

  /** A tensor of this shape filled with `value` (this dtype unless opts.dtype says). */
  fullLike(value: number, opts: { dtype?: DType } = {}): Tensor {
    const call = "Tensor.fullLike";
    if (typeof value !== "number") invalid(call, `value must be a number, got ${describeGot(value)}`);
    return Tensor.full(this.shape, value, { dtype: dtypeOf(call, options(call, opts, DTYPE_KEYS).dtype) ?? this.dtype });
  }
  zerosLike(opts: { dtype?: DType } = {}): Tensor { return under("Tensor.zerosLike", () => this.fullLike(0, opts)); }
  onesLike(opts: { dtype?: DType } = {}): Tensor { return under("Tensor.onesLike", () => this.fullLike(1, opts)); }
  #randLike(call: string, normal: boolean, opts: { seed?: number | undefined; dtype?: DType | undefined }): Tensor {
    const o = options(call, opts, RAND_LIKE_KEYS);
    if ((dtypeOf(call, o.dtype) ?? "float32") !== "float32") invalid(call, `random tensors are float32, got dtype ${describeGot(o.dtype)}`);
    return normal ? Tensor.randn(this.shape, { seed: o.seed }) : Tensor.rand(this.shape, { seed: o.seed });
  }
  /** Uniform [0, 1) float32 of this shape (see rand). */
  randLike(opts: { seed?: number; dtype?: DType } = {}): Tensor { return this.#randLike("Tensor.randLike", false, opts); }
  /** Standard normal float32 of this shape (see randn). */
  randnLike(opts: { seed?: number; dtype?: DType } = {}): Tensor { return this.#randLike("Tensor.randnLike", true, opts); }

  /**
   * int32 one-hot over a new last axis of `numClasses` (-1: the maximum + 1, which runs the
   * tensor now). Values outside [0, numClasses) give a row of zeros.
   */
  oneHot(numClasses = -1): Tensor {
    const call = "Tensor.oneHot";
    if (this.dtype !== "int32") invalid(call, `needs an int32 tensor, got ${this.dtype}`);
    if (numClasses === -1) {
      if (!this.numel) invalid(call, "cannot infer the class count of an empty tensor; give numClasses");
      numClasses = (Number(this.max().toArray<HostArray>()[0]!) | 0) + 1;
    }
    if (!Number.isSafeInteger(numClasses) || numClasses < 0) invalid(call, `numClasses must be a non-negative integer or -1, got ${describeGot(numClasses)}`);
    return this.unsqueeze(-1).cmpeq(Tensor.arange(numClasses, undefined, 1, { dtype: "int32" })).cast("int32");
  }

  /** `value` where `mask` is non-zero, else this (broadcast). */
  maskedFill(mask: Tensor, value: TensorLike): Tensor {
    const call = "Tensor.maskedFill";
    tensorArg(call, "mask", mask);
    tensorLike(call, "value", value);
    return under(call, () => mask.where(value, this));
  }

  #indexArgs(call: string, dim: number, index: unknown): [number, Tensor] {
    tensorArg(call, "index", index);
    const idx = index as Tensor;
    if (idx.dtype !== "int32") invalid(call, `index must be int32, got ${idx.dtype}`);
    if (!this.ndim) invalid(call, "needs at least a 1-D tensor");
    const d = normAxis(call, dim, this.ndim, this.shape);
    if (typeof this.shape[d] !== "number") invalid(call, `cannot index variable dimension ${d} of ${shapeStr(this.shape)}`);
    return [d, idx];
  }

  /** out[…, j, …] = this[…, index[…, j, …], …] along `dim` (tinygrad and torch gather); out-of-range indices give 0. */
  gather(dim: number, index: Tensor): Tensor {
    const call = "Tensor.gather";
    const [d, idx] = this.#indexArgs(call, dim, index);
    if (idx.ndim !== this.ndim) invalid(call, `index has shape ${shapeStr(idx.shape)}, needs ${this.ndim} dims like ${shapeStr(this.shape)}`);
    idx.shape.forEach((s, i) => {
      const t = this.shape[i]!;
      if (i !== d && !sameDim(s, t) && (typeof s !== "number" || typeof t !== "number" || s > t))
        invalid(call, `index shape ${shapeStr(idx.shape)} exceeds ${shapeStr(this.shape)} in dimension ${i}`);
    });
    const x = this.shrink(this.shape.map((s, i) => (i === d || sameDim(s, idx.shape[i]!) ? null : [0, idx.shape[i]!])));
    return new Tensor(new LazyNode({ op: "gather", axis: d }, this.dtype, idx.shape, [x.node, idx.node]));
  }

  /**
   * A copy of this with `src` written at `index` along `dim` (torch and tinygrad scatter): for every
   * position j of `index`, out[j with j[dim] replaced by index[j]] = src[j]. `index` is int32 with
   * this tensor's rank, its shape at most this shape off `dim` and at most `src`'s shape (a number
   * `src` is a constant). With `reduce` "add" or "multiply" the written values combine with what
   * is there (several landing on one place all count); without it, where an index repeats along
   * `dim` the last one writes (torch leaves that unspecified). Out-of-range indices write nothing.
   * A composite: a one-hot match of the indices against the positions, reduced over `dim`.
   */
  scatter(dim: number, index: Tensor, src: Tensor | number, reduce?: "add" | "multiply"): Tensor {
    const call = "Tensor.scatter";
    if (reduce !== undefined && reduce !== "add" && reduce !== "multiply") invalid(call, `reduce must be "add", "multiply" or undefined, got ${describeGot(reduce)}`);
    return this.#scatter(call, dim, index, src, reduce === "add" ? "sum" : reduce === "multiply" ? "prod" : undefined, true);
  }

  /**
   * tinygrad's scatter_reduce: `src` at `index` along `dim` (shapes as `scatter`), the values
   * landing on one place combined by `reduce` ("sum", "prod", "mean", "amax", "amin"), with this
   * tensor's value among them when includeSelf (default true); places nothing lands on keep
   * this value. An integer mean truncates toward zero.
   */
  scatterReduce(dim: number, index: Tensor, src: Tensor, reduce: "sum" | "prod" | "mean" | "amax" | "amin", includeSelf = true): Tensor {
    const call = "Tensor.scatterReduce";
    if (!["sum", "prod", "mean", "amax", "amin"].includes(reduce)) invalid(call, `reduce must be "sum", "prod", "mean", "amax" or "amin", got ${describeGot(reduce)}`);
    boolArg(call, "includeSelf", includeSelf);
    return this.#scatter(call, dim, index, tensorArg(call, "src", src), reduce, includeSelf);
  }

  #scatter(call: string, dim: number, index: Tensor, src: Tensor | number, reduce: "sum" | "prod" | "mean" | "amax" | "amin" | undefined, includeSelf: boolean): Tensor {
    const [d, idx] = this.#indexArgs(call, dim, index);
    if (idx.ndim !== this.ndim) invalid(call, `index has shape ${shapeStr(idx.shape)}, needs ${this.ndim} dims like ${shapeStr(this.shape)}`);
    const S = this.shape, J = idx.shape;
    if (![...S, ...J].every((x) => typeof x === "number")) invalid(call, `needs fixed shapes, got ${shapeStr(S)} and index ${shapeStr(J)}`);
    const sn = S as readonly number[], jn = J as readonly number[];
    jn.forEach((j, i) => { if (i !== d && j > sn[i]!) invalid(call, `index shape ${shapeStr(J)} exceeds ${shapeStr(S)} in dimension ${i}`); });
    let v: Tensor;
    if (typeof src === "number") v = Tensor.full(jn, src, { dtype: this.dtype });
    else {
      v = tensorArg(call, "src", src);
      if (v.ndim !== this.ndim) invalid(call, `src has shape ${shapeStr(v.shape)}, needs ${this.ndim} dims like ${shapeStr(S)}`);
      v.shape.forEach((x, i) => { if (typeof x !== "number" || x < jn[i]!) invalid(call, `index shape ${shapeStr(J)} exceeds src ${shapeStr(v.shape)} in dimension ${i}`); });
      v = v.shrink(jn.map((j) => [0, j] as const)).cast(this.dtype);
    }
    const n = sn[d]!, jd = jn[d]!;
    if (n === 0 || jn.some((j) => j === 0)) return this.add(0);
    // dim last: index and src as [...others, jd]; the match m[..., j, p] = index[..., j] == p
    const perm = [...S.keys()].filter((i) => i !== d).concat(d);
    const inv = perm.map((_, i) => perm.indexOf(i));
    const vp = v.permute(perm).unsqueeze(-1);
    const m = idx.permute(perm).unsqueeze(-1).cmpeq(Tensor.arange(n, undefined, 1, { dtype: "int32" }));
    const pads = sn.map((x, i) => (i === d ? null : ([0, x - jn[i]!] as const)));
    const back = (t: Tensor): Tensor => t.permute(inv).pad(pads);
    const hit = back(m.any(-2));
    const f = isFloat(this.dtype), range = INT_RANGE[this.dtype] ?? [0, 1];
    let val: Tensor, out: Tensor;
    if (reduce === "sum") {
      val = back(m.where(vp, 0).sum(-2));
      out = includeSelf ? this.add(val) : hit.where(val, this);
    } else if (reduce === "prod") {
      val = back(m.where(vp, 1).prod(-2));
      out = hit.where(includeSelf ? this.mul(val) : val, this);
    } else if (reduce === "amax" || reduce === "amin") {
      const big = reduce === "amax";
      val = back(big ? m.where(vp, f ? -Infinity : range[0]).max(-2) : m.where(vp, f ? Infinity : range[1]).min(-2)).cast(this.dtype);
      out = hit.where(includeSelf ? (big ? this.maximum(val) : this.minimum(val)) : val, this);
    } else if (reduce === "mean") {
      const s = back(m.where(vp, 0).sum(-2)), cnt = back(m.sum(-2));
      out = hit.where(includeSelf ? this.add(s).div(cnt.add(1)) : s.div(cnt), this);
    } else {
      const j = Tensor.arange(jd, undefined, 1, { dtype: "int32" }).unsqueeze(-1);
      const last = m.where(j, -1).max(-2); // the last j landing on each place, -1 where none does
      out = hit.where(back(j.cmpeq(last.unsqueeze(-2)).where(vp, 0).sum(-2).cast(this.dtype)), this);
    }
    return out.cast(this.dtype);
  }

  /** The slices at 1-D int32 `index` along `dim` (torch's index_select); out-of-range indices give 0. */
  indexSelect(dim: number, index: Tensor): Tensor {
    const call = "Tensor.indexSelect";
    const [d, idx] = this.#indexArgs(call, dim, index);
    if (idx.ndim !== 1) invalid(call, `index must be 1-D, got ${shapeStr(idx.shape)}`);
    const k = idx.shape[0]!;
    const ix = idx.reshape(this.shape.map((_, i) => (i === d ? k : 1))).expand(this.shape.map((s, i) => (i === d ? k : s)));
    return new Tensor(new LazyNode({ op: "gather", axis: d }, this.dtype, ix.shape, [this.node, ix.node]));
  }

  // ---- reductions ------------------------------------------------------------------------------

  #axes(call: string, axis: number | readonly number[] | undefined): number[] {
    axis = axesArg(call, axis);
    if (axis === undefined) return [...Array(this.ndim).keys()];
    const list = (typeof axis === "number" ? [axis] : axis).map((a) => normAxis(call, a, this.ndim, this.shape));
    if (new Set(list).size !== list.length) invalid(call, `repeated axis in [${list.join(", ")}]`);
    // a 0-d tensor's axis 0 (or -1) names no dimension: reducing over it keeps the value
    return this.ndim === 0 ? [] : list.sort((a, b) => a - b);
  }

  #reduce(fn: ReduceOp, axis: number | readonly number[] | undefined, keepdim: boolean, call: string): Tensor {
    boolArg(call, "keepdim", keepdim);
    const axes = this.#axes(call, axis);
    const kshape = this.shape.map((d, i) => (axes.includes(i) ? 1 : d));
    // sums and products of bool, int8 and uint8 count in int32 (dtype.ts)
    const src: Tensor = (fn === "sum" || fn === "prod") && ITEMSIZE[this.dtype] === 1 ? this.cast("int32") : this;
    let r: Tensor = src;
    if (axes.length && axes.some((a) => this.shape[a] !== 1))
      r = new Tensor(new LazyNode({ op: "reduce", fn, axes }, src.dtype, kshape, [src.node]));
    return keepdim ? r : r.reshape(this.shape.filter((_, i) => !axes.includes(i)));
  }

  sum(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.#reduce("sum", axis, keepdim, "Tensor.sum");
  }
  max(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.#reduce("max", axis, keepdim, "Tensor.max");
  }
  /** The minimum (a reduction of its own: the max of -x would lose INT_MIN, whose negation is itself). */
  min(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.#reduce("min", axis, keepdim, "Tensor.min");
  }
  mean(axis?: number | readonly number[], keepdim = false): Tensor {
    boolArg("Tensor.mean", "keepdim", keepdim);
    const axes = this.#axes("Tensor.mean", axis);
    const dims = axes.map((a) => this.shape[a]!);
    const s = (isFloat(this.dtype) ? this : this.float()).sum(axes, keepdim);
    if (dims.every((d) => typeof d === "number")) {
      const n = dims.reduce<number>((p, q) => p * (q as number), 1);
      return s.mul(1 / n);
    }
    return s.div(Tensor.fromDims(dims, "float32"));
  }

  // ---- more reductions and scans (tinygrad's semantics; argmax/argmin give int32, any/all bool) --
  // NaN: argmax/argmin give the first NaN's index (numpy); sum, prod, var, logsumexp propagate it;
  // max, min, cummax and topk do not define where a NaN goes (a NaN loses to a later number).

  /** The product over `axis` (all axes by default); an empty product is 1. int32 stays int32 (wrapping). */
  prod(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.#reduce("prod", axis, keepdim, "Tensor.prod");
  }
  /** bool: true where any element over `axis` is non-zero (NaN counts); empty gives false. */
  any(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.cmpne(0).#reduce("max", axis, keepdim, "Tensor.any");
  }
  /** bool: true where every element over `axis` is non-zero (NaN counts); empty gives true. */
  all(axis?: number | readonly number[], keepdim = false): Tensor {
    return this.cmpne(0).#reduce("min", axis, keepdim, "Tensor.all");
  }

  /** The first index along `d` where int32 `mask` is non-zero (n-1 - the largest reversed index; n-1 if none). */
  #firstIndex(mask: Tensor, d: number, n: number, keepdim: boolean): Tensor {
    const rev = Tensor.arange(n - 1, -1, -1, { dtype: "int32" }).reshape([n, ...this.shape.slice(d + 1).map(() => 1)]);
    return mask.cmpne(0).mul(rev).max(d, keepdim).rsub(n - 1);
  }
  /** A numeric, non-empty reduce axis for argmax/argmin/topk. */
  #extAxis(call: string, axis: number): [number, number] {
    const d = normAxis(call, axis, this.ndim, this.shape);
    const n = this.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot search variable dimension ${d} of ${shapeStr(this.shape)}`);
    if (n === 0) invalid(call, `attempt to search an empty dimension ${d} of ${shapeStr(this.shape)}`);
    return [d, n];
  }
  #argExt(call: string, isMax: boolean, axis: number | undefined, keepdim: boolean): Tensor {
    boolArg(call, "keepdim", keepdim);
    if (axis === undefined) {
      if (this.ndim === 0) return Tensor.full([], 0, { dtype: "int32" });
      const r = this.reshape([numelNumeric(this.shape) === this.numel ? this.numel : -1]).#argExt(call, isMax, 0, false);
      return keepdim ? r.reshape(this.shape.map(() => 1)) : r;
    }
    if (typeof axis !== "number") invalid(call, `axis must be a number, got ${describeGot(axis)}`);
    if (this.ndim === 0) {
      normAxis(call, axis, 0, this.shape);
      return Tensor.full([], 0, { dtype: "int32" });
    }
    const [d, n] = this.#extAxis(call, axis);
    let mask = this.cmpeq(isMax ? this.max(d, true) : this.min(d, true));
    if (isFloat(this.dtype)) {
      const nan = this.isnan();
      mask = nan.max(d, true).where(nan, mask);
    }
    return this.#firstIndex(mask, d, n, keepdim);
  }
  /** int32 index of the first maximum along `axis` (no axis: into the flattened tensor); a NaN wins. Empty: GpuError. */
  argmax(axis?: number, keepdim = false): Tensor { return this.#argExt("Tensor.argmax", true, axis, keepdim); }
  /** int32 index of the first minimum along `axis` (no axis: into the flattened tensor); a NaN wins. Empty: GpuError. */
  argmin(axis?: number, keepdim = false): Tensor { return this.#argExt("Tensor.argmin", false, axis, keepdim); }

  /**
   * The inclusive scan of `fn` along the last axis of `x` (length m): each output reduces the
   * masked row x[j <= i], m·m work per row. Longer rows scan blocks of ~√m, then add each
   * block's carry from an exclusive scan of the block totals: about 2·m·√m work per row.
   */
  static #scanLast(x: Tensor, fn: "sum" | "prod" | "max" | "min", ident: number): Tensor {
    const m = x.shape[x.ndim - 1] as number;
    const lead = x.shape.slice(0, -1);
    if (m > 32) {
      const k = Math.ceil(Math.sqrt(m)), B = Math.ceil(m / k);
      const xp = x.pad([...lead.map(() => null), [0, B * k - m]], ident).reshape([...lead, B, k]);
      const within = Tensor.#scanLast(xp, fn, ident); // [..., B, k]
      const totals = within.shrink([...lead.map(() => null), null, [k - 1, k]]).reshape([...lead, B]);
      const incl = Tensor.#scanLast(totals, fn, ident);
      const carry = incl.pad([...lead.map(() => null), [1, 0]], ident).shrink([...lead.map(() => null), [0, B]]).unsqueeze(-1);
      const both = fn === "sum" ? within.add(carry) : fn === "prod" ? within.mul(carry) : fn === "max" ? within.maximum(carry) : within.minimum(carry);
      return both.reshape([...lead, B * k]).shrink([...lead.map(() => null), [0, m]]);
    }
    const xe = x.unsqueeze(-2).expand([...lead, m, m]);
    const tri = Tensor.arange(m, undefined, 1, { dtype: "int32" }).reshape([m, 1]).cmpge(Tensor.arange(m, undefined, 1, { dtype: "int32" }));
    return tri.where(xe, Tensor.full([], ident, { dtype: x.dtype })).#reduce(fn, -1, false, "Tensor.scan");
  }
  #scan(call: string, fn: "sum" | "prod" | "max" | "min", axis: number): Tensor {
    const d = normAxis(call, axis, this.ndim, this.shape);
    if (this.ndim === 0) return this;
    const n = this.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot scan variable dimension ${d} of ${shapeStr(this.shape)}`);
    if (n <= 1 || this.numel === 0) return this;
    const f = isFloat(this.dtype);
    const ident = fn === "sum" ? 0 : fn === "prod" ? 1 : fn === "max" ? (f ? -Infinity : (INT_RANGE[this.dtype]?.[0] ?? 0)) : f ? Infinity : (INT_RANGE[this.dtype]?.[1] ?? 1);
    const last = this.ndim - 1;
    const x = d === last ? this : this.transpose(d, last);
    const r = Tensor.#scanLast(x, fn, ident);
    return d === last ? r : r.transpose(d, last);
  }
  /** Running sum along `axis` (default 0, as tinygrad); int32 stays int32. */
  cumsum(axis = 0): Tensor { return this.#scan("Tensor.cumsum", "sum", axis); }
  /** Running product along `axis` (default 0). */
  cumprod(axis = 0): Tensor { return this.#scan("Tensor.cumprod", "prod", axis); }
  /** Running maximum along `axis` (default 0). */
  cummax(axis = 0): Tensor { return this.#scan("Tensor.cummax", "max", axis); }
  /** Running minimum along `axis` (default 0). */
  cummin(axis = 0): Tensor { return this.#scan("Tensor.cummin", "min", axis); }

  /** Variance over `axis` (all by default): Σ(x - mean)² / max(0, N - correction); float32. */
  var(axis?: number | readonly number[], keepdim = false, correction = 1): Tensor {
    const call = "Tensor.var";
    boolArg(call, "keepdim", keepdim);
    finiteNumber(call, "correction", correction);
    const axes = this.#axes(call, axis);
    const sq = this.sub(this.mean(axes, true)).square();
    const dims = axes.map((a) => this.shape[a]!);
    const s = sq.float().sum(axes, keepdim);
    if (dims.every((q) => typeof q === "number")) return s.div(Math.max(0, numelNumeric(dims) - correction));
    return s.div(Tensor.fromDims(dims, "float32").sub(correction).maximum(0));
  }
  /** Standard deviation: sqrt(var(axis, keepdim, correction)). */
  std(axis?: number | readonly number[], keepdim = false, correction = 1): Tensor {
    this.#axes("Tensor.std", axis);
    return under("Tensor.std", () => this.var(axis, keepdim, correction).sqrt());
  }
  /** log Σ exp(x) over `axis`, shifted by the maximum (an infinite maximum shifts by 0: all -inf gives -inf). */
  logsumexp(axis?: number | readonly number[], keepdim = false): Tensor {
    boolArg("Tensor.logsumexp", "keepdim", keepdim);
    this.#axes("Tensor.logsumexp", axis);
    const m = this.max(axis, true);
    const m0 = m.isinf().where(0, m).float();
    const s = this.sub(m0).exp().sum(axis, keepdim).log();
    return s.add(m0.reshape(s.shape));
  }

  /**
   * Cross entropy of logits `this` ([N, C, …] or [C]; classes on axis 1, or 0 for 1-D) against
   * int32 class indices (the shape without the class axis; an index outside [0, C) is a row of
   * zeros) or float probabilities (this shape). labelSmoothing mixes in the uniform distribution.
   */
  crossEntropy(target: Tensor, opts: { reduction?: "none" | "sum" | "mean"; labelSmoothing?: number } = {}): Tensor {
    const call = "Tensor.crossEntropy";
    tensorArg(call, "target", target);
    const o = options(call, opts, CROSS_ENTROPY_KEYS);
    const reduction = o.reduction ?? "mean";
    if (reduction !== "none" && reduction !== "sum" && reduction !== "mean") invalid(call, `reduction must be "none", "sum" or "mean", got ${describeGot(reduction)}`);
    const ls = o.labelSmoothing ?? 0;
    if (typeof ls !== "number" || !(ls >= 0 && ls <= 1)) invalid(call, `labelSmoothing must be a number in [0, 1], got ${describeGot(ls)}`);
    if (this.ndim === 0) invalid(call, "logits need at least 1 dimension");
    const ca = this.ndim === 1 ? 0 : 1;
    const C = this.shape[ca]!;
    if (typeof C !== "number") invalid(call, `the class dimension cannot be a variable (${shapeStr(this.shape)})`);
    const rest = this.shape.filter((_, i) => i !== ca);
    let Y: Tensor;
    if (target.dtype === "int32" && target.ndim === rest.length && target.shape.every((s, i) => sameDim(s, rest[i]!))) {
      const oh = target.oneHot(C);
      const order = [...Array(target.ndim).keys()];
      order.splice(ca, 0, target.ndim);
      Y = oh.permute(order).float();
    } else if (target.ndim === this.ndim && target.shape.every((s, i) => sameDim(s, this.shape[i]!))) {
      Y = target.float();
    } else {
      invalid(call, `target shape ${shapeStr(target.shape)} (${target.dtype}) fits neither class indices ${shapeStr(rest)} nor probabilities ${shapeStr(this.shape)}`);
    }
    if (ls > 0) Y = Y.mul(1 - ls).add(ls / C);
    const ret = this.logSoftmax(ca).mul(Y).sum(ca).neg();
    return reduction === "none" ? ret : reduction === "sum" ? ret.sum() : ret.mean();
  }

  /**
   * The k largest (or smallest) values along `dim` (default -1) and their int32 indices, in
   * order; equal values in index order. k passes of a masked max: meant for small k.
   */
  topk(k: number, dim = -1, largest = true): [Tensor, Tensor] {
    const call = "Tensor.topk";
    boolArg(call, "largest", largest);
    if (this.ndim === 0) invalid(call, "needs at least a 1-D tensor");
    const d = normAxis(call, dim, this.ndim, this.shape);
    const n = this.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot search variable dimension ${d} of ${shapeStr(this.shape)}`);
    if (!Number.isSafeInteger(k) || k < 0 || k > n) invalid(call, `k must be an integer in [0, ${n}], got ${describeGot(k)}`);
    const sel = this.shape.map((_, i) => (i === d ? [0, 0] as const : null));
    if (k === 0) return [this.shrink(sel), this.shrink(sel).cast("int32").mul(0)];
    const f = isFloat(this.dtype);
    const range = INT_RANGE[this.dtype] ?? [0, 0];
    const fill = largest ? (f ? -Infinity : range[0]) : f ? Infinity : range[1];
    const ar = Tensor.arange(n, undefined, 1, { dtype: "int32" }).reshape([n, ...this.shape.slice(d + 1).map(() => 1)]);
    let taken = Tensor.full([], 0, { dtype: "int32" });
    const vals: Tensor[] = [], idxs: Tensor[] = [];
    for (let i = 0; i < k; i++) {
      const cand = taken.where(fill, this);
      const m = largest ? cand.max(d, true) : cand.min(d, true);
      const idx = this.#firstIndex(cand.cmpeq(m).mul(taken.rsub(1)), d, n, true);
      vals.push(m);
      idxs.push(idx);
      taken = taken.maximum(ar.cmpeq(idx));
    }
    return [Tensor.cat(vals, d), Tensor.cat(idxs, d)];
  }

  // ---- matmul and composites ---------------------------------------------------------------------

  /** numpy matmul: [..., M, K] @ [..., K, N], batch dims broadcast, 1-D operands promoted. */
  matmul(o: Tensor): Tensor {
    const call = "Tensor.matmul";
    if (!(o instanceof Tensor)) invalid(call, "operand must be a Tensor");
    if (this.ndim === 0 || o.ndim === 0) invalid(call, `matmul needs at least 1-D operands, got ${shapeStr(this.shape)} and ${shapeStr(o.shape)}`);
    const a = this.ndim === 1 ? this.reshape([1, this.shape[0]!]) : this;
    const b = o.ndim === 1 ? o.reshape([o.shape[0]!, 1]) : o;
    const K = a.shape[a.ndim - 1]!, K2 = b.shape[b.ndim - 2]!;
    if (!sameDim(K, K2)) invalid(call, `shapes ${shapeStr(this.shape)} and ${shapeStr(o.shape)} are not aligned (${String(K)} != ${String(K2)})`);
    const M = a.shape[a.ndim - 2]!, N = b.shape[b.ndim - 1]!;
    const batch = Tensor.broadcastShapes(call, a.shape.slice(0, -2), b.shape.slice(0, -2));
    const a3 = a.reshape([...a.shape.slice(0, -1), 1, K]); // [..., M, 1, K]
    const b3 = b.transpose(-1, -2).reshape([...b.shape.slice(0, -2), 1, N, K]); // [..., 1, N, K]
    const full = [...batch, M, N, K];
    let r = a3.broadcastTo(full).mul(b3.broadcastTo(full)).sum(-1);
    if (this.ndim === 1) r = r.reshape([...r.shape.slice(0, -2), N]);
    if (o.ndim === 1) r = r.reshape(r.shape.slice(0, -1));
    return r;
  }
  dot(o: Tensor): Tensor {
    return under("Tensor.dot", () => this.matmul(o));
  }

  // ---- convolution and pooling (src/tensor/ops_conv.ts: windows as views, one fused reduce) ----

  /** torch/tinygrad conv2d: this [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], bias [Cout]. */
  conv2d(weight: Tensor, bias?: Tensor, opts: Conv2dOptions = {}): Tensor {
    const call = "Tensor.conv2d";
    return conv.conv2d<Tensor>(call, this, tensorArg(call, "weight", weight), bias === undefined ? undefined : tensorArg(call, "bias", bias), options(call, opts, CONV_KEYS));
  }
  /** torch/tinygrad conv_transpose2d: weight [Cin, Cout/groups, kh, kw], bias [Cout]. */
  convTranspose2d(weight: Tensor, bias?: Tensor, opts: ConvTranspose2dOptions = {}): Tensor {
    const call = "Tensor.convTranspose2d";
    return conv.convTranspose2d<Tensor>(call, this, tensorArg(call, "weight", weight), bias === undefined ? undefined : tensorArg(call, "bias", bias), options(call, opts, CONV_T_KEYS));
  }
  /** Max over kernelSize windows of the last two dims (stride defaults to the kernel size). */
  maxPool2d(kernelSize: number | readonly number[] = 2, opts: PoolOptions = {}): Tensor {
    return conv.maxPool2d<Tensor>("Tensor.maxPool2d", this, kernelSize, options("Tensor.maxPool2d", opts, POOL_KEYS));
  }
  /** Mean over kernelSize windows of the last two dims (padding counted unless countIncludePad is false). */
  avgPool2d(kernelSize: number | readonly number[] = 2, opts: AvgPoolOptions = {}): Tensor {
    return conv.avgPool2d<Tensor>("Tensor.avgPool2d", this, kernelSize, options("Tensor.avgPool2d", opts, AVG_POOL_KEYS));
  }
  /** Resize the last size.length dims (torch's interpolate on [N, C, ...spatial]): nearest, nearest-exact, (bi)linear. */
  interpolate(size: readonly number[], mode: InterpolateMode = "nearest", alignCorners = false): Tensor {
    return conv.interpolate<Tensor>("Tensor.interpolate", this, size, mode, alignCorners, (data, shape, dtype) => Tensor.from(data, shape, { dtype }));
  }

  // ---- attention, einsum and sort (src/tensor/ops_attention.ts: composites of matmul, softmax, views) ----

  /** torch's scaled_dot_product_attention over this query [..., L, E], key [..., S, E], value [..., S, Ev]. */
  scaledDotProductAttention(key: Tensor, value: Tensor, opts: AttentionOptions<Tensor> = {}): Tensor {
    const call = "Tensor.scaledDotProductAttention";
    const o = options(call, opts, ATTENTION_KEYS);
    return attention.scaledDotProductAttention<Tensor>(call, this, tensorArg(call, "key", key), tensorArg(call, "value", value), o, (shape, v, dtype) => Tensor.full(shape, v, { dtype }));
  }
  /** scaledDotProductAttention(q, k, v, opts) as a function. */
  static scaledDotProductAttention(query: Tensor, key: Tensor, value: Tensor, opts: AttentionOptions<Tensor> = {}): Tensor {
    return tensorArg("Tensor.scaledDotProductAttention", "query", query).scaledDotProductAttention(key, value, opts);
  }
  /** numpy/torch einsum ("bij,bjk->bik", implicit output, "...", repeated labels take the diagonal). */
  static einsum(formula: string, ...operands: Tensor[]): Tensor {
    const call = "Tensor.einsum";
    const ops = operands.length === 1 && Array.isArray(operands[0]) ? (operands[0] as unknown as Tensor[]) : operands;
    ops.forEach((t, i) => tensorArg(call, `operand ${i}`, t));
    return attention.einsum<Tensor>(call, formula, ops);
  }
  /**
   * Sort along `dim` (default -1), stable (equal values keep their order), NaN as the largest:
   * [values, int32 indices]. A rank count over [..., n, n]: meant for short rows.
   */
  sort(dim = -1, descending = false): [Tensor, Tensor] {
    const call = "Tensor.sort";
    boolArg(call, "descending", descending);
    const d = normAxis(call, dim, this.ndim, this.shape);
    return attention.sort<Tensor>(call, this, d, descending, (n) => Tensor.arange(n, undefined, 1, { dtype: "int32" }), (shape) => Tensor.zeros(shape, { dtype: "int32" }));
  }

  softmax(axis = -1): Tensor {
    this.#axes("Tensor.softmax", axis); // checked here, so a bad axis is not reported as Tensor.max's
    const m = this.max(axis, true);
    const e = this.sub(m).exp();
    return e.div(e.sum(axis, true));
  }

  logSoftmax(axis = -1): Tensor {
    this.#axes("Tensor.logSoftmax", axis);
    const m = this.max(axis, true);
    const s = this.sub(m);
    return s.sub(s.exp().sum(axis, true).log());
  }

  /** Normalize over the last `axis` (default -1): (x - mean) / sqrt(var + eps) · weight + bias. */
  layerNorm(opts: { axis?: number | readonly number[]; eps?: number; weight?: Tensor; bias?: Tensor } = {}): Tensor {
    const call = "Tensor.layerNorm";
    opts = options(call, opts, LAYER_NORM_KEYS);
    axesArg(call, opts.axis);
    if (opts.eps !== undefined) finiteNumber(call, "eps", opts.eps);
    if (opts.weight !== undefined) tensorArg(call, "weight", opts.weight);
    if (opts.bias !== undefined) tensorArg(call, "bias", opts.bias);
    const axis = opts.axis ?? -1;
    this.#axes(call, axis);
    const mean = this.mean(axis, true);
    const xc = this.sub(mean);
    const v = xc.mul(xc).mean(axis, true);
    let y = xc.mul(v.add(opts.eps ?? 1e-5).rsqrt());
    if (opts.weight) y = y.mul(opts.weight);
    if (opts.bias) y = y.add(opts.bias);
    return y;
  }

  // ---- more of tinygrad's functions (src/tensor/ops_more.ts: bitwise ops, unfold, losses, masked selection) ----

  static #make: MoreMake<Tensor> = {
    full: (shape, value, dtype) => Tensor.full(shape, value, { dtype }),
    arange: (n) => Tensor.arange(n, undefined, 1, { dtype: "int32" }),
    stack: (ts, dim) => Tensor.stack(ts, dim),
    isTensor: (v): v is Tensor => v instanceof Tensor,
  };

  /** log10(x) as tinygrad: log2(x)·log10(2). */
  log10(): Tensor { return this.log2().mul(Math.LOG10E * Math.LN2); }
  /** bool: x == 0. */
  logicalNot(): Tensor { return this.cmpeq(0); }
  /** |x| with the sign of `other` (a float -0 and a NaN's sign bit count), in the broadcast dtype. */
  copysign(other: TensorLike): Tensor {
    return under("Tensor.copysign", () => this.#copysign(other));
  }
  #copysign(other: TensorLike): Tensor {
    const o = tensorLike("Tensor.copysign", "other", other);
    const t = typeof o === "number" ? Tensor.full([], o, { dtype: "float32" }) : o;
    const neg = isFloat(t.dtype) ? t.float().bitcast("int32").cmplt(0) : t.cmplt(0);
    const a = this.abs();
    return neg.where(a.neg(), a).cast(promoteTypes(this.dtype, typeof o === "number" ? scalarDType(this.dtype, o) : o.dtype));
  }
  /** log(exp(x) + exp(y)), as logsumexp over the pair. */
  logaddexp(other: TensorLike): Tensor {
    const o = tensorLike("Tensor.logaddexp", "other", other);
    const shape = Tensor.broadcastShapes("Tensor.logaddexp", this.shape, typeof o === "number" ? [] : o.shape);
    const b = typeof o === "number" ? this.mul(0).add(o) : o;
    return Tensor.stack([this.broadcastTo(shape).float(), b.broadcastTo(shape).float()]).logsumexp(0);
  }
  /** Bitwise and of integer (or bool) tensors; a number is a weak scalar. Bit arithmetic: n ops per bit of the dtype. */
  bitwiseAnd(other: TensorLike): Tensor { return more.bitwise<Tensor>("Tensor.bitwiseAnd", "and", this, other, Tensor.#make); }
  /** Bitwise or of integer (or bool) tensors. */
  bitwiseOr(other: TensorLike): Tensor { return more.bitwise<Tensor>("Tensor.bitwiseOr", "or", this, other, Tensor.#make); }
  /** Bitwise xor of integer (or bool) tensors. */
  bitwiseXor(other: TensorLike): Tensor { return more.bitwise<Tensor>("Tensor.bitwiseXor", "xor", this, other, Tensor.#make); }
  /** tinygrad's xor: bitwiseXor. */
  xor(other: TensorLike): Tensor { return more.bitwise<Tensor>("Tensor.xor", "xor", this, other, Tensor.#make); }
  /** ~x: -1 - x for signed integers, 255 - x for uint8, logicalNot for bool. */
  bitwiseNot(): Tensor { return more.bitwiseNot<Tensor>("Tensor.bitwiseNot", this); }
  /** x << bits (a non-negative integer), wrapping at the dtype's width; integer dtypes only. */
  lshift(bits: number): Tensor { return more.lshift<Tensor>("Tensor.lshift", this, bits); }
  /** x >> bits, arithmetic (rounds toward -inf); integer dtypes only. */
  rshift(bits: number): Tensor { return more.rshift<Tensor>("Tensor.rshift", this, bits); }
  /** softmax(-x) over `axis`. */
  softmin(axis = -1): Tensor {
    this.#axes("Tensor.softmin", axis);
    return this.neg().softmax(axis);
  }
  /** A tensor whose contents are unspecified (tinygrad's empty; here zeros, lazily). */
  static empty(shape: Shape, opts: { dtype?: DType } = {}): Tensor {
    checkShapeDims("Tensor.empty", shape);
    return Tensor.full(shape, 0, { dtype: dtypeOf("Tensor.empty", options("Tensor.empty", opts, DTYPE_KEYS).dtype) ?? "float32" });
  }
  /** Windows of `size` along `dim`, `step` apart: dim becomes the window count, a new last axis the window. */
  unfold(dim: number, size: number, step: number): Tensor {
    return more.unfold<Tensor>("Tensor.unfold", this, normAxis("Tensor.unfold", dim, this.ndim, this.shape), size, step, Tensor.#make);
  }
  /** The coordinate grids of 1-D tensors ("ij": tensor i varies along axis i; "xy" swaps the first two). */
  static meshgrid(tensors: readonly Tensor[], indexing: "ij" | "xy" = "ij"): Tensor[] {
    const call = "Tensor.meshgrid";
    if (!Array.isArray(tensors) || !tensors.length) invalid(call, `tensors must be a non-empty array of Tensors, got ${describeGot(tensors)}`);
    tensors.forEach((t, i) => tensorArg(call, `tensors[${i}]`, t));
    return more.meshgrid<Tensor>(call, tensors, indexing);
  }
  /** log Σ_{j<=i} exp(x_j) along `axis` (default 0), stable; [..., n, n] work per row. */
  logcumsumexp(axis = 0): Tensor {
    return more.logcumsumexp<Tensor>("Tensor.logcumsumexp", this, normAxis("Tensor.logcumsumexp", axis, this.ndim, this.shape), Tensor.#make);
  }
  /** [std, mean] over `axis` (std with `correction`). */
  stdMean(axis?: number | readonly number[], keepdim = false, correction = 1): [Tensor, Tensor] {
    return under("Tensor.stdMean", () => [this.std(axis, keepdim, correction), this.mean(axis, keepdim)]);
  }
  /** int32 indices that sort along `dim` (sort's, stable). */
  argsort(dim = -1, descending = false): Tensor {
    boolArg("Tensor.argsort", "descending", descending);
    normAxis("Tensor.argsort", dim, this.ndim, this.shape);
    return this.sort(dim, descending)[1];
  }
  /** bool: |x - other| <= atol + rtol·|other| for finite values, equal infinities, and NaNs when equalNan. */
  isclose(other: TensorLike, opts: { rtol?: number; atol?: number; equalNan?: boolean } = {}): Tensor {
    const call = "Tensor.isclose";
    const o = tensorLike(call, "other", other);
    const { rtol = 1e-5, atol = 1e-8, equalNan = false } = options(call, opts, ISCLOSE_KEYS);
    finiteNumber(call, "rtol", rtol);
    finiteNumber(call, "atol", atol);
    boolArg(call, "equalNan", equalNan);
    return under(call, () => {
      const t = typeof o === "number" ? this.mul(0).add(o) : o;
      const finite = this.isfinite().mul(t.isfinite()).mul(this.sub(t).abs().cmple(t.abs().mul(rtol).add(atol)));
      const inf = this.isinf().maximum(t.isinf()).mul(this.cmpeq(t));
      const r = finite.maximum(inf);
      return (equalNan ? r.maximum(this.isnan().mul(t.isnan())) : r).cast("bool");
    });
  }
  /** Each element repeated `repeats` times along `dim` (no dim: the flattened tensor). */
  repeatInterleave(repeats: number, dim?: number): Tensor {
    const call = "Tensor.repeatInterleave";
    if (!Number.isSafeInteger(repeats) || repeats < 0) invalid(call, `repeats must be a non-negative integer, got ${describeGot(repeats)}`);
    const x = dim === undefined ? this.flatten() : this;
    const d = normAxis(call, dim ?? 0, x.ndim, x.shape);
    if (x.ndim === 0) return x.reshape([1]).repeatInterleave(repeats, 0);
    const n = x.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot repeat variable dimension ${d} of ${shapeStr(x.shape)}`);
    const pre = x.shape.slice(0, d + 1), post = x.shape.slice(d + 1);
    return x.reshape([...pre, 1, ...post]).expand([...pre, repeats, ...post]).reshape([...x.shape.slice(0, d), n * repeats, ...post]);
  }
  /** Axis `dim` split into `sizes` (one may be -1). */
  unflatten(dim: number, sizes: readonly number[]): Tensor {
    const call = "Tensor.unflatten";
    const d = normAxis(call, dim, this.ndim, this.shape);
    if (!Array.isArray(sizes) || !sizes.length) invalid(call, `sizes must be a non-empty array of integers, got ${describeGot(sizes)}`);
    if (!this.ndim) invalid(call, "cannot unflatten a 0-d tensor");
    const n = this.shape[d]!;
    if (typeof n !== "number") invalid(call, `cannot unflatten variable dimension ${d} of ${shapeStr(this.shape)}`);
    const known = sizes.filter((s) => s !== -1);
    if (sizes.some((s) => !Number.isSafeInteger(s) || s < -1) || sizes.length - known.length > 1) invalid(call, `sizes [${sizes.map((s) => describeValue(s)).join(", ")}] must be non-negative integers with at most one -1`);
    const k = known.reduce((p, q) => p * q, 1);
    if (known.length === sizes.length ? k !== n : k === 0 || n % k) invalid(call, `sizes [${sizes.join(", ")}] do not fit dimension ${d} of ${shapeStr(this.shape)}`);
    return this.reshape([...this.shape.slice(0, d), ...sizes.map((s) => (s === -1 ? n / k : s)), ...this.shape.slice(d + 1)]);
  }
  /** A 1-D tensor as the diagonal of a square matrix. */
  diag(): Tensor { return more.diag<Tensor>("Tensor.diag", this, Tensor.#make); }
  /** The diagonal `offset` from the main one of axes dim1, dim2 (torch's diagonal), as a new last axis. */
  diagonal(offset = 0, dim1 = 0, dim2 = 1): Tensor {
    const call = "Tensor.diagonal";
    return more.diagonal<Tensor>(call, this, offset, normAxis(call, dim1, this.ndim, this.shape), normAxis(call, dim2, this.ndim, this.shape), Tensor.#make);
  }
  /** x / max(‖x‖_p over `dim`, eps) (torch's normalize; p = Infinity: the max norm). */
  normalize(p = 2, dim = 1, eps = 1e-12): Tensor {
    return more.normalize<Tensor>("Tensor.normalize", this, p, normAxis("Tensor.normalize", dim, this.ndim, this.shape), eps);
  }
  /** -Y·log(x) - (1-Y)·log(1-x) of probabilities x (tinygrad: no clamping), reduced. */
  binaryCrossentropy(Y: Tensor, reduction: "none" | "sum" | "mean" = "mean"): Tensor {
    const call = "Tensor.binaryCrossentropy";
    const y = tensorArg(call, "Y", Y);
    Tensor.broadcastShapes(call, this.shape, y.shape);
    return more.binaryCrossentropy<Tensor>(this, y, more.reductionArg(call, reduction));
  }
  /** Cross entropy of logits [..., C] against int32 classes [...] (ignoreIndex default -1, skipped and not counted by "mean"). */
  sparseCategoricalCrossentropy(Y: Tensor, opts: { ignoreIndex?: number; labelSmoothing?: number; reduction?: "none" | "sum" | "mean" } = {}): Tensor {
    const call = "Tensor.sparseCategoricalCrossentropy";
    const y = tensorArg(call, "Y", Y);
    const o = options(call, opts, SPARSE_CE_KEYS);
    const ls = o.labelSmoothing ?? 0;
    if (typeof ls !== "number" || !(ls >= 0 && ls <= 1)) invalid(call, `labelSmoothing must be a number in [0, 1], got ${describeGot(ls)}`);
    if (o.ignoreIndex !== undefined && !Number.isSafeInteger(o.ignoreIndex)) invalid(call, `ignoreIndex must be an integer, got ${describeGot(o.ignoreIndex)}`);
    return more.sparseCategoricalCrossentropy<Tensor>(call, this, y, o.ignoreIndex ?? -1, ls, more.reductionArg(call, o.reduction), Tensor.#make);
  }
  /** Negative log likelihood of log-probabilities [N, C, ...] against int32 classes [N, ...], with class weights and ignoreIndex. */
  nllLoss(Y: Tensor, opts: { weight?: Tensor; ignoreIndex?: number; reduction?: "none" | "sum" | "mean" } = {}): Tensor {
    const call = "Tensor.nllLoss";
    const y = tensorArg(call, "Y", Y);
    const o = options(call, opts, NLL_KEYS);
    if (o.weight !== undefined) tensorArg(call, "weight", o.weight);
    if (o.ignoreIndex !== undefined && !Number.isSafeInteger(o.ignoreIndex)) invalid(call, `ignoreIndex must be an integer, got ${describeGot(o.ignoreIndex)}`);
    return more.nllLoss<Tensor>(call, this, y, o.weight, o.ignoreIndex, more.reductionArg(call, o.reduction), Tensor.#make);
  }
  /**
   * The elements where `mask` (broadcast to this shape) is non-zero, flattened. The length depends
   * on the data, so it is computed now (one small plan, as tinygrad's .item()); the values stay
   * lazy. A plan prepared from the result keeps that length: when the mask is an input that
   * changes, call maskedSelect again and prepare again.
   */
  maskedSelect(mask: Tensor): Tensor { return more.maskedSelect<Tensor>("Tensor.maskedSelect", this, tensorArg("Tensor.maskedSelect", "mask", mask), Tensor.#make); }
  /** int32 [count, ndim]: the coordinates of the non-zero elements in row-major order. The count is computed now, as maskedSelect's. */
  nonzero(): Tensor { return more.nonzero<Tensor>("Tensor.nonzero", this, Tensor.#make); }
}

/** Row-major strides of a shape's max layout (exported for plan readers). */
export { maxStrides, dimMax };
