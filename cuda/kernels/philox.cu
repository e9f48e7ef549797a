/*
 * philox: the raw Philox4x32-10 stream of docs/sampling.md, out uint32 [n, 4], row i the words for
 * key seed and counter (step + i mod 2^64, row). It exists so the suites can check the generator
 * bit for bit against the Random123 known answers and the Go and Python implementations; the
 * words come from philox.cuh, the same code ts_sample draws with.
 */
#include "internal.h"
#include "philox.cuh"

namespace {

__global__ void philox_kernel(uint32_t *out, uint64_t seed, uint64_t step, uint32_t row, int n) {
    ts::pdl_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint4 w = ts::philox_words(seed, step + (uint64_t)i, row); /* the step wraps mod 2^64 */
        uint32_t *o = out + 4 * i;
        o[0] = w.x;
        o[1] = w.y;
        o[2] = w.z;
        o[3] = w.w;
    }
}

} // namespace

extern "C" int ts_philox(uint32_t *out, const ts_philox_config *cfg, void *stream) {
    TS_STICKY_GUARD();
    ts::Validator v("philox");
    v.ptr(out, "out");
    v.ptr(cfg, "cfg");
    if (!v.ok()) return v.status();
    v.positive(cfg->n, "cfg->n");
    if (!v.ok()) return v.status();
    cudaStream_t st;
    const int s = ts::ready(v.op(), stream, &st);
    if (s != TS_OK) return s;
    constexpr int kThreads = 256;
    const char *d = ts::dims("n=%d seed=%llu step=%llu row=%u", cfg->n, (unsigned long long)cfg->seed,
                             (unsigned long long)cfg->step, cfg->row);
    TS_LAUNCH(v.op(), philox_kernel, ts::grid_for(cfg->n, kThreads), kThreads, 0, st, d, out, cfg->seed, cfg->step,
              cfg->row, cfg->n);
    return TS_OK;
}
