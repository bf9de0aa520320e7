// Messages a newcomer can act on (issue 25, item 4): a misspelt option key is refused with the
// nearest known one; a bad value is reported the one way ("got the string "1024""); a launch names
// the call and args[i]; a composite tensor op reports under its own name; and `fill(1)` on a
// buffer without an element type is a readable type error (test/strict_types.test.ts checks that).
import { describe, expect, test } from "bun:test";
import { CommandEncoder, Device, Event, MemoryPool, Program, Status, Step, Tensor } from "../src";
import { nearest, unknownOption } from "../src/errors";
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

describe("a composite op reports under its own name", () => {
  test("softmax(5) names Tensor.softmax and the axis", () => {
    const x = Tensor.from([1, 2, 3]);
    expectGpuError(() => x.softmax(5), Status.INVALID_VALUE, "Tensor.softmax: axis 5 is out of range for shape [3]");
    expectGpuError(() => x.logSoftmax(-2), Status.INVALID_VALUE, "Tensor.logSoftmax: axis -2 is out of range");
    expectGpuError(() => x.logsumexp(1), Status.INVALID_VALUE, "Tensor.logsumexp: axis 1 is out of range");
    expectGpuError(() => x.std(3), Status.INVALID_VALUE, "Tensor.std: axis 3 is out of range");
    expectGpuError(() => x.layerNorm({ axis: 2 }), Status.INVALID_VALUE, "Tensor.layerNorm: axis 2 is out of range");
  });
});
