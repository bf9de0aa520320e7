// Code generation from the lowered kernel form: CUDA C compiles with nvcc --ptx (where nvcc
// exists), MSL has the shape Metal wants, kernel names are stable hashes of the lowered AST.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Program } from "../src";
import { Tensor, Variable, generate, interpretKernel, schedule, type KernelIR } from "../src/tensor";
import { prelude } from "../src/tensor/codegen";

function nvccPath(): string | null {
  if (existsSync("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  const r = Bun.spawnSync(["sh", "-c", "command -v nvcc"], { stdout: "pipe" });
  const p = new TextDecoder().decode(r.stdout).trim();
  return r.exitCode === 0 && p ? p : null;
}
const NVCC = nvccPath();

/** A representative set of kernels: elementwise, views with masks, reductions, rand, ints, vars. */
function sampleKernels(): KernelIR[] {
  const S = new Variable("S", 1, 64).bind(10);
  const x = Tensor.from(new Float32Array(64 * 32), [64, 32]);
  const xs = x.shrink([[0, S], null]);
  const i = Tensor.from(new Int32Array(12), [3, 4]);
  const outs = [
    x.exp().add(1).mul(x.T.flip(0).T).gelu(),
    x.pad([[1, 2], [3, 0]]).reshape([67 * 35]).shrink([[5, 2000]]).sigmoid(),
    x.softmax(-1),
    x.layerNorm(),
    x.matmul(x.T).relu(),
    x.sum(),
    x.max(0).sqrt(),
    Tensor.rand([7, 5], { seed: 1 }).add(Tensor.randn([7, 5], { seed: 2 })),
    i.div(i.add(1)).pow(i).maximum(i.neg().abs()).cmplt(3).where(i, i.cast("float32").log().int()),
    xs.exp().sum(0).div(Tensor.fromDims([S], "float32")),
    xs.matmul(xs.T).softmax(-1),
    Tensor.full([3], Number.POSITIVE_INFINITY).maximum(Tensor.full([3], Number.NaN)).add(Tensor.full([3], -0)),
  ];
  return schedule(outs.map((t) => t.node)).kernels.map((k) => k.ir);
}

describe("codegen", () => {
  const irs = sampleKernels();

  test.skipIf(!NVCC)("generated CUDA C compiles with nvcc --ptx -arch=sm_80", () => {
    const dir = mkdtempSync(join(tmpdir(), "bungpu-tensor-nvcc-"));
    try {
      const src = prelude("cuda") + irs.map((ir) => generate(ir, "cuda").body).join("\n");
      writeFileSync(join(dir, "kernels.cu"), src);
      const r = Bun.spawnSync([NVCC!, "--ptx", "-arch=sm_80", "-o", join(dir, "kernels.ptx"), join(dir, "kernels.cu")], { stdout: "pipe", stderr: "pipe" });
      const log = new TextDecoder().decode(r.stderr);
      if (r.exitCode !== 0) throw new Error(`nvcc failed:\n${log}\n--- source ---\n${src}`);
      const ptx = readFileSync(join(dir, "kernels.ptx"), "utf8");
      for (const ir of irs) expect(ptx).toContain(`.entry ${ir.name}(`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60000);

  test("each generated CUDA kernel also compiles alone (standalone source)", () => {
    if (!NVCC) return;
    const dir = mkdtempSync(join(tmpdir(), "bungpu-tensor-nvcc-"));
    try {
      const g = generate(irs[1]!, "cuda");
      writeFileSync(join(dir, "one.cu"), g.source);
      const r = Bun.spawnSync([NVCC, "--ptx", "-arch=sm_80", "-o", join(dir, "one.ptx"), join(dir, "one.cu")], { stdout: "pipe", stderr: "pipe" });
      expect(r.exitCode).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60000);

  test("MSL: kernel void, device buffers and constant scalars bound at their argument index", () => {
    for (const ir of irs) {
      const g = generate(ir, "metal");
      expect(g.source).toContain("#include <metal_stdlib>");
      expect(g.source).toContain(`kernel void ${ir.name}(`);
      ir.bufs.forEach((_, i) => expect(g.source).toMatch(new RegExp(`device (float|int)\\* b${i} \\[\\[buffer\\(${i}\\)\\]\\]`)));
      ir.vars.forEach((v, i) => expect(g.source).toContain(`constant int& v_${v} [[buffer(${ir.bufs.length + i})]]`));
      expect(g.source).not.toContain("expf(");
      expect([...g.signature]).toEqual([...ir.bufs.map(() => "buffer" as const), ...ir.vars.map(() => "i32" as const)]);
    }
    expect(irs.some((ir) => ir.vars.length > 0)).toBe(true);
  });

  test("C for the CPU: BG_KERNEL entry, 8-byte argument slots, variables read as int", () => {
    for (const ir of irs) {
      const g = generate(ir, "c");
      expect(g.source).toContain('#include "bungpu_cpu.h"');
      expect(g.source).toContain(`BG_KERNEL(${ir.name})`);
      expect(g.source).toContain("BG_FOR_BLOCKS");
      ir.vars.forEach((v, i) => expect(g.source).toContain(`const int v_${v} = BG_ARG(${ir.bufs.length + i}, int);`));
    }
  });

  test("CPU: a matmul's reduce tile uses register vectors (scalar loops kept for TinyCC and partial tiles)", () => {
    const a = Tensor.from(new Float32Array(64 * 32), [64, 32]);
    const b = Tensor.from(new Float32Array(32 * 64), [32, 64]);
    const src = generate(schedule([a.matmul(b).node]).kernels[0]!.ir, "c").source;
    expect(src).toContain("#if BG_VEC");
    expect(src).toContain("bg_ld8(&b2[");
    expect(src).toMatch(/a5_1 = bg_vfma8\(v\d+, v\d+, a5_1\);/); // the product accumulated with one fused multiply-add
    const srcT = generate(schedule([a.matmul(a.T).node]).kernels[0]!.ir, "c").source;
    // a column-strided operand is gathered: once per column panel into the packed panel where
    // several row tiles share it, lane by lane where there is one row tile (a matrix-vector product)
    expect(srcT).toContain("for (int rb = 0; rb < R0; rb += 16)");
    expect(srcT).not.toContain("(bg_f8){b1[");
    const srcV = generate(schedule([a.slice([[0, 1], null]).matmul(a.T).node]).kernels[0]!.ir, "c").source;
    expect(srcV).toContain("(bg_f8){b1[");
    const ir2 = schedule([a.exp().sum(0).node]).kernels[0]!.ir;
    expect(generate(ir2, "c").body).not.toContain("BG_VEC"); // expf: the plain loop
  });

  test("CPU: the vector tile and the plain-C fallback (compilers without vector extensions) agree", () => {
    // About the CPU backend's C: opened explicitly, so a run whose default device is a GPU checks it too.
    using dev = Device.open("cpu");
    const M = 13, K = 21, N = 35;
    const av = Float32Array.from({ length: M * K }, (_, i) => Math.sin(i));
    const bv = Float32Array.from({ length: K * N }, (_, i) => Math.cos(i));
    const a = Tensor.from(av, [M, K]), b = Tensor.from(bv, [K, N]);
    const ir = schedule([a.matmul(b).maximum(a.slice([null, [0, 1]])).node]).kernels[0]!.ir;
    const g = generate(ir, "c");
    expect(g.source).toContain("bg_ld8");
    const want = new Float32Array(M * N);
    interpretKernel(ir, [want, av, bv, av], new Map());
    for (const opts of [[], ["-D__TINYC__"]]) {
      const mod = Program.compile(dev, g.source, { name: "vec_or_not", options: opts });
      const k = mod.kernel(g.name, g.signature);
      const bufs = [dev.alloc(M * N * 4), dev.alloc(av.byteLength).write(av), dev.alloc(bv.byteLength).write(bv)];
      const args = ir.bufs.map((_, i) => bufs[i === 0 ? 0 : i === 1 ? 1 : i === 2 ? 2 : 1]!);
      const { grid, block } = g.launch(new Map());
      k.launch(dev.defaultStream, { grid: [grid], block: [block], args });
      dev.defaultStream.synchronize();
      const got = bufs[0]!.read(new Float32Array(M * N));
      for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(1e-4);
      bufs.forEach((x) => x.dispose());
      mod.dispose();
    }
  });

  test("kernel names hash the lowered AST: equal programs share a name, different ones do not", () => {
    const mk = (k: number) => {
      const x = Tensor.from(new Float32Array(16), [4, 4]);
      return schedule([x.mul(k).exp().node]).kernels[0]!.ir.name;
    };
    expect(mk(2)).toBe(mk(2));
    expect(mk(2)).not.toBe(mk(3));
    // a variable's value is not part of the kernel
    const S = new Variable("S", 1, 8);
    const name = (v: number) => {
      S.bind(v);
      return schedule([Tensor.from(new Float32Array(32), [8, 4]).shrink([[0, S], null]).sum(0).node]).kernels[0]!.ir.name;
    };
    expect(name(3)).toBe(name(7));
  });

  test("launch geometry follows variable values", () => {
    const S = new Variable("S", 1, 1000).bind(10);
    const ir = schedule([Tensor.from(new Float32Array(1000), [1000]).shrink([[0, S]]).exp().node]).kernels[0]!.ir;
    const cuda = generate(ir, "cuda");
    expect(cuda.launch(new Map([["S", 1000]]))).toEqual({ grid: 4, block: 256, elements: 1000 });
    expect(cuda.launch(new Map([["S", 10]]))).toEqual({ grid: 1, block: 256, elements: 10 });
    const c = generate(ir, "c");
    expect(c.launch(new Map([["S", 10]])).elements).toBe(10);
  });
});
