// Replay cost of a chain of dependent kernels in a CUDA graph, with and without programmatic
// dependent launch (PDL): docs/gpu-runbook.md, "Profiling". On a GPU host: nvcc -arch=sm_90 -O2 -o ll tools/bench/launch_latency.cu && ./ll
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <bool PDL>
__global__ void step(float *buf, int n) {
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = buf[i] * 0.5f + 1.0f;
    if (PDL) asm volatile("griddepcontrol.launch_dependents;");
}

template <bool PDL>
int run(int nodes, int blocks, float *buf, cudaStream_t s, float *ms_out) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < nodes; i++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = blocks; cfg.blockDim = 256; cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at; cfg.numAttrs = PDL ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, step<PDL>, buf, blocks * 256));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    std::vector<float> t;
    for (int r = 0; r < 60; r++) {
        cudaEventRecord(a, s); cudaGraphLaunch(ge, s); cudaEventRecord(b, s); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 10) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    *ms_out = t[t.size() / 2];
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    return 0;
}

int main() {
    float *buf; CK(cudaMalloc(&buf, 132 * 8 * 256 * sizeof(float))); cudaMemset(buf, 0, 132 * 8 * 256 * 4);
    cudaStream_t s; cudaStreamCreate(&s);
    for (int blocks : {1, 132, 1056}) {
        float plain, pdl;
        if (run<false>(200, blocks, buf, s, &plain) || run<true>(200, blocks, buf, s, &pdl)) return 1;
        printf("200 dependent kernels, %4d blocks x 256: graph %.1f us/kernel, with PDL %.1f us/kernel\n",
               blocks, plain * 1000 / 200, pdl * 1000 / 200);
    }
    return 0;
}
