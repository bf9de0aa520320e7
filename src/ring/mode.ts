// KernelMode: how a RingKernel runs its handler, a launch per batch of messages (Batch) or a
// persistent kernel fed through lock-free rings (Ring), and what each typically costs per backend.
import { backendOf, type BackendName } from "../backends";
import type { Device } from "../device";
import { isDevice } from "../device_state";
import { describeGot, invalid } from "../errors";
import { INSPECT } from "../inspect";

export type KernelModeName = "batch" | "ring";

/** How a RingKernel runs its handler: a launch per batch, or a persistent kernel fed by rings. */
export class KernelMode {
  /** Batch kernel mode (CPU-orchestrated): an ordinary launch per batch of messages. */
  static readonly Batch = new KernelMode("batch");
  /** Ring kernel mode: a persistent kernel reading a lock-free ring. */
  static readonly Ring = new KernelMode("ring");

  readonly #name: KernelModeName;

  private constructor(name: KernelModeName) {
    this.#name = name;
    Object.freeze(this);
  }

  static values(): readonly KernelMode[] {
    return [KernelMode.Batch, KernelMode.Ring];
  }

  /**
   * A mode from its name ("batch", "ring"; case-insensitive), its JSON (`"\"ring\""`), or a
   * KernelMode. Anything else throws GpuError INVALID_VALUE.
   */
  static parse(value: unknown): KernelMode {
    if (value instanceof KernelMode) return value;
    if (typeof value !== "string") invalid("KernelMode.parse", `expected a mode name, got ${describeGot(value)}`);
    let s = value.trim();
    if (s.startsWith('"')) {
      try {
        const v: unknown = JSON.parse(s);
        if (typeof v === "string") s = v;
      } catch {
        /* not JSON: falls through to the name check */
      }
    }
    switch (s.toLowerCase()) {
      case "batch":
        return KernelMode.Batch;
      case "ring":
        return KernelMode.Ring;
    }
    invalid("KernelMode.parse", `unknown kernel mode ${JSON.stringify(value)} (want "batch" or "ring")`);
  }

  isBatch(): boolean {
    return this.#name === "batch";
  }

  isRing(): boolean {
    return this.#name === "ring";
  }

  asStr(): KernelModeName {
    return this.#name;
  }

  /**
   * Typical overhead in µs on `backend` (default "cuda"): each backend record's
   * `ring.typicalOverheadUs`, which says where its figures come from.
   */
  typicalOverheadUs(backend: BackendName | Device = "cuda"): number {
    const b = isDevice(backend) ? backend.backend : backend;
    const row = backendOf(b)?.ring.typicalOverheadUs;
    if (!row) invalid("KernelMode.typicalOverheadUs", `unknown backend ${String(backend)}`);
    return row[this.#name];
  }

  toString(): string {
    return this.#name;
  }

  toJSON(): string {
    return this.#name;
  }

  [INSPECT](): string {
    return `KernelMode.${this.#name[0]!.toUpperCase()}${this.#name.slice(1)}`;
  }
}
