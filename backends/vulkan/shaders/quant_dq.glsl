// quant_dq.glsl — DEQUANTIZE: y (f32, contiguous [rows, cols]) from a
// quantized tensor, one invocation per element. The source is contiguous
// (one row of every element) or a view keeping whole blocks (core/tensor.c):
// rows over up to three leading dims with byte strides s0..s2.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, cols, q0, y0, d1, d2, s0, s1, s2; } p;
#define KQ_MAP_BINDING 2
#include "quant.glsl"
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint r = i / p.cols, j = i % p.cols;
    uint row = p.q0 + (r / (p.d1 * p.d2)) * p.s0 + ((r / p.d2) % p.d1) * p.s1 + (r % p.d2) * p.s2;
    y[p.y0 + i] = kq_get(row + (j / KQ_BLCK) * KQ_BYTES, j % KQ_BLCK);
}
