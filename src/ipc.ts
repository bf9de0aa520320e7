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
 * (a Uint8Array), copied; anything else is INVALID_VALUE. The shim checks what they say.
 */
export function decodeHandle(call: string, handle: unknown): Uint8Array {
  let bytes: Uint8Array | undefined;
  if (typeof handle === "string") {
    if (!handle.startsWith(PREFIX) || !/^[A-Za-z0-9_-]*$/.test(handle.slice(PREFIX.length)))
      invalid(call, `not a handle from exportHandle() (expected "${PREFIX}…")`);
    bytes = new Uint8Array(Buffer.from(handle.slice(PREFIX.length), "base64url"));
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
