#!/bin/sh
# house_check.sh — hold docs/house.json (the house in layers, docs/house.md)
# against the code's real dependencies, as make test's "house" stage.
#
# A file depends on another when it includes it (#include "..." resolved
# as the Makefile's -I paths resolve it) or when its object calls or reads
# a name that the other's object alone defines (nm over BUILD/obj). Each
# file belongs to the part whose path is the longest prefix of its own.
# Two checks, one line each:
#   never A -> B   no file of part A depends on a file of part B;
#   loops          no loop of dependencies between parts, except between
#                  two parts the whiteboard joins by arrows both ways
#                  (Core and Ops: autodiff builds backward nodes).
# A failure names the files and the names taken. The last line is
# "N passed, N failed".
# Usage: scripts/house_check.sh BUILD_DIR   (after make: the objects are read)
set -u
build=${1:?usage: house_check.sh BUILD_DIR}
house=docs/house.json
command -v jq >/dev/null 2>&1 || { echo "house_check: needs jq (scripts/deps.sh build)"; echo "0 passed, 1 failed"; exit 1; }
[ -r "$house" ] || { echo "house_check: no $house"; echo "0 passed, 1 failed"; exit 1; }
[ -d "$build/obj" ] || { echo "house_check: no objects in $build/obj (run make first)"; echo "0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

jq -r '.parts | to_entries[] | .key as $k | .value.is[] | "\($k) \(.)"' "$house" >"$tmp/parts"
jq -r '.never[] | "\(.[0]) \(.[1]) \(.[2] // "")"' "$house" >"$tmp/never"
jq -r '.arrows[] | "\(.[0]) \(.[1])"' "$house" >"$tmp/arrows"
dirs=$(awk '{ print $2 }' "$tmp/parts" | sort -u)

# include edges: "from to -" (the file a quoted include names, as the compiler
# finds it: beside the includer, then the -I folders)
for d in $dirs; do
    [ -d "$d" ] && find "$d" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)
done | sort -u >"$tmp/files"
while read -r f; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
        for base in "$(dirname "$f")" include core models examples/common backends/cpu backends/cuda backends/vulkan; do
            if [ -f "$base/$inc" ]; then
                echo "$f $(realpath -m --relative-to=. "$base/$inc") -"
                break
            fi
        done
    done
done <"$tmp/files" >"$tmp/edges"

# call edges: "from to name", from the objects' defined and undefined names
find "$build/obj" -name '*.o' | while read -r o; do
    rel=${o#"$build/obj/"}
    src=${rel%.o}
    for ext in c cu; do
        [ -f "$src.$ext" ] && echo "$o $src.$ext" && break
    done
done >"$tmp/objs"
while read -r o src; do
    nm --defined-only "$o" 2>/dev/null | awk -v s="$src" 'NF == 3 && $2 ~ /[A-Z]/ { print "D", $3, s }'
    nm -u "$o" 2>/dev/null | awk -v s="$src" '{ print "U", $NF, s }'
done <"$tmp/objs" >"$tmp/syms"
awk '$1 == "D" { n[$2]++; def[$2] = $3 } $1 == "U" { use[NR] = $2 " " $3 }
     END { for (i in use) { split(use[i], a, " "); if (n[a[1]] == 1) print a[2], def[a[1]], a[1] } }' \
    "$tmp/syms" >>"$tmp/edges"

# each edge between two parts: "PartA PartB fileA fileB name"
awk 'FNR == NR { part[$2] = $1; next }
     function of(f,    p, best) { best = ""
         for (p in part) if (index(f, p) == 1 && length(p) > length(best)) best = p
         return best == "" ? "" : part[best] }
     { a = of($1); b = of($2); if (a != "" && b != "" && a != b) print a, b, $1, $2, $3 }' \
    "$tmp/parts" "$tmp/edges" | sort -u >"$tmp/cross"

passed=0 failed=0
# never A -> B
while read -r a b why; do
    hits=$(awk -v a="$a" -v b="$b" '$1 == a && $2 == b {
               k = $3 " -> " $4; if (!(k in seen)) { order[++n] = k; seen[k] = "" }
               if ($5 != "-") seen[k] = seen[k] (seen[k] == "" ? "" : ", ") $5 }
           END { for (i = 1; i <= n; i++) print "    " order[i] (seen[order[i]] == "" ? "" : " (" seen[order[i]] ")") }' "$tmp/cross")
    if [ -z "$hits" ]; then
        echo "ok    never $a -> $b"
        passed=$((passed + 1))
    else
        echo "FAIL  never $a -> $b ($why):"
        printf '%s\n' "$hits" | head -n 20
        failed=$((failed + 1))
    fi
done <"$tmp/never"

# loops: the parts' graph, closed transitively; a pair that reaches each
# other is a loop unless the whiteboard draws arrows both ways between them
loops=$(awk 'FNR == NR { both[$1 " " $2] = 1; next }
     { e[$1 " " $2] = 1; p[$1]; p[$2] }
     END {
         for (k in p) for (i in p) for (j in p)
             if (((i " " k) in e) && ((k " " j) in e)) e[i " " j] = 1
         for (i in p) for (j in p)
             if (i < j && ((i " " j) in e) && ((j " " i) in e) && !(((i " " j) in both) && ((j " " i) in both)))
                 print "    " i " and " j " reach each other"
     }' "$tmp/arrows" "$tmp/cross" | sort)
if [ -z "$loops" ]; then
    echo "ok    no loop between parts but Core and Ops"
    passed=$((passed + 1))
else
    echo "FAIL  loops between parts (each part's dependencies on others: docs/house.md):"
    printf '%s\n' "$loops"
    awk '{ print "      " $1 " -> " $2 }' "$tmp/cross" | sort | uniq -c | sort -rn | head -n 30
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
