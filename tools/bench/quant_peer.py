"""The quantized model sets' checkpoints (docs/quantization.md, "Quantized checkpoints") run by
PyTorch's own quantized GEMMs: the model that `touchstone bench-model` times beside the engine's
quantized decode (tools/bench/model_peer.py loads it for a checkpoint with a quantization_config).

transformers 5.17 runs these checkpoints only with kernels it fetches from the hub (FP8) or with
gptqmodel (AWQ, GPTQ), which the GPU host lacks. This loads a checkpoint the way a gpt-fast-style
PyTorch server does: transformers' model of config.json, its 16-bit tensors from the checkpoint,
and every decoder projection stored quantized replaced by a module computing it with torch's op
for the format:

  fp8-block    (quant_method "fp8", weight_block_size [128, 128], dynamic activations) and
  fp8-channel  (compressed-tensors FP8-dynamic): the input quantised in torch ops by quant_fp8's
               spec (per 1x128 group or per token: max(amax, 1e-10) / 448, e4m3 saturated, in
               fp32), then cuBLASLt's FP8 GEMM: torch.nn.functional.scaled_mm's op with 1x128 /
               128x128 block scales (SCALE_LD says why not torch._scaled_mm), torch._scaled_mm
               with row-wise per-token / per-channel scales;
  awq, gptq    4-bit weights through torch._weight_int4pack_mm (tinygemm, the int4 kernel of
               gpt-fast and torchao): the codes repacked by torch._convert_weight_to_int4pack,
               a bf16 scale and zero per group and column with w = (q - 8) * scale + zero, so
               zero = (8 - z) * scale; GPTQ act-order by sorting the weight's k rows by g_idx and
               gathering the input's columns with the same permutation (as exllama does).

A Qwen2 q/k/v bias stays 16-bit and is added to the GEMM's rounded output, as transformers'
FP8Linear and AutoAWQ add it. Under torch.compile the quantiser, the gather and the bias fuse into
Inductor kernels around the GEMM.

    python3 tools/bench/quant_peer.py selftest [model set directory...]

checks the unpacking, the repacking and the quantiser against tools/gen-golden's packers and
quantiser (common/int4.py, common/fp8.py), the GEMMs against the dequantised product on every
device here (the CPU, and CUDA where torch sees a GPU), and loads each quantized model set's
checkpoint (the committed sets', or those named) and compares its logits with the set's golden
logits."""

import json
import os
import sys

import torch

# tools/gen-golden's common package: the formats as the engine reads them (quantconfig), and the
# packers and quantiser the selftest compares with
_GEN_GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gen-golden")
if _GEN_GOLDEN not in sys.path:
    sys.path.insert(0, _GEN_GOLDEN)
from common.dtypes import E4M3_MAX  # noqa: E402
from common.fp8 import FP8_BLOCK as BLOCK, QUANT_AMAX_FLOOR as AMAX_FLOOR  # noqa: E402
from common.int4 import AWQ_PACK_ORDER  # noqa: E402
from common.quantconfig import MARKER, quant_format  # noqa: E402

# The decoder layers' projections, as transformers' Llama and Qwen2 name them.
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
FORMAT_NAME = {"fp8-block": "fine-grained FP8", "fp8-channel": "FP8-dynamic (per channel)",
               "awq": "AWQ 4-bit", "gptq": "GPTQ 4-bit"}

# The group sizes tinygemm takes; a checkpoint's larger group (GPTQ's -1: all of K) is cut into
# groups of the largest that divides it, each with the group's scale and zero: the same weight.
TINYGEMM_GROUPS = (256, 128, 64, 32)
# tinygemm's k tile is 16 inputs; its packing groups 2, 4 or 8 tiles ("inner k tiles"), and K
# must be a multiple of that super-tile. 8 is what gpt-fast and torchao use.
TINYGEMM_K_TILES = (8, 4, 2)


# ---------------------------------------------------------------------------------------------
# FP8


def quant_fp8(x, group, e4m3_max):
    """quant_fp8's dynamic quantisation of x [M, K] (float32) in groups of `group` consecutive
    inputs: (codes f8e4m3 [M, K], scales f32 [M, K / group]). e4m3_max is 448 as a tensor on x's
    device: CUDA divides by a Python scalar as a product with its reciprocal, which rounds twice
    and moves some scales off the spec's quotient; a tensor divisor is a true division."""
    m, k = x.shape
    g = x.view(m, k // group, group)
    s = g.abs().amax(-1, keepdim=True).clamp(min=AMAX_FLOOR) / e4m3_max
    q = (g / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(m, k), s.view(m, k // group)


def check_fp8_shape(name, fmt, n, k):
    """ValueError naming the projection when torch's FP8 GEMM for the format cannot take
    W [n, k]: cuBLASLt's block-scaled FP8 GEMM (1x128 / 128x128 scales) takes whole blocks only
    (it refused N = 32 on an H100, a partial last block of the checkpoint's scale grid), and
    every scaled_mm wants both dimensions of its second operand multiples of 16."""
    if fmt == "fp8-block" and (n % BLOCK or k % BLOCK):
        raise ValueError("quant_peer: %s: fine-grained FP8 weight N=%d, K=%d: the block-scaled FP8 "
                         "GEMM (cuBLASLt, 1x128 / 128x128 scales) needs N and K multiples of %d"
                         % (name, n, k, BLOCK))
    if n % 16 or k % 16:
        raise ValueError("quant_peer: %s: FP8 weight N=%d, K=%d: torch._scaled_mm needs N and K "
                         "multiples of 16" % (name, n, k))


# cuBLASLt's block-scaled FP8 GEMM reads both scale tensors with a leading dimension that must be
# a multiple of 4 (16 bytes of fp32). Measured through torch._scaled_mm on an H100 (torch 2.11,
# CUDA 13.0): one activation row (M = 1, every decode step) is refused
# (CUBLAS_STATUS_NOT_SUPPORTED) at every shape tried where 4, 16, 32 and 128 rows run, and
# _scaled_mm hands cuBLASLt the weight's [K/128, N/128] grid unpadded, which for K/128 = 7 or 38
# (Qwen2.5-0.5B's 896 and 4864) gives products 0.55 off in relative RMS with no error. So the
# block-scaled GEMM is torch.nn.functional.scaled_mm's op (BlockWise1x128 x BlockWise128x128),
# whose weight scales are [round_up(K/128, 4), N/128] column-major, zero-padded (0.0017 measured
# at those shapes), and the activation rows are padded with zero rows to a multiple of 4 (their
# outputs dropped).
SCALE_LD = 4


class ScaledMMLinear(torch.nn.Module):
    """y = T(dequant(quant(x)) . dequant(w)^T) (+ bias) through torch's FP8 GEMM, T the model's
    dtype: fp8-block torch.nn.functional.scaled_mm with 1x128 / 128x128 block scales,
    fp8-channel torch._scaled_mm with row-wise scales. weight f8e4m3 [N, K]; scale: fp8-block the
    [N/128, K/128] grid of 128x128 blocks, fp8-channel [N, 1] (any float dtype; widened exactly).
    emulate: the product of the dequantised operands in fp32 instead of the GEMM (the CPU's
    _scaled_mm takes per-tensor scales only: the selftest runs the modules there this way)."""

    def __init__(self, name, weight, scale, fmt, bias, dtype, emulate=False):
        super().__init__()
        n, k = weight.shape
        check_fp8_shape(name, fmt, n, k)
        want = (n // BLOCK, k // BLOCK) if fmt == "fp8-block" else (n, 1)
        if tuple(scale.reshape(want[0], -1).shape) != want:
            raise ValueError("quant_peer: %s: weight scale %s for an FP8 weight [%d, %d], want %s"
                             % (name, tuple(scale.shape), n, k, want))
        self.fmt, self.n, self.k, self.dtype, self.emulate = fmt, n, k, dtype, emulate
        self.group = BLOCK if fmt == "fp8-block" else k
        # The GEMMs want their second operand column-major: the row-major [N, K] weight's
        # transpose is exactly that, with no copy.
        self.register_buffer("w", weight.contiguous())
        if fmt == "fp8-block":
            from torch.nn.functional import ScalingType
            # the recipes as _scaled_mm_v2 takes them: Python ints, constants to dynamo
            self.recipes = (ScalingType.BlockWise1x128.value, ScalingType.BlockWise128x128.value)
            kb = k // BLOCK
            padded = torch.zeros(n // BLOCK, -(-kb // SCALE_LD) * SCALE_LD, dtype=torch.float32,
                                 device=weight.device)
            padded[:, :kb] = scale.float()
            self.register_buffer("ws", padded.t())  # [round_up(K/128, 4), N/128], column-major
        else:
            self.register_buffer("ws", scale.float().reshape(1, n).contiguous())
        self.register_buffer("e4m3_max", torch.tensor(E4M3_MAX, device=weight.device))
        self.register_buffer("b", None if bias is None else bias.to(dtype))

    def forward(self, x):
        shape = x.shape
        rows = x.reshape(-1, self.k)
        m = rows.shape[0]
        if self.fmt == "fp8-block" and m % SCALE_LD:
            rows = torch.nn.functional.pad(rows, (0, 0, 0, SCALE_LD - m % SCALE_LD))
        q, s = quant_fp8(rows.float(), self.group, self.e4m3_max)
        if self.emulate:
            out = self.emulated(q, s)
        elif self.fmt == "fp8-block":
            # torch.nn.functional.scaled_mm's own op: dynamo does not trace the Python binding
            # that function calls
            out = torch.ops.aten._scaled_mm_v2.default(
                q, self.w.t(), [s.t().contiguous().t()], [self.recipes[0]], [], [self.ws],
                [self.recipes[1]], [], None, self.dtype)
        else:
            out = torch._scaled_mm(q, self.w.t(), scale_a=s, scale_b=self.ws, out_dtype=self.dtype)
        out = out[:m]
        if self.b is not None:
            out = out + self.b
        return out.view(*shape[:-1], self.n)

    def emulated(self, q, s):
        """The GEMM's result from the dequantised operands, in fp32, rounded once to T."""
        n, k = self.n, self.k
        if self.fmt == "fp8-block":
            kb = k // BLOCK
            xd = (q.float().view(-1, kb, BLOCK) * s.unsqueeze(-1)).view(-1, k)
            grid = self.ws[:kb].t()
            wd = (self.w.float().view(n // BLOCK, BLOCK, kb, BLOCK) * grid[:, None, :, None]).view(n, k)
        else:
            xd, wd = q.float() * s, self.w.float() * self.ws.t()
        return (xd @ wd.t()).to(self.dtype)


# ---------------------------------------------------------------------------------------------
# 4-bit weights


def _nibbles(words):
    """int32 words [...] -> int32 [..., 8]: nibble j = bits 4j..4j+3, read unsigned."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    return (words.to(torch.int32).unsqueeze(-1) >> shifts) & 0xF


def unpack_awq(words):
    """AWQ words [R, N/8] -> codes [R, N] (int32): nibble j of word c is column
    8c + AWQ_PACK_ORDER[j]."""
    r, c = words.shape
    nib = _nibbles(words)
    out = torch.empty_like(nib)
    out[:, :, list(AWQ_PACK_ORDER)] = nib
    return out.reshape(r, c * 8)


def unpack_gptq_weight(words):
    """GPTQ qweight [K/8, N] -> codes [K, N] (int32): nibble j of word r is row 8r + j."""
    r, n = words.shape
    return _nibbles(words).permute(0, 2, 1).reshape(r * 8, n)


def unpack_gptq_zeros(words):
    """GPTQ qzeros [groups, N/8] -> zero points [groups, N] (int32): plain nibble order, each
    stored as z - 1 (the v1 checkpoint format)."""
    g, c = words.shape
    return _nibbles(words).reshape(g, c * 8) + 1


def int4_awq(name, t, group):
    """(codes [K, N], zeros [K/G, N], scales [K/G, N], None, G) of an AWQ projection's tensors."""
    q, z, s = unpack_awq(t[".qweight"]), unpack_awq(t[".qzeros"]), t[".scales"]
    k, n = q.shape
    if group == -1:
        group = k
    if k % group or tuple(z.shape) != (k // group, n) or tuple(s.shape) != (k // group, n):
        raise ValueError("quant_peer: %s: AWQ qweight %s, qzeros %s, scales %s, group_size %d"
                         % (name, tuple(t[".qweight"].shape), tuple(t[".qzeros"].shape),
                            tuple(s.shape), group))
    return q, z, s, None, group


def int4_gptq(name, t, group):
    """(codes [K, N] with the rows sorted by group, zeros [groups, N], scales [groups, N], the
    permutation of k (None when g_idx is k // G already), G) of a GPTQ projection's tensors.
    Sorting the k rows by g_idx (stable) puts each group's inputs together, so a GEMM with
    contiguous groups (tinygemm's) computes x[:, perm] @ W^T[perm]: the same sum over k."""
    q, z, s = unpack_gptq_weight(t[".qweight"]), unpack_gptq_zeros(t[".qzeros"]), t[".scales"]
    k, n = q.shape
    groups = z.shape[0]
    if group == -1:
        group = k
    if k % group or groups != k // group or tuple(s.shape) != (groups, n):
        raise ValueError("quant_peer: %s: GPTQ qweight %s, qzeros %s, scales %s, group_size %d"
                         % (name, tuple(t[".qweight"].shape), tuple(t[".qzeros"].shape),
                            tuple(s.shape), group))
    g_idx = t.get(".g_idx")
    if g_idx is None:
        return q, z, s, None, group
    g_idx = g_idx.to(torch.int64)
    perm = torch.sort(g_idx, stable=True).indices
    if not torch.equal(g_idx[perm], torch.arange(k, device=q.device) // group):
        raise ValueError("quant_peer: %s: g_idx does not give every group %d inputs: tinygemm "
                         "needs groups of one size" % (name, group))
    if torch.equal(perm, torch.arange(k, device=q.device)):
        return q, z, s, None, group
    return q[perm], z, s, perm, group


def tinygemm_layout(name, n, k, group):
    """(tinygemm's group size, inner k tiles) for W [n, k] in groups of `group`; ValueError
    naming the projection when tinygemm cannot take it."""
    g = next((g for g in TINYGEMM_GROUPS if group % g == 0), None)
    tiles = next((t for t in TINYGEMM_K_TILES if k % (16 * t) == 0), None)
    if g is None or tiles is None or n % 8:
        raise ValueError("quant_peer: %s: 4-bit weight N=%d, K=%d, groups of %d: tinygemm "
                         "(torch._weight_int4pack_mm) needs N a multiple of 8, K a multiple of 32 "
                         "and groups a multiple of 32" % (name, n, k, group))
    return g, tiles


def int4_scales_and_zeros(z, s, repeat):
    """tinygemm's [groups * repeat, N, 2] bf16 (scale, zero) from the checkpoint's zero points z
    and scales s [groups, N]: w = (q - 8) * scale + zero = (q - z) * s needs zero = (8 - z) * s,
    computed in fp32 from the stored scale and rounded once to bf16."""
    sf = s.float()
    zero = (8 - z).float() * sf
    sz = torch.stack([sf, zero], dim=-1).to(torch.bfloat16)
    return sz.repeat_interleave(repeat, dim=0).contiguous()


class Int4Linear(torch.nn.Module):
    """y = x W^T (+ bias) through torch._weight_int4pack_mm (tinygemm), bf16 activations.
    codes [K, N] int (rows in the order the GEMM reads them), zeros and scales [K/G, N]; perm:
    the k order of codes' rows (GPTQ act-order), the input's columns gathered the same way."""

    def __init__(self, name, codes, z, s, perm, group, bias):
        super().__init__()
        k, n = codes.shape
        g, tiles = tinygemm_layout(name, n, k, group)
        self.n, self.k, self.group, self.tiles = n, k, g, tiles
        self.cpu = codes.device.type == "cpu"
        wq = codes.t().contiguous().to(torch.int32)  # [N, K]
        if self.cpu:
            # the CPU kernel's own layout, from int32 codes [N, K]
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(wq, tiles)
        else:
            # CUDA's wants two codes a byte, [N, K/2] uint8: input 2i in the high nibble
            packed = torch.ops.aten._convert_weight_to_int4pack(
                (wq[:, ::2] << 4 | wq[:, 1::2]).to(torch.uint8), tiles)
        self.register_buffer("w", packed)
        self.register_buffer("sz", int4_scales_and_zeros(z, s, group // g))
        self.register_buffer("perm", perm)
        self.register_buffer("b", None if bias is None else bias.to(torch.bfloat16))

    def forward(self, x):
        shape = x.shape
        rows = x.reshape(-1, self.k)
        if self.perm is not None:
            rows = rows.index_select(-1, self.perm)
        if self.cpu:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.w, self.group, self.sz)
        else:
            out = torch.ops.aten._weight_int4pack_mm(rows, self.w, self.group, self.sz)
        if self.b is not None:
            out = out + self.b
        return out.view(*shape[:-1], self.n)


# ---------------------------------------------------------------------------------------------
# Loading a checkpoint


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def is_quantized(model_dir):
    return read_config(model_dir).get("quantization_config") is not None


def read_tensors(model_dir):
    from safetensors import safe_open
    tensors = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, name), framework="pt") as f:
                tensors.update({k: f.get_tensor(k) for k in f.keys()})
    return tensors


def load(model_dir, attn, device, emulate_fp8=False):
    """The checkpoint in model_dir with its quantized projections through torch's quantized
    GEMMs, on device, eval mode. A 4-bit checkpoint runs in bf16 whatever its dtype (tinygemm
    takes bf16 activations only), an FP8 one in its own 16-bit dtype. emulate_fp8: the FP8
    projections multiply the dequantised operands instead (ScaledMMLinear; the selftest on the
    CPU). Returns (model, a description of exactly what runs, for the peer's call line).
    ValueError for a checkpoint or a projection this peer cannot run, naming it."""
    from transformers import AutoConfig, AutoModelForCausalLM
    device = torch.device(device)
    raw = read_config(model_dir)
    fmt, group = quant_format(raw["quantization_config"])
    stored = raw.get("torch_dtype", raw.get("dtype"))
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(stored)
    if dtype is None:
        raise ValueError("quant_peer: %s: torch_dtype %r, want float16 or bfloat16" % (model_dir, stored))
    four_bit = fmt in ("awq", "gptq")
    if four_bit:
        dtype = torch.bfloat16
    cfg = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    del cfg.quantization_config
    # Built on the CPU and moved, as model_peer's 16-bit peers load theirs (the rotary tables
    # computed where transformers computes them), then the quantized modules built on the device:
    # tinygemm's packing is the device's own.
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
    tensors = read_tensors(model_dir)
    marker = MARKER[fmt]
    projections, consumed = {}, set()
    for i in range(cfg.num_hidden_layers):
        for sub in LINEARS:
            name = "model.layers.%d.%s" % (i, sub)
            if name + marker not in tensors:
                continue  # kept 16-bit (modules_to_not_convert, ignore)
            t = {s: tensors[name + s] for s in (".weight", marker, ".qzeros", ".scales", ".g_idx", ".bias")
                 if name + s in tensors}
            consumed.update(name + s for s in t)
            projections[(i, sub)] = (name, t)
    for name in tensors:
        if name.endswith(marker) and name not in consumed:
            raise ValueError("quant_peer: %s: stored in %s, but not a decoder projection"
                             % (name, fmt))
    # Shapes are checked before anything is built: a refusal names the first projection the
    # GEMM cannot take, whatever its layer.
    if not four_bit:
        for name, t in projections.values():
            check_fp8_shape(name, fmt, *t[".weight"].shape)
    state = {k: v.to(dtype) for k, v in tensors.items() if k not in consumed}
    missing, unexpected = model.load_state_dict(state, strict=False)
    replaced = {"model.layers.%d.%s.%s" % (i, sub, p) for (i, sub) in projections for p in ("weight", "bias")}
    tied = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    missing = set(missing) - replaced - tied
    if unexpected or missing:
        raise ValueError("quant_peer: %s: tensors the model does not hold %s; missing from the "
                         "checkpoint %s" % (model_dir, sorted(unexpected)[:4], sorted(missing)[:4]))
    if cfg.tie_word_embeddings:
        model.tie_weights()
    model.to(device)
    layers = model.model.layers
    groups, tiles, permuted, biased = set(), set(), 0, 0
    for (i, sub), (name, t) in projections.items():
        t = {s: v.to(device) for s, v in t.items()}
        bias = t.get(".bias")
        parent, attr = sub.split(".")
        old = getattr(getattr(layers[i], parent), attr)
        if four_bit:
            q, z, s, perm, g = (int4_awq if fmt == "awq" else int4_gptq)(name, t, group)
            mod = Int4Linear(name, q, z, s, perm, g, bias)
            groups.add(mod.group)
            tiles.add(mod.tiles)
            permuted += perm is not None
        else:
            mod = ScaledMMLinear(name, t[".weight"], t[marker], fmt, bias, dtype, emulate_fp8)
        if (mod.n, mod.k) != (old.out_features, old.in_features):
            raise ValueError("quant_peer: %s: stored [%d, %d], the model's projection is [%d, %d]"
                             % (name, mod.n, mod.k, old.out_features, old.in_features))
        biased += bias is not None
        setattr(getattr(layers[i], parent), attr, mod)
    del tensors
    return model.eval(), describe(fmt, len(projections), dtype, stored, cfg, groups, tiles,
                                  permuted, biased, emulate_fp8)


def describe(fmt, count, dtype, stored, cfg, groups, tiles, permuted, biased, emulate_fp8):
    """The call line's account of what load built."""
    dt = str(dtype).replace("torch.", "")
    head = "%s, %d layers, %s" % (cfg.model_type, cfg.num_hidden_layers, dt)
    if dt != stored:
        head += " (the checkpoint's dtype is %s: tinygemm takes bf16 activations only)" % stored
    what = "%d %s projections (of %d) " % (count, FORMAT_NAME[fmt], 7 * cfg.num_hidden_layers)
    if fmt in ("awq", "gptq"):
        what += ("through torch.ops.aten._weight_int4pack_mm (tinygemm, groups of %s, inner k tiles "
                 "%s: the codes repacked by _convert_weight_to_int4pack, per group and column a bf16 "
                 "scale s and zero (8 - z) * s)" % ("/".join(map(str, sorted(groups))),
                                                   "/".join(map(str, sorted(tiles)))))
        if fmt == "gptq":
            what += ("; act-order: %d projection(s) with the weight's k rows sorted by g_idx "
                     "(stable) and the input gathered by x.index_select(-1, perm) before the GEMM"
                     % permuted if permuted else "; g_idx is k // G: no permutation")
    else:
        if emulate_fp8:
            gemm = "the dequantised operands' product in fp32 (emulated, not an FP8 GEMM)"
        elif fmt == "fp8-block":
            gemm = ("torch.ops.aten._scaled_mm_v2 (torch.nn.functional.scaled_mm's op: "
                    "BlockWise1x128 activation x BlockWise128x128 weight scales, the weight's "
                    "padded to [round_up(K/128, 4), N/128], the rows padded with zeros to a "
                    "multiple of 4; out %s)" % dt)
        else:
            gemm = ("torch._scaled_mm (row-wise: per-token activation / per-channel weight "
                    "scales; out %s)" % dt)
        what += ("through %s, the input quantised in torch ops (quant_fp8: %s, amax.clamp(1e-10) "
                 "/ 448, x / s clamped to +-448, to float8_e4m3fn, in fp32)"
                 % (gemm, "per 1x128 group" if fmt == "fp8-block" else "per token"))
    if biased:
        what += "; %d 16-bit biases added after the GEMM in %s" % (biased, dt)
    return "%s; %s; embedding, norms and LM head %s from the checkpoint" % (head, what, dt)


# ---------------------------------------------------------------------------------------------
# Selftest


def rel_rms(got, want):
    """||got - want||_2 / ||want||_2, in float64."""
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def _gen_golden():
    """tools/gen-golden's packers and quantiser, which the checks compare with."""
    from common import fp8, int4
    return fp8, int4


# tinygemm's result against the product of the bf16 input and the weight dequantised in the
# checkpoint's dtype: the scale and zero rounded to bf16 (2^-9 relative) and the bf16 output
# leave 1.5e-3 to 3e-3 (measured on the CPU and an H100); a wrong nibble order, group or zero
# gives order 1.
INT4_RMS = 1e-2
# The FP8 GEMM against the product of the dequantised operands in fp64: the output's bf16
# rounding (2^-9 relative) and fp32 accumulation leave ~1.7e-3; the weight grid's K blocks
# applied in reverse gave 0.09 on these random weights.
FP8_RMS = 1e-2
# A set's logits from this peer against its golden logits, the reference's fp32 forward of the
# dequantised arithmetic. The peer runs in bf16: the 4-bit sets' calibration (that forward
# rounded to fp16) leaves ~1e-3 of relative RMS on the logits, bf16's 8x coarser rounding ~1.5e-2
# measured; in an FP8 model the rounding moves inputs of the next projection across e4m3
# midpoints, and the FP8 sets' own calibration (rounded to bf16) leaves 0.05-0.07, the peer
# 0.06-0.1 measured. A layer, a scale or a permutation applied wrongly gives order 1.
SET_RMS = {"awq": 0.05, "gptq": 0.05, "fp8-block": 0.25, "fp8-channel": 0.25}


def _int4_case(int4, fmt, n, k, group, sym, act_order, storage, seed):
    """A random projection packed by gen-golden's packers: (tensors as stored, W^T [K, N] in
    the storage dtype from gen-golden's dequantiser)."""
    gen = torch.Generator().manual_seed(seed)
    wt = torch.randn(k, n, generator=gen, dtype=torch.float64) * 0.05
    if act_order:
        order = torch.randperm(k, generator=gen)
        groups = torch.empty(k, dtype=torch.int64)
        groups[order] = torch.arange(k) // group
    else:
        groups = torch.arange(k) // group
    q, z, s = int4.quant_int4(wt, groups, k // group, sym, zmin=1 if fmt == "gptq" else 0)
    scales = s.to(storage)
    if fmt == "awq":
        t = {".qweight": int4.pack_awq(q), ".qzeros": int4.pack_awq(z), ".scales": scales}
        want = int4.awq_dequant(t[".qweight"], t[".qzeros"], scales, group, storage)
    else:
        t = {".qweight": int4.pack_gptq_weight(q), ".qzeros": int4.pack_gptq_zeros(z),
             ".scales": scales, ".g_idx": groups.to(torch.int32)}
        want = int4.gptq_dequant(t[".qweight"], t[".qzeros"], scales, t[".g_idx"], storage)
    return t, q, z, want


def _int4_dequant(codes, z, s, perm, group, dtype):
    """W^T [K, N] in dtype, in the checkpoint's k order, from what int4_awq / int4_gptq return:
    (q - z) * s rounded once, as gen-golden's dequantiser computes it."""
    k = codes.shape[0]
    groups = torch.arange(k) // group
    wt = ((codes.long() - z.long()[groups]).double() * s.double()[groups]).float().to(dtype)
    if perm is None:
        return wt
    out = torch.empty_like(wt)
    out[perm] = wt
    return out


def _int4_ops(device):
    """Whether torch's int4 ops run on device; the reason when not."""
    op = "_convert_weight_to_int4pack_for_cpu" if device.type == "cpu" else "_convert_weight_to_int4pack"
    if not hasattr(torch.ops.aten, op):
        return "torch %s has no aten.%s" % (torch.__version__, op)
    return None


def selftest_int4(int4, devices):
    """Unpacking and dequantisation exactly against gen-golden's; tinygemm's product within bf16
    rounding of the dequantised product, on every device."""
    cases = [  # fmt, n, k, group, sym, act-order, checkpoint dtype
        ("awq", 256, 512, 128, False, False, torch.float16),
        ("awq", 32, 128, 32, False, False, torch.float16),    # a tiny set's k/v projection
        ("awq", 256, 512, 128, False, False, torch.bfloat16),
        ("gptq", 256, 512, 128, True, True, torch.float16),   # act-order, as the sets' GPTQ
        ("gptq", 256, 512, 128, False, True, torch.float16),  # asymmetric act-order
        ("gptq", 256, 512, 128, True, False, torch.float16),  # g_idx = k // G: no permutation
        ("gptq", 256, 512, -1, True, False, torch.float16),   # one group: cut into groups of 256
    ]
    for seed, (fmt, n, k, group, sym, act, storage) in enumerate(cases):
        g = k if group == -1 else group
        t, q, z, want = _int4_case(int4, fmt, n, k, g, sym, act, storage, seed)
        label = "%s n=%d k=%d group %d%s%s %s" % (
            fmt, n, k, group, " sym" if sym else " asym", " act-order" if act else "",
            str(storage).replace("torch.", ""))
        codes, zz, s, perm, gg = (int4_awq if fmt == "awq" else int4_gptq)("selftest", t, group)
        # the unpacked codes and zero points are gen-golden's, word for word
        unpermuted = codes if perm is None else codes[torch.argsort(perm)]
        if not (torch.equal(unpermuted.long(), q) and torch.equal(zz.long(), z)):
            raise AssertionError("%s: unpacked codes or zero points differ from gen-golden's" % label)
        if act != (perm is not None):
            raise AssertionError("%s: permutation %s, act-order %s" % (label, perm is not None, act))
        if not torch.equal(_int4_dequant(codes, zz, s, perm, gg, storage), want):
            raise AssertionError("%s: dequantised weight differs from gen-golden's" % label)
        print("int4 %s: codes, zero points and the dequantised weight equal gen-golden's" % label)
        for device in devices:
            why = _int4_ops(device)
            if why:
                print("int4 %s on %s: not run (%s); the unpacking above is checked" % (label, device, why))
                continue
            td = {key: v.to(device) for key, v in t.items()}
            codes, zz, s, perm, gg = (int4_awq if fmt == "awq" else int4_gptq)("selftest", td, group)
            mod = Int4Linear("selftest", codes, zz, s, perm, gg, None)
            for m in (1, 7):
                x = torch.randn(m, k, generator=torch.Generator().manual_seed(100 + m)).to(torch.bfloat16)
                got = mod(x.to(device)).cpu()
                ref = x.double() @ want.double()
                err = rel_rms(got, ref)
                print("int4 %s on %s: tinygemm (groups of %d, %d inner k tiles%s) M=%d: rel RMS %.2e "
                      "against x @ dequant(W)^T" % (label, device.type, mod.group, mod.tiles,
                                                    ", input permuted" if perm is not None else "", m, err))
                if not err < INT4_RMS:
                    raise AssertionError("%s on %s, M=%d: rel RMS %.3g >= %g" % (label, device, m, err, INT4_RMS))


def selftest_fp8(fp8, devices):
    """The quantiser bit for bit against gen-golden's; the FP8 GEMM module against the
    dequantised product (torch's FP8 GEMMs on CUDA, the module's emulation on the CPU, which
    checks the quantiser, the scale layouts and the row padding around it); the shape rule."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(33, 1024, generator=gen) * torch.logspace(-6, 3, 33).unsqueeze(1)
    x[3, 128:256] = 0  # an all-zero group: the floor
    x[5, 7] = 1e4      # saturation of nothing (x / s is at most 448), a large amax
    x = x.to(torch.bfloat16).float()  # what a bf16 model's activation is
    for device in [torch.device("cpu")] + [d for d in devices if d.type != "cpu"]:
        for group in (128, 1024):
            want_q, want_s = fp8.quant_groups(x, group)
            q, s = quant_fp8(x.to(device), group, torch.tensor(E4M3_MAX, device=device))
            if not (torch.equal(q.cpu().view(torch.uint8), want_q.view(torch.uint8)) and
                    torch.equal(s.cpu(), want_s)):
                raise AssertionError("fp8 quantiser on %s, groups of %d: differs from gen-golden's "
                                     "quant_groups" % (device, group))
            print("fp8 quantiser on %s, [33, 1024] in groups of %d: codes and scales equal gen-golden's "
                  "quant_groups bit for bit" % (device.type, group))
    shapes = [(2048, 2048), (8192, 2048), (2048, 8192), (512, 2048),   # Llama-3.2-1B
              (896, 896), (128, 896), (4864, 896), (896, 4864)]       # Qwen2.5-0.5B
    for device in devices:
        emulate = device.type == "cpu"
        for fmt in ("fp8-block", "fp8-channel"):
            for n, k in (shapes if device.type == "cuda" else shapes[:1] + shapes[5:6]):
                gen = torch.Generator().manual_seed(n * 7 + k)
                w = torch.randn(n, k, generator=gen) * 0.02
                if fmt == "fp8-block":
                    wq, ws = fp8.quant_weight_blocks(w, BLOCK, BLOCK)
                    wd = wq.float() * ws.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
                else:
                    wq, ws = fp8.quant_groups(w, k)
                    wd = wq.float() * ws
                mod = ScaledMMLinear("selftest", wq.to(device), ws.to(device), fmt, None,
                                     torch.bfloat16, emulate)
                gemm = "the emulation" if emulate else (
                    "aten._scaled_mm_v2" if fmt == "fp8-block" else "torch._scaled_mm")
                ga = BLOCK if fmt == "fp8-block" else k
                for m in (1, 5, 16):
                    xx = (torch.randn(m, k, generator=gen) * 3).to(torch.bfloat16)
                    xq, xs = fp8.quant_groups(xx.float(), ga)
                    xd = (xq.float().view(m, k // ga, ga) * xs.unsqueeze(-1)).view(m, k)
                    ref = xd.double() @ wd.double().t()
                    got = mod(xx.to(device)).cpu()
                    err = rel_rms(got, ref)
                    print("fp8 %s N=%d K=%d M=%d on %s through %s: rel RMS %.2e against the dequantised "
                          "product" % (fmt, n, k, m, device.type, gemm, err))
                    if not err < FP8_RMS:
                        raise AssertionError("fp8 %s N=%d K=%d M=%d on %s: rel RMS %.3g" % (fmt, n, k, m, device, err))
    try:
        check_fp8_shape("model.layers.0.self_attn.k_proj", "fp8-block", 32, 128)
    except ValueError as e:
        print("fp8 shape rule: refused as it should be:", e)
    else:
        raise AssertionError("fp8 shape rule: N=32 block-scaled accepted")


def _golden_root():
    root = os.environ.get("TOUCHSTONE_GOLDEN")
    if root:
        return root
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "golden")


def _forward_logits(model, prompt, steps, device):
    """The logits of a prefill of prompt and then of each of steps, one token a step through a
    DynamicCache: [len(prompt) rows, then one row a step] (float32, on the CPU)."""
    from transformers import DynamicCache
    out = []
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([prompt], device=device)
        out.append(model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0].float().cpu())
        for tok in steps:
            ids = torch.tensor([[int(tok)]], device=device)
            out.append(model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0].float().cpu())
    return out


def _expected_logits(set_dir):
    """(prompt, decode tokens, expected logits as _forward_logits gives them, their source) of a
    quantized checkpoint: a model set's golden logits (its prefill and its decode steps
    teacher-forced on greedy_tokens), or for a bare checkpoint gen-golden's reference forward of
    it (models/quantize.py load_quantized: fp32, each projection the format's arithmetic on the
    dequantised weight) on seeded tokens."""
    import numpy as np
    manifest = os.path.join(set_dir, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            params = json.load(f)["params"]
        steps = [int(t) for t in np.load(os.path.join(set_dir, "greedy_tokens.npy"))[:int(params["decode_steps"])]]
        want = [torch.from_numpy(np.load(os.path.join(set_dir, "prefill.logits.npy")))]
        want += [torch.from_numpy(np.load(os.path.join(set_dir, "decode.%d.logits.npy" % s)))
                 for s in range(len(steps))]
        return params["prompt_ids"], steps, want, "the set's golden logits"
    _gen_golden()
    from models.quantize import load_quantized
    raw = read_config(set_dir)
    storage = torch.bfloat16 if raw.get("torch_dtype", raw.get("dtype")) == "bfloat16" else torch.float16
    ref, _ = load_quantized(set_dir, None, storage)
    ids = torch.randint(0, raw["vocab_size"], (24,), generator=torch.Generator().manual_seed(11)).tolist()
    prompt, steps = ids[:16], ids[16:]
    return prompt, steps, _forward_logits(ref, prompt, steps, "cpu"), \
        "gen-golden's fp32 reference forward (load_quantized)"


def selftest_sets(devices, set_dirs):
    """Each quantized checkpoint through load, prefill then decode steps one token a step
    (DynamicCache, eager attention), every logits row against the expected (_expected_logits).
    set_dirs: model set or checkpoint directories; empty, every committed set's (golden/models)."""
    named = bool(set_dirs)
    if not named:
        root = os.path.join(_golden_root(), "models")
        if not os.path.isdir(root):
            print("sets: no %s, not run" % root)
            return
        set_dirs = [os.path.join(root, name) for name in sorted(os.listdir(root))]
    for set_dir in set_dirs:
        name = os.path.basename(os.path.normpath(set_dir))
        if not os.path.exists(os.path.join(set_dir, "config.json")):
            if named:
                raise AssertionError("%s: no config.json" % set_dir)
            continue
        if not is_quantized(set_dir):
            if named:
                print("set %s: not quantized, not run" % name)
            continue
        fmt, _ = quant_format(read_config(set_dir)["quantization_config"])
        expected = None
        for device in devices:
            if fmt in ("awq", "gptq") and _int4_ops(device):
                print("set %s on %s: not run (%s)" % (name, device.type, _int4_ops(device)))
                continue
            try:
                model, what = load(set_dir, "eager", device, emulate_fp8=device.type == "cpu")
            except ValueError as e:
                if fmt == "fp8-block":
                    print("set %s (%s) on %s: refused, as the shape rule says: %s"
                          % (name, fmt, device.type, e))
                    continue
                raise
            if expected is None:
                expected = _expected_logits(set_dir)
            prompt, steps, want, source = expected
            errs = [rel_rms(g, w) for g, w in zip(_forward_logits(model, prompt, steps, device), want)]
            worst = max(errs)
            print("set %s (%s) on %s: logits against %s: prefill of %d tokens rel RMS %.2e, %d decode "
                  "steps worst %.2e (bound %g); %s"
                  % (name, fmt, device.type, source, len(prompt), errs[0], len(steps), max(errs[1:]),
                     SET_RMS[fmt], what))
            if not worst <= SET_RMS[fmt]:
                raise AssertionError("set %s on %s: logits rel RMS %.3g > %g" % (name, device, worst, SET_RMS[fmt]))
            del model


def selftest(set_dirs):
    fp8, int4 = _gen_golden()
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    print("torch %s; devices: %s" % (torch.__version__, ", ".join(d.type for d in devices)))
    selftest_int4(int4, devices)
    selftest_fp8(fp8, devices)
    selftest_sets(devices, set_dirs)
    print("selftest: ok")


if __name__ == "__main__":
    if sys.argv[1:2] != ["selftest"]:
        sys.exit("usage: python3 tools/bench/quant_peer.py selftest [model set directory...]\n"
                 "(no directory: the committed quantized sets under golden/models)")
    selftest(sys.argv[2:])
