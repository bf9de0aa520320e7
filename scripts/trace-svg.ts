// Render a trace (Chrome trace JSON, as trace.stop() or BUNGPU_TRACE writes it) to an SVG
// timeline: one lane per stream, spans nested by depth (a command list above its commands, a
// plan execution above its kernels), kernels labelled where they are wide enough, every span
// with a tooltip (name, duration, geometry or bytes).
//
//   bun scripts/trace-svg.ts trace.json out.svg [--from MS] [--to MS] [--width PX] [--title TEXT]
//                                              [--start-at NAME [--length MS]]
//
// --from/--to pick a window in milliseconds since the trace's first span (default: all of it);
// --start-at starts a window of --length ms (default 5) at the first span named NAME. Only lanes
// with work in the window are drawn. docs/trace-demo.svg is the demo's first MultiStream run:
//   BUNGPU_DEVICE=cpu BUNGPU_TRACE=/tmp/demo.json BUNGPU_DEMO_MS=1 BUNGPU_DEMO_TENSOR_MS=1 bun run demo
//   bun scripts/trace-svg.ts /tmp/demo.json docs/trace-demo.svg --start-at "event wait" --length 3 --title "…"
import { readFileSync, writeFileSync } from "node:fs";

interface Ev {
  name: string;
  ph: string;
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  cat?: string;
  args?: Record<string, unknown>;
}

export interface SvgOptions {
  /** Window start and end, ms since the first span. */
  from?: number;
  to?: number;
  /** Start the window at the first span of this name instead (with `length` ms, default 5). */
  startAt?: string;
  length?: number;
  width?: number;
  title?: string;
}

const COLORS: Record<string, string> = {
  copy: "#59a14f",
  memset: "#76b7b2",
  submit: "#d9d9d9",
  plan: "#d4b8e0",
  graph: "#f28e2b",
  hostfn: "#e15759",
  wait: "#bab0ac",
};
const KERNEL_HUES = [210, 30, 120, 280, 0, 180, 60, 330, 250, 90];

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

function colorOf(e: Ev): string {
  if (e.cat === "kernel") return `hsl(${KERNEL_HUES[hash(e.name) % KERNEL_HUES.length]}, 55%, 62%)`;
  return COLORS[e.cat ?? ""] ?? "#9c9c9c";
}

function fmtMs(ms: number): string {
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 1) return `${ms.toFixed(2)} ms`;
  return `${(ms * 1000).toFixed(ms >= 0.01 ? 1 : 2)} µs`;
}

function tooltip(e: Ev): string {
  const parts = [`${e.name}: ${fmtMs((e.dur ?? 0) / 1000)}`];
  const a = e.args ?? {};
  if (Array.isArray(a.grid)) parts.push(`grid ${(a.grid as number[]).join("×")}, block ${(a.block as number[]).join("×")}${a.shared ? `, shared ${a.shared} B` : ""}`);
  if (typeof a.bytes === "number") parts.push(`${a.bytes} bytes`);
  if (typeof a.commands === "number") parts.push(`${a.commands} commands (${a.kernels} kernels)`);
  if (typeof a.kernels === "number" && e.cat === "plan") parts.push(`${a.kernels} kernels`);
  if (a.unfinished) parts.push("unfinished at stop");
  return parts.join("; ");
}

/** The SVG text of `trace`'s timeline. */
export function renderSvg(trace: { traceEvents: Ev[] }, opts: SvgOptions = {}): string {
  const events = trace.traceEvents;
  const spans = events.filter((e) => e.ph === "X");
  const laneNames = new Map<string, string>();
  const procNames = new Map<number, string>();
  for (const e of events) {
    if (e.ph !== "M") continue;
    if (e.name === "thread_name") laneNames.set(`${e.pid}/${e.tid}`, String(e.args?.name ?? ""));
    if (e.name === "process_name") procNames.set(e.pid, String(e.args?.name ?? ""));
  }
  let t0 = spans.length ? Infinity : 0, tEnd = spans.length ? -Infinity : 1;
  for (const e of spans) {
    t0 = Math.min(t0, e.ts);
    tEnd = Math.max(tEnd, e.ts + (e.dur ?? 0));
  }
  let from = t0 + (opts.from ?? 0) * 1000;
  let to = opts.to !== undefined ? t0 + opts.to * 1000 : tEnd;
  if (opts.startAt !== undefined) {
    const first = spans.filter((e) => e.name === opts.startAt).reduce<Ev | null>((m, e) => (!m || e.ts < m.ts ? e : m), null);
    if (!first) throw new Error(`no span named ${JSON.stringify(opts.startAt)}`);
    from = first.ts - 100; // 0.1 ms before it
    to = from + (opts.length ?? 5) * 1000;
  }
  const span = Math.max(to - from, 1e-3);
  const inWindow = spans.filter((e) => e.ts < to && e.ts + (e.dur ?? 0) > from || (e.ts >= from && e.ts <= to));

  // Lanes in order (pid, tid), each with its spans at their nesting depth.
  const lanes = new Map<string, { pid: number; tid: number; spans: { e: Ev; depth: number }[]; depth: number }>();
  const ordered = [...inWindow].sort((a, b) => a.pid - b.pid || a.tid - b.tid || a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  let stack: number[] = [];
  let key = "";
  for (const e of ordered) {
    const k = `${e.pid}/${e.tid}`;
    if (k !== key) {
      key = k;
      stack = [];
      lanes.set(k, { pid: e.pid, tid: e.tid, spans: [], depth: 0 });
    }
    const lane = lanes.get(k)!;
    const end = e.ts + (e.dur ?? 0);
    while (stack.length && stack[stack.length - 1]! <= e.ts + 1e-6) stack.pop();
    // A span only nests in one that holds all of it; one that overlaps an unfinished parent's end goes beside it.
    while (stack.length && stack[stack.length - 1]! < end - 1e-6) stack.pop();
    const depth = stack.length;
    stack.push(end);
    lane.spans.push({ e, depth });
    lane.depth = Math.max(lane.depth, depth);
  }

  const width = opts.width ?? 1400;
  const labelW = 210, rowH = 18, gap = 8, top = opts.title ? 44 : 20, axisH = 26;
  const plotW = width - labelW - 20;
  const x = (ts: number) => labelW + ((ts - from) / span) * plotW;
  let y = top + axisH;
  const out: string[] = [];
  let lastPid = -1;
  for (const lane of lanes.values()) {
    const h = Math.max((lane.depth + 1) * rowH, 30);
    const name = laneNames.get(`${lane.pid}/${lane.tid}`) ?? `tid ${lane.tid}`;
    const proc = procNames.get(lane.pid) ?? `pid ${lane.pid}`;
    out.push(`<g class="lane" data-pid="${lane.pid}" data-tid="${lane.tid}">`);
    out.push(`<rect x="0" y="${y - 2}" width="${width}" height="${h + 4}" fill="${lane.pid !== lastPid || lane.tid % 2 === 0 ? "#f7f7f7" : "#ffffff"}"/>`);
    out.push(`<text class="lane-label" x="8" y="${y + 13}" font-size="12">${esc(name)}</text>`);
    out.push(`<text x="8" y="${y + 25}" font-size="9" fill="#777">${esc(proc)}</text>`);
    out.push(`<clipPath id="c${lane.pid}_${lane.tid}"><rect x="${labelW}" y="${y - 2}" width="${plotW}" height="${h + 4}"/></clipPath>`);
    out.push(`<g clip-path="url(#c${lane.pid}_${lane.tid})">`);
    for (const { e, depth } of lane.spans) {
      const x0 = x(e.ts), w = Math.max(0.6, ((e.dur ?? 0) / span) * plotW);
      const ry = y + depth * rowH;
      out.push(`<g class="span" data-cat="${esc(e.cat ?? "")}"><title>${esc(tooltip(e))}</title>`);
      out.push(`<rect x="${x0.toFixed(2)}" y="${ry}" width="${w.toFixed(2)}" height="${rowH - 2}" fill="${colorOf(e)}" stroke="#555" stroke-width="${w > 3 ? 0.4 : 0}"/>`);
      // The name, cut to the span's width (about 6 px a character).
      const fit = Math.floor((w - 6) / 6);
      const label = e.name.length <= fit ? e.name : fit >= 5 ? `${e.name.slice(0, fit - 1)}…` : "";
      if (label) out.push(`<text class="span-label" x="${(x0 + 3).toFixed(2)}" y="${ry + 12}" font-size="10">${esc(label)}</text>`);
      out.push(`</g>`);
    }
    out.push(`</g></g>`);
    y += h + gap;
    lastPid = lane.pid;
  }

  // The time axis: about ten ticks at a round step.
  const axis: string[] = [];
  const ms = span / 1000;
  const raw = ms / 10;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw)!;
  const startMs = (from - t0) / 1000;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  for (let t = Math.ceil(startMs / step) * step; t <= startMs + ms + 1e-9; t += step) {
    const px = labelW + ((t - startMs) / ms) * plotW;
    axis.push(`<line x1="${px.toFixed(2)}" y1="${top + axisH - 6}" x2="${px.toFixed(2)}" y2="${y}" stroke="#ddd" stroke-width="0.5"/>`);
    axis.push(`<text x="${px.toFixed(2)}" y="${top + axisH - 10}" font-size="10" text-anchor="middle" fill="#555">${t.toFixed(decimals)} ms</text>`);
  }
  const height = y + 10;
  const title = opts.title ? `<text x="8" y="26" font-size="15" font-weight="bold">${esc(opts.title)}</text>` : "";
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    title,
    ...axis,
    ...out,
    `</svg>`,
    "",
  ].join("\n");
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  const pos: string[] = [];
  const opts: SvgOptions = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v)) throw new Error(`${a} wants a number`);
      return v;
    };
    if (a === "--from") opts.from = num();
    else if (a === "--to") opts.to = num();
    else if (a === "--width") opts.width = num();
    else if (a === "--start-at") opts.startAt = argv[++i];
    else if (a === "--length") opts.length = num();
    else if (a === "--title") opts.title = argv[++i];
    else pos.push(a);
  }
  if (pos.length !== 2) {
    console.error("usage: bun scripts/trace-svg.ts trace.json out.svg [--from MS] [--to MS] [--start-at NAME [--length MS]] [--width PX] [--title TEXT]");
    process.exit(2);
  }
  const svg = renderSvg(JSON.parse(readFileSync(pos[0]!, "utf8")), opts);
  writeFileSync(pos[1]!, svg);
  console.log(`${pos[1]}: ${(svg.match(/class="lane"/g) ?? []).length} lanes, ${(svg.match(/class="span"/g) ?? []).length} spans`);
}
