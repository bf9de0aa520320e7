// The CPU backend: C kernels (with shim/bungpu_cpu.h) run by the shim's thread pool.
import { compileCpu, cpuCompilerIdentity } from "../compile/cpu";
import { cpuRingSource } from "../ring/source";
import { cDialect } from "./dialect";
import type { BackendRecord } from "./types";

export const cpu = {
  name: "cpu",
  language: "C11 with bungpu_cpu.h, compiled by the first C compiler found (else Bun's TinyCC)",
  dialect: cDialect,
  compile: (_device, source, opts) => compileCpu(source, opts),
  compilerIdentity: () => cpuCompilerIdentity(),
  // let the compiler contract a*b+c into FMA (one rounding instead of two)
  tensorCompileOptions: ["-ffp-contract=fast"],
  // the C for the CPU does not depend on its model
  codeDependsOnModel: false,
  launchLimits: { block: [1024, 1024, 64], gridYZ: 65535, blocks: 4294967295 },
  legacyDefaultStream: true,
  streamWaitValue: false,
  ring: {
    source: cpuRingSource,
    persistent: true,
    // Measured by bench/ring.bench.ts (p50 of a one-message request; 2-vCPU AMD EPYC VM):
    // Ring 0.45-0.65 µs; Batch 2.2-5.5 µs (stage, launch, wait, copy back).
    typicalOverheadUs: { batch: 2.5, ring: 0.5 },
  },
} as const satisfies BackendRecord;
