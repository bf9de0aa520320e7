// A pure-TypeScript interpreter of the lowered kernel form: a second reference for the code
// generators and a way to test the scheduler without a device. Float32 rounding after every
// operation (Math.fround; float16 / bfloat16 rounded to their dtype after it), integer wrap-around,
// the same helpers as the generated code. Buffers are the dtypes' host arrays (dtype.ts).
import type { LazyNode } from "./ast";
import { hostArray, hostGet, hostSet, isFloat, type DefaultHostArray, type HostArray } from "./dtype";
import { evalAlu, kdimValue, randNormal, randUniform, type Expr, type KernelIR } from "./ir";
import type { Scheduled } from "./scheduler";
import { maxNumel } from "./view";

type Arr = HostArray;

export function interpretKernel(ir: KernelIR, bufs: readonly Arr[], vals: ReadonlyMap<string, number>): void {
  const dims = ir.dims.map((d) => kdimValue(d, vals));
  const rdims = ir.reduce ? ir.reduce.dims.map((d) => kdimValue(d, vals)) : [];
  const g = new Array<number>(dims.length).fill(0);
  const r = new Array<number>(rdims.length).fill(0);
  let acc = 0;
  const memo = new Map<Expr, number>();
  const ev = (e: Expr): number => {
    const m = memo.get(e);
    if (m !== undefined) return m;
    let v: number;
    switch (e.op) {
      case "const": v = e.arg === "-0" ? -0 : (e.arg as number); break;
      case "gidx": v = g[e.arg as number]!; break;
      case "ridx": v = r[e.arg as number]!; break;
      case "var": v = vals.get(e.arg as string)!; break;
      case "acc": v = acc; break;
      case "load": {
        if (e.srcs.length > 1 && ev(e.srcs[1]!) === 0) v = 0;
        else {
          const i = ev(e.srcs[0]!);
          const b = bufs[e.arg as number]!;
          if (i < 0 || i >= b.length) throw new Error(`interp: load out of bounds b${e.arg}[${i}] (length ${b.length}) in ${ir.name}`);
          v = hostGet(ir.bufs[e.arg as number]!.dtype, b, i);
        }
        break;
      }
      case "rand": v = randUniform(e.arg as number, ev(e.srcs[0]!)); break;
      case "randn": v = randNormal(e.arg as number, ev(e.srcs[0]!)); break;
      default:
        v = evalAlu(e.op, e.dtype, e.srcs.map(ev), e.srcs.map((s) => s.dtype));
    }
    memo.set(e, v);
    return v;
  };
  const total = dims.reduce((p, q) => p * q, 1);
  const rtotal = rdims.reduce((p, q) => p * q, 1);
  const out = bufs[0]!;
  for (let lin = 0; lin < total; lin++) {
    let rem = lin;
    for (let i = dims.length - 1; i >= 0; i--) {
      g[i] = rem % dims[i]!;
      rem = Math.floor(rem / dims[i]!);
    }
    if (ir.reduce) {
      const red = ir.reduce;
      const isSum = red.fn === "sum", isMin = red.fn === "min", isProd = red.fn === "prod";
      const dt = red.body.dtype;
      const f = isFloat(dt);
      const lo = { int32: -2147483648, int8: -128, uint8: 0, bool: 0, int64: -(2 ** 63) }, hi = { int32: 2147483647, int8: 127, uint8: 255, bool: 1, int64: 2 ** 63 };
      acc = isSum ? 0 : isProd ? 1 : isMin ? (f ? Infinity : hi[dt as "int32"]) : f ? -Infinity : lo[dt as "int32"];
      for (let rl = 0; rl < rtotal; rl++) {
        let rr = rl;
        for (let i = rdims.length - 1; i >= 0; i--) {
          r[i] = rr % rdims[i]!;
          rr = Math.floor(rr / rdims[i]!);
        }
        memo.clear();
        const x = ev(red.body);
        if (isSum) acc = evalAlu("add", dt, [acc, x], [dt, dt]);
        else if (isProd) acc = evalAlu("mul", dt, [acc, x], [dt, dt]);
        else if (isMin) acc = acc < x ? acc : x;
        else acc = acc > x ? acc : x;
      }
    }
    memo.clear();
    const v = ev(ir.value);
    const st = ev(ir.store);
    if (st < 0 || st >= out.length) throw new Error(`interp: store out of bounds ${st} in ${ir.name}`);
    hostSet(ir.outDtype, out, st, v);
  }
}

/**
 * Run a whole schedule in the interpreter: returns the realized arrays by node (max layout), each
 * its dtype's host array, typed as the float32 / int32 arrays (as Tensor.toArray is).
 */
export function interpretSchedule(s: Scheduled, vals: ReadonlyMap<string, number>): Map<LazyNode, DefaultHostArray> {
  const arrays = new Map<LazyNode, Arr>();
  for (const n of s.inputs) {
    const a = n.arg as { data: Arr };
    arrays.set(n, a.data);
  }
  for (const k of s.kernels) {
    const n = maxNumel(k.target.shape);
    const out = hostArray(k.target.dtype, n);
    arrays.set(k.target, out);
    interpretKernel(k.ir, [out, ...k.inputs.map((i) => arrays.get(i)!)], vals);
  }
  return arrays as Map<LazyNode, DefaultHostArray>;
}
