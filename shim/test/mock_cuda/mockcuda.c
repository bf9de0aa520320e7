/* A fake libcuda.so for exercising the backend's bookkeeping without a GPU. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef unsigned int R;
typedef struct node { int type; void* func; unsigned g[3]; uint64_t a0; } node;
typedef struct graph { node* nodes[64]; int n; } graph;
typedef struct stream { int capturing; uint64_t id; graph* g; node* last; } stream;
typedef struct event { int cap; uint64_t id; graph* g; node* last; } event;
typedef struct exec { graph* g; } exec;
static uint64_t next_id = 100;
static _Thread_local void* cur;
static stream legacy;
static stream* S(void* s) { return s ? s : &legacy; }
uint64_t mock_last_set_a0; void* mock_last_set_node;
R cuInit(unsigned f) { (void)f; return 0; }
R cuDriverGetVersion(int* v) { *v = 12080; return 0; }
R cuGetErrorName(R e, const char** s) { *s = e == 1 ? "CUDA_ERROR_INVALID_VALUE" : e == 901 ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" : "CUDA_ERROR_OTHER"; return 0; }
R cuGetErrorString(R e, const char** s) { (void)e; *s = "mock error"; return 0; }
R cuDeviceGetCount(int* n) { *n = 1; return 0; }
R cuDeviceGet(int* d, int o) { if (o) return 101; *d = 0; return 0; }
R cuDeviceGetName(char* n, int len, int d) { (void)d; snprintf(n, (size_t)len, "Mock GPU"); return 0; }
R cuDeviceTotalMem_v2(size_t* b, int d) { (void)d; *b = 1ull << 34; return 0; }
R cuDeviceGetAttribute(int* v, unsigned a, int d) { (void)d; *v = (int)a * 10; if (a == 75) *v = 9; if (a == 76) *v = 0; return 0; }
R cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = (void*)0x1234; return 0; }
R cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
R cuCtxGetCurrent(void** c) { *c = cur; return 0; }
R cuCtxSetCurrent(void* c) { cur = c; return 0; }
static int need_ctx(void) { return cur ? 0 : 201; }
R cuCtxSynchronize(void) { return need_ctx(); }
R cuMemGetInfo_v2(size_t* f, size_t* t) { *f = 1; *t = 2; return need_ctx(); }
R cuMemAlloc_v2(uint64_t* p, size_t n) { if (need_ctx()) return 201; *p = (uint64_t)(uintptr_t)malloc(n); return 0; }
R cuMemFree_v2(uint64_t p) { free((void*)(uintptr_t)p); return 0; }
R cuMemHostAlloc(void** p, size_t n, unsigned f) { (void)f; *p = malloc(n); memset(*p, 0xAB, n); return 0; }
R cuMemHostGetDevicePointer_v2(uint64_t* d, void* p, unsigned f) { (void)f; *d = (uint64_t)(uintptr_t)p + 1; return 0; }
R cuMemFreeHost(void* p) { free(p); return 0; }
R cuMemcpyHtoD_v2(uint64_t d, const void* s, size_t n) { memcpy((void*)(uintptr_t)d, s, n); return 0; }
R cuMemcpyDtoH_v2(void* d, uint64_t s, size_t n) { memcpy(d, (void*)(uintptr_t)s, n); return 0; }
R cuMemcpyDtoD_v2(uint64_t d, uint64_t s, size_t n) { memcpy((void*)(uintptr_t)d, (void*)(uintptr_t)s, n); return 0; }
R cuMemcpyHtoDAsync_v2(uint64_t d, const void* s, size_t n, void* st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
R cuMemcpyDtoHAsync_v2(void* d, uint64_t s, size_t n, void* st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
R cuMemcpyDtoDAsync_v2(uint64_t d, uint64_t s, size_t n, void* st) { (void)st; return cuMemcpyDtoD_v2(d, s, n); }
R cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) { memset((void*)(uintptr_t)d, v, n); return 0; }
R cuMemsetD16_v2(uint64_t d, unsigned short v, size_t n) { for (size_t i = 0; i < n; i++) ((unsigned short*)(uintptr_t)d)[i] = v; return 0; }
R cuMemsetD32_v2(uint64_t d, unsigned v, size_t n) { for (size_t i = 0; i < n; i++) ((unsigned*)(uintptr_t)d)[i] = v; return 0; }
R cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void* s) { (void)s; return cuMemsetD8_v2(d, v, n); }
R cuMemsetD16Async(uint64_t d, unsigned short v, size_t n, void* s) { (void)s; return cuMemsetD16_v2(d, v, n); }
R cuMemsetD32Async(uint64_t d, unsigned v, size_t n, void* s) { (void)s; return cuMemsetD32_v2(d, v, n); }
R cuStreamCreateWithPriority(void** s, unsigned f, int p) { (void)f; (void)p; *s = calloc(1, sizeof(stream)); return 0; }
R cuStreamDestroy_v2(void* s) { free(s); return 0; }
R cuStreamSynchronize(void* s) { return S(s)->capturing ? 900 : 0; }
R cuStreamQuery(void* s) { (void)s; static int k; return (k++ & 1) ? 600 : 0; }
R cuStreamWaitEvent(void* s, void* e, unsigned f) { (void)f; event* ev = e; stream* st = S(s);
  if (ev->cap) { st->capturing = 1; st->id = ev->id; st->g = ev->g; st->last = ev->last; } return 0; }
R cuLaunchHostFunc(void* s, void (*fn)(void*), void* u) { (void)s; fn(u); return 0; }
R cuEventCreate(void** e, unsigned f) { (void)f; *e = calloc(1, sizeof(event)); return 0; }
R cuEventDestroy_v2(void* e) { free(e); return 0; }
R cuEventRecord(void* e, void* s) { event* ev = e; stream* st = S(s); ev->cap = st->capturing; ev->id = st->id; ev->g = st->g; ev->last = st->last; return 0; }
R cuEventQuery(void* e) { (void)e; return 0; }
R cuEventSynchronize(void* e) { (void)e; return 0; }
R cuEventElapsedTime(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 1.5f; return 0; }
R cuModuleLoadDataEx(void** m, const void* img, unsigned n, unsigned* o, void** v) {
  (void)n; (void)o; if (strstr((const char*)img, "BAD")) { snprintf((char*)v[0], (size_t)(uintptr_t)v[1], "ptxas error: line 3 bad"); return 218; }
  *m = malloc(8); return 0; }
R cuModuleUnload(void* m) { free(m); return 0; }
R cuModuleGetFunction(void** f, void* m, const char* name) { (void)m; if (!strcmp(name, "missing")) return 500; *f = (void*)(uintptr_t)(0x1000 + strlen(name)); return 0; }
R cuFuncGetAttribute(int* v, unsigned a, void* f) { (void)a; (void)f; *v = 1024; return 0; }
R cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh, void* s, void** kp, void** ex) {
  (void)bx; (void)by; (void)bz; (void)sh; (void)ex; stream* st = S(s);
  if (st->capturing) { node* n = calloc(1, sizeof *n); n->func = f; n->g[0] = gx; n->g[1] = gy; n->g[2] = gz; n->a0 = kp ? *(uint64_t*)kp[0] : 0; st->g->nodes[st->g->n++] = n; st->last = n; }
  return 0; }
R cuStreamBeginCapture_v2(void* s, unsigned mode) { (void)mode; stream* st = S(s); if (!s) return 906; if (st->capturing) return 401; st->capturing = 1; st->id = next_id++; st->g = calloc(1, sizeof(graph)); st->last = NULL; return 0; }
R cuStreamEndCapture(void* s, void** g) { stream* st = S(s); if (!st->capturing) return 401; *g = st->g; st->capturing = 0; st->g = NULL; return 0; }
R cuStreamIsCapturing(void* s, unsigned* status) { *status = S(s)->capturing ? 1 : 0; return 0; }
R cuGraphGetNodes(void* g, void** nodes, size_t* n) { graph* gr = g; if (nodes) for (int i = 0; i < gr->n && (size_t)i < *n; i++) nodes[i] = gr->nodes[i]; *n = (size_t)gr->n; return 0; }
R cuGraphNodeGetType(void* n, unsigned* t) { *t = (unsigned)((node*)n)->type; return 0; }
R cuGraphInstantiateWithFlags(void** x, void* g, unsigned long long f) { (void)f; exec* e = malloc(sizeof *e); e->g = g; *x = e; return 0; }
R cuGraphUpload(void* x, void* s) { (void)x; (void)s; return 0; }
R cuGraphLaunch(void* x, void* s) { (void)x; (void)s; return 0; }
R cuGraphExecDestroy(void* x) { free(x); return 0; }
R cuGraphDestroy(void* g) { graph* gr = g; for (int i = 0; i < gr->n; i++) free(gr->nodes[i]); free(gr); return 0; }
R cuStreamGetCaptureInfo_v3(void* s, unsigned* status, uint64_t* id, void** g, void* const** deps, const void** edges, size_t* nd) {
  stream* st = S(s); (void)edges; *status = st->capturing ? 1 : 0; if (id) *id = st->id; if (g) *g = st->g;
  static _Thread_local void* one; one = st->last; if (deps) *deps = &one; if (nd) *nd = st->last ? 1 : 0; return 0; }
typedef struct { void* func; unsigned g[3], b[3], sh; void** kp; void** ex; void* kern; void* ctx; } knp;
R cuGraphKernelNodeGetParams_v2(void* n, knp* p) { node* nd = n; memset(p, 0, sizeof *p); p->func = nd->func; memcpy(p->g, nd->g, sizeof p->g); p->kp = (void**)0xdead; return 0; }
R cuGraphExecKernelNodeSetParams_v2(void* x, void* n, const knp* p) { (void)x; if (p->func != ((node*)n)->func) return 1; mock_last_set_node = n; mock_last_set_a0 = p->kp ? *(uint64_t*)p->kp[0] : 0; return 0; }
