// GPU codegen indexes with 64-bit integers where an element count or an index can reach 2³¹
// (CUDA: long long, MSL: long) and keeps int everywhere else. The CUDA kernel is run here as
// host C++ (g++, the CUDA built-ins as plain variables) for the last threads of a 2³²-element
// output, writing through a pointer offset so that only a 64-element window is real memory.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tensor, generate, schedule } from "../src/tensor";
import { prelude } from "../src/tensor/codegen";
import { demoMlpModel, demoTransformerModel } from "../examples/demo";

const gxx = Bun.which("g++");
const root = join(import.meta.dir, "..");

const HOST_CUDA = `#include <math.h>
#include <stdio.h>
#include <string.h>
struct bg_dim3 { unsigned x, y, z; };
static bg_dim3 blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
`;

describe("64-bit indexing in GPU codegen", () => {
  const big = () => Tensor.full([65536, 65536], 3).add(Tensor.arange(65536)); // 2^32 elements

  test("a 2^32-element kernel indexes with long long (CUDA) and long (MSL); small kernels keep int", () => {
    const ir = schedule([big().node]).kernels[0]!.ir;
    const cu = generate(ir, "cuda").body;
    expect(cu).toContain("const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;");
    expect(cu).toContain("const long long total = D0 * D1;");
    expect(cu).not.toMatch(/const int /);
    const msl = generate(ir, "metal").body;
    expect(msl).toContain("const long gid = (long)bg_tgid.x * bg_tpg.x + bg_tid.x;");
    expect(msl).not.toMatch(/const int /);
    // a reduce whose index space is small but whose inputs are 2^32 elements widens its loop too
    const red = schedule([Tensor.rand([65536, 65536]).mul(2).sum(1).node]).kernels;
    // (a long row reduce is a block tree on GPUs: each thread's position in the reduce is 64-bit)
    expect(red.some((k) => /long long bg_f = bg_t;[\s\S]*const long long t\d+ = \(p\d+ \+ bg_f\);/.test(generate(k.ir, "cuda").body))).toBe(true);
    // the demo models' kernels are far from 2^31: unchanged, 32-bit
    for (const out of [demoMlpModel().y, demoTransformerModel().out])
      for (const k of schedule([out.node]).kernels) {
        const body = generate(k.ir, "cuda").body;
        // one thread per output, or one block per output where the reduce is a block tree
        expect(body.includes("const int gid = (int)(blockIdx.x * blockDim.x + threadIdx.x);") || body.includes("const int gid = (int)blockIdx.x;")).toBe(true);
        expect(body).not.toContain("long long");
      }
  });

  test.skipIf(!gxx)("the generated CUDA kernel writes the last elements of a 2^32-element output where they belong", () => {
    const g = generate(schedule([big().node]).kernels[0]!.ir, "cuda");
    const dir = mkdtempSync(join(tmpdir(), "bungpu-idx64-"));
    try {
      const main = `${HOST_CUDA}${prelude("cuda")}${g.body}
int main(void) {
  const long long n = 1LL << 32, lo = n - 64;
  static float window[64];
  for (int i = 0; i < 64; i++) window[i] = -1.0f;
  float* b0 = window - lo; /* b0[lo .. n) is the window */
  blockDim.x = 256; blockDim.y = blockDim.z = 1;
  for (long long t = lo; t < n; t++) {
    blockIdx.x = (unsigned)(t / 256); threadIdx.x = (unsigned)(t % 256);
    ${g.name}(b0);
  }
  for (int i = 0; i < 64; i++) printf("%g\\n", window[i]);
  return 0;
}
`;
      writeFileSync(join(dir, "k.cpp"), main);
      const c = Bun.spawnSync([gxx!, "-std=c++17", "-O0", "-w", "-o", join(dir, "k"), join(dir, "k.cpp")], { stderr: "pipe" });
      expect(c.stderr.toString()).toBe("");
      const r = Bun.spawnSync([join(dir, "k")], { stdout: "pipe", timeout: 30_000 });
      expect(r.exitCode).toBe(0);
      const got = r.stdout.toString().trim().split("\n").map(Number);
      // element i of row 65535 is 3 + i, for the last 64 columns
      expect(got).toEqual(Array.from({ length: 64 }, (_, i) => 3 + 65536 - 64 + i));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  test.skipIf(!gxx)("the 64-bit MSL kernel type-checks against the metal_stdlib stand-in", () => {
    const g = generate(schedule([big().node]).kernels[0]!.ir, "metal");
    const dir = mkdtempSync(join(tmpdir(), "bungpu-idx64-msl-"));
    try {
      writeFileSync(join(dir, "k.metal"), g.source);
      const r = Bun.spawnSync([gxx!, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wno-attributes", `-I${join(root, "shim/test/metal_stdlib")}`, join(dir, "k.metal")], { stderr: "pipe" });
      expect(r.stderr.toString()).toBe("");
      expect(r.exitCode).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
