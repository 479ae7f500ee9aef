/* gemm_blocks.c — the f32 GEMM's cache blocks (gemm_kernels.h) from the
 * cache sizes this CPU reports, not constants tuned on one machine: a kc x
 * NR panel of packed B fills L1 (the kernel reuses it for every A panel of
 * the block while A streams from L2 under prefetch; a deep kc spreads the
 * load and store of each C tile over more multiply-adds: on a Zen 5 with
 * 48 KiB L1, 2048^2 took about 4% more CPU time at kc 192, a panel of half
 * of L1, than at 256 to 512), an mc x kc block of packed A three quarters
 * of one core's L2 (half of it: 3-6% more CPU time at 2048^2 and 4096^2
 * on that Zen 5, the whole of it no better than 3/4), a kc x nc block of
 * packed B half of one core's share of L3. Sizes come from sysfs (Linux), else sysconf, else the defaults below (32 KiB,
 * 1 MiB, 2 MiB a core). */
#include "gemm_kernels.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* CPUs in a sysfs list such as "0-1,4,6-7" (0 when unreadable). */
static int64_t cpu_count(const char *list) {
    int64_t n = 0;
    for (const char *p = list; *p;) {
        long a, b;
        int used = 0;
        if (sscanf(p, "%ld-%ld%n", &a, &b, &used) == 2 && used > 0) n += b >= a ? b - a + 1 : 0;
        else if (sscanf(p, "%ld%n", &a, &used) == 1 && used > 0) n += 1;
        else return 0;
        p += used;
        if (*p == ',') p++;
        else if (*p && *p != '\n') return 0;
        else break;
    }
    return n;
}

static bool read_line(const char *dir, const char *name, char *buf, size_t size) {
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

/* cpu0's data/unified caches from sysfs, L3 divided among the CPUs sharing it. */
static void caches_sysfs(kiln__cpu_caches *c) {
    for (int i = 0; i < 8; i++) {
        char dir[96], type[32], level[16], size[32], shared[256];
        snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu0/cache/index%d", i);
        if (!read_line(dir, "type", type, sizeof type) || !read_line(dir, "level", level, sizeof level) ||
            !read_line(dir, "size", size, sizeof size))
            continue;
        if (!strncmp(type, "Instruction", 11)) continue;
        long kib = 0;
        char unit = 'K';
        if (sscanf(size, "%ld%c", &kib, &unit) < 1 || kib <= 0) continue;
        int64_t bytes = (int64_t)kib * (unit == 'M' ? 1 << 20 : unit == 'K' ? 1 << 10 : 1);
        int64_t sharers = read_line(dir, "shared_cpu_list", shared, sizeof shared) ? cpu_count(shared) : 0;
        switch (level[0]) {
        case '1': c->l1d = bytes; break;
        case '2': c->l2 = bytes; break;
        case '3': c->l3_per_core = bytes / (sharers > 0 ? sharers : 1); break;
        default: break;
        }
    }
}

static void caches_sysconf(kiln__cpu_caches *c) {
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!c->l1d && l1 > 0) c->l1d = l1;
    if (!c->l2 && l2 > 0) c->l2 = l2;
    if (!c->l3_per_core && l3 > 0) c->l3_per_core = l3 / (cpus > 0 ? cpus : 1);
#else
    (void)c;
#endif
}

static kiln__cpu_caches detected, forced;
static volatile int done, is_forced; /* done: a benign race, every thread reads the same sizes */

const kiln__cpu_caches *kiln__cpu_caches_get(void) {
    if (is_forced) return &forced;
    if (!done) {
        kiln__cpu_caches t = {0, 0, 0};
        caches_sysfs(&t);
        caches_sysconf(&t);
        detected = t;
        done = 1;
    }
    return &detected;
}

void kiln__cpu_caches_set(const kiln__cpu_caches *c) {
    if (c) forced = *c;
    is_forced = c != NULL;
}

kiln__sgemm_blocks kiln__sgemm_blocks_derive(const kiln__sgemm_kernel *K, const kiln__cpu_caches *c) {
    int64_t l1 = c->l1d > 0 ? c->l1d : 32 << 10, l2 = c->l2 > 0 ? c->l2 : 1 << 20;
    /* L2 without L3 reported: there is none; no L3, or a smaller share of
     * it than L2: B's block sizes to L2 */
    int64_t l3 = c->l3_per_core > 0 ? c->l3_per_core : c->l2 > 0 ? 0 : 2 << 20;
    kiln__sgemm_blocks b;
    b.kc = clamp64(l1 / ((int64_t)K->nr * 4) / 16 * 16, 128, 512);
    b.mc = clamp64(l2 * 3 / 4 / (b.kc * 4) / K->mr * K->mr, K->mr, 4096 / K->mr * K->mr);
    b.nc = clamp64((l3 > l2 ? l3 : l2) / 2 / (b.kc * 4) / K->nr * K->nr, K->nr, 8192);
    return b;
}

kiln__sgemm_blocks kiln__sgemm_blocks_for(const kiln__sgemm_kernel *K) {
    return kiln__sgemm_blocks_derive(K, kiln__cpu_caches_get());
}
