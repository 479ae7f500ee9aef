#!/bin/sh
# isa_check.sh — every object of the library holds only instructions of the
# level that selects it at run time (backends/cpu/cpu_features.h): a file
# named *_<level>.c is compiled with that level's flags (Makefile) and run
# where kiln__cpu_<level>() holds; a file without such a suffix is built for
# the architecture's baseline and runs everywhere. The compiler may emit any
# instruction its flags allow, so this reads what it emitted (objdump -d) and
# names the object, function and instruction of each that is above its level:
#   baseline x86-64   no VEX/EVEX/XOP encoding, no ymm/zmm/mask/tile register
#   _avx2             AVX2, FMA, F16C (VEX): no EVEX, zmm, mask registers,
#                     nor the VEX vpdpbusd/vpdpwssd of AVX-VNNI
#   _avxvnni          _avx2 and AVX-VNNI's VEX vpdp*
#   _avx512           AVX-512 F/BW/VL/DQ: no VNNI, VBMI, GFNI, BF16, tiles
#   _avx512vnni       _avx512 and EVEX vpdp* (not the VEX form: Zen 4 lacks it)
#   _vbmi             _avx512vnni, VBMI (vpermb, vpermt2b, vpermi2b,
#                     vpmultishiftqb) and GFNI (gf2p8*)
#   _avx512bf16       _avx512 and vdpbf16ps, vcvtne2ps2bf16, vcvtneps2bf16
#   _amx              _avx512bf16 and the tile instructions
#   baseline, _neon   ARMv8-A with Advanced SIMD: no sdot/udot
#   _neondot          and sdot/udot (ARMv8.2 dot product)
# Extensions no level has (BMI, IFMA, VBMI2, BITALG, VPOPCNTDQ, CD, FP16,
# AVX-NE-CONVERT, AVX-VNNI-INT8, XOP, SVE, i8mm, ...) fail anywhere.
#
#   scripts/isa_check.sh BUILD_DIR     the objects linked into BUILD_DIR/libkiln.a
#                                      (BUILD_DIR/libkiln.members), and
#                                      libkiln_dist.a's: what ships
#   scripts/isa_check.sh FILE...       these objects or archives
#   scripts/isa_check.sh --self-test   the checker against small objects
#                                      compiled on the fly, each with a known
#                                      fault (or none), for x86-64 and, where
#                                      the cross compiler is installed, ARM64
# Each object is a test: "ok OBJECT", or "FAIL OBJECT: function: instruction
# (why)" lines; the last line is "N passed, N failed", as the test binary's.
set -u

# objdump for FILE's architecture (x86-64, or aarch64 with the cross tools)
objdump_for() {
    if command -v aarch64-linux-gnu-objdump >/dev/null 2>&1 &&
        aarch64-linux-gnu-objdump -f "$1" 2>/dev/null | grep -q 'file format elf64-littleaarch64'; then
        echo aarch64-linux-gnu-objdump
    else
        echo objdump
    fi
}

# check FILE...: objects or archives (one architecture); one test per
# object, "ok NAME" or its faults and "FAIL NAME"; adds to passed / failed
check() {
    od=$(objdump_for "$1")
    if ! dis=$("$od" -d --insn-width=16 "$@" 2>"$tmp/objdump.err") || [ -s "$tmp/objdump.err" ]; then
        echo "FAIL $*: $od failed: $(head -n 3 "$tmp/objdump.err")"
        failed=$((failed + 1))
        return
    fi
    out=$(printf '%s\n' "$dis" | awk '
    # one line per function, mnemonic and reason (the first such instruction)
    function fault(why) {
        bad++
        if ((fn, mn, why) in seen) return
        seen[fn, mn, why] = 1
        if (++shown <= 20) printf "FAIL %s: %s: %s (%s)\n", obj, fn, insn, why
    }
    function done_obj() {
        if (obj == "") return
        if (bad) {
            printf "FAIL %s: %d instructions above its level (%s)\n", obj, bad, level
            nfail++
        } else {
            printf "ok %s (%s)\n", obj, level
            npass++
        }
    }
    # a new object: its level from its name, what that level may hold
    function start(name) {
        done_obj()
        obj = archive != "" ? archive "(" name ")" : name
        level = name
        sub(/^.*\//, "", level); sub(/\.o$/, "", level); sub(/^.*_/, "", level)
        if (level !~ /^(avx2|avxvnni|avx512|avx512vnni|vbmi|avx512bf16|amx|neon|neondot)$/) level = "baseline"
        bad = shown = 0; fn = ""
        split("", seen)
        vex = level ~ /^(avx2|avxvnni|avx512|avx512vnni|vbmi|avx512bf16|amx)$/
        evex = level ~ /^(avx512|avx512vnni|vbmi|avx512bf16|amx)$/
        ok["avxvnni"] = level == "avxvnni"
        ok["avx512vnni"] = level ~ /^(avx512vnni|vbmi)$/
        ok["vbmi"] = ok["gfni"] = level == "vbmi"
        ok["bf16"] = level ~ /^(avx512bf16|amx)$/
        ok["amx"] = level == "amx"
        ok["dotprod"] = level == "neondot"
    }
    function hex(h) { return index("0123456789abcdef", substr(h, 1, 1)) * 16 + index("0123456789abcdef", substr(h, 2, 1)) - 17 }
    BEGIN {
        never = "^(andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx" \
                "|vpmadd52[lh]uq|vpcompress[bw]|vpexpand[bw]|vpshl?dv?[wdq]|vpshrdv?[wdq]" \
                "|vpopcnt[bwdq]|vpshufbitqmb|vpconflict[dq]|vplzcnt[dq]|vpbroadcastm[bw]2[dq]" \
                "|vp2intersect[dq]|vpdpb(ss|su|uu)ds?|vpdpw(su|us|uu)ds?|vbcstne.*|vcvtne[eo].*" \
                "|vexp2p[sd]|vrcp28.*|vrsqrt28.*|v4f.*|vp4dpwssds?|v(gather|scatter)pf.*)$"
    }
    /^In archive / { archive = $3; sub(/:$/, "", archive); sub(/^.*\//, "", archive); next }
    /:[ \t]+file format / { x86 = $0 !~ /aarch64/; name = $1; sub(/:$/, "", name); start(name); next }
    /^[0-9a-f]+ <.*>:$/ { fn = $2; sub(/^</, "", fn); sub(/>:$/, "", fn); next }
    /^ *[0-9a-f]+:\t/ {
        n = split($0, f, "\t")
        if (n < 3) next
        insn = f[3]
        for (i = 4; i <= n; i++) insn = insn " " f[i]
        sub(/^ +/, "", insn); sub(/ +$/, "", insn)
        m = split(insn, w, /[ \t]+/)
        mn = ""
        for (i = 1; i <= m; i++) {
            if (w[i] ~ /^\{(vex|vex3|evex|disp8|disp32|load|store)\}$/) continue
            if (w[i] ~ /^(lock|rep|repz|repnz|repe|repne|data16|addr32|cs|ds|es|ss|fs|gs|notrack|bnd|xacquire|xrelease|rex(\.[WRXB]+)?)$/) continue
            mn = w[i]; break
        }
        if (mn == "") next
        if (!x86) {
            if (mn ~ /^[su]dot$/) { if (!ok["dotprod"]) fault("sdot/udot: ARMv8.2 dot product, only in _neondot objects") }
            else if (mn ~ /^(usdot|sudot|[su]mmla|usmmla|bfdot|bfmmla|bfmlal[bt]|bfcvtn?2?)$/) fault("i8mm/bf16: no level has it")
            else if (insn ~ /[ ,{\[]z[0-9]+\.[bhsdq]|[ ,]p[0-9]+(\/|\.)/) fault("SVE: no level has it")
            next
        }
        # the encoding, from the bytes: legacy prefixes, then REX, then
        # c4/c5 (VEX), 62 (EVEX) or 8f with a map select >= 8 (XOP)
        nb = split(f[2], b, " ")
        for (i = 1; i <= nb && b[i] ~ /^(26|2e|36|3e|64|65|66|67|f0|f2|f3)$/; i++);
        if (i <= nb && b[i] ~ /^4[0-9a-f]$/) i++
        enc = "legacy"
        if (b[i] == "c4" || b[i] == "c5") enc = "vex"
        else if (b[i] == "62") enc = "evex"
        else if (b[i] == "8f" && i < nb && hex(b[i + 1]) % 32 >= 8) enc = "xop"
        if (mn ~ never) fault("an extension no level has")
        else if (enc == "xop") fault("XOP: no level has it")
        else if (mn ~ /^(tdp.*|tile.*|ldtilecfg|sttilecfg|tcmm.*)$/ || insn ~ /%tmm/) {
            if (!ok["amx"]) fault("AMX tiles: only in _amx objects")
        } else if (mn ~ /^v?gf2p8(affine(inv)?qb|mulb)$/) {
            if (!ok["gfni"]) fault("GFNI: only in _vbmi objects")
        } else if (mn ~ /^vpdp(bus|wss)ds?$/) {
            if (enc == "vex" && !ok["avxvnni"]) fault("VEX vpdp*: AVX-VNNI, only in _avxvnni objects: Zen 4 lacks it")
            else if (enc == "evex" && !ok["avx512vnni"]) fault("EVEX vpdp*: AVX512-VNNI, only in _avx512vnni and _vbmi objects")
        } else if (mn ~ /^(vpermb|vpermt2b|vpermi2b|vpmultishiftqb)$/) {
            if (!ok["vbmi"]) fault("AVX512-VBMI: only in _vbmi objects")
        } else if (mn ~ /^(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)$/) {
            if (enc == "vex") fault("VEX vcvtneps2bf16: AVX-NE-CONVERT, no level has it")
            else if (!ok["bf16"]) fault("AVX512-BF16: only in _avx512bf16 and _amx objects")
        } else if (mn ~ /^v.*(ph|sh)$/ && mn !~ /^(vcvtph2ps|vcvtps2ph)$/) fault("AVX512-FP16: no level has it")
        else if (enc == "evex" && !evex) fault("EVEX encoding: AVX-512, not at this level")
        else if (enc == "vex" && !vex) fault("VEX encoding: AVX, not in a baseline object")
        else if (insn ~ /%zmm/ && !evex) fault("zmm register: AVX-512, not at this level")
        else if (insn ~ /%k[0-7]/ && !evex) fault("mask register: AVX-512, not at this level")
        else if (insn ~ /%ymm/ && !vex) fault("ymm register: AVX, not in a baseline object")
    }
    END { done_obj(); printf "counts %d %d\n", npass, nfail }')
    printf '%s\n' "$out" | grep -v '^counts '
    set -- $(printf '%s\n' "$out" | sed -n 's/^counts //p')
    passed=$((passed + ${1:-0})) failed=$((failed + ${2:-1}))
}

# expect NAME WANT CC FLAGS FILE SOURCE: compile SOURCE as FILE with FLAGS;
# the checker must pass it (WANT ok) or fail it with a message matching WANT
expect() {
    name=$1 want=$2 cc=$3 flags=$4 file=$5 src=$6
    printf '%s\n' "$src" >"$tmp/$file.c"
    # shellcheck disable=SC2086
    if ! "$cc" -O2 -c $flags "$tmp/$file.c" -o "$tmp/$file.o" 2>"$tmp/cc.log"; then
        echo "FAIL self-test $name: $cc $flags could not compile it: $(head -n 3 "$tmp/cc.log")"
        failed=$((failed + 1))
        return
    fi
    out=$(passed=0 failed=0; check "$tmp/$file.o"; exit "$failed")
    st=$?
    if [ "$want" = ok ] && [ $st -eq 0 ]; then
        echo "ok self-test $name"
        passed=$((passed + 1))
    elif [ "$want" != ok ] && [ $st -ne 0 ] && printf '%s\n' "$out" | grep -q -- "$want"; then
        echo "ok self-test $name (caught: $(printf '%s\n' "$out" | head -n 1 | sed 's/^FAIL [^:]*: //'))"
        passed=$((passed + 1))
    else
        echo "FAIL self-test $name: expected ${want}, the checker said: ${out:-nothing}"
        failed=$((failed + 1))
    fi
}

self_test() {
    cc=${CC:-cc}
    avx2="-mavx2 -mfma -mf16c"
    avx512="$avx2 -mavx512f -mavx512bw -mavx512vl -mavx512dq"
    hdr='#include <immintrin.h>'
    dpb256="$hdr
__m256i f(__m256i a, __m256i b, __m256i c) { return _mm256_dpbusd_epi32(a, b, c); }"
    # the Zen 4 crash: AVX512-VNNI dispatch, flags that also allow AVX-VNNI
    expect vex-vpdpbusd-in-avx512vnni "VEX vpdp" "$cc" "$avx512 -mavx512vnni -mavxvnni" k_avx512vnni "$dpb256"
    expect evex-vpdpbusd-in-avx512vnni ok "$cc" "$avx512 -mavx512vnni" k_avx512vnni "$dpb256"
    expect vex-vpdpbusd-in-avxvnni ok "$cc" "$avx2 -mavxvnni" k_avxvnni "$dpb256"
    expect vpdpbusd-in-avx512 "vpdp" "$cc" "$avx512 -mavx512vnni" k_avx512 "$dpb256"
    expect vpdpbusd-in-avx2 "VEX vpdp" "$cc" "$avx2 -mavxvnni" k_avx2 "$dpb256"
    expect zmm-in-avx2 "EVEX encoding" "$cc" "$avx512" k_avx2 "$hdr
__m512 f(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }"
    expect mask-in-avxvnni "mask register" "$cc" "$avx512 -mavxvnni" k_avxvnni "$hdr
unsigned f(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }"
    expect ymm-in-baseline "VEX encoding" "$cc" "" k "$hdr
__attribute__((target(\"avx2\"))) void f(float *p) { _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8))); }"
    expect sse2-in-baseline ok "$cc" "" k "$hdr
void f(float *p) { _mm_storeu_ps(p, _mm_add_ps(_mm_loadu_ps(p), _mm_loadu_ps(p + 4))); }"
    vbmi="$hdr
__m512i f(__m512i a, __m512i i, __m512i b) { return _mm512_permutex2var_epi8(a, i, b); }"
    expect vbmi-in-avx512vnni "AVX512-VBMI" "$cc" "$avx512 -mavx512vnni -mavx512vbmi" k_avx512vnni "$vbmi"
    expect vbmi-in-vbmi ok "$cc" "$avx512 -mavx512vnni -mavx512vbmi -mgfni" k_vbmi "$vbmi"
    expect gfni-in-avx512 "GFNI" "$cc" "$avx512 -mgfni" k_avx512 "$hdr
__m512i f(__m512i a, __m512i m) { return _mm512_gf2p8affine_epi64_epi8(a, m, 0); }"
    bf16="$hdr
__m512 f(__m512 a, __m512bh b, __m512bh c) { return _mm512_dpbf16_ps(a, b, c); }"
    expect bf16-in-avx512vnni "AVX512-BF16" "$cc" "$avx512 -mavx512vnni -mavx512bf16" k_avx512vnni "$bf16"
    expect bf16-in-avx512bf16 ok "$cc" "$avx512 -mavx512bf16" k_avx512bf16 "$bf16"
    tile="$hdr
void f(void *c, const void *a, const void *b) { _tile_loadd(1, a, 64); _tile_loadd(2, b, 64); _tile_dpbssd(0, 1, 2); _tile_stored(0, c, 64); }"
    expect tile-in-avx512bf16 "AMX tiles" "$cc" "$avx512 -mavx512bf16 -mamx-tile -mamx-int8" k_avx512bf16 "$tile"
    expect tile-in-amx ok "$cc" "$avx512 -mavx512bf16 -mamx-tile -mamx-bf16 -mamx-int8" k_amx "$tile"
    expect bmi-in-avx2 "no level has" "$cc" "$avx2 -mbmi2" k_avx2 "unsigned long f(unsigned long a, unsigned long b) { return a << (b & 63); }"
    acc=aarch64-linux-gnu-gcc
    if command -v "$acc" >/dev/null 2>&1; then
        sdot='#include <arm_neon.h>
int32x4_t f(int32x4_t a, int8x16_t b, int8x16_t c) { return vdotq_s32(a, b, c); }'
        expect sdot-in-neon "sdot/udot" "$acc" "-march=armv8.2-a+dotprod" k_neon "$sdot"
        expect sdot-in-baseline "sdot/udot" "$acc" "-march=armv8.2-a+dotprod" k "$sdot"
        expect sdot-in-neondot ok "$acc" "-march=armv8.2-a+dotprod" k_neondot "$sdot"
    else
        echo "(self-test: no aarch64-linux-gnu-gcc, the ARM64 cases not run)"
    fi
}

if [ $# -eq 0 ]; then
    echo "usage: $0 BUILD_DIR | FILE... | --self-test" >&2
    exit 2
fi
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$1" = --self-test ]; then
    self_test
elif [ $# -eq 1 ] && [ -d "$1" ]; then
    # what ships (not stale objects of renamed files): the objects linked
    # into libkiln.a's one object, as the Makefile listed them, and
    # libkiln_dist.a's members
    if [ ! -r "$1/libkiln.a" ] || [ ! -r "$1/libkiln.members" ]; then
        echo "FAIL $1: no libkiln.a and libkiln.members there"
        failed=1
    else
        check $(sed "s|^|$1/|" "$1/libkiln.members")
        [ -r "$1/libkiln_dist.a" ] && check "$1/libkiln_dist.a"
    fi
else
    check "$@"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
