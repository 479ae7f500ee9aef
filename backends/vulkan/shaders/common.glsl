// common.glsl — included by every kernel after its #version line.
// Bindings, push constants and local size are each kernel's own.
#extension GL_EXT_control_flow_attributes : enable

// The linear index of this invocation for a 1-D grid that the host spread
// over x and y (kiln__vk_groups_1d): x varies fastest.
uint kiln_gid() {
    return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
