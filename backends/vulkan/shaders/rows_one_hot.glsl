// rows_one_hot.glsl — y[p, c] = labels[p] == c ? 1 : 0, one invocation per
// output element (labels contiguous); a label outside [0, n) matches no
// column, so its row is zero. Included after YELEM is defined.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { int labels[]; };
layout(std430, binding = 1) writeonly buffer Y { YELEM y[]; };
layout(push_constant) uniform P { uint n, classes, l0, y0; } p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    y[p.y0 + i] = YELEM(labels[p.l0 + i / p.classes] == int(i % p.classes) ? 1.0 : 0.0);
}
