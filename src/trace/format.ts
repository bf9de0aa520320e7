// The trace's format (Chrome trace / Perfetto JSON) and what is made of finished spans: the spans
// of plan executions around their work, a profile in the same format, the file.
import { writeFileSync } from "node:fs";
import type { KernelProfile } from "../tensor/issue";

/** One event of the Chrome trace format ("X": a complete span; "M": a name; "i": an instant). */
export interface TraceEvent {
  name: string;
  ph: "X" | "M" | "i";
  /** Microseconds since the trace began. */
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  cat?: string;
  s?: "t" | "p" | "g";
  args?: Record<string, unknown>;
}

/** A lane of the timeline: one stream of one device. */
export interface TraceLane {
  pid: number;
  tid: number;
  name: string;
  /** The native stream handle. */
  stream: number;
  device: string;
}

export interface Trace {
  traceEvents: TraceEvent[];
  displayTimeUnit: "ms";
  otherData: {
    producer: "bungpu";
    /** Every stream that had work traced, with its lane. */
    lanes: TraceLane[];
    /** Ops whose stream was being captured (not timed: they did not run then). */
    captured: number;
    /** Ops on a stream the tracer could not place (queued on no stream of an open device). */
    unplaced: number;
    /** Ops not finished when the trace stopped: written up to the stop and marked unfinished, or left out when not begun. */
    unfinished: number;
  };
}


/** The host process: ring instants (thread 0), the JavaScript lane and the awaited runs. */
export const JS_PID = 0;
export const JS_TID = 1;
export const AWAIT_TID = 2;
/** Gaps shorter than this (µs) are not drawn as "JS outside bungpu": starts are exact to about 1 µs. */
const MIN_GAP_US = 2;

/**
 * The gaps where no device ran traced work and the JavaScript thread was in none of bungpu's
 * traced calls: the program's own code, the event loop, or nothing at all (the host cannot tell
 * which). Each is a span on the JavaScript lane, with how many awaited calls were open at its start.
 */
export function hostGaps(device: readonly TraceEvent[], js: readonly TraceEvent[]): TraceEvent[] {
  const busy: [number, number][] = [];
  for (const e of device) if (e.ph === "X") busy.push([e.ts, e.ts + (e.dur ?? 0)]);
  for (const e of js) if (e.ph === "X" && e.tid === JS_TID) busy.push([e.ts, e.ts + (e.dur ?? 0)]);
  busy.sort((a, b) => a[0] - b[0]);
  // awaited calls open at t: those begun by t less those ended by t (two sorted lists, searched)
  const awaits = js.filter((e) => e.tid === AWAIT_TID);
  const starts = awaits.map((w) => w.ts).sort((p, q) => p - q);
  const ends = awaits.map((w) => w.ts + (w.dur ?? 0)).sort((p, q) => p - q);
  const atMost = (xs: number[], t: number) => {
    let lo = 0, hi = xs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid]! <= t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const out: TraceEvent[] = [];
  let end = busy.length ? busy[0]![1] : 0;
  for (const [a, b] of busy) {
    if (a - end >= MIN_GAP_US) {
      const open = atMost(starts, end) - atMost(ends, end);
      out.push({ name: "JS outside bungpu", ph: "X", ts: end, dur: a - end, pid: JS_PID, tid: JS_TID, cat: "js-idle", args: { awaited: open } });
    }
    end = Math.max(end, b);
  }
  return out;
}

/** One span per plan execution and lane, around the work it queued there (unless one submit is it). */
export function scopeSpans(events: readonly TraceEvent[], names: ReadonlyMap<number, string>): TraceEvent[] {
  const spans = new Map<string, TraceEvent & { dur: number; n: number; names: Set<string>; submits: number }>();
  for (const e of events) {
    const id = e.args?.["scope"];
    if (typeof id !== "number" || e.args?.["list"] === true) continue;
    const key = `${id}/${e.pid}/${e.tid}`;
    const sp = spans.get(key);
    const end = e.ts + (e.dur ?? 0);
    if (!sp) {
      spans.set(key, { name: "", ph: "X", ts: e.ts, dur: end - e.ts, pid: e.pid, tid: e.tid, cat: "plan", n: e.cat === "kernel" ? 1 : 0, names: new Set([e.name]), submits: e.cat === "submit" ? 1 : 0, args: { scope: id } });
      continue;
    }
    const stop = Math.max(sp.ts + sp.dur, end);
    sp.ts = Math.min(sp.ts, e.ts);
    sp.dur = stop - sp.ts;
    if (e.cat === "kernel") sp.n++;
    if (e.cat === "submit") sp.submits++;
    sp.names.add(e.name);
  }
  const out: TraceEvent[] = [];
  for (const sp of spans.values()) {
    // A plan run as one command list already has its span: the submit, named after the plan call.
    if (sp.submits === 1 && sp.n === 0 && sp.names.size === 1) continue;
    out.push({ name: names.get(sp.args!["scope"] as number) ?? "ExecutionPlan", ph: "X", ts: sp.ts, dur: sp.dur, pid: sp.pid, tid: sp.tid, cat: "plan", args: { scope: sp.args!["scope"], kernels: sp.n } });
  }
  return out;
}

/** Write `t` (a stopped trace) as JSON to `path`. */
export function write(path: string, t: Trace): void {
  writeFileSync(path, JSON.stringify(t));
}

/**
 * The profile of ExecutionPlan.executeProfiled() (or executeWithVarsProfiled) in the same
 * format: its kernels back to back on one lane, each as long as its pair of events measured
 * (the gaps between kernels are not in a profile, so they are left out).
 */
export function fromProfile(profile: readonly KernelProfile[], opts: { name?: string } = {}): Trace {
  const ev: TraceEvent[] = [
    { name: "process_name", ph: "M", ts: 0, pid: 1, tid: 0, args: { name: profile[0]?.device ?? "device" } },
    { name: "thread_name", ph: "M", ts: 0, pid: 1, tid: 0, args: { name: opts.name ?? "executeProfiled" } },
  ];
  let ts = 0;
  for (const p of profile) {
    const dur = p.elapsedMs * 1000;
    ev.push({ name: p.entryPoint, cat: "kernel", ph: "X", ts, dur, pid: 1, tid: 0, args: { buffers: p.numBuffers } });
    ts += dur;
  }
  return {
    traceEvents: ev,
    displayTimeUnit: "ms",
    otherData: { producer: "bungpu", lanes: [{ pid: 1, tid: 0, name: opts.name ?? "executeProfiled", stream: 0, device: profile[0]?.device ?? "device" }], captured: 0, unplaced: 0, unfinished: 0 },
  };
}
