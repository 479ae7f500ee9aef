// nn_norm_parked.glsl — the row statistics that norm backward's pass 1
// parked at the start of each row of dx (rstd, then mean; with one column
// the mean is x itself), read by passes 2 and 3. Included after their o
// and x buffers and push constants.
void nn_norm_parked(uint at, out float rstd, out float mean) {
    mean = 0.0;
#ifdef NN_V4
    vec4 st = o[p.o0 + at]; // c >= 4
    rstd = st.x;
#ifndef RMS
    mean = st.y;
#endif
#else
    rstd = o[p.o0 + at];
#ifndef RMS
    mean = p.c >= 2u ? o[p.o0 + at + 1u] : x[p.x0 + at];
#endif
#endif
}
