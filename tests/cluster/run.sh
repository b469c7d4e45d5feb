#!/bin/sh
# test_cluster: the pytest suite of tests/cluster (the NATS harness natsctl.py and the cluster's
# fault scenarios) with the CLI in $PATINA_CLI (tests/CMakeLists.txt passes this build's).
# The server is .venv-nats/bin/nats-server (scripts/bootstrap.sh nats) or $PATINA_NATS_SERVER:
# without it the whole suite is skipped (exit 77, saying why). The tests talk to JetStream with
# nats-py (pinned below), installed from PyPI into .venv-cluster (gitignored; a venv that sees
# Debian's python3-pytest); offline, the tests that need it skip and say so. The fault scenarios
# skip, saying why, while the CLI has no cluster commands.
# Usage: run.sh SOURCE_DIR [PYTEST ARGS...]
set -u
src=$1
shift
NATS_PY="nats-py==2.16.0"
server=${PATINA_NATS_SERVER:-$src/.venv-nats/bin/nats-server}
if [ ! -x "$server" ]; then
    echo "test_cluster: skipped: no NATS server at $server (scripts/bootstrap.sh nats installs it)"
    exit 77
fi
export PATINA_NATS_SERVER="$server"
base=
for cand in ${PATINA_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import pytest' >/dev/null 2>&1; then
        base=$cand
        break
    fi
done
if [ -z "$base" ]; then
    echo "test_cluster: skipped: no python3 with pytest (apt-get install python3-pytest, or set PATINA_PYTHON)"
    exit 77
fi
py=$base
venv=${PATINA_CLUSTER_VENV:-$src/.venv-cluster}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import nats, pytest' 2>/dev/null; then
    py=$venv/bin/python
elif "$base" -c 'import venv, ensurepip' 2>/dev/null &&
     { [ -x "$venv/bin/python" ] || "$base" -m venv --system-site-packages "$venv"; } &&
     PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q --timeout 20 --retries 1 "$NATS_PY" >/dev/null 2>&1 &&
     "$venv/bin/python" -c 'import nats, pytest' 2>/dev/null; then
    py=$venv/bin/python
else
    echo "test_cluster: could not install $NATS_PY into $venv (offline?): the tests that need it skip"
fi
export PYTHONDONTWRITEBYTECODE=1
# only the harness and the fault scenarios: test_cluster_basic, _writes, _status and _ingest are CTest
# tests of their own (run here too, they ran twice, side by side under ctest -j, for nothing)
exec "$py" -m pytest -p no:cacheprovider -ra -q "$src/tests/cluster/test_natsctl.py" \
    "$src/tests/cluster/test_cluster_faults.py" "$@"
