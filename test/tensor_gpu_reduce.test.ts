// Block-tree reductions on GPUs (src/tensor/codegen.ts, treeBody): a reduce long against its
// number of outputs runs one block of 256 threads per output, the threads splitting the reduce
// and combining their partials in shared memory in a fixed order; short reduces over many outputs
// keep one thread per output.
//
// Here: the choice and the launch geometry for CUDA and Metal (no device needed), and the
// kernels run on the CUDA driver simulator (shim/test/cudasim: real NVRTC compiles them, the
// simulator runs each as a host twin translated from its CUDA C, a block's threads as coroutines
// switched at each __syncthreads, __shared__ arrays per block) in a subprocess with a time limit:
// test/fixtures/gpu_reduce.ts compares full sums, wide-row sums, several reduce axes, max/min
// with infinities, NaN, int32, prod, argmax, any/all, softmax, layerNorm and variable extents
// with float64 references. Only the twins are on the simulator's kernel path, so a kernel that
// did not translate fails instead of falling back to a CPU kernel.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tensor, Variable, generate, schedule } from "../src/tensor";
import { launcher, type Lang } from "../src/tensor/codegen";
import { nvrtc } from "./nvrtc_env";

const root = join(import.meta.dir, "..");
const simDir = join(root, "shim/test/cudasim");
const cc = Bun.which("cc") ?? Bun.which("gcc") ?? Bun.which("clang");
const linux = process.platform === "linux";

/** The generated kernels of `outs` in `lang`. */
function kernels(outs: Tensor[], lang: Lang) {
  return schedule(outs.map((o) => o.node)).kernels.map((k) => generate(k.ir, lang));
}

const SHARED: Record<"cuda" | "metal", { float: string; int: string; barrier: string }> = {
  cuda: { float: "__shared__ float bg_sh[256];", int: "__shared__ int bg_sh[256];", barrier: "__syncthreads();" },
  metal: { float: "threadgroup float bg_sh[256];", int: "threadgroup int bg_sh[256];", barrier: "threadgroup_barrier(mem_flags::mem_threadgroup);" },
};

describe("block-tree reductions: choice and geometry", () => {
  for (const lang of ["cuda", "metal"] as const) {
    test(`${lang}: long reduces get a block of 256 per output, short ones over many outputs one thread each`, () => {
      const x = Tensor.rand([7, 5000], { seed: 1 });
      const [full] = kernels([Tensor.rand([2 ** 20 + 3], { seed: 2 }).sum()], lang).filter((k) => k.geometry.reduce);
      const [rowsSum] = kernels([x.sum(1)], lang).filter((k) => k.geometry.reduce);
      const [imax] = kernels([Tensor.from(new Int32Array(9000), [3, 3000], { dtype: "int32" }).max(1)], lang).filter((k) => k.geometry.reduce);
      for (const k of [full!, rowsSum!, imax!]) {
        expect(k.geometry.tree).toBe(256);
        expect(k.source).toContain(SHARED[lang].barrier);
        // 8 halving steps, a barrier after each but the last, one before the first
        expect(k.source.split(SHARED[lang].barrier).length - 1).toBe(8);
      }
      expect(full!.source).toContain(SHARED[lang].float);
      expect(imax!.source).toContain(SHARED[lang].int);
      // one block per output, 256 threads
      expect(full!.launch(new Map())).toEqual({ grid: 1, block: 256, elements: 1 });
      expect(rowsSum!.launch(new Map())).toEqual({ grid: 7, block: 256, elements: 7 });
      // the plan cache rebuilds the launch function from the geometry's plain data
      expect(launcher(JSON.parse(JSON.stringify(rowsSum!.geometry)))(new Map())).toEqual({ grid: 7, block: 256, elements: 7 });
      // a variable output dim: the grid follows the variable's value
      const M = new Variable("M", 1, 40).bind(40);
      const [vk] = kernels([Tensor.rand([40, 700], { seed: 3 }).shrink([[0, M], null]).sum(1)], lang).filter((k) => k.geometry.reduce);
      expect(vk!.geometry.tree).toBe(256);
      expect(vk!.launch(new Map([["M", 5]]))).toEqual({ grid: 5, block: 256, elements: 5 });
      // a matmul (4096 outputs over 64) and [4096, 32] row sums keep one thread per output
      const a = Tensor.rand([64, 64], { seed: 4 });
      for (const k of kernels([a.matmul(a), Tensor.rand([4096, 32], { seed: 5 }).sum(1)], lang).filter((g) => g.geometry.reduce)) {
        expect(k.geometry.tree ?? 0).toBe(0);
        expect(k.source).not.toContain("bg_sh");
        expect(k.launch(new Map()).block).toBe(256);
        expect(k.launch(new Map()).grid).toBe(Math.ceil(k.launch(new Map()).elements / 256));
      }
    });
  }

  test("CPU kernels are unchanged: no tree in their geometry", () => {
    for (const k of kernels([Tensor.rand([2 ** 20], { seed: 6 }).sum()], "c")) {
      expect(k.geometry.tree ?? 0).toBe(0);
      expect(k.source).not.toContain("bg_sh");
    }
  });
});

const nv = linux && cc ? nvrtc() : ({ ok: false, reason: "needs Linux and a C compiler" } as const);

/** The environment without any variable that would point the run at another driver or device. */
function baseEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !/^(BUNGPU_LIBCUDA|BUNGPU_DEVICE|BUNGPU_SIM_KERNELS|BUNGPU_CACHE_DIR|BUNGPU_NVRTC|CUDASIM_|BUN_OPTIONS)/.test(k)) env[k] = v;
  return { ...env, ...extra };
}

describe("block-tree reductions on the CUDA driver simulator", () => {
  test.skipIf(!nv.ok)(`full sums, wide rows, several axes, NaN, int32, argmax, softmax, layerNorm, variables against float64${nv.ok ? "" : ` (skipped: ${nv.reason})`}`, () => {
    if (!nv.ok || !cc) throw new Error("unreachable");
    const work = mkdtempSync(join(tmpdir(), "bungpu-gpu-reduce-"));
    try {
      const b = Bun.spawnSync(["sh", join(simDir, "build.sh"), work], { env: baseEnv({ CC: cc }), stdout: "pipe", stderr: "pipe", timeout: 120_000 });
      expect(b.stderr.toString()).toBe("");
      expect(b.exitCode).toBe(0);
      const twins = join(work, "twins");
      const r = Bun.spawnSync([process.execPath, "--preload", join(simDir, "twins_preload.ts"), join(import.meta.dir, "fixtures", "gpu_reduce.ts")], {
        cwd: root,
        env: baseEnv({
          BUNGPU_DEVICE: "cuda:0",
          BUNGPU_LIBCUDA: join(work, "libcudasim.so"),
          BUNGPU_NVRTC: nv.lib,
          BUNGPU_CACHE_DIR: join(work, "cache"),
          CUDASIM_TWINS_DIR: twins,
          CUDASIM_TWINS_CC: cc,
          // the twins alone: a kernel C could not express fails here rather than running a CPU kernel
          BUNGPU_SIM_KERNELS: twins,
        }),
        stdout: "pipe",
        stderr: "pipe",
        timeout: 240_000,
      });
      const out = r.stdout.toString();
      const rows = out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { name?: string; ok?: boolean; trees?: number; why?: string; done?: boolean });
      if (r.exitCode !== 0 || !rows.at(-1)?.done) throw new Error(`fixture exited ${r.exitCode}:\n${out.slice(-3000)}\n${r.stderr.toString().slice(-3000)}`);
      const cases = rows.slice(0, -1);
      expect(cases.map((c) => c.name)).toEqual([
        "full sum and mean of 2^20+3 values",
        "float32 sum of 2^25 ones loaded from memory is exact",
        "row sums over wide rows: [7, 5000] over 1 (keepdim), [5000, 7] over 0 (strided), mean",
        "half types: float16 row sums over [3, 5000] accumulate in float32, bfloat16 row max",
        "several reduce axes: [6, 40, 9, 30] over 1 and 3 (sum, max), [5, 7, 8, 9, 10] over 0, 2, 4",
        "max and min with ±Infinity, prod, any and all over [9, 3001]",
        "NaN: sums and products propagate it, argmax and argmin give the first NaN's index, max gives NaN or the row's max",
        "int32: sum, max and min with INT_MIN and INT_MAX, wrapping prod, argmax with ties over [5, 4099]",
        "softmax and layerNorm over wide rows: [8, 3000] and [16, 1024]",
        "a variable reduce extent (600 at most) bound to 600, 37, 1 and 0 (empty: the identities), float32 and int32; variable rows in every exec mode",
        "64-bit indices: a [4, N] broadcast summed over N, N at most 2^30 (4·2^30 elements) bound to 100003 and 256",
        "one thread per output kept: a [64, 64]·[64, 64] matmul and [4096, 32] row sums",
      ]);
      for (const c of cases) if (!c.ok) throw new Error(`${c.name}: ${c.why}`);
      // every case but the last ran block-tree kernels; the last none
      for (const c of cases.slice(0, -1)) expect({ name: c.name, tree: (c.trees ?? 0) > 0 }).toEqual({ name: c.name, tree: true });
      expect(cases.at(-1)!.trees).toBe(0);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 300_000);
});
