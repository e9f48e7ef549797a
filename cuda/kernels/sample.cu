/*
 * sample: one token per row of fp32 logits [rows, vocab] into int32 tokens [rows], exactly as
 * docs/sampling.md defines it. Everything stays on the device and on the stream: no copy to
 * the host, no synchronisation, scratch space from library workspaces.
 *
 * Greedy (temperature 0) is one kernel (stats, below): the token is the canonical first element.
 *
 * Sampling avoids sorting the row. The spec's decisions (the top-k cut, the top-p cut n', the
 * draw) are each "the first rank, in the canonical order, where a running count or a running
 * prefix sum crosses a threshold"; only the ranks around those crossings need their exact
 * order, and everything before a crossing only its total. So:
 *
 * 1. stats, grid (chunks, rows): integer atomics fold each block's logits into per-row
 *    accumulators: the first bad column (NaN or +inf), the finite count, the canonical first
 *    element (largest logit, lowest index among equal ones: m = its logit) and the smallest
 *    finite logit. Integer atomics commute, so the result does not depend on block order.
 * 2. hist, grid (chunks, rows): the relevant range [lo, m], lo = max(smallest logit, m - 38 T),
 *    is cut into kBins equal bins of logit value; a bin is a contiguous stretch of the canonical
 *    order (the bin is a non-increasing function of the logit, and equal logits share a bin).
 *    Finite logits below lo go to an overflow bin: their weight is below e^-38 < 2^-53 (see
 *    below). Each block adds to every bin its count and its exact mass: the weights
 *    w = exp((double(l) - double(m)) / double(T)) as fixed-point integers w * 2^106, summed in
 *    the block as 16-bit pieces by 32-bit shared-memory atomics (exact up to 2^16 logits a
 *    block), then added to the row's totals in 27-bit limbs of 64-bit integers (no overflow for
 *    any int vocab). The last block of a row (a counter) scans the bins: bin offsets, the exact
 *    cumulative mass before every bin, and the top-k cut's bin by count.
 * 3. scatter, grid (chunks, rows): every logit of a bin up to the cut's bin is written to its
 *    bin's slice of a candidate array (a counting sort by bin; within a bin the order is
 *    arbitrary). The last block of the row decides: for each decision in turn it finds the bin
 *    where the crossing lies from the bin totals, then sorts just that bin's candidates in shared
 *    memory by (logit order key, index) and walks its exact prefix sums to the crossing rank. A
 *    bin of more than kCap candidates (many distinct logits packed into 1/kBins of the range) is
 *    narrowed first by a radix search on the sort key over the candidate array, 8 bits a pass.
 *
 * The prefix sums are exact: C_i is the exact sum of w_0..w_i (fixed-point, per-limb integer
 * sums), converted to fp64 by value() below, a fixed monotone function of the limbs. The spec
 * sums in rank order and rounds at every step; docs/sampling.md ("Margins") lets an
 * implementation sum in another order, and the exact sum is within the spec's own rounding
 * error of its sequential sum. Being exact makes every comparison consistent: a bin's end value
 * is its last rank's C, C never decreases along the order, and a zero weight never moves it.
 * S = C_{n-1}, thr = double(top_p) * S, S' = C_{n'-1}, target = u * S' < S' (u <= 1 - 2^-53), so
 * every search finds a rank < n', and the spec's "if rounding leaves none" case cannot occur.
 *
 * Weights below 2^-53 count as 0. That is what the spec's own sequential sum does: w_0 = 1, so
 * every C_{i-1} >= 1, and adding w < 2^-53 (under half an ulp of anything >= 1) rounds back to
 * C_{i-1}; such a rank never changes C, so the spec can neither end the nucleus on it nor draw
 * it. Dropping them is what makes the fixed point exact: a kept weight is in [2^-53, 1], a
 * multiple of 2^-105, so w * 2^106 is an integer below 2^107.
 *
 * Determinism: atomics combine integers only (and count blocks); the candidate order within a
 * bin depends on scheduling, but every bin that is searched is sorted by (order key, index),
 * which is unique. The same inputs give the same tokens every run.
 *
 * Rows run in launch groups whose workspace stays under kMaxGroupBytes (candidates, plans and bin
 * totals) and of at most 65535 rows (grid.y); a larger batch runs group after group on the
 * stream.
 */
#include <algorithm>
#include <climits>
#include <cmath>

#include "internal.h"
#include "philox.cuh"

namespace {

constexpr int kThreads = 256, kItems = 8, kTile = kThreads * kItems; /* stats and hist blocks */
constexpr int kScatterThreads = 512;                                   /* scatter blocks and the decider */
constexpr int kScatterItems = kTile / kScatterThreads;
constexpr int kBins = 1024;  /* regular bins over [lo, m]; bin kBins: finite logits below lo */
constexpr int kCap = 2048;   /* candidates the decider sorts in shared memory */
constexpr int kLimbs = 4, kLimbBits = 27;
constexpr int kPieces = 7;          /* 16-bit pieces of a 107-bit weight */
constexpr int kMaxChunk = 1 << 16;  /* logits per block: 16-bit pieces sum exactly in 32 bits */
constexpr unsigned long long kLimbMask = (1ull << kLimbBits) - 1;
static_assert(kTile % kScatterThreads == 0 && kCap % kScatterThreads == 0, "tile layout");

/* Workspace of one launch group when sampling: 8 bytes of candidates per logit and about 80 KB
 * of plan and bin totals per row (a row of 151936 logits: 49 rows a group). */
constexpr int64_t kMaxGroupBytes = (int64_t)64 << 20;

/* ---- the canonical order ---------------------------------------------------------------- */

/* Order key: ascending keys are the canonical order (descending logits, -0 equal to +0, -inf
 * after every finite logit). Positive values map to ~bits in [0, 2^31), larger first; negative
 * values keep their bits, which grow with the magnitude, in [2^31, 2^32). */
__device__ __forceinline__ uint32_t order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if (u == 0x80000000u) u = 0u; /* -0.0 sorts as +0.0 */
    return (u & 0x80000000u) ? u : (~u & 0x7fffffffu);
}

__device__ __forceinline__ float key_logit(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? k : (~k & 0x7fffffffu));
}

/* A candidate: order key, then column. Unique, and ascending in the canonical order. */
__device__ __forceinline__ unsigned long long composite(uint32_t key, int col) {
    return ((unsigned long long)key << 32) | (uint32_t)col;
}

/* ---- exact masses ------------------------------------------------------------------------ */

/* w = exp((double(l) - double(m)) / double(T)): subtraction, division, exp, the spec's order;
 * below 2^-53 it counts as 0 (see the top of the file). */
__device__ __forceinline__ double weight(float l, double m, double t) {
    const double w = exp(__ddiv_rn(__dsub_rn((double)l, m), t));
    return w < 0x1p-53 ? 0.0 : w;
}

/* A mass: limb q holds a sum of integers below 2^27 that weigh 2^(27 q - 106). */
struct Mass {
    unsigned long long v[kLimbs];
};

/* w in {0} or [2^-53, 1] as the integer w * 2^106 (below 2^107: w is a multiple of 2^-105). */
__device__ __forceinline__ unsigned __int128 fixed(double w) {
    if (w == 0.0) return 0;
    const unsigned long long bits = (unsigned long long)__double_as_longlong(w);
    const int e = (int)((bits >> 52) & 0x7ff) - 1023; /* -53 ... 0 */
    const unsigned long long mant = (bits & 0xfffffffffffffull) | (1ull << 52);
    return (unsigned __int128)mant << (e + 54);
}

/* w cut into 27-bit limbs. */
__device__ __forceinline__ Mass split(double w) {
    Mass r{};
    const unsigned __int128 big = fixed(w);
#pragma unroll
    for (int q = 0; q < kLimbs; ++q) r.v[q] = (unsigned long long)(big >> (kLimbBits * q)) & kLimbMask;
    return r;
}

__device__ __forceinline__ void add(Mass &a, const Mass &b) {
#pragma unroll
    for (int q = 0; q < kLimbs; ++q) a.v[q] += b.v[q];
}

/* The fp64 value of a mass: a fixed function of the exact integer it holds, whatever the limbs
 * it was summed in (a bin's total and the same elements one by one carry differently). The
 * limbs are normalised (carries propagated: limbs 0..2 below 2^27), then converted smallest
 * first; each step rounds a quantity that never decreases as the integer grows, so neither does
 * the value. */
__device__ __forceinline__ double value(const Mass &a) {
    unsigned long long l0 = a.v[0], l1 = a.v[1], l2 = a.v[2], l3 = a.v[3];
    l1 += l0 >> kLimbBits;
    l0 &= kLimbMask;
    l2 += l1 >> kLimbBits;
    l1 &= kLimbMask;
    l3 += l2 >> kLimbBits;
    l2 &= kLimbMask;
    /* l1 * 2^27 + l0 < 2^54: one rounding of an exact integer */
    double s = __ull2double_rn((l1 << kLimbBits) | l0) * 0x1p-106;
    s += __ull2double_rn(l2) * 0x1p-52;
    return s + __ull2double_rn(l3) * 0x1p-25;
}

/* ---- state shared by the kernels ---------------------------------------------------------- */

/* Per-row accumulators of the stats kernel: zero is the neutral value of each (zeroed at
 * allocation); the kernel that reads them last puts them back to zero. */
struct RowAcc {
    unsigned long long best; /* max of ~(key << 32 | column) over finite logits: the canonical first */
    unsigned worst;          /* max key over finite logits: the smallest finite logit */
    int bad;                 /* max of INT_MAX - column over NaN / +inf logits */
    int finite;              /* finite logits */
    unsigned done_stats;     /* blocks finished, per kernel */
    unsigned done_hist;
    unsigned done_scatter;
};

/* Per-row bin totals of the hist kernel, zero between calls (its last block reads and clears
 * them). Structure of arrays, so consecutive threads touch consecutive words. */
struct RowHist {
    unsigned count[kBins + 1];
    unsigned long long mass[kLimbs][kBins];
};

/* The row's plan, written by the hist kernel's last block for the scatter kernel. */
struct RowPlan {
    double m, lo, scale;     /* bin(l) = floor((m - l) * scale), l >= lo; else the overflow bin */
    int fault;               /* 0, FAULT_SAMPLE_LOGIT or FAULT_SAMPLE_ALL_NEG_INF */
    int last_bin;            /* bins 0..last_bin are scattered */
    int cut_bin;             /* the top-k cut's bin, or -1 without a cut among weighted logits */
    int cut_need;            /* the cut is the cut_need-th (1-based) candidate of cut_bin */
    unsigned offset[kBins + 1];                   /* bin b's candidates: [offset[b], offset[b + 1]) */
    unsigned cursor[kBins];                       /* scatter cursors */
    unsigned long long before[kLimbs][kBins + 1]; /* exact mass of the bins before b, limb by limb */
};

__device__ __forceinline__ Mass load_before(const RowPlan *p, int b) {
    Mass r;
#pragma unroll
    for (int q = 0; q < kLimbs; ++q) r.v[q] = __ldcg(&p->before[q][b]);
    return r;
}

struct LaunchAcc {
    unsigned rows_done; /* rows whose fault is settled */
    int bad_row;        /* max of INT_MAX - row over bad rows */
};

/* The row's bin of a finite logit (K2 and K3 call this one function with the same inputs, so
 * they agree bit for bit). */
__device__ __forceinline__ int bin_of(float l, double m, double lo, double scale) {
    const double d = (double)l;
    if (!(d >= lo)) return kBins;
    const double b = floor(__dmul_rn(__dsub_rn(m, d), scale));
    return b < (double)(kBins - 1) ? (int)b : kBins - 1;
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Minimum over the block, in every thread; scratch: 32 ints of shared memory. */
__device__ __forceinline__ int block_min(int v, int *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = __reduce_min_sync(0xffffffffu, v);
    __syncthreads(); /* a previous call may still be reading scratch */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : INT_MAX;
    return __reduce_min_sync(0xffffffffu, v);
}

/* The last block of a kernel for its row: fence, count, and tell every thread. */
__device__ __forceinline__ bool last_block(unsigned *done, unsigned blocks, bool *flag) {
    __threadfence(); /* this block's results are visible before it is counted */
    __syncthreads();
    if (threadIdx.x == 0) *flag = atomicAdd(done, 1u) == blocks - 1;
    __syncthreads();
    if (!*flag) return false;
    __threadfence();
    return true;
}

/* Called by one thread per bad or good row once its fault is known: the last row of the launch
 * reports the lowest bad row (its first bad column), whatever order rows finished in. */
__device__ void settle_fault(LaunchAcc *launch, int r, int kind, int col, uint32_t bits, int *row_fault,
                             int *row_col, uint32_t *row_bits, int row0, unsigned rows, ts::FaultRecord *fault) {
    if (rows == 1) { /* nothing to order: no counter round trips */
        if (kind != 0) ts::report_fault(fault, kind, row0 + r, col, (int)bits);
        return;
    }
    row_fault[r] = kind;
    row_col[r] = col;
    row_bits[r] = bits;
    if (kind != 0) atomicMax(&launch->bad_row, INT_MAX - r);
    __threadfence();
    if (atomicAdd(&launch->rows_done, 1u) != rows - 1) return;
    __threadfence();
    const int br = atomicExch(&launch->bad_row, 0);
    atomicExch(&launch->rows_done, 0u);
    if (br == 0) return;
    const int rr = INT_MAX - br;
    ts::report_fault(fault, __ldcg(&row_fault[rr]), row0 + rr, __ldcg(&row_col[rr]), (int)__ldcg(&row_bits[rr]));
}

/* What a row's accumulators say once every stats block is in. */
struct RowStats {
    int fault, bad_col, finite, argmax;
    float m, lmin;
};

__device__ __forceinline__ RowStats row_stats(unsigned long long best, unsigned worst, int bad, int finite) {
    RowStats s;
    const unsigned long long first = ~best; /* key << 32 | column; meaningless when nothing is finite */
    s.m = key_logit((uint32_t)(first >> 32));
    s.argmax = (int)(uint32_t)first;
    s.lmin = key_logit(worst);
    s.finite = finite;
    s.bad_col = bad != 0 ? INT_MAX - bad : -1;
    s.fault = bad != 0 ? ts::FAULT_SAMPLE_LOGIT : (finite == 0 ? ts::FAULT_SAMPLE_ALL_NEG_INF : 0);
    return s;
}

/* Kernel arguments shared by the three sampling kernels. */
struct Args {
    const float *logits;
    int32_t *tokens;
    int vocab, chunk, row0;
    unsigned rows;
    int top_k;
    double temperature, top_p;
    uint64_t seed, step;
    RowAcc *acc;
    RowHist *hist;
    RowPlan *plan;
    unsigned long long *cand; /* [rows][vocab] */
    int *row_fault, *row_col; /* [rows] */
    uint32_t *row_bits;
    LaunchAcc *launch;
    ts::FaultRecord *fault;
};

/* ---- 1. stats ----------------------------------------------------------------------------------- */

/* VEC: vocab % 4 == 0 and 16-byte aligned logits (float4 loads). GREEDY: the last block of the
 * row writes its token and settles its fault; otherwise the hist kernel reads the accumulators. */
template <bool VEC, bool GREEDY>
__global__ void __launch_bounds__(kThreads) sample_stats_kernel(Args a) {
    ts::pdl_wait();
    __shared__ unsigned long long s_best[kThreads / 32];
    __shared__ unsigned s_worst[kThreads / 32];
    __shared__ int s_bad[kThreads / 32], s_fin[kThreads / 32];
    __shared__ bool s_last;
    const int r = blockIdx.y;
    const float *x = a.logits + (int64_t)r * a.vocab;
    const int c0 = blockIdx.x * a.chunk, c1 = min(a.vocab, c0 + a.chunk);

    unsigned long long best = 0;
    unsigned worst = 0;
    int bad = 0, finite = 0;
    auto visit = [&](int c, float v) {
        if (v != v || v == INFINITY) {
            bad = max(bad, INT_MAX - c);
        } else if (v != -INFINITY) {
            const uint32_t k = order_key(v);
            ++finite;
            best = max(best, ~composite(k, c));
            worst = max(worst, k);
        }
    };
    if (VEC) {
        for (int c = c0 + threadIdx.x * 4; c < c1; c += kThreads * 4) { /* vocab % 4 == 0: whole vectors */
            const float4 v = *reinterpret_cast<const float4 *>(x + c);
            visit(c, v.x);
            visit(c + 1, v.y);
            visit(c + 2, v.z);
            visit(c + 3, v.w);
        }
    } else {
        for (int c = c0 + threadIdx.x; c < c1; c += kThreads) visit(c, x[c]);
    }
    best = warp_max_u64(best);
    worst = __reduce_max_sync(0xffffffffu, worst);
    bad = __reduce_max_sync(0xffffffffu, bad);
    finite = (int)__reduce_add_sync(0xffffffffu, (unsigned)finite);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        s_best[warp] = best;
        s_worst[warp] = worst;
        s_bad[warp] = bad;
        s_fin[warp] = finite;
    }
    __syncthreads();
    RowAcc *acc = a.acc + r;
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; ++w) {
            best = max(best, s_best[w]);
            worst = max(worst, s_worst[w]);
            bad = max(bad, s_bad[w]);
            finite += s_fin[w];
        }
        /* Only what changes the accumulator: most blocks find no bad logit. */
        if (best != 0) atomicMax(&acc->best, best);
        if (worst != 0) atomicMax(&acc->worst, worst);
        if (bad != 0) atomicMax(&acc->bad, bad);
        if (finite != 0) atomicAdd(&acc->finite, finite);
    }
    if (!GREEDY) return;

    /* Greedy: the last block of the row reads (and clears) the accumulators; the token is the
     * canonical first element. */
    if (!last_block(&acc->done_stats, gridDim.x, &s_last) || threadIdx.x != 0) return;
    const RowStats s = row_stats(atomicExch(&acc->best, 0ull), atomicExch(&acc->worst, 0u), atomicExch(&acc->bad, 0),
                                 atomicExch(&acc->finite, 0));
    acc->done_stats = 0;
    a.tokens[r] = s.fault != 0 ? -1 : s.argmax;
    settle_fault(a.launch, r, s.fault, s.bad_col, s.bad_col >= 0 ? __float_as_uint(x[s.bad_col]) : 0u, a.row_fault,
                 a.row_col, a.row_bits, a.row0, a.rows, a.fault);
}

/* Exclusive scan over a block of kThreads threads of kLimbs + 1 integers per thread (exact);
 * total: the block's sums. part: kThreads / 32 rows of shared scratch. */
__device__ void block_excl_scan_256(const unsigned long long (&v)[kLimbs + 1], unsigned long long (&ex)[kLimbs + 1],
                                    unsigned long long (&total)[kLimbs + 1], unsigned long long (*part)[kLimbs + 1]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long incl[kLimbs + 1];
#pragma unroll
    for (int q = 0; q <= kLimbs; ++q) {
        incl[q] = v[q];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long u = __shfl_up_sync(0xffffffffu, incl[q], o);
            if (lane >= o) incl[q] += u;
        }
    }
    __syncthreads(); /* a previous round may still be reading part */
    if (lane == 31) {
#pragma unroll
        for (int q = 0; q <= kLimbs; ++q) part[warp][q] = incl[q];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q <= kLimbs; ++q) {
        ex[q] = incl[q] - v[q];
        total[q] = 0;
    }
    for (int w = 0; w < kThreads / 32; ++w) {
#pragma unroll
        for (int q = 0; q <= kLimbs; ++q) {
            if (w < warp) ex[q] += part[w][q];
            total[q] += part[w][q];
        }
    }
}

/* ---- 2. hist ----------------------------------------------------------------------------------- */

__global__ void __launch_bounds__(kThreads) sample_hist_kernel(Args a) {
    ts::pdl_wait();
    __shared__ unsigned s_count[kBins + 1];
    __shared__ unsigned s_mass[kPieces][kBins]; /* 16-bit pieces of the weights, summed in 32 bits */
    __shared__ unsigned long long s_part[kThreads / 32][kLimbs + 1]; /* the last block's scan */
    __shared__ int s_cut[2];
    __shared__ bool s_last;
    const int r = blockIdx.y, tid = threadIdx.x;
    RowAcc *acc = a.acc + r;
    RowHist *h = a.hist + r;
    /* The stats kernel's totals (an earlier launch: plain loads see them). */
    const RowStats st = row_stats(acc->best, acc->worst, acc->bad, acc->finite);
    const double m = (double)st.m, t = a.temperature;
    const double lo = fmax((double)st.lmin, m - 38.0 * t); /* below: w < e^-38 < 2^-53 */
    const double range = m - lo, scale = range > 0.0 ? (double)kBins / range : 0.0;

    if (st.fault == 0) {
        for (int i = tid; i <= kBins; i += kThreads) s_count[i] = 0u;
        for (int i = tid; i < kBins * kPieces; i += kThreads) (&s_mass[0][0])[i] = 0u;
        __syncthreads();
        const float *x = a.logits + (int64_t)r * a.vocab;
        const int c0 = blockIdx.x * a.chunk, c1 = min(a.vocab, c0 + a.chunk);
        for (int c = c0 + tid; c < c1; c += kThreads) {
            const float l = x[c];
            if (!(l > -INFINITY)) continue; /* -inf (NaN and +inf make a fault row) */
            const int b = bin_of(l, m, lo, scale);
            atomicAdd(&s_count[b], 1u);
            if (b == kBins) continue;
            /* 16-bit pieces: native 32-bit shared atomics (64-bit ones are compare-and-swap loops),
             * exact while a block sums at most 2^16 logits (kMaxChunk). */
            const unsigned __int128 big = fixed(weight(l, m, t));
#pragma unroll
            for (int j = 0; j < kPieces; ++j) {
                const unsigned piece = (unsigned)(big >> (16 * j)) & 0xffffu;
                if (piece != 0) atomicAdd(&s_mass[j][b], piece);
            }
        }
        __syncthreads();
        for (int b = tid; b <= kBins; b += kThreads) {
            if (s_count[b] == 0) continue;
            atomicAdd(&h->count[b], s_count[b]);
            if (b < kBins) { /* the block's exact total, re-cut into the row's 27-bit limbs */
                unsigned __int128 tot = 0;
#pragma unroll
                for (int j = 0; j < kPieces; ++j) tot += (unsigned __int128)s_mass[j][b] << (16 * j);
#pragma unroll
                for (int q = 0; q < kLimbs; ++q) {
                    const unsigned long long limb =
                        q < kLimbs - 1 ? (unsigned long long)(tot >> (kLimbBits * q)) & kLimbMask
                                       : (unsigned long long)(tot >> (kLimbBits * q));
                    if (limb != 0) atomicAdd(&h->mass[q][b], limb);
                }
            }
        }
    }
    if (!last_block(&acc->done_hist, gridDim.x, &s_last)) return;

    /* The last block of the row: clear the stats accumulators (every hist block has read them),
     * plan the scatter, and settle the row's fault. */
    RowPlan *p = a.plan + r;
    if (tid == 0) {
        acc->best = 0;
        acc->worst = 0;
        acc->bad = 0;
        acc->finite = 0;
        acc->done_hist = 0;
        p->m = m;
        p->lo = lo;
        p->scale = scale;
        p->fault = st.fault;
        const float *x = a.logits + (int64_t)r * a.vocab;
        settle_fault(a.launch, r, st.fault, st.bad_col, st.bad_col >= 0 ? __float_as_uint(x[st.bad_col]) : 0u,
                     a.row_fault, a.row_col, a.row_bits, a.row0, a.rows, a.fault);
    }
    if (st.fault != 0) return;

    /* Exclusive scan over the bins of counts and limbs (integers: exact in any order), 256 bins
     * a round, one per thread, and clear the totals for the next call. The top-k cut is found on
     * the way, by count over the finite logits in the canonical order (the overflow bin last):
     * rank top_k - 1 is the cut_need-th logit of cut_bin. A cut in the overflow bin keeps every
     * weighted logit: it falls among weights that count as 0. */
    static_assert(kBins % kThreads == 0, "whole rounds");
    const int k = a.top_k;
    const bool cut = k > 0 && k < st.finite;
    if (tid == 0) s_cut[0] = -1;
    constexpr int kRounds = kBins / kThreads;
    unsigned long long all[kRounds][kLimbs + 1]; /* every round's loads issued together */
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
        const int b = i * kThreads + tid;
        all[i][kLimbs] = __ldcg(&h->count[b]);
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) all[i][q] = __ldcg(&h->mass[q][b]);
    }
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
        const int b = i * kThreads + tid;
        h->count[b] = 0u;
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) h->mass[q][b] = 0ull;
    }
    unsigned long long carry[kLimbs + 1] = {};
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
        const int b = i * kThreads + tid;
        const unsigned long long(&v)[kLimbs + 1] = all[i];
        unsigned long long ex[kLimbs + 1], total[kLimbs + 1];
        block_excl_scan_256(v, ex, total, s_part);
        const unsigned off = (unsigned)(carry[kLimbs] + ex[kLimbs]);
        p->offset[b] = off;
        p->cursor[b] = off;
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) p->before[q][b] = carry[q] + ex[q];
        if (cut && off < (unsigned)k && (unsigned)k <= off + (unsigned)v[kLimbs]) { /* one bin holds rank k - 1 */
            s_cut[0] = b;
            s_cut[1] = k - (int)off;
        }
#pragma unroll
        for (int q = 0; q <= kLimbs; ++q) carry[q] += total[q];
    }
    if (tid == 0) {
        h->count[kBins] = 0u; /* the overflow bin: only the top-k cut needed its count */
        p->offset[kBins] = (unsigned)carry[kLimbs];
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) p->before[q][kBins] = carry[q];
    }
    __syncthreads();
    if (tid == 0) {
        p->cut_bin = s_cut[0];
        p->cut_need = s_cut[1];
        p->last_bin = s_cut[0] >= 0 ? s_cut[0] : kBins - 1;
    }
}

/* ---- 3. scatter and decide ------------------------------------------------------------------------ */

/* Shared memory of the scatter kernel's blocks and of its last block, the decider. */
struct DecideSmem {
    unsigned long long keys[kCap]; /* candidates of one bin (or of part of one), sorted */
    unsigned long long part[kScatterThreads / 32][kLimbs];
    unsigned count[kBins + 1];     /* scatter: per-tile counts, then the tile's bases */
    unsigned hcount[256];          /* radix narrowing: counts and masses per digit */
    unsigned long long hmass[256][kLimbs];
    unsigned long long red[2][32]; /* block min / max */
    int scratch[32];
    double end[kBins + 1];   /* decider: value(before[b]), the C at the end of bin b - 1 */
    unsigned off[kBins + 1]; /* decider: the bins' candidate offsets */
    int sorted_bin; /* the whole bin now sorted in keys[], or -1 */
    int nkeys;
    int nsel;
    unsigned long long found;   /* resolve(): the candidate */
    Mass found_mass;            /* and its C */
    bool last;
};

enum Mode { BY_COUNT, AT_LEAST, ABOVE };

__device__ __forceinline__ bool passes(Mode mode, double c, double x) { return mode == AT_LEAST ? c >= x : c > x; }

/* Inclusive scan of one Mass per lane over the warp; every lane of the warp must call it. */
__device__ __forceinline__ Mass warp_incl_scan(Mass v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int q = 0; q < kLimbs; ++q) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long u = __shfl_up_sync(0xffffffffu, v.v[q], o);
            if (lane >= o) v.v[q] += u;
        }
    }
    return v;
}

/* Exclusive scan of one Mass per thread over the block (integers: exact in any order). */
__device__ Mass block_excl_scan(const Mass &v, DecideSmem &sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const Mass incl = warp_incl_scan(v);
    __syncthreads(); /* a previous call may still be reading part */
    if (lane == 31) {
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) sm.part[warp][q] = incl.v[q];
    }
    __syncthreads();
    Mass ex;
#pragma unroll
    for (int q = 0; q < kLimbs; ++q) ex.v[q] = incl.v[q] - v.v[q];
    for (int w = 0; w < warp; ++w) {
#pragma unroll
        for (int q = 0; q < kLimbs; ++q) ex.v[q] += sm.part[w][q];
    }
    return ex;
}

/* Sorts sm.keys[0, n) ascending: bitonic, padded to a power of two with ~0 (no candidate). */
__device__ void sort_keys(DecideSmem &sm, int n) {
    int size = 1;
    while (size < n) size <<= 1;
    for (int i = n + threadIdx.x; i < size; i += kScatterThreads) sm.keys[i] = ~0ull;
    __syncthreads();
    for (int k = 2; k <= size; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < size; i += kScatterThreads) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long x = sm.keys[i], y = sm.keys[ixj];
                    if ((x > y) == ((i & k) == 0)) {
                        sm.keys[i] = y;
                        sm.keys[ixj] = x;
                    }
                }
            }
            __syncthreads();
        }
    }
}

__device__ __forceinline__ Mass cand_mass(unsigned long long c, double m, double t) {
    return split(weight(key_logit((uint32_t)(c >> 32)), m, t));
}

/* Among sm.keys[0, n), sorted, the candidates not above `limit` in order: the first whose
 * running count reaches `need` (BY_COUNT) or whose C = base + running mass passes x. The
 * callers guarantee one exists. Sets sm.found and sm.found_mass. */
__device__ void walk_sorted(DecideSmem &sm, int n, Mode mode, int need, double x, const Mass &base,
                            unsigned long long limit, double m, double t) {
    constexpr int kPer = kCap / kScatterThreads;
    const int j0 = threadIdx.x * kPer; /* each thread takes kPer consecutive ranks */
    Mass mine[kPer], run{};
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int j = j0 + k;
        mine[k] = j < n && sm.keys[j] <= limit ? cand_mass(sm.keys[j], m, t) : Mass{};
        add(run, mine[k]);
    }
    Mass c = block_excl_scan(run, sm);
    add(c, base);
    int pos = INT_MAX;
    Mass at{};
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int j = j0 + k;
        add(c, mine[k]);
        const bool ok = j < n && sm.keys[j] <= limit &&
                        (mode == BY_COUNT ? j + 1 == need : passes(mode, value(c), x));
        if (ok && pos == INT_MAX) {
            pos = j;
            at = c;
        }
    }
    const int first = block_min(pos, sm.scratch);
    if (pos == first && first != INT_MAX) { /* one thread: positions are its own */
        sm.found = sm.keys[first];
        sm.found_mass = at;
    }
    __syncthreads();
}

/* Is c, as far as the bits above `hib` go, equal to prefix? (hib = 63: no bits above.) */
__device__ __forceinline__ bool same_high(unsigned long long c, unsigned long long prefix, int hib) {
    return hib >= 63 || ((c ^ prefix) >> (hib + 1)) == 0;
}

/* The first candidate of bin b (in the canonical order, not above `limit`) that reaches `need`
 * (BY_COUNT) or whose C passes x: sm.found, sm.found_mass. A bin of at most kCap candidates is
 * sorted in shared memory; a larger one is first narrowed by a radix search on the candidates
 * (8 bits of the unique sort key a pass: the count and exact mass of each digit, then the
 * digit that holds the answer), until what is left fits. */
__device__ void resolve(DecideSmem &sm, const Args &a, const RowPlan *p, int r, int b, Mode mode, int need, double x,
                        unsigned long long limit) {
    const double m = p->m, t = a.temperature;
    const unsigned lo = sm.off[b], hi = sm.off[b + 1];
    const unsigned long long *g = a.cand + (int64_t)r * a.vocab + lo; /* written by other blocks */
    const int n = (int)(hi - lo);
    Mass base = load_before(p, b); /* loads in flight with the candidates' below */
    if (n <= 32) { /* one warp: sort in registers, scan with shuffles, no block barrier */
        if (threadIdx.x < 32) {
            const int lane = threadIdx.x;
            unsigned long long c = lane < n ? __ldcg(&g[lane]) : ~0ull;
#pragma unroll
            for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
                for (int j = k >> 1; j > 0; j >>= 1) {
                    const unsigned long long o = __shfl_xor_sync(0xffffffffu, c, j);
                    c = (((lane & j) == 0) == ((lane & k) == 0)) ? min(c, o) : max(c, o);
                }
            }
            const bool valid = lane < n && c <= limit; /* sorted: the valid ones come first */
            Mass cum = warp_incl_scan(valid ? cand_mass(c, m, t) : Mass{});
            add(cum, base);
            const bool ok = valid && (mode == BY_COUNT ? lane + 1 == need : passes(mode, value(cum), x));
            const unsigned hit = __ballot_sync(0xffffffffu, ok);
            if (hit != 0 && lane == __ffs(hit) - 1) {
                sm.found = c;
                sm.found_mass = cum;
            }
        }
        __syncthreads();
        return;
    }
    if (n <= kCap) {
        if (sm.sorted_bin != b) {
            for (int i = threadIdx.x; i < n; i += kScatterThreads) sm.keys[i] = __ldcg(&g[i]);
            sort_keys(sm, n);
            if (threadIdx.x == 0) sm.sorted_bin = b;
            __syncthreads();
        }
        walk_sorted(sm, n, mode, need, x, base, limit, m, t);
        return;
    }

    /* Narrow: the candidates' key range first. */
    unsigned long long cmin = ~0ull, cmax = 0;
    for (int i = threadIdx.x; i < n; i += kScatterThreads) {
        const unsigned long long c = __ldcg(&g[i]);
        if (c <= limit) {
            cmin = min(cmin, c);
            cmax = max(cmax, c);
        }
    }
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            cmin = min(cmin, __shfl_xor_sync(0xffffffffu, cmin, o));
            cmax = max(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
        }
        if (lane == 0) {
            sm.red[0][warp] = cmin;
            sm.red[1][warp] = cmax;
        }
        __syncthreads();
        cmin = ~0ull;
        cmax = 0;
        for (int w = 0; w < kScatterThreads / 32; ++w) {
            cmin = min(cmin, sm.red[0][w]);
            cmax = max(cmax, sm.red[1][w]);
        }
    }
    unsigned long long prefix = cmin;
    int hib = cmin == cmax ? -1 : 63 - __clzll((long long)(cmin ^ cmax)); /* bits above hib are shared */
    int active = n;
    while (hib >= 0 && active > kCap) {
        const int shift = max(0, hib - 7);
        for (int i = threadIdx.x; i < 256; i += kScatterThreads) {
            sm.hcount[i] = 0u;
#pragma unroll
            for (int q = 0; q < kLimbs; ++q) sm.hmass[i][q] = 0ull;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += kScatterThreads) {
            const unsigned long long c = __ldcg(&g[i]);
            if (c > limit || !same_high(c, prefix, hib)) continue;
            const int d = (int)((c >> shift) & 0xff);
            atomicAdd(&sm.hcount[d], 1u);
            const Mass w = cand_mass(c, m, t);
#pragma unroll
            for (int q = 0; q < kLimbs; ++q)
                if (w.v[q] != 0) atomicAdd(&sm.hmass[d][q], w.v[q]);
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* 256 digits in order: the first that reaches the answer */
            Mass run = base;
            int cnt = 0, d = 0;
            for (; d < 255; ++d) {
                Mass next = run;
#pragma unroll
                for (int q = 0; q < kLimbs; ++q) next.v[q] += sm.hmass[d][q];
                const int cn = cnt + (int)sm.hcount[d];
                if (sm.hcount[d] != 0 && (mode == BY_COUNT ? cn >= need : passes(mode, value(next), x))) break;
                run = next;
                cnt = cn;
            }
            sm.nsel = d;
            sm.found_mass = run; /* the mass before digit d */
            sm.nkeys = cnt;      /* the count before digit d */
        }
        __syncthreads();
        const int d = sm.nsel;
        base = sm.found_mass;
        need -= sm.nkeys;
        active = (int)sm.hcount[d];
        const unsigned long long below_hib = hib >= 63 ? ~0ull : (1ull << (hib + 1)) - 1;
        prefix = (prefix & ~(below_hib & ~((1ull << shift) - 1))) | ((unsigned long long)d << shift);
        hib = shift - 1;
        __syncthreads();
    }
    /* What is left fits: gather it, sort it, walk it. */
    if (threadIdx.x == 0) sm.nkeys = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kScatterThreads) {
        const unsigned long long c = __ldcg(&g[i]);
        if (c <= limit && same_high(c, prefix, hib)) sm.keys[atomicAdd(&sm.nkeys, 1)] = c;
    }
    __syncthreads();
    const int k = sm.nkeys;
    sort_keys(sm, k);
    if (threadIdx.x == 0) sm.sorted_bin = -1; /* a part of the bin */
    walk_sorted(sm, k, mode, need, x, base, limit, m, t);
}

/* The first bin b <= last whose end value passes x: value(before[b + 1]) for b < last, and
 * `last_end` (C at the last candidate, which passes) for b == last. */
__device__ int find_bin(DecideSmem &sm, int last, double last_end, Mode mode, double x) {
    int best = INT_MAX;
    for (int b = threadIdx.x; b <= last; b += kScatterThreads) {
        if (passes(mode, b == last ? last_end : sm.end[b + 1], x)) {
            best = b;
            break;
        }
    }
    const int f = block_min(best, sm.scratch);
    return f == INT_MAX ? last : f;
}

__global__ void __launch_bounds__(kScatterThreads, 1) sample_scatter_kernel(Args a) {
    ts::pdl_wait();
    __shared__ DecideSmem sm;
    const int r = blockIdx.y, tid = threadIdx.x;
    RowPlan *p = a.plan + r; /* written by the hist kernel, an earlier launch */
    const int fault = p->fault;
    if (fault == 0) {
        const double m = p->m, lo = p->lo, scale = p->scale;
        const int last = p->last_bin;
        const float *x = a.logits + (int64_t)r * a.vocab;
        unsigned long long *out = a.cand + (int64_t)r * a.vocab;
        const int c0 = blockIdx.x * a.chunk, c1 = min(a.vocab, c0 + a.chunk);
        for (int i = tid; i <= kBins; i += kScatterThreads) sm.count[i] = 0u;
        __syncthreads();
        for (int t0 = c0; t0 < c1; t0 += kTile) { /* per tile: count, reserve, write */
            int bin[kScatterItems];
            unsigned rank[kScatterItems];
#pragma unroll
            for (int k = 0; k < kScatterItems; ++k) {
                const int c = t0 + k * kScatterThreads + tid;
                bin[k] = -1;
                if (c < c1) {
                    const float l = x[c];
                    if (l > -INFINITY) {
                        const int b = bin_of(l, m, lo, scale);
                        if (b <= last) {
                            bin[k] = b;
                            rank[k] = atomicAdd(&sm.count[b], 1u);
                        }
                    }
                }
            }
            __syncthreads();
            for (int b = tid; b <= last; b += kScatterThreads)
                if (sm.count[b] != 0) sm.count[b] = atomicAdd(&p->cursor[b], sm.count[b]);
            __syncthreads();
#pragma unroll
            for (int k = 0; k < kScatterItems; ++k) {
                if (bin[k] >= 0) {
                    const int c = t0 + k * kScatterThreads + tid;
                    out[sm.count[bin[k]] + rank[k]] = composite(order_key(x[c]), c);
                }
            }
            __syncthreads();
            for (int i = tid; i <= kBins; i += kScatterThreads) sm.count[i] = 0u;
            __syncthreads();
        }
    }
    if (!last_block(&a.acc[r].done_scatter, gridDim.x, &sm.last)) return;
    if (tid == 0) a.acc[r].done_scatter = 0;
    if (fault != 0) {
        if (tid == 0) a.tokens[r] = -1; /* the fault is already recorded */
        return;
    }

    /* Decide. The bins' end values and offsets first, in one round of loads. */
    for (int b = tid; b <= kBins; b += kScatterThreads) {
        sm.end[b] = value(load_before(p, b));
        sm.off[b] = __ldcg(&p->offset[b]);
    }
    if (tid == 0) sm.sorted_bin = -1;
    __syncthreads();
    unsigned long long limit = ~0ull; /* the last candidate of the nucleus so far */
    int last = __ldcg(&p->last_bin);
    double last_end; /* C at the last candidate */
    const int cut = __ldcg(&p->cut_bin);
    if (cut >= 0) { /* top-k: rank top_k - 1 */
        resolve(sm, a, p, r, cut, BY_COUNT, __ldcg(&p->cut_need), 0.0, limit);
        limit = sm.found;
        last_end = value(sm.found_mass);
    } else {
        last_end = sm.end[kBins];
    }
    const double s = last_end; /* S */
    if (a.top_p < 1.0) {       /* top-p: the first rank whose C reaches p S */
        const double thr = a.top_p * s;
        const int b = find_bin(sm, last, last_end, AT_LEAST, thr);
        resolve(sm, a, p, r, b, AT_LEAST, 0, thr, limit);
        limit = sm.found;
        last = b;
        last_end = value(sm.found_mass); /* S' */
    }
    const double u = ts::philox_uniform(ts::philox_words(a.seed, a.step, (uint32_t)(a.row0 + r)));
    const double target = u * last_end;
    const int b = find_bin(sm, last, last_end, ABOVE, target);
    resolve(sm, a, p, r, b, ABOVE, 0, target, limit);
    if (tid == 0) a.tokens[r] = (int32_t)(uint32_t)sm.found;
}

/* ---- host side ---------------------------------------------------------------------------------- */

size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

int launch_sample(int32_t *tokens, const float *logits, const ts_sample_config &c, cudaStream_t stream) {
    const char *op = "sample";
    const bool greedy = c.temperature == 0.0f;
    /* Rows per launch group: grid.y <= 65535; when sampling, a bounded workspace. */
    int64_t group = std::min<int64_t>(c.rows, 65535);
    if (!greedy) {
        const int64_t row_bytes = (int64_t)c.vocab * 8 + (int64_t)(sizeof(RowPlan) + sizeof(RowHist));
        group = std::max<int64_t>(1, std::min<int64_t>(group, kMaxGroupBytes / row_bytes));
    }
    /* Blocks per row: about two per SM over the group, whole tiles. */
    const int64_t per_row = std::max<int64_t>(1, ts::ceil_div(2 * ts::sm_count(), group));
    const int chunk = (int)std::min<int64_t>({ts::ceil_div(ts::ceil_div(c.vocab, per_row), kTile) * kTile,
                                              ts::ceil_div(c.vocab, kTile) * kTile, (int64_t)kMaxChunk});
    const int chunks = (int)ts::ceil_div(c.vocab, chunk);

    /* WS_SAMPLE: plans, candidates, per-row fault details. WS_SAMPLE_COUNTERS: accumulators and
     * bin totals that every launch leaves at zero (zeroed when allocated). */
    const size_t g = (size_t)group;
    const size_t plan_bytes = greedy ? 0 : align256(g * sizeof(RowPlan));
    const size_t cand_bytes = greedy ? 0 : align256(g * (size_t)c.vocab * sizeof(unsigned long long));
    const size_t fault_bytes = align256(g * 3 * sizeof(int));
    const size_t acc_bytes = align256(g * sizeof(RowAcc));
    const size_t hist_bytes = greedy ? 0 : align256(g * sizeof(RowHist));
    void *ws = nullptr, *cnt = nullptr;
    TS_CHECK(op, ts::workspace(op, ts::WS_SAMPLE, plan_bytes + cand_bytes + fault_bytes, &ws));
    TS_CHECK(op, ts::workspace(op, ts::WS_SAMPLE_COUNTERS, acc_bytes + hist_bytes + sizeof(LaunchAcc), &cnt));
    char *w = static_cast<char *>(ws), *z = static_cast<char *>(cnt);

    Args a{};
    a.vocab = c.vocab;
    a.chunk = chunk;
    a.top_k = c.top_k;
    a.temperature = (double)c.temperature;
    a.top_p = (double)c.top_p;
    a.seed = c.seed;
    a.step = c.step;
    a.plan = greedy ? nullptr : reinterpret_cast<RowPlan *>(w);
    a.cand = greedy ? nullptr : reinterpret_cast<unsigned long long *>(w + plan_bytes);
    a.row_fault = reinterpret_cast<int *>(w + plan_bytes + cand_bytes);
    a.row_col = a.row_fault + g;
    a.row_bits = reinterpret_cast<uint32_t *>(a.row_col + g);
    a.acc = reinterpret_cast<RowAcc *>(z);
    a.hist = greedy ? nullptr : reinterpret_cast<RowHist *>(z + acc_bytes);
    a.launch = reinterpret_cast<LaunchAcc *>(z + acc_bytes + hist_bytes);
    a.fault = ts::fault_record();

    const bool vec = c.vocab % 4 == 0 && ts::aligned16(logits);
    auto stats = greedy ? (vec ? sample_stats_kernel<true, true> : sample_stats_kernel<false, true>)
                        : (vec ? sample_stats_kernel<true, false> : sample_stats_kernel<false, false>);
    for (int64_t row0 = 0; row0 < c.rows; row0 += group) {
        const int rows = (int)std::min<int64_t>(group, c.rows - row0);
        a.logits = logits + row0 * (int64_t)c.vocab;
        a.tokens = tokens + row0;
        a.row0 = (int)row0;
        a.rows = (unsigned)rows;
        const dim3 grid((unsigned)chunks, (unsigned)rows);
        const char *d = ts::dims("rows=%d (from %lld) vocab=%d chunk=%d temperature=%g top_k=%d top_p=%g%s", rows,
                                 (long long)row0, c.vocab, chunk, c.temperature, c.top_k, c.top_p, vec ? " vec" : "");
        TS_LAUNCH(op, stats, grid, kThreads, 0, stream, d, a);
        if (greedy) continue;
        TS_LAUNCH(op, sample_hist_kernel, grid, kThreads, 0, stream, d, a);
        TS_LAUNCH(op, sample_scatter_kernel, grid, kScatterThreads, 0, stream, d, a);
    }
    return TS_OK;
}

} // namespace

extern "C" int ts_sample(int32_t *tokens, const float *logits, const ts_sample_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("sample");
    v.ptr(tokens, "tokens");
    v.ptr(logits, "logits");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.positive(cfg->rows, "cfg->rows");
    v.positive(cfg->vocab, "cfg->vocab");
    const float t = cfg->temperature, p = cfg->top_p;
    if (!(t >= 0.0f) || std::isinf(t))
        v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->temperature = %g: must be 0 (greedy) or positive and finite", t);
    if (cfg->top_k < 0) v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->top_k = %d: must be 0 (off) or positive", cfg->top_k);
    if (!(p > 0.0f && p <= 1.0f)) v.fail(TS_ERR_INVALID_ARGUMENT, "cfg->top_p = %g: must be in (0, 1]", p);
    v.elements("logits", {cfg->rows, cfg->vocab});
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    return launch_sample(tokens, logits, *cfg, st);
}
