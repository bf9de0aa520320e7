// The safety net: a native object whose TypeScript owner is collected without
// dispose() is released by a FinalizationRegistry. Not the plan (dispose() and `using` are), and
// never a source of errors: a finaliser has no caller to report to. Buffers have their own
// registry (buffer.ts), which also counts live bytes.
import type { Api } from "../ffi/result";
import { releaseOutsideCapture, type DeviceState } from "./device_state";

export type Kind = "stream" | "event" | "module" | "graph" | "exec" | "pool";

interface Held {
  state: DeviceState;
  handle: number;
  kind: Kind;
  /** Run after the release: drops what the owner held (a graph's or exec's Holds). */
  after?: (() => void) | undefined;
}

const release: Record<Kind, (api: Api, h: number) => void> = {
  stream: (api, h) => api.stream_destroy(h), // waits for the stream's queued work
  event: (api, h) => api.event_destroy(h),
  module: (api, h) => api.module_unload(h), // the shim defers the unload past queued work
  graph: (api, h) => api.graph_destroy(h),
  exec: (api, h) => api.graph_exec_destroy(h),
  pool: (api, h) => api.mempool_destroy(h), // blocks still handed out stay valid
};

/** Released natively by the finaliser, so tests can see the net works. */
export const finalized: Record<Kind, number> = { stream: 0, event: 0, module: 0, graph: 0, exec: 0, pool: 0 };

const registry = new FinalizationRegistry<Held>((h) => {
  if (!h.state.open) return; // closing the device released it already
  // never inside an open capture: a release there is illegal and would invalidate it
  releaseOutsideCapture(h.state, () => {
    if (!h.state.open) return;
    try {
      release[h.kind](h.state.api, h.handle);
    } catch {
      /* a finaliser has no caller to report to */
    }
    finalized[h.kind]++;
  });
  h.after?.();
});

/** Release `handle` if `owner` is collected before untrack(owner); then call `after`. */
export function track(owner: object, state: DeviceState, handle: number, kind: Kind, after?: () => void): void {
  registry.register(owner, { state, handle, kind, after }, owner);
}

/**
 * Implemented by what recorded work can use after the call that recorded it returned (Buffer):
 * counts one more user and returns the function that drops it. While a user remains, dispose()
 * only marks the object disposed; its memory is released when the last user goes.
 */
export const HOLD: unique symbol = Symbol("bungpu.hold");
export interface Holdable {
  [HOLD](): () => void;
}

/**
 * What a graph or an exec keeps alive: JS references (so nothing it uses is collected) and, for
 * Holdables, a counted use (so an explicit dispose() defers the free). `drop()` lets them all go;
 * it closes over the references only, never over the owner, so it can run from a finaliser.
 */
export class Holds {
  readonly #refs = new Set<object>();
  readonly #drops: (() => void)[] = [];

  add(o: object): void {
    if (this.#refs.has(o)) return;
    this.#refs.add(o);
    if (typeof (o as Partial<Holdable>)[HOLD] === "function") this.#drops.push((o as Holdable)[HOLD]());
  }

  has(o: object): boolean {
    return this.#refs.has(o);
  }

  /** Drop everything (idempotent). */
  readonly drop = (): void => {
    this.#refs.clear();
    for (const f of this.#drops.splice(0)) {
      try {
        f();
      } catch {
        /* a deferred free has no caller to report to */
      }
    }
  };
}

/** The owner is disposing explicitly: the safety net stands down. */
export function untrack(owner: object): void {
  registry.unregister(owner);
}
