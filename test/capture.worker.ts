// A real thread for the capture-mode tests: it loads libbungpu (process-global, so the main
// thread's device handle is valid here) and makes a call that is illegal during capture.
import { N, slot, readPtr, lastError, loadInfo } from "../ffi/native";

declare const self: Worker;

self.onmessage = (e: MessageEvent<{ device: number; bytes: number }>) => {
  const { device, bytes } = e.data;
  const rc = N.bg_mem_alloc(device, bytes, slot(0));
  const msg = rc === 0 ? "" : lastError();
  let freeRc = -1;
  if (rc === 0) freeRc = N.bg_mem_free(device, readPtr(0));
  self.postMessage({ rc, msg, freeRc, path: loadInfo.path });
};
