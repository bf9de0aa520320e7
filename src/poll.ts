// Completion is found by polling memory the shim writes: a short phase of
// setImmediate turns, then setTimeout with a backing-off delay, so waiting never blocks the event
// loop and an idle wait costs little CPU. Each turn also runs TypeScript host functions whose
// stream has reached them.
import { serviceHostFns } from "./hostfn";

const IMMEDIATE_PHASE_MS = 2;
const MAX_DELAY_MS = 4;

export function pollUntil(ready: () => boolean): Promise<void> {
  // Host functions run only in the asynchronous turns below, never inside the call that
  // started the wait: `stream.hostFn(fn)` must return before `fn` can run.
  if (ready()) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const start = performance.now();
    let delay = 0;
    const tick = () => {
      try {
        serviceHostFns();
        if (ready()) return resolve();
      } catch (e) {
        return reject(e);
      }
      if (performance.now() - start < IMMEDIATE_PHASE_MS) setImmediate(tick);
      else {
        delay = Math.min(MAX_DELAY_MS, delay + 0.5);
        setTimeout(tick, delay);
      }
    };
    setImmediate(tick);
  });
}

/** A query's answer where a failure counts as finished (a wait must not spin on a broken stream). */
export function settled(query: () => boolean): boolean {
  try {
    return query();
  } catch {
    return true;
  }
}
