// examples/starter as a user gets it: copied to a fresh folder, the bungpu tarball that `bun pm pack`
// makes from this checkout put where the starter's package.json points (its file: placeholder,
// unchanged), `bun install` run with the registry unreachable (a file: dependency installs
// offline; the copy's devDependencies, @types/bun and typescript from the registry, are dropped and
// the checkout's own linked instead, as bun resolves even skipped ones online), then `bun run index.ts` with a time limit,
// its numbers checked against a float64 reference, and tsc run on it with its own strict tsconfig.
import { afterAll, describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dir, "..");
const starter = join(root, "examples", "starter");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const dir = mkdtempSync(join(tmpdir(), "bungpu-starter-"));
const app = join(dir, "app");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** relu(x · w) in float64, x [2, 3] row-major, w [3, 2]. */
function reference(x: number[], w: number[]): number[] {
  const y: number[] = [];
  for (let r = 0; r < 2; r++)
    for (let c = 0; c < 2; c++) {
      let s = 0;
      for (let k = 0; k < 3; k++) s += x[r * 3 + k]! * w[k * 2 + c]!;
      y.push(Math.max(0, s));
    }
  return y;
}

describe("examples/starter, copied, installed from the packed tarball offline, run", () => {
  const pkg = JSON.parse(readFileSync(join(starter, "package.json"), "utf8")) as { dependencies: Record<string, string> };
  const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;

  test("its dependency names the tarball `bun pm pack` makes of this version", () => {
    expect(pkg.dependencies["bungpu"]).toBe(`file:./bungpu-${version}.tgz`);
  });

  test("bun install works with the registry unreachable, and index.ts prints relu(x · w)", async () => {
    cpSync(starter, app, { recursive: true, filter: (src) => !src.includes("node_modules") });
    const pack = Bun.spawnSync(["bun", "pm", "pack", "--destination", app], { cwd: root, stdout: "pipe", stderr: "pipe", timeout: 120_000 });
    expect(pack.exitCode).toBe(0);
    expect(readdirSync(app).filter((f) => f.endsWith(".tgz"))).toEqual([`bungpu-${version}.tgz`]);

    const offline = JSON.parse(readFileSync(join(app, "package.json"), "utf8")) as Record<string, unknown>;
    expect(Object.keys(offline["devDependencies"] as object).sort()).toEqual(["@types/bun", "typescript"]);
    delete offline["devDependencies"];
    writeFileSync(join(app, "package.json"), JSON.stringify(offline, null, 2));
    const env = { ...process.env, BUN_CONFIG_REGISTRY: "http://127.0.0.1:9/", npm_config_registry: "http://127.0.0.1:9/" };
    const install = Bun.spawnSync(["bun", "install"], { cwd: app, env, stdout: "pipe", stderr: "pipe", timeout: 120_000 });
    expect({ code: install.exitCode, err: install.exitCode ? install.stderr.toString() : "" }).toEqual({ code: 0, err: "" });
    expect(existsSync(join(app, "node_modules", "bungpu", "src", "index.ts"))).toBe(true);

    const run = Bun.spawn(["bun", "run", "index.ts"], { cwd: app, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited]);
    expect({ code, err }).toEqual({ code: 0, err: "" });
    const lines = out.trim().split("\n");
    expect(lines.length).toBe(3);
    expect(lines[0]).toMatch(/^device: Device\((cpu|cuda|metal)\b.*\)$/);
    const w = [1, -1, 2, 0, 0.5, 1];
    for (const line of lines.slice(1)) {
      const m = /^x = ([-\d. ]+) -> y = ([-\d. e]+)$/.exec(line);
      expect(m).not.toBeNull();
      const x = m![1]!.split(" ").map(Number);
      const y = m![2]!.split(" ").map(Number);
      const want = reference(x, w);
      expect(y.length).toBe(4);
      y.forEach((v, i) => expect(Math.abs(v - want[i]!)).toBeLessThan(1e-5));
    }
    // both inputs ran, and relu clipped something in the second
    expect(lines[2]).toContain("-> y = 0 0 ");
  }, 240_000);

  test("tsc passes on it under its own tsconfig (bun init's, stricter flags on)", () => {
    expect(existsSync(join(app, "node_modules", "bungpu", "package.json"))).toBe(true); // installed above
    if (!existsSync(join(app, "node_modules"))) mkdirSync(join(app, "node_modules"), { recursive: true });
    for (const dep of ["@types", "bun-types", "undici-types"]) if (!existsSync(join(app, "node_modules", dep))) symlinkSync(join(root, "node_modules", dep), join(app, "node_modules", dep), "dir");
    const r = Bun.spawnSync([process.execPath, tsc, "--noEmit", "-p", app, "--pretty", "false"], { cwd: app, stdout: "pipe", stderr: "pipe", timeout: 120_000 });
    expect((r.stdout.toString() + r.stderr.toString()).trim()).toBe("");
    expect(r.exitCode).toBe(0);
  }, 120_000);

  test("bun check (TypeScript 7, what bun init's typecheck script runs) passes on it, the package's sources and bungpu/models included", () => {
    // the starter imports bungpu only; a second file reaches bungpu/models too
    writeFileSync(join(app, "models.ts"), `import { GPT2, loadTokenizer, type GPT2Config } from "bungpu/models";\nconst c: GPT2Config = { nLayer: 1, nEmbd: 8, nHead: 2, vocabSize: 16, nCtx: 8 };\nexport const kinds = [typeof GPT2, typeof loadTokenizer, c.nLayer];\n`);
    const r = Bun.spawnSync([process.execPath, "check", "--no-pretty"], { cwd: app, stdout: "pipe", stderr: "pipe", timeout: 120_000 });
    const out = r.stdout.toString() + r.stderr.toString();
    expect(out).not.toContain("error TS");
    expect(out).toMatch(/No type errors in \d+ files/);
    expect(r.exitCode).toBe(0);
  }, 120_000);
});
