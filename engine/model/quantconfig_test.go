package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

// ctFP8Dynamic is the quantization_config llm-compressor writes for the FP8-dynamic scheme.
const ctFP8Dynamic = `{"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
 "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": null,
 "weights": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel", "dynamic": false, "group_size": null, "observer": "minmax"},
 "input_activations": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token", "dynamic": true, "group_size": null, "observer": null}}}}`

// The formats the engine runs parse to their Quant, with the configs the hub's checkpoints carry.
func TestQuantizedCheckpointFormatsParse(t *testing.T) {
	for _, c := range []struct {
		qc   string
		want Quant
	}{
		{`{"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}`, Quant{Format: QuantFP8Block, GroupSize: 128, Skip: []string{"lm_head"}}},
		{ctFP8Dynamic, Quant{Format: QuantFP8Channel, Skip: []string{"lm_head"}}},
		{`{"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": true}`, Quant{Format: QuantAWQ, GroupSize: 128}},
		{`{"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true, "sym": true, "checkpoint_format": "gptq"}`, Quant{Format: QuantGPTQ, GroupSize: 128}},
		{`{"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": false, "sym": false}`, Quant{Format: QuantGPTQ, GroupSize: -1}},
	} {
		cfg, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": `+c.qc, 1)))
		if err != nil {
			t.Errorf("%s: %v", c.qc, err)
			continue
		}
		if q := cfg.Quant; q == nil || q.Format != c.want.Format || q.GroupSize != c.want.GroupSize || strings.Join(q.Skip, ",") != strings.Join(c.want.Skip, ",") {
			t.Errorf("%s: parsed %+v, want %+v", c.qc, cfg.Quant, c.want)
		}
	}
}

// Every other quantized format, and every variant of the implemented ones that the engine does
// not run, is refused by its config, naming the format and the keys that tell its variants
// apart, as transformers' own configs write them, and saying why.
func TestQuantizedCheckpointsAreRefusedByName(t *testing.T) {
	for _, c := range []struct{ qc, want, why string }{
		{`{"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}`, `quant_method "fp8" (activation_scheme="static", weight_block_size=[128,128])`, "dynamic"},
		{`{"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": null}`, `quant_method "fp8" (activation_scheme="dynamic")`, "[128, 128]"},
		{`{"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}`, `scale_fmt="ue8m0"`, "float32"},
		{`{"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed"}`, `"compressed-tensors" (format="pack-quantized"`, "float-quantized"},
		{strings.Replace(ctFP8Dynamic, `"strategy": "channel"`, `"strategy": "tensor"`, 1), `"compressed-tensors"`, "strategy channel"},
		{strings.Replace(ctFP8Dynamic, `"dynamic": true`, `"dynamic": false`, 1), `"compressed-tensors"`, "dynamic, strategy token"},
		{`{"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv", "zero_point": true}`, `"awq" (bits=4, group_size=128, version="gemv", zero_point=true)`, "GEMM packing"},
		{`{"quant_method": "awq", "bits": 8, "group_size": 128, "version": "gemm"}`, `"awq" (bits=8`, "4-bit"},
		{`{"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "gptq_v2"}`, `checkpoint_format="gptq_v2"`, "minus one"},
		{`{"quant_method": "gptq", "bits": 3, "group_size": 128}`, `"gptq" (bits=3`, "4-bit"},
		{`{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}`, `"bitsandbytes" (load_in_4bit=true, bnb_4bit_quant_type="nf4")`, "formats implemented"},
		{`{"quant_method": "mxfp4"}`, `quant_method "mxfp4" is not implemented`, "formats implemented"},
		{`{"bits": 8}`, `quant_method "unnamed" (bits=8)`, "formats implemented"},
	} {
		cfg := strings.Replace(qwenCfg, "%s", `, "quantization_config": `+c.qc, 1)
		_, err := ParseConfig([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "not implemented") || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", c.qc, err, c.want, c.why)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": null`, 1))); err != nil {
		t.Errorf("a null quantization_config is no quantization: %v", err)
	}
	if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": [1]`, 1))); err == nil || !strings.Contains(err.Error(), "quantization_config") {
		t.Errorf("a malformed quantization_config: %v", err)
	}
	phi := `{"model_type": "phi3", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 64, "rope_theta": 1e4,
	 "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": true}}`
	if _, err := ParseConfig([]byte(phi)); err == nil || !strings.Contains(err.Error(), `model_type "phi3" is not implemented`) {
		t.Errorf("a quantized phi3 checkpoint: %v", err)
	}
}

// A directory that holds a GGUF file and no safetensors is refused as GGUF, not as a directory
// without weights.
func TestGGUFCheckpointIsRefusedByName(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(strings.Replace(qwenCfg, "%s", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "qwen2.5-0.5b-instruct-q4_k_m.gguf"), []byte("GGUF\x03\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(cpu.New(), dir, 16)
	if err == nil || !strings.Contains(err.Error(), "GGUF") || !strings.Contains(err.Error(), "q4_k_m.gguf") {
		t.Errorf("a GGUF checkpoint: %v", err)
	}
}
