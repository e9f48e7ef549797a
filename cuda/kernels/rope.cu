/*
 * rope: rotary position embedding on x [tokens, heads, head_dim], NeoX / HF rotate_half
 * pairing: for i < rope_dim/2, angle = positions[t] * freq_base^(-2i/rope_dim) and
 * (x_i, x_{i+rope_dim/2}) -> (x_i cos - x_{i+r/2} sin, x_{i+r/2} cos + x_i sin); dims >= rope_dim
 * pass through. One thread per pair of a head (head_dim/2 pairs: the rope_dim/2 rotated ones,
 * then the pass-through dims two at a time, copied only when out != x), grid-stride. fp32 math:
 * inv_freq = powf(freq_base, -2i/rope_dim), angle = (float)pos * inv_freq, sincosf (not the
 * __sinf intrinsics: angles reach thousands of radians). out may equal x: a thread reads both
 * elements of its pair before writing them. A negative position is recorded in the fault
 * record (TS_ERR_INDEX at the next ts_synchronize / ts_copy_to_host) and its token skipped.
 */
#include <cmath>

#include "internal.h"

namespace {

__global__ void __launch_bounds__(256)
    rope_kernel(__half *out, const __half *x, const int32_t *positions, int64_t pairs, int heads, int half_dim,
                int rope_half, int rope_dim, float freq_base, ts::FaultRecord *fault) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += stride) {
        const int64_t row = p / half_dim; /* token * heads + head */
        const int j = (int)(p - row * half_dim);
        const int t = (int)(row / heads);
        const int pos = positions[t];
        if (pos < 0) {
            if (j == 0 && row % heads == 0) ts::report_fault(fault, ts::FAULT_ROPE_POSITION, t, pos, 0);
            continue;
        }
        const int64_t base = row * (int64_t)(2 * half_dim);
        if (j < rope_half) {
            const float inv_freq = powf(freq_base, -(float)(2 * j) / (float)rope_dim);
            const float angle = (float)pos * inv_freq;
            float s, c;
            sincosf(angle, &s, &c);
            const float a = __half2float(x[base + j]);
            const float b = __half2float(x[base + j + rope_half]);
            out[base + j] = __float2half_rn(a * c - b * s);
            out[base + j + rope_half] = __float2half_rn(b * c + a * s);
        } else if (out != x) {
            const int64_t k = base + rope_dim + 2 * (j - rope_half);
            out[k] = x[k];
            out[k + 1] = x[k + 1];
        }
    }
}

int launch_rope(__half *out, const __half *x, const int32_t *positions, int tokens, int heads, int head_dim,
                int rope_dim, float freq_base, cudaStream_t stream) {
    const char *op = "rope";
    const int64_t pairs = (int64_t)tokens * heads * (head_dim / 2);
    const int threads = 256;
    const unsigned grid = ts::grid_for(pairs, threads);
    const char *d = ts::dims("tokens=%d heads=%d head_dim=%d rope_dim=%d freq_base=%g inplace=%d", tokens, heads,
                             head_dim, rope_dim, freq_base, (int)(out == x));
    auto kernel = rope_kernel;
    TS_LAUNCH(op, kernel, grid, threads, 0, stream, d, out, x, positions, pairs, heads, head_dim / 2, rope_dim / 2,
              rope_dim, freq_base, ts::fault_record());
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
    v.dtype_f16(cfg->dtype, "cfg->dtype");
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
    v.elements("x", {cfg->tokens, cfg->heads, cfg->head_dim});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_rope(static_cast<__half *>(out), static_cast<const __half *>(x), positions, cfg->tokens,
                       cfg->heads, cfg->head_dim, cfg->rope_dim, cfg->freq_base, st);
}
