// What every backend's ring kernels share: the kernel names, the size defines and, for the
// backends that keep a kernel resident, one text of the persistent loop (so the CUDA kernel that
// cannot run here is the very loop the CPU tests exercise) and of the batch loop. Each backend's
// record wraps them in its own language (ring.source).

/** The sizes a generated ring source is built for. */
export interface RingShape {
  messageBytes: number;
  responseBytes: number;
  stateBytes: number;
}

/** Names of the generated kernels. */
export const RING_KERNEL = "bg_ring_persistent";
export const BATCH_KERNEL = "bg_ring_batch";

/** The size defines the handler and the loops read. */
export function defines(o: RingShape): string {
  return `#define BG_RING_MSG_BYTES ${o.messageBytes}u
#define BG_RING_RESP_BYTES ${o.responseBytes}u
#define BG_RING_STATE_BYTES ${o.stateBytes}u
`;
}

/**
 * The persistent loop, one text for the C and CUDA sources, so the CUDA kernel that cannot run
 * here is the very loop the CPU tests exercise. Each language declares before it the helpers
 * (bg_u64/bg_u32/bg_u8, bg_ld_acq, bg_ld_acq32, bg_st_rel, bg_st_rel32, bg_idle, bg_zero, and bg_bell,
 * which rings the outbound ring's doorbell where the language can call host code) and the
 * ring pointers (in_head, in_tail, in_meta, out_head, out_tail, out_meta, in_data, out_data),
 * masks and cursors (h, ot, oh, idle, since).
 */
export const RING_LOOP = `  for (;;) {
    bg_u64 t = bg_ld_acq(in_tail);
    if (t != h) {
      bg_u64 room = out_cap - (ot - oh);
      if (room == 0) {
        oh = bg_ld_acq(out_head);
        room = out_cap - (ot - oh);
      }
      if (room == 0) { /* backpressure: wait for the host to read responses, never drop */
        if (bg_ld_acq32(&in_meta[2]) == 2u) break;
        bg_idle(&idle, &since);
        continue;
      }
      bg_u64 k = t - h;
      if (k > room) k = room;
      if (k > 256) k = 256;
      for (bg_u64 i = 0; i < k; i++) {
        bg_u8* r = out_data + ((ot + i) & out_mask) * BG_RING_RESP_BYTES;
        bg_zero(r, BG_RING_RESP_BYTES);
        BG_HANDLER(in_data + ((h + i) & in_mask) * BG_RING_MSG_BYTES, r, state);
      }
      h += k;
      ot += k;
      bg_st_rel(out_tail, ot);
      bg_bell(out_meta);
      bg_st_rel(in_head, h);
      idle = 0;
      continue;
    }
    bg_u32 c = bg_ld_acq32(&in_meta[2]);
    if (c == 2u) break;                           /* abort: exit now */
    if (c == 1u && bg_ld_acq(in_tail) == h) break; /* stop: exit once drained */
    if (c == 1u) continue;
    bg_idle(&idle, &since);
  }
  bg_st_rel32(&out_meta[2], 1u); /* the producer of responses has finished */
  bg_bell(out_meta);`;

/** The batch kernel's body: the handler on each message in order (in, out, n, state declared). */
export const BATCH_LOOP = `  for (bg_u32 i = 0; i < n; i++) {
    bg_u8* r = out + (bg_u64)i * BG_RING_RESP_BYTES;
    bg_zero(r, BG_RING_RESP_BYTES);
    BG_HANDLER(in + (bg_u64)i * BG_RING_MSG_BYTES, r, state);
  }`;
