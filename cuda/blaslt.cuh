/*
 * Shared by the cublasLt callers (gemm, gemm_fp8): the descriptors of one call, freed on every
 * return path, and the pointer alignment a call may promise cublasLt.
 */
#pragma once

#include <cstdint>

#include "internal.h"

namespace ts {

/* Largest power of two (<= 256) dividing the address: what cublasLt may assume of a pointer. */
inline uint32_t alignment_of(const void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}

/* Owns the cublasLt descriptors of one call. */
struct LtDescs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDescs() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

} // namespace ts
