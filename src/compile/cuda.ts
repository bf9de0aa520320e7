// CUDA kernels: CUDA C compiled by NVRTC (through the shim, bg_rtc_*) to a CUBIN for the device's
// sm_XY, PTX where this NVRTC does not know the GPU; cached on disk.
import { readFileSync } from "node:fs";
import { ImageKind, api, cstr, rtcCompile } from "../../ffi/result";
import { cached, compileStats, sha256, storeData } from "./cache";
import type { CompileOptions, CompileTarget, LoadableImage } from "./types";

/** A CUDA image: an ELF CUBIN (the usual) or NUL-terminated PTX (NVRTC older than the GPU). */
export interface CudaImage {
  kind: "cubin" | "ptx";
  /** The bytes to load (PTX with its NUL). */
  code: Uint8Array;
  /** NVRTC's log (warnings). */
  log: string;
}

function isElf(b: Uint8Array): boolean {
  return b.length >= 4 && b[0] === 0x7f && b[1] === 0x45 && b[2] === 0x4c && b[3] === 0x46;
}

/** "nvrtc MAJOR.MINOR" as the shim reports it, or "nvrtc" when it cannot say. */
function nvrtcVersion(device: CompileTarget): string {
  try {
    const [major, minor] = api("cuda").rtc_version(device.handle);
    return `nvrtc ${major}.${minor}`;
  } catch {
    return "nvrtc";
  }
}

/** What identifies CUDA kernels' compiler: NVRTC's version and the GPU architecture. */
export function cudaCompilerIdentity(device: CompileTarget): string {
  const [major, minor] = device.props.computeCapability;
  return `${nvrtcVersion(device)}|sm_${major}${minor}`;
}

/**
 * CUDA C → an image for `device`, through the shim's NVRTC path (bg_rtc_compile): a CUBIN for the
 * device's own sm_XY, PTX only where this NVRTC does not know the GPU. Cached on disk unless
 * `useCache` is false (tests that must see NVRTC run).
 */
export function compileCudaImage(device: CompileTarget, source: string, opts: CompileOptions = {}, useCache = true): CudaImage {
  const [major, minor] = device.props.computeCapability;
  const rtc = nvrtcVersion(device);
  const options = opts.options ?? [];
  const key = sha256("cuda-image", `sm_${major}${minor}`, rtc, options.join("\n"), source);
  const hit = useCache ? cached("cuda", key, "img") : null;
  if (hit) {
    compileStats.diskHits++;
    const data = new Uint8Array(readFileSync(hit));
    return isElf(data) ? { kind: "cubin", code: data, log: "" } : { kind: "ptx", code: cstr(new TextDecoder().decode(data)), log: "" };
  }
  compileStats.compilerRuns++;
  // Throws GpuError (with NVRTC's log) on a failed compilation, and on a refusal that compiled nothing.
  const { code, bytes: codeLen, log: text } = rtcCompile(device.handle, source, opts.name ?? "kernel.cu", options.join("\n"), true, "cuda");
  const bytes = code.subarray(0, codeLen);
  if (useCache) storeData("cuda", key, "img", bytes, rtc);
  // PTX keeps its NUL terminator (code has one extra zero byte); a CUBIN is passed as is.
  return isElf(bytes) ? { kind: "cubin", code: bytes, log: text } : { kind: "ptx", code, log: text };
}

/** CUDA C → what the shim loads (a CUBIN or PTX). */
export function compileCuda(device: CompileTarget, source: string, opts: CompileOptions): LoadableImage {
  const img = compileCudaImage(device, source, opts);
  return { kind: img.kind === "cubin" ? ImageKind.cubin : ImageKind.ptx, image: img.code, bytes: img.code.byteLength };
}
