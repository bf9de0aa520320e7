// The house docs/ARCHITECTURE.md draws, held against the code: arrows run down only (ffi/ never
// imports src/, src/ never touches the raw symbol table), no circle of imports in src/ or ffi/,
// and no file over about 600 lines without a reason written at its top.
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { canReadCalls, cCallGraph, circles } from "./c_calls";

const root = resolve(import.meta.dir, "..");

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (name !== "prebuilt") out.push(...tsFiles(p));
    } else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** Relative imports of a file (`import … from`, `export … from`, side-effect imports), resolved
 * to files; `typeOnly` marks `import type` / `export type`, which leave no arrow at run time. */
function importsOf(file: string): { to: string; typeOnly: boolean }[] {
  const text = readFileSync(file, "utf8");
  const out: { to: string; typeOnly: boolean }[] = [];
  const re = /^\s*(import|export)\s+(type\s+)?([^;'"]*?\bfrom\s+)?["'](\.{1,2}\/[^"']+)["']/gm;
  for (let m; (m = re.exec(text)); ) {
    const spec = m[4]!;
    const base = resolve(dirname(file), spec);
    const cands = [base, `${base}.ts`, join(base, "index.ts")];
    const to = cands.find((c) => existsSync(c) && statSync(c).isFile());
    if (to) out.push({ to, typeOnly: Boolean(m[2]) });
  }
  return out;
}

function cycles(files: string[]): string[][] {
  const set = new Set(files);
  const edges = new Map<string, string[]>();
  for (const f of files) edges.set(f, importsOf(f).filter((i) => set.has(i.to)).map((i) => i.to));
  return circles(edges).map((c) => c.map((p) => relative(root, p)));
}

const src = tsFiles(join(root, "src"));
const ffi = tsFiles(join(root, "ffi"));

describe("the house", () => {
  test("ffi/ imports nothing from src/", () => {
    const up = ffi.flatMap((f) => importsOf(f).filter((i) => i.to.startsWith(join(root, "src"))).map((i) => `${relative(root, f)} -> ${relative(root, i.to)}`));
    expect(up).toEqual([]);
  });

  test("src/ calls the result layer, never the raw symbol table or its scratch slots", () => {
    const raw = src.filter((f) => importsOf(f).some((i) => i.to === join(root, "ffi/native.ts"))).map((f) => relative(root, f));
    expect(raw).toEqual([]);
    const calls = src.filter((f) => /\bN\.bg_/.test(readFileSync(f, "utf8"))).map((f) => relative(root, f));
    expect(calls).toEqual([]);
  });

  test("no circle of imports in src/ or ffi/ (type-only imports included)", () => {
    expect(cycles([...src, ...ffi])).toEqual([]);
  });

  test("no file over about 600 lines without a reason at its top", () => {
    const long = [...src, ...ffi]
      .filter((f) => !f.endsWith("constants.ts"))
      .filter((f) => {
        const lines = readFileSync(f, "utf8").split("\n");
        if (lines.length <= 620) return false;
        // The reason is a comment in the first lines that says why the file stays one file.
        return !/one file|stays whole|over 600|why it is long|one class/i.test(lines.slice(0, 30).join("\n"));
      })
      .map((f) => relative(root, f));
    expect(long).toEqual([]);
  });

  test("the walker sees imports (a check that would pass on an empty graph proves nothing)", () => {
    const dev = importsOf(join(root, "src/device.ts")).map((i) => relative(root, i.to));
    expect(dev).toContain("src/buffer.ts");
    expect(cycles([join(root, "test/fixtures/cycle_a.ts"), join(root, "test/fixtures/cycle_b.ts")]).length).toBe(1);
  });
});

describe("the command format has one definition and one decoder", () => {
  const shimFiles = (dir: string): string[] =>
    readdirSync(dir).flatMap((n) => {
      const p = join(dir, n);
      if (statSync(p).isDirectory()) return n === "test" ? [] : shimFiles(p);
      return /\.(c|h)$/.test(n) ? [p] : [];
    });

  test("no BG_CMD_* record is read by raw offset outside shim/commands.c", () => {
    const offenders: string[] = [];
    for (const f of shimFiles(join(root, "shim"))) {
      if (f.endsWith("commands.c") || f.endsWith("bungpu.h")) continue;
      const text = readFileSync(f, "utf8");
      // A raw decode reads words at byte offsets of a command: rd32(c + 8), bg_rd64(p + off + 4)…
      for (const [i, line] of text.split("\n").entries())
        if (/\b(bg_)?rd(32|64)\s*\(\s*(c|p|cmd|bytes)\s*\+/.test(line)) offenders.push(`${relative(root, f)}:${i + 1}`);
    }
    expect(offenders).toEqual([]);
  });

  test("TypeScript takes command tags and record offsets from the generated constants", () => {
    const text = readFileSync(join(root, "src/commands.ts"), "utf8");
    expect(text).toMatch(/from "\.\.\/ffi\/(constants|sys|result)"/);
    // No second encoder: only commands.ts writes command tags.
    const writers = src.filter((f) => !f.endsWith("commands.ts") && /\bCMD\.(LAUNCH|COPY|MEMSET|BARRIER)\b|Cmd\.(LAUNCH|COPY|MEMSET|BARRIER)\b/.test(readFileSync(f, "utf8")));
    expect(writers.map((f) => relative(root, f))).toEqual([]);
  });
});

describe("the shim's files call down, never round (C)", () => {
  // what each file of shim/ calls, read from the compiled objects (test/c_calls.ts)
  let memo: Map<string, string[]> | undefined;
  const graph = () => (memo ??= cCallGraph());
  const folder = (f: string) => (f.includes("/") ? f.slice(0, f.indexOf("/")) : "");
  const skip = !canReadCalls;

  test.skipIf(skip)("no circle of calls between the files of shim/", () => {
    expect(circles(graph())).toEqual([]);
  }, 60_000);

  test.skipIf(skip)("each file's header ends with what it calls: `Calls: a.c, b.c.` (names in its folder, else from shim/)", () => {
    const wrong: string[] = [];
    for (const [f, to] of graph()) {
      const text = readFileSync(join(root, "shim", f), "utf8");
      const head = text.slice(0, text.indexOf("*/"));
      const m = /\* Calls: ([\s\S]*?)\.\n/.exec(head);
      if (!m) {
        wrong.push(`${f}: no "Calls:" line in its header`);
        continue;
      }
      const said = [...m[1]!.matchAll(/[\w/]+\.c\b/g)].map(([n]) => {
        const near = folder(f) ? `${folder(f)}/${n}` : n;
        return existsSync(join(root, "shim", near)) ? near : n;
      });
      if (JSON.stringify([...said].sort()) !== JSON.stringify(to)) wrong.push(`${f}: says ${said.join(", ") || "nothing"}, calls ${to.join(", ") || "nothing"}`);
    }
    expect(wrong).toEqual([]);
  }, 60_000);

  test.skipIf(skip)("in each folder, in the order docs/ARCHITECTURE.md lists its files, a file calls only those before it", () => {
    const doc = readFileSync(join(root, "docs/ARCHITECTURE.md"), "utf8").split("\n");
    const listed = (row: string) => [...new Set([...doc.find((l) => l.startsWith(row))!.matchAll(/`([\w]+\.c)`/g)].map((m) => m[1]!))];
    const rows: [string, string][] = [["cpu", "| CPU |"], ["cuda", "| CUDA |"], ["metal", "| Metal |"]];
    const wrong: string[] = [];
    for (const [dir, row] of rows) {
      const order = listed(row).map((n) => `${dir}/${n}`);
      const files = [...graph().keys()].filter((f) => folder(f) === dir);
      expect([dir, [...order].sort()]).toEqual([dir, files.sort()]);
      for (const f of order)
        for (const t of graph().get(f)!) if (folder(t) === dir && order.indexOf(t) > order.indexOf(f)) wrong.push(`${f} calls ${t}, listed after it`);
    }
    // the core's row lists its files top down: each calls only files below it
    const core = listed("| `shim/` |");
    expect(core).toEqual(["api.c", "multi.c", "graphs.c", "rings.c", "pools.c", "backends.c", "commands.c", "base.c"]);
    for (const f of core) for (const t of graph().get(f)!) if (!folder(t) && core.indexOf(t) < core.indexOf(f)) wrong.push(`${f} calls ${t}, listed before it`);
    expect(wrong).toEqual([]);
  }, 60_000);

  test.skipIf(skip)("a backend calls only base.c and commands.c of the core; the core names a backend only in backends.c's table", () => {
    const wrong: string[] = [];
    for (const [f, to] of graph())
      for (const t of to) {
        if (folder(f) && folder(t) !== folder(f) && t !== "base.c" && t !== "commands.c") wrong.push(`${f} -> ${t}`);
        if (!folder(f) && folder(t) && f !== "backends.c") wrong.push(`${f} -> ${t}`);
      }
    expect(wrong).toEqual([]);
    expect(graph().get("backends.c")).toEqual(["cpu/device.c", "cuda/device.c", "metal/backend.c"]);
  }, 60_000);

  test.skipIf(skip)("the reader sees calls (a check that would pass on an empty graph proves nothing)", () => {
    expect(graph().get("cpu/stream.c")).toContain("cpu/run.c");
    expect(graph().get("cuda/release.c")).toEqual(["cuda/driver.c"]); // a table read (`cu`) counts
    const fx = join(root, "test/fixtures");
    expect(circles(cCallGraph(fx, ["c_cycle_a.c", "c_cycle_b.c"]))).toEqual([["c_cycle_a.c", "c_cycle_b.c"]]);
  }, 60_000);

  test("no file of shim/ over about 600 lines without a reason in its first comment", () => {
    const long: string[] = [];
    const walk = (dir: string): void => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) {
          if (e.name !== "test") walk(p);
        } else if (/\.[ch]$/.test(e.name)) {
          const text = readFileSync(p, "utf8");
          if (text.split("\n").length <= 620) continue;
          const first = text.slice(0, text.indexOf("*/"));
          if (!/one file|stays whole|over 600|why it is long/i.test(first)) long.push(relative(root, p));
        }
      }
    };
    walk(join(root, "shim"));
    expect(long).toEqual([]);
  });
});
