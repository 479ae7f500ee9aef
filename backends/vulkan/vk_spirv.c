/* vk_spirv.c — float-controls execution modes added to an embedded SPIR-V
 * module at pipeline creation, for the devices that offer them. The modes
 * have to be in the module, but which a device supports is known only at
 * run time; patching the few words in beats building every shader twice.
 * Without SignedZeroInfNanPreserve a driver may assume no NaN or infinity
 * (NVIDIA's folds the clamps' selects into min/max); without DenormPreserve
 * it may flush subnormals, which the CPU keeps. */
#include "vk.h"

#include <stdlib.h>
#include <string.h>

enum {
    OP_EXTENSION = 10,
    OP_CAPABILITY = 17,
    OP_ENTRY_POINT = 15,
    OP_EXECUTION_MODE = 16,
    MODE_DENORM_PRESERVE = 4459,
    MODE_SZ_INF_NAN_PRESERVE = 4461,
    CAP_DENORM_PRESERVE = 4464,
    CAP_SZ_INF_NAN_PRESERVE = 4466,
};

/* SPV_KHR_float_controls, nul-padded to whole words */
static const char float_controls_ext[24] = "SPV_KHR_float_controls";

/* The words of the instruction at w[i], or 0 when it does not fit in n. */
static size_t insn_len(const uint32_t *w, size_t i, size_t n) {
    size_t len = w[i] >> 16;
    return len && i + len <= n ? len : 0;
}

kiln_status kiln__vk_spirv_float_modes(const uint32_t *w, size_t n, unsigned modes, uint32_t **out, size_t *out_n) {
    static const struct {
        unsigned bit;
        uint32_t cap, mode;
    } table[] = {{KILN_VK_SZ_INF_NAN_PRESERVE_32, CAP_SZ_INF_NAN_PRESERVE, MODE_SZ_INF_NAN_PRESERVE},
                 {KILN_VK_DENORM_PRESERVE_32, CAP_DENORM_PRESERVE, MODE_DENORM_PRESERVE}};
    enum { NT = sizeof table / sizeof *table };
    *out = NULL;
    *out_n = 0;
    if (n < 5 || w[0] != 0x07230203u)
        return kiln__errs(KILN_ERR_FORMAT, "vulkan: SPIR-V of %zu words has no SPIR-V header", n);
    /* what the module has: capabilities, modes, entry points; where the
     * capabilities end and the entry points end */
    bool has_cap[NT] = {0}, has_mode[NT] = {0}, has_ext = w[1] >= 0x00010400u; /* core since SPIR-V 1.4 */
    size_t caps_end = 5, entries_end = 0, n_entries = 0;
    for (size_t i = 5, len; i < n; i += len) {
        if (!(len = insn_len(w, i, n)))
            return kiln__errs(KILN_ERR_FORMAT, "vulkan: SPIR-V instruction at word %zu runs past the module's %zu", i, n);
        uint32_t op = w[i] & 0xffff;
        if (op == OP_CAPABILITY && len == 2) {
            caps_end = i + len;
            for (int t = 0; t < NT; t++) has_cap[t] |= w[i + 1] == table[t].cap;
        }
        if (op == OP_EXTENSION && len * 4 >= 4 + sizeof float_controls_ext)
            has_ext |= !memcmp(&w[i + 1], float_controls_ext, sizeof float_controls_ext);
        if (op == OP_ENTRY_POINT && len >= 3) entries_end = i + len, n_entries++;
        if (op == OP_EXECUTION_MODE && len == 4)
            for (int t = 0; t < NT; t++) has_mode[t] |= w[i + 2] == table[t].mode && w[i + 3] == 32;
    }
    if (!n_entries) return kiln__errs(KILN_ERR_FORMAT, "vulkan: SPIR-V module has no entry point");
    int want = 0, new_caps = 0;
    for (int t = 0; t < NT; t++) {
        want += (modes & table[t].bit) && !has_mode[t];
        new_caps += (modes & table[t].bit) && !has_mode[t] && !has_cap[t];
    }
    size_t extra = (size_t)new_caps * 2 + (size_t)want * 4 * n_entries +
                   (want && !has_ext ? 1 + sizeof float_controls_ext / 4 : 0);
    uint32_t *o = kiln__malloc((n + extra) * sizeof *o);
    if (!o) return kiln_last_status();
    size_t k = 0;
    memcpy(o, w, caps_end * sizeof *w);
    k = caps_end;
    for (int t = 0; t < NT; t++)
        if ((modes & table[t].bit) && !has_mode[t] && !has_cap[t]) {
            o[k++] = 2u << 16 | OP_CAPABILITY;
            o[k++] = table[t].cap;
        }
    if (want && !has_ext) {
        o[k++] = (uint32_t)(1 + sizeof float_controls_ext / 4) << 16 | OP_EXTENSION;
        memcpy(&o[k], float_controls_ext, sizeof float_controls_ext);
        k += sizeof float_controls_ext / 4;
    }
    memcpy(&o[k], &w[caps_end], (entries_end - caps_end) * sizeof *w);
    k += entries_end - caps_end;
    for (size_t i = 5, len; i < entries_end; i += len) { /* a mode for each entry point */
        len = insn_len(w, i, n);
        if ((w[i] & 0xffff) != OP_ENTRY_POINT) continue;
        for (int t = 0; t < NT; t++)
            if ((modes & table[t].bit) && !has_mode[t]) {
                o[k++] = 4u << 16 | OP_EXECUTION_MODE;
                o[k++] = w[i + 2];
                o[k++] = table[t].mode;
                o[k++] = 32;
            }
    }
    memcpy(&o[k], &w[entries_end], (n - entries_end) * sizeof *w);
    k += n - entries_end;
    *out = o;
    *out_n = k;
    return KILN_OK;
}
