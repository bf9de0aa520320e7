// Views: how a tensor's coordinates map onto the linear index of the base it was derived from.
// A View is (shape, strides, offset, mask); the mask gives, per dimension, the range that holds
// data (outside it the value is 0: that is what pad makes). A ShapeTracker is a stack of views:
// when a reshape cannot be expressed on the last view's strides, a new view is pushed whose
// linear index is decoded into the coordinates of the one below. Every movement op is index
// arithmetic; nothing is copied here.
//
// Dimensions may be a Variable (a bound integer). Layout always uses the variable's maximum
// ("max layout"), so strides are plain numbers and a buffer allocated for the maximum holds any
// value; only loop bounds change with the variable.
import { describeGot, describeValue, invalid } from "../errors";
import { Sym, Valid } from "./symbolic";
import { Variable, type Dim, dimMax, shapeStr } from "./variable";

export type Mask = readonly (readonly [number, number] | null)[];

export interface View {
  readonly shape: readonly Dim[];
  readonly strides: readonly number[];
  readonly offset: number;
  readonly mask: Mask | null;
}

/** Row-major strides of the max layout of `shape` (size-1 dims get stride 0). */
export function maxStrides(shape: readonly Dim[]): number[] {
  const out = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    const n = dimMax(shape[i]!);
    out[i] = n === 1 ? 0 : acc;
    acc *= n;
  }
  return out;
}

export function maxNumel(shape: readonly Dim[]): number {
  let n = 1;
  for (const d of shape) n *= dimMax(d);
  return n;
}

function canonStrides(shape: readonly Dim[], strides: readonly number[]): number[] {
  return strides.map((s, i) => (shape[i] === 1 ? 0 : s));
}

export function contiguousView(shape: readonly Dim[]): View {
  return { shape: [...shape], strides: maxStrides(shape), offset: 0, mask: null };
}

export function viewIsContiguous(v: View): boolean {
  if (v.offset !== 0 || v.mask) return false;
  const cs = maxStrides(v.shape);
  return v.strides.every((s, i) => s === cs[i]);
}

/** Linear max-layout index of coordinates `cs` in `shape`. */
export function linearIndex(cs: readonly Sym[], shape: readonly Dim[]): Sym {
  const st = maxStrides(shape);
  let idx = Sym.const(0);
  for (let i = 0; i < cs.length; i++) idx = idx.add(cs[i]!.mul(st[i]!));
  return idx;
}

/** Coordinates in `shape` (max layout) of linear index `idx`. */
export function decodeIndex(idx: Sym, shape: readonly Dim[]): Sym[] {
  const st = maxStrides(shape);
  return shape.map((d, i) => {
    const n = dimMax(d);
    if (n === 1) return Sym.const(0);
    const q = idx.div(st[i]!);
    return i === 0 ? q : q.mod(n);
  });
}

function sameDim(a: Dim, b: Dim): boolean {
  return a === b || (a instanceof Variable && b instanceof Variable && a.name === b.name);
}

export class ShapeTracker {
  readonly views: readonly View[];
  constructor(views: readonly View[]) {
    this.views = views;
  }

  static contiguous(shape: readonly Dim[]): ShapeTracker {
    return new ShapeTracker([contiguousView(shape)]);
  }

  get view(): View {
    return this.views[this.views.length - 1]!;
  }
  get shape(): readonly Dim[] {
    return this.view.shape;
  }

  /** One contiguous view: the tracker only relabels the base's shape. */
  get contiguous(): boolean {
    return this.views.length === 1 && viewIsContiguous(this.views[0]!);
  }

  /** Same element order as the base (only size-1 dims differ or a plain reshape). */
  get key(): string {
    return this.views
      .map((v) => `${shapeStr(v.shape)}s${v.strides.join(",")}o${v.offset}m${v.mask ? JSON.stringify(v.mask) : ""}`)
      .join("|");
  }

  /** Index into the base's max layout and validity, for coordinates `cs` of this tracker's shape. */
  expr(cs: readonly Sym[]): { idx: Sym; valid: Valid } {
    let coords = cs;
    let valid = Valid.always;
    let idx = Sym.const(0);
    for (let vi = this.views.length - 1; vi >= 0; vi--) {
      const v = this.views[vi]!;
      if (v.mask)
        v.mask.forEach((m, i) => {
          if (m) valid = valid.and(coords[i]!, m[0], m[1]);
        });
      idx = Sym.const(v.offset);
      for (let i = 0; i < coords.length; i++) idx = idx.add(coords[i]!.mul(v.strides[i]!));
      if (vi > 0) coords = decodeIndex(idx, this.views[vi - 1]!.shape);
    }
    return { idx, valid };
  }

  #replace(v: View): ShapeTracker {
    return new ShapeTracker([...this.views.slice(0, -1), { ...v, strides: canonStrides(v.shape, v.strides) }]);
  }

  permute(order: readonly number[]): ShapeTracker {
    const v = this.view;
    return this.#replace({
      shape: order.map((i) => v.shape[i]!),
      strides: order.map((i) => v.strides[i]!),
      offset: v.offset,
      mask: v.mask ? order.map((i) => v.mask![i]!) : null,
    });
  }

  expand(shape: readonly Dim[]): ShapeTracker {
    const v = this.view;
    return this.#replace({
      shape: [...shape],
      strides: v.strides.map((s, i) => (v.shape[i] === 1 && shape[i] !== 1 ? 0 : s)),
      offset: v.offset,
      mask: v.mask
        ? v.mask.map((m, i) => {
            if (!m || v.shape[i] !== 1 || shape[i] === 1) return m;
            return m[1] > m[0] ? null : ([0, 0] as const);
          })
        : null,
    });
  }

  /** arg[i] = [lo, hi): hi may be a Variable when lo is 0. */
  shrink(arg: readonly (readonly [number, Dim])[]): ShapeTracker {
    const v = this.view;
    let offset = v.offset;
    const shape: Dim[] = [];
    const mask: ([number, number] | null)[] = [];
    let anyMask = false;
    arg.forEach(([lo, hi], i) => {
      offset += lo * v.strides[i]!;
      const n = typeof hi === "number" ? hi - lo : hi;
      shape.push(n);
      const m = v.mask?.[i];
      if (m) {
        const nm: [number, number] = [Math.max(m[0] - lo, 0), Math.min(m[1] - lo, dimMax(n))];
        if (nm[1] < nm[0]) nm[1] = nm[0];
        if (nm[0] === 0 && nm[1] === dimMax(n)) mask.push(null);
        else {
          mask.push(nm);
          anyMask = true;
        }
      } else mask.push(null);
    });
    return this.#replace({ shape, strides: v.strides, offset, mask: anyMask ? mask : null });
  }

  pad(arg: readonly (readonly [number, number])[]): ShapeTracker {
    const v = this.view;
    let offset = v.offset;
    const shape: Dim[] = [];
    const mask: ([number, number] | null)[] = [];
    let anyMask = false;
    arg.forEach(([b, a], i) => {
      const d = v.shape[i]!;
      if (b === 0 && a === 0) {
        shape.push(d);
        const m0 = v.mask?.[i];
        mask.push(m0 ? [m0[0], m0[1]] : null);
        if (m0) anyMask = true;
        return;
      }
      const n = d as number;
      offset -= b * v.strides[i]!;
      shape.push(n + b + a);
      const m = v.mask?.[i] ?? [0, n];
      mask.push([m[0] + b, m[1] + b]);
      anyMask = true;
    });
    return this.#replace({ shape, strides: v.strides, offset, mask: anyMask ? mask : null });
  }

  flip(axes: readonly number[]): ShapeTracker {
    const v = this.view;
    const strides = [...v.strides];
    let offset = v.offset;
    const mask = v.mask ? [...v.mask] : null;
    for (const i of axes) {
      const n = v.shape[i] as number;
      offset += (n - 1) * strides[i]!;
      strides[i] = -strides[i]!;
      const m = mask?.[i];
      if (mask && m) mask[i] = [n - m[1], n - m[0]];
    }
    return this.#replace({ shape: v.shape, strides, offset, mask });
  }

  /** Every steps[i]-th element of dim i from its start (steps > 0): a dim of n keeps ceil(n / step). */
  stride(steps: readonly number[]): ShapeTracker {
    const v = this.view;
    const shape = v.shape.map((d, i) => (steps[i] === 1 ? d : Math.ceil((d as number) / steps[i]!)));
    let anyMask = false;
    const mask = v.mask
      ? v.mask.map((m, i): readonly [number, number] | null => {
          if (!m) return null;
          const s = steps[i]!;
          const lo = Math.ceil(m[0] / s), hi = Math.max(lo, Math.ceil(m[1] / s));
          if (lo === 0 && hi === dimMax(shape[i]!)) return null;
          anyMask = true;
          return [lo, hi];
        })
      : null;
    return this.#replace({ shape, strides: v.strides.map((s, i) => s * steps[i]!), offset: v.offset, mask: anyMask ? mask : null });
  }

  reshape(shape: readonly Dim[]): ShapeTracker {
    const v = this.view;
    if (v.shape.length === shape.length && v.shape.every((d, i) => sameDim(d, shape[i]!))) return this;
    // A mask survives only a reshape that adds or removes size-1 dims.
    const strided = reshapeStrides(v, shape);
    if (strided) return this.#replace(strided);
    return new ShapeTracker([...this.views, contiguousView(shape)]);
  }
}

/** The view of `v` reshaped to `shape` without a new view, or null when strides cannot express it. */
function reshapeStrides(v: View, shape: readonly Dim[]): View | null {
  // Drop size-1 dims, remembering masks on them (a masked-out size-1 dim is an empty tensor).
  const old: { d: Dim; s: number; m: readonly [number, number] | null }[] = [];
  let emptyMask = false;
  v.shape.forEach((d, i) => {
    const m = v.mask?.[i] ?? null;
    if (d === 1) {
      if (m && m[1] <= m[0]) emptyMask = true;
      return;
    }
    old.push({ d, s: v.strides[i]!, m: m ? [m[0], m[1]] : null });
  });
  const nw = shape.map((d, i) => ({ d, i })).filter((x) => x.d !== 1);
  const strides = new Array<number>(shape.length).fill(0);
  const mask: ([number, number] | null)[] = shape.map((d) => (emptyMask && d === 1 ? [0, 0] : null));
  let hasMask = emptyMask;
  let oi = 0, ni = 0;
  while (oi < old.length && ni < nw.length) {
    const o = old[oi]!, n = nw[ni]!;
    if (o.d instanceof Variable || n.d instanceof Variable) {
      if (!sameDim(o.d, n.d)) return null;
      strides[n.i] = o.s;
      if (o.m) {
        mask[n.i] = [o.m[0], o.m[1]];
        hasMask = true;
      }
      oi++;
      ni++;
      continue;
    }
    // Group old dims [oi, oj) and new dims [ni, nj) with equal numeric products.
    let op = o.d as number, np = n.d as number;
    let oj = oi + 1, nj = ni + 1;
    while (op !== np) {
      if (op < np) {
        const nx = old[oj];
        if (!nx || nx.d instanceof Variable) return null;
        op *= nx.d as number;
        oj++;
      } else {
        const nx = nw[nj];
        if (!nx || nx.d instanceof Variable) return null;
        np *= nx.d as number;
        nj++;
      }
    }
    const group = old.slice(oi, oj);
    if (group.length === 1 && nj - ni === 1) {
      strides[n.i] = o.s;
      if (o.m) {
        mask[n.i] = [o.m[0], o.m[1]];
        hasMask = true;
      }
    } else {
      if (group.some((g) => g.m)) return null;
      for (let k = 0; k + 1 < group.length; k++)
        if (group[k]!.s !== (group[k + 1]!.d as number) * group[k + 1]!.s) return null;
      let s = group[group.length - 1]!.s;
      for (let k = nj - 1; k >= ni; k--) {
        strides[nw[k]!.i] = s;
        s *= nw[k]!.d as number;
      }
    }
    oi = oj;
    ni = nj;
  }
  if (oi !== old.length || ni !== nw.length) return null;
  return { shape: [...shape], strides, offset: v.offset, mask: hasMask ? mask : null };
}

/** Most elements a shape may hold (at the variables' maxima): 2^50, so bytes stay exact numbers. */
export const MAX_ELEMENTS = 2 ** 50;

/** A shape: an array of non-negative integer dims and Variables, at most MAX_ELEMENTS in all. */
export function checkShapeDims(call: string, shape: readonly Dim[]): void {
  if (!Array.isArray(shape)) invalid(call, `shape must be an array of dimensions, got ${describeGot(shape)}`);
  let n = 1;
  for (const d of shape) {
    if (d instanceof Variable) {
      n *= d.max;
      continue;
    }
    if (typeof d !== "number" || !Number.isSafeInteger(d) || d < 0)
      invalid(call, `bad dimension ${describeValue(d)} in shape [${shape.map((x) => (x instanceof Variable ? x.name : describeValue(x))).join(", ")}]`);
    n *= d;
  }
  if (n > MAX_ELEMENTS) invalid(call, `shape ${shapeStr(shape)} holds ${n} elements, more than the ${MAX_ELEMENTS} any tensor may`);
}
