// GpuError: every failure bungpu reports. `code` is the shim's status (CUDA's numbering where
// CUDA has the same error), `codeName` its symbolic name, `backend` where it happened and `call`
// the bg_* (or TypeScript) call that refused.
import { Status, StatusName } from "./sys";

/** Where an error happened: a backend, by the name the shim's table gives it (shim/backends.c, which
 * src/backends' records match), or a layer. */
export type BackendLabel = "loader" | "compiler" | "typescript" | (string & {});

export class GpuError extends Error {
  readonly code: number;
  readonly codeName: string;
  readonly backend: BackendLabel | undefined;
  readonly call: string | undefined;

  constructor(code: number, message: string, opts: { backend?: BackendLabel | undefined; call?: string | undefined } = {}) {
    const codeName = StatusName[code] ?? `BG_ERR_${code}`;
    super(`${codeName} (${code}): ${message}`);
    this.code = code;
    this.codeName = codeName;
    this.backend = opts.backend;
    this.call = opts.call;
  }

  override get name(): string {
    return "GpuError";
  }
}

export { Status, StatusName };
