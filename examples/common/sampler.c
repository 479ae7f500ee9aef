/* sampler.c — see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 */
static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int sampler_init(sampler *s, const sampler_params *p, uint64_t stream) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    if (s->p.repeat_last <= 0) s->p.repeat_last = 64;
    s->rng = mix(stream);
    s->recent = malloc((size_t)s->p.repeat_last * sizeof *s->recent);
    return s->recent ? 0 : -1;
}

void sampler_free(sampler *s) {
    free(s->recent);
    free(s->tmp);
    free(s->prob);
    memset(s, 0, sizeof *s);
}

void sampler_reset(sampler *s) { s->n_recent = s->next = 0; }

void sampler_accept(sampler *s, int32_t id) {
    s->recent[s->next] = id;
    s->next = (s->next + 1) % s->p.repeat_last;
    if (s->n_recent < s->p.repeat_last) s->n_recent++;
}

/* The k-th largest of z[0..n) (1 <= k <= n), by quickselect on tmp. */
static float kth_largest(const float *z, float *tmp, int64_t n, int64_t k) {
    memcpy(tmp, z, (size_t)n * sizeof *tmp);
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = tmp[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (tmp[i] > pivot) i++;
            while (tmp[j] < pivot) j--;
            if (i <= j) {
                float t = tmp[i];
                tmp[i++] = tmp[j];
                tmp[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return tmp[want];
}

static int by_prob_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int32_t sampler_draw(sampler *s, float *z, int64_t n) {
    const sampler_params *p = &s->p;
    double pen = p->repeat_penalty;
    for (int i = 0; pen > 0 && pen != 1 && i < s->n_recent; i++) { /* each token once, as llama.cpp */
        int32_t id = s->recent[i];
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = s->recent[j] == id;
        if (!seen && id >= 0 && id < n) z[id] = z[id] > 0 ? (float)(z[id] / pen) : (float)(z[id] * pen);
    }
    int64_t best = 0;
    for (int64_t v = 1; v < n; v++) best = z[v] > z[best] ? v : best;
    double u = (double)((s->rng = mix(s->rng)) >> 11) * 0x1.0p-53;
    if (p->temperature <= 0) return (int32_t)best;
    if (n > s->cap) {
        float *t = realloc(s->tmp, (size_t)n * sizeof *t);
        double *q = t ? realloc(s->prob, (size_t)n * sizeof *q) : NULL;
        if (t) s->tmp = t;
        if (q) s->prob = q, s->cap = n;
        if (!t || !q) return (int32_t)best; /* no room to sample: the likeliest */
    }
    /* the candidates: z >= cut (top-k), then top-p and min-p on softmax(z) */
    float cut = p->top_k > 0 && p->top_k < n ? kth_largest(z, s->tmp, n, p->top_k) : -INFINITY;
    if ((p->top_p > 0 && p->top_p < 1) || p->min_p > 0) {
        int64_t m = 0;
        double total = 0;
        for (int64_t v = 0; v < n; v++)
            if (z[v] >= cut) total += s->prob[m++] = exp((double)(z[v] - z[best]));
        qsort(s->prob, (size_t)m, sizeof *s->prob, by_prob_desc);
        double keep = 0, last = s->prob[0]; /* top-p: the likeliest until they hold top_p of the mass */
        for (int64_t i = 0; i < m && (p->top_p <= 0 || p->top_p >= 1 || keep < p->top_p * total); i++)
            keep += last = s->prob[i];
        /* what every candidate reaches, unnormalized (the likeliest is 1): min-p is a fraction of it */
        double least = fmax(last, p->min_p);
        for (int64_t v = 0; v < n; v++)
            if (z[v] >= cut && exp((double)(z[v] - z[best])) < least) z[v] = -INFINITY;
    }
    double total = 0;
    for (int64_t v = 0; v < n; v++) total += z[v] >= cut ? exp((double)(z[v] - z[best]) / p->temperature) : 0;
    double r = u * total;
    for (int64_t v = 0; v < n; v++)
        if (z[v] >= cut && (r -= exp((double)(z[v] - z[best]) / p->temperature)) < 0) return (int32_t)v;
    return (int32_t)best;
}
