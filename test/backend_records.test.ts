// The backend table: one record per backend, each under its own name, with the dialect, compiler
// and ring source that the rest of the package looks up instead of branching on the name.
import { expect, test } from "bun:test";
import { backendNumbers } from "../ffi/result";
import { BackendId } from "../ffi/constants";
import { Device, GpuError, KernelMode, Program, RingKernel, Status, ringKernelSource } from "../src";
import { backendOf, backends, dialects } from "../src/backends";
import { compileStats, cpuCompilerLabel } from "../src/compile";
import { generate, prelude } from "../src/tensor/codegen";
import { Tensor, schedule } from "../src/tensor";

const HANDLER = "BG_RING_HANDLER(msg, resp, state) { (void)state; *(int*)resp = *(const int*)msg + 1; }";

test("every backend the shim numbers has one record, under its own name, and nothing else does", () => {
  // the shim's table (shim/backends.c) names the same backends, the first at bungpu.h's numbers
  expect([...backendNumbers().keys()].sort()).toEqual(Object.keys(backends).sort());
  expect(Object.fromEntries(backendNumbers())).toMatchObject({ cpu: BackendId.CPU, cuda: BackendId.CUDA, metal: BackendId.METAL });
  for (const [name, b] of Object.entries(backends)) {
    expect(b.name as string).toBe(name);
    expect(backendOf(name)).toBe(b);
    expect(Object.values(dialects)).toContain(b.dialect);
    expect(b.ring.typicalOverheadUs.batch).toBeGreaterThan(0);
  }
  for (const [lang, d] of Object.entries(dialects)) expect(d.lang as string).toBe(lang);
  for (const bad of ["vulkan", "toString", "__proto__", "", 3, null]) expect(backendOf(bad)).toBeUndefined();
});

test("ring sources, persistence and overheads come from the records", () => {
  for (const [name, b] of Object.entries(backends)) {
    const o = { handler: HANDLER, messageBytes: 4 };
    const src = ringKernelSource(name as keyof typeof backends, o);
    expect(src).toBe(b.ring.source(HANDLER, "bg_ring_handler", { messageBytes: 4, responseBytes: 4, stateBytes: 0 }));
    for (const m of KernelMode.values()) expect(m.typicalOverheadUs(name as keyof typeof backends)).toBe(b.ring.typicalOverheadUs[m.asStr()]);
  }
  const dev = Device.open("cpu");
  expect(RingKernel.supportsPersistent(dev)).toBe(backends.cpu.ring.persistent);
  // a name that is no backend, even one every object has, is refused with INVALID_VALUE
  for (const bad of ["toString", "vulkan"]) {
    let err: unknown;
    try {
      ringKernelSource(bad as never, { handler: HANDLER, messageBytes: 4 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).code).toBe(Status.INVALID_VALUE);
    err = undefined;
    try {
      KernelMode.Ring.typicalOverheadUs(bad as never);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).code).toBe(Status.INVALID_VALUE);
  }
});

test("Program.compile loads what the CPU record's compile gives, and the kernel runs", () => {
  const dev = Device.open("cpu");
  const src = '#include "bungpu_cpu.h"\nBG_KERNEL(inc) { int* x = BG_ARG(0, int*); BG_FOR_BLOCKS { BG_FOR_THREADS { x[threadIdx.x] += 1; } } }\n/* records */';
  const img = backends.cpu.compile(dev, src, { name: "records" });
  expect(img.bytes).toBeGreaterThan(0);
  const runs = compileStats.compilerRuns;
  const mod = Program.compile(dev, src, { name: "records" });
  // the same source: the disk cache answered (TinyCC compiles in memory, without a cache)
  if (!cpuCompilerLabel().startsWith("tinycc")) expect(compileStats.compilerRuns).toBe(runs);
  const b = dev.alloc(16).write(new Int32Array([1, 2, 3, 4]));
  const s = dev.createStream();
  mod.kernel("inc", ["buffer"]).launch(s, { grid: 1, block: 4, args: [b] });
  s.synchronize();
  expect([...b.read(Int32Array)]).toEqual([2, 3, 4, 5]);
  mod.dispose();
  b.dispose();
});

test("codegen writes each dialect's spelling: literals, math, booleans, 64-bit type and kernel head", () => {
  const x = Tensor.arange(16).reshape([4, 4]).div(3);
  const ir = schedule([x.tanh().add(x.cmplt(x.neg()).where(x, x.exp())).div(0).node]).kernels[0]!.ir;
  for (const [lang, d] of Object.entries(dialects)) {
    const g = generate(ir, lang as keyof typeof dialects);
    expect(g.lang as string).toBe(lang);
    expect(g.body).toContain(`${d.math.tanh}(`);
    expect(g.body).toContain(`${d.math.exp}(`);
    expect(prelude(d.lang)).toStartWith(d.preludeHead);
    expect(prelude(d.lang).includes(`${d.int64} bg_idiv64`)).toBe(d.index64);
    if (d.gpu) expect(g.body).toStartWith(d.gpu.head(ir.name));
    else expect(g.body).toStartWith(`BG_KERNEL(${ir.name})`);
    if (lang === "metal") expect(g.body).toContain("((int)(");
  }
  expect(generate(ir, "c").body).toContain("bg_tanhf(");
  expect(generate(ir, "cuda").body).toContain("tanhf(");
  expect(generate(ir, "metal").body).toMatch(/[^_]tanh\(/);
});
