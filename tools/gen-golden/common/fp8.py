"""The FP8 quantisers of docs/quantization.md that both the kernel cases and the quantized model
sets use: dynamic activation quantisation in groups (quant_groups) and the static quantisation of
a weight in blocks (quant_weight_blocks), exactly as the spec defines them."""

import torch

from common.dtypes import E4M3_MAX, F32, to_e4m3

# The floor of a group's amax, so an all-zero group gets a finite scale; torch casts the scalar
# to the tensor's float32 (1.0000000133514320e-10), which is the spec's "1e-10 as float32".
QUANT_AMAX_FLOOR = 1e-10


def quant_groups(x, G):
    """Dynamic quantisation of x [T, H] in groups of G consecutive elements of a row: (q f8e4m3
    [T, H], scales f32 [T, H // G]). Everything in float32 on the CPU, where torch divides
    (on a GPU torch multiplies by the reciprocal of a scalar divisor such as 448, rounding
    twice): the amax (NaN when the group holds one), its floor, s = amax / 448 and x / s."""
    T, H = x.shape
    xg = x.to(F32).view(T, H // G, G)
    s = xg.abs().amax(-1, keepdim=True).clamp(min=QUANT_AMAX_FLOOR) / E4M3_MAX
    return to_e4m3(xg / s).view(T, H), s.view(T, H // G)


# The side of the fine-grained FP8 blocks: 1x128 activation groups, 128x128 weight blocks
# (DeepSeek-V3's and transformers' FineGrainedFP8 `weight_block_size` [128, 128]).
FP8_BLOCK = 128


def quant_weight_blocks(w, block_n, block_k):
    """Static FP8 quantisation of a weight w [N, K] (float32) as an FP8 checkpoint stores it, in
    blocks of block_n rows by block_k columns: block (i, j) holds rows block_n*i .. and columns
    block_k*j .. (K % block_k == 0; the last row-block is partial when N % block_n != 0, its
    amax over the rows it has), and with every value exactly as float32,
        s    = max(amax of the block, 1e-10) / 448      (float32 division, correctly rounded)
        q    = e4m3(w / s)                              (float32 division, correctly rounded)
    quant_fp8's dynamic spec (docs/quantization.md) with a two-dimensional group. Returns (q
    f8e4m3 [N, K], scales f32 [ceil(N / block_n), K / block_k]): s is the multiplier that
    dequantises, float(q) * s (transformers' fine-grained `weight_scale_inv`). (128, 128): the
    fine-grained FP8 layout; (1, K): one scale per output channel, the compressed-tensors
    FP8-dynamic layout [N, 1], which is quant_groups(w, K) (gemm_fp8 checks that)."""
    N, K = w.shape
    if w.dtype != F32 or K % block_k:
        raise ValueError("quant_weight_blocks: %s [%d, %d] in blocks of %d x %d"
                         % (w.dtype, N, K, block_n, block_k))
    nb, kb = -(-N // block_n), K // block_k
    padded = torch.zeros((nb * block_n, K), dtype=F32)    # zero rows change no block's amax
    padded[:N] = w
    blocks = padded.view(nb, block_n, kb, block_k)
    s = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=QUANT_AMAX_FLOOR) / E4M3_MAX
    q = to_e4m3(blocks / s).view(nb * block_n, K)[:N].contiguous()
    return q, s.view(nb, kb)
