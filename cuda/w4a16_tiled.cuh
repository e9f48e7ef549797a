/*
 * The tiled layout of a 4-bit weight (TS_W4_TILED, touchstone.h): what ts_w4a16_tile writes and
 * ts_gemm_w4a16 reads in that format. It is the AWQ or GPTQ weight rearranged once, at load time,
 * so that the decode gemv does no byte shuffling (the order serving engines repack into, as
 * Marlin's does, but this library's own):
 *
 *  - codes: per tile of 64 output columns and step of 32 k rows, 256 words (1 KB), 8 per lane of
 *    the warp that multiplies them: words 0-3 of every lane in lane order, then words 4-7 (word j
 *    of lane L at (j / 4) 128 + 4 L + j % 4), so that each of the lanes' two 16-byte loads of a
 *    step reads 512 contiguous bytes (and would read shared memory without bank conflicts).
 *    Lane 4g + t's word j holds column 64 tile + 8j + g at rows 32 step + 8t + e,
 *    e = 0..7: nibble i (i < 4) is row e = 2i, nibble i + 4 is row e = 2i + 1. So (word >> 4i) &
 *    0x000F000F is the pair of rows (2i, 2i + 1), the k order of the m16n8k16 mma's B fragment
 *    once the lane's 8 rows are its k16 halves (w4a16_tiled_decode_kernel), and x's fragments are
 *    its 16-byte row pieces as they are in memory. Columns past n are code 0.
 *  - scales: per group and tile, [g 0..7][j 0..7] in T: lane g's 8 scales in one 16-byte load
 *    (column 64 tile + 8j + g). Past n: 0, which makes those weights exactly 0.
 *  - zeros: per group and tile, [g][j] bytes: the zero point z itself (AWQ's code, GPTQ's stored
 *    code + 1, so 0..16), one 8-byte load a lane.
 *
 * Each part starts on a 16-byte boundary (sizes are multiples of 16). Needs k % 32 == 0 and
 * group_size % 32 == 0 (a step never straddles a group); GPTQ only with its groups in order (no
 * act-order: a g_idx other than r / group_size is not tiled; the caller keeps the packed format).
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace ts {

constexpr int kW4TileCols = 64; /* output columns a tile (a warp's) */
constexpr int kW4TileStep = 32; /* k rows a step */
constexpr int kW4StepWords = kW4TileCols * kW4TileStep / 8; /* 256 words: 8 a lane */

/* Where word j of lane `lane` sits in its step's 256. */
__host__ __device__ constexpr int w4_word_at(int lane, int j) { return (j >> 2) * 128 + 4 * lane + (j & 3); }

struct W4Tiled {
    int64_t tiles, steps, groups;
    size_t codes_bytes, scales_bytes, zeros_bytes;

    W4Tiled(int n, int k, int group_size, size_t t_bytes)
        : tiles((n + kW4TileCols - 1) / kW4TileCols), steps(k / kW4TileStep), groups(k / group_size),
          codes_bytes((size_t)tiles * steps * kW4StepWords * 4),
          scales_bytes((size_t)groups * tiles * kW4TileCols * t_bytes),
          zeros_bytes((size_t)groups * tiles * kW4TileCols) {}

    size_t scales_offset() const { return codes_bytes; }
    size_t zeros_offset() const { return codes_bytes + scales_bytes; }
    size_t bytes() const { return codes_bytes + scales_bytes + zeros_bytes; }
};

} // namespace ts
