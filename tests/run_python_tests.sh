#!/bin/sh
# test_python and test_ui: a pytest suite (python/tests: the Python binding;
# tests/serve: the web UI in headless chromium) against this build's
# libpatina.so and patina CLI (tests/CMakeLists.txt passes their paths in
# PATINA_LIB, PATINA_CLI, PATINA_VARIANT and PATINA_SAMPLES_DIR).
# The Python is $PATINA_PYTHON, else the first of /usr/bin/python3 and python3
# that imports numpy and pytest (scripts/bootstrap.sh installs Debian's
# python3-numpy and python3-pytest). Exit 77 (skipped, with the reason) when
# there is none, and in sanitizer builds: their libpatina.so needs the
# sanitizer's runtime loaded first, which python3 is not built with.
# Usage: run_python_tests.sh SOURCE_DIR TEST_DIR [PYTEST ARGS...]
set -u
src=$1
dir=$2
shift 2
if [ -n "${PATINA_SANITIZE:-}" ] && [ "$PATINA_SANITIZE" != OFF ]; then
    echo "$dir: skipped: a sanitizer build (PATINA_SANITIZE=$PATINA_SANITIZE) cannot be loaded into python3"
    exit 77
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
