/*
 * metal/ops.c: the work encoded on a stream: built-in fill and copy kernels, asynchronous copies
 * and fills, modules and kernels, launches and command lists.
 *
 * Calls: runtime.c, stream.c, memory.c, commands.c, base.c.
 */
#include "metal.h"

#if defined(__APPLE__)

/* ---- built-in kernels: fills of 1/2/4-byte patterns and unaligned copies -------------------- */
static const char BI_SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void bg_fill8(device uchar* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = uchar(v); }\n"
    "kernel void bg_fill16(device ushort* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = ushort(v); }\n"
    "kernel void bg_fill32(device uint* p [[buffer(0)]], constant ulong& s [[buffer(1)]],\n"
    "  constant uint& n [[buffer(2)]], constant uint& v [[buffer(3)]],\n"
    "  uint i [[thread_position_in_grid]]) { if (i < n) p[s + i] = v; }\n"
    "kernel void bg_copy8(device uchar* d [[buffer(0)]], device const uchar* src [[buffer(1)]],\n"
    "  constant ulong& doff [[buffer(2)]], constant ulong& soff [[buffer(3)]],\n"
    "  constant uint& n [[buffer(4)]], uint i [[thread_position_in_grid]])\n"
    "  { if (i < n) d[doff + i] = src[soff + i]; }\n";
static const char* const BI_NAMES[BI_COUNT] = {"bg_fill8", "bg_fill16", "bg_fill32", "bg_copy8"};

/* Compiled on first use, once per device. */
static int32_t builtin(mtl_dev* d, int which, oc_id* out) {
  char buf[768];
  int32_t rc = BG_OK;
  pthread_mutex_lock(&d->mu);
  if (!d->bi_pso[which]) {
    oc_id err = NULL;
    if (!d->bi_lib) {
      oc_id src = mtl_ns_str(BI_SRC, sizeof BI_SRC - 1);
      d->bi_lib = src ? m_id_id_id_err(d->dev, mtl_S.newLibraryWithSource, src, NULL, &err) : NULL;
      rel(src);
      if (!d->bi_lib) {
        rc = bg_set_error(BG_ERR_COMPILE, "newLibraryWithSource:options:error: (built-in kernels) %s",
                          mtl_err_text(err, buf, sizeof buf));
        goto out;
      }
    }
    oc_id name = mtl_ns_str(BI_NAMES[which], strlen(BI_NAMES[which]));
    oc_id fn = name ? m_id_id(d->bi_lib, mtl_S.newFunctionWithName, name) : NULL;
    rel(name);
    err = NULL;
    d->bi_pso[which] = fn ? m_id_id_err(d->dev, mtl_S.newComputePipelineState, fn, &err) : NULL;
    rel(fn);
    if (!d->bi_pso[which]) {
      rc = bg_set_error(BG_ERR_COMPILE, "newComputePipelineStateWithFunction:error: (%s) %s",
                        BI_NAMES[which], mtl_err_text(err, buf, sizeof buf));
      goto out;
    }
  }
  *out = d->bi_pso[which];
out:
  pthread_mutex_unlock(&d->mu);
  return rc;
}

#define CHUNK (1ull << 30) /* elements per built-in dispatch (thread index is a uint) */

static void dispatch_1d(oc_id enc, oc_id pso, uint64_t n) {
  uint64_t tg = 256, max = m_u64(pso, mtl_S.maxTotalThreadsPerThreadgroup);
  if (max && max < tg) tg = max;
  m_void_id(enc, mtl_S.setComputePipelineState, pso);
  m_void_size_size(enc, mtl_S.dispatchThreadgroups, (mtl_size){(n + tg - 1) / tg, 1, 1},
                   (mtl_size){tg, 1, 1});
}

/* ---- async copies and fills, encoded on the stream ------------------------------------------ */
/* Device-side copy between two resolved ranges: a blit when 4-byte aligned (macOS requires it
 * of copyFromBuffer), else the built-in byte-copy kernel. */
static int32_t copy_locked(mtl_stream* s, mtl_ref dst, mtl_ref src, uint64_t n) {
  oc_id enc, pso;
  int32_t rc;
  if (((dst.off | src.off | n) & 3) == 0) {
    if ((rc = mtl_encoder_locked(s, ENC_BLIT, &enc))) return rc;
    m_void_id_u64_id_u64_u64(enc, mtl_S.copyFromBuffer, src.buf, src.off, dst.buf, dst.off, n);
    return BG_OK;
  }
  if ((rc = builtin(DEVOF(s), BI_COPY8, &pso))) return rc;
  if ((rc = mtl_encoder_locked(s, ENC_SERIAL, &enc))) return rc;
  m_void_id_u64_u64(enc, mtl_S.setBuffer, dst.buf, 0, 0);
  m_void_id_u64_u64(enc, mtl_S.setBuffer, src.buf, 0, 1);
  for (uint64_t done = 0; done < n; done += CHUNK) {
    uint64_t doff = dst.off + done, soff = src.off + done;
    uint32_t k = (uint32_t)(n - done < CHUNK ? n - done : CHUNK);
    m_void_ptr_u64_u64(enc, mtl_S.setBytes, &doff, 8, 2);
    m_void_ptr_u64_u64(enc, mtl_S.setBytes, &soff, 8, 3);
    m_void_ptr_u64_u64(enc, mtl_S.setBytes, &k, 4, 4);
    dispatch_1d(enc, pso, k);
  }
  return BG_OK;
}

static int32_t memset_locked(mtl_stream* s, mtl_ref r, uint32_t pattern, uint32_t esz,
                             uint64_t count) {
  oc_id enc, pso;
  int32_t rc;
  if ((rc = builtin(DEVOF(s), esz == 1 ? BI_FILL8 : esz == 2 ? BI_FILL16 : BI_FILL32, &pso)))
    return rc;
  if ((rc = mtl_encoder_locked(s, ENC_SERIAL, &enc))) return rc;
  uint32_t v = esz == 1 ? pattern & 0xff : esz == 2 ? pattern & 0xffff : pattern;
  m_void_id_u64_u64(enc, mtl_S.setBuffer, r.buf, 0, 0);
  m_void_ptr_u64_u64(enc, mtl_S.setBytes, &v, 4, 3);
  for (uint64_t done = 0; done < count; done += CHUNK) {
    uint64_t start = r.off / esz + done;
    uint32_t k = (uint32_t)(count - done < CHUNK ? count - done : CHUNK);
    m_void_ptr_u64_u64(enc, mtl_S.setBytes, &start, 8, 1);
    m_void_ptr_u64_u64(enc, mtl_S.setBytes, &k, 4, 2);
    dispatch_1d(enc, pso, k);
  }
  return BG_OK;
}

/* Host to device: from a shared allocation by blit; from pageable memory through a staging
 * buffer filled now (newBufferWithBytes copies), so the caller may reuse src at once. */
static int32_t htod_locked(mtl_stream* s, mtl_ref dst, const void* src, uint64_t n) {
  mtl_ref rs;
  if (mtl_lookup(DEVOF(s), (uint64_t)(uintptr_t)src, n, &rs) == 0) return copy_locked(s, dst, rs, n);
  if (n > DEVOF(s)->max_buf)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_memcpy_htod_async: %llu bytes exceed "
                        "maxBufferLength for the staging buffer", HEX(n));
  oc_id stage = m_id_ptr_u64_u64(DEVOF(s)->dev, mtl_S.newBufferWithBytes, src, n, MTL_STORAGE_SHARED);
  if (!stage)
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "newBufferWithBytes:length:options: %llu bytes failed",
                        HEX(n));
  int32_t rc = copy_locked(s, dst, (mtl_ref){stage, 0, NULL}, n);
  rel(stage); /* the command buffer keeps it until it completes */
  return rc;
}

/* Device to host: into a shared allocation by blit; into pageable memory by the helper thread
 * after the work before it (the source buffer is kept alive meanwhile). */
static int32_t dtoh_locked(mtl_stream* s, void* dst, mtl_ref src, uint64_t n) {
  mtl_ref rd;
  if (mtl_lookup(DEVOF(s), (uint64_t)(uintptr_t)dst, n, &rd) == 0) return copy_locked(s, rd, src, n);
  return mtl_push_host_locked(s, IT_COPY, NULL, NULL, dst, src.ptr, n, src.buf);
}

static int32_t htod_async_impl(void* sv, bg_devptr dst, const void* src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref r;
  int32_t rc = mtl_resolve(DEVOF(s), dst, n, "bg_memcpy_htod_async", "dst", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = htod_locked(s, r, src, n))) mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_memcpy_htod_async(void* sv, bg_devptr dst, const void* src, uint64_t n) {
  return htod_async_impl(sv, dst, src, n);
}

static int32_t dtoh_async_impl(void* sv, void* dst, bg_devptr src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref r;
  int32_t rc = mtl_resolve(DEVOF(s), src, n, "bg_memcpy_dtoh_async", "src", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = dtoh_locked(s, dst, r, n))) mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_memcpy_dtoh_async(void* sv, void* dst, bg_devptr src, uint64_t n) {
  return dtoh_async_impl(sv, dst, src, n);
}

static int32_t dtod_async_impl(void* sv, bg_devptr dst, bg_devptr src, uint64_t n) {
  mtl_stream* s = sv;
  mtl_ref rd, rs;
  int32_t rc = mtl_resolve(DEVOF(s), dst, n, "bg_memcpy_dtod_async", "dst", &rd);
  if (!rc) rc = mtl_resolve(DEVOF(s), src, n, "bg_memcpy_dtod_async", "src", &rs);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = copy_locked(s, rd, rs, n))) mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_memcpy_dtod_async(void* sv, bg_devptr dst, bg_devptr src, uint64_t n) {
  return dtod_async_impl(sv, dst, src, n);
}

static int32_t memset_async_impl(void* sv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                                 uint64_t count) {
  mtl_stream* s = sv;
  mtl_ref r;
  if (count > UINT64_MAX / esz)
    return bg_set_error(BG_ERR_INVALID_VALUE, "bg_memset_async: %llu elements overflow", HEX(count));
  int32_t rc = mtl_resolve(DEVOF(s), dst, count * esz, "bg_memset_async", "dst", &r);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = memset_locked(s, r, pattern, esz, count))) mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_memset_async(void* sv, bg_devptr dst, uint32_t pattern, uint32_t esz,
                         uint64_t count) {
  return memset_async_impl(sv, dst, pattern, esz, count);
}

/* ---- modules and kernels -------------------------------------------------------------------- */
static int32_t module_load_impl(bg_device* dv, int32_t kind, const void* data, uint64_t n,
                                void** out) {
  mtl_dev* d = (mtl_dev*)dv;
  oc_id lib = NULL, err = NULL;
  char buf[900];
  if (kind == BG_IMAGE_MSL_SOURCE) {
    const char* p = data;
    size_t len = n ? (size_t)n : strlen(p); /* 0: a NUL-terminated string */
    while (len && !p[len - 1]) len--;
    oc_id src = mtl_ns_str(p, len);
    if (!src)
      return bg_set_error(BG_ERR_INVALID_SOURCE, "bg_module_load: the MSL source is not UTF-8");
    lib = m_id_id_id_err(d->dev, mtl_S.newLibraryWithSource, src, NULL, &err);
    rel(src);
    if (!lib)
      return bg_set_error(BG_ERR_COMPILE, "newLibraryWithSource:options:error: %s",
                          mtl_err_text(err, buf, sizeof buf));
  } else if (kind == BG_IMAGE_METALLIB) {
    if (!n) return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: empty metallib");
    if (!mtl_rt.dd_create || !mtl_rt.dd_release)
      return bg_set_error(BG_ERR_NOT_SUPPORTED, "bg_module_load: dispatch_data_create not found");
    void* dd = mtl_rt.dd_create(data, (size_t)n, NULL, NULL); /* default destructor: copies */
    if (!dd) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "dispatch_data_create: failed");
    lib = m_id_id_err(d->dev, mtl_S.newLibraryWithData, (oc_id)dd, &err);
    mtl_rt.dd_release(dd);
    if (!lib)
      return bg_set_error(BG_ERR_INVALID_IMAGE, "newLibraryWithData:error: %s",
                          mtl_err_text(err, buf, sizeof buf));
  } else {
    return bg_set_error(BG_ERR_INVALID_IMAGE, "bg_module_load: image kind %d is not for Metal "
                        "(want BG_IMAGE_MSL_SOURCE or BG_IMAGE_METALLIB)", kind);
  }
  mtl_module* m = calloc(1, sizeof *m);
  if (!m) {
    rel(lib);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_load: out of host memory");
  }
  m->lib = lib;
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->mu, NULL);
  bg_obj_init(m, BG_KIND_MODULE, dv);
  *out = m;
  return BG_OK;
}
int32_t mtl_module_load(bg_device* dv, int32_t kind, const void* data, uint64_t n,
                        void** out) {
  return module_load_impl(dv, kind, data, n, out);
}

/* The last reference frees the kernels and the library. */
static void module_unref(mtl_module* m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  for (mtl_kernel* k = m->kernels; k;) {
    mtl_kernel* next = k->next;
    rel(k->pso); /* command buffers in flight hold their own references */
    rel(k->fn);
    free(k->name);
    free(k);
    k = next;
  }
  rel(m->lib);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* The handles die now; the kernels' code once no command-list graph holds them. */
static int32_t module_unload_impl(void* mv) {
  mtl_module* m = mv;
  bg_obj_kill(m);
  pthread_mutex_lock(&m->mu);
  for (mtl_kernel* k = m->kernels; k; k = k->next) bg_obj_kill(k);
  pthread_mutex_unlock(&m->mu);
  module_unref(m);
  return BG_OK;
}
int32_t mtl_module_unload(void* mv) { return module_unload_impl(mv); }

void mtl_kernel_hold(void* kv) {
  atomic_fetch_add_explicit(&((mtl_kernel*)kv)->mod->refs, 1, memory_order_relaxed);
}
void mtl_kernel_unhold(void* kv) {
  void* pool = mtl_rt.pool_push();
  module_unref(((mtl_kernel*)kv)->mod);
  mtl_rt.pool_pop(pool);
}

static int32_t get_kernel_impl(void* mv, const char* name, void** out) {
  mtl_module* m = mv;
  mtl_dev* d = DEVOF(m);
  char buf[900];
  int32_t rc = BG_OK;
  pthread_mutex_lock(&m->mu);
  for (mtl_kernel* k = m->kernels; k; k = k->next)
    if (!strcmp(k->name, name)) {
      *out = k;
      goto out;
    }
  oc_id nm = mtl_ns_str(name, strlen(name)), err = NULL;
  oc_id fn = nm ? m_id_id(m->lib, mtl_S.newFunctionWithName, nm) : NULL;
  rel(nm);
  if (!fn) {
    rc = bg_set_error(BG_ERR_NOT_FOUND, "newFunctionWithName: no function '%s' in the module", name);
    goto out;
  }
  oc_id pso = m_id_id_err(d->dev, mtl_S.newComputePipelineState, fn, &err);
  if (!pso) {
    rel(fn);
    rc = bg_set_error(BG_ERR_COMPILE, "newComputePipelineStateWithFunction:error: %s: %s", name,
                      mtl_err_text(err, buf, sizeof buf));
    goto out;
  }
  mtl_kernel* k = calloc(1, sizeof *k);
  char* copy = strdup(name);
  if (!k || !copy) {
    free(k);
    free(copy);
    rel(pso);
    rel(fn);
    rc = bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_module_get_kernel: out of host memory");
    goto out;
  }
  k->name = copy;
  k->mod = m;
  k->fn = fn;
  k->pso = pso;
  uint64_t mt = m_u64(pso, mtl_S.maxTotalThreadsPerThreadgroup);
  k->max_threads = (int32_t)(mt > 0x7fffffff ? 0x7fffffff : mt);
  k->static_tg = m_u64(pso, mtl_S.staticThreadgroupMemoryLength);
  bg_obj_init(k, BG_KIND_KERNEL, m->h.dev);
  k->next = m->kernels;
  m->kernels = k;
  *out = k;
out:
  pthread_mutex_unlock(&m->mu);
  return rc;
}
int32_t mtl_module_get_kernel(void* mv, const char* name, void** out) {
  return get_kernel_impl(mv, name, out);
}

int32_t mtl_kernel_max_threads(void* kv, int32_t* out) {
  *out = ((mtl_kernel*)kv)->max_threads;
  return BG_OK;
}

/* ---- launches ------------------------------------------------------------------------------- */
#define ROUND16(x) (((uint64_t)(x) + 15) & ~(uint64_t)15)

static int32_t launch_check(mtl_dev* d, mtl_kernel* k, const uint32_t b[3], uint32_t shared,
                            uint32_t nargs, const char* fn) {
  if (nargs > MAX_BUFFER_ARGS)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u arguments; a Metal kernel binds at most %d",
                        fn, nargs, MAX_BUFFER_ARGS);
  uint64_t t = (uint64_t)b[0] * b[1] * b[2];
  if (t > (uint64_t)k->max_threads || b[0] > d->max_tg.w || b[1] > d->max_tg.h || b[2] > d->max_tg.d)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: block %ux%ux%u exceeds kernel %s's "
                        "maxTotalThreadsPerThreadgroup %d (device max %llux%llux%llu)", fn, b[0],
                        b[1], b[2], k->name, k->max_threads, HEX(d->max_tg.w), HEX(d->max_tg.h),
                        HEX(d->max_tg.d));
  if (ROUND16(shared) + k->static_tg > d->max_tg_mem)
    return bg_set_error(BG_ERR_INVALID_VALUE, "%s: %u bytes of threadgroup memory (+%llu static) "
                        "exceed maxThreadgroupMemoryLength %llu", fn, shared, HEX(k->static_tg),
                        HEX(d->max_tg_mem));
  return BG_OK;
}

static void launch_encode(mtl_dev* d, oc_id enc, mtl_kernel* k, const uint32_t g[3],
                          const uint32_t b[3], uint32_t shared, const uint64_t* args,
                          uint32_t nargs) {
  m_void_id(enc, mtl_S.setComputePipelineState, k->pso);
  pthread_mutex_lock(&d->mu);
  for (uint32_t i = 0; i < nargs; i++) {
    ptrdiff_t j = args[i] ? mtl_map_find(d, args[i]) : -1;
    if (j >= 0) m_void_id_u64_u64(enc, mtl_S.setBuffer, d->map[j].buf, args[i] - d->map[j].base, i);
    else m_void_ptr_u64_u64(enc, mtl_S.setBytes, &args[i], 8, i);
  }
  pthread_mutex_unlock(&d->mu);
  if (shared) m_void_u64_u64(enc, mtl_S.setThreadgroupMemoryLength, ROUND16(shared), 0);
  m_void_size_size(enc, mtl_S.dispatchThreadgroups, (mtl_size){g[0], g[1], g[2]},
                   (mtl_size){b[0], b[1], b[2]});
}

static int32_t launch_impl(void* kv, void* sv, const uint32_t g[3], const uint32_t b[3],
                           uint32_t shared, const uint64_t* args, uint32_t nargs) {
  mtl_kernel* k = kv;
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  int32_t rc = launch_check(d, k, b, shared, nargs, "bg_launch");
  if (rc) return rc;
  oc_id enc;
  pthread_mutex_lock(&s->mu);
  if (!(rc = mtl_encoder_locked(s, ENC_SERIAL, &enc))) { /* serial: launches run in order */
    launch_encode(d, enc, k, g, b, shared, args, nargs);
    mtl_maybe_flush_locked(s);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_launch(void* kv, void* sv, const uint32_t g[3], const uint32_t b[3],
                   uint32_t shared, const uint64_t* args, uint32_t nargs) {
  return launch_impl(kv, sv, g, b, shared, args, nargs);
}

/* ---- command lists: one concurrent compute encoder, barriers where the list asks ------------ */
/* Everything that can be refused is checked before anything is encoded. */
static int32_t submit_check(mtl_stream* s, const uint8_t* p, uint64_t len) {
  mtl_dev* d = DEVOF(s);
  mtl_ref r;
  int32_t rc = BG_OK;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  while (!rc && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        rc = launch_check(d, c.u.launch.kernel, c.u.launch.block, c.u.launch.shared,
                          c.u.launch.nargs, "bg_submit");
        break;
      case BG_CMD_COPY:
        if (c.u.copy.bytes &&
            !(rc = mtl_resolve(d, c.u.copy.dst, c.u.copy.bytes, "bg_submit (copy)", "dst", &r)))
          rc = mtl_resolve(d, c.u.copy.src, c.u.copy.bytes, "bg_submit (copy)", "src", &r);
        break;
      case BG_CMD_COPY_HTOD:
        if (c.u.htod.bytes)
          rc = mtl_resolve(d, c.u.htod.dst, c.u.htod.bytes, "bg_submit (copy to device)", "dst", &r);
        break;
      case BG_CMD_COPY_DTOH:
        if (c.u.dtoh.bytes)
          rc = mtl_resolve(d, c.u.dtoh.src, c.u.dtoh.bytes, "bg_submit (copy to host)", "src", &r);
        break;
      case BG_CMD_MEMSET: {
        uint64_t n = c.u.fill.count;
        uint32_t esz = c.u.fill.elem_size;
        if (n && n > UINT64_MAX / esz)
          rc = bg_set_error(BG_ERR_INVALID_VALUE, "bg_submit: memset of %llu elements", HEX(n));
        else if (n)
          rc = mtl_resolve(d, c.u.fill.dst, n * esz, "bg_submit (memset)", "dst", &r);
        break;
      }
      default: break;
    }
  }
  return rc;
}

static int32_t submit_impl(void* sv, const uint8_t* p, uint64_t len) {
  mtl_stream* s = sv;
  mtl_dev* d = DEVOF(s);
  int32_t rc = submit_check(s, p, len);
  if (rc) return rc;
  mtl_ref rd, rs;
  oc_id enc;
  bg_cmd_iter it;
  bg_cmd c;
  bg_cmd_iter_init(&it, p, len);
  pthread_mutex_lock(&s->mu);
  while (!rc && bg_cmd_next(&it, &c) == BG_CMD_NEXT) {
    switch (c.op) {
      case BG_CMD_LAUNCH:
        if (!(rc = mtl_encoder_locked(s, ENC_CONCURRENT, &enc)))
          launch_encode(d, enc, c.u.launch.kernel, c.u.launch.grid, c.u.launch.block,
                        c.u.launch.shared, c.u.launch.args, c.u.launch.nargs);
        break;
      case BG_CMD_BARRIER: /* across encoders Metal orders buffer hazards itself */
        if (s->enc_kind == ENC_CONCURRENT)
          m_void_u64(s->enc, mtl_S.memoryBarrierWithScope, MTL_BARRIER_BUFFERS);
        break;
      case BG_CMD_COPY: {
        uint64_t n = c.u.copy.bytes;
        if (n && !(rc = mtl_resolve(d, c.u.copy.dst, n, "bg_submit (copy)", "dst", &rd)) &&
            !(rc = mtl_resolve(d, c.u.copy.src, n, "bg_submit (copy)", "src", &rs)))
          rc = copy_locked(s, rd, rs, n);
        break;
      }
      case BG_CMD_COPY_HTOD: {
        uint64_t n = c.u.htod.bytes;
        if (n && !(rc = mtl_resolve(d, c.u.htod.dst, n, "bg_submit (copy to device)", "dst", &rd)))
          rc = htod_locked(s, rd, c.u.htod.src, n);
        break;
      }
      case BG_CMD_COPY_DTOH: {
        uint64_t n = c.u.dtoh.bytes;
        if (n && !(rc = mtl_resolve(d, c.u.dtoh.src, n, "bg_submit (copy to host)", "src", &rs)))
          rc = dtoh_locked(s, c.u.dtoh.dst, rs, n);
        break;
      }
      case BG_CMD_MEMSET: {
        uint64_t n = c.u.fill.count;
        if (n && !(rc = mtl_resolve(d, c.u.fill.dst, n * c.u.fill.elem_size, "bg_submit (memset)",
                                "dst", &rd)))
          rc = memset_locked(s, rd, c.u.fill.pattern, c.u.fill.elem_size, n);
        break;
      }
      case BG_CMD_EVENT_RECORD: rc = mtl_record_locked(s, c.u.event.event); break;
      case BG_CMD_EVENT_WAIT: rc = mtl_wait_locked(s, c.u.event.event); break;
      default: break;
    }
  }
  mtl_end_encoder_locked(s); /* the next list or launch starts after this one */
  mtl_maybe_flush_locked(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
int32_t mtl_submit(void* sv, const uint8_t* p, uint64_t len) {
  return submit_impl(sv, p, len);
}

#endif /* __APPLE__ */
