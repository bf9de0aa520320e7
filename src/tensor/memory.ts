// The allocate stage of prepare(): a plan's buffers (inputs, then one per kernel target), the
// memory plan that places intermediates whose lifetimes do not overlap in one shared arena, and
// the device allocations themselves; and reading a value back out of its buffer.
import type { Buffer } from "../buffer";
import type { Device } from "../device";
import { hostArray } from "../errors";
import type { DType, LazyNode, ValueShape } from "./ast";
import { ITEMSIZE, hostArray as dtypeArray, hostView, type HostArray } from "./dtype";
import type { Scheduled } from "./scheduler";
import { dimMax, dimValue } from "./variable";
import { maxNumel, maxStrides } from "./view";
import { acquireConstant, releaseConstant } from "./constants";

export interface PlanBuffer {
  readonly index: number;
  readonly kind: "input" | "output" | "intermediate";
  readonly dtype: DType;
  readonly astId: number;
  readonly elements: number;
  readonly bytes: number;
  /** Arena offset (intermediates). */
  readonly offset: number;
  /** Kernel index range [first, last] during which the buffer holds a live value. */
  readonly lifetime: readonly [number, number];
}

/** A plan's buffers and their placement. */
export interface BufferLayout {
  readonly bufs: PlanBuffer[];
  /** Buffer index of each realized node. */
  readonly nodeToBuf: Map<LazyNode, number>;
  /** Bytes of the intermediates' arena (0 without memory planning). */
  readonly arenaBytes: number;
  /** Index of the first intermediate buffer, -1 when there is none. */
  readonly firstIntermediate: number;
}

const ALIGN = 256;

/** Greedy offset assignment: largest first, lowest offset free over its lifetime. */
export function planArena(items: { bytes: number; life: readonly [number, number] }[]): { offsets: number[]; size: number } {
  const order = items.map((_, i) => i).sort((a, b) => items[b]!.bytes - items[a]!.bytes || a - b);
  const placed: { off: number; end: number; life: readonly [number, number] }[] = [];
  const offsets = new Array<number>(items.length).fill(0);
  let size = 0;
  for (const i of order) {
    const it = items[i]!;
    const conflicts = placed
      .filter((p) => p.life[0] <= it.life[1] && it.life[0] <= p.life[1])
      .sort((a, b) => a.off - b.off);
    let off = 0;
    for (const c of conflicts) {
      if (off + it.bytes <= c.off) break;
      off = Math.max(off, Math.ceil(c.end / ALIGN) * ALIGN);
    }
    offsets[i] = off;
    placed.push({ off, end: off + it.bytes, life: it.life });
    size = Math.max(size, off + it.bytes);
  }
  return { offsets, size: Math.ceil(size / ALIGN) * ALIGN };
}

/** Buffers of a schedule: inputs, then kernel targets in order; intermediates placed in the arena. */
export function layoutBuffers(sched: Scheduled, noPlanning: boolean): BufferLayout {
  const bufs: PlanBuffer[] = [];
  const nodeToBuf = new Map<LazyNode, number>();
  const outSet = new Set(sched.outputs);
  const lastUse = new Map<LazyNode, number>();
  sched.kernels.forEach((k, ki) => k.inputs.forEach((n) => lastUse.set(n, ki)));
  const addBuf = (n: LazyNode, kind: PlanBuffer["kind"], first: number) => {
    const elements = maxNumel(n.shape);
    const b: PlanBuffer = {
      index: bufs.length,
      kind,
      dtype: n.dtype,
      astId: n.id,
      elements,
      bytes: elements * ITEMSIZE[n.dtype],
      offset: 0,
      lifetime: [first, Math.max(first, lastUse.get(n) ?? first)],
    };
    nodeToBuf.set(n, b.index);
    bufs.push(b);
  };
  for (const n of sched.inputs) addBuf(n, "input", 0);
  sched.kernels.forEach((k, ki) => addBuf(k.target, outSet.has(k.target) ? "output" : "intermediate", ki));
  const inter = bufs.filter((b) => b.kind === "intermediate");
  let arenaBytes = 0;
  if (!noPlanning && inter.length) {
    const { offsets, size } = planArena(inter.map((b) => ({ bytes: b.bytes, life: b.lifetime })));
    inter.forEach((b, i) => ((b as { offset: number }).offset = offsets[i]!));
    arenaBytes = size;
  }
  return { bufs, nodeToBuf, arenaBytes, firstIntermediate: inter.length ? inter[0]!.index : -1 };
}

/**
 * Allocate the inputs (uploading `inputData`, by input index) and outputs into `mem`, then the
 * intermediates. On failure whatever was allocated is left in `mem` for the caller to free.
 */
export function allocateBuffers(
  device: Device,
  layout: BufferLayout,
  inputData: readonly HostArray[],
  mem: (Buffer | null)[],
  noPlanning: boolean,
  constant: readonly boolean[] = [],
): Buffer | null {
  for (const b of layout.bufs) {
    if (b.kind === "intermediate") continue;
    if (b.kind === "input" && constant[b.index]) {
      mem[b.index] = acquireConstant(device, inputData[b.index]!, b.bytes); // shared with other plans
      continue;
    }
    const buf = device.alloc(Math.max(b.bytes, 4));
    mem[b.index] = buf;
    if (b.kind === "input") buf.write(inputData[b.index]!);
  }
  return allocateIntermediates(device, layout, mem, noPlanning);
}

/** Free a plan's buffer `i` (a constant is given back to the plans that share it). */
export function releaseBuffer(mem: (Buffer | null)[], i: number, constant: readonly boolean[]): void {
  const m = mem[i];
  mem[i] = null;
  if (!m || m.isView) return;
  if (constant[i]) releaseConstant(m);
  else m.dispose();
}

/**
 * A plan's arena comes from the device's default memory pool (stream-ordered on the default
 * stream, then that stream is synchronised once so any stream may use it at once): a plan
 * disposed and another prepared reuse the pool's memory without a driver allocation, and
 * `device.defaultPool.stats` counts what plans hold. While a capture is open on the device an
 * allocation could become graph memory, so the arena is then a plain allocation. Freed when the
 * plan releases its buffers (idle by then), in the default stream's order.
 */
function arenaAlloc(device: Device, bytes: number): Buffer {
  if (device.state.captures > 0) return device.alloc(bytes);
  const s = device.defaultStream;
  const arena = s.alloc(bytes);
  try {
    s.synchronize();
  } catch (e) {
    arena.dispose();
    throw e;
  }
  return arena;
}

/** Allocate the intermediates into `mem`: views of one arena (returned), or one buffer each. */
export function allocateIntermediates(device: Device, layout: BufferLayout, mem: (Buffer | null)[], noPlanning: boolean): Buffer | null {
  const inter = layout.bufs.filter((b) => b.kind === "intermediate");
  if (!inter.length) return null;
  if (noPlanning) {
    for (const b of inter) mem[b.index] = device.alloc(Math.max(b.bytes, 4));
    return null;
  }
  const arena = arenaAlloc(device, Math.max(layout.arenaBytes, 4));
  try {
    for (const b of inter) mem[b.index] = arena.view(b.offset, Math.max(b.bytes, 0));
  } catch (e) {
    arena.dispose();
    throw e;
  }
  return arena;
}

/**
 * The leading bytes of `node`'s buffer that hold its value under `vals`: the whole value when it is
 * one contiguous run from the start (every dimension at its maximum, or only the leading one
 * short, as a prompt's rows), else the whole buffer (laid out for the maxima).
 */
export function valueBytes(node: ValueShape, vals: ReadonlyMap<string, number>): number {
  const v = valueRuns(node, vals);
  return (v.run === v.numel ? v.numel : v.max) * ITEMSIZE[node.dtype];
}

/**
 * How `node`'s value under `vals` lies in its buffer, which is laid out for the maxima: below the
 * innermost dimension short of its maximum (j), each index of the dimensions above it is one
 * contiguous run of `run` elements at strides `st`. run === numel: the value is one prefix.
 */
function valueRuns(node: ValueShape, vals: ReadonlyMap<string, number>): { shape: number[]; numel: number; max: number; st: number[]; j: number; run: number } {
  const shape = node.shape.map((d) => dimValue(d, vals));
  const numel = shape.reduce((p, q) => p * q, 1);
  const max = maxNumel(node.shape);
  if (numel === max) return { shape, numel, max, st: [], j: 0, run: numel };
  const st = maxStrides(node.shape);
  let j = shape.length - 1;
  while (j > 0 && shape[j] === dimMax(node.shape[j]!)) j--;
  return { shape, numel, max, st, j, run: shape[j]! * st[j]! };
}

/**
 * Read `node`'s value in its actual shape under `vals` from its buffer, or from `src` bytes that
 * hold the buffer's leading valueBytes() (a run's staged copy): a fresh array of its dtype.
 */
export function readValue(call: string, src: Buffer | Uint8Array, node: ValueShape, vals: ReadonlyMap<string, number>): HostArray {
  const size = ITEMSIZE[node.dtype];
  if (src instanceof Uint8Array && node.shape.every((d) => typeof d === "number")) {
    // a fixed shape from host memory (a run's hot path): one fresh array, one copy
    const n = maxNumel(node.shape);
    return hostArray(call, n * size, () => (hostView(node.dtype, src.buffer as ArrayBuffer, src.byteOffset, n) as Float32Array).slice() as HostArray);
  }
  const make = (n: number): HostArray => hostArray(call, n * size, () => dtypeArray(node.dtype, n));
  const readInto = (a: HostArray): HostArray => {
    const dst = new Uint8Array(a.buffer, 0, a.byteLength);
    if (src instanceof Uint8Array) dst.set(src.subarray(0, a.byteLength));
    else src.read(dst);
    return a;
  };
  // One run (the whole value, or only the leading dimension short, as a prompt's rows): read just
  // that prefix; else read the whole buffer and copy the runs out of it.
  const { shape, numel, max, st, j, run } = valueRuns(node, vals);
  if (run === numel) return readInto(make(numel));
  const all = readInto(make(max)) as Int32Array;
  const out = make(numel) as Int32Array;
  const idx = new Array<number>(j).fill(0);
  for (let o = 0; o < numel; o += run) {
    let off = 0;
    for (let d = 0; d < j; d++) off += idx[d]! * st[d]!;
    out.set(all.subarray(off, off + run), o);
    for (let d = j - 1; d >= 0; d--) {
      if (++idx[d]! < shape[d]!) break;
      idx[d] = 0;
    }
  }
  return out;
}
