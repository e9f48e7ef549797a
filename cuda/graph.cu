/*
 * graph.cu — CUDA graphs of the library's ops (touchstone.h, "graphs").
 *
 * A capture records the launches, cuBLAS calls and device copies issued on one stream. The
 * capture mode is relaxed: the Go caller may issue the ops of one capture from several OS
 * threads (a goroutine moves between them), and relaxed mode is the one that does not tie
 * the capture's legality to the thread that began it. What a capture cannot record (a wait
 * for the device, an allocation, a free) is refused by the library before CUDA sees it
 * (ts::refuse_during_capture), so a refused call leaves the capture intact and the message
 * names the call instead of a later "capture invalidated".
 */
#include <mutex>

#include "internal.h"

struct ts_graph {
    cudaGraphExec_t exec;
};

namespace ts {
namespace {

std::mutex g_capture_mu;
std::atomic<bool> g_capturing{false};
cudaStream_t g_capture_stream = nullptr; /* guarded by g_capture_mu */

} // namespace

bool capturing() { return g_capturing.load(std::memory_order_acquire); }

int refuse_during_capture(const char *op) {
    if (!capturing()) return TS_OK;
    return set_error(TS_ERR_UNSUPPORTED,
                     "%s: not allowed while a graph capture is open (ts_graph_begin .. ts_graph_end): it waits for "
                     "the device, allocates or frees, which a capture cannot record",
                     op);
}

} // namespace ts

using ts::set_error;

extern "C" {

int ts_graph_begin(void *stream) {
    TS_STICKY_GUARD();
    const char *op = "ts_graph_begin";
    cudaStream_t st;
    int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    std::lock_guard<std::mutex> lk(ts::g_capture_mu);
    if (ts::g_capturing.load())
        return set_error(TS_ERR_INVALID_ARGUMENT, "%s: a capture is already open: call ts_graph_end first", op);
    TS_CHECK(op, cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    ts::g_capture_stream = st;
    ts::g_capturing.store(true, std::memory_order_release);
    return TS_OK;
}

int ts_graph_end(void *stream, ts_graph **graph) {
    TS_STICKY_GUARD();
    const char *op = "ts_graph_end";
    if (graph == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: graph = NULL: a pointer is required", op);
    *graph = nullptr;
    cudaStream_t st;
    int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    std::lock_guard<std::mutex> lk(ts::g_capture_mu);
    if (!ts::g_capturing.load() || st != ts::g_capture_stream)
        return set_error(TS_ERR_INVALID_ARGUMENT, "%s: stream = %p: no capture is open on it (ts_graph_begin)", op,
                         static_cast<void *>(st));
    cudaGraph_t g = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(st, &g);
    ts::g_capture_stream = nullptr;
    ts::g_capturing.store(false, std::memory_order_release);
    if (ended != cudaSuccess) {
        if (g != nullptr) cudaGraphDestroy(g);
        /* An op failed inside CUDA during the capture, which invalidates it. */
        TS_CHECK(op, ended);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    TS_CHECK(op, inst);
    *graph = new ts_graph{exec};
    return TS_OK;
}

int ts_graph_launch(ts_graph *graph, void *stream) {
    TS_STICKY_GUARD();
    const char *op = "ts_graph_launch";
    TS_CHECK(op, ts::refuse_during_capture(op));
    if (graph == nullptr) return set_error(TS_ERR_INVALID_ARGUMENT, "%s: graph = NULL: a graph is required", op);
    cudaStream_t st;
    int s = ts::ready(op, stream, &st);
    if (s != TS_OK) return s;
    ts::log_library_call(op, "cudaGraphLaunch", "");
    TS_CHECK(op, cudaGraphLaunch(graph->exec, st));
    TS_CHECK(op, ts::after_launch(op, st));
    return TS_OK;
}

int ts_graph_destroy(ts_graph *graph) {
    TS_STICKY_GUARD();
    if (graph == nullptr) return TS_OK;
    const char *op = "ts_graph_destroy";
    int s = ts::ready(op, nullptr, nullptr);
    if (s != TS_OK) return s;
    const cudaError_t e = cudaGraphExecDestroy(graph->exec);
    delete graph;
    TS_CHECK(op, e);
    return TS_OK;
}

} /* extern "C" */
