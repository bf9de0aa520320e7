#!/usr/bin/env bash
# Dress rehearsal of the GPU run: the WHOLE suite with BUNGPU_DEVICE=cuda:0, as a machine with
# an NVIDIA GPU runs it, but with the CUDA driver simulator
# (shim/test/cudasim) as libcuda. Needs Linux, a C compiler and NVRTC (BUNGPU_NVRTC, or the
# pip-installed one of test/nvrtc_env.ts). No GPU.
#
#   bash test/sim_suite.sh [bun test args...]      e.g. bash test/sim_suite.sh test/tensor.test.ts
#   bash test/sim_suite.sh run <script> [args...]   e.g. bash test/sim_suite.sh run examples/demo.ts
#
# Kernels run on the simulator as host twins: translated from each kernel's CUDA C by
# shim/test/cudasim/twins.ts (the --preload below), else the CPU kernel of the same name from the
# run's own kernel cache. Everything goes into a fresh temporary folder (SIM_SUITE_DIR to choose
# it; it is removed at the end unless SIM_SUITE_KEEP=1). Extra simulator settings pass through the
# environment (CUDASIM_DELAY_US=3000 CUDASIM_POISON=1 for the strict timing of test/cudasim.test.ts).
# The threads of a block run in an order drawn from CUDASIM_SEED (default 1, another order every
# launch; 0: index order; random: a new seed, printed); a failing run prints its seed, and the same
# seed gives the same orders again.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${SIM_SUITE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bungpu-sim-suite-XXXXXX")}
mkdir -p "$work"
[ "${SIM_SUITE_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT

CC=${CC:-$(command -v cc || command -v gcc || command -v clang)} sh shim/test/cudasim/build.sh "$work/sim" >/dev/null || exit 1

if [ -z "${BUNGPU_NVRTC:-}" ]; then
  BUNGPU_NVRTC=$(bun -e 'const n = (await import("./test/nvrtc_env.ts")).nvrtc(); if (!n.ok) { console.error(n.reason); process.exit(1) } console.log(n.lib)') || {
    echo "sim_suite: no NVRTC (set BUNGPU_NVRTC)" >&2; exit 1; }
fi

export BUNGPU_NVRTC
export BUNGPU_DEVICE=cuda:0
export BUNGPU_LIBCUDA="$work/sim/libcudasim.so"
export BUNGPU_CACHE_DIR="$work/cache"
export CUDASIM_TWINS_DIR="$work/twins"
export BUNGPU_SIM_KERNELS="$CUDASIM_TWINS_DIR:$BUNGPU_CACHE_DIR/kernels/cpu"
if [ "${CUDASIM_SEED:-}" = random ]; then CUDASIM_SEED=$(( (RANDOM << 15 | RANDOM) + 1 )); fi
export CUDASIM_SEED=${CUDASIM_SEED:-1}
mkdir -p "$CUDASIM_TWINS_DIR" "$BUNGPU_CACHE_DIR"

# Every Bun process gets the twins preload, the suite's subprocesses (fixtures, the demo, the fuzz
# harness, plan-cache children) included: BUN_OPTIONS reaches them, a --preload flag would not.
export BUN_OPTIONS="${BUN_OPTIONS:+$BUN_OPTIONS }--preload=$root/shim/test/cudasim/twins_preload.ts"

echo "sim_suite: BUNGPU_DEVICE=$BUNGPU_DEVICE BUNGPU_LIBCUDA=$BUNGPU_LIBCUDA BUNGPU_NVRTC=$BUNGPU_NVRTC CUDASIM_SEED=$CUDASIM_SEED" >&2
if [ "${1:-}" = run ]; then
  # bash test/sim_suite.sh run examples/demo.ts | bench/x.ts ...: a script instead of the suite
  bun "$@"
else
  bun test --timeout 60000 "$@"
fi
rc=$?
[ $rc = 0 ] || echo "sim_suite: failed (exit $rc) with CUDASIM_SEED=$CUDASIM_SEED; CUDASIM_SEED=$CUDASIM_SEED bash test/sim_suite.sh ... runs the same thread orders again" >&2
exit $rc
