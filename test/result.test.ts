// The result layer (ffi/result.ts): wrappers derived from the symbol table return their
// out-values and throw GpuError (code, name, call, backend, the shim's message) on a failure.
import { describe, expect, test } from "bun:test";
import { Cmd } from "../ffi/constants";
import { GpuError, Status, SubmitError, api, backendInfo, eventElapsed, launch, rtcCompile, submit } from "../ffi/result";

describe("result layer", () => {
  const cpu = api("cpu");
  const dev = cpu.device_open(0, 0);

  test("a wrapper returns its out-values: one as a number, several as a tuple", () => {
    const s = cpu.stream_create(dev, 0, 0);
    expect(typeof s).toBe("number");
    expect(s).toBeGreaterThan(0);
    const [free, total] = cpu.device_mem_info(dev);
    expect(total).toBeGreaterThan(0);
    expect(free).toBeLessThanOrEqual(total);
    expect(cpu.stream_capture_status(s)).toBe(0);
    const mem = cpu.mem_alloc(dev, 256);
    cpu.memset(dev, mem, 0x5a, 1, 256);
    const out = new Uint8Array(256);
    cpu.memcpy_dtoh(dev, out, mem, 256);
    expect(out.every((b) => b === 0x5a)).toBe(true);
    cpu.mem_free(dev, mem);
    cpu.stream_destroy(s);
  });

  test("a query wrapper answers true or false", () => {
    const s = cpu.stream_create(dev, 0, 0);
    const ev = cpu.event_create(dev, 0);
    cpu.event_record(ev, s);
    cpu.stream_synchronize(s);
    expect(cpu.event_query(ev)).toBe(true);
    expect(cpu.stream_query(s)).toBe(true);
    expect(eventElapsed(ev, ev, "cpu")).toBe(0);
    cpu.event_destroy(ev);
    cpu.stream_destroy(s);
  });

  test("a failure is a GpuError naming the code, the bg_* call, the backend and the shim's message", () => {
    let err: unknown;
    try {
      cpu.mem_alloc(dev, 2 ** 52);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GpuError);
    const g = err as GpuError;
    expect(g.code).toBe(Status.OUT_OF_MEMORY);
    expect(g.codeName).toBe("BG_ERR_OUT_OF_MEMORY");
    expect(g.call).toBe("bg_mem_alloc");
    expect(g.backend).toBe("cpu");
    expect(g.message).toContain("bg_mem_alloc");
    expect(() => api("cuda").device_open(99, 0)).toThrow(GpuError);
  });

  test("the hand-written launch fails as the launch wrapper does", () => {
    const s = cpu.stream_create(dev, 0, 0);
    const caught = (f: () => void): GpuError => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(GpuError);
        return e as GpuError;
      }
      throw new Error("no error");
    };
    const direct = caught(() => launch(0, s, 1, 1, 1, 1, 1, 1, 0, 0, 0, "cpu")); // no such kernel
    const wrapped = caught(() => cpu.launch(0, s, 1, 1, 1, 1, 1, 1, 0, 0, 0));
    expect({ code: direct.code, call: direct.call, backend: direct.backend }).toEqual({ code: wrapped.code, call: "bg_launch", backend: "cpu" });
    expect(direct.code).not.toBe(0);
    cpu.stream_destroy(s);
  });

  test("a refused command list names the offending command's offset", () => {
    const s = cpu.stream_create(dev, 0, 0);
    const bytes = new Uint8Array(new ArrayBuffer(65536), 0, 16);
    const w = new Uint32Array(bytes.buffer, 0, 4);
    w[0] = Cmd.BARRIER;
    w[1] = 8;
    w[2] = 999; // an unknown command
    w[3] = 8;
    let err: unknown;
    try {
      submit(s, bytes, 16, 0, "cpu");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SubmitError);
    expect((err as SubmitError).code).toBe(Status.INVALID_VALUE);
    expect((err as SubmitError).badOffset).toBe(8);
    submit(s, bytes, 8, 0, "cpu"); // the barrier alone is fine
    cpu.stream_destroy(s);
  });

  test("runtime compilation where there is none is a GpuError naming bg_rtc_compile", () => {
    let err: unknown;
    try {
      rtcCompile(dev, "extern \"C\" __global__ void k() {}", "k.cu", "", true, "cpu");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(GpuError);
    expect((err as GpuError).call).toBe("bg_rtc_compile");
    expect((err as GpuError).code).not.toBe(0);
  });

  test("backend info reads its flags and message", () => {
    const info = backendInfo(0);
    expect(info.available).toBe(true);
    expect(info.devices).toBeGreaterThanOrEqual(1);
  });
});
