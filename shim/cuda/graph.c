/*
 * cuda/graph.c: graphs (from a capture, or built node by node from a command list), their execs
 * (instantiate, upload, launch, kernel argument updates) and the references they hold on modules
 * and events.
 *
 * Calls: driver.c, release.c, context.c, stream.c, module.c, commands.c, base.c.
 */
#include "cuda_internal.h"

static int32_t graph_unref(cu_graph* g) {
  if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return BG_OK;
  bgcu_result r = g->g ? cu.cuGraphDestroy(g->g) : BGCUDA_SUCCESS;
  for (uint32_t i = 0; i < g->nk; i++) module_unref(g->kmods[i]);
  for (uint32_t i = 0; i < g->nev; i++) event_unref(g->evs[i]);
  free(g->evs);
  free(g->knodes);
  free(g->knargs);
  free(g->kmods);
  free(g);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuGraphDestroy");
  return BG_OK;
}

int32_t cu_graph_destroy(void* gp) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  bg_obj_kill(g);
  return graph_unref(g);
}

int32_t cu_graph_node_count(void* gp, uint32_t* nodes, uint32_t* kernel_nodes) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  size_t n = 0;
  CALL(cuGraphGetNodes, (g->g, NULL, &n));
  *nodes = (uint32_t)n;
  *kernel_nodes = 0;
  if (!n) return BG_OK;
  bgcu_graph_node* all = malloc(n * sizeof *all);
  if (!all) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_node_count: out of host memory");
  bgcu_result r = cu.cuGraphGetNodes(g->g, all, &n);
  uint32_t k = 0;
  for (size_t i = 0; r == BGCUDA_SUCCESS && i < n; i++) {
    bgcu_enum t = 0;
    r = cu.cuGraphNodeGetType(all[i], &t);
    if (r == BGCUDA_SUCCESS && t == BGCU_GRAPH_NODE_TYPE_KERNEL) k++;
  }
  free(all);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuGraphGetNodes/cuGraphNodeGetType");
  *nodes = (uint32_t)n;
  *kernel_nodes = k;
  return BG_OK;
}

static int32_t exec_free(cu_exec* x) {
  bgcu_result r = x->x ? cu.cuGraphExecDestroy(x->x) : BGCUDA_SUCCESS;
  int32_t rc = r != BGCUDA_SUCCESS ? cu_fail(r, "cuGraphExecDestroy") : BG_OK;
  if (x->graph) {
    if (x->x) atomic_fetch_sub_explicit(&x->graph->execs, 1, memory_order_acq_rel);
    int32_t grc = graph_unref(x->graph);
    if (rc == BG_OK) rc = grc;
  }
  free(x->knodes);
  free(x->knargs);
  free(x->params);
  free(x);
  return rc;
}

/* Whether g holds memory allocation nodes (stream-ordered allocations captured without their
 * free, or with it): 1, 0, or -1 when the driver could not say. Looked at once (graphs do not
 * change after capture). */
static int graph_mem_nodes(cu_graph* g) {
  if (g->mem_nodes >= 0) return g->mem_nodes;
  size_t n = 0;
  if (cu.cuGraphGetNodes(g->g, NULL, &n) != BGCUDA_SUCCESS) return -1;
  bgcu_graph_node* all = n ? malloc(n * sizeof *all) : NULL;
  if (n && !all) return -1;
  int found = 0;
  bgcu_result r = n ? cu.cuGraphGetNodes(g->g, all, &n) : BGCUDA_SUCCESS;
  for (size_t i = 0; r == BGCUDA_SUCCESS && i < n && !found; i++) {
    bgcu_enum t = 0;
    r = cu.cuGraphNodeGetType(all[i], &t);
    found = r == BGCUDA_SUCCESS && t == BGCU_GRAPH_NODE_TYPE_MEM_ALLOC;
  }
  free(all);
  if (r != BGCUDA_SUCCESS) return -1;
  return g->mem_nodes = found;
}

/* The driver's rules for graphs with memory allocation nodes: one exec of the graph at a time (a
 * second cuGraphInstantiate is CUDA_ERROR_NOT_SUPPORTED), and a launch while an allocation of
 * the previous one is unfreed is CUDA_ERROR_INVALID_VALUE. bungpu's graph memory lives with the
 * graph (a buffer allocated in the capture and not freed there is the graph's, reused by every
 * replay, as on the CPU backend), so such a graph is instantiated with AUTO_FREE_ON_LAUNCH, and a
 * second exec while the first lives is refused here with what to do. */
int32_t cu_graph_instantiate(void* gp, void** out) {
  cu_graph* g = gp;
  ENTER(CUDEV(g));
  int mem = graph_mem_nodes(g);
  if (mem > 0 && atomic_load_explicit(&g->execs, memory_order_acquire) > 0)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_graph_instantiate: the graph holds stream-ordered allocations made during "
                        "its capture (memory allocation nodes), and the driver allows one executable "
                        "graph of such a graph at a time: dispose of the first GraphExec before "
                        "instantiating again, or capture the work once more for a second");
  cu_exec* x = calloc(1, sizeof *x);
  if (!x) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
  unsigned long long flags = mem > 0 ? BGCUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH : 0;
  bgcu_result r = cu.cuGraphInstantiateWithFlags(&x->x, g->g, flags);
  if (r != BGCUDA_SUCCESS) {
    free(x);
    return cu_fail(r, "cuGraphInstantiateWithFlags");
  }
  atomic_fetch_add_explicit(&g->execs, 1, memory_order_acq_rel);
  atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
  x->graph = g;
  int32_t rc = BG_OK;
  if (g->nk) {
    x->knodes = malloc(g->nk * sizeof *x->knodes);
    x->knargs = malloc(g->nk * sizeof *x->knargs);
    if (!x->knodes || !x->knargs) {
      exec_free(x);
      return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
    }
    memcpy(x->knodes, g->knodes, g->nk * sizeof *x->knodes);
    memcpy(x->knargs, g->knargs, g->nk * sizeof *x->knargs);
    x->nk = g->nk;
    if (cu.cuGraphKernelNodeGetParams_v2) {
      x->params = calloc(g->nk, sizeof *x->params);
      if (!x->params) {
        exec_free(x);
        return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_graph_instantiate: out of host memory");
      }
      for (uint32_t i = 0; i < g->nk; i++) {
        r = cu.cuGraphKernelNodeGetParams_v2(x->knodes[i], &x->params[i]);
        if (r != BGCUDA_SUCCESS) {
          rc = cu_fail(r, "cuGraphKernelNodeGetParams_v2");
          exec_free(x);
          return rc;
        }
        /* The driver's kernelParams pointer is not ours to keep. */
        x->params[i].kernelParams = NULL;
        x->params[i].extra = NULL;
      }
    }
  }
  bg_obj_init(x, BG_KIND_EXEC, g->h.dev);
  *out = x;
  return BG_OK;
}

int32_t cu_graph_exec_destroy(void* xp) {
  cu_exec* x = xp;
  ENTER(CUDEV(x));
  bg_obj_kill(x);
  return exec_free(x);
}

int32_t cu_graph_upload(void* xp, void* sp) {
  ENTER(CUDEV(xp));
  CALL(cuGraphUpload, (((cu_exec*)xp)->x, ((cu_stream*)sp)->s));
  return BG_OK;
}

int32_t cu_graph_launch(void* xp, void* sp) {
  ENTER(CUDEV(xp));
  CALL(cuGraphLaunch, (((cu_exec*)xp)->x, ((cu_stream*)sp)->s));
  return BG_OK;
}

int32_t cu_graph_exec_set_kernel_args(void* xp, uint32_t index, const uint64_t* args,
                                      uint32_t nargs) {
  cu_exec* x = xp;
  if (index >= x->nk)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: no kernel node %u (the graph has %u: "
                        "launches of its command list, or captured through bg_launch)",
                        index, x->nk);
  if (nargs != x->knargs[index])
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_graph_exec_set_kernel_args: kernel node %u was launched with %u "
                        "arguments, got %u",
                        index, x->knargs[index], nargs);
  if (!x->params || !cu.cuGraphExecKernelNodeSetParams_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED,
                        "bg_graph_exec_set_kernel_args: the CUDA driver lacks "
                        "cuGraphExecKernelNodeSetParams_v2 (CUDA 12.0 or newer)");
  ENTER(CUDEV(x));
  void* params[256];
  if (nargs > 256)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_graph_exec_set_kernel_args: %u arguments", nargs);
  fill_params(params, args, nargs);
  bgcu_kernel_node_params p = x->params[index];
  p.kernelParams = nargs ? params : NULL;
  p.extra = NULL;
  CALL(cuGraphExecKernelNodeSetParams_v2, (x->x, x->knodes[index], &p));
  return BG_OK;
}

/* ---- graphs from command lists ------------------------------------------------------------------
 * Built node by node (cuGraphAdd*Node), each node depending on the one before it: the list's
 * order is the graph's. Launches become kernel nodes (numbered in list order for
 * bg_graph_exec_set_kernel_args), copies memcpy nodes, memsets memset nodes, event records and
 * waits event nodes; barriers and empty copies add nothing. Without the construction calls, or
 * for a list naming a persistent kernel (its residency is tracked per launch), the core's
 * generic graph replays the list instead. */
static int graph_calls_present(void) {
  return cu.cuGraphCreate && cu.cuGraphAddKernelNode_v2 && cu.cuGraphAddMemcpyNode &&
         cu.cuGraphAddMemsetNode && cu.cuGraphAddEventRecordNode && cu.cuGraphAddEventWaitNode &&
         cu.cuGraphKernelNodeGetParams_v2;
}

int32_t cu_graph_from_commands(bg_device* dev, const uint8_t* p, uint64_t len, void** out) {
  cu_device* d = (cu_device*)dev;
  const char* fn = "bg_graph_from_commands";
  bg_cmd_iter it;
  bg_cmd c;
  uint32_t nk = 0, nev = 0;
  int generic = !graph_calls_present();
  bg_cmd_iter_init(&it, p, len);
  while (bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    if (c.op == BG_CMD_LAUNCH) {
      nk++;
      if (((cu_kernel*)c.u.launch.kernel)->persistent) generic = 1;
    }
    if (c.op == BG_CMD_EVENT_RECORD || c.op == BG_CMD_EVENT_WAIT) nev++;
  }
  if (generic) return bg_cmdgraph_create(dev, p, len, out);
  ENTER(d);
  cu_graph* gr = calloc(1, sizeof *gr);
  if (gr) {
    gr->knodes = calloc(nk ? nk : 1, sizeof *gr->knodes);
    gr->knargs = calloc(nk ? nk : 1, sizeof *gr->knargs);
    gr->kmods = calloc(nk ? nk : 1, sizeof *gr->kmods);
    gr->evs = calloc(nev ? nev : 1, sizeof *gr->evs);
  }
  if (!gr || !gr->knodes || !gr->knargs || !gr->kmods || !gr->evs) {
    if (gr) {
      free(gr->knodes);
      free(gr->knargs);
      free(gr->kmods);
      free(gr->evs);
    }
    free(gr);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  atomic_init(&gr->refs, 1);
  int32_t rc = BG_OK;
  bgcu_result r = cu.cuGraphCreate(&gr->g, 0);
  if (r != BGCUDA_SUCCESS) rc = cu_fail(r, "cuGraphCreate");
  bgcu_graph_node prev = NULL, node = NULL;
  void* params[256];
  bg_cmd_iter_init(&it, p, len);
  while (rc == BG_OK && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    const char* call = NULL;
    node = NULL;
    switch (c.op) {
      case BG_CMD_LAUNCH: {
        cu_kernel* k = c.u.launch.kernel;
        uint32_t shared = c.u.launch.shared;
        if ((int)shared > atomic_load_explicit(&k->dyn_limit, memory_order_relaxed) &&
            (uint64_t)shared + (uint64_t)k->static_shared > 48u * 1024u && cu.cuFuncSetAttribute) {
          r = cu.cuFuncSetAttribute(k->f, BGCU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)shared);
          if (r != BGCUDA_SUCCESS) {
            rc = cu_fail_at(r, "cuFuncSetAttribute", "MAX_DYNAMIC_SHARED_SIZE_BYTES");
            break;
          }
          atomic_store_explicit(&k->dyn_limit, (int)shared, memory_order_relaxed);
        }
        fill_params(params, c.u.launch.args, c.u.launch.nargs);
        bgcu_kernel_node_params kp;
        memset(&kp, 0, sizeof kp);
        kp.func = k->f;
        kp.gridDimX = c.u.launch.grid[0];
        kp.gridDimY = c.u.launch.grid[1];
        kp.gridDimZ = c.u.launch.grid[2];
        kp.blockDimX = c.u.launch.block[0];
        kp.blockDimY = c.u.launch.block[1];
        kp.blockDimZ = c.u.launch.block[2];
        kp.sharedMemBytes = shared;
        kp.kernelParams = c.u.launch.nargs ? params : NULL;
        r = cu.cuGraphAddKernelNode_v2(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &kp);
        call = "cuGraphAddKernelNode_v2";
        if (r == BGCUDA_SUCCESS) {
          gr->knodes[gr->nk] = node;
          gr->knargs[gr->nk] = c.u.launch.nargs;
          gr->kmods[gr->nk++] = k->mod;
          atomic_fetch_add_explicit(&k->mod->refs, 1, memory_order_relaxed);
        }
        break;
      }
      case BG_CMD_COPY:
      case BG_CMD_COPY_HTOD:
      case BG_CMD_COPY_DTOH: {
        bgcu_memcpy3d m;
        memset(&m, 0, sizeof m);
        m.Height = m.Depth = 1;
        m.srcMemoryType = m.dstMemoryType = BGCU_MEMORYTYPE_DEVICE;
        if (c.op == BG_CMD_COPY) {
          m.dstDevice = c.u.copy.dst;
          m.srcDevice = c.u.copy.src;
          m.WidthInBytes = c.u.copy.bytes;
        } else if (c.op == BG_CMD_COPY_HTOD) {
          m.dstDevice = c.u.htod.dst;
          m.srcMemoryType = BGCU_MEMORYTYPE_HOST;
          m.srcHost = c.u.htod.src;
          m.WidthInBytes = c.u.htod.bytes;
        } else {
          m.dstMemoryType = BGCU_MEMORYTYPE_HOST;
          m.dstHost = c.u.dtoh.dst;
          m.srcDevice = c.u.dtoh.src;
          m.WidthInBytes = c.u.dtoh.bytes;
        }
        if (!m.WidthInBytes) break;
        /* one row of one slice: the pitches at least the row and the heights at least the copy's
         * (cuMemcpy3D's rules; zeros there are refused) */
        m.srcPitch = m.dstPitch = m.WidthInBytes;
        m.srcHeight = m.dstHeight = 1;
        r = cu.cuGraphAddMemcpyNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &m, d->ctx);
        call = "cuGraphAddMemcpyNode";
        break;
      }
      case BG_CMD_MEMSET: {
        if (!c.u.fill.count) break;
        bgcu_memset_params m;
        memset(&m, 0, sizeof m);
        m.dst = c.u.fill.dst;
        m.value = c.u.fill.pattern;
        m.elementSize = c.u.fill.elem_size;
        m.width = c.u.fill.count;
        m.height = 1;
        r = cu.cuGraphAddMemsetNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, &m, d->ctx);
        call = "cuGraphAddMemsetNode";
        break;
      }
      case BG_CMD_EVENT_RECORD:
      case BG_CMD_EVENT_WAIT: {
        cu_event* e = c.u.event.event;
        if (c.op == BG_CMD_EVENT_RECORD) {
          r = cu.cuGraphAddEventRecordNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, e->e);
          call = "cuGraphAddEventRecordNode";
        } else {
          r = cu.cuGraphAddEventWaitNode(&node, gr->g, prev ? &prev : NULL, prev ? 1 : 0, e->e);
          call = "cuGraphAddEventWaitNode";
        }
        if (r == BGCUDA_SUCCESS) {
          atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
          gr->evs[gr->nev++] = e;
        }
        break;
      }
      default: break; /* a barrier: the nodes are in a chain already */
    }
    if (rc == BG_OK && call && r != BGCUDA_SUCCESS) rc = cu_fail_at(r, call, fn);
    if (node) prev = node;
  }
  if (rc != BG_OK) {
    graph_unref(gr);
    return rc;
  }
  bg_obj_init(gr, BG_KIND_GRAPH, dev);
  *out = gr;
  return BG_OK;
}
