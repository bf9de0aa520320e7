// The README's and the guides' TypeScript runs as pasted, so it cannot rot. Every ```ts block of
// README.md and of every page under docs/ is extracted, written unchanged to a file of a scratch
// project whose node_modules/bungpu is this checkout (so `from "bungpu"` resolves as it does for a
// user; no line is added or rewritten), and:
//
// - type-checked, all blocks together, under examples/starter/tsconfig.json (bun init's strict
//   flags, as a new user project has them): zero errors;
// - run in its own subprocess with a time limit: exit code 0, nothing on stderr. The only
//   environment added is what the block's own text asks for with "run with NAME=value" (a
//   BUNGPU_* variable), e.g. the several-devices block's BUNGPU_CPU_DEVICES=2;
// - where its console.log lines end in a comment (`console.log(x); // 42`), every console.log of
//   the block must have one, and the output must be those comments in order, one per call. A
//   comment is the printed line, optionally followed by ": " and a note ("staged: no peer access
//   yet"); "…" in it stands for any text (what differs by machine, such as a device's name). A
//   value Bun prints over several lines (an object) is compared as one line, `{ a: 1, b: 2 }`.
//
// A block whose first line is "// needs a GPU" is type-checked everywhere and run only where a
// CUDA or Metal device opens; here that is said in the test's name, never skipped silently.
//
// Also: README stays under 350 lines and holds each set-up command once; every relative link of
// README.md, CONTRIBUTING.md and docs/**/*.md names a file that exists (and a heading there, for a
// #fragment); the sh blocks' `bun run <file>` name files that exist, with flags the file reads.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { Device } from "../src";

const root = resolve(import.meta.dir, "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const GPU_MARK = "// needs a GPU";

interface Block {
  file: string; // the markdown file, relative to the root: README.md, docs/guide/ipc.md, …
  index: number; // the block's place in that file
  line: number; // the file's line of the first line of code
  code: string;
}

/** The ```ts blocks of a markdown text, in order. */
function tsBlocks(md: string, file = "README.md"): Block[] {
  const out: Block[] = [];
  const re = /^```ts\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(md); m; m = re.exec(md)) {
    out.push({ file, index: out.length, line: md.slice(0, m.index).split("\n").length + 1, code: m[1]! });
  }
  return out;
}

/** The markdown files under a folder, relative to the root, sorted. */
function markdownUnder(folder: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(root, folder), { withFileTypes: true })) {
    const rel = `${folder}/${e.name}`;
    if (e.isDirectory()) out.push(...markdownUnder(rel));
    else if (e.name.endsWith(".md")) out.push(rel);
  }
  return out.sort();
}

/** A markdown text without its fenced code blocks (the lines kept, blanked, so line numbers hold). */
function withoutCode(md: string): string {
  return md.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, (b) => b.replace(/[^\n]/g, ""));
}

/** GitHub's anchors for the headings of a markdown text. */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of withoutCode(md).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = m[1]!.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/ /g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

/** "run with BUNGPU_X=1 BUNGPU_Y=2" in the block's text: the environment it asks for. */
function blockEnv(code: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const m of code.matchAll(/run with ((?:BUNGPU_[A-Z0-9_]+=[^\s,;)]+(?:\s+|(?=[,;)]|$)))+)/gm))
    for (const kv of m[1]!.trim().split(/\s+/)) {
      const [k, v] = kv.split("=") as [string, string];
      env[k] = v;
    }
  return env;
}

/**
 * What the block says it prints: for each console.log line, its trailing comment; null when no
 * console.log has one. A block that comments some calls and not others is an error.
 */
function expectedOutput(code: string): string[] | null {
  const calls = code.split("\n").filter((l) => /\bconsole\.log\(/.test(l));
  const comments = calls.map((l) => /\bconsole\.log\(.*\);?\s*\/\/ (.+)$/.exec(l)?.[1]?.trim() ?? null);
  if (comments.every((c) => c === null)) return null;
  const missing = calls.filter((_, i) => comments[i] === null);
  if (missing.length) throw new Error(`comment every console.log of the block or none; no comment on:\n${missing.join("\n")}`);
  return comments as string[];
}

/** Output lines, a value Bun printed over several lines (indented lines, a closing bracket) joined into one. */
function outputLines(stdout: string): string[] {
  const lines: string[] = [];
  for (const l of stdout.replace(/\n$/, "").split("\n")) {
    if (lines.length && (/^\s/.test(l) || /^[}\]]/.test(l))) lines[lines.length - 1] += " " + l.trim();
    else lines.push(l);
  }
  return lines.map((l) => l.replace(/\s+/g, " ").replace(/,\s*([}\]])/g, " $1"));
}

/** Whether a printed line is what a comment says: the whole comment, or the part before a ": " note. */
function matchesComment(printed: string, comment: string): boolean {
  const full = (e: string) => new RegExp(`^${e.split("…").map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`, "s").test(printed);
  if (full(comment)) return true;
  for (let i = comment.indexOf(": "); i >= 0; i = comment.indexOf(": ", i + 1)) if (i > 0 && full(comment.slice(0, i))) return true;
  return false;
}

const readme = readFileSync(join(root, "README.md"), "utf8");
const guides = markdownUnder("docs");
const docs = ["README.md", ...guides];
const blocks = docs.flatMap((f) => tsBlocks(readFileSync(join(root, f), "utf8"), f));
const gpuHere = Device.backends().some((b) => b.backend !== "cpu" && b.devices > 0);

const dir = mkdtempSync(join(tmpdir(), "bungpu-readme-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const nm = join(dir, "node_modules");
mkdirSync(nm);
symlinkSync(root, join(nm, "bungpu"), "dir");
for (const dep of ["@types", "bun-types", "undici-types"]) symlinkSync(join(root, "node_modules", dep), join(nm, dep), "dir");
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "readme-blocks", type: "module", private: true }));
const starterConfig = JSON.parse(readFileSync(join(root, "examples", "starter", "tsconfig.json"), "utf8")) as { compilerOptions: object };
writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: starterConfig.compilerOptions, include: ["blocks/*.ts"] }, null, 2));
const fileOf = (b: Block) =>
  join(dir, "blocks", `${b.file.replace(/\.md$/, "").replace(/[^A-Za-z0-9]+/g, "_")}_block${String(b.index).padStart(2, "0")}_line${b.line}.ts`);
mkdirSync(join(dir, "blocks"));
for (const b of blocks) writeFileSync(fileOf(b), b.code);

describe("the rules this test applies to README blocks", () => {
  test("output comments: a wrong value fails, a note after ': ' and '…' are allowed", () => {
    expect(matchesComment("3", "3")).toBe(true);
    expect(matchesComment("3", "4")).toBe(false);
    expect(matchesComment("staged", "staged: no peer access yet")).toBe(true);
    expect(matchesComment("peer", "staged: no peer access yet")).toBe(false);
    expect(matchesComment('Device(cpu, "Some CPU", backend cpu, index 0)', 'Device(cpu, "…", backend cpu, index 0)')).toBe(true);
    expect(matchesComment('Device(cuda, "Some GPU", backend cuda, index 0)', 'Device(cpu, "…", backend cpu, index 0)')).toBe(false);
    expect(outputLines("{\n  a: 1,\n  b: [ 2 ],\n}\nx\n")).toEqual(["{ a: 1, b: [ 2 ] }", "x"]);
    expect(() => expectedOutput("console.log(1); // 1\nconsole.log(2);")).toThrow("comment every console.log");
    expect(expectedOutput("console.log(1);\n")).toBeNull();
    expect(blockEnv("// two CPU devices: run with BUNGPU_CPU_DEVICES=2 (on two GPUs)")).toEqual({ BUNGPU_CPU_DEVICES: "2" });
  });

  test("README and the guides have ts blocks, and the blocks are written unchanged", () => {
    expect(blocks.filter((b) => b.file === "README.md").length).toBeGreaterThanOrEqual(4);
    expect(blocks.filter((b) => b.file.startsWith("docs/")).length).toBeGreaterThanOrEqual(10);
    expect(new Set(blocks.map(fileOf)).size).toBe(blocks.length);
    for (const b of blocks) expect(readFileSync(fileOf(b), "utf8")).toBe(b.code);
  });

  test("anchors are GitHub's", () => {
    expect([...anchors("# Serving requests: `plan.run`\n## Collectives: `Communicator`\n## A b\n## A b\n```\n# not a heading\n```\n")]).toEqual([
      "serving-requests-planrun",
      "collectives-communicator",
      "a-b",
      "a-b-1",
    ]);
  });
});

test("every README and guide ts block type-checks under the starter's strict tsconfig", () => {
  const r = Bun.spawnSync([process.execPath, tsc, "-p", dir, "--pretty", "false"], { cwd: dir, timeout: 120_000, stdout: "pipe", stderr: "pipe" });
  const out = (r.stdout.toString() + r.stderr.toString()).trim();
  expect(out).toBe("");
  expect(r.exitCode).toBe(0);
}, 120_000);

describe("every README and guide ts block runs as pasted", () => {
  for (const b of blocks) {
    const first = b.code.split("\n")[0]!.trim();
    const gpu = first.startsWith(GPU_MARK);
    // Under the CUDA driver simulator (BUNGPU_LIBCUDA set: test/sim_suite.sh) device memory cannot
    // leave its process, so the two-process IPC block runs on the CPU backend there, and says so.
    const simIpc = !!process.env.BUNGPU_LIBCUDA && b.code.includes("openSharedBuffer");
    const env = { ...blockEnv(b.code), ...(simIpc ? { BUNGPU_DEVICE: "cpu" } : {}) };
    const envText = Object.entries(env).map(([k, v]) => ` with ${k}=${v}`).join("");
    const name = `${b.file} block ${b.index} (line ${b.line}: ${first.slice(0, 60)})${envText}`;
    if (gpu && !gpuHere) {
      test(`${name}: type-checked only, no CUDA or Metal device here`, () => {
        expect(readFileSync(fileOf(b), "utf8")).toBe(b.code); // checked by the type-check test above
      });
      continue;
    }
    test(name, async () => {
      const want = expectedOutput(b.code);
      const p = Bun.spawn([process.execPath, fileOf(b)], { cwd: dir, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
      const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
      if (!want) return;
      const got = outputLines(stdout);
      expect(got.length).toBe(want.length);
      const wrong = want.flatMap((c, i) => (matchesComment(got[i]!, c) ? [] : [`printed: ${got[i]}\ncomment: ${c}`]));
      expect(wrong).toEqual([]);
    }, 90_000);
  }
});

test("the IPC guide's block is examples/ipc.ts (which test/ipc.test.ts runs), line for line but the import", () => {
  const block = blocks.find((b) => b.code.includes("openSharedBuffer"));
  expect(block?.file).toBe("docs/guide/ipc.md");
  const file = readFileSync(join(root, "examples", "ipc.ts"), "utf8");
  const code = file.split("\n").filter((l) => !l.startsWith("//")).join("\n").replace(`from "../src/index"`, `from "bungpu"`);
  expect(block!.code.trim()).toBe(code.trim());
});

test("the README's set-up commands are what .ci/run and package.json run", () => {
  const sh = [...readme.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  const setup = sh.find((b) => b.includes("npm install -g bun@"));
  expect(setup).toBeDefined();
  const commands = setup!.split("\n").filter((l) => l.trim() && !l.startsWith("#"));
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string>; devDependencies: Record<string, string> };
  const ci = readFileSync(join(root, ".ci", "run"), "utf8");
  const bunVersion = /npm install -g bun@([\d.]+)/.exec(ci)![1]!;
  expect(pkg.devDependencies["@types/bun"]).toBe(bunVersion);
  expect(pkg.scripts["test"]).toBe("bun test --timeout 60000");
  expect(ci).toContain("bun install");
  expect(ci).toContain(`\n${pkg.scripts["test"]} 2>&1`);
  expect(commands).toEqual([
    `npm install -g bun@${bunVersion} && bun install && bun run demo`,
    `npm install -g bun@${bunVersion} && bun install && ${pkg.scripts["test"]}`,
  ]);
  expect(pkg.scripts["demo"]).toBe("bun run examples/demo.ts");
});

test("README is under 350 lines, and holds each set-up command once (no guide repeats them)", () => {
  expect(readme.split("\n").length).toBeLessThan(350);
  expect(readme.match(/npm install -g bun@/g)?.length).toBe(2);
  for (const f of guides) expect(readFileSync(join(root, f), "utf8")).not.toContain("npm install -g bun@");
});

test("every relative link of README, CONTRIBUTING and docs/ names a file that exists, and a heading there", () => {
  const broken: string[] = [];
  let links = 0;
  for (const f of [...docs, "CONTRIBUTING.md"]) {
    const md = readFileSync(join(root, f), "utf8");
    for (const m of withoutCode(md).matchAll(/\]\(([^)\s]+)\)/g)) {
      const href = m[1]!;
      if (/^[a-z]+:/i.test(href)) continue; // https:, mailto:
      links++;
      const [path, fragment] = href.split("#") as [string, string | undefined];
      const target = path ? resolve(root, dirname(f), path) : join(root, f);
      const where = `${f}: ${href}`;
      if (!target.startsWith(root + "/") || !existsSync(target)) broken.push(`${where} (no such file)`);
      else if (fragment !== undefined && (!target.endsWith(".md") || !anchors(readFileSync(target, "utf8")).has(fragment)))
        broken.push(`${where} (no heading #${fragment} in ${relative(root, target)})`);
    }
  }
  expect(broken).toEqual([]);
  expect(links).toBeGreaterThanOrEqual(30);
});

test("the sh blocks' `bun run <file>` commands name files that exist, with flags the file reads", () => {
  const wrong: string[] = [];
  for (const f of docs) {
    const md = readFileSync(join(root, f), "utf8");
    for (const m of md.matchAll(/^```sh\n([\s\S]*?)^```$/gm))
      for (const line of m[1]!.split("\n")) {
        const cmd = /\bbun run ((?:examples|bench|scripts)\/\S+\.ts)(.*)$/.exec(line.replace(/\s+#.*$/, ""));
        if (!cmd) continue;
        const file = join(root, cmd[1]!);
        if (!existsSync(file)) {
          wrong.push(`${f}: ${line} (no ${cmd[1]})`);
          continue;
        }
        const text = readFileSync(file, "utf8");
        for (const flag of cmd[2]!.match(/--[a-z][a-z-]*/g) ?? []) if (!text.includes(`"${flag}"`)) wrong.push(`${f}: ${line} (${cmd[1]} reads no ${flag})`);
      }
  }
  expect(wrong).toEqual([]);
});
