"""Checkpoints: synthetic weights (each tensor its own seed, a float64 draw rounded to fp16 or
bf16), the safetensors writer (a fixed layout), config.json, and a real checkpoint's files placed
in a set."""

import hashlib
import json
import math
import os
import shutil
import struct
from collections import namedtuple

import numpy as np
import torch

from common.configs import CONFIG_DTYPE, GEMMA_FAMILIES, dims
from common.dtypes import F32, F64, TORCH_DTYPE, storage
from common.seeds import Draw

# A set's dtype -> the safetensors dtype of its synthetic checkpoint.
ST_NAME = {"f16": "F16", "bf16": "BF16"}

def tensor_seed(seed, name):
    """Each checkpoint tensor has its own generator, keyed by the set seed and the tensor name, so a
    tensor's values do not depend on the order tensors are drawn in."""
    digest = hashlib.sha256(("%d:%s" % (seed, name)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


# ---------------------------------------------------------------------------------------------
# Synthetic weights
#
# Init (fp64 draws, rounded to fp32 then fp16 like every kernel input, or bf16 for a bf16 set; the
# 16-bit values on disk are exactly what both the Go side and the reference load):
#   token embedding (embed_tokens / wte), GPT-2 positions (wpe), untied lm_head:
#       N(0, (4/sqrt(H))^2): after the final norm (elements ~1) logits have std ~4, so greedy
#       choices are mostly clear (median top-2 margin ~0.7-1) while small margins still occur;
#   input-side matrices (q/k/v, qkv_proj, gate/up, gate_up_proj, c_attn, c_fc):
#       N(0, 1/fan_in): projections are O(1), and q.k/sqrt(D) ~ N(0, 1) so attention is far from
#       uniform (a wrong position, mask or rotation changes the result visibly);
#   output-side matrices (o_proj, down_proj, GPT-2 attn/mlp c_proj):
#       N(0, 16^2/(fan_in * 2L)): 2L residual updates of variance ~16^2 * 0.3 / (2L) grow the
#       residual stream from the embedding (rms 4/sqrt(H)) to rms ~10 (max ~50) after the last
#       layer at any depth, as in trained models. Layer updates must dominate the embedding:
#       with a tied LM head the logit of the token just fed gets a head start of about
#       4 / rms(updates) logit-stds, and with small updates (HF's 0.02 init) greedy decoding
#       repeats the fed token forever;
#   norm weights (RMSNorm weight, LayerNorm gamma): 1 + 0.1 N(0, 1);
#   the final norm (model.norm, GPT-2's ln_f weight and bias) in the committed tier:
#       FINAL_NORM_GAIN times that, so the logits have std ~4 FINAL_NORM_GAIN and the sampled
#       distributions are as peaked as a trained model's (see FINAL_NORM_GAIN);
#   biases (Qwen2 and Qwen2-MoE q/k/v, GPT-2 Conv1D and LayerNorm beta): 0.1 N(0, 1) (a dropped
#       bias is hundreds of fp16 ulps off);
#   a mixture of experts (Mixtral's block_sparse_moe, Qwen3-MoE's and Qwen2-MoE's mlp): each
#       expert's gate (w1, gate_proj) and up (w3, up_proj) as the input-side matrices and its down
#       (w2, down_proj) as the output-side ones (fan_in its width, so an expert's output is a
#       dense MLP's of that width, and the renormalised top-k weights, which sum to 1, mix a few
#       of them); the router (gate) N(0, (ROUTER_GAIN/sqrt(H))^2), so its logits on the normed
#       stream (elements ~1) have std ~ROUTER_GAIN (see ROUTER_GAIN); Qwen2-MoE's shared expert
#       (mlp.shared_expert) as a dense MLP of its width S, and its gate (mlp.shared_expert_gate,
#       [1, H]) N(0, (SHARED_GATE_GAIN/sqrt(H))^2), logits of std ~SHARED_GATE_GAIN (see
#       SHARED_GATE_GAIN).
#   Gemma 3 (gemma_specs), whose norms multiply by 1 + w and whose embedding is scaled by
#       sqrt(H): each norm's w drawn as 0.1 N(0, 1), so 1 + w is the other families' norm weight;
#       the embedding N(0, (4/H)^2), so the scaled rows have the other families' rms 4/sqrt(H);
#       the norms after attention and after the MLP centred on POST_NORM_GAIN / sqrt(2L) (each
#       block's update is normalised there, so their weight, not o_proj's or down_proj's scale,
#       sets how the stream grows: to rms ~POST_NORM_GAIN after the last layer); o_proj and
#       down_proj N(0, 1/fan_in); the final norm centred on gain sqrt(H) with a tied head, whose
#       rows are sqrt(H) times smaller than the other families' (logits std ~4 gain).
# After the draw, models/peak.py raises some output rows (params.peak) so that every greedy and
# seeded step has a dominant token.

Init = namedtuple("Init", "kind std shift", defaults=(1.0,))  # kind: normal | norm | bias;
# shift: what a norm weight is centred on
RESID_GAIN = 16.0  # output-side std multiplier: residual stream rms ~10 after the last layer
# The final norm's scale in the committed tier, and so the logits' (std ~12 instead of ~4). With
# logits of std ~4 a seeded draw at temperature 0.8 picks among many tokens of a few percent each,
# so it lands within the margin epsilon of an interval edge at a third of the steps (12-20 of 32
# steps decisive on the committed sets): flat distributions that decide nothing, unlike a trained
# model's, where the chosen token usually holds most of the mass. x3 makes 24-31 of 32 seeded
# steps decisive on the committed fp16 sets (x2: 23-31, x1: 12-28, measured with touchstone
# check's tallies). It cannot help greedy decisions much: a margin and its numerical drift both
# scale with the logits, and the margin epsilon follows the drift (common/configs.py). The full
# tier keeps x1: over 128k-152k-token vocabularies x3 still decided only 17-22 of 32 seeded steps
# (H100, 2026-11-27), and a full batch set's logits then exceeded their single-step calibrated KL
# limit by 7% at one of 52272 taps. What makes every step of every set decisive is the peaked
# output rows of models/peak.py, shaped after this draw.
FINAL_NORM_GAIN = 3.0
# Gemma 2's committed final norm scale instead: its logits pass through the soft cap of 30
# (final_logit_softcapping), and at std ~12 the top tokens crowd under the cap, where a bf16
# margin of 4-6 epsilon (models/peak.py) cannot be reached (every target failed: the boosted rows
# pile up at the cap); at std ~6 the peaked tokens sit at 15-25, where the cap still bends them by
# units (the final-cap broken variants fail at the logits tap).
GEMMA2_FINAL_NORM_GAIN = 1.5
# Gemma 3's post-norm scale (see the Init notes): the residual stream's rms after the last layer.
POST_NORM_GAIN = 10.0
# The router's logit scale (Init above): std ~1, a trained router's order, so that a token's
# renormalised top-k weights are mixed (with a larger scale the first expert's weight nears 1 and
# an engine that weighs its experts wrongly, or not at all, would pass). Which experts the tokens
# choose, and how far each choice is from a tie in units of the 16-bit rounding (which moves a
# logit by a fixed fraction of its size), do not depend on the scale but on the draw: the selftest
# holds every committed set's prompt to at least 3 experts a layer and every stored token's gap
# between its k-th and next logit to more than 8 times its calibrated error (check_router): a
# token whose choice flips under a correct engine's rounding runs another expert, and its ffn_out
# differs by a whole expert's output.
ROUTER_GAIN = 1.0
# Qwen2-MoE's shared-expert gate's logit scale (Init above): std ~2 on the normed stream, so that
# sigmoid(logit) spans its range over a prompt, both its saturated ends (a token whose shared
# expert is nearly off, < 0.12 at -2, or nearly fully on) and its linear middle. A trained gate's
# spread is of that order; with a much smaller one every token's gate sits near 0.5 and an engine
# that dropped the sigmoid for a constant one half, or the gate altogether (a factor of 2), would
# be told apart only by that factor, and with a much larger one the sigmoid is a step whose
# middle (where its slope, and so a wrong logit's effect, is largest) no token reaches. Over every
# stored pass of the 36 tiny draws tried the logits had std 2.2; a prompt's tokens share a
# component of the stream, so a layer's gates move together by an offset and spread less among
# themselves. The selftest holds the committed prompt's gates to values both below 0.2 and above
# 0.8, and each layer's to a spread of 0.5 (selftest/models.py: check_shared_gate).
SHARED_GATE_GAIN = 2.0


def final_norm_gain(tier):
    """FINAL_NORM_GAIN for the committed tier, 1 for the full tier (see FINAL_NORM_GAIN)."""
    return FINAL_NORM_GAIN if tier == "committed" else 1.0


def init_specs(family, cfg, gain=1.0):
    """[(tensor name, shape, Init)] of a synthetic checkpoint, named as save_pretrained names them
    (tied LM heads are not stored); gain scales the final norm (final_norm_gain)."""
    d = dims(family, cfg)
    H, L, I, V = d.H, d.L, d.I, d.V
    emb = Init("normal", 4.0 / math.sqrt(H))
    w_in = Init("normal", 1.0 / math.sqrt(H))
    norm, bias = Init("norm", 0.1), Init("bias", 0.1)
    final_norm = Init("norm", 0.1 * gain, gain)
    final_bias = Init("bias", 0.1 * gain)
    attn_out = Init("normal", RESID_GAIN / math.sqrt(d.nH * d.D * 2 * L))
    ffn_out = Init("normal", RESID_GAIN / math.sqrt(I * 2 * L))
    router = Init("normal", ROUTER_GAIN / math.sqrt(H))
    shared_gate = Init("normal", SHARED_GATE_GAIN / math.sqrt(H))
    specs = []
    if family in GEMMA_FAMILIES:
        return gemma_specs(d, gain)
    # q/k/v biases: Qwen2's always; Qwen2-MoE's where qkv_bias (Qwen2MoeConfig's default true)
    qkv_bias = family == "qwen2" or (family == "qwen2_moe" and cfg.get("qkv_bias", True))
    if family in ("qwen2", "phi3", "llama", "qwen3", "mixtral", "qwen3_moe", "qwen2_moe"):
        qd, kvd = d.nH * d.D, d.nKV * d.D
        specs.append(("model.embed_tokens.weight", (V, H), emb))
        for i in range(L):
            p = "model.layers.%d." % i
            specs.append((p + "input_layernorm.weight", (H,), norm))
            if family != "phi3":  # attention_bias false but Qwen2 and Qwen2-MoE
                for n, rows in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd)):
                    specs.append((p + "self_attn.%s.weight" % n, (rows, H), w_in))
                    if qkv_bias:
                        specs.append((p + "self_attn.%s.bias" % n, (rows,), bias))
                if family in ("qwen3", "qwen3_moe"):  # RMSNorm over each head of q and k
                    specs.append((p + "self_attn.q_norm.weight", (d.D,), norm))
                    specs.append((p + "self_attn.k_norm.weight", (d.D,), norm))
            else:
                specs.append((p + "self_attn.qkv_proj.weight", (qd + 2 * kvd, H), w_in))
            specs.append((p + "self_attn.o_proj.weight", (H, qd), attn_out))
            specs.append((p + "post_attention_layernorm.weight", (H,), norm))
            if family == "mixtral":
                # the published Mixtral layout (what save_pretrained writes; transformers 5 loads
                # it into mlp.gate.weight and the stacked mlp.experts.gate_up_proj [E, 2I, H] =
                # [w1; w3] per expert and mlp.experts.down_proj [E, H, I] = w2)
                specs.append((p + "block_sparse_moe.gate.weight", (d.E, H), router))
                for e in range(d.E):
                    x = p + "block_sparse_moe.experts.%d." % e
                    specs.append((x + "w1.weight", (I, H), w_in))
                    specs.append((x + "w3.weight", (I, H), w_in))
                    specs.append((x + "w2.weight", (H, I), ffn_out))
                continue
            if family in ("qwen3_moe", "qwen2_moe"):
                # the published Qwen3-MoE and Qwen1.5-MoE layout (what save_pretrained writes;
                # transformers 5 loads the router as it is and stacks the experts into
                # mlp.experts.gate_up_proj [E, 2I, H] = [gate_proj; up_proj] per expert and
                # mlp.experts.down_proj [E, H, I]), I = moe_intermediate_size
                specs.append((p + "mlp.gate.weight", (d.E, H), router))
                for e in range(d.E):
                    x = p + "mlp.experts.%d." % e
                    specs.append((x + "gate_proj.weight", (I, H), w_in))
                    specs.append((x + "up_proj.weight", (I, H), w_in))
                    specs.append((x + "down_proj.weight", (H, I), ffn_out))
                if family == "qwen2_moe":
                    # the shared expert, a dense MLP of width S (its down_proj's fan_in S), and
                    # its sigmoid gate [1, H], loaded as they are
                    x = p + "mlp.shared_expert."
                    specs.append((x + "gate_proj.weight", (d.S, H), w_in))
                    specs.append((x + "up_proj.weight", (d.S, H), w_in))
                    specs.append((x + "down_proj.weight", (H, d.S),
                                  Init("normal", RESID_GAIN / math.sqrt(d.S * 2 * L))))
                    specs.append((p + "mlp.shared_expert_gate.weight", (1, H), shared_gate))
                continue
            if family in ("qwen2", "llama", "qwen3"):
                specs.append((p + "mlp.gate_proj.weight", (I, H), w_in))
                specs.append((p + "mlp.up_proj.weight", (I, H), w_in))
            else:
                specs.append((p + "mlp.gate_up_proj.weight", (2 * I, H), w_in))
            specs.append((p + "mlp.down_proj.weight", (H, I), ffn_out))
        specs.append(("model.norm.weight", (H,), final_norm))
        if not d.tied:
            specs.append(("lm_head.weight", (V, H), emb))
    elif family == "gpt2":
        specs.append(("transformer.wte.weight", (V, H), emb))
        specs.append(("transformer.wpe.weight", (d.P, H), emb))
        for i in range(L):
            p = "transformer.h.%d." % i
            specs += [
                (p + "ln_1.weight", (H,), norm), (p + "ln_1.bias", (H,), bias),
                (p + "attn.c_attn.weight", (H, 3 * H), w_in),
                (p + "attn.c_attn.bias", (3 * H,), bias),
                (p + "attn.c_proj.weight", (H, H), attn_out), (p + "attn.c_proj.bias", (H,), bias),
                (p + "ln_2.weight", (H,), norm), (p + "ln_2.bias", (H,), bias),
                (p + "mlp.c_fc.weight", (H, I), w_in), (p + "mlp.c_fc.bias", (I,), bias),
                (p + "mlp.c_proj.weight", (I, H), ffn_out), (p + "mlp.c_proj.bias", (H,), bias),
            ]
        specs.append(("transformer.ln_f.weight", (H,), final_norm))
        specs.append(("transformer.ln_f.bias", (H,), final_bias))
        if not d.tied:
            specs.append(("lm_head.weight", (V, H), emb))
    else:
        raise KeyError(family)
    return specs


def gemma_specs(d, gain):
    """init_specs of Gemma 3 and 2 (Gemma3ForCausalLM's and Gemma2ForCausalLM's names; Gemma 2
    has no q_norm and k_norm; the tied head is not stored)."""
    H, L, I, V = d.H, d.L, d.I, d.V
    qd, kvd = d.nH * d.D, d.nKV * d.D
    norm = Init("norm", 0.1, 0.0)  # w of a norm weight 1 + w
    post = POST_NORM_GAIN / math.sqrt(2 * L)
    post_norm = Init("norm", 0.1 * post, post - 1.0)
    if d.family == "gemma2":
        gain = min(gain, GEMMA2_FINAL_NORM_GAIN)
    g = gain * (math.sqrt(H) if d.tied else 1.0)
    final_norm = Init("norm", 0.1 * g, g - 1.0)
    specs = [("model.embed_tokens.weight", (V, H), Init("normal", 4.0 / H))]
    for i in range(L):
        p = "model.layers.%d." % i
        specs.append((p + "input_layernorm.weight", (H,), norm))
        for n, rows in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd)):
            specs.append((p + "self_attn.%s.weight" % n, (rows, H), Init("normal", 1.0 / math.sqrt(H))))
        if d.family == "gemma3":
            specs.append((p + "self_attn.q_norm.weight", (d.D,), norm))
            specs.append((p + "self_attn.k_norm.weight", (d.D,), norm))
        specs.append((p + "self_attn.o_proj.weight", (H, qd), Init("normal", 1.0 / math.sqrt(qd))))
        specs.append((p + "post_attention_layernorm.weight", (H,), post_norm))
        specs.append((p + "pre_feedforward_layernorm.weight", (H,), norm))
        specs.append((p + "mlp.gate_proj.weight", (I, H), Init("normal", 1.0 / math.sqrt(H))))
        specs.append((p + "mlp.up_proj.weight", (I, H), Init("normal", 1.0 / math.sqrt(H))))
        specs.append((p + "mlp.down_proj.weight", (H, I), Init("normal", 1.0 / math.sqrt(I))))
        specs.append((p + "post_feedforward_layernorm.weight", (H,), post_norm))
    specs.append(("model.norm.weight", (H,), final_norm))
    if not d.tied:
        specs.append(("lm_head.weight", (V, H), Init("normal", 4.0 / math.sqrt(H))))
    return specs


def draw_tensor(seed, name, shape, init, chunk=None, dtype="f16"):
    """One synthetic fp16 (dtype "bf16": bf16) tensor: the float64 draw scaled as `init` says,
    rounded to fp32 and then to fp16 (common.dtypes.to_f16; bf16: to_bf16, round to nearest
    even). Its definition is draw_tensor_whole; this computes the same bytes
    DRAW_CHUNK values at a time, in cache, where the whole-tensor form streams a float64 buffer
    through memory five times (uniforms, Box-Muller, scale, two roundings): 1.9x faster on two
    cores (200M values, 3.2 -> 1.7 s). On a 16-core GPU host the draw alone of Phi-3-mini's
    3.8G values still takes 10.9 s, about what its 111 core-seconds allow (docs/PERF.md).

    Why the chunks give the same values: torch's float64 normal fill (ATen normal_fill, for
    contiguous fills of >= 16 values) first takes one uniform per value from the generator in
    order, then transforms them 16 at a time (Box-Muller on 8 pairs) and, when the count is not a
    multiple of 16, redraws the last 16 values from fresh uniforms. Chunks that are multiples of 16
    consume the generator's stream exactly as one fill does, and the last chunk (which keeps at
    least 16 values, so it takes the same path) ends exactly as the whole fill ends. The selftest
    checks chunked against whole draws at sizes around every boundary."""
    chunk = DRAW_CHUNK if chunk is None else chunk
    if chunk % 16:
        raise ValueError("draw chunk %d is not a multiple of 16" % chunk)
    if init.kind == "normal" or init.kind == "bias":
        shift = None
    elif init.kind == "norm":
        shift = init.shift
    else:
        raise KeyError(init.kind)
    g = torch.Generator(device="cpu").manual_seed(tensor_seed(seed, name))
    n = int(np.prod(shape, dtype=np.int64))
    h = torch.empty(shape, dtype=TORCH_DTYPE[dtype])
    flat = h.view(-1)
    b64, b32 = torch.empty(chunk, dtype=F64), torch.empty(chunk, dtype=F32)
    i = 0
    while i < n:
        m = n - i if n - i < chunk + 16 else chunk  # the last chunk keeps >= 16 values
        if m > len(b64):
            b64, b32 = torch.empty(m, dtype=F64), torch.empty(m, dtype=F32)
        x = b64[:m]
        torch.randn((m,), generator=g, dtype=F64, out=x)
        x.mul_(init.std)  # in place: the same IEEE product s * x (and sum 1.0 + s * x)
        if shift is not None:
            x.add_(shift)
        y = b32[:m]
        y.copy_(x)
        flat[i:i + m].copy_(y)
        i += m
    if not torch.isfinite(h).all():
        raise ValueError("%s overflows %s" % (name, dtype))
    return h


def draw_tensor_whole(seed, name, shape, init, dtype="f16"):
    """draw_tensor's definition, one whole-tensor float64 draw (the selftest's reference)."""
    x = Draw(tensor_seed(seed, name)).randn(shape)
    if init.kind in ("normal", "bias"):
        x = init.std * x
    elif init.kind == "norm":
        x = init.shift + init.std * x
    else:
        raise KeyError(init.kind)
    return storage(dtype)(x)


# Values a draw_tensor chunk holds: a multiple of 16 (see draw_tensor); 2 MiB of float64, which
# stays in a core's cache hierarchy while it is drawn, scaled and rounded.
DRAW_CHUNK = 1 << 18


# ---------------------------------------------------------------------------------------------
# safetensors, written by hand so the bytes are fixed by this file alone: an 8-byte little-endian
# header length, the JSON header (keys "__metadata__" first, then tensors in sorted name order,
# compact separators, padded with spaces to a multiple of 8), then the tensors' bytes in the same
# sorted order, contiguous, no gaps. Metadata is {"format": "pt"}, nothing else (no timestamps).
# Synthetic checkpoints hold F16 or BF16 tensors (a set's dtype), all of one dtype.

ST_BYTES = {"F16": 2, "BF16": 2, "F32": 4}


def safetensors_header(entries):
    """entries: [(name, dtype, shape)] -> header bytes (length prefix included)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in sorted(entries):
        n = int(np.prod(shape, dtype=np.int64)) * ST_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                        "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _pwrite_all(fd, data, offset):
    view = memoryview(data).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def write_safetensors(path, entries, pool=None, dtype="f16"):
    """Write a safetensors file of fp16 tensors (dtype "bf16": bf16): entries [(name, shape,
    make)], make() returning the tensor's values (a torch tensor of that dtype and shape).
    Returns the file's sha256.

    Without a pool the tensors are made and written one after the other. With a pool (from
    one_thread_workers) each tensor is made and written at its offset by a pool thread, and
    this thread hashes them in file order as they come (at most 2 per thread in flight). Every
    tensor has its own seed (tensor_seed) and a float64 draw, so the bytes do not depend on which
    thread made what, nor on how many there are."""
    ordered = sorted(entries, key=lambda e: e[0])
    want = TORCH_DTYPE[dtype]
    head = safetensors_header([(n, ST_NAME[dtype], s) for n, s, _ in ordered])
    offsets, end = [], len(head)
    for _, shape, _ in ordered:
        offsets.append(end)
        end += 2 * int(np.prod(shape, dtype=np.int64))

    def job(i):
        name, shape, make = ordered[i]
        t = make()
        if t.dtype != want or tuple(t.shape) != tuple(shape):
            raise RuntimeError("%s: %s %s for %s %s" % (name, t.dtype, tuple(t.shape), want, shape))
        # the 16-bit patterns, little-endian (numpy has no bfloat16: its bits as uint16)
        data = np.ascontiguousarray(t.contiguous().view(torch.int16).numpy(), dtype="<i2")
        _pwrite_all(fd, data, offsets[i])
        return data

    h = hashlib.sha256(head)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, head, 0)
        if pool is None:
            for i in range(len(ordered)):
                h.update(job(i))
        else:
            window, todo = [], iter(range(len(ordered)))
            try:
                for i in todo:
                    window.append(pool.submit(job, i))
                    if len(window) >= 2 * pool.size:
                        break
                while window:
                    h.update(window[0].result())
                    window.pop(0)
                    i = next(todo, None)
                    if i is not None:
                        window.append(pool.submit(job, i))
            except BaseException:
                for f in window:  # no thread may write to fd once it is closed (and reused)
                    f.cancel()
                import concurrent.futures as cf
                cf.wait(window)
                raise
        if os.fstat(fd).st_size != end:
            raise RuntimeError("%s: %d bytes written, want %d" % (path, os.fstat(fd).st_size, end))
    finally:
        os.close(fd)
    return h.hexdigest()


def config_bytes(cfg):
    """config.json of a synthetic checkpoint: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("ascii")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def write_synthetic_checkpoint(set_dir, spec, seed, pool=None):
    """config.json + model.safetensors into set_dir (tensors drawn on `pool` when given).
    Returns [(name, file, sha256)]."""
    if spec.config.get("torch_dtype") != CONFIG_DTYPE[spec.dtype]:
        raise RuntimeError("%s: torch_dtype %r for a %s set" % (spec.name,
                                                                spec.config.get("torch_dtype"),
                                                                spec.dtype))
    cfg_data = config_bytes(spec.config)
    with open(os.path.join(set_dir, "config.json"), "wb") as f:
        f.write(cfg_data)
    entries = [(n, s, lambda n=n, s=s, i=i: draw_tensor(seed, n, s, i, dtype=spec.dtype))
               for n, s, i in init_specs(spec.family, spec.config, final_norm_gain(spec.tier))]
    digest = write_safetensors(os.path.join(set_dir, "model.safetensors"), entries, pool,
                               spec.dtype)
    return [("config", "config.json", hashlib.sha256(cfg_data).hexdigest()),
            ("model", "model.safetensors", digest)]


def checkpoint_files(src):
    """The files of a real checkpoint directory that a set carries: config.json and either
    model.safetensors or model.safetensors.index.json plus every shard it names."""
    if not os.path.isfile(os.path.join(src, "config.json")):
        raise SystemExit("%s: no config.json" % src)
    files = ["config.json"]
    if os.path.isfile(os.path.join(src, "model.safetensors")):
        files.append("model.safetensors")
    elif os.path.isfile(os.path.join(src, "model.safetensors.index.json")):
        with open(os.path.join(src, "model.safetensors.index.json")) as f:
            index = json.load(f)
        shards = sorted(set(index["weight_map"].values()))
        for s in shards:
            if os.path.basename(s) != s or not os.path.isfile(os.path.join(src, s)):
                raise SystemExit("%s: shard %r missing or not a plain file name" % (src, s))
        files += ["model.safetensors.index.json"] + shards
    else:
        raise SystemExit("%s: no model.safetensors or model.safetensors.index.json (only "
                         "safetensors checkpoints are accepted)" % src)
    return files


def place_checkpoint(set_dir, src):
    """Hard-link (same filesystem) or copy the checkpoint files into set_dir; never a symlink, so
    the set is self-contained and its checksums describe its own files.
    Returns [(name, file, sha256)]."""
    out = []
    for fname in checkpoint_files(src):
        dst = os.path.join(set_dir, fname)
        try:
            os.link(os.path.realpath(os.path.join(src, fname)), dst)
        except OSError:
            shutil.copyfile(os.path.join(src, fname), dst)
        name = fname[:-len(".json")] if fname.endswith(".json") else fname[:-len(".safetensors")]
        out.append((name, fname, sha256_file(dst)))
    return out
