/*
 * moe_ffn: the expert block of a mixture-of-experts layer after its router (touchstone.h states
 * the contract): out[t] = sum_j weights[t, j] * down[e] (silu(g) * u), e = ids[t, j], g and u the
 * gate and up rows of gate_up[e] times x[t].
 *
 * Four steps, all on the device (a captured decode step replays them with new ids):
 *  1. moe_count_kernel: a warp per expert counts the (token, j) choices of it with a ballot over
 *     ids; block 0 also checks every id (outside [0, experts): the fault record, TS_ERR_INDEX).
 *  2. moe_permute_kernel: a warp per expert sums the counts below its own (its offset into the
 *     expert-sorted rows), walks ids again in order and gives each choice its sorted row (a
 *     ballot's prefix count: token order within an expert, as torch's loop over experts takes
 *     them) and the inverse map (choice -> sorted row), and lists the expert's row tiles of BM
 *     rows for the GEMMs (each tile within one expert; tile i of the list is (expert, first row)).
 *  3. 16-row tiles (decode: fewer than 16 choices an expert on average): moe_gemv_kernel<GLU>, a
 *     warp per output column of the tile's expert over every row of the tile (below); 64-row
 *     tiles (prefill): moe_grouped_gemm_kernel<GLU>, one block per (row tile, 64 output
 *     columns), tensor cores (wmma m16n16k16, fp32 accumulation) over the tile's expert's weight.
 *     Either: GLU, the gate and up rows of gate_up[e] times the tile's rows of x gathered by
 *     token, gate and up each rounded to the storage type, silu(g) * u rounded again, into the
 *     workspace act [rows, ffn]; else act times down[e], rounded, into y [rows, hidden]. Blocks
 *     past the list's length return.
 *  4. moe_combine_kernel: a block per token sums weights[t, j] * y[inverse[t, j]] over j in fp32
 *     and rounds once.
 * Each expert's weights are read once per row tile: at decode, where an expert has a row or two,
 * a step reads the chosen experts' weights about once (the floor). Needs hidden and ffn % 8 == 0 and x,
 * gate_up, down 16-byte aligned (16-byte loads); anything else is TS_ERR_UNSUPPORTED.
 */
#include "internal.h"

#include <mma.h>

namespace {

constexpr int kMoEThreads = 128; /* 4 warps: warp w owns output columns 16w..16w+15 of a tile */
constexpr int kBN = 64;
constexpr int kBK = 32;
constexpr int kCountWarps = 8;

__global__ void moe_count_kernel(int32_t *counts, const int32_t *ids, int choices, int experts,
                                 ts::FaultRecord *fault) {
    ts::pdl_wait();
    const int lane = threadIdx.x & 31;
    const int e = blockIdx.x * kCountWarps + (threadIdx.x >> 5);
    if (blockIdx.x == 0) {
        for (int i = threadIdx.x; i < choices; i += blockDim.x) {
            const int id = ids[i];
            if (id < 0 || id >= experts) ts::report_fault(fault, ts::FAULT_MOE_ID, i, id, experts);
        }
    }
    if (e >= experts) return;
    int n = 0;
    for (int base = 0; base < choices; base += 32) {
        const int i = base + lane;
        n += __popc(__ballot_sync(0xffffffffu, i < choices && ids[i] == e));
    }
    if (lane == 0) counts[e] = n;
}

/* tiles: [max_tiles][2] (expert, first sorted row); tiles_total[0]: the list's length. */
template <int BM>
__global__ void moe_permute_kernel(int32_t *sorted, int32_t *inverse, int32_t *tiles, int32_t *tiles_total,
                                   const int32_t *counts, const int32_t *ids, int choices, int experts) {
    ts::pdl_wait();
    const int lane = threadIdx.x & 31;
    const int e = blockIdx.x * kCountWarps + (threadIdx.x >> 5);
    if (e >= experts) return;
    int offset = 0, tile0 = 0;
    for (int i = lane; i < e; i += 32) {
        offset += counts[i];
        tile0 += (counts[i] + BM - 1) / BM;
    }
    offset = (int)ts::warp_sum((float)offset); /* exact: at most 2^24 rows */
    tile0 = (int)ts::warp_sum((float)tile0);
    const int n = counts[e];
    int seen = 0;
    for (int base = 0; base < choices && seen < n; base += 32) {
        const int i = base + lane;
        const bool mine = i < choices && ids[i] == e;
        const unsigned mask = __ballot_sync(0xffffffffu, mine);
        if (mine) {
            const int row = offset + seen + __popc(mask & ((1u << lane) - 1u));
            sorted[row] = i;
            inverse[i] = row;
        }
        seen += __popc(mask);
    }
    const int my_tiles = (n + BM - 1) / BM;
    for (int i = lane; i < my_tiles; i += 32) {
        tiles[2 * (tile0 + i)] = e;
        tiles[2 * (tile0 + i) + 1] = offset + i * BM;
    }
    if (e == experts - 1 && lane == 0) tiles_total[0] = tile0 + my_tiles;
}

/* 8 values of T from src (16-byte aligned) if the whole vector is inside [0, limit) along k,
 * else zeros (a row past the tile's expert, or k past the end: k % 8 == 0 keeps vectors whole). */
template <typename T>
__device__ __forceinline__ uint4 load_or_zero(const T *src, bool valid) {
    return valid ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
}

/* GLU: a [rows of x gathered by token] x gate_up[e]^T -> act = silu(g) * u; else act x down[e]^T
 * -> y. n_out: the output columns (ffn, or hidden); k: the reduction (hidden, or ffn). */
template <int BM, bool GLU, typename T>
__global__ void __launch_bounds__(kMoEThreads)
    moe_grouped_gemm_kernel(T *out, const T *a, const int32_t *sorted, const int32_t *tiles,
                            const int32_t *tiles_total, const int32_t *counts, const int32_t *offsets_unused,
                            const T *w, int top_k, int k, int n_out, int64_t expert_stride) {
    ts::pdl_wait();
    using namespace nvcuda;
    const int tile = blockIdx.x;
    if (tile >= tiles_total[0]) return;
    const int e = tiles[2 * tile], row0 = tiles[2 * tile + 1];
    (void)offsets_unused;
    constexpr int kMats = GLU ? 2 : 1;
    /* The k loop's tiles and the epilogue's fp32 tile share one buffer (a barrier between). */
    constexpr int kInBytes = (BM + kMats * kBN) * (kBK + 8) * (int)sizeof(T);
    constexpr int kOutBytes = kMats * BM * (kBN + 4) * (int)sizeof(float);
    __shared__ __align__(32) unsigned char smem[kInBytes > kOutBytes ? kInBytes : kOutBytes];
    __shared__ int rows_s[BM]; /* each tile row's source row in a (-1: past the expert) */
    __shared__ int expert_end_s;
    auto a_s = reinterpret_cast<T(*)[kBK + 8]>(smem);
    auto b_s = reinterpret_cast<T(*)[kBN][kBK + 8]>(smem + BM * (kBK + 8) * sizeof(T));
    auto c_s = reinterpret_cast<float(*)[BM][kBN + 4]>(smem);
    if (threadIdx.x == 0) {
        int end = 0;
        for (int i = 0; i <= e; ++i) end += counts[i];
        expert_end_s = end;
    }
    __syncthreads();
    for (int r = threadIdx.x; r < BM; r += blockDim.x) {
        const int row = row0 + r;
        rows_s[r] = row < expert_end_s ? (GLU ? sorted[row] / top_k : row) : -1;
    }
    __syncthreads();
    const int col0 = blockIdx.y * kBN;
    const T *we = w + (int64_t)e * expert_stride;
    /* GLU: gate rows [0, n_out) then up rows [n_out, 2 n_out) of the expert's [2 n_out, k]. */
    const int warp = threadIdx.x >> 5;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kMats][BM / 16];
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int i = 0; i < BM / 16; ++i) wmma::fill_fragment(acc[m][i], 0.0f);
    for (int k0 = 0; k0 < k; k0 += kBK) {
        for (int v = threadIdx.x; v < BM * (kBK / 8); v += blockDim.x) {
            const int r = v / (kBK / 8), c = (v % (kBK / 8)) * 8;
            const int src = rows_s[r];
            const bool ok = src >= 0 && k0 + c < k;
            *reinterpret_cast<uint4 *>(&a_s[r][c]) = load_or_zero(a + (int64_t)(ok ? src : 0) * k + k0 + c, ok);
        }
        for (int v = threadIdx.x; v < kMats * kBN * (kBK / 8); v += blockDim.x) {
            const int m = v / (kBN * (kBK / 8)), rem = v % (kBN * (kBK / 8));
            const int r = rem / (kBK / 8), c = (rem % (kBK / 8)) * 8;
            const bool ok = col0 + r < n_out && k0 + c < k;
            const int64_t wrow = (int64_t)m * n_out + (ok ? col0 + r : 0);
            *reinterpret_cast<uint4 *>(&b_s[m][r][c]) = load_or_zero(we + wrow * k + k0 + c, ok);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
#pragma unroll
            for (int m = 0; m < kMats; ++m) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
                wmma::load_matrix_sync(bf, &b_s[m][warp * 16][kk], kBK + 8);
#pragma unroll
                for (int i = 0; i < BM / 16; ++i) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af;
                    wmma::load_matrix_sync(af, &a_s[i * 16][kk], kBK + 8);
                    wmma::mma_sync(acc[m][i], af, bf, acc[m][i]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int i = 0; i < BM / 16; ++i)
            wmma::store_matrix_sync(&c_s[m][i * 16][warp * 16], acc[m][i], kBN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int v = threadIdx.x; v < BM * kBN; v += blockDim.x) {
        const int r = v / kBN, c = v % kBN;
        if (rows_s[r] < 0 || col0 + c >= n_out) continue;
        float val;
        if constexpr (GLU) {
            val = ts::silu_mul(ts::round_to<T>(c_s[0][r][c]), ts::round_to<T>(c_s[1][r][c]));
        } else {
            val = c_s[0][r][c];
        }
        out[(int64_t)(row0 + r) * n_out + col0 + c] = ts::from_float<T>(val);
    }
}

/* Decode (16-row tiles, a row or two an expert on average): the product is bound by the read of
 * the chosen experts' weights, which the tensor-core tiles stream too slowly (a block's 64 columns
 * of 14336-long rows, single-buffered, too few blocks at Mixtral's widths). Here a warp owns one
 * output column of the tile's expert (GLU: its gate row and its up row) and every row of the tile
 * at once: its lanes stream the weight row in 16-byte vectors, four in flight a lane, each
 * vector multiplied into the tile's rows of a (x gathered by token, or act), read as the same
 * vectors from L1 / L2 (a is small); fp32 accumulation, a shuffle reduction, lane 0 writes. The
 * roundings are the tensor-core kernel's: gate and up each to T, silu(g) * u to T; the down
 * product to T. */
constexpr int kDecodeBM = 16;
constexpr int kGemvWarpsMoE = 8;

template <bool GLU, typename T>
__device__ __forceinline__ void moe_gemv_fma(float (&g)[kDecodeBM], float (&u)[kDecodeBM], const uint4 &gv,
                                             const uint4 &uv, const T *a, const int *rows, int n, int k, int v) {
    float gf[8], uf[8];
    ts::unpack8<T>(gv, gf);
    if constexpr (GLU) ts::unpack8<T>(uv, uf);
#pragma unroll
    for (int m = 0; m < kDecodeBM; ++m) {
        if (m < n) {
            float af[8];
            ts::unpack8<T>(reinterpret_cast<const uint4 *>(a + (int64_t)rows[m] * k)[v], af);
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                g[m] = fmaf(gf[t], af[t], g[m]);
                if constexpr (GLU) u[m] = fmaf(uf[t], af[t], u[m]);
            }
        }
    }
}

template <bool GLU, typename T>
__global__ void __launch_bounds__(kGemvWarpsMoE * 32)
    moe_gemv_kernel(T *out, const T *a, const int32_t *sorted, const int32_t *tiles, const int32_t *tiles_total,
                    const int32_t *counts, const T *__restrict__ w, int top_k, int k, int n_out,
                    int64_t expert_stride) {
    ts::pdl_wait();
    const int tile = blockIdx.x;
    if (tile >= tiles_total[0]) return;
    const int e = tiles[2 * tile], row0 = tiles[2 * tile + 1];
    __shared__ int rows_s[kDecodeBM]; /* each tile row's source row in a */
    __shared__ int n_s;
    if (threadIdx.x == 0) {
        int end = 0;
        for (int i = 0; i <= e; ++i) end += counts[i];
        n_s = min(kDecodeBM, end - row0);
    }
    __syncthreads();
    const int n = n_s;
    if ((int)threadIdx.x < n) rows_s[threadIdx.x] = GLU ? sorted[row0 + threadIdx.x] / top_k : row0 + threadIdx.x;
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int col = blockIdx.y * kGemvWarpsMoE + warp;
    if (col >= n_out) return;
    const T *we = w + (int64_t)e * expert_stride;
    const uint4 *wg = reinterpret_cast<const uint4 *>(we + (int64_t)col * k);
    const uint4 *wu = reinterpret_cast<const uint4 *>(we + (int64_t)(GLU ? n_out + col : col) * k);
    float g[kDecodeBM], u[kDecodeBM];
#pragma unroll
    for (int m = 0; m < kDecodeBM; ++m) g[m] = u[m] = 0.0f;
    const int nvec = k >> 3;
    for (int base = 0; base < nvec; base += 128) {
        uint4 gv[4], uv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = base + 32 * i + lane;
            if (v < nvec) {
                gv[i] = wg[v];
                if constexpr (GLU) uv[i] = wu[v];
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = base + 32 * i + lane;
            if (v < nvec) moe_gemv_fma<GLU, T>(g, u, gv[i], uv[i], a, rows_s, n, k, v);
        }
    }
#pragma unroll
    for (int m = 0; m < kDecodeBM; ++m) {
        if (m < n) {
            const float gs = ts::warp_sum(g[m]);
            float val = gs;
            if constexpr (GLU) val = ts::silu_mul(ts::round_to<T>(gs), ts::round_to<T>(ts::warp_sum(u[m])));
            if (lane == 0) out[(int64_t)(row0 + m) * n_out + col] = ts::from_float<T>(val);
        }
    }
}

/* out[t] = sum_j weights[t, j] y[inverse[t k + j]] in fp32, one rounding; 8 columns a thread. */
template <typename T>
__global__ void moe_combine_kernel(T *out, const T *y, const int32_t *inverse, const int32_t *ids, const float *weights,
                                   int top_k, int hidden, int experts) {
    ts::pdl_wait();
    const int t = blockIdx.x;
    for (int c = 8 * threadIdx.x; c < hidden; c += 8 * blockDim.x) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < top_k; ++j) {
            /* A bad id (reported by moe_count_kernel) has no row in y: skip it, never read
             * outside the workspace. */
            const int id = ids[t * top_k + j];
            if (id < 0 || id >= experts) continue;
            const float wt = weights[(int64_t)t * top_k + j];
            float v[8];
            ts::unpack8<T>(*reinterpret_cast<const uint4 *>(y + (int64_t)inverse[t * top_k + j] * hidden + c), v);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = fmaf(wt, v[i], acc[i]);
        }
        *reinterpret_cast<uint4 *>(out + (int64_t)t * hidden + c) = ts::pack8<T>(acc);
    }
}

template <int BM, typename T>
int run(T *out, const T *x, const int32_t *ids, const float *weights, const T *gate_up, const T *down,
        const ts_moe_ffn_config &c, cudaStream_t st) {
    const char *op = "moe_ffn";
    const int rows = c.tokens * c.top_k;
    const int max_tiles = (int)ts::ceil_div(rows, BM) + std::min(c.experts, rows);
    /* Workspace: counts [E], sorted [rows], inverse [rows], tiles [max_tiles][2], total [1] (i32,
     * each rounded to 16 bytes), then act [rows, ffn] and y [rows, hidden] in T. */
    auto r16 = [](int64_t n) { return (size_t)ts::round_up((int)n, 4) * 4; };
    const size_t ints = r16(c.experts) + 2 * r16(rows) + r16(2 * max_tiles) + r16(1);
    const size_t bytes = ints + ((size_t)rows * c.ffn + (size_t)rows * c.hidden) * sizeof(T);
    void *ws = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_MOE, bytes, &ws));
    auto *base = static_cast<unsigned char *>(ws);
    auto *counts = reinterpret_cast<int32_t *>(base);
    auto *sorted = reinterpret_cast<int32_t *>(base + r16(c.experts));
    auto *inverse = reinterpret_cast<int32_t *>(base + r16(c.experts) + r16(rows));
    auto *tiles = reinterpret_cast<int32_t *>(base + r16(c.experts) + 2 * r16(rows));
    auto *total = reinterpret_cast<int32_t *>(base + r16(c.experts) + 2 * r16(rows) + r16(2 * max_tiles));
    auto *act = reinterpret_cast<T *>(base + ints);
    T *y = act + (size_t)rows * c.ffn;
    const char *d = ts::dims("tokens=%d hidden=%d ffn=%d experts=%d top_k=%d bm=%d dtype=%s", c.tokens, c.hidden, c.ffn,
                             c.experts, c.top_k, BM, ts::dtype_name(c.dtype));
    const unsigned expert_blocks = (unsigned)ts::ceil_div(c.experts, kCountWarps);
    TS_LAUNCH(op, moe_count_kernel, expert_blocks, kCountWarps * 32, 0, st, d, counts, ids, rows, c.experts,
              ts::fault_record());
    auto permute = moe_permute_kernel<BM>;
    TS_LAUNCH(op, permute, expert_blocks, kCountWarps * 32, 0, st, d, sorted, inverse, tiles, total, counts, ids, rows,
              c.experts);
    if constexpr (BM == kDecodeBM) {
        auto up = moe_gemv_kernel<true, T>;
        const dim3 grid_up((unsigned)max_tiles, (unsigned)ts::ceil_div(c.ffn, kGemvWarpsMoE));
        TS_LAUNCH(op, up, grid_up, kGemvWarpsMoE * 32, 0, st, d, act, x, sorted, tiles, total, counts, gate_up,
                  c.top_k, c.hidden, c.ffn, (int64_t)2 * c.ffn * c.hidden);
        auto dn = moe_gemv_kernel<false, T>;
        const dim3 grid_dn((unsigned)max_tiles, (unsigned)ts::ceil_div(c.hidden, kGemvWarpsMoE));
        TS_LAUNCH(op, dn, grid_dn, kGemvWarpsMoE * 32, 0, st, d, y, act, sorted, tiles, total, counts, down, c.top_k,
                  c.ffn, c.hidden, (int64_t)c.hidden * c.ffn);
    } else {
        auto up = moe_grouped_gemm_kernel<BM, true, T>;
        const dim3 grid_up((unsigned)max_tiles, (unsigned)ts::ceil_div(c.ffn, kBN));
        TS_LAUNCH(op, up, grid_up, kMoEThreads, 0, st, d, act, x, sorted, tiles, total, counts, nullptr, gate_up,
                  c.top_k, c.hidden, c.ffn, (int64_t)2 * c.ffn * c.hidden);
        auto dn = moe_grouped_gemm_kernel<BM, false, T>;
        const dim3 grid_dn((unsigned)max_tiles, (unsigned)ts::ceil_div(c.hidden, kBN));
        TS_LAUNCH(op, dn, grid_dn, kMoEThreads, 0, st, d, y, act, sorted, tiles, total, counts, nullptr, down,
                  c.top_k, c.ffn, c.hidden, (int64_t)c.hidden * c.ffn);
    }
    auto combine = moe_combine_kernel<T>;
    const int threads = std::min(256, ts::round_up((int)ts::ceil_div(c.hidden, 8), 32));
    TS_LAUNCH(op, combine, (unsigned)c.tokens, threads, 0, st, d, out, y, inverse, ids, weights, c.top_k, c.hidden,
              c.experts);
    return TS_OK;
}

} // namespace

extern "C" int ts_moe_ffn(void *out, const void *x, const int32_t *ids, const float *weights, const void *gate_up,
                          const void *down, const ts_moe_ffn_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("moe_ffn");
    v.ptr(out, "out");
    v.ptr(x, "x");
    v.ptr(ids, "ids");
    v.ptr(weights, "weights");
    v.ptr(gate_up, "gate_up");
    v.ptr(down, "down");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.dtype_storage(cfg->dtype, "cfg->dtype");
    v.positive(cfg->tokens, "cfg->tokens");
    v.positive(cfg->hidden, "cfg->hidden");
    v.positive(cfg->ffn, "cfg->ffn");
    v.positive(cfg->experts, "cfg->experts");
    v.positive(cfg->top_k, "cfg->top_k");
    if (!v.ok()) return v.status();
    if (cfg->top_k > cfg->experts)
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->top_k = %d: at most cfg->experts = %d", cfg->top_k, cfg->experts);
    if (!v.ok()) return v.status();
    v.elements("x", {cfg->tokens, cfg->hidden});
    v.elements("ids", {cfg->tokens, cfg->top_k});
    v.elements("gate_up", {cfg->experts, 2 * (int64_t)cfg->ffn, cfg->hidden});
    v.elements("down", {cfg->experts, cfg->hidden, cfg->ffn});
    v.elements("act and y", {(int64_t)cfg->tokens * cfg->top_k, (int64_t)cfg->ffn + cfg->hidden});
    if (!v.ok()) return v.status();
    if (cfg->hidden % 8 != 0 || cfg->ffn % 8 != 0 || !ts::aligned16(x) || !ts::aligned16(gate_up) ||
        !ts::aligned16(down) || !ts::aligned16(out))
        return ts::set_error(TS_ERR_UNSUPPORTED,
                             "moe_ffn: hidden = %d, ffn = %d: needs both %% 8 == 0 and out, x, gate_up, down 16-byte "
                             "aligned (16-byte loads)",
                             cfg->hidden, cfg->ffn);
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    /* 16 rows an expert or more on average: 64-row tiles; fewer (decode): 16. */
    const bool wide = (int64_t)cfg->tokens * cfg->top_k >= 16ll * cfg->experts;
    return ts::with_storage(cfg->dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto *o = static_cast<T *>(out);
        const auto *xt = static_cast<const T *>(x);
        const auto *gu = static_cast<const T *>(gate_up);
        const auto *dn = static_cast<const T *>(down);
        return wide ? run<64>(o, xt, ids, weights, gu, dn, *cfg, st)
                    : run<kDecodeBM>(o, xt, ids, weights, gu, dn, *cfg, st);
    });
}
