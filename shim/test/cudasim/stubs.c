#include "../../internal.h"
#include <stdio.h>
static int32_t none_probe(int32_t* count, char* msg, uint64_t cap) { *count = 0; snprintf(msg, (size_t)cap, "stub"); return BG_ERR_BACKEND_UNAVAILABLE; }
static int32_t none_open(int32_t o, bg_device** out) { (void)o; (void)out; return BG_ERR_BACKEND_UNAVAILABLE; }
const bg_backend bg_cpu_backend = {none_probe, none_open};
const bg_backend bg_metal_backend = {none_probe, none_open};
