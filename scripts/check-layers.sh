#!/usr/bin/env bash
# The layering of src/ (docs: ../shared/ARCHITECTURE.md "Layout"), checked
# from the #include lines of every .c, .h, .cu and .cuh file under src/.
# Lower layers never include higher ones:
#
#   algo < core < image < features < store < search < identify < table
#        < pipeline < (cli, serve)
#
#   - a directory may include its own files and any lower layer's;
#   - gpu/ is the CUDA side of features, search and identify: it may include
#     algo, core, image, features, search, identify and itself; of the
#     layers, features and the ones above it (not cli, serve) may include it;
#     core (and what is below it) never does;
#   - cli/ and serve/ include only public headers (include/patina/*) and
#     their own directory;
#   - public headers ("patina/...") may be included from anywhere;
#   - no relative parent paths ("../").
# A directory under src/ that is not listed here is an error (add it to
# LAYERS at its place). Exceptions are listed one by one in ALLOW with the
# reason.
#
# Usage: scripts/check-layers.sh [SRC_DIR]   (default: src/ of this checkout)
# Prints one line per forbidden include (file:line, the include, the rule)
# and exits 1; prints one OK line and exits 0 otherwise. Needs bash, find,
# awk.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-$here/src}
[ -d "$src" ] || { echo "check-layers: no directory '$src'" >&2; exit 2; }

# Rank of each layer (cli and serve share the top).
LAYERS='algo:0 core:1 image:2 features:3 store:4 search:5 identify:6 table:7 pipeline:8 cli:9 serve:9 cluster:10 gpu:side'

# "file include" pairs allowed against the rules, with the reason.
ALLOW='
cli/cmd_serve.c serve/serve.h
cli/cmd_cluster.c cluster/cmd.h
cli/cmd_index.c cluster/cmd.h
cli/cmd_search.c cluster/cluster.h
cli/cmd_identify.c cluster/cluster.h
serve/colls.c cluster/cluster.h
serve/cluster.c cluster/cluster.h
features/registry.c search/distance.h
'
# - cli/cmd_serve.c runs `patina serve`: the server is part of the program
#   (src/serve, not libpatina), and the CLI starts it through serve/serve.h.
# - cli/cmd_cluster.c, cmd_index.c, cmd_search.c, cmd_identify.c and
#   serve/colls.c, serve/cluster.c run the cluster's commands and --cluster: the cluster
#   (src/cluster, over libnats) is part of the program, not of libpatina;
#   it sits above cli and serve (its command entry points use cli's parser).
# - features/registry.c answers a family's distance name and its pair
#   distance through the distance table (pdist_get); the family table is
#   being reworked (capability flags, issue 26 part 1), which is where that
#   call should move above features/.

cd "$src"
mapfile -t files < <(find . -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) |
                     sed 's|^\./||' | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || { echo "check-layers: no sources under '$src'" >&2; exit 2; }
awk -v layers="$LAYERS" -v allow="$ALLOW" '
    BEGIN {
        n = split(layers, a, " ")
        for (i = 1; i <= n; i++) { split(a[i], kv, ":"); rank[kv[1]] = kv[2] }
        m = split(allow, b, "\n")
        for (i = 1; i <= m; i++) if (b[i] != "") ok[b[i]] = 1
        bad = 0; files = 0; incs = 0
    }
    FNR == 1 {
        files++
        d = FILENAME; sub(/\/.*/, "", d)
        if (FILENAME !~ /\//) d = ""
        if (!(d in rank)) {
            printf "src/%s: directory \"%s\" is not a layer (add it to LAYERS in scripts/check-layers.sh)\n", FILENAME, d
            bad++
        }
    }
    /^[ \t]*#[ \t]*include[ \t]*["<]/ {
        line = $0
        sub(/^[ \t]*#[ \t]*include[ \t]*/, "", line)
        q = substr(line, 1, 1)
        inc = substr(line, 2)
        if (q == "<") sub(/>.*/, "", inc); else sub(/".*/, "", inc)
        top = inc; sub(/\/.*/, "", top)
        if (inc !~ /\//) next                       # a file of its own directory (or a system header)
        if (inc ~ /(^|\/)\.\.\//) { why = "no relative parent paths" }
        else if (top == "patina") next              # public headers
        else if (!(top in rank)) next               # a system or library header (<sys/stat.h>, <cuda_runtime.h>)
        else if (top == d) next
        else if (!(d in rank)) next                 # reported above
        else {
            incs++
            why = ""
            if (d == "cli" || d == "serve")
                why = d " includes only public headers (include/patina) and its own directory"
            else if (d == "gpu") {
                if (top != "algo" && top != "core" && top != "image" && top != "features" && top != "search" && top != "identify")
                    why = "gpu may include algo, core, image, features, search and identify, not " top
            } else if (top == "gpu") {
                if (rank[d] + 0 < rank["features"] + 0) why = d " must not include gpu (only features and the layers above it do; the core'"'"'s device calls are declared in core/context.h)"
            } else if (rank[top] + 0 > rank[d] + 0)
                why = d " must not include " top " (lower layers never include higher ones: algo < core < image < features < store < search < identify < table < pipeline < cli, serve)"
            if (why == "") next
        }
        if ((FILENAME " " inc) in ok) next
        printf "src/%s:%d: #include \"%s\": %s\n", FILENAME, FNR, inc, why
        bad++
    }
    END {
        if (bad) { printf "check-layers: %d forbidden include(s)\n", bad; exit 1 }
        printf "check-layers: OK (%d files, %d includes across directories)\n", files, incs
    }' "${files[@]}"
