// attn_cached_tile.glsl — kiln_attention_cached's attention in the
// FlashAttention-2 style (as backends/cuda/k_attention_cached.cu), its
// writes done (attn_cache_write.comp): f32, or f64 after math_f64.glsl
// (T double), head sizes D, Dv <= HD. A kv
// head's query slots are (row i, head of its group), row-major, so a tile
// of BR slots takes the group's heads (GQA: each K/V tile staged once for
// all of them) and, for a prompt, several rows. A workgroup takes a tile of
// slots of kv head gl_WorkGroupID.y and split gl_WorkGroupID.x % nsplit,
// stages K/V tiles of BC keys in shared memory and keeps an online softmax
// per slot. Each slot has its own sequence and keys first .. pos (the
// last window of them), read here, so a replayed recording serves the
// next token: a tile walks one sequence at a time, the union of its
// slots' ranges, each slot masked to its own; rows of two sequences in a
// tile make two passes. With nsplit > 1 each split takes its share of a
// pass's keys and writes its slots' normalized partial O and logsumexp
// (L = +inf: no key) to po / pl, merged by attn_cached_merge.comp.
// softcap > 0: each scaled score s is softcap tanh(s / softcap) (Gemma 2).
// Defines: HD, NT (invocations), BR, BC (NT % BC == 0, NT % HD == 0 or
// HD % NT == 0, BR BC % NT == 0).
#include "ew_math.glsl"
#define SE (BR * BC / NT)
#define OE (BR * HD / NT)
// Output entry e of an invocation: up to NT columns it keeps column
// tid % HD of slots tid / HD + e (NT / HD); past NT (HD 256 in 64
// invocations), columns tid + (e % (HD / NT)) NT of slot e / (HD / NT).
#define OUT_ROW(e) (tid / HD + (e) / (HD > NT ? HD / NT : 1) * (HD < NT ? NT / HD : 1))
#define OUT_COL(e) (tid % HD + (e) % (HD > NT ? HD / NT : 1) * NT)
#ifndef T // f32 unless math_f64.glsl came first
#define T float
#define EXP exp
#define LOG log
#define TANH ew_tanh
#endif
layout(local_size_x = NT) in;
layout(std430, binding = 0) readonly buffer Q { T q[]; };
layout(std430, binding = 1) readonly buffer K { T k[]; };
layout(std430, binding = 2) readonly buffer V { T v[]; };
layout(std430, binding = 3) readonly buffer SEQ { int seq[]; };
layout(std430, binding = 4) readonly buffer POS { int pos[]; };
layout(std430, binding = 5) writeonly buffer O { T o[]; };
layout(std430, binding = 6) writeonly buffer PART { T part[]; };
layout(push_constant) uniform P {
    uint n, hq, hkv, b, s, d, dv, window;
    float scale, softcap;
    uint q0, k0, v0, s0, p0, o0, nsplit, po0, pl0;
    uvec2 scale64, softcap64; // the scale and the cap in double, for f64
} p;
#ifdef KILN_F64
#define SCALE packDouble2x32(p.scale64)
#define SOFTCAP packDouble2x32(p.softcap64)
#else
#define SCALE p.scale
#define SOFTCAP p.softcap
#endif

shared T qs[BR][HD + 1], ks[BC][HD + 1], vs[BC][HD], ps[BR][BC + 1];
shared T m_s[BR], l_s[BR], c_s[BR];
shared int sq_s[BR]; // a slot's sequence (-1: none, -2: done)
shared uint f_s[BR], e_s[BR], pass_s[3]; // a slot's keys [f, e); the pass's sequence + 1 (0: none left), [lo, hi)

float neg_inf() { return uintBitsToFloat(0xff800000u); }

void main() {
    uint tid = gl_LocalInvocationID.x, sc = tid % BC, group = p.hq / p.hkv, nq = p.n * group, rows = p.n * p.hq;
    uint sp = gl_WorkGroupID.x % p.nsplit, x0 = gl_WorkGroupID.x / p.nsplit * BR, kh = gl_WorkGroupID.y;
    uint nr = min(BR, nq - x0);
    // slot r: row (x0 + r) / group, query head kh * group + (x0 + r) % group
#define SLOT_ROW(r) (((x0 + (r)) / group) * p.hq + kh * group + (x0 + (r)) % group)
    if (tid < BR) {
        int sq = -1;
        uint f = 0u, e = 0u;
        if (tid < nr) {
            uint i = (x0 + tid) / group;
            int s = seq[p.s0 + i], ps = pos[p.p0 + i];
            if (s >= 0 && uint(s) < p.b && ps >= 0 && uint(ps) < p.s) {
                sq = s, e = uint(ps) + 1u;
                f = p.window > 0u && e > p.window ? e - p.window : 0u;
            }
        }
        sq_s[tid] = sq, f_s[tid] = f, e_s[tid] = e;
    }
    for (uint x = tid; x < BR * HD; x += NT) {
        uint r = x / HD, c = x % HD;
        qs[r][c] = r < nr && c < p.d ? q[p.q0 + SLOT_ROW(r) * p.d + c] : 0.0;
    }
    for (;;) {
        barrier(); // the slots staged, or the last pass's slots marked done
        if (tid == 0u) {
            int cur = -1;
            uint lo = 0u, hi = 0u;
            for (uint r = 0u; r < BR; r++)
                if (sq_s[r] >= 0 && cur < 0) cur = sq_s[r], lo = f_s[r], hi = e_s[r];
            for (uint r = 0u; r < BR; r++)
                if (sq_s[r] == cur) lo = min(lo, f_s[r]), hi = max(hi, e_s[r]);
            pass_s[0] = uint(cur + 1), pass_s[1] = lo, pass_s[2] = hi;
        }
        if (tid < BR) m_s[tid] = neg_inf(), l_s[tid] = 0.0;
        barrier();
        if (pass_s[0] == 0u) break;
        int cur = int(pass_s[0]) - 1;
        // this split's share of the pass's keys, in whole key tiles
        uint chunk = (pass_s[2] - pass_s[1] + p.nsplit - 1u) / p.nsplit;
        chunk = (chunk + BC - 1u) / BC * BC;
        uint j0 = pass_s[1] + sp * chunk, j1 = min(j0 + chunk, pass_s[2]);
        uint kb = p.k0 + (uint(cur) * p.hkv + kh) * p.s * p.d, vb = p.v0 + (uint(cur) * p.hkv + kh) * p.s * p.dv;
        T acc[OE];
        [[unroll]] for (uint e = 0u; e < OE; e++) acc[e] = 0.0;
        for (; j0 < j1; j0 += BC) {
            uint nc = min(BC, j1 - j0);
            for (uint x = tid; x < BC * HD; x += NT) {
                uint r = x / HD, c = x % HD;
                ks[r][c] = r < nc && c < p.d ? k[kb + (j0 + r) * p.d + c] : 0.0;
                vs[r][c] = r < nc && c < p.dv ? v[vb + (j0 + r) * p.dv + c] : 0.0;
            }
            barrier();
            T s[SE];
            [[unroll]] for (uint m = 0u; m < SE; m++) s[m] = 0.0;
            for (uint e = 0u; e < p.d; e++) { // a thread's SE scores share key sc, read once
                T x = ks[sc][e];
                [[unroll]] for (uint m = 0u; m < SE; m++) s[m] += qs[tid / BC + m * (NT / BC)][e] * x;
            }
            [[unroll]] for (uint m = 0u; m < SE; m++) { // scaled (and capped) scores, -inf where masked
                uint r = tid / BC + m * (NT / BC), j = j0 + sc;
                bool vis = sc < nc && sq_s[r] == cur && j >= f_s[r] && j < e_s[r];
                T x = s[m] * SCALE;
                if (SOFTCAP > 0.0) x = TANH(x / SOFTCAP) * SOFTCAP;
                ps[r][sc] = vis ? x : neg_inf();
            }
            barrier();
            if (tid < BR) { // the new running max and the rescaling of what came before
                T mo = m_s[tid], mx = mo;
                for (uint c = 0u; c < BC; c++) mx = max(mx, ps[tid][c]);
                c_s[tid] = mx == neg_inf() ? 1.0 : EXP(mo - mx);
                m_s[tid] = mx;
            }
            barrier();
            [[unroll]] for (uint m = 0u; m < SE; m++) {
                uint r = tid / BC + m * (NT / BC);
                T x = ps[r][sc];
                ps[r][sc] = x == neg_inf() ? 0.0 : EXP(x - m_s[r]);
            }
            [[unroll]] for (uint e = 0u; e < OE; e++) acc[e] *= c_s[OUT_ROW(e)];
            barrier();
            if (tid < BR) {
                T x = 0.0;
                for (uint c = 0u; c < BC; c++) x += ps[tid][c];
                l_s[tid] = l_s[tid] * c_s[tid] + x;
            }
            for (uint c = 0u; c < nc; c++)
                [[unroll]] for (uint e = 0u; e < OE; e++) acc[e] += ps[OUT_ROW(e)][c] * vs[c][OUT_COL(e)];
            barrier(); // ks, vs, ps are rewritten next tile
        }
        // this pass's slots: O, or the split's partial O and L (+inf: no key in this split)
        [[unroll]] for (uint e = 0u; e < OE; e++) {
            uint r = OUT_ROW(e), col = OUT_COL(e);
            if (r < nr && sq_s[r] == cur && col < p.dv) {
                T x = l_s[r] > 0.0 ? acc[e] / l_s[r] : 0.0;
                if (p.nsplit == 1u) o[p.o0 + SLOT_ROW(r) * p.dv + col] = x;
                else part[p.po0 + (sp * rows + SLOT_ROW(r)) * p.dv + col] = x;
            }
        }
        if (p.nsplit > 1u && tid < nr && sq_s[tid] == cur)
            part[p.pl0 + sp * rows + SLOT_ROW(tid)] = l_s[tid] > 0.0 ? m_s[tid] + LOG(l_s[tid]) : -neg_inf();
        barrier();
        if (tid < BR && sq_s[tid] == cur) sq_s[tid] = -2;
    }
    // slots outside the caches: NaN (merged from L = +inf alone when split)
    for (uint x = tid; x < BR * p.dv; x += NT) {
        uint r = x / p.dv, col = x % p.dv;
        if (r >= nr || sq_s[r] != -1) continue;
        if (p.nsplit == 1u) o[p.o0 + SLOT_ROW(r) * p.dv + col] = uintBitsToFloat(0x7fc00000u);
        else if (col == 0u) part[p.pl0 + sp * rows + SLOT_ROW(r)] = -neg_inf();
    }
}
