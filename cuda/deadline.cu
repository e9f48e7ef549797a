/*
 * deadline.cu — every wait for the device with a deadline (touchstone.h, "Conventions").
 *
 * cudaStreamSynchronize and cudaDeviceSynchronize block without limit: a kernel that never
 * finishes (a spin on a flag no block sets, a grid barrier one block never reaches) would hang
 * the caller, and a conformance run with it, until something outside kills the process. Here a
 * wait records an event behind the work and polls it, sleeping between polls, until the event
 * completes or the deadline passes. Past it the library latches TS_ERR_TIMEOUT with a message
 * naming the wait, the ops launched since the last completed wait and the deadline, and every
 * later call returns it: the hung kernel keeps the context busy until the process exits.
 */
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "internal.h"

namespace ts {
namespace {

std::atomic<double> g_deadline_s{TS_DEFAULT_DEADLINE_S};

/* The launches since the last wait that completed: a small ring, enough to name the kernel that
 * hung (the last one launched, or one shortly before it). */
constexpr int RING = 8;
struct Launch {
    const char *op;
    const void *kernel; /* nullptr for a library call */
    const char *call;   /* the library call, e.g. cublasGemmEx */
    char dims[160];
};
std::mutex g_ring_mu;
Launch g_ring[RING];
long long g_launched = 0;  /* launches recorded so far */
long long g_completed = 0; /* g_launched when the last wait completed */

/* "rope (rope_kernel<__half>, dims ...), then gemm (cublasGemmEx)": the launches since the last
 * completed wait, oldest first, at most RING. */
std::string pending_launches() {
    std::lock_guard<std::mutex> lk(g_ring_mu);
    const long long n = g_launched - g_completed;
    if (n <= 0) return "no op launched since the last completed wait";
    std::string s;
    const long long first = n > RING ? g_launched - RING : g_completed;
    if (n > RING) s += std::to_string(n - RING) + " earlier ops, then ";
    for (long long i = first; i < g_launched; ++i) {
        const Launch &l = g_ring[i % RING];
        if (i > first) s += ", then ";
        s += l.op;
        s += " (";
        s += l.kernel ? kernel_name(l.kernel) : (l.call ? l.call : "?");
        if (l.dims[0] != '\0') {
            s += ", ";
            s += l.dims;
        }
        s += ")";
    }
    return s;
}

void completed() {
    std::lock_guard<std::mutex> lk(g_ring_mu);
    g_completed = g_launched;
}

int timed_out(const char *op, const char *what, double waited) {
    char msg[1536];
    std::snprintf(msg, sizeof msg,
                  "%s: %s did not finish within the deadline of %g s (waited %.1f s; ts_set_deadline, "
                  "TOUCHSTONE_DEADLINE): a kernel hung; launched since the last completed wait: %s; the CUDA "
                  "context stays busy with it: restart the process",
                  op, what, g_deadline_s.load(), waited, pending_launches().c_str());
    return latch_failure(TS_ERR_TIMEOUT, msg);
}

/* Polls until every event is complete: TS_OK, a CUDA failure of the query, or TS_ERR_TIMEOUT.
 * Busy for the first SPIN (most waits of a conformance run or a decode loop end within it, and
 * a sleep would add its timer slack, tens of microseconds, to each), then yielding until YIELD,
 * then sleeping 50 us more each poll, up to 1 ms: a hang costs a core for a few milliseconds,
 * not for the whole deadline. */
int poll(const char *op, const char *what, cudaEvent_t *events, int n) {
    using clock = std::chrono::steady_clock;
    constexpr auto SPIN = std::chrono::microseconds(200);
    constexpr auto YIELD = std::chrono::milliseconds(5);
    const auto t0 = clock::now();
    const double deadline = g_deadline_s.load();
    auto nap = std::chrono::microseconds(0);
    for (;;) {
        bool done = true;
        for (int i = 0; i < n; ++i) {
            if (events[i] == nullptr) continue;
            const cudaError_t e = cudaEventQuery(events[i]);
            if (e == cudaSuccess) {
                events[i] = nullptr; /* complete; the caller destroys it */
                continue;
            }
            if (e != cudaErrorNotReady) return check(op, e, "cudaEventQuery (a wait for the device)", __FILE__, __LINE__);
            done = false;
        }
        if (done) return TS_OK;
        const auto elapsed = clock::now() - t0;
        const double waited = std::chrono::duration<double>(elapsed).count();
        if (waited > deadline) return timed_out(op, what, waited);
        if (elapsed < SPIN) continue;
        if (elapsed < YIELD) {
            std::this_thread::yield();
            continue;
        }
        nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(50));
        std::this_thread::sleep_for(nap);
    }
}

/* Events for the waits, reused: creating and destroying one per wait would add a few
 * microseconds to every download of a decode loop. */
std::mutex g_pool_mu;
std::vector<cudaEvent_t> g_pool;

int take_event(const char *op, cudaEvent_t *ev) {
    {
        std::lock_guard<std::mutex> lk(g_pool_mu);
        if (!g_pool.empty()) {
            *ev = g_pool.back();
            g_pool.pop_back();
            return TS_OK;
        }
    }
    return check(op, cudaEventCreateWithFlags(ev, cudaEventDisableTiming), "cudaEventCreateWithFlags", __FILE__,
                 __LINE__);
}

void give_event(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    g_pool.push_back(ev);
}

int wait_events(const char *op, const char *what, cudaStream_t *streams, int n) {
    cudaEvent_t events[2] = {nullptr, nullptr};
    int s = TS_OK;
    for (int i = 0; i < n && s == TS_OK; ++i) {
        s = take_event(op, &events[i]);
        if (s == TS_OK) s = check(op, cudaEventRecord(events[i], streams[i]), "cudaEventRecord (a wait for the device)",
                                  __FILE__, __LINE__);
    }
    cudaEvent_t pending[2] = {events[0], events[1]};
    if (s == TS_OK) s = poll(op, what, pending, n);
    /* An event still pending behind a hung kernel is left alone: the context is given up. */
    for (int i = 0; i < n; ++i)
        if (events[i] != nullptr && (s != TS_ERR_TIMEOUT || pending[i] == nullptr)) give_event(events[i]);
    if (s == TS_OK) completed();
    return s;
}

} // namespace

void note_launch(const char *op, const void *kernel, const char *call, const char *d) {
    std::lock_guard<std::mutex> lk(g_ring_mu);
    Launch &l = g_ring[g_launched % RING];
    l.op = op;
    l.kernel = kernel;
    l.call = call;
    std::snprintf(l.dims, sizeof l.dims, "%s", d ? d : "");
    ++g_launched;
}

void release_wait_events() {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    for (cudaEvent_t ev : g_pool) cudaEventDestroy(ev);
    g_pool.clear();
}

int wait_stream(const char *op, cudaStream_t stream) {
    return wait_events(op, "the stream's work", &stream, 1);
}

int wait_device(const char *op, cudaStream_t library_stream) {
    /* The library's stream is non-blocking; the legacy default stream covers the blocking
     * ones (cudaMemset's, a caller's). Both drained, cudaDeviceSynchronize has nothing left
     * to wait for but a caller's own non-blocking streams. */
    cudaStream_t streams[2] = {cudaStreamLegacy, library_stream};
    const int s = wait_events(op, "the device's work", streams, library_stream != nullptr ? 2 : 1);
    if (s != TS_OK) return s;
    return check(op, cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
}

int wait_event(const char *op, cudaEvent_t event) {
    cudaEvent_t pending[1] = {event};
    const int s = poll(op, "the timer's stop event", pending, 1);
    if (s == TS_OK) completed();
    return s;
}

int set_deadline(const char *op, const char *what, double seconds) {
    if (!(seconds > 0) || !(seconds <= 86400))
        return set_error(TS_ERR_INVALID_ARGUMENT, "%s: %s = %g: must be in (0, 86400] seconds", op, what, seconds);
    g_deadline_s.store(seconds);
    return TS_OK;
}

} // namespace ts

extern "C" {

int ts_set_deadline(double seconds) { return ts::set_deadline("ts_set_deadline", "seconds", seconds); }

int ts_deadline(double *seconds) {
    if (seconds == nullptr) return ts::set_error(TS_ERR_INVALID_ARGUMENT, "ts_deadline: seconds = NULL: a pointer is required");
    *seconds = ts::g_deadline_s.load();
    return TS_OK;
}

} /* extern "C" */
