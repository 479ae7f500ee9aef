// quant_tables.glsl — NF4's 16 values (kiln__nf4_table, quant/nf4.c) as
// f32 bit patterns, so no decimal literal is rounded twice; checked entry
// by entry through the Vulkan dequantize (tests/test_backend_quant.c).
// NF4_DQ's 256-entry absmax map comes in a buffer instead (vk_quant.c):
// as a constant array it cost lavapipe seconds per pipeline.
const uint KQ_NF4_BITS[16] = uint[16](0xbf800000u, 0xbf3239b1u, 0xbf066b30u, 0xbeca32a0u, 0xbe91a24du, 0xbe3d353fu, 0xbdba7871u, 0x00000000u, 0x3da2faffu, 0x3e24cae3u, 0x3e7c04ddu, 0x3ead033au, 0x3ee1a4b8u, 0x3f1007abu, 0x3f3913b3u, 0x3f800000u);
