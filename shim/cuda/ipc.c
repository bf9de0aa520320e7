/*
 * cuda/ipc.c: memory and events shared between processes (cuIpc*): export, open, and close (after
 * the context's work, or queued like a free while that could wait forever).
 *
 * Calls: driver.c, release.c, context.c, base.c.
 */
#include "cuda_internal.h"

/* ---- memory and events shared between processes (cuIpc*) ---------------------------------------
 * Every cuMemAlloc allocation can be exported (no mem_alloc_shareable: the core uses mem_alloc).
 * The payload of bungpu's handle is the driver's CUipc*Handle. The driver itself refuses an open
 * in the exporting process (CUDA_ERROR_INVALID_CONTEXT). The mappings opened are counted per
 * device, so closing anything else is an error before any wait. A close waits for the context's
 * work first, so queued work that reads the mapping finishes, as a free would; while that could
 * wait forever it is queued like a free (see blocked). */
static int32_t ipc_present(const char* fn) {
  if (!cu.cuIpcGetMemHandle || !cu.cuIpcOpenMemHandle_v2 || !cu.cuIpcCloseMemHandle ||
      !cu.cuIpcGetEventHandle || !cu.cuIpcOpenEventHandle || !cu.cuMemGetAddressRange_v2)
    return bg_set_error(BG_ERR_NOT_SUPPORTED, "%s: the CUDA driver lacks the cuIpc* entry points", fn);
  return BG_OK;
}

int32_t cu_ipc_mem_export(bg_device* dev, bg_devptr p, uint8_t* payload, uint64_t* bytes) {
  int32_t rc = ipc_present("bg_ipc_mem_export");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_deviceptr base = 0;
  size_t size = 0;
  CALL(cuMemGetAddressRange_v2, (&base, &size, p));
  if (base != p)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_mem_export: 0x%llx is not the start of an allocation (it lies %llu "
                        "bytes into one)", (unsigned long long)p, (unsigned long long)(p - base));
  bgcu_ipc_handle h;
  CALL(cuIpcGetMemHandle, (&h, p));
  memcpy(payload, &h, sizeof h);
  *bytes = size;
  return BG_OK;
}

int32_t cu_ipc_mem_open(bg_device* dev, int32_t pid, const uint8_t* payload, uint64_t bytes,
                        bg_devptr* out) {
  (void)pid, (void)bytes;
  int32_t rc = ipc_present("bg_ipc_mem_open");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_ipc_handle h;
  memcpy(&h, payload, sizeof h);
  bgcu_deviceptr p = 0;
  CALL(cuIpcOpenMemHandle_v2, (&p, h, BGCU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  cu_device* d = (cu_device*)dev;
  pthread_mutex_lock(&d->def_lock);
  cu_ipc_map* m = d->maps;
  while (m && m->p != p) m = m->next;
  if (!m && (m = calloc(1, sizeof *m))) {
    m->p = p;
    m->next = d->maps;
    d->maps = m;
  }
  if (m) m->opens++;
  pthread_mutex_unlock(&d->def_lock);
  if (!m) {
    cu.cuIpcCloseMemHandle(p);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_mem_open: out of host memory");
  }
  *out = p;
  return BG_OK;
}

/* Only a mapping bg_ipc_mem_open returned on this device (else BG_ERR_INVALID_VALUE at once).
 * Closed after the context's work, or queued while that could wait forever (see blocked). */
int32_t cu_ipc_mem_close(bg_device* dev, bg_devptr p) {
  int32_t rc = ipc_present("bg_ipc_mem_close");
  if (rc) return rc;
  cu_device* d = (cu_device*)dev;
  ENTER(d);
  pthread_mutex_lock(&d->def_lock);
  cu_ipc_map** m = &d->maps;
  while (*m && (*m)->p != p) m = &(*m)->next;
  int found = *m != NULL;
  if (found && --(*m)->opens == 0) {
    cu_ipc_map* gone = *m;
    *m = gone->next;
    free(gone);
  }
  pthread_mutex_unlock(&d->def_lock);
  if (!found)
    return bg_set_error(BG_ERR_INVALID_VALUE,
                        "bg_ipc_mem_close: 0x%llx is not a mapping bg_ipc_mem_open returned on "
                        "this device (or it was closed already)", (unsigned long long)p);
  if (blocked(d) && defer_release(d, 3, p, NULL)) return BG_OK;
  bgcu_result r = ipc_close_now(p);
  if (r != BGCUDA_SUCCESS) return cu_fail(r, "cuIpcCloseMemHandle");
  return BG_OK;
}

int32_t cu_ipc_event_export(void* ep, uint8_t* payload) {
  cu_event* e = ep;
  int32_t rc = ipc_present("bg_ipc_event_export");
  if (rc) return rc;
  ENTER(CUDEV(e));
  bgcu_ipc_handle h;
  CALL(cuIpcGetEventHandle, (&h, e->e));
  memcpy(payload, &h, sizeof h);
  return BG_OK;
}

int32_t cu_ipc_event_open(bg_device* dev, int32_t pid, const uint8_t* payload, void** out) {
  (void)pid;
  int32_t rc = ipc_present("bg_ipc_event_open");
  if (rc) return rc;
  ENTER((cu_device*)dev);
  bgcu_ipc_handle h;
  memcpy(&h, payload, sizeof h);
  cu_event* e = calloc(1, sizeof *e);
  if (!e) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_ipc_event_open: out of host memory");
  bgcu_result r = cu.cuIpcOpenEventHandle(&e->e, h);
  if (r != BGCUDA_SUCCESS) {
    free(e);
    return cu_fail(r, "cuIpcOpenEventHandle");
  }
  atomic_init(&e->refs, 1);
  bg_obj_init(e, BG_KIND_EVENT, dev);
  *out = e;
  return BG_OK;
}
