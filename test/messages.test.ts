// Messages a newcomer can act on (issue 25, item 4): a misspelt option key is refused with the
// nearest known one; a bad value is reported the one way ("got the string "1024""); a launch names
// the call and args[i]; a composite tensor op reports under its own name; and `fill(1)` on a
// buffer without an element type is a readable type error (test/strict_types.test.ts checks that).
import { describe, expect, test } from "bun:test";
import { CommandEncoder, ComputeGraph, Device, Event, ExecMode, GpuError, GraphExecutor, MemoryPool, Program, Schedule, Status, Step, Tensor, Variable } from "../src";
import { join } from "node:path";
import { nearest, unknownOption } from "../src/errors";
import { GPT2, loadTokenizer, randomGPT2Weights } from "../src/models";
import { expectGpuError } from "./helpers";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "messages" });
const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
const bad = <T>(v: unknown) => v as T;

describe("an unknown option key is refused, naming the key, the call and the nearest known key", () => {
  test("a case slip: nonblocking → nonBlocking (the stream is not silently blocking)", () => {
    expectGpuError(() => dev.createStream(bad({ nonblocking: true })), Status.INVALID_VALUE,
      'Device.createStream: unknown option "nonblocking" (did you mean nonBlocking?)');
  });

  test("a typo a few edits away", () => {
    using buf = dev.alloc(64);
    expectGpuError(() => buf.read(Uint8Array, bad({ ofset: 4 })), Status.INVALID_VALUE, 'Buffer.read: unknown option "ofset" (did you mean offset?)');
    expectGpuError(() => buf.fill(0, bad({ byte: 8 })), Status.INVALID_VALUE, 'Buffer.fill: unknown option "byte" (did you mean bytes?)');
    expectGpuError(() => Event.create(dev, bad({ timming: true })), Status.INVALID_VALUE, 'Event.create: unknown option "timming" (did you mean timing?)');
    expectGpuError(() => Tensor.from([1, 2]).prepare(bad({ outputName: ["y"] })), Status.INVALID_VALUE, 'Tensor.prepare: unknown option "outputName" (did you mean outputNames?)');
    expectGpuError(() => new MemoryPool(dev, bad({ releasethreshold: 0 })), Status.INVALID_VALUE, "did you mean releaseThreshold?");
  });

  test("nothing near: the known keys are listed", () => {
    expectGpuError(() => dev.createStream(bad({ flags: 1 })), Status.INVALID_VALUE,
      'Device.createStream: unknown option "flags"; the options are nonBlocking, priority');
    const s = dev.createStream();
    using a = dev.alloc(64), b = dev.alloc(64);
    expectGpuError(() => s.copy(a, b, bad({ length: 8 })), Status.INVALID_VALUE, 'Stream.copy: unknown option "length"; the options are bytes, dstOffset, srcOffset');
    expectGpuError(() => Step.copy(a, b, bad({ nme: "x" })), Status.INVALID_VALUE, "Step.copy: unknown option \"nme\"");
    expectGpuError(() => new CommandEncoder(dev).fill(a, 0, bad({ typ: "u8" })), Status.INVALID_VALUE, 'CommandEncoder.fill: unknown option "typ" (did you mean type?)');
  });

  test("launch configs at every door: a misspelt key is refused before anything is queued", () => {
    const s = dev.createStream();
    using a = dev.alloc(64);
    a.fill(0, { type: "u8" });
    const args = [a, a, a, 16] as const;
    // `shared` for sharedBytes was a launch with no shared memory, silently
    expectGpuError(() => vadd.launch(s, bad({ grid: 1, block: 16, args, shared: 256 })), Status.INVALID_VALUE,
      'Kernel.launch: vadd: unknown option "shared" (did you mean sharedBytes?)');
    expectGpuError(() => vadd.launch(s, bad({ grid: 1, blocks: 16, args })), Status.INVALID_VALUE, 'Kernel.launch: vadd: unknown option "blocks" (did you mean block?)');
    expectGpuError(() => new CommandEncoder(dev).dispatch(vadd, bad({ grid: 1, block: 16, args, sharedbytes: 0 })), Status.INVALID_VALUE,
      'CommandEncoder.dispatch: vadd: unknown option "sharedbytes" (did you mean sharedBytes?)');
    expectGpuError(() => Step.kernel(vadd, bad({ grid: 1, block: 16, args, read: [a] })), Status.INVALID_VALUE, 'Step.kernel: vadd: unknown option "read" (did you mean reads?)');
    expectGpuError(() => new Schedule().addKernel(vadd, bad({ grid: 1, block: 16, args, lable: "x" })), Status.INVALID_VALUE,
      'Schedule.addKernel: vadd: unknown option "lable" (did you mean label?)');
    expectGpuError(() => new ComputeGraph(dev).dispatch(vadd, bad({ grid: 1, block: 16, args, write: [a] })), Status.INVALID_VALUE,
      'ComputeGraph.dispatch: vadd: unknown option "write" (did you mean writes?)');
    const session = new GraphExecutor(dev).begin();
    expectGpuError(() => session.dispatch(vadd, bad({ grid: 1, block: 16, args, gird: 1 })), Status.INVALID_VALUE, 'GraphSession.dispatch: vadd: unknown option "gird" (did you mean grid?)');
    expectGpuError(() => vadd.launch(s, bad({ grid: 1, block: 16, args, stream: s })), Status.INVALID_VALUE,
      'Kernel.launch: vadd: unknown option "stream"; the options are grid, block, args, sharedBytes');
    // each door's own keys pass, and nothing refused was queued: a stays zero
    Step.kernel(vadd, { grid: 1, block: 16, args, reads: [a], writes: [a], label: "k" });
    new ComputeGraph(dev).dispatch(vadd, { grid: 1, block: 16, args, reads: [a], writes: [a] });
    session.dispatch(vadd, { grid: 1, block: 16, args, reads: [a] });
    session.dispose();
    s.synchronize();
    expect([...a.read(Uint8Array)]).toEqual(new Array(64).fill(0));
  });

  test("tensor options", () => {
    const x = Tensor.from(new Float32Array(16), [1, 1, 4, 4]);
    expectGpuError(() => x.maxPool2d(2, bad({ strides: 2 })), Status.INVALID_VALUE, 'Tensor.maxPool2d: unknown option "strides" (did you mean stride?)');
    expectGpuError(() => Tensor.zeros([2], bad({ dType: "int32" })), Status.INVALID_VALUE, 'unknown option "dType" (did you mean dtype?)');
  });

  test("nearest: case-insensitive first, then edit distance within a third of the word", () => {
    expect(nearest("NONBLOCKING", ["nonBlocking", "priority"])).toBe("nonBlocking");
    expect(nearest("priorty", ["nonBlocking", "priority"])).toBe("priority");
    expect(nearest("xyz", ["nonBlocking", "priority"])).toBeUndefined();
    expectGpuError(() => unknownOption("X.y", "a", []), Status.INVALID_VALUE, 'X.y: unknown option "a": it takes no options');
  });
});

describe("a bad value is reported with describeGot", () => {
  test('dev.alloc("1024") says got the string "1024"', () => {
    expectGpuError(() => dev.alloc(bad("1024")), Status.INVALID_VALUE, 'size must be a non-negative integer, got the string "1024"');
  });

  test("read and fill options", () => {
    using buf = dev.alloc(64);
    expectGpuError(() => buf.read(Uint8Array, { offset: bad("8") }), Status.INVALID_VALUE, 'got the string "8"');
    expectGpuError(() => buf.fill(0, { bytes: bad("8") }), Status.INVALID_VALUE, 'got the string "8"');
    expectGpuError(() => buf.fill(bad<0>("1"), { type: "u8" }), Status.INVALID_VALUE, 'value must be a number, got the string "1"');
  });

  test("variables, tensors to prepare, a model's options and its tokenizer's", async () => {
    expectGpuError(() => new Variable(bad(3), 1, 4), Status.INVALID_VALUE, "new Variable: name must be an identifier, got 3");
    expectGpuError(() => new Variable("n", bad("1"), 4), Status.INVALID_VALUE, 'bounds must be integers with 0 <= min <= max, got [the string "1", 4]');
    expectGpuError(() => new Variable("n", 1, 4).bind(bad("3")), Status.INVALID_VALUE, 'Variable.bind: variable n must be an integer within its bounds [1, 4], got the string "3"');
    expectGpuError(() => new Variable("n", 1, 4).bind(5), Status.INVALID_VALUE, "Variable.bind: variable n = 5 is outside its bounds [1, 4]");
    expectGpuError(() => Tensor.prepareBatch([bad("x")]), Status.INVALID_VALUE, 'Tensor.prepareBatch: tensors[0] must be a Tensor, got the string "x"');
    const cfg = { nLayer: 1, nEmbd: 8, nHead: 2, vocabSize: 16, nCtx: 8 };
    const w = randomGPT2Weights(cfg, 1);
    expectGpuError(() => GPT2.fromTensors(cfg, w, bad({ dtyp: "float16" })), Status.INVALID_VALUE, 'GPT2.fromTensors: unknown option "dtyp" (did you mean dtype?)');
    expectGpuError(() => GPT2.fromTensors(cfg, w, { batch: bad({ slots: 2, contxt: 4 }) }), Status.INVALID_VALUE, 'GPT2.fromTensors: batch: unknown option "contxt" (did you mean context?)');
    const tok = await loadTokenizer(join(import.meta.dir, "fixtures", "gpt2_hf"));
    expectGpuError(() => tok.decode([1], bad({ skipspecial: true })), Status.INVALID_VALUE, 'TextTokenizer.decode: unknown option "skipspecial" (did you mean skipSpecial?)');
  });

  test("objects by their constructor, with an article", () => {
    expectGpuError(() => dev.createStream(bad({ priority: {} })), Status.INVALID_VALUE, "priority must be an integer, got an Object");
  });
});

describe("a launch names the call and args[i]", () => {
  test("a disposed buffer argument", () => {
    const s = dev.createStream();
    using a = dev.alloc(64);
    const gone = dev.alloc(64);
    gone.dispose();
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [a, a, gone, 16] }), Status.INVALID_HANDLE, "Kernel.launch: vadd: args[2] is a disposed buffer");
    expectGpuError(() => new CommandEncoder(dev).dispatch(vadd, { grid: 1, block: 16, args: [a, gone, a, 16] }), Status.INVALID_HANDLE,
      "CommandEncoder.dispatch: vadd: args[1] is a disposed buffer");
    expectGpuError(() => vadd.launch(s, { grid: 1, block: 16, args: [a, a, bad(new Float32Array(4)), 16] }), Status.INVALID_VALUE,
      "Kernel.launch: vadd: args[2] must be a Buffer, got a Float32Array");
  });
});

describe("a disposed buffer is named by its argument, at the door the call came through", () => {
  test("copies and fills at every door", () => {
    const s = dev.createStream();
    using a = dev.alloc(64);
    const gone = dev.alloc(64);
    gone.dispose();
    expectGpuError(() => s.copy(a, gone), Status.INVALID_HANDLE, "Stream.copy: the src buffer was disposed");
    expectGpuError(() => s.copy(gone, a), Status.INVALID_HANDLE, "Stream.copy: the dst buffer was disposed");
    expectGpuError(() => a.copyTo(gone), Status.INVALID_HANDLE, "Buffer.copyTo: the dst buffer was disposed");
    expectGpuError(() => gone.copyTo(a), Status.INVALID_HANDLE, "Buffer.copyTo: the buffer was disposed");
    expectGpuError(() => new CommandEncoder(dev).copy(gone, a), Status.INVALID_HANDLE, "CommandEncoder.copy: the dst buffer was disposed");
    expectGpuError(() => new ComputeGraph(dev).copy(a, gone), Status.INVALID_HANDLE, "ComputeGraph.copy: the src buffer was disposed");
    expectGpuError(() => new ComputeGraph(dev).fill(gone, 0), Status.INVALID_HANDLE, "ComputeGraph.fill: the buffer was disposed");
    const direct = new GraphExecutor(dev).begin(), recorded = new GraphExecutor(dev).beginRecorded();
    for (const session of [direct, recorded]) {
      expectGpuError(() => session.copy(a, gone), Status.INVALID_HANDLE, "GraphSession.copy: the src buffer was disposed");
      expectGpuError(() => session.fill(gone, 0), Status.INVALID_HANDLE, "GraphSession.fill: the buffer was disposed");
      session.dispose();
    }
  });
});

describe("a buffer disposed after its command was recorded is named by the command and argument", () => {
  test("an encoder's commit, a schedule's compile, an executable's run", () => {
    const s = dev.createStream();
    using a = dev.alloc(64);
    const b = dev.alloc(64), c = dev.alloc(64), d = dev.alloc(64);
    const enc = new CommandEncoder(dev).fill(a, 0, { type: "u8" }).dispatch(vadd, { grid: 1, block: 16, args: [a, b, a, 16] });
    b.dispose();
    expectGpuError(() => enc.commit(s), Status.INVALID_HANDLE, "CommandEncoder.commit: command 1 (vadd): args[1] is a disposed buffer");
    const enc2 = new CommandEncoder(dev).copy(a, c);
    c.dispose();
    expectGpuError(() => enc2.commit(s), Status.INVALID_HANDLE, "CommandEncoder.commit: command 0 (a copy): its source is a disposed buffer");
    const sched = new Schedule().addKernel(vadd, { grid: 1, block: 16, args: [a, a, d, 16], label: "sum" });
    const exec = sched.compile(dev, ExecMode.Stream);
    d.dispose();
    expectGpuError(() => sched.compile(dev, ExecMode.Stream), Status.INVALID_HANDLE, "Schedule.compile: step 0 (sum): args[2] is a disposed buffer");
    expectGpuError(() => exec.run(), Status.INVALID_HANDLE, "Executable.run: command 0 (vadd): args[2] is a disposed buffer");
    exec.dispose();
  });
});

describe("a composite op reports under its own name", () => {
  test("softmax(5) names Tensor.softmax and the axis", () => {
    const x = Tensor.from([1, 2, 3]);
    expectGpuError(() => x.softmax(5), Status.INVALID_VALUE, "Tensor.softmax: axis 5 is out of range for shape [3]");
    expectGpuError(() => x.logSoftmax(-2), Status.INVALID_VALUE, "Tensor.logSoftmax: axis -2 is out of range");
    expectGpuError(() => x.logsumexp(1), Status.INVALID_VALUE, "Tensor.logsumexp: axis 1 is out of range");
    expectGpuError(() => x.std(3), Status.INVALID_VALUE, "Tensor.std: axis 3 is out of range");
    expectGpuError(() => x.layerNorm({ axis: 2 }), Status.INVALID_VALUE, "Tensor.layerNorm: axis 2 is out of range");
  });

  test("composites over other public ops name themselves, with the inner op's reason", () => {
    const x = Tensor.from([1, 2, 3, 4, 5, 6], [2, 3]), y = Tensor.from([1, 2], [2]);
    expectGpuError(() => x.clamp(0, y), Status.INVALID_VALUE, "Tensor.clamp: shapes [2, 3] and [2] cannot be broadcast together");
    expectGpuError(() => x.hardtanh(-1, bad("1")), Status.INVALID_VALUE, 'Tensor.hardtanh: max must be a Tensor or a number, got the string "1"');
    expectGpuError(() => x.lerp(y, 0.5), Status.INVALID_VALUE, "Tensor.lerp: shapes");
    expectGpuError(() => x.isclose(y), Status.INVALID_VALUE, "Tensor.isclose: shapes");
    expectGpuError(() => x.copysign(y), Status.INVALID_VALUE, "Tensor.copysign: shapes");
    expectGpuError(() => x.maskedFill(y.cmpgt(0), 0), Status.INVALID_VALUE, "Tensor.maskedFill: shapes");
    expectGpuError(() => x.dot(y), Status.INVALID_VALUE, "Tensor.dot: shapes [2, 3] and [2] are not aligned");
    expectGpuError(() => x.broadcastTo([4, 4]), Status.INVALID_VALUE, "Tensor.broadcastTo: cannot expand");
    expectGpuError(() => x.zerosLike(bad(5)), Status.INVALID_VALUE, "Tensor.zerosLike: options must be an object, got 5");
    expectGpuError(() => x.fullLike(bad("1")), Status.INVALID_VALUE, 'Tensor.fullLike: value must be a number, got the string "1"');
    expectGpuError(() => Tensor.ones(bad(3)), Status.INVALID_VALUE, "Tensor.ones: shape must be an array of dimensions, got 3");
    expectGpuError(() => x.std(1, bad(2)), Status.INVALID_VALUE, "Tensor.std: keepdim must be a boolean, got 2");
    expectGpuError(() => x.stdMean(7), Status.INVALID_VALUE, "Tensor.stdMean: axis 7 is out of range for shape [2, 3]");
    expectGpuError(() => Tensor.prepareBatch([]), Status.INVALID_VALUE, "Tensor.prepareBatch: give at least one tensor");
    // the error keeps its code and names the call in its fields too
    const e = expectGpuError(() => x.clamp(0, y), Status.INVALID_VALUE);
    expect(e.call).toBe("Tensor.clamp");
  });

  test("a sweep: every Tensor method and static, given bad arguments, reports under its own name", () => {
    const x = Tensor.from(new Float32Array(24).map((_, i) => i), [2, 3, 4]);
    const xi = Tensor.from(new Int32Array(24), [2, 3, 4], { dtype: "int32" });
    const v = Tensor.from(new Float32Array(5), [5]);
    const firsts: unknown[] = [99, -99, "s", null, {}, [], true, x, v, xi, 2, 0, -1, 1.5, NaN, [99], { axis: 99 }, { zzz: 1 }, undefined];
    const seconds: unknown[] = [undefined, 99, x, "s", { zzz: 1 }, true, 2];
    const wrong: string[] = [];
    const attempt = (name: string, f: () => unknown) => {
      try {
        f();
      } catch (e) {
        const call = (e as { call?: unknown }).call;
        if (!(e instanceof GpuError)) wrong.push(`${name}: ${(e as Error).name} ${(e as Error).message}`);
        else if (call !== `Tensor.${name}`) wrong.push(`${name}: reported as ${String(call)}: ${e.message}`);
      }
    };
    const methods = Object.getOwnPropertyNames(Tensor.prototype).filter((n) => n !== "constructor" && typeof Object.getOwnPropertyDescriptor(Tensor.prototype, n)!.value === "function");
    expect(methods.length).toBeGreaterThan(150);
    for (const n of methods)
      for (const self of [x, xi, v])
        for (const a of firsts) for (const b of seconds) attempt(n, () => (self as unknown as Record<string, (...args: unknown[]) => unknown>)[n]!(a, b));
    // broadcastShapes(call, a, b) reports under the name its caller gives it
    const statics = Object.getOwnPropertyNames(Tensor).filter((n) => n !== "broadcastShapes" && typeof (Tensor as unknown as Record<string, unknown>)[n] === "function");
    for (const n of statics) for (const a of firsts) for (const b of seconds) attempt(n, () => (Tensor as unknown as Record<string, (...args: unknown[]) => unknown>)[n]!(a, b));
    expect([...new Set(wrong)]).toEqual([]);
  });
});
