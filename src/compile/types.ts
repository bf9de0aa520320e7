// What the per-backend compilers take and give: the options a user passes to Program.compile,
// the little of a device they read, and the image the shim loads (bg_module_load).

export interface CompileOptions {
  /** A name for logs and the source file ("kernel" by default). */
  name?: string;
  /** Extra compiler options (C compiler flags on CPU, NVRTC options on CUDA). */
  options?: string[] | undefined;
}

/** The part of a Device a compiler reads: its native handle and, on CUDA, its architecture. */
export interface CompileTarget {
  readonly handle: number;
  readonly props: { readonly computeCapability: readonly [number, number] };
}

/** A compiled kernel module as the shim loads it: bg_module_load(device, kind, image, bytes). */
export interface LoadableImage {
  /** One of ImageKind. */
  kind: number;
  image: Uint8Array | ArrayBuffer;
  bytes: number;
}

/** A build to load now and, where it is not the optimized one, the optimized build on its way (tiered compilation). */
export interface TieredImage {
  /** The optimized build where it is at hand (cached); else a quick one. */
  image: LoadableImage;
  /**
   * Absent where `image` is the optimized build. Else: start the optimized build; `done` is called
   * once, where its end is noticed (a turn of the event loop, or the backend's pollCompiles), with
   * its image or its error (NOT_SUPPORTED where it is not wanted: BUNGPU_TIER=quick).
   */
  whenOptimized?(done: (result: LoadableImage | Error) => void): void;
}
