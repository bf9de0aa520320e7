// The timeline SVG in a real browser: headless Chromium, driven with --dump-dom (no npm package, no
// browser download). A page embeds each SVG and, after layout, writes what the browser found into
// the document: parse errors, the lanes it laid out (name, place, spans), the legend, whether each
// cut label ends in "…" and keeps its full text in a <title>, whether a label overflows its span
// (getComputedTextLength against the span's width), and whether the SVG file loads as an <img>.
// Two timelines: the demo's (run with BUNGPU_TRACE in a subprocess, its first MultiStream run, as
// docs/trace-demo.svg is drawn) and plan.run calls traced here (the JavaScript lane, the awaited
// runs, each run's work under one span).
//
// Chromium is found as BUNGPU_CHROMIUM or on PATH (chromium, chromium-browser, google-chrome); where
// there is none the tests are skipped and their names say so (Debian: apt-get install -y chromium).
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tensor, trace, type Trace } from "../src";
import { demoTrace } from "./fixtures/demo_trace";

const root = join(import.meta.dir, "..");
// .ci/run installs Chromium beside the suite and marks it pending: wait (up to 4 minutes) for it.
const pending = process.env["BUNGPU_CHROMIUM_PENDING"];
for (let waited = 0; pending && existsSync(pending) && waited < 240_000; waited += 500) await Bun.sleep(500);
const chromium = process.env["BUNGPU_CHROMIUM"] || ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"].map((n) => Bun.which(n)).find((p) => p);
const NO_BROWSER = "skipped: no Chromium here (apt-get install -y chromium, or set BUNGPU_CHROMIUM to a Chrome or Chromium binary)";
const tmp = mkdtempSync(join(tmpdir(), "bungpu-browser-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface LaneSeen {
  pid: number;
  tid: number;
  name: string;
  label: string;
  top: number;
  bottom: number;
  spans: number;
  names: string[];
  cats: string[];
}
interface Seen {
  parseError: string | null;
  scriptErrors: string[];
  width: number;
  height: number;
  lanes: LaneSeen[];
  legend: { cat: string; text: string; width: number }[];
  spans: number;
  untitled: number;
  cut: number;
  cutWithoutFullTitle: string[];
  overflowing: string[];
  imageLoaded: boolean;
}

/** The page: each SVG parsed, attached and measured; the findings written into #result as JSON. */
function page(svgs: string[], files: string[]): string {
  const data = JSON.stringify(svgs).replace(/</g, "\\u003c");
  const imgs = files.map((f, i) => `<img id="img${i}" src="${Bun.pathToFileURL(f).href}">`).join("");
  return `<!doctype html><html><head><meta charset="utf-8"></head><body>${imgs}
<pre id="result">pending</pre>
<script>
const errors = [];
window.addEventListener("error", (e) => errors.push(String(e.message)));
function measure(text, i) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const bad = doc.getElementsByTagName("parsererror");
  const r = { parseError: bad.length ? bad[0].textContent : null, scriptErrors: errors };
  if (bad.length) return r;
  const svg = document.importNode(doc.documentElement, true);
  document.body.appendChild(svg);
  const box = svg.getBoundingClientRect();
  r.width = box.width; r.height = box.height;
  const own = (el, sel) => [...el.children].filter((c) => c.matches(sel));
  r.lanes = [...svg.querySelectorAll("g.lane")].map((g) => {
    const b = g.getBoundingClientRect();
    const label = g.querySelector(".lane-label");
    const spans = [...g.querySelectorAll("g.span")];
    return {
      pid: +g.getAttribute("data-pid"), tid: +g.getAttribute("data-tid"), name: g.getAttribute("data-name"),
      label: label ? [...label.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("") : "",
      top: b.top, bottom: b.bottom, spans: spans.length,
      names: [...new Set(spans.map((s) => s.getAttribute("data-name")))],
      cats: [...new Set(spans.map((s) => s.getAttribute("data-cat")))],
    };
  });
  r.legend = [...svg.querySelectorAll("g.legend-item")].map((g) => ({ cat: g.getAttribute("data-cat"), text: g.querySelector("text").textContent, width: g.getBoundingClientRect().width }));
  const spans = [...svg.querySelectorAll("g.span")];
  r.spans = spans.length;
  r.untitled = spans.filter((s) => !own(s, "title").length).length;
  r.cut = 0; r.cutWithoutFullTitle = []; r.overflowing = [];
  for (const s of spans) {
    const t = own(s, "text.span-label")[0];
    if (!t) continue;
    const full = s.getAttribute("data-name"), shown = t.textContent, title = own(s, "title")[0].textContent;
    if (shown !== full) {
      r.cut++;
      if (!shown.endsWith("\\u2026") || !full.startsWith(shown.slice(0, -1)) || !title.startsWith(full)) r.cutWithoutFullTitle.push(full);
    }
    const rect = own(s, "rect")[0];
    const room = rect.width.baseVal.value - (t.x.baseVal[0].value - rect.x.baseVal.value);
    if (t.getComputedTextLength() > room + 0.5) r.overflowing.push(shown + " (" + t.getComputedTextLength().toFixed(1) + " > " + room.toFixed(1) + ")");
  }
  const img = document.getElementById("img" + i);
  r.imageLoaded = !!img && img.complete && img.naturalWidth > 0;
  return r;
}
window.addEventListener("load", () => {
  document.getElementById("result").textContent = JSON.stringify(${data}.map(measure));
});
</script></body></html>`;
}

/** Render `svgs` (also written to files, loaded as images) in headless Chromium: what it found in each. */
async function render(svgs: string[]): Promise<Seen[]> {
  const files = svgs.map((s, i) => {
    const f = join(tmp, `timeline${i}.svg`);
    writeFileSync(f, s);
    return f;
  });
  const html = join(tmp, "page.html");
  writeFileSync(html, page(svgs, files));
  const profile = mkdtempSync(join(tmp, "profile-"));
  const args = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`, "--allow-file-access-from-files",
    "--virtual-time-budget=5000", "--dump-dom", Bun.pathToFileURL(html).href,
  ];
  const proc = Bun.spawn([chromium!, ...args], { stdout: "pipe", stderr: "pipe", env: { ...process.env, HOME: profile } });
  const timer = setTimeout(() => proc.kill(9), 60_000);
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  const m = /<pre id="result">([\s\S]*?)<\/pre>/.exec(out);
  if (code !== 0 || !m || m[1] === "pending") throw new Error(`chromium exited ${code}; no result in its DOM:\n${out.slice(0, 1000)}\n${err.slice(-2000)}`);
  const text = m[1]!.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&");
  return JSON.parse(text) as Seen[];
}

/** The demo run under BUNGPU_TRACE in a subprocess (once for the suite: test/fixtures/demo_trace.ts): its trace. */
async function demoTraceOf(): Promise<Trace> {
  const { trace, out, err, code } = await demoTrace();
  if (code !== 0 || !trace) throw new Error(`the demo exited ${code}: ${out.slice(-1000)} ${err.slice(-1000)}`);
  return trace;
}

/** plan.run traced here: three awaited one after another (the caller working 2 ms between two), then two together. */
async function runsTrace(): Promise<Trace> {
  const x = Tensor.from(new Float32Array(32 * 64), [32, 64], { name: "x" });
  using plan = x.matmul(Tensor.randn([64, 16], { seed: 5 })).relu().prepare({ outputNames: ["y"] });
  const feed = (v: number) => ({ x: new Float32Array(32 * 64).fill(v) });
  trace.start();
  let t: Trace;
  try {
    await plan.run(feed(1));
    await plan.run(feed(2));
    const end = performance.now() + 2;
    while (performance.now() < end); // the caller's own work
    await plan.run(feed(3));
    await Promise.all([plan.run(feed(4)), plan.run(feed(5))]);
  } finally {
    t = trace.stop();
  }
  return JSON.parse(JSON.stringify(t)) as Trace;
}

describe(`the timeline in a headless browser${chromium ? "" : ` (${NO_BROWSER})`}`, () => {
  let seen: Seen[] = [];
  let demo: Trace;
  let runs: Trace;
  const whenBrowser = test.skipIf(!chromium);

  whenBrowser("Chromium renders the demo's timeline and a traced plan.run's without parse or script errors; each SVG file loads as an image", async () => {
    [demo, runs] = [await demoTraceOf(), await runsTrace()];
    seen = await render([
      trace.toSVG(demo, { startAt: "event wait", length: 3, title: "the demo's first MultiStream(2) run" }),
      trace.toSVG(runs, { title: "five plan.run calls" }),
    ]);
    expect(seen.length).toBe(2);
    for (const s of seen) {
      expect(s.parseError).toBeNull();
      expect(s.scriptErrors).toEqual([]);
      expect(s.width).toBe(1400);
      expect(s.height).toBeGreaterThan(100);
      expect(s.imageLoaded).toBe(true);
    }
  }, 240_000);

  whenBrowser("the demo's lanes: the JavaScript lane above one lane per stream with work in the window, laid out one below another", () => {
    const [s] = seen;
    expect(s).toBeDefined();
    const lanes = s!.lanes;
    expect(lanes[0]).toMatchObject({ pid: 0, tid: 1, name: "JavaScript", label: "JavaScript" });
    const streams = lanes.filter((l) => l.pid !== 0);
    expect(streams.length).toBeGreaterThanOrEqual(2); // MultiStream(2): two streams at once
    for (const l of streams) {
      const declared = demo.otherData.lanes.find((d) => d.pid === l.pid && d.tid === l.tid);
      expect(declared?.name).toBe(l.name);
      expect(l.label).toBe(l.name);
      expect(l.spans).toBeGreaterThan(0);
    }
    const kernels = new Set(streams.flatMap((l) => l.names));
    for (const k of ["matmul", "command list", "event wait"]) expect(kernels.has(k)).toBe(true);
    for (let i = 1; i < lanes.length; i++) expect(lanes[i]!.top).toBeGreaterThanOrEqual(lanes[i - 1]!.bottom - 0.5);
  });

  whenBrowser("plan.run's timeline: the JavaScript lane, the awaited runs and each run's group, with their names", () => {
    const s = seen[1]!;
    expect(s).toBeDefined();
    const js = s.lanes.find((l) => l.pid === 0 && l.tid === 1)!;
    const awaited = s.lanes.find((l) => l.pid === 0 && l.tid === 2)!;
    expect(js).toMatchObject({ name: "JavaScript", label: "JavaScript" });
    expect(awaited).toMatchObject({ name: "awaited runs", label: "awaited runs" });
    expect(s.lanes.indexOf(js)).toBe(0);
    expect(s.lanes.indexOf(awaited)).toBe(1);
    for (const k of [1, 2, 3, 4, 5]) {
      expect(js.names).toContain(`ExecutionPlan.run #${k}`);
      expect(awaited.names).toContain(`await run #${k}`);
      expect(s.lanes.some((l) => l.pid !== 0 && l.names.includes(`ExecutionPlan.run #${k}`))).toBe(true);
    }
    expect(js.names).toContain("JS outside bungpu");
    expect(js.cats).toContain("js-idle");
    const device = s.lanes.filter((l) => l.pid !== 0);
    expect(device.length).toBeGreaterThan(0);
    expect(device.some((l) => l.cats.includes("kernel"))).toBe(true);
  });

  whenBrowser("a legend names each colour drawn; every span has a <title>; cut labels end in '…' with the full name in the <title>; no label overflows its span", () => {
    for (const s of seen) {
      const cats = new Set(s.lanes.flatMap((l) => l.cats));
      expect(s.legend.map((l) => l.cat).sort()).toEqual([...cats].sort());
      for (const l of s.legend) {
        expect(l.text.length).toBeGreaterThan(3);
        expect(l.width).toBeGreaterThan(0);
      }
      expect(s.spans).toBeGreaterThan(0);
      expect(s.untitled).toBe(0);
      expect(s.cutWithoutFullTitle).toEqual([]);
      expect(s.overflowing).toEqual([]);
    }
    expect(seen[0]!.cut + seen[1]!.cut).toBeGreaterThan(0); // the kernels' long names are cut somewhere
  });
});
