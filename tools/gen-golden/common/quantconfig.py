"""The quantized checkpoint formats touchstone runs, read from config.json's quantization_config
exactly as the engine reads them (engine/model/quantconfig.go), and the tensor that marks a
module stored in each (as engine/model/qlinear.go's quantSuffix). Shared by the generator's
quantized sets (models/quantize.py) and the PyTorch peer that times them (tools/bench/quant_peer.py).
"""

import json

from common.fp8 import FP8_BLOCK

MARKER = {"fp8-block": ".weight_scale_inv", "fp8-channel": ".weight_scale", "awq": ".qweight",
          "gptq": ".qweight"}


def quant_format(qc):
    """(format, group size or None) of a quantization_config in an implemented format; ValueError
    naming anything else (the engine refuses it too)."""
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    if method == "fp8" and qc.get("weight_block_size") == [FP8_BLOCK, FP8_BLOCK] and \
            qc.get("activation_scheme", "dynamic") == "dynamic" and \
            qc.get("scale_fmt", "float") == "float":
        return "fp8-block", None
    if method == "compressed-tensors" and qc.get("format") == "float-quantized":
        groups = list((qc.get("config_groups") or {}).values())
        if len(groups) == 1:
            w, a = groups[0].get("weights") or {}, groups[0].get("input_activations") or {}
            if (w.get("num_bits"), w.get("type"), w.get("strategy"), w.get("dynamic")) == \
                    (8, "float", "channel", False) and \
                    (a.get("num_bits"), a.get("type"), a.get("strategy"), a.get("dynamic")) == \
                    (8, "float", "token", True) and not groups[0].get("output_activations"):
                return "fp8-channel", None
    if method == "awq" and qc.get("bits") == 4 and str(qc.get("version", "")).lower() == "gemm" \
            and qc.get("zero_point", True):
        return "awq", qc["group_size"]
    if method == "gptq" and qc.get("bits") == 4 and qc.get("checkpoint_format", "gptq") == "gptq":
        return "gptq", qc["group_size"]
    raise ValueError("quantization_config %s is not implemented (fp8 [128, 128] dynamic, "
                     "compressed-tensors FP8-dynamic, awq gemm 4-bit, gptq 4-bit): "
                     "docs/quantization.md" % json.dumps(qc, sort_keys=True))
