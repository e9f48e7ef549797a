/*
 * w4a16_tile: an AWQ or GPTQ 4-bit weight rewritten in the library's tiled layout (TS_W4_TILED,
 * cuda/w4a16_tiled.cuh), once at load time, for gemm_w4a16's tiled gemv. A copy: every code,
 * scale and zero point lands unchanged (GPTQ's stored z - 1 as z), so the tiled GEMM computes the
 * contract's weights bit for bit; the kernel suite checks it through gemm_w4a16's golden cases.
 */
#include "internal.h"
#include "w4a16.cuh"
#include "w4a16_tiled.cuh"

namespace {

/* The zero point of column c in group g (z itself: GPTQ stores z - 1). */
template <int FORMAT>
__device__ __forceinline__ int zero_of(const int32_t *qzeros, int64_t g, int c, int n) {
    const int32_t w = qzeros[g * (n / 8) + c / 8];
    return FORMAT == TS_W4_AWQ ? w4_code(w, w4_awq_nibble(c)) : w4_code(w, c & 7) + 1;
}

/* One thread a word of codes, in the layout's order: (tile, step, half, lane, j % 4) (threads of
 * a lane's four words read consecutive AWQ words of a row, or GPTQ columns 8 apart). */
template <int FORMAT>
__global__ void __launch_bounds__(256) w4a16_tile_codes_kernel(uint32_t *codes, const int32_t *qweight, int n, int k,
                                                               int64_t words) {
    ts::pdl_wait();
    const int steps = k / ts::kW4TileStep;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x) {
        const int w = (int)(i & 255), lane = (w >> 2) & 31, j = (w >> 7) * 4 + (w & 3);
        const int64_t ts_ = i >> 8; /* tile * steps + step */
        const int step = (int)(ts_ % steps), tile = (int)(ts_ / steps);
        const int c = tile * ts::kW4TileCols + 8 * j + (lane >> 2);
        const int r0 = step * ts::kW4TileStep + 8 * (lane & 3);
        uint32_t out = 0;
        if (c < n) {
            int q[8];
            if constexpr (FORMAT == TS_W4_AWQ) {
                const int nib = w4_awq_nibble(c);
#pragma unroll
                for (int e = 0; e < 8; ++e) q[e] = w4_code(qweight[(int64_t)(r0 + e) * (n / 8) + c / 8], nib);
            } else {
                const int32_t w = qweight[(int64_t)(r0 / 8) * n + c]; /* nibble e is row r0 + e */
#pragma unroll
                for (int e = 0; e < 8; ++e) q[e] = w4_code(w, e);
            }
#pragma unroll
            for (int i2 = 0; i2 < 4; ++i2) out |= (uint32_t)q[2 * i2] << (4 * i2) | (uint32_t)q[2 * i2 + 1] << (4 * i2 + 16);
        }
        codes[i] = out;
    }
}

/* One thread a (group, tile, g, j): its column's scale (T bits) and zero point. */
template <int FORMAT>
__global__ void __launch_bounds__(256) w4a16_tile_groups_kernel(uint16_t *scales_t, uint8_t *zeros_t,
                                                                const int32_t *qzeros, const uint16_t *scales, int n,
                                                                int64_t tiles, int64_t total) {
    ts::pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int j = (int)(i & 7), g = (int)((i >> 3) & 7);
        const int64_t gt = i >> 6; /* group * tiles + tile */
        const int64_t grp = gt / tiles;
        const int c = (int)(gt % tiles) * ts::kW4TileCols + 8 * j + g;
        const bool in = c < n;
        scales_t[i] = in ? scales[grp * n + c] : (uint16_t)0;
        zeros_t[i] = in ? (uint8_t)zero_of<FORMAT>(qzeros, grp, c, n) : (uint8_t)0;
    }
}

template <int FORMAT>
int launch_tile(const char *op, void *tiled, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                const ts_w4a16_config &c, cudaStream_t stream) {
    const ts::W4Tiled lay(c.n, c.k, c.group_size, 2);
    auto *base = static_cast<char *>(tiled);
    const int64_t words = (int64_t)(lay.codes_bytes / 4);
    const char *d = ts::dims("n=%d k=%d group=%d format=%d tiles=%lld", c.n, c.k, c.group_size, c.format,
                             (long long)lay.tiles);
    auto codes = w4a16_tile_codes_kernel<FORMAT>;
    TS_LAUNCH(op, codes, ts::grid_for(words, 256), 256, 0, stream, d, reinterpret_cast<uint32_t *>(base), qweight,
              c.n, c.k, words);
    const int64_t total = lay.groups * lay.tiles * ts::kW4TileCols;
    auto groups = w4a16_tile_groups_kernel<FORMAT>;
    TS_LAUNCH(op, groups, ts::grid_for(total, 256), 256, 0, stream, d,
              reinterpret_cast<uint16_t *>(base + lay.scales_offset()),
              reinterpret_cast<uint8_t *>(base + lay.zeros_offset()), qzeros, static_cast<const uint16_t *>(scales),
              c.n, lay.tiles, total);
    return TS_OK;
}

/* The checks both entry points share: a source format and sizes the tiled layout can hold. */
void check_tileable(ts::Validator &v, const ts_w4a16_config *cfg, bool source) {
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->n, "cfg->n");
    v.positive(cfg->k, "cfg->k");
    v.positive(cfg->group_size, "cfg->group_size");
    if (!v.ok()) return;
    if (source && cfg->format != TS_W4_AWQ && cfg->format != TS_W4_GPTQ)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->format = %d: want the source packing, TS_W4_AWQ (0) or TS_W4_GPTQ (1)",
               cfg->format);
    else if (cfg->k % cfg->group_size != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->group_size = %d: must divide cfg->k = %d", cfg->group_size, cfg->k);
    else if (cfg->n % 8 != 0)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->n = %d: must be a multiple of 8 (8 codes a word)", cfg->n);
    else if (cfg->k % ts::kW4TileStep != 0 || cfg->group_size % ts::kW4TileStep != 0)
        v.fail(TS_ERR_UNSUPPORTED,
               "cfg->k = %d, cfg->group_size = %d: the tiled layout needs both multiples of 32 (keep the packed format)",
               cfg->k, cfg->group_size);
}

} // namespace

namespace ts {
void check_w4a16_tileable(Validator &v, const ts_w4a16_config *cfg) { check_tileable(v, cfg, false); }
} // namespace ts

extern "C" int ts_w4a16_tiled_bytes(const ts_w4a16_config *cfg, size_t *bytes) {
    TS_STICKY_GUARD();
    ts::Validator v("w4a16_tile");
    v.ptr(cfg, "cfg");
    v.ptr(bytes, "bytes");
    if (!v.ok()) return v.status();
    check_tileable(v, cfg, false);
    if (!v.ok()) return v.status();
    *bytes = ts::W4Tiled(cfg->n, cfg->k, cfg->group_size, 2).bytes();
    return TS_OK;
}

extern "C" int ts_w4a16_tile(void *tiled, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                             const ts_w4a16_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("w4a16_tile");
    v.ptr(tiled, "tiled");
    v.ptr(qweight, "qweight");
    v.ptr(qzeros, "qzeros");
    v.ptr(scales, "scales");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    check_tileable(v, cfg, true);
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return cfg->format == TS_W4_AWQ ? launch_tile<TS_W4_AWQ>(v.op(), tiled, qweight, qzeros, scales, *cfg, st)
                                    : launch_tile<TS_W4_GPTQ>(v.op(), tiled, qweight, qzeros, scales, *cfg, st);
}
