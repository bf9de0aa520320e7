// Handles for memory and events shared between processes (Buffer.exportHandle,
// Event.exportHandle, Device.openSharedBuffer, Device.openSharedEvent): the shim's
// IPC_HANDLE_BYTES opaque bytes as a string a program can send over a pipe, a socket or a file.
// The string is "bgipc:" and the bytes in base64url; nothing in it is meant to be read.
import { IPC_HANDLE_BYTES } from "../ffi/constants";
import { describeGot, invalid } from "./errors";

const PREFIX = "bgipc:";

/** A handle's bytes as the string exportHandle() returns. */
export function encodeHandle(bytes: Uint8Array): string {
  return PREFIX + Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

/**
 * The IPC_HANDLE_BYTES bytes of a handle given as exportHandle()'s string or as those bytes
 * (a Uint8Array), copied; anything else is INVALID_VALUE (a string must be exactly what
 * exportHandle() wrote: no extra or altered character). The shim checks what the bytes say:
 * a forged, stale or mismatched handle is INVALID_HANDLE there.
 */
export function decodeHandle(call: string, handle: unknown): Uint8Array {
  let bytes: Uint8Array | undefined;
  if (typeof handle === "string") {
    const body = handle.startsWith(PREFIX) ? handle.slice(PREFIX.length) : "";
    if (!handle.startsWith(PREFIX) || !/^[A-Za-z0-9_-]*$/.test(body))
      invalid(call, `not a handle from exportHandle() (expected "${PREFIX}…")`);
    bytes = new Uint8Array(Buffer.from(body, "base64url"));
    // Strict: exactly the text exportHandle() writes for these bytes. Base64 decoders drop a
    // trailing partial character and ignore the spare bits of the last one; neither is a handle.
    if (bytes.byteLength === IPC_HANDLE_BYTES && encodeHandle(bytes) !== handle)
      invalid(call, `not a handle from exportHandle(): ${body.length} characters after "${PREFIX}", not the ${encodeHandle(bytes).length - PREFIX.length} it writes`);
  } else if (handle instanceof Uint8Array) bytes = new Uint8Array(handle);
  else invalid(call, `handle must be the string exportHandle() returned, got ${describeGot(handle)}`);
  if (bytes.byteLength !== IPC_HANDLE_BYTES)
    invalid(call, `a handle is ${IPC_HANDLE_BYTES} bytes, got ${bytes.byteLength}`);
  return bytes;
}

/** A buffer for the shim to write a handle into. */
export function handleBytes(): Uint8Array {
  return new Uint8Array(IPC_HANDLE_BYTES);
}
