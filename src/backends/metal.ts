// The Metal backend: MSL compiled by the Metal framework when a module loads.
import { compileMetal } from "../compile/metal";
import { metalRingSource } from "../ring/source";
import { metalDialect } from "./dialect";
import type { BackendRecord } from "./types";

export const metal = {
  name: "metal",
  language: "the Metal Shading Language, compiled by the Metal framework at load",
  dialect: metalDialect,
  compile: (_device, source) => compileMetal(source),
  compilerIdentity: () => "metal",
  tensorCompileOptions: [],
  codeDependsOnModel: true,
  // the device's maxThreadsPerBlock is its only limit
  launchLimits: { block: null, gridYZ: null, blocks: null },
  legacyDefaultStream: false,
  streamWaitValue: false,
  ring: {
    source: metalRingSource,
    // Metal cannot keep a kernel resident: Ring mode relaunches per batch
    persistent: false,
    // Not measured here; Ring costs what Batch costs (a command buffer commit and wait).
    typicalOverheadUs: { batch: 100, ring: 100 },
  },
} as const satisfies BackendRecord;
