#!/bin/sh
# The C unit tests (tests/test_*.c, cmocka) under valgrind's memcheck, one
# after another: any error (an uninitialised value used, an invalid read or
# write) or a definite leak fails the test.
#
#   scripts/valgrind.sh [BUILD] [TEST ...]   (default: build, every unit test)
#
# libjpeg-turbo runs its plain C paths here (JSIMD_FORCENONE=1): memcheck
# cannot follow its hand-written AVX2 code and reports pixels that code wrote
# as uninitialised (libjpeg-turbo issues #238 and #277; a 30 x 20 JPEG shows
# it, and the same bytes are defined with the SIMD off or with SSE2 only).
# VALGRIND_TIMEOUT (seconds, default 1800) bounds each test. Exit status: 0
# when every test ran clean (a test that skips with 77 counts as clean), 1
# otherwise; a summary line per test.
set -u
BUILD=${1:-build}
[ $# -gt 0 ] && shift
command -v valgrind >/dev/null || { echo "valgrind.sh: no valgrind (PATINA_BOOTSTRAP_EXTRA=valgrind scripts/bootstrap.sh)" >&2; exit 2; }
[ -d "$BUILD/tests" ] || { echo "valgrind.sh: no $BUILD/tests (make build first)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 0 ]; then
    TESTS=$*
else
    TESTS=$(cd "$ROOT/tests" && ls test_*.c | sed 's/\.c$//')
fi
LOG=$BUILD/Testing/valgrind
mkdir -p "$LOG"
rc=0
for t in $TESTS; do
    bin=$BUILD/tests/$t
    if [ ! -x "$bin" ]; then
        echo "valgrind: $t: not built"
        rc=1
        continue
    fi
    start=$(date +%s)
    (cd "$BUILD/tests" && JSIMD_FORCENONE=1 timeout "${VALGRIND_TIMEOUT:-1800}" valgrind --error-exitcode=99 \
        --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite -q "./$t") \
        > "$LOG/$t.log" 2>&1
    r=$?
    secs=$(( $(date +%s) - start ))
    case $r in
    0) echo "valgrind: $t: clean (${secs} s)" ;;
    77) echo "valgrind: $t: skipped (${secs} s)" ;;
    99) echo "valgrind: $t: memcheck errors (${secs} s; $LOG/$t.log)"; rc=1 ;;
    124) echo "valgrind: $t: timed out after ${secs} s ($LOG/$t.log)"; rc=1 ;;
    *) echo "valgrind: $t: failed, exit $r (${secs} s; $LOG/$t.log)"; rc=1 ;;
    esac
done
exit $rc
