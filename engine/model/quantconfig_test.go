package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

// Every quantized checkpoint format the hub publishes is refused by its config, naming the
// format and the keys that tell its variants apart, as transformers' own configs write them.
func TestQuantizedCheckpointsAreRefusedByName(t *testing.T) {
	for _, c := range []struct{ qc, want string }{
		{`{"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}`, `quant_method "fp8" (activation_scheme="dynamic", weight_block_size=[128,128])`},
		{`{"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed"}`, `"compressed-tensors" (format="float-quantized"`},
		{`{"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": true}`, `"awq" (bits=4, group_size=128, version="gemm", zero_point=true)`},
		{`{"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true, "sym": true}`, `"gptq" (bits=4, group_size=128, desc_act=true, sym=true)`},
		{`{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}`, `"bitsandbytes" (load_in_4bit=true, bnb_4bit_quant_type="nf4")`},
		{`{"quant_method": "mxfp4"}`, `quant_method "mxfp4" is not implemented`},
		{`{"bits": 8}`, `quant_method "unnamed" (bits=8)`},
	} {
		cfg := strings.Replace(qwenCfg, "%s", `, "quantization_config": `+c.qc, 1)
		_, err := ParseConfig([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "not implemented") {
			t.Errorf("%s: error %v, want one naming %s", c.qc, err, c.want)
		}
	}
	if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": null`, 1))); err != nil {
		t.Errorf("a null quantization_config is no quantization: %v", err)
	}
	if _, err := ParseConfig([]byte(strings.Replace(qwenCfg, "%s", `, "quantization_config": [1]`, 1))); err == nil || !strings.Contains(err.Error(), "quantization_config") {
		t.Errorf("a malformed quantization_config: %v", err)
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
