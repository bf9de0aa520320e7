#!/usr/bin/env bash
# Regression tests of the CUDA backend (shim/cuda) against the driver simulator (shim/test/cudasim),
# each for a defect of the backend that the simulator exposes: built with libbungpu's CUDA backend
# under ASan and UBSan. Usage: run.sh [extra args for backend_test]. Needs gcc (or $CC) on Linux.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shim=$(cd "$here/../.." && pwd)
sim=$shim/test/cudasim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc=${CC:-gcc}
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
"$cc" -std=c11 -g -O1 $san -fPIC -shared -o "$out/libcudasim.so" "$sim/sim.c" -lpthread -ldl
"$cc" -std=c11 -g -O1 $san -I"$shim" -I"$sim" -o "$out/backend_test" "$here/backend_test.c" "$shim/"*.c "$shim/cuda/"*.c "$shim/test/stub_backend.c" '-DBG_STUBS(X)=X(cpu, 0) X(metal, 0)' -rdynamic -lpthread -ldl -lm
export BUNGPU_LIBCUDA="$out/libcudasim.so" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1
# the backend's defaults: whatever the caller's environment sets (a suite run with its own
# CUDA_DEVICE_MAX_CONNECTIONS, say) is not what this run checks
env -u CUDA_MODULE_LOADING -u CUDA_DEVICE_MAX_CONNECTIONS "$out/backend_test"
# the user's own settings win over the backend's defaults
CUDA_MODULE_LOADING=LAZY CUDA_DEVICE_MAX_CONNECTIONS=4 "$out/backend_test" env
