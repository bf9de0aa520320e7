// What a backend is, as TypeScript sees it: one record. The C side of a backend lives in its
// folder under shim/; everything TypeScript must know about it is here.
import type { CompileOptions, CompileTarget, LoadableImage, TieredImage } from "../compile/types";
import type { RingShape } from "./ring";
import type { Dialect } from "./dialect";

export interface BackendRecord {
  /** The name in device specs ("cpu", "cuda:0") and in errors; the key of the backend table. */
  readonly name: string;
  /** Where Device.default() tries it: the lowest rank that opens is the default device. */
  readonly defaultRank: number;
  /** Whether its first device's spec is the bare name ("cpu" rather than "cpu:0"). */
  readonly bareSpec: boolean;
  /** The language its kernels are written in, for people. */
  readonly language: string;
  /** How the tensor code generator writes its kernels. */
  readonly dialect: Dialect;
  /** Kernel source → the image the shim loads (compiled, or the source itself), cached on disk where that pays. */
  compile(device: CompileTarget, source: string, opts: CompileOptions): LoadableImage;
  /**
   * Generated tensor kernels built in two tiers, where the backend has them (the CPU: -O0 at once,
   * -O3 in the background, the same bits from both): a build to load now and the optimized one
   * on its way, or the optimized build alone where it is cached; null where tiering is off.
   */
  compileTiered?(device: CompileTarget, source: string, opts: CompileOptions): TieredImage | null;
  /** Notice finished background builds now (cheap; plans call it as they run): for programs that never yield to the event loop. */
  pollCompiles?(): void;
  /** What identifies the compiler of its kernels, for caches keyed by it. */
  compilerIdentity(device: CompileTarget): string;
  /** Extra compiler options for generated tensor kernels. */
  readonly tensorCompileOptions: readonly string[];
  /** Whether generated code can differ between two devices of this backend (a plan cache keys on the model then). */
  readonly codeDependsOnModel: boolean;
  /** Whether its default stream is a legacy one that every blocking stream's work is ordered with. */
  readonly legacyDefaultStream: boolean;
  /** Whether its streams can wait on a word in memory (stream memory operations), for host functions. */
  readonly streamWaitValue: boolean;
  /**
   * Whether its device work runs on the host's own cores: a short plan.run then runs in a turn of
   * the event loop on the calling thread (with the backend's pool), as onnxruntime-node's
   * session.run does, rather than being handed to a stream's thread and woken back.
   */
  readonly computesOnHost: boolean;
  readonly ring: {
    /** The ring kernels' source around a handler, in its language (the shared loops: ./ring). */
    source(handler: string, entry: string, shape: RingShape): string;
    /** Whether a kernel can stay resident (Ring mode proper); otherwise Ring mode relaunches per batch. */
    readonly persistent: boolean;
    /** Typical software overhead of one message round trip, in µs, by kernel mode. */
    readonly typicalOverheadUs: { readonly batch: number; readonly ring: number };
  };
}
