// A trace drawn as an SVG timeline: trace.toSVG(trace, options) and the bungpu-trace command
// (cli.ts). One lane per stream (pid = device, tid = stream) and, above them, the host's lanes:
// "JavaScript" (the JS thread inside bungpu's calls, blocked in waits, and the gaps where neither
// the devices nor bungpu had anything running: "JS outside bungpu") and "awaited runs" (each
// plan.run from its call to its result). Spans nest by time (a command list above its commands, a
// plan call or run above its work); each has a <title> with its full name, duration and details,
// which browsers show on hover; a label that does not fit its span ends in "…" (labels are in a
// monospaced font, so how much fits is known without measuring). A legend names every colour.
import { describeGot, finiteNumber, invalid, options, type OptionKeys } from "../errors";
import type { Trace, TraceEvent } from "./format";

export interface SvgOptions {
  /** Window start and end, in ms since the trace's first span (default: all of it). */
  from?: number;
  to?: number;
  /** Start the window 0.1 ms before the first span of this name instead, `length` ms long (default 5). */
  startAt?: string;
  length?: number;
  /** Width in pixels: 400 to 100000 (default 1400). */
  width?: number;
  /** A title above the timeline. */
  title?: string;
}

const SVG_KEYS: OptionKeys<SvgOptions> = { from: true, to: true, startAt: true, length: true, width: true, title: true };

/** The host process's lanes (format.ts: JS_PID, JS_TID, AWAIT_TID), drawn first. */
const HOST_PID = 0;

/** Each category's colour and its line in the legend, in the legend's order. */
const CATEGORIES: readonly (readonly [cat: string, color: string, legend: string])[] = [
  ["js-call", "#f6d55c", "JS in a bungpu call (issuing)"],
  ["js-wait", "#e07b39", "JS blocked until the device is done"],
  ["js-idle", "#ececec", "device idle, JS outside bungpu"],
  ["js-await", "#a9c8f0", "plan.run awaited (call → result)"],
  ["plan", "#d4b8e0", "plan call / plan.run (its work inside)"],
  ["submit", "#d9d9d9", "command list (its commands inside)"],
  ["kernel", "hsl(210, 55%, 62%)", "kernel (a hue per name)"],
  ["copy", "#59a14f", "copy"],
  ["memset", "#76b7b2", "memset"],
  ["graph", "#f28e2b", "graph replay"],
  ["hostfn", "#e15759", "host function"],
  ["wait", "#bab0ac", "event wait"],
  ["collective", "#b07aa1", "collective"],
  ["memory", "#9c755f", "stream-ordered alloc / free"],
];
const COLOR = new Map(CATEGORIES.map(([c, col]) => [c, col]));
const KERNEL_HUES = [210, 30, 120, 280, 0, 180, 60, 330, 250, 90];
/** Span labels: 10 px monospace, whose advance is 0.6 em in every common monospaced font. */
const CHAR_W = 6.02;
const LABEL_FONT = `font-family="DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, monospace" font-size="10"`;
/** Rows a lane draws at most; spans past them are counted in its label. */
const MAX_ROWS = 12;

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

function colorOf(e: TraceEvent): string {
  if (e.cat === "kernel") return `hsl(${KERNEL_HUES[hash(e.name) % KERNEL_HUES.length]}, 55%, 62%)`;
  return COLOR.get(e.cat ?? "") ?? "#9c9c9c";
}

function fmtMs(ms: number): string {
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 1) return `${ms.toFixed(2)} ms`;
  return `${(ms * 1000).toFixed(ms >= 0.01 ? 1 : 2)} µs`;
}

/** `text` cut to `chars` characters, the cut shown by "…"; "" where not even two characters and the "…" fit. */
export function fitLabel(text: string, chars: number): string {
  if (text.length <= chars) return text;
  return chars >= 3 ? `${text.slice(0, chars - 1)}…` : "";
}

function tooltip(e: TraceEvent, t0: number): string {
  const parts = [`${e.name}: ${fmtMs((e.dur ?? 0) / 1000)} at ${fmtMs((e.ts - t0) / 1000)}`];
  const a = e.args ?? {};
  if (Array.isArray(a["grid"])) parts.push(`grid ${(a["grid"] as number[]).join("×")}, block ${(a["block"] as number[]).join("×")}${a["shared"] ? `, shared ${a["shared"]} B` : ""}`);
  if (typeof a["bytes"] === "number") parts.push(`${a["bytes"]} bytes`);
  if (typeof a["commands"] === "number") parts.push(`${a["commands"]} commands (${a["kernels"]} kernels)`);
  else if (typeof a["kernels"] === "number" && e.cat === "plan") parts.push(`${a["kernels"]} kernels`);
  if (e.cat === "js-idle")
    parts.push(`no device ran traced work and the JS thread was in none of bungpu's calls: the program's own code, the event loop, or idle${a["awaited"] ? `; ${a["awaited"]} awaited call(s) open at its start` : ""}`);
  if (e.cat === "js-await") parts.push(a["ok"] === false ? "from the call until its promise rejected" : "from the call until its promise resolved");
  if (e.cat === "js-wait") parts.push("the JS thread waited for the device here");
  if (a["unfinished"]) parts.push("unfinished at stop");
  return parts.join("; ");
}

function eventsOf(call: string, input: unknown): readonly TraceEvent[] {
  const evs = Array.isArray(input) ? input : input !== null && typeof input === "object" ? (input as Partial<Trace>).traceEvents : undefined;
  if (!Array.isArray(evs)) invalid(call, `wants a trace (trace.stop()'s result or its JSON parsed) or its traceEvents array, got ${describeGot(input)}`);
  evs.forEach((e: unknown, i) => {
    const x = e as Partial<TraceEvent> | null;
    if (x === null || typeof x !== "object" || typeof x.ph !== "string" || typeof x.name !== "string")
      invalid(call, `traceEvents[${i}] is not a trace event (it needs name and ph), got ${describeGot(e)}`);
    if (x.ph === "X" && !(Number.isFinite(x.ts) && Number.isFinite(x.dur ?? 0) && Number.isFinite(x.pid) && Number.isFinite(x.tid)))
      invalid(call, `traceEvents[${i}] (${JSON.stringify(x.name)}) needs numbers ts, dur, pid and tid`);
  });
  return evs as TraceEvent[];
}

interface Lane {
  pid: number;
  tid: number;
  spans: { e: TraceEvent; row: number }[];
  rows: number;
  hidden: number;
}

/** The lane's spans in rows: a span goes below every span that holds it, in the first row free at its start. */
function layOut(lane: Lane, spans: readonly TraceEvent[]): void {
  const open: { end: number; row: number; ts: number }[] = [];
  for (const e of spans) {
    const end = e.ts + (e.dur ?? 0);
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.end <= e.ts + 1e-6) open.splice(i, 1);
    let min = 0;
    for (const o of open) if (o.ts <= e.ts && o.end >= end - 1e-6) min = Math.max(min, o.row + 1);
    let row = min;
    while (open.some((o) => o.row === row)) row++;
    if (row >= MAX_ROWS) {
      lane.hidden++;
      continue;
    }
    open.push({ end, row, ts: e.ts });
    lane.spans.push({ e, row });
    lane.rows = Math.max(lane.rows, row + 1);
  }
}

/**
 * The SVG text of a trace's timeline: `input` is trace.stop()'s result (or its JSON, parsed) or
 * its traceEvents. Lanes without spans in the window are left out. Bad input is GpuError
 * INVALID_VALUE.
 */
export function toSVG(input: Trace | { readonly traceEvents: readonly TraceEvent[] } | readonly TraceEvent[], opts?: SvgOptions): string {
  const call = "trace.toSVG";
  const events = eventsOf(call, input);
  const o = options(call, opts, SVG_KEYS);
  for (const k of ["from", "to", "length", "width"] as const) if (o[k] !== undefined) finiteNumber(call, k, o[k]);
  if (o.startAt !== undefined && typeof o.startAt !== "string") invalid(call, `startAt must be a span's name, got ${describeGot(o.startAt)}`);
  if (o.title !== undefined && typeof o.title !== "string") invalid(call, `title must be a string, got ${describeGot(o.title)}`);
  if (o.startAt !== undefined && (o.from !== undefined || o.to !== undefined)) invalid(call, "give either startAt (and length) or from/to, not both");
  if (o.width !== undefined && !(o.width >= 400 && o.width <= 100_000)) invalid(call, `width must be 400 to 100000 px, got ${o.width}`);
  if (o.length !== undefined && !(o.length > 0)) invalid(call, `length must be more than 0 ms, got ${o.length}`);
  if (o.from !== undefined && o.to !== undefined && !(o.to > o.from)) invalid(call, `to (${o.to}) must be after from (${o.from})`);

  const spans = events.filter((e) => e.ph === "X");
  const laneNames = new Map<string, string>();
  const procNames = new Map<number, string>();
  for (const e of events) {
    if (e.ph !== "M") continue;
    if (e.name === "thread_name") laneNames.set(`${e.pid}/${e.tid}`, String(e.args?.["name"] ?? ""));
    if (e.name === "process_name") procNames.set(e.pid, String(e.args?.["name"] ?? ""));
  }
  let t0 = spans.length ? Infinity : 0, tEnd = spans.length ? -Infinity : 1;
  for (const e of spans) {
    t0 = Math.min(t0, e.ts);
    tEnd = Math.max(tEnd, e.ts + (e.dur ?? 0));
  }
  let from = t0 + (o.from ?? 0) * 1000;
  let to = o.to !== undefined ? t0 + o.to * 1000 : tEnd;
  if (o.startAt !== undefined) {
    const first = spans.filter((e) => e.name === o.startAt).reduce<TraceEvent | null>((m, e) => (!m || e.ts < m.ts ? e : m), null);
    if (!first) invalid(call, `no span is named ${JSON.stringify(o.startAt)}`);
    from = first.ts - 100; // 0.1 ms before it
    to = from + (o.length ?? 5) * 1000;
  }
  const span = Math.max(to - from, 1e-3);
  const inWindow = spans.filter((e) => (e.ts < to && e.ts + (e.dur ?? 0) > from) || (e.ts >= from && e.ts <= to));

  // Lanes: the host's first (the JavaScript lane above its awaited runs), then devices by pid and stream.
  const laneOrder = (p: number, t: number) => (p === HOST_PID ? [0, t === 0 ? 9 : t] : [1, p, t]);
  const cmp = (a: number[], b: number[]) => {
    for (let i = 0; i < Math.max(a.length, b.length); i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
    return 0;
  };
  const ordered = [...inWindow].sort((a, b) => cmp(laneOrder(a.pid, a.tid), laneOrder(b.pid, b.tid)) || a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  const lanes: Lane[] = [];
  for (let i = 0; i < ordered.length; ) {
    const first = ordered[i]!;
    let j = i;
    while (j < ordered.length && ordered[j]!.pid === first.pid && ordered[j]!.tid === first.tid) j++;
    const lane: Lane = { pid: first.pid, tid: first.tid, spans: [], rows: 1, hidden: 0 };
    layOut(lane, ordered.slice(i, j));
    lanes.push(lane);
    i = j;
  }

  const width = Math.round(o.width ?? 1400);
  const labelW = 210, rowH = 18, gap = 8, axisH = 26;
  const plotW = width - labelW - 20;
  const x = (ts: number) => labelW + ((ts - from) / span) * plotW;
  let y = o.title ? 40 : 10;
  const head: string[] = [];
  if (o.title) {
    const t = fitLabel(o.title, Math.floor((width - 16) / 8.5));
    head.push(`<text class="title" x="8" y="26" font-size="15" font-weight="bold">${t !== o.title ? `<title>${esc(o.title)}</title>` : ""}${esc(t)}</text>`);
  }

  // The legend: the categories drawn in this window, in rows that fit the width.
  const cats = new Set(inWindow.map((e) => e.cat ?? ""));
  const legend: string[] = [`<g class="legend">`];
  let lx = 8;
  let ly = y;
  for (const [cat, color, text] of CATEGORIES) {
    if (!cats.has(cat)) continue;
    const w = 18 + text.length * 6.3 + 14;
    if (lx + w > width - 8 && lx > 8) {
      lx = 8;
      ly += 18;
    }
    // kernels: a swatch of three of their hues
    const swatch =
      cat === "kernel"
        ? KERNEL_HUES.slice(0, 3).map((h, i) => `<rect x="${lx + i * 4}" y="${ly}" width="4" height="12" fill="hsl(${h}, 55%, 62%)"/>`).join("") +
          `<rect x="${lx}" y="${ly}" width="12" height="12" fill="none" stroke="#555" stroke-width="0.4"/>`
        : `<rect x="${lx}" y="${ly}" width="12" height="12" fill="${color}" stroke="#555" stroke-width="0.4"/>`;
    legend.push(`<g class="legend-item" data-cat="${cat}"><title>${esc(`${cat}: ${text}`)}</title>${swatch}<text x="${lx + 17}" y="${ly + 10}" font-size="11" fill="#333">${esc(text)}</text></g>`);
    lx += w;
  }
  legend.push(`</g>`);
  y = ly + 22;
  const axisTop = y;
  y += axisH;

  const out: string[] = [];
  lanes.forEach((lane, li) => {
    const h = Math.max(lane.rows * rowH, 30);
    const key = `${lane.pid}/${lane.tid}`;
    const name = laneNames.get(key) ?? `tid ${lane.tid}`;
    const proc = procNames.get(lane.pid) ?? `pid ${lane.pid}`;
    const cls = lane.pid === HOST_PID ? "lane host-lane" : "lane";
    out.push(`<g class="${cls}" data-pid="${lane.pid}" data-tid="${lane.tid}" data-name="${esc(name)}">`);
    out.push(`<rect x="0" y="${y - 2}" width="${width}" height="${h + 4}" fill="${li % 2 === 0 ? "#f7f7f7" : "#ffffff"}"/>`);
    const shown = fitLabel(name, Math.floor((labelW - 12) / 6.8));
    out.push(`<text class="lane-label" x="8" y="${y + 13}" font-size="12"><title>${esc(`${name} (${proc})`)}</title>${esc(shown)}</text>`);
    const sub = lane.hidden ? `${proc}; ${lane.hidden} overlapping spans not drawn` : proc;
    out.push(`<text x="8" y="${y + 25}" font-size="9" fill="#777">${esc(fitLabel(sub, Math.floor((labelW - 12) / 5)))}</text>`);
    out.push(`<clipPath id="c${lane.pid}_${lane.tid}"><rect x="${labelW}" y="${y - 2}" width="${plotW}" height="${h + 4}"/></clipPath>`);
    out.push(`<g clip-path="url(#c${lane.pid}_${lane.tid})">`);
    for (const { e, row } of lane.spans) {
      // Clipped to the window, so a label starts where its span can be seen.
      const x0 = Math.max(x(e.ts), labelW - 1), x1 = Math.min(x(e.ts + (e.dur ?? 0)), labelW + plotW + 1);
      const w = Math.max(0.6, x1 - x0);
      const ry = y + row * rowH;
      const fill = colorOf(e);
      const dashed = e.cat === "plan" || e.cat === "js-idle" || e.cat === "js-await";
      out.push(`<g class="span" data-cat="${esc(e.cat ?? "")}" data-name="${esc(e.name)}"><title>${esc(tooltip(e, t0))}</title>`);
      out.push(`<rect x="${x0.toFixed(2)}" y="${ry}" width="${w.toFixed(2)}" height="${rowH - 2}" fill="${fill}" stroke="#555" stroke-width="${w > 3 ? 0.5 : 0}"${dashed ? ` stroke-dasharray="3 2"` : ""}/>`);
      const label = fitLabel(e.name, Math.floor((w - 5) / CHAR_W));
      if (label) out.push(`<text class="span-label" x="${(x0 + 3).toFixed(2)}" y="${ry + 12}" ${LABEL_FONT}>${esc(label)}</text>`);
      out.push(`</g>`);
    }
    out.push(`</g></g>`);
    y += h + gap;
  });

  // The time axis: about ten ticks at a round step.
  const axis: string[] = [`<g class="axis">`];
  const ms = span / 1000;
  const raw = ms / 10;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw)!;
  const startMs = (from - t0) / 1000;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  for (let i = Math.ceil(startMs / step - 1e-9); i * step <= startMs + ms + 1e-9; i++) {
    const t = i * step;
    const px = labelW + ((t - startMs) / ms) * plotW;
    axis.push(`<line x1="${px.toFixed(2)}" y1="${axisTop + axisH - 6}" x2="${px.toFixed(2)}" y2="${y}" stroke="#ddd" stroke-width="0.5"/>`);
    axis.push(`<text x="${px.toFixed(2)}" y="${axisTop + axisH - 10}" font-size="10" text-anchor="middle" fill="#555">${t.toFixed(decimals)} ms</text>`);
  }
  axis.push(`</g>`);
  const height = Math.ceil(y + 10);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" class="bungpu-trace" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    `<style>.span:hover rect { stroke: #000; stroke-width: 1.2px; }</style>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...head,
    ...legend,
    ...axis,
    ...out,
    `</svg>`,
    "",
  ].join("\n");
}
