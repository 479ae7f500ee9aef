/* kt_simd.c — the loop over SIMD variants of kt_simd.h. */
#include "kt_simd.h"

#include <stdio.h>

kt_simd kt_simd_start(void) {
    kt_simd s = {.saved = *kiln__cpu_caps()};
    s.n = kiln__cpu_caps_variants(&s.saved, s.all, s.names);
    return s;
}

bool kt_simd_next(kt_simd *s) {
    static char what[240];
    if (s->i == s->n) {
        kiln__cpu_caps_set(&s->saved);
        kt_set_context(NULL);
        return false;
    }
    s->name = s->names[s->i];
    s->caps = s->all[s->i++];
    kiln__cpu_caps_set(&s->caps);
    char caps[200];
    snprintf(what, sizeof what, "simd %s: %s", s->name, kiln__cpu_caps_describe(&s->caps, caps, sizeof caps));
    kt_set_context(what);
    return true;
}
