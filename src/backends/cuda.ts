// The CUDA backend: CUDA C compiled by NVRTC for the device's architecture, run by the driver.
import { compileCuda, cudaCompilerIdentity } from "../compile/cuda";
import { cudaRingSource } from "../ring/source";
import { cudaDialect } from "./dialect";
import type { BackendRecord } from "./types";

export const cuda = {
  name: "cuda",
  language: "CUDA C++, compiled by NVRTC to a CUBIN (PTX where NVRTC does not know the GPU)",
  dialect: cudaDialect,
  compile: compileCuda,
  compilerIdentity: cudaCompilerIdentity,
  tensorCompileOptions: [],
  codeDependsOnModel: true,
  launchLimits: { block: [1024, 1024, 64], gridYZ: 65535, blocks: null },
  legacyDefaultStream: true,
  streamWaitValue: true,
  ring: {
    source: cudaRingSource,
    persistent: true,
    // Not measured here (no GPU): the usual order of a launch + synchronise + copies for Batch,
    // and of a mapped-memory round trip over PCIe for Ring.
    typicalOverheadUs: { batch: 20, ring: 2 },
  },
} as const satisfies BackendRecord;
