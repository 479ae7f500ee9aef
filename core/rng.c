/* rng.c — counter-based random numbers: value = f(seed, counter), so
 * initializers and dropout masks are reproducible on any thread count. */
#include "internal.h"

#include <math.h>

/* splitmix64's finalizer: a good 64-bit mixer. */
uint64_t kiln__hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double kiln__uniform01(uint64_t seed, uint64_t counter) {
    uint64_t h = kiln__hash64(kiln__hash64(seed) ^ (counter * 0xd1b54a32d192ed03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* Box-Muller on two uniforms drawn from the counter's two halves. */
double kiln__normal(uint64_t seed, uint64_t counter) {
    double u1 = kiln__uniform01(seed, 2 * counter), u2 = kiln__uniform01(seed, 2 * counter + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
