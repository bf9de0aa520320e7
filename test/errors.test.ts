// Every invalid argument to a public call is a GpuError with its code: null, undefined, wrong
// types, NaN, Infinity, negative and huge values, at each public entry of the tensor, plan,
// encoder, graph executor, schedule and buffer APIs. Table-driven: the test fails listing every
// entry that threw something else (a TypeError, a RangeError, a raw Error) or nothing at all.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import {
  CommandEncoder,
  Device,
  Event,
  ExecMode,
  GpuError,
  Graph,
  GraphExecutor,
  HostBuffer,
  Program,
  Schedule,
  Status,
  StatusName,
  Step,
  Tensor,
  Variable,
} from "../src";
import { ComputeGraph } from "../src/graph_executor";
import { kernelSources } from "./kernels";

const dev = Device.open("cpu");
const mod = Program.compile(dev, kernelSources, { name: "errors" });
const vadd = mod.kernel("vadd", ["buffer", "buffer", "buffer", "i32"]);
const A = dev.alloc(64).fill(0);
const B = dev.alloc(64).fill(0);
const C = dev.alloc(64).fill(0);
const stream = dev.createStream();
const t = Tensor.from(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
const S = new Variable("S", 1, 8);
const plan = Tensor.arange(S).cast("float32").mul(2).prepare({ device: dev });
const enc = new CommandEncoder(dev);
const exe = new GraphExecutor(dev, { stream });
const graph = new ComputeGraph(dev);
graph.dispatch(vadd, { grid: 1, block: 16, args: [A, B, C, 16] });
const okStep = Step.kernel(vadd, { grid: 1, block: 16, args: [A, B, C, 16] });
const exec = new Schedule([okStep]).compile(dev, ExecMode.Stream);

afterAll(() => {
  exec.dispose();
  plan.dispose();
  for (const b of [A, B, C]) b.dispose();
  stream.dispose();
  mod.dispose();
  dev.dispose();
});

const IV = Status.INVALID_VALUE;
const HUGE = 2 ** 62;
type Entry = [label: string, fn: () => unknown, codes?: readonly number[]];

// Results that are promises are awaited: an async entry must reject with a GpuError too.
async function outcome(fn: () => unknown): Promise<unknown> {
  try {
    const r = fn();
    if (r && typeof (r as Promise<unknown>).then === "function") await r;
    return undefined;
  } catch (e) {
    return e ?? new Error("threw a nullish value");
  }
}

async function runTable(entries: Entry[]): Promise<void> {
  const wrong: string[] = [];
  for (const [label, fn, codes = [IV]] of entries) {
    const e = await outcome(fn);
    if (e === undefined) wrong.push(`${label}: no error`);
    else if (!(e instanceof GpuError)) wrong.push(`${label}: ${(e as Error)?.name ?? typeof e}: ${String((e as Error)?.message ?? e).split("\n")[0]}`);
    else if (!codes.includes(e.code)) wrong.push(`${label}: GpuError ${e.codeName}, want ${codes.join("|")}`);
    else if (!e.call || !e.backend) wrong.push(`${label}: GpuError without call/backend`);
  }
  expect(wrong).toEqual([]);
}

const any = null as never; // a value the types forbid, as JavaScript callers pass them
const bad = <T>(v: unknown) => v as T;

describe("every invalid argument is a GpuError", () => {
  test("Tensor creation", async () => {
    await runTable([
      ["Tensor.from(null)", () => Tensor.from(any)],
      ["Tensor.from(undefined)", () => Tensor.from(bad(undefined))],
      ["Tensor.from('abc')", () => Tensor.from(bad("abc"))],
      ["Tensor.from({})", () => Tensor.from(bad({}))],
      ["Tensor.from([1, 'x'])", () => Tensor.from(bad([1, "x"]))],
      ["Tensor.from(data, [NaN])", () => Tensor.from([1, 2], [NaN])],
      ["Tensor.from(data, 'ab')", () => Tensor.from([1, 2], bad("ab"))],
      ["Tensor.from(data, [3]) (size mismatch)", () => Tensor.from([1, 2], [3])],
      ["Tensor.from(data, { dtype: 'int16' })", () => Tensor.from([1, 2], undefined, { dtype: bad("int16") })],
      ["Tensor.from(typed, { dtype: 'float64' })", () => Tensor.from(new Float32Array(2), undefined, { dtype: bad("float64") })],
      ["Tensor.from(3, [2], { dtype: 'float64' })", () => Tensor.from(3, [2], { dtype: bad("float64") })],
      ["Tensor.from(data, shape, null)", () => Tensor.from([1, 2], [2], any)],
      ["Tensor.from(Float64Array)", () => Tensor.from(bad(new Float64Array(2)))],
      ["Tensor.full(null, 1)", () => Tensor.full(any, 1)],
      ["Tensor.full([2], 'x')", () => Tensor.full([2], bad("x"))],
      ["Tensor.full([2], null)", () => Tensor.full([2], any)],
      ["Tensor.full([Infinity], 1)", () => Tensor.full([Infinity], 1)],
      ["Tensor.full([-1], 1)", () => Tensor.full([-1], 1)],
      ["Tensor.full([2], 1, { dtype: 'uint32' })", () => Tensor.full([2], 1, { dtype: bad("uint32") })],
      ["Tensor.zeros(null)", () => Tensor.zeros(any)],
      ["Tensor.zeros(undefined)", () => Tensor.zeros(bad(undefined))],
      ["Tensor.zeros(3)", () => Tensor.zeros(bad(3))],
      ["Tensor.zeros('3')", () => Tensor.zeros(bad("3"))],
      ["Tensor.zeros([null])", () => Tensor.zeros(bad([null]))],
      ["Tensor.zeros([2], null)", () => Tensor.zeros([2], any)],
      ["Tensor.ones([2.5])", () => Tensor.ones([2.5])],
      ["Tensor.zeros([2**62])", () => Tensor.zeros([HUGE])],
      ["Tensor.zeros([2**31, 2**31])", () => Tensor.zeros([2 ** 31, 2 ** 31])],
      ["Tensor.rand(null)", () => Tensor.rand(any)],
      ["Tensor.rand([NaN])", () => Tensor.rand([NaN])],
      ["Tensor.rand([2], { seed: 'x' })", () => Tensor.rand([2], { seed: bad("x") })],
      ["Tensor.rand([2], null)", () => Tensor.rand([2], any)],
      ["Tensor.randn(undefined)", () => Tensor.randn(bad(undefined))],
      ["Tensor.arange(NaN)", () => Tensor.arange(NaN)],
      ["Tensor.arange(0, Infinity)", () => Tensor.arange(0, Infinity)],
      ["Tensor.arange(0, NaN)", () => Tensor.arange(0, NaN)],
      ["Tensor.arange(-Infinity, 0)", () => Tensor.arange(-Infinity, 0)],
      ["Tensor.arange('a')", () => Tensor.arange(bad("a"))],
      ["Tensor.arange(null)", () => Tensor.arange(any)],
      ["Tensor.arange(0, 2**62)", () => Tensor.arange(0, HUGE)],
      ["Tensor.arange(0, 4, 0)", () => Tensor.arange(0, 4, 0)],
      ["Tensor.arange(0, 4, 'x')", () => Tensor.arange(0, 4, bad("x"))],
      ["Tensor.arange(4, undefined, 1, { dtype: 'uint16' })", () => Tensor.arange(4, undefined, 1, { dtype: bad("uint16") })],
      ["Tensor.manualSeed('x')", () => Tensor.manualSeed(bad("x"))],
      ["Tensor.fromDims(null)", () => Tensor.fromDims(any)],
      ["Tensor.fromDims([S], 'int16')", () => Tensor.fromDims([S], bad("int16"))],
      ["new Variable(null, 1, 2)", () => new Variable(any, 1, 2)],
      ["new Variable('V', NaN, 2)", () => new Variable("V", NaN, 2)],
      ["new Variable('V', 3, 2)", () => new Variable("V", 3, 2)],
      ["new Variable('V', 1, Infinity)", () => new Variable("V", 1, Infinity)],
    ]);
  });

  test("Tensor operations", async () => {
    await runTable([
      ["t.expand(null)", () => t.expand(any)],
      ["t.expand([NaN, 3])", () => t.expand([NaN, 3])],
      ["t.expand('ab')", () => t.expand(bad("ab"))],
      ["t.expand([2, 3, 4])", () => t.expand([2, 3, 4])],
      ["t.reshape(null)", () => t.reshape(any)],
      ["t.reshape(undefined)", () => t.reshape(bad(undefined))],
      ["t.reshape([2.5, 2])", () => t.reshape([2.5, 2])],
      ["t.reshape([5])", () => t.reshape([5])],
      ["t.reshape(['a'])", () => t.reshape(bad(["a"]))],
      ["t.permute(null)", () => t.permute(any)],
      ["t.permute([0, 0])", () => t.permute([0, 0])],
      ["t.permute(['a', 'b'])", () => t.permute(bad(["a", "b"]))],
      ["t.permute([0, NaN])", () => t.permute([0, NaN])],
      ["t.transpose('a')", () => t.transpose(bad("a"))],
      ["t.sum('x')", () => t.sum(bad("x"))],
      ["t.sum(null)", () => t.sum(any)],
      ["t.sum([NaN])", () => t.sum([NaN])],
      ["t.sum(5)", () => t.sum(5)],
      ["t.sum(0, 'yes')", () => t.sum(0, bad("yes"))],
      ["t.max(Infinity)", () => t.max(Infinity)],
      ["t.mean({})", () => t.mean(bad({}))],
      ["t.where(null, 1)", () => t.where(any, 1)],
      ["t.where('x', 1)", () => t.where(bad("x"), 1)],
      ["Tensor.where(null, 1, 2)", () => Tensor.where(any, 1, 2)],
      ["Tensor.where(t, t, 'x')", () => Tensor.where(t, t, bad("x"))],
      ["t.slice(null)", () => t.slice(any)],
      ["t.slice([[NaN]])", () => t.slice([[NaN]])],
      ["t.slice(['a'])", () => t.slice(bad(["a"]))],
      ["t.slice([[0, 1], [0, 1], [0, 1]])", () => t.slice([[0, 1], [0, 1], [0, 1]])],
      ["t.shrink(null)", () => t.shrink(any)],
      ["t.pad(null)", () => t.pad(any)],
      ["t.pad([[1]])", () => t.pad(bad([[1]]))],
      ["t.pad([['a', 'b']])", () => t.pad(bad([["a", "b"]]))],
      ["t.pad([[1, 1]], 'x')", () => t.pad([[1, 1]], bad("x"))],
      ["t.pad([[-1, 0]])", () => t.pad([[-1, 0]])],
      ["t.pad([[2**62, 0]])", () => t.pad([[HUGE, 0]])],
      ["t.flip(null)", () => t.flip(any)],
      ["t.flip('a')", () => t.flip(bad("a"))],
      ["t.unsqueeze(null)", () => t.unsqueeze(any)],
      ["t.squeeze('a')", () => t.squeeze(bad("a"))],
      ["t.add(null)", () => t.add(any)],
      ["t.add('x')", () => t.add(bad("x"))],
      ["t.mul({})", () => t.mul(bad({}))],
      ["t.matmul(null)", () => t.matmul(any)],
      ["t.matmul(3)", () => t.matmul(bad(3))],
      ["t.dot(null)", () => t.dot(any)],
      ["t.cast('float64')", () => t.cast(bad("float64"))],
      ["t.cast(null)", () => t.cast(any)],
      ["t.broadcastTo(null)", () => t.broadcastTo(any)],
      ["t.softmax('a')", () => t.softmax(bad("a"))],
      ["t.layerNorm(null)", () => t.layerNorm(any)],
      ["t.layerNorm({ eps: 'x' })", () => t.layerNorm({ eps: bad("x") })],
      ["t.layerNorm({ weight: 3 })", () => t.layerNorm({ weight: bad(3) })],
    ]);
  });

  test("plans", async () => {
    await runTable([
      ["Tensor.prepareBatch(null)", () => Tensor.prepareBatch(any)],
      ["Tensor.prepareBatch([null])", () => Tensor.prepareBatch(bad([null]))],
      ["Tensor.prepareBatch([1])", () => Tensor.prepareBatch(bad([1]))],
      ["Tensor.prepareBatch([t], null)", () => Tensor.prepareBatch([t], any)],
      ["Tensor.prepareBatch([t], { device: 'cpu' })", () => Tensor.prepareBatch([t], { device: bad("cpu") })],
      ["t.prepare(null)", () => t.prepare(any)],
      ["t.toArray(null)", () => t.toArray(any)],
      ["t.toArray({ device: {} })", () => t.toArray({ device: bad({}) })],
      ["Tensor.zeros([2**31, 2**31]).toArray()", () => Tensor.zeros([2 ** 31, 2 ** 31]).toArray({ device: dev }), [IV, Status.OUT_OF_MEMORY]],
      ["Tensor.zeros([2**40]).toArray()", () => Tensor.zeros([2 ** 40]).toArray({ device: dev }), [IV, Status.OUT_OF_MEMORY]],
      ["Tensor.from([1]).expand([2**40]).prepare()", () => Tensor.from([1]).expand([2 ** 40]).prepare({ device: dev }), [IV, Status.OUT_OF_MEMORY]],
      ["plan.executeWithVars(null)", () => plan.executeWithVars(any)],
      ["plan.executeWithVars('x')", () => plan.executeWithVars(bad("x"))],
      ["plan.executeWithVars(5)", () => plan.executeWithVars(bad(5))],
      ["plan.executeWithVars({ S: NaN })", () => plan.executeWithVars({ S: NaN })],
      ["plan.executeWithVars({ S: 'a' })", () => plan.executeWithVars({ S: bad("a") })],
      ["plan.executeWithVars({ S: 99 })", () => plan.executeWithVars({ S: 99 })],
      ["plan.executeWithVars({ T: 1 })", () => plan.executeWithVars({ T: 1 })],
      ["plan.executeWithVars([null])", () => plan.executeWithVars(bad([null]))],
      ["plan.executeWithVars([['S']])", () => plan.executeWithVars(bad([["S"]]))],
      ["plan.executeWithVars({ S: 2 }, null)", () => plan.executeWithVars({ S: 2 }, any)],
      ["plan.execute(null)", () => plan.execute(any)],
      ["plan.execute('x')", () => plan.execute(bad("x"))],
      ["plan.execute({ mode: 'x' })", () => plan.execute({ mode: bad("x") })],
      ["plan.execute({ stream: 3 })", () => plan.execute({ stream: bad(3) })],
      ["plan.executeAsync(null)", () => plan.executeAsync(any)],
      ["plan.executeAsync({ mode: 1 })", () => plan.executeAsync({ mode: bad(1) })],
      ["plan.executeProfiled({ stream: {} })", () => plan.executeProfiled({ stream: bad({}) })],
      ["plan.readOutput('a')", () => plan.readOutput(bad("a"))],
      ["plan.readOutput(-1)", () => plan.readOutput(-1)],
      ["plan.readOutput(NaN)", () => plan.readOutput(NaN)],
      ["plan.readOutput(null)", () => plan.readOutput(any)],
      ["plan.outputShape(1.5)", () => plan.outputShape(1.5)],
      ["plan.outputBufferAt('x')", () => plan.outputBufferAt(bad("x"))],
      ["plan.bufferAt(null)", () => plan.bufferAt(any)],
      ["plan.run(null)", () => plan.run(any)],
      ["plan.run('x')", () => plan.run(bad("x"))],
      ["plan.run([new Float64Array(1)])", () => plan.run(bad([new Float64Array(1)]))],
      ["plan.run([], { vars: { S: NaN } })", () => plan.run([], { vars: { S: NaN } })],
      ["plan.run({ S: 'a' })", () => plan.run({ S: bad<number>("a") })],
      ["plan.run([], null)", () => plan.run([], any)],
      ["plan.run([], { mode: 'x' })", () => plan.run([], { mode: bad("x") })],
      ["Tensor.from([1], [1], { name: 3 })", () => Tensor.from([1], [1], { name: bad(3) })],
      ["prepare({ outputNames: 'y' })", () => t.prepare({ device: dev, outputNames: bad("y") })],
    ]);
  });

  test("buffers", async () => {
    await runTable([
      ["dev.alloc(null)", () => dev.alloc(any)],
      ["dev.alloc(undefined)", () => dev.alloc(bad(undefined))],
      ["dev.alloc('4')", () => dev.alloc(bad("4"))],
      ["dev.alloc(NaN)", () => dev.alloc(NaN)],
      ["dev.alloc(-1)", () => dev.alloc(-1)],
      ["dev.alloc(1.5)", () => dev.alloc(1.5)],
      ["dev.alloc(Infinity)", () => dev.alloc(Infinity)],
      ["dev.alloc(2**62)", () => dev.alloc(HUGE), [IV, Status.OUT_OF_MEMORY]],
      ["dev.alloc(2**53)", () => dev.alloc(2 ** 53), [IV, Status.OUT_OF_MEMORY]],
      [
        "dev.alloc(2**33).read() (more than a JS array holds)",
        () => {
          const b = dev.alloc(2 ** 33);
          try {
            return b.read();
          } finally {
            b.dispose();
          }
        },
        [IV, Status.OUT_OF_MEMORY],
      ],
      ["HostBuffer.alloc(dev, null)", () => HostBuffer.alloc(dev, any)],
      ["HostBuffer.alloc(dev, 2**62)", () => HostBuffer.alloc(dev, HUGE), [IV, Status.OUT_OF_MEMORY]],
      ["HostBuffer.alloc(dev, NaN)", () => HostBuffer.alloc(dev, NaN)],
      ["HostBuffer.alloc(null, 4)", () => HostBuffer.alloc(any, 4)],
      ["A.write(null)", () => A.write(any)],
      ["A.write('abc')", () => A.write(bad("abc"))],
      ["A.write(data, null)", () => A.write(new Uint8Array(4), any)],
      ["A.write(data, { offset: NaN })", () => A.write(new Uint8Array(4), { offset: NaN })],
      ["A.write(too long)", () => A.write(new Uint8Array(65))],
      ["A.read('x')", () => A.read(bad("x"))],
      ["A.read(Uint8Array, { offset: -1 })", () => A.read(Uint8Array, { offset: -1 })],
      ["A.read(Uint8Array, null)", () => A.read(Uint8Array, any)],
      ["A.view(NaN)", () => A.view(NaN)],
      ["A.view(0, 2**62)", () => A.view(0, HUGE)],
      ["A.view('a')", () => A.view(bad("a"))],
      ["A.copyTo(null)", () => A.copyTo(any)],
      ["A.copyTo(B, null)", () => A.copyTo(B, any)],
      ["A.copyTo(B, { bytes: 2**62 })", () => A.copyTo(B, { bytes: HUGE })],
      ["A.fill('x')", () => A.fill(bad<0>("x"))],
      ["A.fill(0, null)", () => A.fill(0, any)],
      ["A.fill(0, { type: 'u64' })", () => A.fill(0, { type: bad("u64") })],
      ["A.fill(0, { bytes: Infinity })", () => A.fill(0, { bytes: Infinity })],
    ]);
  });

  test("encoders, graphs and schedules", async () => {
    await runTable([
      ["new CommandEncoder(null)", () => new CommandEncoder(any)],
      ["new CommandEncoder(dev, null)", () => new CommandEncoder(dev, any)],
      ["new CommandEncoder(dev, { initialBytes: -1 })", () => new CommandEncoder(dev, { initialBytes: -1 })],
      ["new CommandEncoder(dev, { initialBytes: 2**62 })", () => new CommandEncoder(dev, { initialBytes: HUGE }), [IV, Status.OUT_OF_MEMORY]],
      ["new CommandEncoder(dev, { initialBytes: 'x' })", () => new CommandEncoder(dev, { initialBytes: bad("x") })],
      ["enc.dispatch(null, cfg)", () => enc.dispatch(any, { grid: 1, block: 1, args: [A, B, C, 1] })],
      ["enc.dispatch({}, cfg)", () => enc.dispatch(bad<never>({}), { grid: 1, block: 1, args: [A, B, C, 1] })],
      ["enc.dispatch(k, null)", () => enc.dispatch(vadd, any)],
      ["enc.dispatch(k, { args: null })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: any })],
      ["enc.dispatch(k, { args: 'abc' })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: bad("abc") })],
      ["enc.dispatch(k, { grid: NaN })", () => enc.dispatch(vadd, { grid: NaN, block: 1, args: [A, B, C, 1] })],
      ["enc.dispatch(k, { grid: null })", () => enc.dispatch(vadd, { grid: any, block: 1, args: [A, B, C, 1] })],
      ["enc.dispatch(k, { block: [1, 'a'] })", () => enc.dispatch(vadd, { grid: 1, block: bad([1, "a"]), args: [A, B, C, 1] })],
      ["enc.dispatch(k, { args: [null, B, C, 1] })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: [any, B, C, 1] })],
      ["enc.dispatch(k, { args: [A, B, C, 'x'] })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, bad("x")] })],
      ["enc.dispatch(k, { args: [A, B, C, NaN] })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, NaN] })],
      ["enc.dispatch(k, { args: [A, B, C, 2**40] })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, 2 ** 40] })],
      ["enc.dispatch(k, { sharedBytes: -1 })", () => enc.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, 1], sharedBytes: -1 })],
      ["enc.copy(null, B)", () => enc.copy(any, B)],
      ["enc.copy(A, B, null)", () => enc.copy(A, B, any)],
      ["enc.copy(A, B, { bytes: NaN })", () => enc.copy(A, B, { bytes: NaN })],
      ["enc.fill(A, 'x')", () => enc.fill(A, bad<0>("x"))],
      ["enc.fill(A, 0, null)", () => enc.fill(A, 0, any)],
      ["enc.recordEvent(null)", () => enc.recordEvent(any)],
      ["enc.waitEvent('e')", () => enc.waitEvent(bad("e"))],
      ["enc.commit(null)", () => enc.commit(any)],
      ["enc.commit(stream, null)", () => enc.commit(stream, any)],
      ["new ComputeGraph(null)", () => new ComputeGraph(any)],
      ["graph.dispatch(null, cfg)", () => graph.dispatch(any, { grid: 1, block: 1, args: [A, B, C, 1] })],
      ["graph.dispatch(k, null)", () => graph.dispatch(vadd, any)],
      ["graph.dispatch(k, { reads: 'x' })", () => graph.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, 1], reads: bad("x") })],
      ["graph.dispatch(k, { writes: [null] })", () => graph.dispatch(vadd, { grid: 1, block: 1, args: [A, B, C, 1], writes: bad([null]) })],
      ["graph.setArgs(NaN, [])", () => graph.setArgs(NaN, [])],
      ["graph.setArgs(0, null)", () => graph.setArgs(0, any)],
      ["graph.setArg(0, 'a', 1)", () => graph.setArg(0, bad("a"), 1)],
      ["graph.submit(null)", () => graph.submit(any)],
      ["graph.submit(stream, { barriers: 'x' })", () => graph.submit(stream, { barriers: bad("x") })],
      ["new GraphExecutor(null)", () => new GraphExecutor(any)],
      ["new GraphExecutor(dev, null)", () => new GraphExecutor(dev, any)],
      ["new GraphExecutor(dev, { stream: 3 })", () => new GraphExecutor(dev, { stream: bad(3) })],
      ["exe.begin(null)", () => exe.begin(any)],
      ["exe.begin({ flushEvery: NaN })", () => exe.begin({ flushEvery: NaN })],
      ["exe.replay(null)", () => exe.replay(any)],
      ["exe.replayAsync('g')", () => exe.replayAsync(bad("g"))],
      [
        "session.dispatch(null, cfg)",
        () => {
          const s = exe.begin();
          try {
            s.dispatch(any, { grid: 1, block: 1, args: [A, B, C, 1] });
          } finally {
            s.dispose();
          }
        },
      ],
      ["Step.kernel(null, cfg)", () => Step.kernel(any, { grid: 1, block: 1, args: [A, B, C, 1] })],
      ["Step.kernel(k, null)", () => Step.kernel(vadd, any)],
      ["Step.kernel(k, { args: null })", () => Step.kernel(vadd, { grid: 1, block: 1, args: any })],
      ["Step.kernel(k, { reads: 3 })", () => Step.kernel(vadd, { grid: 1, block: 1, args: [A, B, C, 1], reads: bad(3) })],
      ["Step.copy(null, B)", () => Step.copy(any, B)],
      ["Step.copy(A, B, null)", () => Step.copy(A, B, any)],
      ["Step.fill(A, 'x')", () => Step.fill(A, bad<0>("x"))],
      ["Step.fill(null, 0)", () => Step.fill(bad<typeof A>(null), 0)],
      ["new Schedule(null)", () => new Schedule(any)],
      ["new Schedule(5)", () => new Schedule(bad(5))],
      ["new Schedule([null])", () => new Schedule(bad([null]))],
      ["schedule.add(null)", () => new Schedule().add(any)],
      ["schedule.addKernel(null, cfg)", () => new Schedule().addKernel(any, { grid: 1, block: 1, args: [] })],
      ["schedule.compile(null)", () => new Schedule([okStep]).compile(any)],
      ["schedule.compile(dev, 'x')", () => new Schedule([okStep]).compile(dev, bad("x"))],
      ["schedule.compile(dev, Stream, null)", () => new Schedule([okStep]).compile(dev, ExecMode.Stream, any)],
      ["ExecMode.MultiStream(NaN)", () => ExecMode.MultiStream(NaN)],
      ["ExecMode.MultiStream(null)", () => ExecMode.MultiStream(any)],
      ["ExecMode.MultiStream(2**40)", () => ExecMode.MultiStream(2 ** 40)],
      ["exec.run(null)", () => exec.run(any)],
      ["exec.runAsync('x')", () => exec.runAsync(bad("x"))],
      ["exec.setArgs(NaN, [])", () => exec.setArgs(NaN, [])],
      ["exec.setArgs(0, null)", () => exec.setArgs(0, any)],
      ["exec.setArg(0, null, 1)", () => exec.setArg(0, any, 1)],
      ["exec.args('x')", () => exec.args(bad("x"))],
      ["module.kernel('vadd\\0x')", () => mod.kernel("vadd\0x", ["buffer", "buffer", "buffer", "i32"]), [IV, Status.NOT_FOUND]],
      ["module.kernel(null)", () => mod.kernel(any, [])],
      ["Event.create(null)", () => Event.create(any)],
      ["Event.create(dev, null)", () => Event.create(dev, any)],
      ["ev.record(3)", () => Event.create(dev).record(bad(3))],
      ["Graph.capture(null, fn)", () => Graph.capture(any, () => {})],
      ["Graph.capture(s, null)", () => Graph.capture(stream, any)],
      ["Graph.capture(s, fn, null)", () => Graph.capture(stream, () => {}, any)],
    ]);
  });
});

test("a sweep of every public method with bad values in each argument position throws only GpuError", () => {
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "fixtures", "api_sweep.ts")], { stdout: "pipe", stderr: "pipe", timeout: 60_000 });
  expect({ exitCode: r.exitCode, stderr: r.stderr.toString() }).toEqual({ exitCode: 0, stderr: "" });
  expect(JSON.parse(r.stdout.toString().trim().split("\n").pop()!)).toEqual([]);
}, 60_000);

test("CUDA's sticky kernel faults keep their own codes and names (710, 714-718), not UNKNOWN", () => {
  const names = [710, 714, 715, 716, 717, 718].map((c) => StatusName[c]);
  expect(names).toEqual(["BG_ERR_ASSERT", "BG_ERR_HARDWARE_STACK_ERROR", "BG_ERR_ILLEGAL_INSTRUCTION", "BG_ERR_MISALIGNED_ADDRESS", "BG_ERR_INVALID_ADDRESS_SPACE", "BG_ERR_INVALID_PC"]);
  expect(new GpuError(716, "x", { backend: "cuda", call: "bg_stream_synchronize" }).codeName).toBe("BG_ERR_MISALIGNED_ADDRESS");
});

test("a value is described with its article: an Object, a Float32Array", () => {
  const x = Tensor.from(new Float32Array(4), [1, 1, 2, 2]);
  const w = Tensor.from(new Float32Array(4), [1, 1, 2, 2]);
  expect(() => x.conv2d(w, {} as never)).toThrow("bias must be a Tensor, got an Object");
  expect(() => x.conv2d(w, new Float32Array(1) as never)).toThrow("bias must be a Tensor, got a Float32Array");
});
