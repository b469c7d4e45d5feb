#!/usr/bin/env bash
# Checks deploy/ offline (no cluster, no Docker engine): the YAML of deploy/compose.yaml and
# deploy/k8s/ (yamllint, deploy/.yamllint), the Kubernetes manifests against the API's schemas
# (kubernetes-validate --strict: unknown fields are errors), the Compose file against the Compose
# specification (check-jsonschema --builtin-schema vendor.compose-spec), the NATS configurations
# with the pinned server itself (nats-server -t, when .venv-nats has it: scripts/bootstrap.sh
# nats), and that the files agree with each other (the Dockerfile's stages and the scripts it
# runs, the settings the cluster relies on). The three checkers come from PyPI, pinned, into a
# venv (.venv-deploy, gitignored; VENV overrides); installed once, then used offline.
# Exit 0 when all pass, 1 when one fails, 77 (skipped) when the checkers cannot be installed
# (offline); .ci/run runs it and counts 77 as a failure. CTest runs it as check_deploy.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$ROOT/.venv-deploy}
PINS=(yamllint==1.38.0 kubernetes-validate==1.37.0 check-jsonschema==0.39.0)
K8S_VERSION=1.33.0   # the Kubernetes API the manifests are checked against
cd "$ROOT"

have_pins() {
  [ -x "$VENV/bin/python" ] || return 1
  local p
  for p in "${PINS[@]}"; do
    [ "$("$VENV/bin/python" -m pip show "${p%%==*}" 2>/dev/null | sed -n 's/^Version: //p')" = "${p##*==}" ] || return 1
  done
}
if ! have_pins; then
  python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "check-deploy: skipped: python3-venv is missing (scripts/bootstrap.sh test)"; exit 77; }
  log=$(mktemp "${TMPDIR:-/tmp}/patina-check-deploy.XXXXXX")
  echo "check-deploy: installing ${PINS[*]} from PyPI into $VENV"
  if ! { [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"; } >"$log" 2>&1 ||
     ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q --timeout 20 --retries 2 "${PINS[@]}" >>"$log" 2>&1; then
    tail -n 5 "$log"
    echo "check-deploy: skipped: could not install the checkers from PyPI (offline?); pip's output: $log"
    exit 77
  fi
  rm -f "$log"
fi

fail=0
step() {  # step NAME COMMAND...: run it, say passed or FAILED
  local name=$1; shift
  if out=$("$@" 2>&1); then
    echo "check-deploy: $name: passed"
  else
    echo "$out" | grep -v '^INFO ' >&2 || true
    echo "check-deploy: $name: FAILED" >&2
    fail=1
  fi
}

step "yamllint (deploy/.yamllint)" "$VENV/bin/yamllint" --strict -c deploy/.yamllint deploy/compose.yaml deploy/k8s
step "kubernetes-validate --strict (API $K8S_VERSION)" \
  "$VENV/bin/kubernetes-validate" --strict -k "$K8S_VERSION" deploy/k8s/*.yaml
step "check-jsonschema vendor.compose-spec" \
  "$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec deploy/compose.yaml

# The NATS configurations, parsed by the server they are for.
nats=$ROOT/.venv-nats/bin/nats-server
if [ -x "$nats" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/patina-check-deploy.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  "$VENV/bin/python" - "$tmp/k8s-nats.conf" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open("deploy/k8s/nats.yaml")):
    if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "nats-config":
        open(sys.argv[1], "w").write(doc["data"]["nats.conf"])
PY
  step "nats-server -t deploy/compose/nats.conf" env NATS_SERVER_NAME=nats-1 "$nats" -c deploy/compose/nats.conf -t
  step "nats-server -t (deploy/k8s/nats.yaml's ConfigMap)" env NATS_SERVER_NAME=nats-0 "$nats" -c "$tmp/k8s-nats.conf" -t
else
  echo "check-deploy: the NATS configurations: not parsed (no $nats: scripts/bootstrap.sh nats)"
fi

# The files agree: what the images, the manifests and the cluster's design rely on.
step "deploy/ consistency" "$VENV/bin/python" - <<'PY'
import os, re, sys, yaml
errors = []
def need(cond, what):
    if not cond:
        errors.append(what)
docker = open("deploy/Dockerfile").read()
stages = set(re.findall(r"^FROM \S+ AS (\S+)$", docker, re.M))
need({"build", "patina", "nats"} <= stages, f"deploy/Dockerfile: stages {sorted(stages)}, want build, patina, nats")
for script in set(re.findall(r"\bscripts/[\w.-]+\.sh", docker)):
    need(os.access(script, os.X_OK), f"deploy/Dockerfile runs {script}, which is not an executable file")
for m in re.findall(r"--from=(\S+)", docker):
    need(m in stages, f"deploy/Dockerfile: COPY --from={m}: no such stage")
compose = yaml.safe_load(open("deploy/compose.yaml"))
svcs = compose["services"]
need(sum(1 for s in svcs if s.startswith("nats-")) == 3, "compose: 3 NATS servers")
need(sum(1 for s in svcs if s.startswith("shard-")) == 2, "compose: 2 shards")
need("frontend" in svcs, "compose: a front end")
for name, s in svcs.items():
    b = s.get("build") or {}
    if b:
        need(b.get("target") in stages, f"compose: {name} builds target {b.get('target')}, not a Dockerfile stage")
        need(os.path.samefile(os.path.join("deploy", b["context"]), "."), f"compose: {name}: context is not the repository root")
    for v in s.get("volumes") or []:
        src = v.split(":")[0]
        if src.startswith("./"):
            need(os.path.exists(os.path.join("deploy", src)), f"compose: {name} mounts {src}, which is missing")
    cmd = s.get("command") or []
    if cmd and cmd[0] == "shard":
        need("--name" in cmd and "--metrics-port" in cmd, f"compose: {name}: shard without --name or --metrics-port")
        grace = int(str(s.get("stop_grace_period", "10s")).rstrip("s"))
        need("--drain-timeout" in cmd and int(cmd[cmd.index("--drain-timeout") + 1]) + 20 <= grace,
             f"compose: {name}: --drain-timeout at least 20 s under stop_grace_period ({grace} s)")
need("sync_interval: always" in open("deploy/compose/nats.conf").read(), "compose/nats.conf: sync_interval: always")
docs = {}
for f in sorted(os.listdir("deploy/k8s")):
    for d in yaml.safe_load_all(open(os.path.join("deploy/k8s", f))):
        if d:
            docs[(d["kind"], d["metadata"]["name"])] = d
conf = docs[("ConfigMap", "nats-config")]["data"]["nats.conf"]
need(re.search(r"^\s*sync_interval: always$", conf, re.M), "k8s nats.conf: sync_interval: always")
nats = docs[("StatefulSet", "nats")]["spec"]
need(nats["replicas"] == 3, "k8s: 3 NATS servers")
need(docs[("Service", nats["serviceName"])]["spec"].get("clusterIP") == "None", "k8s: NATS's service is headless")
for n in range(nats["replicas"]):
    need(f"nats-{n}.{nats['serviceName']}:6222" in conf, f"k8s nats.conf: a route to nats-{n}")
shard = docs[("StatefulSet", "shard")]["spec"]["template"]["spec"]["containers"][0]
args = shard["args"]
need(args[:1] == ["shard"] and "--cluster" in args and args[args.index("--name") + 1] == "$(POD_NAME)",
     "k8s: shard args: shard COLL --cluster ... --name $(POD_NAME)")
port = int(args[args.index("--metrics-port") + 1])
need(shard["readinessProbe"]["httpGet"]["path"] == "/ready", "k8s: the shard's readiness is /ready")
need(shard["resources"]["limits"].get("nvidia.com/gpu") == 1, "k8s: a shard asks for one GPU")
need(any(p["containerPort"] == port for p in shard["ports"]), "k8s: the shard's metrics port is declared")
grace = docs[("StatefulSet", "shard")]["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
need("--drain-timeout" in args and int(args[args.index("--drain-timeout") + 1]) + 20 <= grace,
     f"k8s: the shard's --drain-timeout at least 20 s under terminationGracePeriodSeconds ({grace})")
fe = docs[("Deployment", "frontend")]["spec"]["template"]["spec"]["containers"][0]["args"]
need(fe[:1] == ["serve"] and "--cluster" in fe, "k8s: front end args: serve COLL --cluster ...")
pdbs = [d for (k, _), d in docs.items() if k == "PodDisruptionBudget"]
for app in ("nats", "patina-shard", "patina-frontend"):
    need(any(p["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name") == app for p in pdbs),
         f"k8s: a PodDisruptionBudget for {app}")
for e in errors:
    print("deploy/:", e)
sys.exit(1 if errors else 0)
PY

if [ $fail -ne 0 ]; then
  echo "check-deploy: FAILED" >&2
  exit 1
fi
echo "check-deploy: deploy/ passed every check"
