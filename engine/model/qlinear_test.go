package model

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
)

// readCheckpoint reads a committed set's model.safetensors as synthTensors holding their bytes
// verbatim, in file order, with the set's config.json.
func readCheckpoint(t *testing.T, set string) (config string, ts []synthTensor) {
	t.Helper()
	dir := filepath.Join("..", "..", "golden", "models", set)
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(data)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	body := data[8+n:]
	for name, raw := range header {
		if name == "__metadata__" {
			continue
		}
		var e entry
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, synthTensor{name: name, dtype: e.DType, shape: e.Shape, raw: slices.Clone(body[e.Offsets[0]:e.Offsets[1]])})
	}
	slices.SortFunc(ts, func(a, b synthTensor) int { return strings.Compare(a.name, b.name) })
	return string(cfg), ts
}

// edited writes ts, changed by edit, with config into a new directory and loads it on the cpu
// backend.
func edited(t *testing.T, config string, ts []synthTensor, edit func([]synthTensor) []synthTensor) (*Model, error) {
	t.Helper()
	dir := t.TempDir()
	writeSynth(t, dir, config, edit(slices.Clone(ts)), 1)
	return Load(cpu.New(), dir, 32)
}

func find(ts []synthTensor, name string) int {
	for i, x := range ts {
		if x.name == name {
			return i
		}
	}
	panic("no tensor " + name)
}

// Each committed quantized set's checkpoint loads with every projection in its format.
func TestQuantizedCheckpointsLoad(t *testing.T) {
	for set, format := range map[string]QuantFormat{"llama3-tiny-fp8-bf16": QuantFP8Block, "llama3-tiny-fp8dyn-bf16": QuantFP8Channel,
		"llama3-tiny-awq": QuantAWQ, "llama3-tiny-gptq": QuantGPTQ, "qwen2-tiny-fp8-bf16": QuantFP8Block, "qwen2-tiny-awq": QuantAWQ} {
		config, ts := readCheckpoint(t, set)
		m, err := edited(t, config, ts, func(ts []synthTensor) []synthTensor { return ts })
		if err != nil {
			t.Fatalf("%s: %v", set, err)
		}
		if m.Cfg.Quant.Format != format || len(m.q) != 7*m.Cfg.Layers {
			t.Errorf("%s: format %s with %d quantized projections, want %s with %d", set, m.Cfg.Quant.Format, len(m.q), format, 7*m.Cfg.Layers)
		}
		// Decode fuses FP8 gate/up (and q/k/v where no 128-row block straddles two of them:
		// per channel, not llama3-tiny's 32-row k and v with blocks); 4-bit projections run alone.
		a, f := m.Layers[0].Attn, m.Layers[0].MLP
		if fp8 := format == QuantFP8Block || format == QuantFP8Channel; (f.gateUpQ != nil) != fp8 || (a.qkvQ != nil) != (format == QuantFP8Channel) {
			t.Errorf("%s: fused FP8 gate/up %v, q/k/v %v", set, f.gateUpQ != nil, a.qkvQ != nil)
		}
		if _, err := m.Prefill([]int32{1, 2, 3}); err != nil {
			t.Errorf("%s: prefill: %v", set, err)
		}
		if _, err := m.Decode(4); err != nil {
			t.Errorf("%s: decode: %v", set, err)
		}
		m.Close()
	}
}

// A projection the checkpoint keeps 16-bit (modules_to_not_convert) loads as a dense weight
// beside the quantized ones, and the fused decode GEMMs stay off for its layer.
func TestQuantizedCheckpointWithADenseProjection(t *testing.T) {
	config, ts := readCheckpoint(t, "llama3-tiny-awq")
	m, err := edited(t, config, ts, func(ts []synthTensor) []synthTensor {
		var out []synthTensor
		for _, x := range ts {
			if !strings.HasPrefix(x.name, "model.layers.1.self_attn.q_proj.") {
				out = append(out, x)
			}
		}
		return append(out, synthTensor{name: "model.layers.1.self_attn.q_proj.weight", dtype: "F16", shape: []int{128, 128}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.q) != 13 || m.Layers[1].Attn.Qq != nil || m.Layers[1].Attn.Wq == nil || m.Layers[1].Attn.qkvW != nil {
		t.Errorf("%d quantized projections, layer 1 q: Qq %v Wq %v fused %v", len(m.q), m.Layers[1].Attn.Qq, m.Layers[1].Attn.Wq, m.Layers[1].Attn.qkvW)
	}
	if _, err := m.Prefill([]int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Decode(4); err != nil {
		t.Fatal(err)
	}
}

// A malformed quantized checkpoint is refused naming the tensor and what is wrong with it.
func TestMalformedQuantizedCheckpointsAreRefused(t *testing.T) {
	set := func(i int, f func(*synthTensor)) func([]synthTensor) []synthTensor {
		return func(ts []synthTensor) []synthTensor { f(&ts[i]); return ts }
	}
	for _, c := range []struct {
		set, what string
		edit      func(ts []synthTensor) []synthTensor
		want      []string
	}{
		{"llama3-tiny-awq", "qzeros of the wrong shape", nil, []string{"model.layers.0.mlp.down_proj.qzeros", "shape [16,16], want [8,16]"}},
		{"llama3-tiny-gptq", "a g_idx outside the groups", nil, []string{"model.layers.0.self_attn.k_proj.g_idx element 5 = 4", "groups 0..3"}},
		{"llama3-tiny-fp8-bf16", "a zero block scale", nil, []string{"model.layers.1.mlp.up_proj", "scale element 1 = 0"}},
		{"llama3-tiny-fp8-bf16", "a BF16 weight beside a block scale", nil, []string{"model.layers.0.self_attn.o_proj.weight has dtype BF16, want F8_E4M3"}},
		{"llama3-tiny-fp8dyn-bf16", "a static input scale", nil, []string{"model.layers.0.self_attn.v_proj", "input_scale", "static activation scale"}},
		{"qwen2-tiny-awq", "a bias of the wrong width", nil, []string{"model.layers.0.self_attn.q_proj.bias", "shape [255]"}},
		{"llama3-tiny-gptq", "a quantized LM head", nil, []string{"lm_head.qweight", "quantized LM head is not implemented"}},
		{"llama3-tiny-fp8-bf16", "a missing weight_scale_inv's weight", nil, []string{"no tensor model.layers.1.self_attn.q_proj.weight", "F8_E4M3"}},
	} {
		config, ts := readCheckpoint(t, c.set)
		switch c.what {
		case "qzeros of the wrong shape":
			c.edit = set(find(ts, "model.layers.0.mlp.down_proj.qzeros"), func(x *synthTensor) { x.shape = []int{16, 16}; x.raw = append(x.raw, x.raw...) })
		case "a g_idx outside the groups":
			c.edit = set(find(ts, "model.layers.0.self_attn.k_proj.g_idx"), func(x *synthTensor) { binary.LittleEndian.PutUint32(x.raw[20:], 4) })
		case "a zero block scale":
			c.edit = set(find(ts, "model.layers.1.mlp.up_proj.weight_scale_inv"), func(x *synthTensor) { binary.LittleEndian.PutUint32(x.raw[4:], 0) })
		case "a BF16 weight beside a block scale":
			c.edit = set(find(ts, "model.layers.0.self_attn.o_proj.weight"), func(x *synthTensor) { x.dtype = "BF16"; x.raw = append(x.raw, x.raw...) })
		case "a static input scale":
			c.edit = func(ts []synthTensor) []synthTensor {
				return append(ts, synthTensor{name: "model.layers.0.self_attn.v_proj.input_scale", dtype: "F32", shape: []int{1}})
			}
		case "a bias of the wrong width":
			c.edit = set(find(ts, "model.layers.0.self_attn.q_proj.bias"), func(x *synthTensor) { x.shape = []int{255}; x.raw = x.raw[:510] })
		case "a quantized LM head":
			c.edit = func(ts []synthTensor) []synthTensor {
				return append(ts, synthTensor{name: "lm_head.qweight", dtype: "I32", shape: []int{16, 384}})
			}
		case "a missing weight_scale_inv's weight":
			c.edit = func(ts []synthTensor) []synthTensor {
				return slices.Delete(ts, find(ts, "model.layers.1.self_attn.q_proj.weight"), find(ts, "model.layers.1.self_attn.q_proj.weight")+1)
			}
		}
		m, err := edited(t, config, ts, c.edit)
		if err == nil {
			m.Close()
			t.Errorf("%s: %s loaded", c.set, c.what)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %s: error %q, want it to say %q", c.set, c.what, err, w)
			}
		}
	}
}

// A quantized projection's bias reaches every row of a batch's prefill longer than the model's
// own cache (addBias's row-by-row path), with the logits of the same prompt in a model whose
// cache holds it (the broadcast path), bit for bit.
func TestQuantizedBiasOfALongBatchPrefill(t *testing.T) {
	dir := filepath.Join("..", "..", "golden", "models", "qwen2-tiny-awq")
	prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}
	short, err := Load(cpu.New(), dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	b, err := short.NewBatch(1, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Prefill(0, prompt); err != nil {
		t.Fatal(err)
	}
	got, err := b.Logits()
	if err != nil {
		t.Fatal(err)
	}
	long, err := Load(cpu.New(), dir, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	want, err := long.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.F32, want.F32) {
		t.Errorf("batch prefill past the model's cache: logits differ from the model's own prefill")
	}
}
