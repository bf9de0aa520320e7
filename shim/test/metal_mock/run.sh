#!/bin/sh
# Runs shim/metal's Apple path on Linux x86_64 against a mock ObjC runtime + Metal
# (asm objc_msgSend trampoline, a mock GPU thread per queue that enforces encoder rules).
# Usage: sh run.sh   (x86_64 Linux with gcc; the trampoline is x86_64 assembly)
set -e
H=$(cd "$(dirname "$0")" && pwd); M=$(cd "$H/../.." && pwd); O=$(mktemp -d)
trap 'rm -rf "$O"' EXIT
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
for f in $M/metal/*.c; do
  gcc -std=c11 -g -O1 -Wall -Wextra $SAN -I$M -D__APPLE__ -Ddlopen=mock_dlopen -Ddlsym=mock_dlsym \
    -Ddlerror=mock_dlerror -c $f -o $O/metal_$(basename $f .c).o
done
gcc -std=gnu11 -g -O1 $SAN -c $H/mock.c -o $O/mock.o
for f in $M/*.c; do gcc -std=c11 -g -O1 $SAN -I$M -c $f -o $O/core_$(basename $f .c).o; done
gcc -std=c11 -g -I$M '-DBG_STUBS(X)=X(cpu, 0) X(cuda, 0)' -c $M/test/stub_backend.c -o $O/stubs.o
gcc -std=gnu11 -g -O1 $SAN -I$M $H/test.c $O/metal_*.o $O/mock.o $O/core_*.o $O/stubs.o -o $O/t -lpthread
ASAN_OPTIONS=detect_leaks=0 timeout 120 $O/t
