// What each file of shim/ calls, for test/architecture.test.ts: every library source compiled on
// its own, the external symbols each object defines and the ones it needs (`nm`). File A calls
// file B where A's object needs a function or table B's defines: a call, a function named in a
// vtable, or a table read (cuda/driver.c's `cu`); the functions of headers that A uses count as
// A's. Calls through function pointers the file did not name itself are not arrows: the core
// reaches the backends through the table's records only. Metal is read as on macOS (-D__APPLE__),
// the rest as on this platform.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { SHIM_DIR, shimSources } from "../ffi/shimsrc";

export const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const nmTool = Bun.which("nm");
export const canReadCalls = Boolean(cc && nmTool && process.platform !== "win32");

function symbols(obj: string, flag: "-u" | "--defined-only"): string[] {
  const args = flag === "-u" ? ["-u"] : ["-g", "--defined-only"];
  const out = Bun.spawnSync([nmTool!, ...args, obj], { stdout: "pipe" }).stdout.toString();
  // "addr T name" or "U name"; Mach-O names carry a leading underscore, as both sides do
  return [...out.matchAll(/^\s*(?:[0-9a-fA-F]+\s+)?([A-Za-z])\s+(\S+)$/gm)].filter((m) => (flag === "-u" ? m[1] === "U" : m[1] !== "U")).map((m) => m[2]!);
}

/** file -> the files it calls, relative to `dir` (default shim/), sorted. */
export function cCallGraph(dir = SHIM_DIR, files = shimSources()): Map<string, string[]> {
  const work = mkdtempSync(join(tmpdir(), "bg-calls-"));
  try {
    const objs = files.map((f, i) => {
      const obj = join(work, `${i}.o`);
      const flags = f.startsWith("metal/") ? ["-D__APPLE__"] : [];
      const b = Bun.spawnSync([cc!, "-std=c11", "-O0", "-w", "-c", `-I${dir}`, `-I${dirname(join(dir, f))}`, ...flags, join(dir, f), "-o", obj], { stderr: "pipe" });
      if (b.exitCode !== 0) throw new Error(`${cc} -c ${f}: ${b.stderr.toString()}`);
      return obj;
    });
    const owner = new Map<string, string>();
    files.forEach((f, i) => {
      for (const s of symbols(objs[i]!, "--defined-only")) owner.set(s, f);
    });
    const graph = new Map<string, string[]>();
    files.forEach((f, i) => {
      const to = new Set<string>();
      for (const s of symbols(objs[i]!, "-u")) {
        const o = owner.get(s);
        if (o && o !== f) to.add(o);
      }
      graph.set(f, [...to].sort());
    });
    return graph;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The circles of a graph of files: each as the files on it, in call order. */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const visit = (f: string): void => {
    state.set(f, 1);
    stack.push(f);
    for (const t of graph.get(f) ?? []) {
      if (state.get(t) === 1) found.push(stack.slice(stack.indexOf(t)));
      else if (!state.has(t)) visit(t);
    }
    stack.pop();
    state.set(f, 2);
  };
  for (const f of graph.keys()) if (!state.has(f)) visit(f);
  return found;
}

if (import.meta.main) for (const [f, to] of cCallGraph()) console.log(`${f} -> ${to.join(" ")}`);
