#!/bin/sh
# Build shim/test/cpu_test.c with sanitizers and run it; exit non-zero on any report.
#
#   shim/test/run_sanitizers.sh              # AddressSanitizer + UndefinedBehaviorSanitizer
#   BG_SANITIZE=thread shim/test/run_sanitizers.sh   # ThreadSanitizer
#   BG_SANITIZE="address thread" ...         # both, one after the other
#   CC=clang shim/test/run_sanitizers.sh     # another compiler (default gcc)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
shim=$(cd "$here/.." && pwd)
cc=${CC:-gcc}
modes=${BG_SANITIZE:-address}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bg-san-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

srcs="$shim/test/cpu_test.c $shim/test/stub_backend.c"
for f in "$shim"/*.c; do srcs="$srcs $f"; done
for f in "$shim"/cpu/*.c; do srcs="$srcs $f"; done

status=0
for mode in $modes; do
  case "$mode" in
    address | asan)
      flags="-fsanitize=address,undefined -fno-sanitize-recover=all"
      export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1"
      export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
      ;;
    thread | tsan)
      flags="-fsanitize=thread"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
      ;;
    *)
      echo "run_sanitizers: unknown BG_SANITIZE mode '$mode' (address or thread)" >&2
      exit 2
      ;;
  esac
  bin="$tmp/cpu_test_$mode"
  log="$tmp/log_$mode"
  echo "run_sanitizers: building with $cc $flags"
  # shellcheck disable=SC2086
  "$cc" -std=c11 -g -O1 -fno-omit-frame-pointer $flags -Wall -Wextra -pthread \
    -I"$shim" '-DBG_STUBS(X)=X(cuda, 0) X(metal, 0)' -DBG_SHIM_DIR="\"$shim\"" -o "$bin" $srcs -ldl -lm
  echo "run_sanitizers: running ($mode)"
  rc=0
  "$bin" >"$log" 2>&1 || rc=$?
  cat "$log"
  if [ "$rc" -ne 0 ]; then
    echo "run_sanitizers: $mode run failed (exit $rc)" >&2
    status=1
  elif grep -Eq 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$log"; then
    echo "run_sanitizers: $mode run reported problems" >&2
    status=1
  else
    echo "run_sanitizers: $mode clean"
  fi
done
exit $status
