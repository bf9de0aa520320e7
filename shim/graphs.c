/*
 * graphs.c: the entry points of stream capture and graphs (bungpu.h): the backend's captured
 * graphs, and the generic command-list graphs of commands.c behind the same handles.
 *
 * Calls: commands.c, base.c.
 */
#define _GNU_SOURCE
#include "entry.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- capture and graphs -------------------------------------------------------------------- */
BG_API int32_t bg_stream_begin_capture(void* s, int32_t mode) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_begin_capture");
  if (mode < BG_CAPTURE_MODE_GLOBAL || mode > BG_CAPTURE_MODE_RELAXED)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_stream_begin_capture: unknown mode %d", mode);
  if (s == DEV(s)->default_stream)
    return bg_set_error(BG_ERR_STREAM_CAPTURE_UNSUPPORTED,
                        "bg_stream_begin_capture: the device's default stream cannot be captured; "
                        "create a stream");
  NEED(s, begin_capture, "bg_stream_begin_capture");
  BG_HOOK(DEV(s));
  return OPS(s)->begin_capture(s, mode);
}

BG_API int32_t bg_stream_end_capture(void* s, void** out) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_end_capture");
  NONNULL(out, "bg_stream_end_capture", "out_graph");
  NEED(s, end_capture, "bg_stream_end_capture");
  *out = NULL;
  BG_HOOK(DEV(s));
  return OPS(s)->end_capture(s, out);
}

BG_API int32_t bg_stream_capture_status(void* s, int32_t* out) {
  CHECK(s, BG_KIND_STREAM, "bg_stream_capture_status");
  NONNULL(out, "bg_stream_capture_status", "out");
  NEED(s, capture_status, "bg_stream_capture_status");
  BG_HOOK(DEV(s));
  return OPS(s)->capture_status(s, out);
}

BG_API int32_t bg_graph_destroy(void* g) {
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    BG_HOOK(DEV(g));
    return bg_cmdgraph_destroy(g);
  }
  CHECK(g, BG_KIND_GRAPH, "bg_graph_destroy");
  BG_HOOK(DEV(g));
  return OPS(g)->graph_destroy(g);
}

BG_API int32_t bg_graph_node_count(void* g, uint32_t* nodes, uint32_t* knodes) {
  uint32_t a = 0, b = 0;
  int32_t rc;
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    rc = bg_cmdgraph_node_count(g, &a, &b);
  } else {
    CHECK(g, BG_KIND_GRAPH, "bg_graph_node_count");
    BG_HOOK(DEV(g));
    rc = OPS(g)->graph_node_count(g, &a, &b);
  }
  if (nodes) *nodes = a;
  if (knodes) *knodes = b;
  return rc;
}

BG_API int32_t bg_graph_instantiate(void* g, void** out) {
  NONNULL(out, "bg_graph_instantiate", "out_exec");
  if (bg_obj_is(g, BG_KIND_CMD_GRAPH)) {
    BG_HOOK(DEV(g));
    return bg_cmdgraph_instantiate(g, out);
  }
  CHECK(g, BG_KIND_GRAPH, "bg_graph_instantiate");
  BG_HOOK(DEV(g));
  return OPS(g)->graph_instantiate(g, out);
}

BG_API int32_t bg_graph_exec_destroy(void* x) {
  if (bg_obj_is(x, BG_KIND_CMD_EXEC)) {
    BG_HOOK(DEV(x));
    return bg_cmdgraph_exec_destroy(x);
  }
  CHECK(x, BG_KIND_EXEC, "bg_graph_exec_destroy");
  BG_HOOK(DEV(x));
  return OPS(x)->graph_exec_destroy(x);
}

BG_API int32_t bg_graph_upload(void* x, void* s) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_upload");
  CHECK(s, BG_KIND_STREAM, "bg_graph_upload");
  if (DEV(x) != DEV(s))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_upload: stream of another device");
  if (generic) return BG_OK; /* a command list has nothing to upload ahead */
  BG_HOOK(DEV(x));
  return OPS(x)->graph_upload(x, s);
}

BG_API int32_t bg_graph_launch(void* x, void* s) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_launch");
  CHECK(s, BG_KIND_STREAM, "bg_graph_launch");
  if (DEV(x) != DEV(s))
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_launch: stream of another device");
  BG_HOOK(DEV(x));
  if (generic) return bg_cmdgraph_launch(x, s);
  return OPS(x)->graph_launch(x, s);
}

BG_API int32_t bg_graph_exec_set_kernel_args(void* x, uint32_t index, const void* args,
                                             uint32_t nargs) {
  int generic = bg_obj_is(x, BG_KIND_CMD_EXEC);
  if (!generic) CHECK(x, BG_KIND_EXEC, "bg_graph_exec_set_kernel_args");
  if (nargs && !args)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_exec_set_kernel_args: args is NULL");
  if (generic) return bg_cmdgraph_set_kernel_args(x, index, (const uint64_t*)args, nargs);
  BG_HOOK(DEV(x));
  return OPS(x)->graph_exec_set_kernel_args(x, index, (const uint64_t*)args, nargs);
}
