// The numbers TypeScript uses from shim/bungpu.h come from ffi/constants.ts, which
// `bun run gen:constants` (also run by `bun run build:shim`) generates from the header: this test
// fails when the committed file has drifted from the header.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { Cmd, RING_DATA_OFFSET, Status, bg_device_props } from "../ffi/constants";
import { OUTPUT, generate, parseHeader, render } from "../ffi/gen_constants";

describe("generated constants", () => {
  test("ffi/constants.ts is what shim/bungpu.h generates (run `bun run gen:constants`)", () => {
    expect(readFileSync(OUTPUT, "utf8")).toBe(generate());
  });

  test("the values are the header's", () => {
    expect(Status.OK).toBe(0);
    expect(Status.INVALID_HANDLE).toBe(400);
    expect(Status.NOT_READY).toBe(600);
    expect(Cmd.LAUNCH).toBe(1);
    expect(RING_DATA_OFFSET).toBe(384);
    // char name[256]; 12 x int32; uint64 total_mem; uint64 reserved[6]
    expect(bg_device_props.size as number).toBe(256 + 12 * 4 + 8 + 6 * 8);
    expect(bg_device_props.offset.total_mem as number).toBe(304);
  });

  test("a changed header changes the output, and layouts follow C's alignment rules", () => {
    const h = `
      #define BG_X_LIMIT (1u << 4)
      enum { BG_OK = 0, BG_ERR_A = 7, BG_ERR_B };
      enum { BG_FOO_ONE = 1, BG_FOO_TWO, BG_FOO_MAX = BG_X_LIMIT };
      typedef struct bg_rec { uint32_t op; uint32_t size; uint64_t kernel; uint32_t grid[3]; uint8_t flag; uint64_t args[]; } bg_rec;
      typedef struct bg_outer { uint8_t tag; bg_rec inner; } bg_outer;
      typedef struct bg_odd { union { int a; } u; } bg_odd;`;
    const p = parseHeader(h);
    expect(p.defines).toEqual([["BG_X_LIMIT", 16]]);
    expect(p.groups).toEqual([
      { name: "Status", members: [["OK", 0], ["A", 7], ["B", 8]] },
      { name: "Foo", members: [["ONE", 1], ["TWO", 2], ["MAX", 16]] },
    ]);
    const rec = p.layouts.find((l) => l.name === "bg_rec")!;
    expect(rec.fields.map((f) => [f.name, f.offset])).toEqual([["op", 0], ["size", 4], ["kernel", 8], ["grid", 16], ["flag", 28], ["args", 32]]);
    expect(rec.size).toBe(32);
    const outer = p.layouts.find((l) => l.name === "bg_outer")!;
    expect(outer.fields.map((f) => f.offset)).toEqual([0, 8]);
    expect(outer.size).toBe(40);
    expect(render(p)).toContain("export const Foo = {");
  });
});
