package model

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// TestStorageDTypeFromConfig: torch_dtype (or transformers 5's dtype) picks the run dtype;
// bfloat16 runs bf16, float16 and float32 (and none) fp16, anything else is refused by name.
func TestStorageDTypeFromConfig(t *testing.T) {
	for extra, want := range map[string]tensor.DType{
		``: tensor.F16, `, "torch_dtype": "float16"`: tensor.F16, `, "torch_dtype": "bfloat16"`: tensor.BF16,
		`, "dtype": "bfloat16"`: tensor.BF16, `, "torch_dtype": "float32"`: tensor.F16,
	} {
		c, err := ParseConfig([]byte(fmt.Sprintf(qwenCfg, extra)))
		if err != nil || c.DType != want {
			t.Errorf("config with %q: dtype %v, %v; want %v", extra, c.DType, err, want)
		}
	}
	if _, err := ParseConfig([]byte(fmt.Sprintf(qwenCfg, `, "torch_dtype": "float8_e4m3fn"`))); err == nil || !strings.Contains(err.Error(), "torch_dtype") {
		t.Errorf("float8 torch_dtype: err %v, want one naming torch_dtype", err)
	}
}

// TestLoadBF16 loads a BF16 checkpoint as bf16: every weight's bits are the checkpoint's, with
// GPT-2's transposes and Phi-3's splits applied to the bits unchanged; an F16 checkpoint loaded
// as bf16 is rounded element by element.
func TestLoadBF16(t *testing.T) {
	for _, tc := range []struct{ name, config, dtype string }{
		{"qwen2", fmt.Sprintf(oddQwenCfg, false), "BF16"}, {"phi3", oddPhi3Cfg, "BF16"}, {"gpt2", oddGPT2Cfg, "BF16"},
		{"qwen2-from-F16", fmt.Sprintf(oddQwenCfg, false), "F16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg := synthDir(t, tc.config, tc.dtype, nil)
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			be := cpu.New()
			bcfg := *cfg
			bcfg.DType = tensor.BF16
			got, err := loadWeightsWith(be, &bcfg, ck, 3)
			if err != nil {
				t.Fatal(err)
			}
			// The fp16 load of the same checkpoint, widened, then rounded to bf16, must equal
			// the bf16 load wherever the checkpoint's values are fp16 values (F16); for a BF16
			// checkpoint compare the widened values themselves.
			want, err := loadWeightsWith(cpu.New(), cfg, ck, 3)
			if tc.dtype == "BF16" {
				want = nil // fp16 loading rounds BF16: compare with the checkpoint directly below
			} else if err != nil {
				t.Fatal(err)
			}
			for name, b := range got {
				g, _ := be.Download(b)
				if g.DType != tensor.BF16 {
					t.Fatalf("%s loaded as %v, want bf16", name, g.DType)
				}
				if want != nil {
					w, _ := cpu.New().Download(want[name])
					for i, v := range w.Float32() {
						if g.BF16[i] != tensor.BF16FromFloat32(v) {
							t.Fatalf("%s[%d] = %#04x, want bf16(%g)", name, i, g.BF16[i], v)
						}
					}
				}
			}
			if tc.dtype == "BF16" {
				// Every BF16 checkpoint value widens exactly, so its bf16 load holds the same
				// values as an fp32 view of the checkpoint: check the embedding.
				e, err := ck.Tensor(firstName(cfg))
				if err != nil {
					t.Fatal(err)
				}
				g, _ := be.Download(got["embed"])
				for i, v := range e.Float32() {
					if math.Float32bits(g.BF16[i].Float32()) != math.Float32bits(v) { // bits: edge values include NaN
						t.Fatalf("embed[%d] = %g, checkpoint %g", i, g.BF16[i].Float32(), v)
					}
				}
			}
		})
	}
}

func firstName(c *Config) string {
	if c.Family == "gpt2" {
		return "transformer.wte.weight"
	}
	return "model.embed_tokens.weight"
}
