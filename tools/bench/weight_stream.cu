// How fast a decode gemv's weight read can be, by access pattern: each kernel here only reads a
// weight-sized buffer (and folds it into one word a warp, so nothing is optimised away), in the
// order one of the library's decode gemvs reads it, or in an order it could read it instead
// (docs/gpu-runbook.md, "Profiling"). Each time: one launch after an L2 flush, CUDA events, median
// of 30 after 5 warm-ups; and the same launch 32 times in a CUDA graph (a model step's
// back-to-back kernels), per launch, each reading one of 4 copies of the weight in turn (never
// an L2 hit). Buffers hold random bytes.
//
// On a GPU host: nvcc -arch=sm_90 -O3 -o ws tools/bench/weight_stream.cu && ./ws
// With the library's decode gemvs timed the same way (after make cuda): add -DWITH_LIB -Icuda/include
// -Lcuda/build -ltouchstone_cuda -Xlinker -rpath=$PWD/cuda/build; `./ws lib` times only the library's.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#ifdef WITH_LIB
#include "touchstone.h"
#endif

#define CK(x)                                                                                                         \
    do {                                                                                                              \
        cudaError_t e = (x);                                                                                          \
        if (e != cudaSuccess) {                                                                                       \
            printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));                                 \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

__device__ __forceinline__ uint4 ld16(const unsigned char *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ld4(const unsigned char *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
__device__ __forceinline__ void sink(uint32_t *out, uint32_t acc) {
    if ((threadIdx.x & 31) == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] ^= acc;
}

// flat: the buffer as one array, U 16-byte vectors a lane in flight, a warp's 32 lanes on 512
// contiguous bytes, grid-stride (the copy kernel's order).
template <int U>
__global__ void __launch_bounds__(256) flat(uint32_t *out, const unsigned char *w, int64_t bytes) {
    uint32_t acc = 0;
    const int64_t step = (int64_t)gridDim.x * blockDim.x * 16 * U;
    for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31)) * 16 * U + (threadIdx.x & 31) * 16;
         base < bytes; base += step) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = base + u * 512 < bytes ? ld16(w + base + u * 512) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
    }
    sink(out, acc);
}

// rows8: gemm_fp8's decode kernel: a warp owns 8 rows of w [n, k] (one an lane group g), lane t
// reads 16 bytes at 16 t and 64 + 16 t of each 128-wide block, D blocks in flight (a ring).
template <int D>
__global__ void __launch_bounds__(256) rows8(uint32_t *out, const unsigned char *w, int n, int k_all, int ksplit) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t acc = 0;
    const int tiles = n / 8, k = k_all / ksplit;
    for (int item = blockIdx.x * 8 + threadIdx.x / 32; item < tiles * ksplit; item += gridDim.x * 8) {
        const int tile = item % tiles, sp = item / tiles;
        const unsigned char *row = w + (int64_t)(tile * 8 + g) * k_all + sp * k + 16 * t;
        uint4 ring[D][2];
#pragma unroll
        for (int d = 0; d < D; ++d) {
            ring[d][0] = d * 128 < k ? ld16(row + d * 128) : make_uint4(0, 0, 0, 0);
            ring[d][1] = d * 128 < k ? ld16(row + d * 128 + 64) : make_uint4(0, 0, 0, 0);
        }
        for (int k0 = 0; k0 < k; k0 += D * 128) {
#pragma unroll
            for (int d = 0; d < D; ++d) {
                acc ^= fold(ring[d][0]) ^ fold(ring[d][1]);
                const int kk = k0 + (D + d) * 128;
                ring[d][0] = kk < k ? ld16(row + kk) : make_uint4(0, 0, 0, 0);
                ring[d][1] = kk < k ? ld16(row + kk + 64) : make_uint4(0, 0, 0, 0);
            }
        }
    }
    sink(out, acc);
}

// rows8c: a warp owns 8 rows as rows8 does, but reads them one row at a time, 512 contiguous
// bytes a load (U in flight): the same bytes a warp, in DRAM order within each row.
template <int U>
__global__ void __launch_bounds__(256) rows8c(uint32_t *out, const unsigned char *w, int n, int k_all, int ksplit) {
    const int lane = threadIdx.x & 31;
    uint32_t acc = 0;
    const int tiles = n / 8, k = k_all / ksplit;
    for (int item = blockIdx.x * 8 + threadIdx.x / 32; item < tiles * ksplit; item += gridDim.x * 8) {
        const int tile = item % tiles, sp = item / tiles;
        /* row r of the warp's 8, bytes [sp k, sp k + k): 512-byte runs, row after row */
        const unsigned char *base = w + (int64_t)tile * 8 * k_all + sp * k + 16 * lane;
        const int runs = k / 512, span = 8 * runs;
        for (int o = 0; o < span; o += U) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int run = o + u;
                v[u] = run < span ? ld16(base + (int64_t)(run / runs) * k_all + (run % runs) * 512) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
        }
    }
    sink(out, acc);
}

// awq: gemm_w4a16's AWQ decode: packed W^T [k, n/8] words; a warp owns 8 word columns (32 bytes
// of every row), lane (g, t) reads word column g of rows 8 t .. 8 t + 7 of each 32-row step, two
// steps in flight.
__global__ void __launch_bounds__(256) awq(uint32_t *out, const unsigned char *qw, int n, int k_all, int ksplit) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int words = n / 8, tiles = words / 8, k = k_all / ksplit;
    uint32_t acc = 0;
    for (int item = blockIdx.x * 8 + threadIdx.x / 32; item < tiles * ksplit; item += gridDim.x * 8) {
        const int tile = item % tiles, sp = item / tiles;
        const unsigned char *col = qw + (int64_t)(tile * 8 + g) * 4 + (int64_t)sp * k * words * 4;
        for (int r0 = 0; r0 < k; r0 += 64) {
            uint32_t v[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const int r = r0 + (i / 8) * 32 + 8 * t + (i % 8);
                v[i] = r < k ? ld4(col + (int64_t)r * words * 4) : 0u;
            }
#pragma unroll
            for (int i = 0; i < 16; ++i) acc ^= v[i];
        }
    }
    sink(out, acc);
}

// gptq: gemm_w4a16's GPTQ decode: packed [k/8, n] words; a warp owns 64 columns (256 bytes of
// every packed row), lane (g, t) reads 16 bytes at columns 4 g and 32 + 4 g of packed row t of
// each 4-row step, two steps in flight.
__global__ void __launch_bounds__(256) gptq(uint32_t *out, const unsigned char *qw, int n, int k_all, int ksplit) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int prow = k_all / 8 / ksplit, tiles = n / 64;
    uint32_t acc = 0;
    for (int item = blockIdx.x * 8 + threadIdx.x / 32; item < tiles * ksplit; item += gridDim.x * 8) {
        const int tile = item % tiles, sp = item / tiles;
        const unsigned char *col = qw + (int64_t)(tile * 64 + 4 * g) * 4 + (int64_t)sp * prow * n * 4;
        for (int p0 = 0; p0 < prow; p0 += 8) {
            uint4 v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int pr = p0 + (i / 2) * 4 + t;
                v[i] = pr < prow ? ld16(col + (int64_t)pr * n * 4 + (i % 2) * 128) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) acc ^= fold(v[i]);
        }
    }
    sink(out, acc);
}

struct Timer {
    cudaEvent_t a, b;
    Timer() {
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
    }
};

unsigned char *g_flush;
const size_t kFlush = (size_t)256 << 20;
/* Launches rotate over copies of the weight (4 x 67 MB, past the 50 MB L2), so that a graph's
 * back-to-back launches read from DRAM as a model step's different weights do. */
constexpr int kCopies = 4;
unsigned char *g_w[kCopies];
int g_pick = 0;
const unsigned char *cur() { return g_w[g_pick]; }

template <typename F>
void measure(const char *name, int64_t bytes, double copy_gbps, int grid, F launch, cudaStream_t s) {
    Timer tm;
    std::vector<float> ms;
    for (int i = 0; i < 35; ++i) {
        CK(cudaMemsetAsync(g_flush, i, kFlush, s));
        g_pick = i % kCopies;
        CK(cudaEventRecord(tm.a, s));
        launch(s);
        CK(cudaEventRecord(tm.b, s));
        CK(cudaEventSynchronize(tm.b));
        float t;
        CK(cudaEventElapsedTime(&t, tm.a, tm.b));
        if (i >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double one = ms[ms.size() / 2];
    /* 32 launches in a graph: back to back, as a model step replays them */
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 32; ++i) {
        g_pick = i % kCopies;
        launch(s);
    }
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    std::vector<float> gms;
    for (int i = 0; i < 12; ++i) {
        CK(cudaEventRecord(tm.a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(tm.b, s));
        CK(cudaEventSynchronize(tm.b));
        float t;
        CK(cudaEventElapsedTime(&t, tm.a, tm.b));
        if (i >= 2) gms.push_back(t / 32);
    }
    std::sort(gms.begin(), gms.end());
    const double rep = gms[gms.size() / 2];
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
    /* the floor: the bytes read at the copy's rate of bytes moved, as PERF.md counts it */
    const double floor_ms = (double)bytes / (copy_gbps * 1e6);
    printf("| %-44s | %6.1f MB | grid %5d | %8.4f | %5.1f%% | %8.4f | %5.1f%% |\n", name, bytes / 1e6, grid, one,
           100.0 * floor_ms / one, rep, 100.0 * floor_ms / rep);
}

int main(int argc, char **argv) {
    const bool lib_only = argc > 1 && std::string(argv[1]) == "lib";
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_flush, kFlush));
    /* copy bandwidth as the library measures it: 1 GiB copy, bytes read + written */
    const size_t cb = (size_t)1 << 30;
    void *ca, *cbuf;
    CK(cudaMalloc(&ca, cb));
    CK(cudaMalloc(&cbuf, cb));
    CK(cudaMemset(ca, 1, cb));
    Timer tm;
    std::vector<float> cms;
    for (int i = 0; i < 23; ++i) {
        CK(cudaEventRecord(tm.a, s));
        CK(cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(tm.b, s));
        CK(cudaEventSynchronize(tm.b));
        float t;
        CK(cudaEventElapsedTime(&t, tm.a, tm.b));
        if (i >= 3) cms.push_back(t);
    }
    std::sort(cms.begin(), cms.end());
    const double copy_gbps = 2.0 * cb / (cms[cms.size() / 2] * 1e6);
    CK(cudaFree(ca));
    CK(cudaFree(cbuf));
    printf("%s, %d SMs, copy bandwidth %.0f GB/s (read + write)\n\n", prop.name, sms, copy_gbps);
    printf("| pattern | bytes | grid | one launch ms | %% copy BW | in a graph ms | %% copy BW |\n|---|---|---|---|---|---|---|\n");

    struct Shape {
        const char *name;
        int n, k;
    } shapes[] = {{"llama3-8b up 14336x4096", 14336, 4096},   {"llama3.2-1b gate/up 16384x2048", 16384, 2048},
                  {"llama3.2-1b down 2048x8192", 2048, 8192}, {"llama3.2-1b qkv 3072x2048", 3072, 2048},
                  {"llama3.2-1b o 2048x2048", 2048, 2048}};
    const size_t maxb = (size_t)16384 * 4096;
    uint32_t *out;
    for (auto &w : g_w) CK(cudaMalloc(&w, maxb));
    CK(cudaMalloc(&out, 1 << 22));
    {
        std::vector<unsigned char> h(maxb);
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (auto &b : h) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b = (unsigned char)x;
        }
        for (auto &w : g_w) CK(cudaMemcpy(w, h.data(), maxb, cudaMemcpyHostToDevice));
    }
#ifdef WITH_LIB
    if (ts_init(dev) != 0) return 1;
    /* operands of the library's ops, sized for the largest shape */
    void *lib_out, *lib_x8, *lib_x16, *lib_s16;
    float *lib_scales;
    int32_t *lib_zeros, *lib_gidx;
    CK(cudaMalloc(&lib_out, 16384 * 16 * 4));
    CK(cudaMalloc(&lib_x8, 8192 * 16));
    CK(cudaMalloc(&lib_x16, 8192 * 16 * 2));
    CK(cudaMalloc(&lib_scales, 16384 * 64 * 4));
    CK(cudaMalloc(&lib_s16, 16384 * 64 * 2));
    CK(cudaMalloc(&lib_zeros, 16384 * 64 / 8 * 4));
    CK(cudaMalloc(&lib_gidx, 8192 * 4));
    {
        std::vector<float> f(16384 * 64, 0.01f);
        CK(cudaMemcpy(lib_scales, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
        std::vector<unsigned short> h(16384 * 64, 0x211F); /* fp16 0.01 */
        CK(cudaMemcpy(lib_s16, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        std::vector<unsigned short> xh(8192 * 16);
        for (size_t i = 0; i < xh.size(); ++i) xh[i] = 0x3C00 | (unsigned short)(i * 37 % 1024); /* fp16 in [1, 2) */
        CK(cudaMemcpy(lib_x16, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
        std::vector<unsigned char> x8(8192 * 16);
        for (size_t i = 0; i < x8.size(); ++i) x8[i] = (unsigned char)(0x30 + i * 7 % 16); /* e4m3 0.5..0.97 */
        CK(cudaMemcpy(lib_x8, x8.data(), x8.size(), cudaMemcpyHostToDevice));
        std::vector<int32_t> z(16384 * 64 / 8, 0x88888888);
        CK(cudaMemcpy(lib_zeros, z.data(), z.size() * 4, cudaMemcpyHostToDevice));
        std::vector<int32_t> gi(8192);
        for (int i = 0; i < 8192; ++i) gi[i] = i / 128;
        CK(cudaMemcpy(lib_gidx, gi.data(), gi.size() * 4, cudaMemcpyHostToDevice));
    }
#endif
    auto occ = [&](auto kernel) {
        int b = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, 256, 0));
        return b * sms;
    };
    for (const Shape &sh : shapes) {
        const int64_t fb = (int64_t)sh.n * sh.k; /* FP8 weight bytes */
        const int64_t qb = fb / 2;               /* 4-bit packed bytes */
        char name[128];
        auto run = [&](const char *what, int64_t bytes, int grid, auto launch) {
            if (lib_only && grid != 0) return; /* the library's rows have no grid of their own */
            snprintf(name, sizeof name, "%s %s", sh.name, what);
            measure(name, bytes, copy_gbps, grid, launch, s);
        };
        {
            const int grid = occ(flat<8>);
            run("fp8 flat U8", fb, grid, [&](cudaStream_t st) { flat<8><<<grid, 256, 0, st>>>(out, cur(), fb); });
        }
        /* k split (a power of two, slices of at least 512 bytes) until the items fill the resident
         * warps, as the library's split count aims to */
        auto split_for = [&](int items, int resident_blocks, int min_k) {
            int ks = 1;
            while (items * ks * 2 <= resident_blocks * 8 && sh.k / (ks * 2) >= min_k) ks *= 2;
            return ks;
        };
        {
            const int ks = split_for(sh.n / 8, occ(rows8<4>), 512);
            const int grid = std::min(occ(rows8<4>), (sh.n / 8 * ks + 7) / 8);
            run("fp8 rows8 D4 (gemm_fp8 decode)", fb, grid,
                [&](cudaStream_t st) { rows8<4><<<grid, 256, 0, st>>>(out, cur(), sh.n, sh.k, ks); });
        }
        {
            const int ks = split_for(sh.n / 8, occ(rows8<8>), 1024);
            const int grid = std::min(occ(rows8<8>), (sh.n / 8 * ks + 7) / 8);
            run("fp8 rows8 D8", fb, grid,
                [&](cudaStream_t st) { rows8<8><<<grid, 256, 0, st>>>(out, cur(), sh.n, sh.k, ks); });
        }
        {
            const int ks = split_for(sh.n / 8, occ(rows8c<8>), 512);
            const int grid = std::min(occ(rows8c<8>), (sh.n / 8 * ks + 7) / 8);
            run("fp8 rows8 row by row U8", fb, grid,
                [&](cudaStream_t st) { rows8c<8><<<grid, 256, 0, st>>>(out, cur(), sh.n, sh.k, ks); });
        }
        {
            const int grid = occ(flat<8>);
            run("4-bit flat U8", qb, grid, [&](cudaStream_t st) { flat<8><<<grid, 256, 0, st>>>(out, cur(), qb); });
        }
        {
            const int ks = split_for(sh.n / 64, occ(awq), 128);
            const int grid = std::min(occ(awq), (sh.n / 64 * ks + 7) / 8);
            run("awq strips (gemm_w4a16 decode)", qb, grid,
                [&](cudaStream_t st) { awq<<<grid, 256, 0, st>>>(out, cur(), sh.n, sh.k, ks); });
        }
#ifdef WITH_LIB
        /* the library's ops on the same bytes: x and scales small and finite */
        for (int m : {1, 4, 16})
            for (int block = 1; block >= 0; --block) {
                ts_gemm_fp8_config c{TS_BF16, m, sh.n, sh.k, block};
                char what[64];
                snprintf(what, sizeof what, "gemm_fp8 %s M=%d (library)", block ? "block" : "channel", m);
                run(what, fb, 0, [&](cudaStream_t st) {
                    if (ts_gemm_fp8(lib_out, lib_x8, lib_scales, cur(), lib_scales, &c, st) != 0) exit(1);
                });
            }
        for (int fmt = 0; fmt < 2; ++fmt) {
            ts_w4a16_config c{TS_F16, 1, sh.n, sh.k, 128, fmt};
            run(fmt == 0 ? "gemm_w4a16 awq M=1 (library)" : "gemm_w4a16 gptq M=1 (library)", qb, 0, [&](cudaStream_t st) {
                const int32_t *q = reinterpret_cast<const int32_t *>(cur());
                if (ts_gemm_w4a16(lib_out, lib_x16, q, lib_zeros, lib_s16, fmt ? lib_gidx : nullptr, &c, st) != 0)
                    exit(1);
            });
        }
#endif
        {
            const int ks = split_for(sh.n / 64, occ(gptq), 128);
            const int grid = std::min(occ(gptq), (sh.n / 64 * ks + 7) / 8);
            run("gptq strips (gemm_w4a16 decode)", qb, grid,
                [&](cudaStream_t st) { gptq<<<grid, 256, 0, st>>>(out, cur(), sh.n, sh.k, ks); });
        }
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
