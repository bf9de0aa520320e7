/*
 * base.c: what every other file of the shim stands on: the thread's last error (and the two
 * entry points that read it), the header every handle begins with, the monotonic clock, compile
 * results, and the device table's lock. The entry points (api.c and the files beside it), the
 * command list (commands.c) and the backends call it.
 *
 * Calls: nothing.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The device table's lock (entry.h): api.c's opens and closes, pools.c's default plain pools,
 * multi.c's peer access bits. */
pthread_mutex_t bg_dev_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- errors -------------------------------------------------------------------------------- */
static _Thread_local char tls_msg[1024];
static _Thread_local int32_t tls_code;

int32_t bg_set_errorv(int32_t code, const char* fmt, va_list ap) {
  tls_code = code;
  vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
  return code;
}

int32_t bg_set_error(int32_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bg_set_errorv(code, fmt, ap);
  va_end(ap);
  return code;
}

void bg_clear_error(void) {
  tls_code = BG_OK;
  tls_msg[0] = 0;
}

const char* bg_status_name(int32_t code) {
  switch (code) {
#define N(x) case x: return #x;
    N(BG_OK) N(BG_ERR_INVALID_VALUE) N(BG_ERR_OUT_OF_MEMORY) N(BG_ERR_NOT_INITIALIZED)
    N(BG_ERR_DEINITIALIZED) N(BG_ERR_NO_DEVICE) N(BG_ERR_INVALID_DEVICE) N(BG_ERR_INVALID_IMAGE)
    N(BG_ERR_INVALID_CONTEXT) N(BG_ERR_INVALID_PTX) N(BG_ERR_INVALID_SOURCE)
    N(BG_ERR_FILE_NOT_FOUND) N(BG_ERR_INVALID_HANDLE) N(BG_ERR_ILLEGAL_STATE) N(BG_ERR_NOT_FOUND)
    N(BG_ERR_NOT_READY) N(BG_ERR_ILLEGAL_ADDRESS) N(BG_ERR_LAUNCH_OUT_OF_RESOURCES)
    N(BG_ERR_LAUNCH_TIMEOUT) N(BG_ERR_LAUNCH_FAILED) N(BG_ERR_NOT_PERMITTED)
    N(BG_ERR_NOT_SUPPORTED) N(BG_ERR_STREAM_CAPTURE_UNSUPPORTED)
    N(BG_ERR_STREAM_CAPTURE_INVALIDATED) N(BG_ERR_STREAM_CAPTURE_MERGE)
    N(BG_ERR_STREAM_CAPTURE_UNMATCHED) N(BG_ERR_STREAM_CAPTURE_UNJOINED)
    N(BG_ERR_STREAM_CAPTURE_ISOLATION) N(BG_ERR_STREAM_CAPTURE_IMPLICIT) N(BG_ERR_CAPTURED_EVENT)
    N(BG_ERR_STREAM_CAPTURE_WRONG_THREAD) N(BG_ERR_BACKEND_UNAVAILABLE) N(BG_ERR_COMPILE)
    N(BG_ERR_UNKNOWN)
#undef N
    default: return "BG_ERR_UNKNOWN";
  }
}

int32_t bg_last_error(char* buf, uint64_t cap) {
  size_t n = strlen(tls_msg);
  if (buf && cap) {
    size_t c = n < cap - 1 ? n : (size_t)cap - 1;
    memcpy(buf, tls_msg, c);
    buf[c] = 0;
  }
  return (int32_t)n;
}

int32_t bg_last_error_code(void) { return tls_code; }

/* ---- handles ------------------------------------------------------------------------------- */
bool bg_obj_is(const void* h, bg_kind kind) {
  const bg_obj* o = (const bg_obj*)h;
  return o && o->magic == BG_MAGIC && o->kind == (uint32_t)kind;
}

void bg_obj_init(void* h, bg_kind kind, bg_device* dev) {
  bg_obj* o = (bg_obj*)h;
  o->magic = BG_MAGIC;
  o->kind = (uint32_t)kind;
  o->dev = dev;
}

void bg_obj_kill(void* h) {
  if (h) ((bg_obj*)h)->magic = 0;
}

uint64_t bg_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- compile results ----------------------------------------------------------------------- */
/* Backends build results through this, so bg_rtc_* (api.c) work the same everywhere. */
int32_t bg_rtc_make(bg_device* dev, const void* code, uint64_t code_len, const char* log,
                    uint64_t log_len, void** out) {
  bg_rtc* r = calloc(1, sizeof *r);
  if (!r) return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_rtc_compile: out of host memory");
  bg_obj_init(r, BG_KIND_RTC, dev);
  r->code = malloc(code_len + 1);
  r->log = malloc(log_len + 1);
  if (!r->code || !r->log) {
    free(r->code);
    free(r->log);
    free(r);
    return bg_set_error(BG_ERR_OUT_OF_MEMORY, "bg_rtc_compile: out of host memory");
  }
  if (code_len) memcpy(r->code, code, code_len);
  if (log_len) memcpy(r->log, log, log_len);
  r->code[code_len] = 0;
  r->log[log_len] = 0;
  r->code_len = code_len;
  r->log_len = log_len;
  *out = r;
  return BG_OK;
}
