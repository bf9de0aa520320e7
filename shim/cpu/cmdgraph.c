/*
 * Graphs from command lists on the CPU backend (bg_graph_from_commands).
 *
 * The list is issued into a capture on a private non-blocking stream, so the result is the same
 * native graph a capture makes: a replay runs pre-decoded nodes in one C loop, instead of the
 * core's generic graph decoding and copying the list again on every launch (about 30 ns a
 * command more on the CPU backend). Argument updates, node counts and what the graph keeps
 * alive are those of captured graphs, which follow the same rules as the generic graph. A list
 * with event commands keeps the generic graph: an event recorded outside the capture cannot be
 * waited on inside it.
 *
 * Calls: capture.c, stream.c, graph.c, commands.c, base.c.
 */
#include "cpu.h"

#include <stdio.h>

int32_t cpu_graph_from_commands(bg_device* dev, const uint8_t* p, uint64_t len, void** out) {
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT)
    if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) return bg_cmdgraph_create(dev, p, len, out);

  void* s = NULL;
  int32_t rc = cpu_stream_create(dev, BG_STREAM_NON_BLOCKING, 0, &s);
  if (rc != BG_OK) return rc;
  rc = cpu_begin_capture(s, BG_CAPTURE_MODE_RELAXED);
  if (rc == BG_OK) {
    int32_t issued = bg_issue_cmds(s, p, len);
    char why[512] = "";
    if (issued != BG_OK) bg_last_error(why, sizeof why);
    void* g = NULL;
    int32_t ended = cpu_end_capture(s, &g);
    if (issued != BG_OK) {
      if (g) cpu_graph_destroy(g);
      rc = bg_set_error(issued, "%s", why);
    } else {
      rc = ended;
      if (rc == BG_OK) *out = g;
    }
  }
  int32_t closed = cpu_stream_destroy(s);
  if (rc == BG_OK && closed != BG_OK) {
    cpu_graph_destroy(*out);
    *out = NULL;
    rc = closed;
  }
  return rc;
}
