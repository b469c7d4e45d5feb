#!/usr/bin/env bash
# The README's set-up on a truly fresh Debian 12: builds a minimal root with
# debootstrap (--variant=minbase bookworm), installs in it only what the
# README asks for first (make git ca-certificates), clones this checkout's
# HEAD into it with that git, and runs the README's two commands there as
# root with chroot: `make run`, then `make test`. Fails when either fails,
# so that an install step the project's own files lack cannot hide behind
# the packages a development machine happens to have. Between the two it
# checks what `make run` must not do: install the browser of the UI tests or
# the NATS server of the cluster's tests, leave the download cache open to
# others, write into the checkout; after `make test`, that the checkout is
# unchanged and the NATS server is installed (.venv-nats, scripts/bootstrap.sh).
#
#   scripts/fresh-debian.sh [--keep] [--dir DIR]
#     --dir DIR  where to build the root (must not exist; default: a new
#                folder under /var/tmp); about 3.2 GB when done
#     --keep     keep the root afterwards (`chroot DIR/root bash` to look);
#                by default it is deleted, also when a step fails
#
# Needs root (debootstrap, mount, chroot) and Debian's and PyPI's
# registries; installs debootstrap on this machine when it is missing. Runs
# in a mount and PID namespace of its own: proc, sysfs, /dev/pts, a tmpfs
# /dev/shm and a tmpfs /tmp are mounted in the root, which is bind-mounted
# onto itself (/ is then a mount point inside, as on a machine); on exit
# everything is unmounted and every process left in the root ends. The
# host's resolv.conf, its local CA certificates (/usr/local/share/
# ca-certificates) and apt's Acquire proxy and date-check settings are
# copied in: the network as this machine reaches it, nothing else.
# The logs of debootstrap and of apt-get are under DIR; the commands' own
# output is shown. About 11 minutes on a 2-core machine: debootstrap 2,
# make run 1 (with its packages and downloads), make test 8.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
keep=0
dir=
while [ $# -gt 0 ]; do
  case $1 in
  --keep) keep=1 ;;
  --dir) dir=${2:?--dir needs a folder}; shift ;;
  *) echo "usage: scripts/fresh-debian.sh [--keep] [--dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-debian: needs root (debootstrap, mount, chroot)" >&2; exit 1; }

# A mount and PID namespace of our own: no mount made here outlives the
# script, nor does any process started in the root.
if [ -z "${PATINA_FRESH_DEBIAN_NS:-}" ]; then
  args=()
  [ $keep = 1 ] && args+=(--keep)
  [ -n "$dir" ] && args+=(--dir "$dir")
  exec unshare --mount --pid --fork --propagation private env PATINA_FRESH_DEBIAN_NS=1 "$0" "${args[@]}"
fi

t0=$(date +%s)
say() { echo "fresh-debian [$(( $(date +%s) - t0 ))s]: $*"; }

if [ -z "$dir" ]; then
  dir=$(mktemp -d /var/tmp/patina-fresh.XXXXXX)
else
  [ ! -e "$dir" ] || { echo "fresh-debian: $dir exists; name a new folder" >&2; exit 2; }
  mkdir -p "$dir"
fi
dir=$(cd "$dir" && pwd)
root=$dir/root
mounted=()

cleanup() {
  rc=$?
  set +e
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"
  done
  if [ $keep = 1 ]; then
    say "kept the root: $root (chroot $root bash); logs in $dir"
  elif grep -q " ${dir}[/ ]" /proc/self/mounts; then
    say "something is still mounted under $dir; not deleting it" >&2
  else
    rm -rf "$dir"
    say "removed $dir"
  fi
  if [ $rc -eq 0 ]; then say "passed in $(( $(date +%s) - t0 )) s"; else say "FAILED (exit $rc)" >&2; fi
  exit $rc
}
trap cleanup EXIT
# a signal ends the run as a failure (without these, the EXIT trap saw the
# last command's status and a killed run said "passed")
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

quiet() {  # quiet LOG COMMAND...: the command's output into LOG, its tail shown if it fails
  local log=$1; shift
  if ! "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    say "failed: $* (its output: $log)" >&2
    return 1
  fi
}

if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on this machine (Debian's package)"
  export DEBIAN_FRONTEND=noninteractive
  for _ in 1 2 3 4 5 6; do   # another apt-get may hold the lists' lock for a while
    apt-get update -q >>"$dir/host-apt.log" 2>&1 && break
    sleep 20
  done
  quiet "$dir/host-apt.log" apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends debootstrap
fi

say "debootstrap --variant=minbase bookworm $root (log: $dir/debootstrap.log)"
quiet "$dir/debootstrap.log" debootstrap --variant=minbase bookworm "$root" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"}

# The network as this machine reaches it.
cp /etc/resolv.conf "$root/etc/resolv.conf"
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
apt-config dump | grep -E '^Acquire::(http|https|ftp)::Proxy |^Acquire::Check-(Valid-Until|Date) ' \
  >"$root/etc/apt/apt.conf.d/90host-network" || true

mnt() {  # mnt TARGET MOUNT-ARGS...
  mkdir -p "$1"
  local target=$1; shift
  mount "$@" "$target"
  mounted+=("$target")
}
mnt "$root" --bind "$root"
mnt "$root/proc" -t proc proc
mnt "$root/sys" -t sysfs sysfs
mnt "$root/dev/pts" --bind /dev/pts
mnt "$root/dev/shm" -t tmpfs -o mode=1777 shm
mnt "$root/tmp" -t tmpfs -o mode=1777,size=8g tmp

in_root() {  # in_root SCRIPT: bash -c SCRIPT in the root, as root, with a login's plain environment
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "set -euo pipefail; $1"
}

say "apt-get install make git ca-certificates (the README's first step; log: $dir/apt.log)"
quiet "$dir/apt.log" in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -q;
  apt-get install -y -q --no-install-recommends make git ca-certificates'
if compgen -G '/usr/local/share/ca-certificates/*' >/dev/null; then
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  quiet "$dir/apt.log" in_root 'update-ca-certificates'
fi

commit=$(git -C "$src" rev-parse HEAD)
say "git clone of $commit (this checkout's HEAD) into /root/patina"
git clone -q --mirror "$src" "$root/var/tmp/patina.git"
in_root "git clone -q /var/tmp/patina.git /root/patina && git -C /root/patina checkout -q --detach $commit"
rm -rf "$root/var/tmp/patina.git"

say "make run"
t=$(date +%s)
in_root 'cd /root/patina && make run'
say "make run passed in $(( $(date +%s) - t )) s"

# What make run must not have done (checked inside the root).
# shellcheck disable=SC2016
in_root '
  if dpkg-query -W -f="\${Status}" chromium 2>/dev/null | grep -q "install ok"; then
    echo "make run installed chromium (the UI tests need it, the demo does not)" >&2; exit 1; fi
  [ ! -e /root/patina/.venv-nats ] || { echo "make run installed the NATS server (the tests need it, the demo does not)" >&2; exit 1; }
  m=$(stat -c %a /root/.cache/patina/debs)
  [ "$m" = 700 ] || { echo "the sample download folder has mode $m, not 700" >&2; exit 1; }
  cd /root/patina
  [ -z "$(git status --porcelain)" ] || { echo "make run changed the checkout:" >&2; git status --short >&2; exit 1; }'

say "make test"
t=$(date +%s)
in_root 'cd /root/patina && make test'
say "make test passed in $(( $(date +%s) - t )) s"
# shellcheck disable=SC2016
in_root 'cd /root/patina &&
  [ -z "$(git status --porcelain)" ] || { echo "make test changed the checkout:" >&2; git status --short >&2; exit 1; }
  v=$(.venv-nats/bin/nats-server --version) && [ "$v" = "nats-server: v2.15.1" ] ||
    { echo "make test did not install nats-server 2.15.1 into .venv-nats" >&2; exit 1; }'
