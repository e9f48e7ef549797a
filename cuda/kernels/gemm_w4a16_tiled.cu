/*
 * gemm_w4a16 over a weight in the tiled layout (TS_W4_TILED: cuda/w4a16_tiled.cuh, written by
 * ts_w4a16_tile): the same contract as the packed formats, out = x . W^T with W^T = (q - z) * s
 * rounded once to T, fp32 accumulation, one rounding of out.
 *
 *  - decode (m <= 16): w4a16_tiled_decode_kernel. A warp multiplies 64 columns over a k slice;
 *    a lane reads its 8 words of each 32-row step with two 16-byte loads (the warp's 1 KB in two
 *    512-byte pieces), 4 steps ahead in a register ring (2 at m > 8). Per word: 4 LOP3 (and 3
 *    shifts) give its 4 pairs as magic + code (a nibble OR'd into the mantissa of 1024 in fp16,
 *    128 in bf16), one HSUB2 of the pair (magic + z) and one HMUL2 by the scale pair each (the
 *    contract's rounding), and one mma per two words and k16: about 150 instructions a lane per
 *    KB of weight, against 330-410 for the packed kernel, which builds the pairs with byte
 *    permutes from words of 8 rows. Steps never straddle a group (group_size % 32 == 0); a
 *    group's scales and zero points (16 and 8 bytes a lane) are loaded a group ahead. k is split
 *    as the packed kernel splits it (ts::splitk_count) and w4a16_reduce_kernel sums the
 *    fp32 partials in split order. Measured on an H200 (docs/gpu-runbook.md): 4-6% faster at
 *    Llama-3-8B's shapes than the codes in a shared-memory ring filled by bulk copies (level at
 *    Llama-3.2-1B's), and no faster with 3 blocks an SM, more stages, or each group's fp32 sum
 *    scaled instead of every weight (30% fewer instructions): what is left is not issue.
 *  - prefill (m > 16): w4a16_tiled_dequant_kernel writes W [n, k] in T into the workspace (a
 *    thread a word: its 8 rows are 16 contiguous bytes of W's row) and gemm's cuBLAS multiplies.
 */
#include "internal.h"
#include "mma.cuh"
#include "w4a16.cuh"
#include "w4a16_tiled.cuh"

#include <atomic>
#include <cstring>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlock = 128; /* k rows a split's slice is a multiple of */

/* Column j's zero pair (magic + z, twice) from the group's 8 zero bytes: bytes (z_j, magic's
 * high byte, z_j, magic's high byte), z <= 16 in the mantissa. One PRMT, made where it is used
 * (8 registers fewer than holding the pairs). */
template <typename T>
__device__ __forceinline__ uint32_t zero_pair(const uint2 &z, int j) {
    const int b = j & 3;
    return __byte_perm(j < 4 ? z.x : z.y, W4Magic<T>::kPair, b | 5 << 4 | b << 8 | 7 << 12);
}

/* A group's scale pairs (s | s) of a lane's 8 columns. */
__device__ __forceinline__ void scale_pairs(uint32_t (&sp)[8], const uint4 &s) {
    const uint32_t sw[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) sp[j] = __byte_perm(sw[j >> 1], 0, (j & 1) ? 0x3232 : 0x1010);
}

/* Work item i (a warp, grid-stride) is tile i % tiles over the k slice i / tiles. The weight is
 * the mma's A operand (16 columns: words 2jj and 2jj + 1 of a lane are columns 16jj + g and
 * 16jj + 8 + g) and x the B operand (its 8 columns are tokens 0-7; HI: a second mma for tokens
 * 8-15), so x's fragments are its 16-byte row pieces and no register holds padding. A step's
 * ring slot is refilled as soon as it is read, kAhead steps on (the loop unrolled by kAhead, so
 * the ring needs no register moves). One split: out in T directly; several: fp32 partial
 * [splits, m, n]. */
template <bool HI, typename T>
__global__ void __launch_bounds__(kThreads, 2)
    w4a16_tiled_decode_kernel(T *out, float *partial, const T *x, const uint4 *codes, const uint4 *scales,
                              const uint2 *zeros, int m, int n, int k, int group_size, int slice, int tiles,
                              int splits) {
    ts::pdl_wait();
    constexpr int kAhead = HI ? 2 : 4; /* steps of codes in flight a warp (3 would spill at m > 8) */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int steps = k / ts::kW4TileStep;
    const uint32_t magic = W4Magic<T>::kPair;
    const bool xvec = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    const int64_t items = (int64_t)tiles * splits;
    for (int64_t item = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); item < items;
         item += (int64_t)gridDim.x * kWarps) {
        const int tile = (int)(item % tiles), split = (int)(item / tiles);
        const int k_begin = split * slice, k_end = min(k, k_begin + slice);
        const int n_steps = (k_end - k_begin) / ts::kW4TileStep;
        const unsigned short *xlo = reinterpret_cast<const unsigned short *>(x) + (int64_t)min(g, m - 1) * k + 8 * t;
        const unsigned short *xhi = reinterpret_cast<const unsigned short *>(x) + (int64_t)min(g + 8, m - 1) * k + 8 * t;
        const bool has_lo = g < m, has_hi = HI && g + 8 < m;

        /* The item's steps are 64 pieces of 16 bytes apart: a lane's two are 512 bytes apart. */
        const uint4 *cp = codes + ((int64_t)tile * steps + k_begin / ts::kW4TileStep) * 64;
        uint4 rlo[kAhead], rhi[kAhead]; /* the ring: step s in slot s % kAhead (unrolled: no moves) */
#pragma unroll
        for (int h = 0; h < kAhead; ++h)
            if (h < n_steps) rlo[h] = w4_load_stream(cp + 64 * h + lane), rhi[h] = w4_load_stream(cp + 64 * h + 32 + lane);

        int grp = k_begin / group_size, g_end = (grp + 1) * group_size;
        const int64_t gstride = (int64_t)tiles * 8; /* one group's pieces (uint4 scales, uint2 zeros) */
        const int64_t gi = (int64_t)grp * gstride + tile * 8 + g;
        uint32_t sp[8];
        scale_pairs(sp, __ldg(scales + gi));
        uint2 z_cur = __ldg(zeros + gi);
        uint4 s_next = make_uint4(0, 0, 0, 0);
        uint2 z_next = make_uint2(0, 0);
        if (g_end < k_end) s_next = __ldg(scales + gi + gstride), z_next = __ldg(zeros + gi + gstride);

        uint4 xl_next = w4_load_x8(xlo, k_begin, has_lo, xvec);
        uint4 xh_next = HI ? w4_load_x8(xhi, k_begin, has_hi, xvec) : make_uint4(0, 0, 0, 0);

        float acc[4][4], acc_hi[HI ? 4 : 1][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < (HI ? 4 : 1); ++j) acc_hi[j][0] = acc_hi[j][1] = acc_hi[j][2] = acc_hi[j][3] = 0.0f;

#pragma unroll 1
        for (int s0 = 0; s0 < n_steps; s0 += kAhead) {
#pragma unroll
          for (int h = 0; h < kAhead; ++h) {
            const int s = s0 + h;
            if (s >= n_steps) break;
            const int ks = k_begin + s * ts::kW4TileStep;
            const uint4 lo = rlo[h], hi = rhi[h];
            if (s + kAhead < n_steps)
                rlo[h] = w4_load_stream(cp + 64 * (s + kAhead) + lane), rhi[h] = w4_load_stream(cp + 64 * (s + kAhead) + 32 + lane);
            const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};

            const uint4 xl = xl_next, xh = xh_next;
            {
                const int kn = ks + ts::kW4TileStep;
                xl_next = w4_load_x8(xlo, kn, has_lo && kn < k_end, xvec);
                if (HI) xh_next = w4_load_x8(xhi, kn, has_hi && kn < k_end, xvec);
            }
            if (ks >= g_end) { /* the next group (steps of 32 land on its first row) */
                scale_pairs(sp, s_next);
                z_cur = z_next;
                ++grp;
                g_end += group_size;
                if (g_end < k_end) {
                    const int64_t gn = (int64_t)(grp + 1) * gstride + tile * 8 + g;
                    s_next = __ldg(scales + gn), z_next = __ldg(zeros + gn);
                }
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j0 = 2 * jj, j1 = 2 * jj + 1;
                const uint32_t v0 = w[j0], v1 = w[j1];
                const uint32_t z0 = zero_pair<T>(z_cur, j0), z1 = zero_pair<T>(z_cur, j1);
#pragma unroll
                for (int s2 = 0; s2 < 2; ++s2) {
                    /* pairs 2 s2 (rows 4 s2 + 0, 1) and 2 s2 + 1 (rows 4 s2 + 2, 3) of both words */
                    const int sh = 8 * s2;
                    const uint32_t a0 = w4_dequant2<T>(w4_nibble_pair(v0 >> sh, magic), z0, sp[j0]);
                    const uint32_t a1 = w4_dequant2<T>(w4_nibble_pair(v1 >> sh, magic), z1, sp[j1]);
                    const uint32_t a2 = w4_dequant2<T>(w4_nibble_pair(v0 >> (sh + 4), magic), z0, sp[j0]);
                    const uint32_t a3 = w4_dequant2<T>(w4_nibble_pair(v1 >> (sh + 4), magic), z1, sp[j1]);
                    ts::mma16816<T>(acc[jj], a0, a1, a2, a3, s2 ? xl.z : xl.x, s2 ? xl.w : xl.y);
                    if (HI) ts::mma16816<T>(acc_hi[HI ? jj : 0], a0, a1, a2, a3, s2 ? xh.z : xh.x, s2 ? xh.w : xh.y);
                }
            }
          }
        }
        /* acc[jj][i]: column 16jj + g (i < 2) or 16jj + 8 + g, token 2t + (i & 1) (acc_hi: + 8). */
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
            for (int i = 0; i < (HI ? 8 : 4); ++i) {
                const int r = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
                const int c = tile * ts::kW4TileCols + 16 * jj + g + ((i & 2) ? 8 : 0);
                const float v = i < 4 ? acc[jj][i] : acc_hi[HI ? jj : 0][i & 3];
                if (r < m && c < n) {
                    if (splits > 1)
                        partial[(int64_t)split * m * n + (int64_t)r * n + c] = v;
                    else
                        out[(int64_t)r * n + c] = ts::from_float<T>(v);
                }
            }
        }
    }
}

/* W [n, k] in T from the tiled weight, a thread a word: column 64 tile + 8j + g, rows
 * 32 step + 8t .. + 7 (16 contiguous bytes of W's row). */
template <typename T>
__global__ void __launch_bounds__(256) w4a16_tiled_dequant_kernel(T *w, const uint32_t *codes, const T *scales,
                                                                  const uint8_t *zeros, int n, int k, int group_size,
                                                                  int64_t words) {
    ts::pdl_wait();
    const int steps = k / ts::kW4TileStep;
    const int64_t tiles = words / ((int64_t)steps * ts::kW4StepWords);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x) {
        const int wi = (int)(i & 255), lane = (wi >> 2) & 31, gl = lane >> 2, j = (wi >> 7) * 4 + (wi & 3);
        const int64_t ts_ = i >> 8;
        const int step = (int)(ts_ % steps), tile = (int)(ts_ / steps);
        const int c = tile * ts::kW4TileCols + 8 * j + gl;
        if (c >= n) continue;
        const int r0 = step * ts::kW4TileStep + 8 * (lane & 3);
        const int64_t gi = ((int64_t)(r0 / group_size) * tiles + tile) * ts::kW4TileCols + 8 * gl + j;
        const float s = ts::to_float(scales[gi]);
        const int z = zeros[gi];
        const uint32_t v = codes[i];
        alignas(16) T row[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int nib = (e & 1) ? 4 + e / 2 : e / 2;
            row[e] = ts::from_float<T>((float)((int)((v >> (4 * nib)) & 0xF) - z) * s);
        }
        *reinterpret_cast<uint4 *>(w + (int64_t)c * k + r0) = *reinterpret_cast<const uint4 *>(row);
    }
}

template <bool HI, typename T>
int resident_warps() {
    static std::atomic<int> cached{0};
    int w = cached.load();
    if (w > 0) return w;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, w4a16_tiled_decode_kernel<HI, T>, kThreads, 0) !=
            cudaSuccess ||
        blocks < 1) {
        (void)cudaGetLastError();
        blocks = 1;
    }
    w = blocks * kWarps * ts::sm_count();
    cached.store(w);
    return w;
}

template <typename T>
int launch_decode(const char *op, T *out, const T *x, const char *tiled, const ts::W4Tiled &lay,
                  const ts_w4a16_config &c, cudaStream_t stream) {
    const int resident = c.m > 8 ? resident_warps<true, T>() : resident_warps<false, T>();
    const int tiles = (int)lay.tiles;
    const int64_t blocks = ts::ceil_div(c.k, kBlock);
    const int want = ts::splitk_count(tiles, blocks, ts::kW4TileCols * kBlock / 2.0, (double)c.m * c.n, resident, 1.0);
    const int slice = (int)ts::ceil_div(blocks, want) * kBlock;
    const int splits = (int)ts::ceil_div(c.k, slice);
    void *part = nullptr;
    if (splits > 1) TS_CHECK(op, ts::workspace(op, ts::WS_GEMM, (size_t)splits * c.m * c.n * sizeof(float), &part));
    float *partial = static_cast<float *>(part);
    const int64_t items = (int64_t)tiles * splits;
    const unsigned grid = (unsigned)std::min<int64_t>(ts::ceil_div(items, kWarps), resident / kWarps);
    const char *d = ts::dims("m=%d n=%d k=%d group=%d format=tiled slice=%d splits=%d in=%s", c.m, c.n, c.k,
                             c.group_size, slice, splits, ts::Storage<T>::name);
    const auto *codes = reinterpret_cast<const uint4 *>(tiled);
    const auto *scales = reinterpret_cast<const uint4 *>(tiled + lay.scales_offset());
    const auto *zeros = reinterpret_cast<const uint2 *>(tiled + lay.zeros_offset());
    auto run = [&](auto kernel) {
        TS_LAUNCH(op, kernel, grid, kThreads, 0, stream, d, out, partial, x, codes, scales, zeros, c.m, c.n, c.k,
                  c.group_size, slice, tiles, splits);
        return (int)TS_OK;
    };
    TS_CHECK(op, c.m > 8 ? run(w4a16_tiled_decode_kernel<true, T>) : run(w4a16_tiled_decode_kernel<false, T>));
    return splits == 1 ? TS_OK : w4a16_launch_reduce(op, out, partial, c.m, c.n, splits, stream);
}

template <typename T>
int launch_prefill(const char *op, T *out, const T *x, const char *tiled, const ts::W4Tiled &lay,
                   const ts_w4a16_config &c, cudaStream_t stream) {
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_W4A16, (size_t)c.n * c.k * sizeof(T), &ws));
    T *w = static_cast<T *>(ws);
    const int64_t words = (int64_t)(lay.codes_bytes / 4);
    const char *d = ts::dims("n=%d k=%d group=%d format=tiled in=%s", c.n, c.k, c.group_size, ts::Storage<T>::name);
    auto kernel = w4a16_tiled_dequant_kernel<T>;
    TS_LAUNCH(op, kernel, ts::grid_for(words, 256), 256, 0, stream, d, w, reinterpret_cast<const uint32_t *>(tiled),
              reinterpret_cast<const T *>(tiled + lay.scales_offset()),
              reinterpret_cast<const uint8_t *>(tiled + lay.zeros_offset()), c.n, c.k, c.group_size, words);
    return ts::gemm_nt(op, out, false, x, static_cast<const T *>(w), static_cast<const T *>(nullptr), c.m, c.n, c.k,
                       stream);
}

} // namespace

namespace ts {
int launch_gemm_w4a16_tiled(const char *op, void *out, const void *x, const void *tiled, const ts_w4a16_config &c,
                            cudaStream_t stream) {
    const W4Tiled lay(c.n, c.k, c.group_size, 2);
    const auto *base = static_cast<const char *>(tiled);
    return with_storage(c.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return c.m <= 16 ? launch_decode<T>(op, static_cast<T *>(out), static_cast<const T *>(x), base, lay, c, stream)
                         : launch_prefill<T>(op, static_cast<T *>(out), static_cast<const T *>(x), base, lay, c, stream);
    });
}
} // namespace ts
