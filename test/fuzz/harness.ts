// Runs fuzz batches in subprocesses (test/fuzz/run.ts), each with a time limit; on a failure
// (a crash, a hang, a non-GpuError throw, an accepted invalid call, a corrupted byte) it shrinks
// the recorded steps by delta debugging, each candidate replayed in a fresh subprocess, and
// returns the minimal sequence as TypeScript-looking lines.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const RUN = join(import.meta.dir, "run.ts");

export interface BatchResult {
  ok: boolean;
  /** "crash", "hang", or the driver's failure kind */
  kind?: string;
  message?: string;
  summary?: { steps: number; calls: number; rejected: number; checks: number; ms: number; backend: string; devices: string[]; skipped: string[] };
  /** the minimal failing sequence, as TypeScript-looking lines */
  minimal?: string;
  steps?: number;
  recorded?: number;
  wallMs: number;
}

export interface BatchOptions {
  seed: number;
  calls: number;
  exclude?: readonly string[];
  timeoutMs?: number;
  /** time allowed for shrinking a failure (default 60 s) */
  shrinkMs?: number;
  /** BUNGPU_CHECK=1: guard pages around allocations, a fault in a kernel a sticky error (CPU only) */
  checked?: boolean;
  /** "cuda": cuda:0 and cuda:1 (FUZZ_BACKEND=cuda for run.ts; CUDASIM_DEVICES=2 for the simulator) */
  backend?: "cpu" | "cuda";
}

let checkedMode = false;
let backend: "cpu" | "cuda" = "cpu";
function env(): Record<string, string> {
  const e = { ...process.env } as Record<string, string>;
  e.BUNGPU_CPU_DEVICES = "3"; // cpu:0 and cpu:1 for every handler, cpu:2 for a third rank of communicators
  if (backend === "cuda") {
    // cuda:0 and cuda:1; tensors realize on cuda:0. On the driver simulator (BUNGPU_LIBCUDA, as
    // test/sim_suite.sh sets it) two devices are asked for; a GPU machine needs two GPUs.
    e.FUZZ_BACKEND = "cuda";
    e.BUNGPU_DEVICE = "cuda:0";
    if (!e.CUDASIM_DEVICES || Number(e.CUDASIM_DEVICES) < 2) e.CUDASIM_DEVICES = "2";
  } else {
    delete e.FUZZ_BACKEND;
    delete e.BUNGPU_DEVICE;
  }
  if (checkedMode && backend === "cpu") e.BUNGPU_CHECK = "1";
  else delete e.BUNGPU_CHECK;
  return e;
}

interface Outcome {
  kind: string | null; // null: passed
  message: string;
  json?: Record<string, unknown>;
  stdout: string;
}

function runChild(args: string[], timeoutMs: number): Outcome {
  const r = Bun.spawnSync([process.execPath, RUN, ...args], { env: env(), stdout: "pipe", stderr: "pipe", timeout: timeoutMs });
  const stdout = r.stdout.toString();
  const last = stdout.trim().split("\n").pop() ?? "";
  let json: Record<string, unknown> | undefined;
  try {
    if (last.startsWith("{")) json = JSON.parse(last);
  } catch {}
  if (r.exitCode === 0 && json?.ok) return { kind: null, message: "", json, stdout };
  if (json && json.ok === false) return { kind: String(json.kind), message: String(json.message), json, stdout };
  const timedOut = r.signalCode === "SIGTERM" || r.signalCode === "SIGKILL" || (r as { exitedDueToTimeout?: boolean }).exitedDueToTimeout;
  if (timedOut) return { kind: "hang", message: `no result within ${timeoutMs} ms`, stdout };
  const err = r.stderr.toString();
  const line = err.split("\n").find((l) => /panic|error|Segmentation|abort/i.test(l)) ?? "";
  return { kind: "crash", message: `exit ${r.exitCode} signal ${r.signalCode ?? "none"} ${line.trim()}`.trim(), stdout };
}

function readSteps(file: string): number[][] {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

/** Delta debugging (ddmin) over the step list, bounded by time. */
function shrink(steps: number[][], fails: (s: number[][]) => boolean, deadline: number): number[][] {
  let cur = steps;
  let n = 2;
  while (cur.length >= 2 && Date.now() < deadline) {
    const chunk = Math.ceil(cur.length / n);
    let reduced = false;
    for (let i = 0; i < n && Date.now() < deadline; i++) {
      const without = cur.slice(0, i * chunk).concat(cur.slice((i + 1) * chunk));
      if (without.length && fails(without)) {
        cur = without;
        n = Math.max(n - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (n >= cur.length) break;
      n = Math.min(cur.length, n * 2);
    }
  }
  return cur;
}

export function runBatch(o: BatchOptions): BatchResult {
  const t0 = Date.now();
  checkedMode = !!o.checked;
  backend = o.backend ?? "cpu";
  const timeoutMs = o.timeoutMs ?? 60_000;
  const dir = mkdtempSync(join(tmpdir(), "bungpu-fuzz-"));
  try {
    const base = ["--seed", String(o.seed), "--calls", String(o.calls)];
    if (o.exclude?.length) base.push("--exclude", o.exclude.join(","));
    const rec = join(dir, "steps.jsonl");
    const first = runChild([...base, "--record", rec], timeoutMs);
    if (first.kind === null) {
      const j = first.json as unknown as BatchResult["summary"];
      return { ok: true, summary: j, wallMs: Date.now() - t0 };
    }
    // a crash or hang lost the record: run again, writing each step before it runs
    let steps = readSteps(rec);
    if (!steps.length) {
      runChild([...base, "--record", rec, "--record-sync"], timeoutMs);
      steps = readSteps(rec);
    }
    const exclude = o.exclude?.length ? ["--exclude", o.exclude.join(",")] : [];
    const file = join(dir, "candidate.json");
    const replay = (s: number[][], extra: string[] = []) => {
      writeFileSync(file, JSON.stringify(s));
      return runChild(["--replay", file, ...exclude, ...extra], Math.min(timeoutMs, 30_000));
    };
    const same = (x: Outcome) => {
      if (process.env.FUZZ_DEBUG) console.error("candidate:", x.kind, x.message.slice(0, 100));
      return x.kind === first.kind;
    };
    let minimal = steps;
    // the failure to shrink is the one the full recorded list gives on replay (a race may make a
    // replay fail another way than the first run did)
    // a crash from a race may need a few tries to show again
    let full = steps.length ? replay(steps) : null;
    for (let i = 0; i < 4 && full && !full.kind; i++) full = replay(steps);
    if (full?.kind && full.kind !== first.kind) {
      first.kind = full.kind;
      first.message = full.message;
    }
    if (full?.kind) {
      const tries = first.kind === "crash" || first.kind === "hang" ? 3 : 1;
      minimal = shrink(steps, (s) => {
        for (let i = 0; i < tries; i++) if (same(replay(s))) return true;
        return false;
      }, Date.now() + (o.shrinkMs ?? 60_000));
    }
    const printed = replay(minimal, ["--print"]);
    const lines = printed.stdout.split("\n").filter((l) => !l.startsWith("{"));
    return {
      ok: false,
      recorded: steps.length,
      kind: first.kind,
      message: first.message,
      steps: minimal.length,
      minimal: `// seed ${o.seed}${backend === "cuda" ? " (FUZZ_BACKEND=cuda)" : ""}${o.checked && backend === "cpu" ? " (BUNGPU_CHECK=1)" : ""}: ${first.kind}: ${first.message}\n// replayed: ${printed.kind ?? "passed"} ${printed.message}\n${lines.join("\n")}`,
      wallMs: Date.now() - t0,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// bun test/fuzz/harness.ts [--seed S] [--batches B] [--calls N] [--exclude a,b] [--checked] [--backend cuda]
if (import.meta.main) {
  const a = process.argv.slice(2);
  const get = (n: string, d: string) => (a.includes(`--${n}`) ? a[a.indexOf(`--${n}`) + 1]! : d);
  const seed = Number(get("seed", "1")), batches = Number(get("batches", "1")), calls = Number(get("calls", "20000"));
  const exclude = get("exclude", "").split(",").filter(Boolean);
  const checked = a.includes("--checked");
  const be = get("backend", "cpu") === "cuda" ? "cuda" : "cpu";
  let bad = 0;
  for (let i = 0; i < batches; i++) {
    const r = runBatch({ seed: seed + i, calls, exclude, timeoutMs: 120_000, checked, backend: be });
    console.log(JSON.stringify({ seed: seed + i, ok: r.ok, kind: r.kind, message: r.message, recorded: r.recorded, minimalSteps: r.steps, ...r.summary, wallMs: r.wallMs }));
    if (!r.ok) {
      bad++;
      console.log(r.minimal);
    }
  }
  process.exit(bad ? 1 : 0);
}
