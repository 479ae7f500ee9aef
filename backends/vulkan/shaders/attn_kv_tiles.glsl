// attn_kv_tiles.glsl — the K and V tiles of the kernels that walk keys
// (attn_fwd.glsl, attn_bwd_dq.glsl), included after their bindings k, v.
shared VT sk[ATTN_TILE * NV], sv[ATTN_TILE * NV];

// Stage keys j0 .. j0 + n - 1, n = min(ATTN_TILE, jend - j0) (returned),
// of the kv head whose K and V rows start at vectors kb, vb, into sk, sv,
// once the workgroup is done with the previous tile.
uint attn_stage_kv(uint j0, uint jend, uint kb, uint vb, uint nd, uint ndv) {
    uint n = min(ATTN_TILE, jend - j0);
    barrier();
    ATTN_STAGE(sk, k, kb, j0, n, nd)
    ATTN_STAGE(sv, v, vb, j0, n, ndv)
    barrier();
    return n;
}
