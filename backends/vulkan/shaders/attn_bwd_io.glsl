// attn_bwd_io.glsl — the bindings of the two backward passes that write
// gradients (attn_bwd_dq.glsl, attn_bwd_dkv.glsl); VT is the row vector type.
layout(std430, binding = 0) readonly buffer Q { VT q[]; };
layout(std430, binding = 1) readonly buffer K { VT k[]; };
layout(std430, binding = 2) readonly buffer V { VT v[]; };
layout(std430, binding = 3) readonly buffer F { float f[]; };   // forward O | L
layout(std430, binding = 4) readonly buffer DO { VT dout[]; };
layout(std430, binding = 5) buffer G { float g[]; };            // dq | dk | dv
