#!/bin/sh
# Stages wrk (the HTTP load generator of bench/serve/run.sh) for a machine
# that lacks it, such as the GPU machine: the Debian binary and the shared
# libraries it needs beyond glibc (LuaJIT, OpenSSL) are copied into
# .carry/wrk/, with a wrapper .carry/wrk/wrk that sets LD_LIBRARY_PATH.
# glibc itself is not copied: the other machine's must be as new as this
# one's (2.36, Debian 12); `.carry/wrk/wrk --version` there says whether it
# runs.
#   scripts/stage-wrk.sh            HERE: stage (installs wrk with apt-get if missing)
#   then, ON THE GPU MACHINE:       WRK=.carry/wrk/wrk bench/serve/run.sh --gpu build-gpu 600
# (carry .carry/wrk and the GPU build, as scripts/device.sh does for the library)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/.carry/wrk
if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y -q wrk; else sudo apt-get install -y -q wrk; fi
fi
rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$(command -v wrk)" "$dest/wrk.bin"
# every library but the C runtime's own (libc, libm, libpthread, libdl, the loader)
ldd "$dest/wrk.bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
cat >"$dest/wrk" <<'SH'
#!/bin/sh
# wrk staged by scripts/stage-wrk.sh: the binary with its own libraries.
d=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/wrk.bin" "$@"
SH
chmod +x "$dest/wrk"
echo "stage-wrk: $dest ($(du -sh "$dest" | cut -f1)): $(ls "$dest/lib" | tr '\n' ' ')"
"$dest/wrk" --version 2>&1 | head -1 || true
