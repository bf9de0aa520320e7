// The safety net of DESIGN.md: a native object whose TypeScript owner is collected without
// dispose() is released by a FinalizationRegistry. Not the plan (dispose() and `using` are), and
// never a source of errors: a finaliser has no caller to report to. Buffers have their own
// registry (buffer.ts), which also counts live bytes.
import { N } from "../ffi/native";
import { releaseOutsideCapture, type DeviceState } from "./device";

type Kind = "stream" | "event" | "module" | "graph" | "exec";

interface Held {
  state: DeviceState;
  handle: number;
  kind: Kind;
}

const release: Record<Kind, (h: number) => number> = {
  stream: (h) => N.bg_stream_destroy(h), // waits for the stream's queued work
  event: (h) => N.bg_event_destroy(h),
  module: (h) => N.bg_module_unload(h), // the shim defers the unload past queued work
  graph: (h) => N.bg_graph_destroy(h),
  exec: (h) => N.bg_graph_exec_destroy(h),
};

/** Released natively by the finaliser, so tests can see the net works. */
export const finalized: Record<Kind, number> = { stream: 0, event: 0, module: 0, graph: 0, exec: 0 };

const registry = new FinalizationRegistry<Held>((h) => {
  if (!h.state.open) return; // closing the device released it already
  // never inside an open capture: a release there is illegal and would invalidate it
  releaseOutsideCapture(h.state, () => {
    if (!h.state.open) return;
    release[h.kind](h.handle);
    finalized[h.kind]++;
  });
});

/** Release `handle` if `owner` is collected before untrack(owner). */
export function track(owner: object, state: DeviceState, handle: number, kind: Kind): void {
  registry.register(owner, { state, handle, kind }, owner);
}

/** The owner is disposing explicitly: the safety net stands down. */
export function untrack(owner: object): void {
  registry.unregister(owner);
}
