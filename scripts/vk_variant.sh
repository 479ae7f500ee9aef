#!/bin/sh
# vk_variant.sh VARIANTS NAME OUT — write kernel NAME of the variants file
# (backends/vulkan/shaders/variants.txt) out as a compute shader OUT: its
# defines and includes, in the listed order, after common.glsl.
set -eu
line=$(awk -v n="$2" '$1 == n { print; exit }' "$1")
[ -n "$line" ] || { echo "vk_variant.sh: no kernel '$2' in $1" >&2; exit 1; }
{
    echo '#version 450'
    echo '#include "common.glsl"'
    echo "// $2: generated from $(basename "$1"); do not edit"
    for item in ${line#* }; do
        case "$item" in
            *.glsl) echo "#include \"$item\"" ;;
            *=*) echo "#define ${item%%=*} ${item#*=}" ;;
            *) echo "#define $item" ;;
        esac
    done
} >"$3.tmp"
mv "$3.tmp" "$3"
