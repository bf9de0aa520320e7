// The zero-build promise, end to end: pack the package, install the tarball into a fresh
// project, import it and use it there. No compiler runs for the library itself: the prebuilt
// one for this platform must load.
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TARGETS, hostTarget } from "../ffi/shimsrc";

const root = join(import.meta.dir, "..");
const hasPrebuilt = (TARGETS as string[]).includes(hostTarget());

test.skipIf(!hasPrebuilt)("bun add <packed tarball> then import: the prebuilt library loads, kernels run, bungpu/models generates", () => {
  const dir = mkdtempSync(join(tmpdir(), "bungpu-consumer-"));
  try {
    const pack = Bun.spawnSync(["bun", "pm", "pack", "--destination", dir], { cwd: root, stdout: "pipe", stderr: "pipe" });
    expect(pack.exitCode).toBe(0);
    const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"))!;
    const listing = Bun.spawnSync(["tar", "tzf", join(dir, tgz)]).stdout.toString();
    expect(listing).toContain("package/ffi/prebuilt/manifest.json");
    expect(listing).toContain("package/shim/bungpu.h");
    expect(listing).not.toContain("package/shim/test/");
    expect(listing).not.toContain("package/test/");
    // every page the README links to under docs/ ships with it
    for (const m of readFileSync(join(root, "README.md"), "utf8").matchAll(/\]\((docs\/[^)#]+\.md)/g))
      expect(listing).toContain(`package/${m[1]}`);
    const app = join(dir, "app");
    Bun.spawnSync(["mkdir", "-p", app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "consumer", type: "module" }));
    const add = Bun.spawnSync(["bun", "add", join(dir, tgz)], { cwd: app, stdout: "pipe", stderr: "pipe" });
    expect(add.exitCode).toBe(0);
    // the package's command (package.json bin): bunx bungpu-trace draws a trace file
    writeFileSync(join(app, "t.json"), JSON.stringify({ traceEvents: [{ name: "k", ph: "X", ts: 0, dur: 10, pid: 1, tid: 1, cat: "kernel" }] }));
    const bunx = Bun.spawnSync(["bun", "x", "bungpu-trace", "t.json", "t.svg"], { cwd: app, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
    expect(bunx.exitCode).toBe(0);
    expect(readFileSync(join(app, "t.svg"), "utf8")).toContain('<g class="span" data-cat="kernel" data-name="k">');
    writeFileSync(
      join(app, "app.ts"),
      `import { Device, Program, loadInfo } from "bungpu";
import { GPT2, randomGPT2Weights } from "bungpu/models";
const dev = Device.open("cpu");
const cfg = { nLayer: 1, nEmbd: 8, nHead: 2, vocabSize: 16, nCtx: 8 };
const gpt = GPT2.fromTensors(cfg, randomGPT2Weights(cfg, 1), { device: dev });
const tokens = gpt.generate([1, 2], { maxNewTokens: 3 }).tokens.length;
gpt.dispose();
const mod = Program.compile(dev, '#include "bungpu_cpu.h"\\nBG_KERNEL(twice) { float* x = BG_ARG(0, float*); BG_FOR_BLOCKS { BG_FOR_THREADS { x[threadIdx.x] *= 2.0f; } } }');
const b = dev.alloc(16).write(new Float32Array([1, 2, 3, 4]));
const s = dev.createStream();
mod.kernel("twice", ["buffer"]).launch(s, { grid: 1, block: 4, args: [b] });
await s.done();
console.log(JSON.stringify({ source: loadInfo.source, out: [...b.read(Float32Array)], tokens }));
`,
    );
    const run = Bun.spawnSync(["bun", "run", "app.ts"], { cwd: app, stdout: "pipe", stderr: "pipe" });
    expect(run.stderr.toString()).toBe("");
    expect(JSON.parse(run.stdout.toString())).toEqual({ source: "prebuilt", out: [2, 4, 6, 8], tokens: 3 }); // bungpu/models resolves from the tarball
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
