#!/bin/sh
# The shared library exports exactly the functions that the public headers
# declare with PATINA_API: nothing internal leaks, nothing declared is missing.
# Usage: check_exports.sh LIBPATINA_SO INCLUDE_DIR
set -eu
lib=$1
inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Defined dynamic symbols of any kind (functions, data, weak, unique).
nm -D --defined-only "$lib" | awk 'NF == 3 {print $3}' | sed 's/@.*//' | sort -u >"$tmp/exported"
# Names declared after PATINA_API (declarations may span lines; comments and
# the macro's own header are skipped).
for h in "$inc"/patina/*.h; do [ "${h##*/}" = api.h ] || cat "$h"; done |
    perl -0777 -pe 's{/\*.*?\*/}{}gs' | tr '\n' ' ' | grep -oE 'PATINA_API [^;(]*\(' |
    sed -E 's/.*[^A-Za-z_0-9]([A-Za-z_][A-Za-z_0-9]*) *\($/\1/' | sort -u >"$tmp/declared"
nexp=$(wc -l <"$tmp/exported")
ndec=$(wc -l <"$tmp/declared")
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
    echo "check_exports: $lib exports $nexp symbols, the headers declare $ndec functions:"
    echo "  (- declared but not exported, + exported but not declared)"
    grep -E '^[-+][^-+]' "$tmp/diff" | sed 's/^/  /'
    exit 1
fi
echo "check_exports: $nexp exported symbols = $ndec PATINA_API declarations"
