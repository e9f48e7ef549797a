/*
 * debug_hang.cu — ts_debug_hang: a kernel that never finishes, for the tests of the deadline
 * every wait for the device has (deadline.cu). It spins on a flag in device memory that nothing
 * sets, as a persistent kernel waiting for a partial that is never written does.
 */
#include "internal.h"

namespace {

__global__ void debug_hang_kernel(const volatile int *flag) {
    ts::pdl_wait();
    while (*flag == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        __nanosleep(1000);
#endif
    }
}

} // namespace

extern "C" int ts_debug_hang(void *stream) {
    TS_STICKY_GUARD();
    const char *op = "debug_hang";
    TS_CHECK(op, ts::refuse_during_capture(op));
    cudaStream_t st;
    int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    /* The flag: one word allocated once (the hung kernel holds it until the process exits),
     * zeroed before the launch, written by nothing. */
    static int *flag = nullptr;
    if (flag == nullptr) TS_CHECK(op, cudaMalloc(&flag, sizeof(int)));
    TS_CHECK(op, cudaMemsetAsync(flag, 0, sizeof(int), st));
    const volatile int *f = flag;
    TS_LAUNCH(op, debug_hang_kernel, dim3(1), dim3(32), 0, st, ts::dims("flag=%p", (const void *)flag), f);
    return TS_OK;
}
