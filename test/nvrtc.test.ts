// Real NVRTC in the suite (pip's nvidia-cuda-nvrtc, see nvrtc_env.ts): every CUDA source bungpu
// ships or generates compiles through the shim's own NVRTC path (bg_rtc_compile) to an sm_90
// CUBIN, with a libcuda-shaped test driver reporting a compute capability 9.0 device. Also the
// NVRTC defects this path fixed: libnvrtc-builtins beside an NVRTC outside the loader path,
// -default-device, the CUDA include folder, empty images; and cuda_api.h against nvrtc.h.
import { describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { testDriver } from "./cuda_driver";
import { nvrtc } from "./nvrtc_env";
import { cudaSources } from "./shipped_sources";

const root = join(import.meta.dir, "..");
const rtc = nvrtc();
const drv = testDriver();
const skip = !rtc.ok || !drv.ok;
if (!rtc.ok) console.log(`nvrtc.test.ts: skipped, ${rtc.reason}`);
else if (!drv.ok) console.log(`nvrtc.test.ts: skipped, ${drv.reason}`);

function withoutSimSettings(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined && !e[0].startsWith("CUDASIM_")));
}

function runFixture(script: string, env: Record<string, string> = {}, timeout = 240_000): { out: string; err: string; code: number | null } {
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", script)], {
    // the simulator's own defaults (driver 13.0, sm_90) unless a case says otherwise: a run of the
    // whole suite with other CUDASIM_* settings (test/sim_suite.sh) must not change these cases
    env: { ...withoutSimSettings(process.env), BUNGPU_LIBCUDA: drv.ok ? drv.lib : "", BUNGPU_NVRTC: rtc.ok ? rtc.lib : "", ...env },
    stdout: "pipe",
    stderr: "pipe",
    timeout,
  });
  return { out: r.stdout.toString(), err: r.stderr.toString(), code: r.exitCode };
}

function lines(out: string): Record<string, unknown>[] {
  return out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("real NVRTC", () => {
  test.skipIf(skip)("every shipped and generated CUDA source compiles to an sm_90 CUBIN through bg_rtc_compile", () => {
    const r = runFixture("nvrtc_compile.ts");
    const rows = lines(r.out);
    expect(rows[0]).toMatchObject({ cc: "9.0" });
    const results = rows.slice(1);
    const names = cudaSources().map((s) => s.name);
    expect(results.map((x) => x.name)).toEqual(names);
    for (const x of results) {
      if (!x.ok) throw new Error(`${x.name as string}: ${x.error as string}`);
      // an ELF64 CUBIN (EM_CUDA = 190) for sm_90 that defines every kernel of the source
      expect(x).toMatchObject({ ok: true, kind: "cubin", elf: true, elfClass: 2, machine: 190, sm: 90, missing: [], compiled: 1 });
      expect(x.bytes as number).toBeGreaterThan(500);
    }
    // the tensor codegen's kernels are really there (the demo models need a dozen)
    expect(names.filter((n) => /^(tensor MLP|transformer block|64-bit indexing)/.test(n))).toHaveLength(3);
    expect(r.code).toBe(0);
  }, 300_000);

  test.skipIf(skip)("compile options: -default-device, -I the CUDA include folder, PTX on request, empty images refused", () => {
    const inc = mkdtempSync(join(tmpdir(), "bungpu-cudahome-"));
    try {
      mkdirSync(join(inc, "include"));
      writeFileSync(join(inc, "include", "bg_probe_header.h"), "#define BG_PROBE_VALUE 42\n");
      const r = runFixture("nvrtc_options.ts", { CUDA_HOME: inc });
      const rows = Object.fromEntries(lines(r.out).map((x) => [x.case as string, x]));
      // a helper without __device__ is a device function (-default-device)
      expect(rows.helper).toMatchObject({ ok: true, kind: "cubin" });
      // $CUDA_HOME/include is on the include path
      expect(rows.include).toMatchObject({ ok: true, kind: "cubin" });
      // a caller's own virtual architecture gives PTX (text naming that target)
      expect(rows.ptx).toMatchObject({ ok: true, kind: "ptx", target: "sm_80" });
      // an empty image is refused before the driver sees it
      expect(rows.emptyCubin).toMatchObject({ ok: false, code: 200 });
      expect(rows.emptyPtx).toMatchObject({ ok: false, code: 200 });
      // the CUBIN loads and its kernel is found (through the test driver)
      expect(rows.load).toMatchObject({ ok: true });
      expect(r.code).toBe(0);
    } finally {
      rmSync(inc, { recursive: true, force: true });
    }
  }, 240_000);

  test.skipIf(skip || process.platform !== "linux")("an NVRTC outside the loader path finds libnvrtc-builtins beside it", () => {
    // nvtrc_env's NVRTC lives in a pip folder that is not on the loader path, with the builtins
    // beside it: NVRTC's own dlopen("libnvrtc-builtins.so.13.0") fails there unless preloaded.
    if (!rtc.ok) return;
    const dir = join(rtc.lib, "..");
    expect(existsSync(dir)).toBe(true);
    expect((process.env.LD_LIBRARY_PATH ?? "").split(":")).not.toContain(dir);
    const r = runFixture("nvrtc_options.ts", { LD_LIBRARY_PATH: "" });
    const rows = Object.fromEntries(lines(r.out).map((x) => [x.case as string, x]));
    expect(rows.helper).toMatchObject({ ok: true });
  }, 240_000);

  test.skipIf(skip)("an NVRTC of a newer CUDA major than the driver is refused at the compile, naming both; 209 and 222 are named errors", () => {
    // A CUDA 12.4 driver accepts PTX ISA up to 8.4 (NVRTC 13 writes 9.0) and, by NVIDIA's
    // compatibility rules, no CUBIN of CUDA 13 (the simulator refuses one as an invalid image):
    // nothing NVRTC 13 writes would load, so the compile is refused and says what to do.
    const old = runFixture("nvrtc_driver.ts", { CUDASIM_DRIVER_VERSION: "12040", CUDASIM_SM: "90" });
    const rows = Object.fromEntries(lines(old.out).map((x) => [x.case as string, x]));
    expect(rows.image).toMatchObject({ ok: false, code: 222, name: "BG_ERR_UNSUPPORTED_PTX_VERSION" });
    expect(String((rows.image as Record<string, unknown>).error)).toMatch(/NVRTC 13\.\d+ .*newer than the CUDA driver \(CUDA 12\.4\).*nvidia-cuda-nvrtc-cu12/);
    // Program.compile may find a CUBIN of an earlier run in the kernel cache: then the driver
    // refuses it at the load (200), and the error names the driver's version all the same.
    expect(rows.program).toMatchObject({ ok: false });
    expect([200, 222]).toContain(Number((rows.program as Record<string, unknown>).code));
    expect(String((rows.program as Record<string, unknown>).error)).toMatch(/CUDA 12\.4/);
    expect(rows.ptxNewerThanDriver).toMatchObject({ ok: false, code: 222, name: "BG_ERR_UNSUPPORTED_PTX_VERSION" });
    expect(old.code).toBe(0);
    // On a 13.0 driver the same NVRTC compiles; a CUBIN for another architecture is 209.
    const cur = Object.fromEntries(lines(runFixture("nvrtc_driver.ts", { CUDASIM_DRIVER_VERSION: "13000", CUDASIM_SM: "90" }).out).map((x) => [x.case as string, x]));
    expect(cur.program).toMatchObject({ ok: true });
    expect(cur.cubinOtherArch).toMatchObject({ ok: false, code: 209, name: "BG_ERR_NO_BINARY_FOR_GPU" });
  }, 240_000);

  test.skipIf(skip)("a GPU newer than NVRTC knows gets PTX for the newest architecture NVRTC has", () => {
    // sm_99 is unknown to NVRTC 13: its sm_99 CUBIN request fails with an invalid option
    const r = runFixture("nvrtc_driver.ts", { CUDASIM_SM: "99" });
    const rows = Object.fromEntries(lines(r.out).map((x) => [x.case as string, x]));
    expect(rows.image).toMatchObject({ ok: true, kind: "ptx", cc: "9.9" });
    expect(String((rows.image as Record<string, unknown>).target)).toMatch(/^sm_\d+$/);
    expect(rows.program).toMatchObject({ ok: true });
    const plain = Object.fromEntries(lines(runFixture("nvrtc_driver.ts", { CUDASIM_SM: "90" }).out).map((x) => [x.case as string, x]));
    expect(plain.image).toMatchObject({ ok: true, kind: "cubin", cc: "9.0" });
  }, 240_000);

  test.skipIf(skip || process.platform !== "linux")("the NVRTC whose major is the driver's is preferred", () => {
    // A folder on the loader path with libnvrtc.so (the real NVRTC 13) and a stand-in
    // libnvrtc.so.12 reporting 12.99: a 12.x driver must get the latter, a 13.x driver the former.
    if (!rtc.ok) return;
    const dir = mkdtempSync(join(tmpdir(), "bungpu-nvrtc-pick-"));
    try {
      const fns = ["nvrtcGetErrorString", "nvrtcCreateProgram", "nvrtcDestroyProgram", "nvrtcCompileProgram", "nvrtcGetPTXSize", "nvrtcGetPTX", "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog"];
      writeFileSync(join(dir, "fake.c"), `int nvrtcVersion(int* a, int* b) { *a = 12; *b = 99; return 0; }\n${fns.map((f) => `int ${f}(void) { return 0; }`).join("\n")}\n`);
      const b = Bun.spawnSync(["gcc", "-shared", "-fPIC", "-o", join(dir, "libnvrtc.so.12"), join(dir, "fake.c")], { stderr: "pipe" });
      expect(b.exitCode).toBe(0);
      const { symlinkSync } = require("node:fs") as typeof import("node:fs");
      symlinkSync(rtc.lib, join(dir, "libnvrtc.so"));
      const env = { BUNGPU_NVRTC: "", LD_LIBRARY_PATH: dir };
      const v12 = Object.fromEntries(lines(runFixture("nvrtc_driver.ts", { ...env, CUDASIM_DRIVER_VERSION: "12080" }).out).map((x) => [x.case as string, x]));
      expect(v12.version).toMatchObject({ ok: true, nvrtc: "12.99" });
      const v13 = Object.fromEntries(lines(runFixture("nvrtc_driver.ts", { ...env, CUDASIM_DRIVER_VERSION: "13000" }).out).map((x) => [x.case as string, x]));
      expect(v13.version).toMatchObject({ ok: true, nvrtc: `${rtc.version}.0` });
      expect(v13.program).toMatchObject({ ok: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);

  test.skipIf(!rtc.ok || !rtc.include || !Bun.which("gcc") || !existsSync("/usr/local/cuda/include/cuda.h"))(
    "cuda_api.h's NVRTC declarations match the real nvrtc.h",
    () => {
      if (!rtc.ok) return;
      const args = ["-std=c11", "-fsyntax-only", "-DBG_REQUIRE_NVRTC_H", "-I/usr/local/cuda/include", `-I${rtc.include}`, `-I${join(root, "shim")}`];
      const ok = Bun.spawnSync(["gcc", ...args, join(root, "shim/test/cuda_decls_check.c")], { stderr: "pipe" });
      expect(ok.stderr.toString()).toBe("");
      expect(ok.exitCode).toBe(0);
      // a wrong NVRTC declaration fails it
      const dir = mkdtempSync(join(tmpdir(), "bungpu-nvrtc-decls-"));
      try {
        mkdirSync(join(dir, "cuda"));
        cpSync(join(root, "shim/bungpu.h"), join(dir, "bungpu.h"));
        const api = readFileSync(join(root, "shim/cuda/cuda_api.h"), "utf8");
        const bad = api.replace("nvrtcGetNumSupportedArchs, (int* n)", "nvrtcGetNumSupportedArchs, (long* n)");
        expect(bad).not.toBe(api);
        writeFileSync(join(dir, "cuda", "cuda_api.h"), bad);
        const r = Bun.spawnSync(["gcc", ...args.slice(0, -1), `-I${dir}`, join(root, "shim/test/cuda_decls_check.c")], { stderr: "pipe" });
        expect(r.exitCode).not.toBe(0);
        expect(r.stderr.toString()).toContain("nvrtcGetNumSupportedArchs");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

describe("CUDA initialised by another library first", () => {
  test.skipIf(!drv.ok)("the backend's message says bungpu's settings before cuInit did not apply, and only then", () => {
    const probe = (first: boolean) => {
      const code = `
        import { dlopen, FFIType } from "bun:ffi";
        if (${first}) dlopen(process.env.BUNGPU_LIBCUDA, { cuInit: { args: [FFIType.u32], returns: FFIType.i32 } }).symbols.cuInit(0); // another library's cuInit
        const { Device } = await import("./src");
        console.log(JSON.stringify(Device.backends().find((b) => b.backend === "cuda")?.message ?? null));`;
      const r = Bun.spawnSync([process.execPath, "-e", code], { cwd: root, env: { ...withoutSimSettings(process.env), BUNGPU_LIBCUDA: drv.ok ? drv.lib : "" }, stdout: "pipe", stderr: "pipe", timeout: 60_000 });
      expect(r.stderr.toString()).toBe("");
      return JSON.parse(r.stdout.toString().trim().split("\n").pop()!) as string;
    };
    expect(probe(true)).toContain("CUDA was initialised before bungpu (another library)");
    expect(probe(true)).toContain("CUDA_DEVICE_MAX_CONNECTIONS=32 did not apply");
    expect(probe(false)).not.toContain("initialised before");
  }, 120_000);
});

describe("where no NVRTC is found", () => {
  const systemNvrtc = existsSync("/usr/local/cuda/lib64/libnvrtc.so") || /libnvrtc/.test(Bun.spawnSync(["sh", "-c", "ldconfig -p 2>/dev/null"]).stdout.toString());
  test.skipIf(!drv.ok || systemNvrtc)("the error says where NVRTC comes from and how to point at it", () => {
    const r = runFixture("nvrtc_driver.ts", { BUNGPU_NVRTC: "/nonexistent/libnvrtc.so.12", LD_LIBRARY_PATH: "" });
    const program = Object.fromEntries(lines(r.out).map((x) => [x.case as string, x])).program as Record<string, unknown>;
    expect(program).toMatchObject({ ok: false, name: "BG_ERR_BACKEND_UNAVAILABLE" });
    expect(program.error).toContain("NVRTC not found: tried BUNGPU_NVRTC=/nonexistent/libnvrtc.so.12");
    expect(program.error).toContain("pip install nvidia-cuda-nvrtc-cu12");
    expect(program.error).toContain("set BUNGPU_NVRTC");
  }, 240_000);
});

describe("the package's CUDA sources need no header (a machine with only the driver and NVRTC has none)", () => {
  // The toolkit's include folder hidden (an empty tmpfs over it in a private mount namespace): a
  // source that includes cuda_fp16.h no longer compiles, and float16 and bfloat16 plans still
  // compile with NVRTC alone and run on the simulated cuda:0, their values checked (issue 22).
  const toolkitInclude = "/usr/local/cuda/include";
  const canHide = rtc.ok && process.platform === "linux" && process.getuid?.() === 0 && !!Bun.which("unshare") && existsSync(toolkitInclude);
  test.skipIf(!canHide)(`a half-precision plan compiles and runs on the simulator with the toolkit's headers hidden${canHide ? "" : " (skipped: needs root, unshare, NVRTC and a toolkit to hide)"}`, () => {
    const env: Record<string, string> = { ...withoutSimSettings(process.env), BUNGPU_NVRTC: rtc.ok ? rtc.lib : "" };
    delete env.CUDA_HOME;
    delete env.CUDA_PATH;
    const r = Bun.spawnSync(["unshare", "-m", "sh", "-c", `mount -t tmpfs none ${toolkitInclude} && exec bash test/sim_suite.sh run test/fixtures/half_without_headers.ts`], {
      cwd: root,
      env,
      stdout: "pipe",
      stderr: "pipe",
      timeout: 180_000,
    });
    const out = r.stdout.toString();
    if (r.exitCode !== 0) console.error(out.slice(-2000), r.stderr.toString().slice(-2000));
    const got = JSON.parse(out.trim().split("\n").pop() ?? "{}");
    expect(got).toMatchObject({ device: "cuda:0", float16: "ok", bfloat16: "ok" });
    expect(got.header).toMatch(/^refused /);
    expect(r.exitCode).toBe(0);
  }, 200_000);

  test("no generated or shipped CUDA source includes a toolkit header: half and bfloat16 are bits converted in place, not cuda_fp16.h / cuda_bf16.h", () => {
    // NVRTC carries <stdint.h> itself (the ring kernels use it; checked with NVRTC 13 alone, no include path)
    const builtIn = new Set(["#include <stdint.h>"]);
    const sources = cudaSources();
    expect(sources.some((s) => s.name.startsWith("dtypes"))).toBe(true);
    for (const s of sources) {
      const includes = (s.source.match(/^\s*#\s*include.*$/gm) ?? []).map((l) => l.trim()).filter((l) => !builtIn.has(l));
      expect({ name: s.name, includes }).toEqual({ name: s.name, includes: [] });
    }
  });
});
