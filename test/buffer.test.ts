import { afterAll, describe, expect, test } from "bun:test";
import { Buffer, CommandEncoder, ComputeGraph, Device, Event, GpuBuffer, GpuEvent, HostBuffer, Schedule, Status, Step } from "../src";
import { equalBytes, expectGpuError, randomBytes } from "./helpers";

const dev = Device.open("cpu");
afterAll(() => dev.dispose());

describe("buffers: round trips", () => {
  for (const n of [0, 1, 7, 12345, 64 * 1024 * 1024]) {
    test(`${n} bytes of random data come back byte for byte`, () => {
      const data = randomBytes(n, n + 3);
      using b = dev.alloc(n);
      expect(b.byteLength).toBe(n);
      b.write(data);
      const back = b.read();
      expect(back.byteLength).toBe(n);
      expect(equalBytes(back, data)).toBe(true);
    });
  }

  test("write and read at offsets, into typed arrays and new arrays", () => {
    using b = dev.alloc(64);
    b.fill(0);
    b.write(new Float32Array([1.5, -2.25, 3]), { offset: 8 });
    const f = b.read(new Float32Array(3), { offset: 8 });
    expect([...f]).toEqual([1.5, -2.25, 3]);
    const whole = b.read(Float32Array);
    expect(whole.length).toBe(16);
    expect(whole[2]).toBe(1.5);
    expect(whole[0]).toBe(0);
    const ab = new ArrayBuffer(4);
    b.read(ab, { offset: 12 });
    expect(new Float32Array(ab)[0]).toBe(-2.25);
    // a subarray source writes only its own bytes
    const big = new Uint8Array([9, 9, 1, 2, 3, 9]);
    b.write(big.subarray(2, 5), { offset: 0 });
    expect([...b.read(new Uint8Array(4))]).toEqual([1, 2, 3, 0]);
  });

  test("fill with 1, 2 and 4-byte patterns and floats", () => {
    using b = dev.alloc(32);
    b.fill(0xab, { type: "u8" });
    expect(b.read().every((x) => x === 0xab)).toBe(true);
    b.fill(0x1234, { type: "u16", offset: 4, bytes: 8 });
    expect([...b.read(new Uint16Array(6))]).toEqual([0xabab, 0xabab, 0x1234, 0x1234, 0x1234, 0x1234]);
    b.fill(-7, { type: "i32" });
    expect([...b.read(Int32Array)].every((x) => x === -7)).toBe(true);
    b.fill(0.5, { type: "f32", offset: 16 });
    expect([...b.read(new Float32Array(4), { offset: 16 })]).toEqual([0.5, 0.5, 0.5, 0.5]);
  });
});

describe("buffers: copies and views", () => {
  test("copyTo between buffers, and between views of one buffer", () => {
    const data = randomBytes(4096, 5);
    using a = dev.alloc(4096);
    using b = dev.alloc(4096);
    a.write(data);
    a.copyTo(b);
    expect(equalBytes(b.read(), data)).toBe(true);
    a.copyTo(b, { srcOffset: 100, dstOffset: 7, bytes: 1000 });
    const got = b.read();
    expect(equalBytes(got.subarray(7, 1007), data.subarray(100, 1100))).toBe(true);
    expect(equalBytes(got.subarray(0, 7), data.subarray(0, 7))).toBe(true);
    // views share memory
    const v1 = a.view(1024, 512);
    const v2 = a.view(2048, 512);
    expect(v1.isView).toBe(true);
    expect(v1.address).toBe(a.address + 1024);
    v1.copyTo(v2);
    const after = a.read();
    expect(equalBytes(after.subarray(2048, 2560), data.subarray(1024, 1536))).toBe(true);
    v1.write(new Uint8Array(512).fill(3));
    expect(a.read(new Uint8Array(1), { offset: 1024 })[0]).toBe(3);
    // a view of a view
    const v3 = v1.view(10, 2);
    expect(v3.address).toBe(a.address + 1034);
    v1.dispose(); // a view's dispose frees nothing
    expect(a.read(new Uint8Array(1), { offset: 1024 })[0]).toBe(3);
  });

  test("disposing the allocation disposes its views", () => {
    const a = dev.alloc(64);
    const v = a.view(0, 8);
    a.dispose();
    expect(v.disposed).toBe(true);
    expectGpuError(() => v.read(), Status.INVALID_HANDLE, /disposed/);
    expect(() => a.dispose()).not.toThrow();
  });
});

describe("buffers: bad input throws and changes nothing", () => {
  const data = randomBytes(256, 11);
  const fresh = () => dev.alloc(256).write(data);
  const intact = (b: Buffer) => expect(equalBytes(b.read(), data)).toBe(true);

  test("sizes", () => {
    expectGpuError(() => dev.alloc(-1), Status.INVALID_VALUE, /non-negative integer/);
    expectGpuError(() => dev.alloc(1.5), Status.INVALID_VALUE);
    expectGpuError(() => dev.alloc(Number.NaN), Status.INVALID_VALUE);
    expectGpuError(() => dev.alloc("8" as unknown as number), Status.INVALID_VALUE);
    expectGpuError(() => dev.alloc(2 ** 60), Status.INVALID_VALUE);
    expectGpuError(() => dev.alloc(2 ** 50), Status.OUT_OF_MEMORY);
  });

  test("ranges past the end", () => {
    using b = fresh();
    expectGpuError(() => b.write(new Uint8Array(10), { offset: 250 }), Status.INVALID_VALUE, /past the end/);
    expectGpuError(() => b.write(new Uint8Array(257)), Status.INVALID_VALUE);
    expectGpuError(() => b.write(new Uint8Array(1), { offset: -1 }), Status.INVALID_VALUE);
    expectGpuError(() => b.read(new Uint8Array(8), { offset: 250 }), Status.INVALID_VALUE);
    expectGpuError(() => b.read(new Uint8Array(300)), Status.INVALID_VALUE);
    expectGpuError(() => b.view(200, 100), Status.INVALID_VALUE);
    expectGpuError(() => b.fill(1, { type: "u8", offset: 255, bytes: 2 }), Status.INVALID_VALUE);
    expectGpuError(() => b.fill(1, { type: "u32", offset: 2, bytes: 4 }), Status.INVALID_VALUE, /aligned/);
    expectGpuError(() => b.fill(300, { type: "u8" }), Status.INVALID_VALUE, /does not fit/);
    using c = dev.alloc(16);
    expectGpuError(() => b.copyTo(c), Status.INVALID_VALUE, /past the end/);
    expectGpuError(() => b.copyTo(c, { bytes: 8, dstOffset: 12 }), Status.INVALID_VALUE);
    expectGpuError(() => b.read(Float64Array, { offset: 3 }), Status.INVALID_VALUE, /whole number/);
    intact(b);
  });

  test("wrong kinds of arguments", () => {
    using b = fresh();
    expectGpuError(() => b.write(42 as unknown as Uint8Array), Status.INVALID_VALUE);
    expectGpuError(() => b.copyTo({} as Buffer), Status.INVALID_VALUE);
    intact(b);
  });

  test("use after dispose", () => {
    const b = fresh();
    b.dispose();
    expectGpuError(() => b.write(data), Status.INVALID_HANDLE, /disposed/);
    expectGpuError(() => b.read(), Status.INVALID_HANDLE);
    expectGpuError(() => b.fill(0), Status.INVALID_HANDLE);
    expectGpuError(() => b.address, Status.INVALID_HANDLE);
    using c = fresh();
    expectGpuError(() => c.copyTo(b), Status.INVALID_HANDLE);
    intact(c);
  });
});

describe("pinned host memory", () => {
  test("a HostBuffer is a TypedArray over pinned memory, without copies", () => {
    using h = dev.allocHost(4096);
    const f = h.as(Float32Array);
    expect(f.length).toBe(1024);
    f[3] = 42.5;
    expect(h.as(Float32Array)[3]).toBe(42.5);
    expect(h.bytes.byteLength).toBe(4096);
    expectGpuError(() => h.deviceAddress, Status.INVALID_VALUE, /mapped/);
  });

  test("mapped host memory has a device address", () => {
    using h = dev.allocHost(64, { mapped: true });
    expect(h.deviceAddress).toBeGreaterThan(0);
    expect(h.mapped).toBe(true);
  });

  test("disposing detaches the views", () => {
    const h = HostBuffer.alloc(dev, 1 << 16);
    const before = h.as(Uint8Array);
    before[0] = 1;
    h.dispose();
    expect(before.byteLength).toBe(0);
    expectGpuError(() => h.as(Uint8Array), Status.INVALID_HANDLE);
    expectGpuError(() => dev.allocHost(0), Status.INVALID_VALUE);
  });
});

describe("fill writes elements, never guesses bytes", () => {
  test("a plain buffer: { type } fills elements, 0 fills zeros, any other value without a type is INVALID_VALUE", () => {
    using b = dev.alloc(64);
    b.fill(1.5, { type: "f32" });
    expect([...b.read(Float32Array)]).toEqual(new Array<number>(16).fill(1.5));
    b.fill(-7, { type: "i32", offset: 8, bytes: 8 });
    const i = b.read(Int32Array);
    expect(i[1]).toBe(new Int32Array(new Float32Array([1.5]).buffer)[0]!);
    expect([i[2], i[3]]).toEqual([-7, -7]);
    b.fill(0);
    expect(b.read().every((x) => x === 0)).toBe(true);
    b.fill(0xab, { type: "u8" });
    expect(b.read().every((x) => x === 0xab)).toBe(true);
    // a fill of 1 that once wrote 0x01 bytes (1.4e-45 as f32, 16843009 as i32) is refused, not guessed
    // (the types refuse these too: test/strict_types.test.ts; JavaScript callers get the GpuError)
    expectGpuError(() => b.fill(1 as 0), Status.INVALID_VALUE, /element type/);
    expectGpuError(() => dev.defaultStream.fill(b, 1 as 0), Status.INVALID_VALUE, /element type/);
    expectGpuError(() => new CommandEncoder(dev).fill(b, 1 as 0), Status.INVALID_VALUE, /element type/);
    expectGpuError(() => Step.fill(b, 1 as 0), Status.INVALID_VALUE, /element type/);
    expectGpuError(() => new Schedule().addFill(b, 1 as 0), Status.INVALID_VALUE, /element type/);
    expectGpuError(() => new ComputeGraph(dev).fill(b, 1 as 0), Status.INVALID_VALUE, /element type/);
    expect(b.read().every((x) => x === 0xab)).toBe(true);
  });

  test("a buffer allocated with { type }: fill(v) writes v as that type, in views too", () => {
    using b = dev.alloc(64, { type: "f32" });
    expect(b.elementType).toBe("f32");
    b.fill(2.25);
    expect([...b.read(Float32Array)]).toEqual(new Array<number>(16).fill(2.25));
    const v = b.view(16, 16);
    expect(v.elementType).toBe("f32");
    v.fill(-1);
    dev.defaultStream.fill(b.view(48, 8), 3).synchronize();
    expect([...b.read(Float32Array)]).toEqual([2.25, 2.25, 2.25, 2.25, -1, -1, -1, -1, 2.25, 2.25, 2.25, 2.25, 3, 3, 2.25, 2.25]);
    b.fill(7, { type: "i32" }); // an explicit type wins
    expect([...b.read(Int32Array)]).toEqual(new Array<number>(16).fill(7));
    using u = GpuBuffer.alloc(dev, 8, { type: "u16" });
    u.fill(65535);
    expect([...u.read(Uint16Array)]).toEqual([65535, 65535, 65535, 65535]);
    expectGpuError(() => u.fill(65536), Status.INVALID_VALUE, /does not fit u16/);
  });

  test("{ type } at allocation is checked: a known type, a whole number of elements", () => {
    expectGpuError(() => dev.alloc(6, { type: "f32" }), Status.INVALID_VALUE, /whole number/);
    expectGpuError(() => dev.alloc(8, { type: "f64" as never }), Status.INVALID_VALUE, /unknown fill type/);
    expectGpuError(() => dev.alloc(8, null as never), Status.INVALID_VALUE);
  });

  test("the deprecated names are the same classes", () => {
    expect(Buffer).toBe(GpuBuffer);
    expect(Event).toBe(GpuEvent);
    using b = dev.alloc(8);
    expect(b).toBeInstanceOf(GpuBuffer);
    using e = dev.createEvent();
    expect(e).toBeInstanceOf(GpuEvent);
  });
});
