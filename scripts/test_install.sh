#!/bin/sh
# test_install.sh — the README's "outside the tree" instructions, done as
# written: make install into a temporary prefix, then the README's example
# (its "A model in C" code, which must be examples/sine/main.c) compiled by
# each of the README's `cc sine.c` lines through pkg-config, and run, with
# LD_LIBRARY_PATH as the README says for a prefix outside the loader's
# cache. The README and this test read the same lines, so they cannot drift
# apart. Where serve is built, bin/kiln-serve too (its --help), and a
# make install DESTDIR=... staged under that directory. Part of
# scripts/test.sh, in the default build; a few seconds.
#   scripts/test_install.sh BUILD_DIR [test name filters...]
# Runs when no filter is given or one is part of "install"; $MAKE is make.
# Last line: "N passed, N failed", as the test binary's.
set -u
build=$1
shift
make=${MAKE:-make}
if [ $# -gt 0 ]; then
    match=0
    for f in "$@"; do
        case install in *"$f"*) match=1 ;; esac
    done
    [ "$match" -eq 1 ] || { echo "0 passed, 0 failed"; exit 0; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix lib=$tmp/prefix/lib
passed=0 failed=0

# result NAME OK WHY : count one test; WHY is shown when it failed
result() {
    if [ "$2" -eq 1 ]; then
        echo "ok    install_$1"
        passed=$((passed + 1))
    else
        echo "FAIL  install_$1: $3"
        failed=$((failed + 1))
    fi
}

# the C block of the README's "A model in C" section
awk '/^## A model in C/ { inside = 1 } inside && /^```c$/ { grab = 1; next }
     grab && /^```$/ { exit } grab { print }' README.md >"$tmp/sine.c"
same=0
cmp -s "$tmp/sine.c" examples/sine/main.c && same=1
result readme_example_is_examples_sine "$same" "README.md's example differs from examples/sine/main.c"

ok=0
"$make" --no-print-directory -s install BUILD="$build" PREFIX="$prefix" >"$tmp/install.log" 2>&1 && ok=1
result make_install "$ok" "make install BUILD=$build PREFIX=$prefix failed: $(tail -n 5 "$tmp/install.log")"

# the server, where this build has one, as bin/kiln-serve: it runs from
# there and names itself; make install DESTDIR=... puts it under DESTDIR
if [ -x "$build/examples/serve" ]; then
    out=$("$prefix/bin/kiln-serve" --help 2>&1)
    ok=0
    printf '%s\n' "$out" | grep -q '^usage: kiln-serve ' && printf '%s\n' "$out" | grep -q -- '--model PATH' && ok=1
    result kiln_serve_help "$ok" "$prefix/bin/kiln-serve --help: $out"
    ok=0
    "$make" --no-print-directory -s install BUILD="$build" PREFIX=/usr/local DESTDIR="$tmp/dest" \
        >"$tmp/destdir.log" 2>&1 && [ -x "$tmp/dest/usr/local/bin/kiln-serve" ] &&
        [ -e "$tmp/dest/usr/local/lib/libkiln.a" ] && ok=1
    result destdir_kiln_serve "$ok" "make install DESTDIR=$tmp/dest PREFIX=/usr/local: $(tail -n 5 "$tmp/destdir.log";
        find "$tmp/dest" -type f | head -n 5)"
else
    echo "skip  install_kiln_serve: $build has no examples/serve (scripts/deps.sh serve installs what it needs)"
fi

# libkiln.so and libkiln.so.0 lead to one file whose SONAME is libkiln.so.0
ok=0
if [ -L "$lib/libkiln.so" ] && [ -L "$lib/libkiln.so.0" ] &&
    [ "$(readlink -f "$lib/libkiln.so")" = "$(readlink -f "$lib/libkiln.so.0")" ] &&
    readelf -d "$lib/libkiln.so.0" | grep -q 'SONAME.*\[libkiln\.so\.0\]'; then
    ok=1
fi
result soname_and_links "$ok" "$(ls -l "$lib" 2>&1 | tr '\n' ' ')"

# every `cc sine.c` line of the README, as written (without its comment)
grep '^cc sine\.c ' README.md | sed 's/ *#.*//' >"$tmp/lines"
for module in kiln kiln-static; do
    grep -q "pkg-config --cflags --libs $module)" "$tmp/lines" ||
        result "readme_builds_with_$module" 0 "README.md has no 'cc sine.c' line with pkg-config ... $module"
done
mkdir "$tmp/work"
cp "$tmp/sine.c" "$tmp/work/sine.c"
while read -r line; do
    module=$(printf '%s\n' "$line" | sed -n 's/.*pkg-config --cflags --libs \([a-z-]*\)).*/\1/p')
    name=readme_builds_with_${module:-unknown}
    rm -f "$tmp/work/sine"
    out=$(cd "$tmp/work" && PKG_CONFIG_PATH=$lib/pkgconfig sh -c "$line" 2>&1)
    if [ ! -x "$tmp/work/sine" ]; then
        result "$name" 0 "'$line' failed: $out"
        continue
    fi
    # linked to the shared library exactly when the line says kiln
    needs=0
    readelf -d "$tmp/work/sine" | grep -q 'NEEDED.*\[libkiln\.so\.0\]' && needs=1
    if [ "$module" = kiln ] && [ "$needs" -eq 0 ]; then
        result "$name" 0 "'$line' did not link libkiln.so.0"
        continue
    fi
    if [ "$module" != kiln ] && [ "$needs" -eq 1 ]; then
        result "$name" 0 "'$line' linked libkiln.so.0, not libkiln.a"
        continue
    fi
    out=$(LD_LIBRARY_PATH=$lib "$tmp/work/sine" 2>&1)
    ok=0
    printf '%s\n' "$out" | grep -q '^step 2000  loss' && ok=1
    result "$name" "$ok" "the program built by '$line' printed: $out"
done <"$tmp/lines"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
