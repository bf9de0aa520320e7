/* A mock Objective-C runtime + Metal, for running shim/metal's Apple path on Linux x86_64.
 * objc_msgSend is an asm trampoline: lookup(self, sel) -> IMP, then tail-jump with all argument
 * registers and the stack intact, like the real one. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, "MOCK VIOLATION: " __VA_ARGS__); fprintf(stderr, "\n"); abort(); } while (0)

enum { C_NIL, C_CLASS_NSSTRING, C_STRING, C_ARRAY, C_DEVICE, C_BUFFER, C_QUEUE, C_CB, C_ENC, C_EVENT,
       C_LIB, C_FN, C_PSO, C_ERROR, C_CLASS_PI, C_PI };
typedef struct { uint64_t w, h, d; } msize;

struct cmd;
typedef struct mobj {
  int cls;
  _Atomic int rc;
  /* payload */
  char* str;                  /* string */
  struct mobj** items; int n; /* array */
  void* mem; uint64_t len;    /* buffer */
  pthread_t th; pthread_mutex_t mu; pthread_cond_t cv; struct mobj *qhead, *qtail; /* queue */
  struct mobj* qnext; struct mobj* queue; struct cmd *c0, *c1; _Atomic int status; double gpu_end;
  int committed; struct mobj* active_enc; int fail; /* cb */
  struct mobj* cb; int enc_kind; int ended; void* bind[31]; struct mobj* pso; /* enc */
  _Atomic uint64_t val; /* event */
  void (*kfn)(void** b, uint64_t gid); /* fn, pso */
} mobj;

static _Atomic long live[32];
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

static mobj* mk(int cls) {
  mobj* o = calloc(1, sizeof *o);
  o->cls = cls;
  o->rc = 1;
  live[cls]++;
  return o;
}

/* autorelease pools */
static __thread mobj** pool; static __thread size_t npool, cappool;
static mobj* autorel(mobj* o) {
  if (npool == cappool) { cappool = cappool ? cappool * 2 : 64; pool = realloc(pool, cappool * sizeof *pool); }
  pool[npool++] = o;
  return o;
}
static void obj_release(mobj* o);
void* m_pool_push(void) { return (void*)(uintptr_t)(npool + 1); }
void m_pool_pop(void* p) {
  size_t mark = (size_t)(uintptr_t)p - 1;
  while (npool > mark) obj_release(pool[--npool]);
}

typedef struct cmd {
  struct cmd* next;
  int op; /* 1 wait 2 signal 3 dispatch 4 copy 5 barrier */
  mobj* ev; uint64_t v;
  void (*kfn)(void**, uint64_t); void* bind[31]; msize g, b;
  void* dst; const void* src; uint64_t n;
  mobj* keep[3];
  void* owned[31];
} cmd;

static void obj_release(mobj* o) {
  if (!o) return;
  int r = atomic_fetch_sub(&o->rc, 1) - 1;
  if (r < 0) DIE("over-release of class %d", o->cls);
  if (r) return;
  live[o->cls]--;
  switch (o->cls) {
    case C_STRING: free(o->str); break;
    case C_ARRAY: for (int i = 0; i < o->n; i++) obj_release(o->items[i]); free(o->items); break;
    case C_BUFFER: free(o->mem); break;
    case C_CB:
      if (!o->committed && o->active_enc) DIE("command buffer released with an encoder not ended");
      for (cmd* c = o->c0; c;) { cmd* nx = c->next; for (int i = 0; i < 3; i++) obj_release(c->keep[i]);
        for (int i = 0; i < 31; i++) free(c->owned[i]); free(c); c = nx; }
      break;
    case C_ENC: if (!o->ended) DIE("encoder released without endEncoding"); break;
    case C_QUEUE: pthread_mutex_lock(&o->mu); o->status = -1; pthread_cond_broadcast(&o->cv); pthread_mutex_unlock(&o->mu);
      pthread_join(o->th, NULL); break;
    case C_PSO: case C_FN: break;
    default: break;
  }
  free(o);
}
static mobj* obj_retain(mobj* o) { if (o) o->rc++; return o; }

/* ---- kernels ---- */
static void k_fill8(void** b, uint64_t i) { if (i < *(uint32_t*)b[2]) ((uint8_t*)b[0])[*(uint64_t*)b[1] + i] = (uint8_t)*(uint32_t*)b[3]; }
static void k_fill16(void** b, uint64_t i) { if (i < *(uint32_t*)b[2]) ((uint16_t*)b[0])[*(uint64_t*)b[1] + i] = (uint16_t)*(uint32_t*)b[3]; }
static void k_fill32(void** b, uint64_t i) { if (i < *(uint32_t*)b[2]) ((uint32_t*)b[0])[*(uint64_t*)b[1] + i] = *(uint32_t*)b[3]; }
static void k_copy8(void** b, uint64_t i) { if (i < *(uint32_t*)b[4]) ((uint8_t*)b[0])[*(uint64_t*)b[2] + i] = ((uint8_t*)b[1])[*(uint64_t*)b[3] + i]; }
static void k_vadd(void** b, uint64_t i) { if (i < *(uint32_t*)b[3]) ((float*)b[2])[i] = ((float*)b[0])[i] + ((float*)b[1])[i]; }
static void k_slowinc(void** b, uint64_t i) { if (i == 0) { usleep(20000); } if (i < *(uint32_t*)b[1]) ((int*)b[0])[i] += 1; }
static void k_fail(void** b, uint64_t i) { (void)b; (void)i; }
static void k_twice(void** b, uint64_t i) { if (i < *(uint32_t*)b[2]) ((float*)b[1])[i] = 2 * ((float*)b[0])[i]; }
static struct { const char* n; void (*f)(void**, uint64_t); } KS[] = {
  {"bg_fill8", k_fill8}, {"bg_fill16", k_fill16}, {"bg_fill32", k_fill32}, {"bg_copy8", k_copy8},
  {"vadd", k_vadd}, {"slowinc", k_slowinc}, {"fail", k_fail}, {"twice", k_twice}};

/* ---- GPU ---- */
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void ev_set(mobj* e, uint64_t v) { pthread_mutex_lock(&ev_mu); e->val = v; pthread_cond_broadcast(&ev_cv); pthread_mutex_unlock(&ev_mu); }
static void* gpu_main(void* a) {
  mobj* q = a;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (!q->qhead && q->status != -1) pthread_cond_wait(&q->cv, &q->mu);
    if (!q->qhead) { pthread_mutex_unlock(&q->mu); return NULL; }
    mobj* cb = q->qhead; q->qhead = cb->qnext; if (!q->qhead) q->qtail = NULL;
    pthread_mutex_unlock(&q->mu);
    for (cmd* c = cb->c0; c; c = c->next) {
      if (c->op == 1) { pthread_mutex_lock(&ev_mu); while (c->ev->val < c->v) pthread_cond_wait(&ev_cv, &ev_mu); pthread_mutex_unlock(&ev_mu); }
      else if (c->op == 2) ev_set(c->ev, c->v);
      else if (c->op == 3) { if (c->kfn == k_fail) cb->fail = 1;
        uint64_t total = c->g.w * c->b.w; for (uint64_t i = 0; i < total; i++) c->kfn(c->bind, i); }
      else if (c->op == 4) memmove(c->dst, c->src, c->n);
    }
    cb->gpu_end = now_s();
    pthread_mutex_lock(&ev_mu); cb->status = cb->fail ? 5 : 4; pthread_cond_broadcast(&ev_cv); pthread_mutex_unlock(&ev_mu);
    obj_release(cb); /* the queue's reference */
  }
}

static void add_cmd(mobj* cb, cmd* c) {
  if (cb->committed) DIE("encoding into a committed command buffer");
  if (cb->c1) cb->c1->next = c; else cb->c0 = c;
  cb->c1 = c;
}

/* ---- IMPs, each with the exact signature the caller uses ---- */
typedef mobj* id;
typedef const char* SEL;
static id i_nil(void) { return NULL; }
static id i_retain(id o, SEL s) { (void)s; return obj_retain(o); }
static void i_release(id o, SEL s) { (void)s; obj_release(o); }
static id i_alloc(id o, SEL s) { (void)o; (void)s; return mk(C_STRING); }
static id i_initWithBytes(id o, SEL s, const void* p, uint64_t n, uint64_t enc) {
  (void)s; if (enc != 4) DIE("encoding %lu", (unsigned long)enc);
  o->str = malloc(n + 1); memcpy(o->str, p, n); o->str[n] = 0; return o; }
static id str(const char* c) { id o = mk(C_STRING); o->str = strdup(c); return autorel(o); }
static const char* i_utf8(id o, SEL s) { (void)s; return o->str; }
static uint64_t i_count(id o, SEL s) { (void)s; return o->n; }
static id i_objectAtIndex(id o, SEL s, uint64_t i) { (void)s; return o->items[i]; }
static unsigned char i_responds(id o, SEL s, SEL a) { (void)o; (void)s; (void)a; return 1; }
static id i_name(id o, SEL s) { (void)o; (void)s; return str("Mock Apple M9"); }
static uint64_t i_regid(id o, SEL s) { (void)s; return (uint64_t)(uintptr_t)o; }
static uint64_t i_wss(id o, SEL s) { (void)o; (void)s; return 16ull << 30; }
static uint64_t i_cur(id o, SEL s) { (void)o; (void)s; return 1ull << 30; }
static unsigned char i_unified(id o, SEL s) { (void)o; (void)s; return 1; }
static msize i_maxtpt(id o, SEL s) { (void)o; (void)s; return (msize){1024, 1024, 1024}; }
static uint64_t i_maxtgmem(id o, SEL s) { (void)o; (void)s; return 32768; }
static uint64_t i_maxbuf(id o, SEL s) { (void)o; (void)s; return 1ull << 34; }
static id i_newBuf(id o, SEL s, uint64_t len, uint64_t opt) {
  (void)o; (void)s; if (opt != 0) DIE("options"); id b = mk(C_BUFFER); b->mem = aligned_alloc(4096, (len + 4095) & ~4095ull);
  memset(b->mem, 0xAB, len); b->len = len; return b; }
static id i_newBufBytes(id o, SEL s, const void* p, uint64_t len, uint64_t opt) {
  id b = i_newBuf(o, s, len, opt); memcpy(b->mem, p, len); return b; }
static void* i_contents(id o, SEL s) { (void)s; if (o->cls != C_BUFFER) DIE("contents of class %d", o->cls); return o->mem; }
static id i_newQueue(id o, SEL s) { (void)o; (void)s; id q = mk(C_QUEUE); pthread_mutex_init(&q->mu, NULL); pthread_cond_init(&q->cv, NULL);
  pthread_create(&q->th, NULL, gpu_main, q); return q; }
static id i_commandBuffer(id q, SEL s) { (void)s; id cb = mk(C_CB); cb->queue = q; return autorel(cb); }
static id mkenc(id cb, int kind) {
  if (cb->cls != C_CB) DIE("encoder from class %d", cb->cls);
  if (cb->active_enc) DIE("new encoder while another is active");
  if (cb->committed) DIE("encoder on committed cb");
  id e = mk(C_ENC); e->cb = cb; e->enc_kind = kind; cb->active_enc = e; return autorel(e); }
static id i_compEnc(id cb, SEL s) { (void)s; return mkenc(cb, 0); }
static id i_compEncType(id cb, SEL s, uint64_t t) { (void)s; if (t != 1) DIE("dispatch type"); return mkenc(cb, 1); }
static id i_blitEnc(id cb, SEL s) { (void)s; return mkenc(cb, 2); }
static void i_endEncoding(id e, SEL s) { (void)s; if (e->ended) DIE("endEncoding twice"); e->ended = 1; e->cb->active_enc = NULL; }
static void i_commit(id cb, SEL s) {
  (void)s; if (cb->active_enc) DIE("commit with an active encoder"); if (cb->committed) DIE("commit twice");
  cb->committed = 1; obj_retain(cb); id q = cb->queue;
  pthread_mutex_lock(&q->mu); if (q->qtail) q->qtail->qnext = cb; else q->qhead = cb; q->qtail = cb; pthread_cond_signal(&q->cv); pthread_mutex_unlock(&q->mu); }
static void i_wait(id cb, SEL s) { (void)s; if (!cb->committed) DIE("waitUntilCompleted before commit");
  pthread_mutex_lock(&ev_mu); while (cb->status < 4) pthread_cond_wait(&ev_cv, &ev_mu); pthread_mutex_unlock(&ev_mu); }
static uint64_t i_status(id cb, SEL s) { (void)s; return cb->status; }
static id i_error(id cb, SEL s) { (void)s; if (cb->status != 5) return NULL; id e = mk(C_ERROR); autorel(e); return e; }
static id i_localized(id e, SEL s) { (void)s; return e->cls == C_ERROR ? str(e->str ? e->str : "Execution of the command buffer was aborted (mock fault)") : NULL; }
static double i_gpuEnd(id cb, SEL s) { (void)s; return cb->gpu_end; }
static void need_enc(id e, int kind) { if (e->cls != C_ENC || e->ended) DIE("use of ended/non encoder"); if (kind >= 0 && (kind == 2) != (e->enc_kind == 2)) DIE("wrong encoder kind"); }
static void i_setPSO(id e, SEL s, id p) { (void)s; need_enc(e, 0); e->pso = p; }
static void i_setBuffer(id e, SEL s, id b, uint64_t off, uint64_t i) { (void)s; need_enc(e, 0); if (i > 30) DIE("index"); if (b->cls != C_BUFFER) DIE("setBuffer non-buffer");
  e->bind[i] = (char*)b->mem + off; /* keep simple: buffers outlive the test's cbs */ }
static void i_setBytes(id e, SEL s, const void* p, uint64_t n, uint64_t i) { (void)s; need_enc(e, 0); if (i > 30 || n > 4096) DIE("setBytes");
  void* c = malloc(8); memset(c, 0, 8); memcpy(c, p, n); e->bind[i] = c; /* leaked into cmd below */ }
static void i_setTGMem(id e, SEL s, uint64_t n, uint64_t i) { (void)s; need_enc(e, 0); if (n % 16 || i) DIE("tg mem"); }
static void i_dispatch(id e, SEL s, msize g, msize b) { (void)s; need_enc(e, 0); if (!e->pso) DIE("no pso");
  if (b.w * b.h * b.d > 1024) DIE("too many threads"); cmd* c = calloc(1, sizeof *c); c->op = 3; c->kfn = e->pso->kfn; c->g = g; c->b = b;
  memcpy(c->bind, e->bind, sizeof c->bind); add_cmd(e->cb, c); }
static void i_barrier(id e, SEL s, uint64_t scope) { (void)s; need_enc(e, 0); if (e->enc_kind != 1) DIE("barrier on serial encoder"); if (scope != 1) DIE("scope");
  cmd* c = calloc(1, sizeof *c); c->op = 5; add_cmd(e->cb, c); }
static void i_copy(id e, SEL s, id sb, uint64_t so, id db, uint64_t dof, uint64_t n) { (void)s; need_enc(e, 2);
  if ((so | dof | n) & 3) DIE("unaligned blit copy"); if (so + n > sb->len || dof + n > db->len) DIE("blit out of range");
  cmd* c = calloc(1, sizeof *c); c->op = 4; c->dst = (char*)db->mem + dof; c->src = (char*)sb->mem + so; c->n = n;
  c->keep[0] = obj_retain(sb); c->keep[1] = obj_retain(db); add_cmd(e->cb, c); }
static id i_newEvent(id o, SEL s) { (void)o; (void)s; return mk(C_EVENT); }
static uint64_t i_sigval(id e, SEL s) { (void)s; return e->val; }
static void i_setsig(id e, SEL s, uint64_t v) { (void)s; ev_set(e, v); }
static void i_encSignal(id cb, SEL s, id ev, uint64_t v) { (void)s; if (cb->active_enc) DIE("encodeSignalEvent with active encoder");
  cmd* c = calloc(1, sizeof *c); c->op = 2; c->ev = ev; c->v = v; c->keep[0] = obj_retain(ev); add_cmd(cb, c); }
static void i_encWait(id cb, SEL s, id ev, uint64_t v) { (void)s; if (cb->active_enc) DIE("encodeWaitForEvent with active encoder");
  cmd* c = calloc(1, sizeof *c); c->op = 1; c->ev = ev; c->v = v; c->keep[0] = obj_retain(ev); add_cmd(cb, c); }
static id i_newLibSrc(id d, SEL s, id src, id opts, id* err) { (void)d; (void)s; (void)opts;
  if (src->cls != C_STRING) DIE("source not a string");
  if (strstr(src->str, "#error")) { id e = mk(C_ERROR); e->str = strdup("program_source:1:2: error: boom"); *err = autorel(e); return NULL; }
  id l = mk(C_LIB); l->str = strdup(src->str); return l; }
static id i_newLibData(id d, SEL s, id data, id* err) { (void)d; (void)s; (void)data; (void)err; return mk(C_LIB); }
static id i_newFn(id l, SEL s, id name) { (void)s;
  for (size_t i = 0; i < sizeof KS / sizeof *KS; i++) if (!strcmp(KS[i].n, name->str) && strstr(l->str ? l->str : "", name->str)) { id f = mk(C_FN); f->kfn = KS[i].f; return f; }
  return NULL; }
static id i_newPSO(id d, SEL s, id fn, id* err) { (void)d; (void)s; (void)err; id p = mk(C_PSO); p->kfn = fn->kfn; return p; }
static uint64_t i_maxTotal(id p, SEL s) { (void)p; (void)s; return 1024; }
static uint64_t i_staticTG(id p, SEL s) { (void)p; (void)s; return 0; }
static id i_processInfo(id c, SEL s) { (void)c; (void)s; return str("pi"); }
typedef struct { int64_t a, b, c; } osv;
static osv i_osver(id o, SEL s) { (void)o; (void)s; return (osv){14, 5, 0}; }

static struct { const char* sel; void* imp; } IMPS[] = {
  {"retain", i_retain}, {"release", i_release}, {"alloc", i_alloc}, {"initWithBytes:length:encoding:", i_initWithBytes},
  {"UTF8String", i_utf8}, {"count", i_count}, {"objectAtIndex:", i_objectAtIndex}, {"respondsToSelector:", i_responds},
  {"name", i_name}, {"registryID", i_regid}, {"recommendedMaxWorkingSetSize", i_wss}, {"currentAllocatedSize", i_cur},
  {"hasUnifiedMemory", i_unified}, {"maxThreadsPerThreadgroup", i_maxtpt}, {"maxThreadgroupMemoryLength", i_maxtgmem},
  {"maxBufferLength", i_maxbuf}, {"newBufferWithLength:options:", i_newBuf}, {"newBufferWithBytes:length:options:", i_newBufBytes},
  {"contents", i_contents}, {"newCommandQueue", i_newQueue}, {"commandBuffer", i_commandBuffer},
  {"computeCommandEncoder", i_compEnc}, {"computeCommandEncoderWithDispatchType:", i_compEncType},
  {"blitCommandEncoder", i_blitEnc}, {"endEncoding", i_endEncoding}, {"commit", i_commit},
  {"waitUntilCompleted", i_wait}, {"status", i_status}, {"error", i_error}, {"localizedDescription", i_localized},
  {"GPUEndTime", i_gpuEnd}, {"setComputePipelineState:", i_setPSO}, {"setBuffer:offset:atIndex:", i_setBuffer},
  {"setBytes:length:atIndex:", i_setBytes}, {"setThreadgroupMemoryLength:atIndex:", i_setTGMem},
  {"dispatchThreadgroups:threadsPerThreadgroup:", i_dispatch}, {"memoryBarrierWithScope:", i_barrier},
  {"copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", i_copy}, {"newSharedEvent", i_newEvent},
  {"signaledValue", i_sigval}, {"setSignaledValue:", i_setsig}, {"encodeSignalEvent:value:", i_encSignal},
  {"encodeWaitForEvent:value:", i_encWait}, {"newLibraryWithSource:options:error:", i_newLibSrc},
  {"newLibraryWithData:error:", i_newLibData}, {"newFunctionWithName:", i_newFn},
  {"newComputePipelineStateWithFunction:error:", i_newPSO}, {"maxTotalThreadsPerThreadgroup", i_maxTotal},
  {"staticThreadgroupMemoryLength", i_staticTG}, {"processInfo", i_processInfo}, {"operatingSystemVersion", i_osver},
};

void* mock_lookup(id self, SEL sel) {
  if (!self) return (void*)i_nil;
  for (size_t i = 0; i < sizeof IMPS / sizeof *IMPS; i++) if (!strcmp(IMPS[i].sel, sel)) return IMPS[i].imp;
  DIE("unknown selector %s on class %d", sel, self->cls);
}
void* mock_lookup_stret(void* ret, id self, SEL sel) { (void)ret; return mock_lookup(self, sel); }

__asm__(
    ".text\n.globl mock_msgSend\nmock_msgSend:\n"
    "push %rbp\nmov %rsp,%rbp\nsub $48,%rsp\n"
    "mov %rdi,0(%rsp)\nmov %rsi,8(%rsp)\nmov %rdx,16(%rsp)\nmov %rcx,24(%rsp)\nmov %r8,32(%rsp)\nmov %r9,40(%rsp)\n"
    "call mock_lookup\nmov %rax,%r11\n"
    "mov 0(%rsp),%rdi\nmov 8(%rsp),%rsi\nmov 16(%rsp),%rdx\nmov 24(%rsp),%rcx\nmov 32(%rsp),%r8\nmov 40(%rsp),%r9\n"
    "leave\njmp *%r11\n"
    ".globl mock_msgSend_stret\nmock_msgSend_stret:\n"
    "push %rbp\nmov %rsp,%rbp\nsub $48,%rsp\n"
    "mov %rdi,0(%rsp)\nmov %rsi,8(%rsp)\nmov %rdx,16(%rsp)\nmov %rcx,24(%rsp)\nmov %r8,32(%rsp)\nmov %r9,40(%rsp)\n"
    "call mock_lookup_stret\nmov %rax,%r11\n"
    "mov 0(%rsp),%rdi\nmov 8(%rsp),%rsi\nmov 16(%rsp),%rdx\nmov 24(%rsp),%rcx\nmov 32(%rsp),%r8\nmov 40(%rsp),%r9\n"
    "leave\njmp *%r11\n");
void mock_msgSend(void);
void mock_msgSend_stret(void);

static mobj nsstring_class = {.cls = C_CLASS_NSSTRING, .rc = 1 << 20};
static mobj pi_class = {.cls = C_CLASS_PI, .rc = 1 << 20};
static id the_device;
static id getClass(const char* n) { return !strcmp(n, "NSString") ? &nsstring_class : !strcmp(n, "NSProcessInfo") ? &pi_class : NULL; }
static SEL selreg(const char* n) { return n; }
static id create_default(void) { if (!the_device) the_device = mk(C_DEVICE); return obj_retain(the_device); }
static id copy_all(void) { id a = mk(C_ARRAY); a->n = 1; a->items = malloc(sizeof(id)); a->items[0] = create_default(); return a; }
static void* dd_create(const void* p, size_t n, void* q, void* d) { (void)p; (void)n; (void)q; (void)d; return mk(C_STRING); }
static void dd_release(void* o) { obj_release(o); }

void* mock_dlopen(const char* path, int mode) { (void)mode; return (void*)path; }
char* mock_dlerror(void) { return NULL; }
void* mock_dlsym(void* h, const char* n) {
  (void)h;
  static struct { const char* n; void* p; } T[] = {
    {"objc_getClass", getClass}, {"sel_registerName", selreg}, {"objc_msgSend", mock_msgSend},
    {"objc_msgSend_stret", mock_msgSend_stret}, {"objc_autoreleasePoolPush", m_pool_push},
    {"objc_autoreleasePoolPop", m_pool_pop}, {"MTLCreateSystemDefaultDevice", create_default},
    {"MTLCopyAllDevices", copy_all}, {"dispatch_data_create", dd_create}, {"dispatch_release", dd_release}};
  for (size_t i = 0; i < sizeof T / sizeof *T; i++) if (!strcmp(T[i].n, n)) return T[i].p;
  return NULL;
}

long mock_live(int cls) { return live[cls]; }
void mock_report(void) {
  static const char* names[] = {"nil", "NSStringClass", "string", "array", "device", "buffer", "queue", "cb", "enc",
                                "event", "lib", "fn", "pso", "error", "PIclass", "PI"};
  for (int i = 0; i < 16; i++) if (live[i]) fprintf(stderr, "  live %s: %ld\n", names[i], live[i]);
}
