// Metal kernels: the MSL source itself is the image; the Metal framework compiles it when the
// module loads (bg_module_load with BG_IMAGE_MSL_SOURCE).
import { cstr } from "../../ffi/result";
import { ImageKind } from "../../ffi/result";
import type { LoadableImage } from "./types";

/** MSL source → what the shim loads: the text, without its NUL in the byte count. */
export function compileMetal(source: string): LoadableImage {
  const image = cstr(source);
  return { kind: ImageKind.mslSource, image, bytes: image.byteLength - 1 };
}
