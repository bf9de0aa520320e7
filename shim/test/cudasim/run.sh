#!/usr/bin/env bash
# Builds the CUDA driver simulator and runs, under ASan and UBSan:
#   sim_test: the simulator's own behaviours (driver rules, error codes, deadlocks caught);
#   flow: the CUDA backend (shim/cuda) through libbungpu against the simulator.
# Usage: run.sh [sim_test|flow]... (default: both). Needs gcc (or $CC) on Linux.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shim=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc=${CC:-gcc}
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
# the simulator builds in the background while the first test program compiles (two cores)
"$cc" -std=c11 -g -O1 $san -fPIC -shared -o "$out/libcudasim.so" "$here/sim.c" -lpthread -ldl &
sim=$!
built() { if [ -n "$sim" ]; then wait "$sim"; sim=; fi; }
export BUNGPU_LIBCUDA="$out/libcudasim.so" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1
what=${*:-sim_test flow}
for w in $what; do
  case $w in
    sim_test)
      "$cc" -std=c11 -g -O1 $san -I"$shim" -o "$out/sim_test" "$here/sim_test.c" -lpthread -ldl
      built
      "$out/sim_test" ;;
    flow)
      "$cc" -std=c11 -g -O1 $san -I"$shim" -I"$here" -o "$out/flow" "$here/flow.c" "$shim/"*.c "$shim/cuda/"*.c "$shim/test/stub_backend.c" '-DBG_STUBS(X)=X(cpu, 0) X(metal, 0)' -rdynamic -lpthread -ldl -lm
      built
      "$out/flow" ;;
    *) echo "unknown part $w" >&2; exit 2 ;;
  esac
done
