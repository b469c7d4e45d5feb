#!/bin/sh
# test_python and test_ui: a pytest suite (python/tests: the Python binding;
# tests/serve: the web UI in headless chromium) against this build's
# libpatina.so and patina CLI (tests/CMakeLists.txt passes their paths in
# PATINA_LIB, PATINA_CLI, PATINA_VARIANT and PATINA_SAMPLES_DIR).
# The Python is $PATINA_PYTHON, else the first of /usr/bin/python3 and python3
# that imports numpy and pytest (scripts/bootstrap.sh installs Debian's
# python3-numpy and python3-pytest). Exit 77 (skipped, with the reason) when
# there is none.
# In an AddressSanitizer build (PATINA_SANITIZE ON, or a list with address) the ASan
# runtime of the build's compiler ($PATINA_CC) is preloaded, python3 uses
# plain malloc (PYTHONMALLOC=malloc) and leak checking is off (the
# interpreter keeps memory to its end by design; the C tests check leaks):
# the binding's calls then run under ASan and UBSan. A ThreadSanitizer or
# UBSan-only build, or a compiler whose ASan runtime is not libasan.so,
# skips (77).
# Usage: run_python_tests.sh SOURCE_DIR TEST_DIR [PYTEST ARGS...]
set -u
src=$1
dir=$2
shift 2
if [ -n "${PATINA_SANITIZE:-}" ] && [ "$PATINA_SANITIZE" != OFF ]; then
    case $PATINA_SANITIZE in
    ON|*address*) rt=$("${PATINA_CC:-cc}" -print-file-name=libasan.so 2>/dev/null) ;;
    *) rt= ;;
    esac
    if [ -z "$rt" ] || [ ! -f "$rt" ]; then
        echo "$dir: skipped: a PATINA_SANITIZE=$PATINA_SANITIZE build needs its sanitizer runtime preloaded" \
             "into python3 (done for ASan builds with gcc's libasan.so only)"
        exit 77
    fi
    export LD_PRELOAD="$rt${LD_PRELOAD:+ $LD_PRELOAD}" PYTHONMALLOC=malloc
    export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
py=
for cand in ${PATINA_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import numpy, pytest' >/dev/null 2>&1; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "$dir: skipped: no python3 with numpy and pytest (apt-get install python3-numpy python3-pytest," \
         "or set PATINA_PYTHON)"
    exit 77
fi
# No bytecode or cache files in the source tree.
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -p no:cacheprovider -ra -q "$src/$dir" "$@"
