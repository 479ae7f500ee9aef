/* backend_ops_util.c — the cross-backend harness (see backend_ops_util.h):
 * input helpers, the list of device backends, building a case on two
 * backends, computing and comparing them, and the per-case report line. */
#include "backend_ops_util.h"

#include "../core/graph.h"

#include <time.h>

#define BO_TINY 1e-6   /* floor of the normalization: an all-zero reference */
#define BO_COMPUTES 2  /* computes per case, each compared */
#define BO_SEED 1000   /* the first fill's seed; each fill takes the next */

/* ---- inputs ---------------------------------------------------------------- */

static kiln_tensor *filled(bo_io *io, kiln_dtype dt, double lo, double hi, int ndim, const int64_t *shape) {
    kiln_tensor *t = kiln_tensor_new(io->ctx, dt, ndim, shape);
    if (t && kiln_tensor_fill_uniform(t, io->seed++, lo, hi)) return NULL;
    return t;
}

/* Make t an input whose gradient is compared (when the case has gradients). */
static kiln_tensor *track(bo_io *io, kiln_tensor *t) {
    if (!t || !io->grad) return t;
    if (io->n_in == BO_MAX_IN) {
        kt_fail(__FILE__, __LINE__, "a case has more than %d inputs", BO_MAX_IN);
        return NULL;
    }
    if (kiln_tensor_set_requires_grad(t, true)) return NULL;
    io->in[io->n_in++] = t;
    return t;
}

kiln_tensor *bo_in_dt(bo_io *io, kiln_dtype dt, double lo, double hi, int ndim, const int64_t *shape) {
    return track(io, filled(io, dt, lo, hi, ndim, shape));
}
kiln_tensor *bo_in_range(bo_io *io, double lo, double hi, int ndim, const int64_t *shape) {
    return bo_in_dt(io, io->dt, lo, hi, ndim, shape);
}
kiln_tensor *bo_in(bo_io *io, int ndim, const int64_t *shape) { return bo_in_range(io, -1, 1, ndim, shape); }
kiln_tensor *bo_const(bo_io *io, kiln_dtype dt, double lo, double hi, int ndim, const int64_t *shape) {
    return filled(io, dt, lo, hi, ndim, shape);
}

/* splitmix64: the same integers on every platform */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

kiln_tensor *bo_ints(bo_io *io, kiln_dtype dt, bool grad, int lo, int hi, int ndim, const int64_t *shape) {
    kiln_tensor *t = kiln_tensor_new(io->ctx, dt, ndim, shape);
    if (!t) return NULL;
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    uint64_t s = io->seed++;
    for (int64_t i = 0; i < n; i++) v[i] = lo + (double)(mix(&s) % (uint64_t)(hi - lo + 1));
    kiln_status st = kiln_tensor_set_f64(t, v, n);
    free(v);
    if (st) return NULL;
    return grad && dt != KILN_I32 ? track(io, t) : t;
}

/* ---- backends -------------------------------------------------------------- */

/* Where kiln_backend_get(name) failed: absent hardware (or a backend
 * not built in: a CUDA=1 VULKAN=0 build) is not a failure; anything else is (as kt_device.h has it):
 * a device the backend cannot start, or a missing validation layer. */
static void check_absent(const char *name) {
    const char *e = kiln_last_error();
    if (!strcmp(name, "vulkan") && kiln_last_status() == KILN_ERR_UNSUPPORTED &&
        (strstr(e, "no Vulkan") || strstr(e, "built without Vulkan")))
        return;
    if (!strcmp(name, "cuda") && kiln_last_status() == KILN_ERR_UNSUPPORTED &&
        (strstr(e, "no CUDA device") || strstr(e, "built without CUDA")))
        return;
    if (strcmp(name, "vulkan") && strcmp(name, "cuda")) return;
    kt_fail(__FILE__, __LINE__, "backend %s does not start: %s", name, e);
}

int bo_backends(kiln_backend **out) {
    setenv("KILN_VULKAN_VALIDATE", "1", 1); /* before the first kiln_backend_get starts a device */
    const char *list = getenv("KILN_TEST_BACKENDS");
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list && *list ? list : "vulkan cuda");
    int n = 0;
    for (char *save = NULL, *name = strtok_r(buf, " ,", &save); name && n < BO_MAX_BACKENDS;
         name = strtok_r(NULL, " ,", &save)) {
        kiln_clear_error();
        kiln_backend *b = kiln_backend_get(name);
        if (b) out[n++] = b;
        else check_absent(name);
    }
    kiln_clear_error();
    if (!n && !kt_failures()) kt_skip("no Vulkan or CUDA device");
    return n;
}

/* ---- comparing ------------------------------------------------------------- */

double bo_error_values(const double *dev, const double *cpu, int64_t n) {
    double scale = BO_TINY, diff = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(cpu[i]) && fabs(cpu[i]) > scale) scale = fabs(cpu[i]);
    for (int64_t i = 0; i < n; i++) {
        if (dev[i] == cpu[i] || (isnan(dev[i]) && isnan(cpu[i]))) continue; /* equal infinities, NaN on both */
        if (!isfinite(dev[i]) || !isfinite(cpu[i])) return INFINITY;
        if (fabs(dev[i] - cpu[i]) > diff) diff = fabs(dev[i] - cpu[i]);
    }
    return diff / scale;
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b) {
    if (kiln_tensor_ndim(a) != kiln_tensor_ndim(b) || kiln_tensor_dtype(a) != kiln_tensor_dtype(b)) return false;
    for (int d = 0; d < kiln_tensor_ndim(a); d++)
        if (kiln_tensor_dim(a, d) != kiln_tensor_dim(b, d)) return false;
    return true;
}

double bo_error(const kiln_tensor *dev, const kiln_tensor *cpu) {
    if (!dev || !cpu || !same_shape(dev, cpu)) return INFINITY;
    int64_t n = kiln_tensor_numel(cpu);
    if (!n) return 0; /* empty tensors of one shape agree */
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), e = INFINITY;
    if (a && b && !kiln_tensor_get_f64(dev, a, n) && !kiln_tensor_get_f64(cpu, b, n)) e = bo_error_values(a, b, n);
    free(a);
    free(b);
    return e;
}

/* ---- one case -------------------------------------------------------------- */

typedef struct bo_side {
    kiln_ctx *ctx;
    bo_io io;
    kiln_tensor *out;
    kiln_graph *g;
} bo_side;

/* Build case c in a fresh context whose graphs run on b (NULL: the CPU). */
static bool side_build(bo_side *s, const bo_case *c, kiln_backend *b) {
    bool grad = !(c->flags & BO_NO_GRAD);
    s->ctx = kiln_ctx_new();
    if (!s->ctx || kiln_ctx_set_backend(s->ctx, b)) return false;
    s->io = (bo_io){.ctx = s->ctx, .dt = c->dt, .grad = grad, .seed = BO_SEED, .arg = c->arg};
    s->out = c->build(&s->io);
    s->g = kiln_graph_new(s->ctx);
    if (!s->out || !s->g || kiln_graph_add(s->g, s->out)) return false;
    if (!grad) return true;
    kiln_tensor *w = bo_const(&s->io, kiln_tensor_dtype(s->out), -1, 1, kiln_tensor_ndim(s->out),
                              kiln_tensor_shape(s->out));
    kiln_tensor *loss = kiln_sum_all(s->ctx, kiln_mul(s->ctx, s->out, w));
    return loss && !kiln_graph_add(s->g, loss) && !kiln_graph_backward(s->g, loss);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A graph's fused steps (core/fuse.c): chain links but the last that the
 * next link reads, and products adding into a gradient. The CPU's side
 * links (KILN_FUSE_SIDE, which the devices leave) join two chains the
 * devices run apart with the same links, so the link before one is not
 * counted. */
static void fused_counts(const kiln_graph *g, int *links, int *accs) {
    *links = *accs = 0;
    for (int i = 0; i < g->n; i++) {
        bool read = false;
        for (int k = 0; i + 1 < g->n && k < g->nodes[i + 1]->nsrc; k++) read |= g->nodes[i + 1]->src[k] == g->nodes[i];
        *links += g->chain_end[i] != i && read, *accs += g->acc_node[i] >= 0;
    }
}

/* BO_FUSED: case c on b fuses as on the CPU (ref, computed), and equals b's unfused run. */
static void check_fused(const char *family, const bo_case *c, kiln_backend *b, const bo_side *ref, const bo_side *dev) {
    const char *bn = kiln_backend_name(b);
    int rl, ra, dl, da;
    fused_counts(ref->g, &rl, &ra);
    fused_counts(dev->g, &dl, &da);
    KT_CHECK(rl + ra > 0 && dl == rl && da == ra, "%s/%s on %s: %d chain links, %d products into a gradient (cpu %d, %d)",
             family, c->name, bn, dl, da, rl, ra);
    bo_side un = {0};
    setenv("KILN_FUSE", "0", 1);
    bool ok = side_build(&un, c, b);
    for (int k = 0; ok && k < BO_COMPUTES; k++) ok = !kiln_graph_compute(un.g);
    unsetenv("KILN_FUSE");
    KT_CHECK(ok, "%s/%s: unfused compute on %s failed: %s", family, c->name, bn, kiln_last_error());
    if (ok) {
        double e = bo_error(dev->out, un.out);
        KT_CHECK(e == 0, "%s/%s on %s: fused output differs from unfused by %.3g", family, c->name, bn, e);
        for (int i = 0; i < un.io.n_in && !da; i++) {
            e = bo_error(kiln_tensor_grad(dev->io.in[i]), kiln_tensor_grad(un.io.in[i]));
            KT_CHECK(e == 0, "%s/%s on %s: fused gradient %d differs from unfused by %.3g", family, c->name, bn, i, e);
        }
    }
    kiln_ctx_free(un.ctx);
}

/* Run case c on b against the CPU; prints its line, fails the test on a
 * mismatch, a fallback or a validation message. */
static void run_case(const char *family, const bo_case *c, kiln_backend *b) {
    const char *bn = kiln_backend_name(b);
    bo_side ref = {0}, dev = {0};
    double fwd = 0, grad = 0, secs = 0;
    int64_t vmsg = kiln_backend_validation_messages(b);
    if (!side_build(&ref, c, NULL) || !side_build(&dev, c, b)) {
        kt_fail(__FILE__, __LINE__, "%s/%s: building on %s failed: %s", family, c->name, dev.ctx ? bn : "cpu",
                kiln_last_error());
        goto done;
    }
    for (int k = 0; k < BO_COMPUTES; k++) {
        if (kiln_graph_compute(ref.g)) {
            kt_fail(__FILE__, __LINE__, "%s/%s: compute on cpu failed: %s", family, c->name, kiln_last_error());
            goto done;
        }
        double t0 = now();
        kiln_status st = kiln_graph_compute(dev.g);
        secs += now() - t0;
        if (st) {
            kt_fail(__FILE__, __LINE__, "%s/%s: compute on %s failed: %s", family, c->name, bn, kiln_last_error());
            goto done;
        }
        double e = bo_error(dev.out, ref.out);
        if (!(e <= fwd)) fwd = e;
        for (int i = 0; i < ref.io.n_in; i++) {
            e = bo_error(kiln_tensor_grad(dev.io.in[i]), kiln_tensor_grad(ref.io.in[i]));
            if (!(e <= grad)) grad = e;
        }
    }
    kiln_graph_stats st = kiln_graph_get_stats(dev.g);
    vmsg = kiln_backend_validation_messages(b) - vmsg;
    char gs[16] = "-";
    if (ref.io.n_in) snprintf(gs, sizeof gs, "%.1e", grad);
    /* one line per case where something is wrong, or always with $KILN_TEST_VERBOSE */
    bool bad = !(fwd <= c->tol) || !(grad <= c->tol) || (st.nodes_fallback && !(c->flags & BO_MAY_FALL_BACK)) || vmsg;
    if (bad || getenv("KILN_TEST_VERBOSE"))
        printf("    %-10s %-26s %-4s %-7s fwd %.1e  grad %-7s  tol %.0e  nodes %lld dev %lld cpu  %.3fs\n", family,
               c->name, kiln_dtype_name(c->dt), bn, fwd, gs, c->tol, (long long)st.nodes_on_backend,
               (long long)st.nodes_fallback, secs);
    fflush(stdout); /* in order with the failure lines on stderr */
    KT_CHECK(fwd <= c->tol, "%s/%s (%s) on %s: output error %.3g > %.0e", family, c->name, kiln_dtype_name(c->dt), bn,
             fwd, c->tol);
    KT_CHECK(grad <= c->tol, "%s/%s (%s) on %s: gradient error %.3g > %.0e", family, c->name, kiln_dtype_name(c->dt),
             bn, grad, c->tol);
    KT_CHECK(st.nodes_fallback == 0 || (c->flags & BO_MAY_FALL_BACK), "%s/%s (%s) on %s: %lld of %lld nodes ran on the CPU",
             family, c->name, kiln_dtype_name(c->dt), bn, (long long)st.nodes_fallback,
             (long long)(st.nodes_fallback + st.nodes_on_backend));
    KT_CHECK(vmsg == 0, "%s/%s on %s: %lld validation messages", family, c->name, bn, (long long)vmsg);
    if ((c->flags & BO_FUSED) && !st.nodes_fallback) check_fused(family, c, b, &ref, &dev);
done:
    kiln_ctx_free(ref.ctx);
    kiln_ctx_free(dev.ctx);
}

void bo_run_cases_on(const char *family, const bo_case *cases, int n, kiln_backend *b) {
    for (int k = 0; k < n; k++) run_case(family, &cases[k], b);
    fflush(stdout);
}

void bo_run_cases(const char *family, const bo_case *cases, int n) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) bo_run_cases_on(family, cases, n, bs[i]);
}
