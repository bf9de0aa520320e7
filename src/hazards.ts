// Hazards: the one place that decides when one piece of work must wait for another.
//
// Work touches byte ranges (an allocation's base address, an offset inside it, a length). Two
// pieces of work are ordered when a later one reads what an earlier one wrote (RAW), writes what
// it read (WAR) or writes what it wrote (WAW), on overlapping bytes: never on buffer identity or
// start address alone, so views of one allocation meet and disjoint views stay independent.
// Every batching policy (schedules, encoders, compute graphs) plans from here: direct
// dependencies, barriers in one stream's list, and cross-stream event waits.
import type { Buffer } from "./buffer";

/** `bytes` bytes at `offset` inside the allocation whose base address is `base`. */
export interface ByteRange {
  readonly base: number;
  readonly offset: number;
  readonly bytes: number;
}

/** A ByteRange that also names the buffer (view) it was taken from, and its first byte's address. */
export interface BufferRange extends ByteRange {
  readonly buffer: Buffer;
  readonly address: number;
}

/** What a piece of work reads and writes. */
export interface Accesses {
  readonly reads: readonly ByteRange[];
  readonly writes: readonly ByteRange[];
}

export type Hazard = "RAW" | "WAR" | "WAW";

/** The bytes a buffer (or view) covers: its allocation's base plus its byteOffset. */
export function rangeOf(b: Buffer, offset = 0, bytes = b.byteLength - offset): ByteRange {
  return Object.freeze({ base: b.allocation.address, offset: b.byteOffset + offset, bytes });
}

/** rangeOf with the buffer and the address of its first byte kept beside it. */
export function bufferRange(b: Buffer, offset = 0, bytes = b.byteLength - offset): BufferRange {
  return Object.freeze({ base: b.allocation.address, offset: b.byteOffset + offset, bytes, buffer: b, address: b.address + offset });
}

/** True when the two ranges share at least one byte (empty ranges share none). */
export function overlaps(a: ByteRange, b: ByteRange): boolean {
  return a.base === b.base && a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

function firstOverlap(as: readonly ByteRange[], bs: readonly ByteRange[]): boolean {
  for (const a of as) for (const b of bs) if (overlaps(a, b)) return true;
  return false;
}

/** The hazard that orders `later` after `earlier` (RAW first, then WAW, then WAR), or null. */
export function hazardBetween(earlier: Accesses, later: Accesses): Hazard | null {
  if (firstOverlap(later.reads, earlier.writes)) return "RAW";
  if (firstOverlap(later.writes, earlier.writes)) return "WAW";
  if (firstOverlap(later.writes, earlier.reads)) return "WAR";
  return null;
}

/** For each item, the earlier items it has a hazard with, ascending; O(accesses per allocation). */
export function dependencies(items: readonly Accesses[]): number[][] {
  type Access = { item: number; offset: number; end: number; write: boolean };
  const byBase = new Map<number, Access[]>();
  const out: number[][] = [];
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    const deps = new Set<number>();
    const scan = (r: ByteRange, write: boolean) => {
      if (r.bytes === 0) return;
      const list = byBase.get(r.base);
      if (!list) return;
      const end = r.offset + r.bytes;
      for (const a of list) if ((write || a.write) && a.offset < end && r.offset < a.end) deps.add(a.item);
    };
    for (const r of it.reads) scan(r, false);
    for (const r of it.writes) scan(r, true);
    const push = (r: ByteRange, write: boolean) => {
      if (r.bytes === 0) return;
      let list = byBase.get(r.base);
      if (!list) byBase.set(r.base, (list = []));
      list.push({ item: i, offset: r.offset, end: r.offset + r.bytes, write });
    };
    for (const r of it.reads) push(r, false);
    for (const r of it.writes) push(r, true);
    out.push([...deps].sort((a, b) => a - b));
  }
  return out;
}

// ---- barriers in one stream's list ---------------------------------------------------------------

/** A barrier placed before item `before`, for a `hazard` against item `against`. */
export interface PlannedBarrier {
  before: number;
  hazard: Hazard;
  against: number;
}

/**
 * Where barriers go in one in-order list: before each item that reads what an item since the last
 * barrier wrote (RAW), writes what one wrote (WAW) or writes what one read (WAR). `null` items
 * (recorded barriers being replaced) are skipped.
 */
export function planBarriers(items: readonly (Accesses | null)[]): PlannedBarrier[] {
  const plan: PlannedBarrier[] = [];
  let pr: { r: ByteRange; item: number }[] = [];
  let pw: { r: ByteRange; item: number }[] = [];
  const find = (rs: readonly ByteRange[], ps: { r: ByteRange; item: number }[]): number => {
    for (const r of rs) for (const p of ps) if (overlaps(r, p.r)) return p.item;
    return -1;
  };
  for (let i = 0; i < items.length; i++) {
    const n = items[i];
    if (!n) continue;
    let found: PlannedBarrier | null = null;
    let j = find(n.reads, pw);
    if (j >= 0) found = { before: i, hazard: "RAW", against: j };
    else
      for (const w of n.writes) {
        if ((j = find([w], pw)) >= 0) found = { before: i, hazard: "WAW", against: j };
        else if ((j = find([w], pr)) >= 0) found = { before: i, hazard: "WAR", against: j };
        if (found) break;
      }
    if (found) {
      plan.push(found);
      pr = [];
      pw = [];
    }
    for (const r of n.reads) pr.push({ r, item: i });
    for (const w of n.writes) pw.push({ r: w, item: i });
  }
  return plan;
}

// ---- events between streams ----------------------------------------------------------------------

/** Where each item runs and which cross-stream waits order it; deterministic for a list of items. */
export interface StreamPlan {
  /** The stream index of each item. */
  readonly stream: readonly number[];
  /** For each item, the earlier items (on other streams) whose completion event its stream waits on first. */
  readonly waits: readonly (readonly number[])[];
  /** Direct hazards of each item (see dependencies). */
  readonly deps: readonly (readonly number[])[];
  /** Cross-stream waits per run between items (not counting a per-run fork and join). */
  readonly eventCount: number;
  /** Streams that hold at least one item. */
  readonly usedStreams: readonly number[];
}

/** Every item on stream 0, in order: no events. */
export function singleStreamPlan(items: readonly Accesses[]): StreamPlan {
  return Object.freeze({
    stream: items.map(() => 0),
    waits: items.map(() => []),
    deps: dependencies(items),
    eventCount: 0,
    usedStreams: items.length ? [0] : [],
  });
}

/**
 * Items whose stream is given (`stream[i]`, below `n`): a schedule over several devices, one
 * stream each. The waits are planned as planStreams plans them (the latest dependency on each
 * other stream, unless already implied); they become cross-device event waits.
 */
export function planFixedStreams(items: readonly Accesses[], stream: readonly number[], n: number): StreamPlan {
  return planStreams(items, n, stream);
}

/**
 * Assign items to `n` streams (or to the streams `fixed` gives). An item goes to the stream of its latest dependency when that
 * stream's last item is already an ancestor of it (no independent work would queue in front);
 * else to another such free stream (an empty one, or one whose tail it depends on), preferring the
 * most recent tail; else to the least-loaded stream, lowest index first. Each item waits only on
 * the events of dependencies its stream does not already know to be complete (vector clocks).
 */
export function planStreams(items: readonly Accesses[], n: number, fixed?: readonly number[]): StreamPlan {
  const deps = dependencies(items);
  const m = items.length;
  const stream: number[] = new Array(m);
  const pos: number[] = new Array(m);
  const vc: Int32Array[] = new Array(m);
  const waits: number[][] = new Array(m);
  const count = new Int32Array(n); // items per stream
  const tail = new Int32Array(n).fill(-1); // last item index per stream
  const atPos: number[][] = Array.from({ length: n }, () => []); // stream, position -> item
  const known: Int32Array[] = Array.from({ length: n }, () => new Int32Array(n).fill(-1));
  let eventCount = 0;
  for (let i = 0; i < m; i++) {
    const d = deps[i]!;
    const reach = new Int32Array(n).fill(-1); // what i must (transitively) come after, per stream
    const need = new Int32Array(n).fill(-1); // latest direct dependency, per stream
    for (const j of d) {
      const v = vc[j]!;
      for (let t = 0; t < n; t++) if (v[t]! > reach[t]!) reach[t] = v[t]!;
      if (pos[j]! > need[stream[j]!]!) need[stream[j]!] = pos[j]!;
    }
    const free = (t: number) => count[t] === 0 || reach[t]! >= count[t]! - 1;
    let s = fixed ? fixed[i]! : -1;
    const latest = d.length ? d[d.length - 1]! : -1;
    if (s < 0 && latest >= 0 && free(stream[latest]!)) s = stream[latest]!;
    if (s < 0) {
      let best = -2;
      for (let t = 0; t < n; t++) if (free(t) && tail[t]! > best) (best = tail[t]!), (s = t);
    }
    if (s < 0) {
      s = 0;
      for (let t = 1; t < n; t++) if (count[t]! < count[s]!) s = t;
    }
    // waits: the latest direct dependency on each other stream, unless already known or implied
    const ks = known[s]!;
    const cand: number[] = [];
    for (let t = 0; t < n; t++) if (t !== s && need[t]! >= 0 && ks[t]! < need[t]!) cand.push(atPos[t]![need[t]!]!);
    const w: number[] = [];
    for (const j of cand) {
      const t = stream[j]!, p = pos[j]!;
      let implied = false;
      for (const k of cand) if (k !== j && vc[k]![t]! >= p) implied = true;
      if (!implied) w.push(j);
    }
    w.sort((a, b) => a - b);
    for (const j of w) {
      const v = vc[j]!;
      for (let t = 0; t < n; t++) if (v[t]! > ks[t]!) ks[t] = v[t]!;
    }
    eventCount += w.length;
    stream[i] = s;
    pos[i] = count[s]!;
    atPos[s]!.push(i);
    count[s]!++;
    tail[s] = i;
    ks[s] = pos[i]!;
    vc[i] = Int32Array.from(ks);
    waits[i] = w;
  }
  const usedStreams: number[] = [];
  for (let t = 0; t < n; t++) if (count[t]! > 0) usedStreams.push(t);
  return Object.freeze({ stream, waits, deps, eventCount, usedStreams });
}

/** One submission of a multi-stream run: items (ascending) that run on one stream, in order. */
export interface StreamSegment {
  readonly stream: number;
  readonly items: readonly number[];
}

/**
 * Cut a stream plan into lists submittable in order, as few as the waits allow: every event wait
 * is submitted after the list that records it (a wait enqueued before its record would order
 * nothing). Each stream appends to its open list while the records its items wait on are in
 * earlier lists, else opens a new one. Segment 0 is stream 0's first list (it may be empty: a
 * run's fork is recorded there).
 */
export function segments(plan: StreamPlan): StreamSegment[] {
  const out: { stream: number; items: number[] }[] = [{ stream: 0, items: [] }];
  const open = new Map<number, number>([[0, 0]]); // stream -> index of its open segment
  const segOf: number[] = new Array(plan.stream.length);
  for (let i = 0; i < plan.stream.length; i++) {
    const s = plan.stream[i]!;
    let k = open.get(s) ?? -1;
    if (k < 0 || plan.waits[i]!.some((j) => segOf[j]! >= k)) {
      k = out.length;
      out.push({ stream: s, items: [] });
      open.set(s, k);
    }
    out[k]!.items.push(i);
    segOf[i] = k;
  }
  return out;
}
