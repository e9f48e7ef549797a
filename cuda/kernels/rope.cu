/*
 * rope: rotary position embedding on x [tokens, heads, head_dim], NeoX / HF rotate_half
 * pairing: for i < rope_dim/2, angle = positions[t] * freq_base^(-2i/rope_dim) and
 * (x_i, x_{i+rope_dim/2}) -> (x_i cos - x_{i+r/2} sin, x_{i+r/2} cos + x_i sin); dims >= rope_dim
 * pass through (copied only when out != x). RoPE scaling (llama3, YaRN, LongRoPE) divides each pair's
 * inverse frequency by the caller's fp32 divisor table (LongRoPE's long table from position long_from
 * on) and multiplies the rotated pair by attention_factor; the engine computes the tables once per
 * model from its config (engine/model/ropescale.go).
 *
 * x and out in the storage type T (fp16 or bf16, the kernel's last template argument): fp32 math,
 * one rounding to T per output; the pass-through dims are copied bit for bit.
 *
 * One block per token. The token's cos/sin for each pair i are computed once into shared memory
 * and applied to every head. The angle is exact to ~1e-7 rad at every position an int32 can
 * hold: pos * inv_freq reaches 1.3e5 rad at position 131072, where an fp32 product is already
 * 2^-24 * 1.3e5 = 8e-3 rad off (and sincosf of such an argument takes its slow path), enough to
 * fail the golden cases past position ~2^14. So inv_freq_i = r^i with r = freq_base^(-2/rope_dim)
 * computed once on the host in double and passed by value (r^i by binary powering: at most 13
 * double multiplies, no transcendental on the device; relative error ~(i + 13) double ulps: 6e-8
 * rad at i = 4096 and position 2^17), the angle is
 * (double)pos * inv_freq_i, reduced to [-pi, pi] by one double fma with 2*pi (k <= 2e4 for
 * positions <= 2^17: the reduction is off by < 1e-11 rad), and only then sincosf in fp32 on the
 * reduced angle (a few fp32 ulps, ~2e-7 rad). The previous kernel (a thread per pair: powf +
 * sincosf for every (head, pair), 64-bit index divisions, 2-byte accesses) reached 18% of copy
 * bandwidth on the H200 at 4096 tokens x 32 heads x 128; the table kernel 73-74%. Vector path
 * (rope_dim/2 and head_dim multiples of 8, 16-byte aligned pointers, rope_dim <= 2 kTablePairs):
 * a work item is 8 consecutive pairs of one head, two 16-byte loads and stores; the first item's
 * loads are issued before the table is computed. Otherwise one pair per item, scalar; there,
 * pairs beyond kTablePairs (rope dims over 8192) compute their angle inline. out may equal x: an
 * item reads both halves of its pairs before writing them. A negative position is recorded in
 * the fault record (TS_ERR_INDEX at the next ts_synchronize / ts_copy_to_host) and its token
 * skipped.
 */
#include <algorithm>
#include <cmath>

#include "internal.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTablePairs = 4096; /* 32 KB of cos/sin in shared memory */

/* The token's divisor table: LongRoPE's long factors from long_from on, else the (short) table;
 * NULL when the RoPE is unscaled. */
__device__ __forceinline__ const float *rope_divisors(int pos, const float *div, const float *long_div,
                                                      int long_from) {
    return long_div != nullptr && pos >= long_from ? long_div : div;
}

/* factor * cos/sin of pos * ratio^i / div_i, ratio = freq_base^(-2/rope_dim) (see the header
 * comment). The divisor is an fp32 input taken exactly: the quotient is formed in double, so
 * scaling costs the angle no precision. */
__device__ __forceinline__ void rope_angle(int pos, int i, double ratio, const float *div, float factor, float *s,
                                           float *c) {
    double inv_freq = 1.0, p = ratio;
    for (int e = i; e != 0; e >>= 1) {
        if (e & 1) inv_freq *= p;
        p *= p;
    }
    if (div != nullptr) inv_freq /= (double)div[i];
    const double angle = (double)pos * inv_freq;
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double reduced = fma(-rint(angle * (1.0 / kTwoPi)), kTwoPi, angle);
    float sn, cs;
    sincosf((float)reduced, &sn, &cs);
    *s = sn * factor;
    *c = cs * factor;
}

/* At least 6 blocks of 256 per SM (<= 42 registers): the powf / sincosf code would otherwise take
 * 52 registers and hold the SM to 4 blocks (32 KB of loads in flight); at 8 (32 registers) the
 * item loop spills. */
template <bool VEC, typename T>
__global__ void __launch_bounds__(kThreads, 6)
    rope_kernel(T *out, const T *x, const int32_t *positions, int heads, int head_dim, int rope_half,
                double ratio, const float *div_short, const float *div_long, int long_from, float factor,
                ts::FaultRecord *fault) {
    ts::pdl_wait();
    extern __shared__ float table_s[]; /* cos, then sin, of min(rope_half, kTablePairs) pairs */
    const int t = blockIdx.x;
    const int pos = positions[t];
    auto bad_position = [&]() {
        if (pos >= 0) return false;
        if (threadIdx.x == 0) ts::report_fault(fault, ts::FAULT_ROPE_POSITION, t, pos, 0);
        return true;
    };
    const int rope_dim = 2 * rope_half;
    const int64_t tok = (int64_t)t * heads * head_dim;
    const T *xt = x + tok;
    T *ot = out + tok;
    const int table = min(rope_half, kTablePairs);
    float *cos_s = table_s, *sin_s = table_s + table;

    if (VEC) {
        const int rvec = rope_half / 8;                             /* rotated items per head */
        const int pvec = out != x ? (head_dim - rope_dim) / 8 : 0; /* pass-through items per head */
        const int per_head = rvec + pvec;
        const int items = heads * per_head;
        int it = threadIdx.x;
        uint4 a = make_uint4(0, 0, 0, 0), b = a;
        auto load = [&](int item) {
            const int h = item / per_head, j = item - h * per_head;
            const T *xh = xt + (int64_t)h * head_dim;
            if (j < rvec) {
                a = *reinterpret_cast<const uint4 *>(xh + 8 * j);
                b = *reinterpret_cast<const uint4 *>(xh + rope_half + 8 * j);
            } else {
                a = *reinterpret_cast<const uint4 *>(xh + rope_dim + 8 * (j - rvec));
            }
        };
        if (it < items) load(it); /* in flight while the position arrives and the table is computed */
        if (bad_position()) return;
        const float *div = rope_divisors(pos, div_short, div_long, long_from);
        for (int i = threadIdx.x; i < table; i += blockDim.x)
            rope_angle(pos, i, ratio, div, factor, &sin_s[i], &cos_s[i]);
        __syncthreads();
        while (it < items) {
            const int h = it / per_head, j = it - h * per_head;
            T *oh = ot + (int64_t)h * head_dim;
            if (j < rvec) {
                float va[8], vb[8];
                ts::unpack8<T>(a, va);
                ts::unpack8<T>(b, vb);
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const float cs = cos_s[8 * j + k], sn = sin_s[8 * j + k];
                    const float ra = va[k] * cs - vb[k] * sn;
                    vb[k] = vb[k] * cs + va[k] * sn;
                    va[k] = ra;
                }
                *reinterpret_cast<uint4 *>(oh + 8 * j) = ts::pack8<T>(va);
                *reinterpret_cast<uint4 *>(oh + rope_half + 8 * j) = ts::pack8<T>(vb);
            } else {
                *reinterpret_cast<uint4 *>(oh + rope_dim + 8 * (j - rvec)) = a;
            }
            it += blockDim.x;
            if (it < items) load(it);
        }
    } else {
        if (bad_position()) return;
        const float *div = rope_divisors(pos, div_short, div_long, long_from);
        for (int i = threadIdx.x; i < table; i += blockDim.x)
            rope_angle(pos, i, ratio, div, factor, &sin_s[i], &cos_s[i]);
        __syncthreads();
        const int half_dim = head_dim / 2; /* items per head: rope_half pairs, then pass-through dim pairs */
        const int items = heads * half_dim;
        for (int it = threadIdx.x; it < items; it += blockDim.x) {
            const int h = it / half_dim, j = it - h * half_dim;
            const int64_t base = (int64_t)h * head_dim;
            if (j < rope_half) {
                float sn, cs;
                if (j < kTablePairs) {
                    sn = sin_s[j];
                    cs = cos_s[j];
                } else {
                    rope_angle(pos, j, ratio, div, factor, &sn, &cs);
                }
                const float a = ts::to_float(xt[base + j]);
                const float b = ts::to_float(xt[base + j + rope_half]);
                ot[base + j] = ts::from_float<T>(a * cs - b * sn);
                ot[base + j + rope_half] = ts::from_float<T>(b * cs + a * sn);
            } else if (out != x) {
                const int64_t k = base + rope_dim + 2 * (j - rope_half);
                ot[k] = xt[k];
                ot[k + 1] = xt[k + 1];
            }
        }
    }
}

template <typename T>
int launch_rope(T *out, const T *x, const int32_t *positions, const ts_rope_config *cfg, cudaStream_t stream) {
    const int tokens = cfg->tokens, heads = cfg->heads, head_dim = cfg->head_dim, rope_dim = cfg->rope_dim;
    const float freq_base = cfg->freq_base;
    const int long_from = cfg->long_divisor != nullptr ? cfg->long_from : 0;
    const char *op = "rope";
    const int rope_half = rope_dim / 2;
    const bool vec = rope_half % 8 == 0 && head_dim % 8 == 0 && rope_half <= kTablePairs && ts::aligned16(out) &&
                     ts::aligned16(x);
    const int64_t items = vec ? (int64_t)heads * (head_dim - rope_half) / 8 : (int64_t)heads * (head_dim / 2);
    const int threads = items >= kThreads ? kThreads : ts::round_up((int)items, 32);
    const size_t smem = 2 * sizeof(float) * (size_t)std::min(rope_half, kTablePairs);
    /* inv_freq_i = ratio^i: the one transcendental of the op, in double, once per launch. */
    const double ratio = std::pow((double)freq_base, -2.0 / (double)rope_dim);
    const char *d = ts::dims("tokens=%d heads=%d head_dim=%d rope_dim=%d freq_base=%g scaled=%d long_from=%d "
                             "attention_factor=%g inplace=%d vec=%d",
                             tokens, heads, head_dim, rope_dim, freq_base, (int)(cfg->freq_divisor != nullptr),
                             cfg->long_divisor != nullptr ? long_from : -1, cfg->attention_factor, (int)(out == x),
                             (int)vec);
    if (vec) {
        auto kernel = rope_kernel<true, T>;
        TS_LAUNCH(op, kernel, tokens, threads, smem, stream, d, out, x, positions, heads, head_dim, rope_half,
                  ratio, cfg->freq_divisor, cfg->long_divisor, long_from, cfg->attention_factor, ts::fault_record());
    } else {
        auto kernel = rope_kernel<false, T>;
        TS_LAUNCH(op, kernel, tokens, threads, smem, stream, d, out, x, positions, heads, head_dim, rope_half,
                  ratio, cfg->freq_divisor, cfg->long_divisor, long_from, cfg->attention_factor, ts::fault_record());
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_rope(void *out, const void *x, const int32_t *positions, const ts_rope_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("rope");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(positions, "positions");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->tokens, "cfg->tokens");
    v.positive(cfg->heads, "cfg->heads");
    v.positive(cfg->head_dim, "cfg->head_dim");
    v.positive(cfg->rope_dim, "cfg->rope_dim");
    if (v.ok() && cfg->head_dim % 2 != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->head_dim = %d: must be even", cfg->head_dim);
    if (v.ok() && cfg->rope_dim % 2 != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->rope_dim = %d: must be even and <= head_dim (%d)", cfg->rope_dim,
               cfg->head_dim);
    if (v.ok() && cfg->rope_dim > cfg->head_dim)
        v.fail(TS_ERR_SHAPE_MISMATCH, "cfg->rope_dim = %d: must be even and <= head_dim (%d)", cfg->rope_dim,
               cfg->head_dim);
    if (v.ok() && (!(cfg->freq_base > 1.0f) || !std::isfinite(cfg->freq_base)))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->freq_base = %g: must be finite and > 1", cfg->freq_base);
    if (v.ok() && (!(cfg->attention_factor > 0.0f) || !std::isfinite(cfg->attention_factor)))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->attention_factor = %g: must be finite and > 0 (1: unscaled)",
               cfg->attention_factor);
    if (v.ok() && cfg->long_divisor != nullptr && cfg->long_from < 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->long_from = %d: must be >= 0 with a long_divisor table", cfg->long_from);
    v.elements("x", {cfg->tokens, cfg->heads, cfg->head_dim});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_rope(static_cast<T *>(out), static_cast<const T *>(x), positions, cfg, st);
    });
}
