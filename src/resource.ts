// Resource: what every native object of a device has in common. A handle, a disposed state
// (shared by the views of one allocation), dispose() that releases the native object once and
// never throws, `[Symbol.dispose]` for `using`, and the finaliser that releases it when its
// owner is forgotten (the safety net, not the plan). Subclasses say how to release.
import { disposed } from "./errors";
import { INSPECT } from "./inspect";
import type { DeviceState } from "./device_state";
import { track, untrack, type Kind } from "./lifetime";

/** A disposed flag; an allocation's views share their root's. */
export interface Life {
  live: boolean;
}

/** The key of a subclass's release step: a symbol, so no public method can reach it. */
export const RELEASE: unique symbol = Symbol("bungpu.release");

export abstract class Resource {
  /** The state of the device this belongs to. */
  protected readonly dev: DeviceState;
  /** The native handle (a buffer's: its allocation's base address). */
  readonly #handle: number;
  readonly #life: Life;
  /** What error messages call it ("stream", "buffer"…). */
  readonly #what: string;
  /** Stands the finaliser down, once registered. */
  #unwatch: (() => void) | undefined;

  protected constructor(dev: DeviceState, handle: number, what: string, life: Life = { live: true }) {
    this.dev = dev;
    this.#handle = handle;
    this.#what = what;
    this.#life = life;
  }

  /**
   * The native handle; throws INVALID_HANDLE once this or its device is disposed. Subclasses
   * whose handle is public expose it as `handle` (a Buffer's is not: an address is no stream).
   */
  protected get liveHandle(): number {
    if (!this.dev.open || !this.#life.live) this.live(this.constructor.name);
    return this.#handle;
  }

  /** The handle without the disposed check (a release, a finaliser's record). */
  protected get rawHandle(): number {
    return this.#handle;
  }

  get disposed(): boolean {
    return !this.#life.live || !this.dev.open;
  }

  /** Throw INVALID_HANDLE naming `call` if this or its device is disposed. */
  protected live(call: string): void {
    if (!this.dev.open) disposed(call, `device of this ${this.#what}`);
    if (!this.#life.live) disposed(call, this.#what);
  }

  /** Release the native handle through the shared safety net if this is collected undisposed. */
  protected track(kind: Kind, after?: () => void): void {
    track(this, this.dev, this.#handle, kind, after);
    this.#unwatch = () => untrack(this);
  }

  /** Register with a registry of its own (`held` is what its callback gets; `token` unregisters). */
  protected watch<T>(registry: FinalizationRegistry<T>, held: T, token: object): void {
    registry.register(this, held, token);
    this.#unwatch = () => registry.unregister(token);
  }

  /** Whether dispose() releases anything (a view of an allocation does not). */
  protected get owns(): boolean {
    return true;
  }

  /**
   * Release the native object, once. Idempotent, and never throws: a failure to release has no
   * caller that could act on it (the error is dropped, as a finaliser's would be).
   */
  dispose(): void {
    if (!this.#life.live || !this.owns) return;
    this.#life.live = false;
    this.#unwatch?.();
    try {
      this[RELEASE]();
    } catch {
      /* dispose() never throws */
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** console.log and Bun.inspect print what toString() says (each subclass describes itself). */
  [INSPECT](): string {
    return this.toString();
  }

  /** Free the native object (called once, by dispose(), with the finaliser stood down). */
  protected abstract [RELEASE](): void;
}
