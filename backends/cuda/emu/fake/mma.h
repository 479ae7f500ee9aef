// mma.h (fake) — the warp matrix functions of CUDA's <mma.h>
// (nvcuda::wmma) for the host emulation (prelude.h: a warp is 32 of a
// block's host threads), from the CUDA C++ Programming Guide's description:
// fragments of matrix_a (M x K), matrix_b (K x N) and accumulator (M x N),
// m16n16k16 with __half or __nv_bfloat16 inputs and m16n16k8 with
// precision::tf32 ones, fill_fragment, load_matrix_sync, store_matrix_sync
// and mma_sync (D = A B + C, products of the inputs exact and summed in
// f32), and wmma::__float_to_tf32 (round to nearest, ties away from zero, as
// cvt.rna.tf32.f32). mma_sync reads tf32 inputs as the tensor cores do:
// only the sign, exponent and top 10 mantissa bits (a value not passed
// through __float_to_tf32 is truncated).
//
// How elements sit in lanes is unspecified by CUDA; here a matrix_a or
// matrix_b fragment holds the whole tile in each lane (num_elements = M K
// or K N), an accumulator holds elements lane + 32 i of the row-major tile
// (num_elements = M N / 32), so code that treats x[] element-wise works as
// on a GPU, and a kernel that reads a tile another lane stored without a
// __syncwarp (or __syncthreads) can see stale values, as on a GPU.
// The Guide's limits are checked: ldm a multiple of 16 bytes, the pointer
// 32-byte aligned (a fault on a GPU; here an abort that says so).
#ifndef KILN_CUDA_EMU_MMA_H
#define KILN_CUDA_EMU_MMA_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// the lane of the calling thread (prelude.h's thread index)
static inline unsigned emu_lane() { return emu_threadIdx.x % 32; }

namespace nvcuda {
namespace wmma {

struct matrix_a; // tags, incomplete as the toolkit's
struct matrix_b;
struct accumulator;
struct row_major;
struct col_major;
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32;
} // namespace precision

inline float __float_to_tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu; // 13 bits dropped, half of them added
    memcpy(&v, &u, 4);
    return v;
}

namespace emu {
template <typename T> struct storage { typedef T stored_type; };
template <> struct storage<precision::tf32> { typedef float stored_type; };

static inline float as_float(float v) { return v; }
static inline float as_float(__half v) { return __half2float(v); }
static inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// what a tensor core reads of an element of type T held as S
template <typename T, typename S> static inline float core_input(S v) {
    if (!std::is_same<T, precision::tf32>::value) return as_float(v);
    float f = as_float(v);
    uint32_t u;
    memcpy(&u, &f, 4);
    u &= ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

template <typename Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> {
    static const int rows = M, cols = K;
};
template <int M, int N, int K> struct dims<matrix_b, M, N, K> {
    static const int rows = K, cols = N;
};
template <int M, int N, int K> struct dims<accumulator, M, N, K> {
    static const int rows = M, cols = N;
};

static inline void check_operand(const void *p, unsigned ldm, size_t esize, const char *what) {
    if ((uintptr_t)p % 32 || ldm * esize % 16) {
        fprintf(stderr, "fake mma.h: %s: pointer %p or ldm %u (elements of %zu bytes) breaks wmma's alignment\n", what, p,
                ldm, esize);
        abort();
    }
}
} // namespace emu

template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment {
    static_assert((M == 16 && N == 16 && K == 16 && !std::is_same<T, precision::tf32>::value) ||
                      (M == 16 && N == 16 && K == 8 && std::is_same<T, precision::tf32>::value) ||
                      std::is_same<Use, accumulator>::value,
                  "the fake mma.h has m16n16k16 (half, bf16) and m16n16k8 (tf32)");

  public:
    typedef T element_type;
    typedef typename emu::storage<T>::stored_type storage_element_type;
    static const int rows = emu::dims<Use, M, N, K>::rows, cols = emu::dims<Use, M, N, K>::cols;
    static const bool whole = !std::is_same<Use, accumulator>::value; // every lane holds the whole tile
    enum { num_elements = whole ? rows * cols : rows * cols / 32 };
    storage_element_type x[num_elements];
    // the tile's row-major index of element i of this lane
    static int index(int i) { return whole ? i : (int)emu_lane() + 32 * i; }
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, const typename emu::storage<T>::stored_type &v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

// matrix_a / matrix_b: the layout is the fragment's
template <typename Use, int M, int N, int K, typename T, typename L, typename S>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const S *p, unsigned ldm) {
    static_assert(!std::is_same<L, void>::value, "a matrix_a or matrix_b fragment names its layout");
    emu::check_operand(p, ldm, sizeof(S), "load_matrix_sync");
    typedef fragment<Use, M, N, K, T, L> F;
    for (int i = 0; i < F::num_elements; i++) {
        int r = F::index(i) / F::cols, c = F::index(i) % F::cols;
        f.x[i] = std::is_same<L, row_major>::value ? p[r * ldm + c] : p[c * ldm + r];
    }
}

template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t layout) {
    emu::check_operand(p, ldm, sizeof(T), "load_matrix_sync");
    typedef fragment<accumulator, M, N, K, T> F;
    for (int i = 0; i < F::num_elements; i++) {
        int r = F::index(i) / N, c = F::index(i) % N;
        f.x[i] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t layout) {
    emu::check_operand(p, ldm, sizeof(T), "store_matrix_sync");
    typedef fragment<accumulator, M, N, K, T> F;
    for (int i = 0; i < F::num_elements; i++) {
        int r = F::index(i) / N, c = F::index(i) % N;
        (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[i];
    }
}

// d = a b + c (d may be c): this lane's elements of the product, each a
// sum over k in order of exact products of the inputs, rounded in f32
template <int M, int N, int K, typename T, typename LA, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, TC> &c) {
    static_assert(std::is_same<TC, float>::value, "the fake mma.h accumulates in float");
    float av[M * K], bv[K * N];
    for (int i = 0; i < M * K; i++) av[i] = emu::core_input<T>(a.x[i]);
    for (int i = 0; i < K * N; i++) bv[i] = emu::core_input<T>(b.x[i]);
    typedef fragment<accumulator, M, N, K, TC> F;
    for (int i = 0; i < F::num_elements; i++) {
        int r = F::index(i) / N, col = F::index(i) % N;
        float s = c.x[i];
        for (int k = 0; k < K; k++) s += av[r * K + k] * bv[k * N + col];
        d.x[i] = s;
    }
}

} // namespace wmma
} // namespace nvcuda

#endif
