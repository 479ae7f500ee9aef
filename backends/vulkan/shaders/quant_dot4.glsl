// quant_dot4.glsl — the integer products' dot4 (quant_qmv.glsl,
// quant_qmv_k.glsl): the sum of the four signed byte products of two
// words, by OpSDot on packed 4x8 with DOT (where the device has
// shaderIntegerDotProduct), else byte by byte.
#if DOT // SPV_KHR_integer_dot_product: this glslang lacks GL_EXT_integer_dot_product
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6018, 6019], id = 4450)
int sdot_packed(uint a, uint b, spirv_literal int packed_vector_format_4x8);
#endif

int dot4(uint a, uint b) {
#if DOT
    return sdot_packed(a, b, 0);
#else
    const ivec4 up = ivec4(24, 16, 8, 0); // byte j to the top, then back down with its sign
    ivec4 u = (ivec4(int(a)) << up) >> 24, v = (ivec4(int(b)) << up) >> 24;
    return u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
#endif
}
