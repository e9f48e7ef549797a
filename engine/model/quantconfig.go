package model

import (
	"encoding/json"
	"fmt"
	"strings"
)

// quantizedCheckpoint refuses a config.json with a quantization_config: its weights are stored
// in a format (FP8 blocks, 4-bit packs, NF4, MXFP4, ...) whose dequantisation and quantized
// kernels this engine's forward passes do not implement, so loading it as an fp16 or bf16 model
// would run garbage or fail later with a less useful error. The message names the format as the
// config states it (quant_method and the keys that tell its variants apart), so a user sees at
// once what was refused. A null or absent quantization_config is no quantization.
func quantizedCheckpoint(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var q map[string]any
	if err := json.Unmarshal(raw, &q); err != nil {
		return fmt.Errorf("config: quantization_config: %w", err)
	}
	method, _ := q["quant_method"].(string)
	if method == "" {
		method = "unnamed"
	}
	var details []string
	add := func(key string) {
		if v, ok := q[key]; ok && v != nil {
			b, err := json.Marshal(v)
			if err == nil {
				details = append(details, key+"="+string(b))
			}
		}
	}
	// The keys that tell a method's variants apart, as transformers' quantizers read them.
	switch method {
	case "fp8":
		add("activation_scheme")
		add("weight_block_size")
	case "compressed-tensors":
		add("format")
		add("quantization_status")
	case "awq":
		add("bits")
		add("group_size")
		add("version")
		add("zero_point")
	case "gptq":
		add("bits")
		add("group_size")
		add("desc_act")
		add("sym")
	case "bitsandbytes":
		add("load_in_4bit")
		add("load_in_8bit")
		add("bnb_4bit_quant_type")
	case "mxfp4":
		add("modules_to_not_convert")
	default:
		add("bits")
		add("weight_dtype")
	}
	what := fmt.Sprintf("quant_method %q", method)
	if len(details) > 0 {
		what += " (" + strings.Join(details, ", ") + ")"
	}
	return fmt.Errorf("config: quantization_config with %s is not implemented: model passes run fp16, bf16 and fp32 checkpoints (quantized kernels are certified op by op: docs/quantization.md)", what)
}
