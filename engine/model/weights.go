package model

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/x448/float16"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/model/safetensors"
	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// dims gives a checkpoint tensor's expected shape from the config.
type dims func(c *Config) []int

func vh(c *Config) []int   { return []int{c.Vocab, c.Hidden} }
func h(c *Config) []int    { return []int{c.Hidden} }
func hh(c *Config) []int   { return []int{c.Hidden, c.Hidden} }
func qh(c *Config) []int   { return []int{c.Heads * c.HeadDim, c.Hidden} }
func kvh(c *Config) []int  { return []int{c.KVHeads * c.HeadDim, c.Hidden} }
func q(c *Config) []int    { return []int{c.Heads * c.HeadDim} }
func kv(c *Config) []int   { return []int{c.KVHeads * c.HeadDim} }
func hq(c *Config) []int   { return []int{c.Hidden, c.Heads * c.HeadDim} }
func ih(c *Config) []int   { return []int{c.Intermediate, c.Hidden} }
func hi(c *Config) []int   { return []int{c.Hidden, c.Intermediate} }
func i(c *Config) []int    { return []int{c.Intermediate} }
func ph(c *Config) []int   { return []int{c.MaxPositions, c.Hidden} }
func h3h(c *Config) []int  { return []int{c.Hidden, 3 * c.Hidden} }
func h3(c *Config) []int   { return []int{3 * c.Hidden} }
func qkvh(c *Config) []int { return []int{(c.Heads + 2*c.KVHeads) * c.HeadDim, c.Hidden} }
func i2h(c *Config) []int  { return []int{2 * c.Intermediate, c.Hidden} }

// weight maps one checkpoint tensor to engine weights. "{i}" in both names is the layer.
// Transpose turns a GPT-2 Conv1D [in, out] matrix into the [out, in] that Gemm takes; Split
// cuts the (transposed) tensor's rows, in order, into the named engine weights, with the
// row counts from SplitRows. Fused tensors are split at load time so that every family's
// forward is the same sequence of plain Gemms, and the q/k/v and gate/up taps are whole
// buffers rather than strided views (the Backend has no views).
type weight struct {
	HF        string
	Shape     dims
	Into      string
	Transpose bool
	Split     []string
	SplitRows func(c *Config) []int
	Optional  bool // may be absent (lm_head, absent from tied checkpoints)
	// TiedTo is the tensor this one is when the config ties the LM head (the embedding). Some
	// tied exports still store lm_head.weight: it is never uploaded (a buffer nothing would
	// use or free), only checked to be the embedding's copy, since transformers unties a
	// checkpoint whose two tensors differ and would compute with lm_head.weight.
	TiedTo string
}

var weightTables = map[string][]weight{
	"qwen2": {
		{HF: "model.embed_tokens.weight", Shape: vh, Into: "embed"},
		{HF: "model.layers.{i}.input_layernorm.weight", Shape: h, Into: "layers.{i}.attn_norm"},
		{HF: "model.layers.{i}.self_attn.q_proj.weight", Shape: qh, Into: "layers.{i}.wq"},
		{HF: "model.layers.{i}.self_attn.q_proj.bias", Shape: q, Into: "layers.{i}.bq"},
		{HF: "model.layers.{i}.self_attn.k_proj.weight", Shape: kvh, Into: "layers.{i}.wk"},
		{HF: "model.layers.{i}.self_attn.k_proj.bias", Shape: kv, Into: "layers.{i}.bk"},
		{HF: "model.layers.{i}.self_attn.v_proj.weight", Shape: kvh, Into: "layers.{i}.wv"},
		{HF: "model.layers.{i}.self_attn.v_proj.bias", Shape: kv, Into: "layers.{i}.bv"},
		{HF: "model.layers.{i}.self_attn.o_proj.weight", Shape: hq, Into: "layers.{i}.wo"},
		{HF: "model.layers.{i}.post_attention_layernorm.weight", Shape: h, Into: "layers.{i}.ffn_norm"},
		{HF: "model.layers.{i}.mlp.gate_proj.weight", Shape: ih, Into: "layers.{i}.wgate"},
		{HF: "model.layers.{i}.mlp.up_proj.weight", Shape: ih, Into: "layers.{i}.wup"},
		{HF: "model.layers.{i}.mlp.down_proj.weight", Shape: hi, Into: "layers.{i}.wdown"},
		{HF: "model.norm.weight", Shape: h, Into: "final_norm"},
		{HF: "lm_head.weight", Shape: vh, Into: "head", Optional: true, TiedTo: "model.embed_tokens.weight"},
	},
	"phi3": {
		{HF: "model.embed_tokens.weight", Shape: vh, Into: "embed"},
		{HF: "model.layers.{i}.input_layernorm.weight", Shape: h, Into: "layers.{i}.attn_norm"},
		{HF: "model.layers.{i}.self_attn.qkv_proj.weight", Shape: qkvh, Split: []string{"layers.{i}.wq", "layers.{i}.wk", "layers.{i}.wv"},
			SplitRows: func(c *Config) []int { return []int{c.Heads * c.HeadDim, c.KVHeads * c.HeadDim, c.KVHeads * c.HeadDim} }},
		{HF: "model.layers.{i}.self_attn.o_proj.weight", Shape: hq, Into: "layers.{i}.wo"},
		{HF: "model.layers.{i}.post_attention_layernorm.weight", Shape: h, Into: "layers.{i}.ffn_norm"},
		{HF: "model.layers.{i}.mlp.gate_up_proj.weight", Shape: i2h, Split: []string{"layers.{i}.wgate", "layers.{i}.wup"},
			SplitRows: func(c *Config) []int { return []int{c.Intermediate, c.Intermediate} }},
		{HF: "model.layers.{i}.mlp.down_proj.weight", Shape: hi, Into: "layers.{i}.wdown"},
		{HF: "model.norm.weight", Shape: h, Into: "final_norm"},
		{HF: "lm_head.weight", Shape: vh, Into: "head", Optional: true, TiedTo: "model.embed_tokens.weight"},
	},
	"gpt2": {
		{HF: "transformer.wte.weight", Shape: vh, Into: "embed"},
		{HF: "transformer.wpe.weight", Shape: ph, Into: "pos_embed"},
		{HF: "transformer.h.{i}.ln_1.weight", Shape: h, Into: "layers.{i}.attn_norm"},
		{HF: "transformer.h.{i}.ln_1.bias", Shape: h, Into: "layers.{i}.attn_norm_b"},
		{HF: "transformer.h.{i}.attn.c_attn.weight", Shape: h3h, Transpose: true, Split: []string{"layers.{i}.wq", "layers.{i}.wk", "layers.{i}.wv"},
			SplitRows: func(c *Config) []int { return []int{c.Hidden, c.Hidden, c.Hidden} }},
		{HF: "transformer.h.{i}.attn.c_attn.bias", Shape: h3, Split: []string{"layers.{i}.bq", "layers.{i}.bk", "layers.{i}.bv"},
			SplitRows: func(c *Config) []int { return []int{c.Hidden, c.Hidden, c.Hidden} }},
		{HF: "transformer.h.{i}.attn.c_proj.weight", Shape: hh, Transpose: true, Into: "layers.{i}.wo"},
		{HF: "transformer.h.{i}.attn.c_proj.bias", Shape: h, Into: "layers.{i}.bo"},
		{HF: "transformer.h.{i}.ln_2.weight", Shape: h, Into: "layers.{i}.ffn_norm"},
		{HF: "transformer.h.{i}.ln_2.bias", Shape: h, Into: "layers.{i}.ffn_norm_b"},
		{HF: "transformer.h.{i}.mlp.c_fc.weight", Shape: hi, Transpose: true, Into: "layers.{i}.wup"},
		{HF: "transformer.h.{i}.mlp.c_fc.bias", Shape: i, Into: "layers.{i}.bup"},
		{HF: "transformer.h.{i}.mlp.c_proj.weight", Shape: ih, Transpose: true, Into: "layers.{i}.wdown"},
		{HF: "transformer.h.{i}.mlp.c_proj.bias", Shape: h, Into: "layers.{i}.bdown"},
		{HF: "transformer.ln_f.weight", Shape: h, Into: "final_norm"},
		{HF: "transformer.ln_f.bias", Shape: h, Into: "final_norm_b"},
	},
}

// loadWeights reads every tensor of the family's table from ck, checks its shape, converts
// it to fp16, transposes or splits it as the table says and uploads it. The result maps
// engine weight names (layers.0.wq, embed, ...) to buffers.
func loadWeights(be backend.Backend, c *Config, ck *safetensors.Checkpoint) (map[string]backend.Buffer, error) {
	table, ok := weightTables[c.Family]
	if !ok {
		return nil, fmt.Errorf("model: no weight table for family %q", c.Family)
	}
	out := map[string]backend.Buffer{}
	fail := func(err error) (map[string]backend.Buffer, error) {
		for _, b := range out {
			b.Free()
		}
		return nil, err
	}
	for _, w := range table {
		if c.TiedHead && w.TiedTo != "" {
			if err := checkTiedCopy(ck, w.HF, w.TiedTo); err != nil {
				return fail(err)
			}
			continue
		}
		n := 1
		if strings.Contains(w.HF, "{i}") {
			n = c.Layers
		}
		for layer := 0; layer < n; layer++ {
			sub := func(s string) string { return strings.ReplaceAll(s, "{i}", fmt.Sprint(layer)) }
			name := sub(w.HF)
			hfName := name
			if _, ok := ck.Info(hfName); !ok && c.Family == "gpt2" {
				hfName = strings.TrimPrefix(name, "transformer.") // hub GPT-2 files carry no prefix
			}
			info, ok := ck.Info(hfName)
			if !ok {
				if w.Optional {
					continue
				}
				return fail(fmt.Errorf("model: checkpoint has no tensor %s (want shape %s)", name, tensor.ShapeString(w.Shape(c))))
			}
			if want := w.Shape(c); !tensor.SameShape(info.Shape, want) {
				return fail(fmt.Errorf("model: tensor %s has shape %s, the config wants %s", name, tensor.ShapeString(info.Shape), tensor.ShapeString(want)))
			}
			t, err := ck.Tensor(hfName)
			if err != nil {
				return fail(err)
			}
			t, err = toF16(t, name)
			if err != nil {
				return fail(err)
			}
			if w.Transpose {
				t = transpose(t)
			}
			parts := []*tensor.Tensor{t}
			names := []string{sub(w.Into)}
			if w.Split != nil {
				parts, names = splitRows(t, w.SplitRows(c)), nil
				for _, s := range w.Split {
					names = append(names, sub(s))
				}
			}
			for k, p := range parts {
				b, err := be.Upload(p)
				if err != nil {
					return fail(fmt.Errorf("model: upload %s: %w", names[k], err))
				}
				out[names[k]] = b
			}
		}
	}
	return out, nil
}

// checkTiedCopy checks, in a tied checkpoint that stores name anyway, that name holds exactly
// the values of tiedTo: transformers ties the two only then. Both are read on the host and
// dropped; nothing is uploaded.
func checkTiedCopy(ck *safetensors.Checkpoint, name, tiedTo string) error {
	if _, ok := ck.Info(name); !ok {
		return nil
	}
	a, err := ck.Tensor(name)
	if err != nil {
		return err
	}
	b, err := ck.Tensor(tiedTo)
	if err != nil {
		return err
	}
	if !sameValues(a, b) {
		return fmt.Errorf("model: tie_word_embeddings is true, but the checkpoint's %s is not a copy of %s: transformers unties such a checkpoint and computes the logits with %s; set tie_word_embeddings to false", name, tiedTo, name)
	}
	return nil
}

// sameValues reports whether a and b have the same dtype, shape and element bits.
func sameValues(a, b *tensor.Tensor) bool {
	bits := func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
	return a.DType == b.DType && tensor.SameShape(a.Shape, b.Shape) &&
		slices.Equal(a.F16, b.F16) && slices.EqualFunc(a.F32, b.F32, bits) && slices.Equal(a.I32, b.I32)
}

// toF16 converts a checkpoint tensor to the fp16 the kernels take. BF16 and F32 values are
// rounded (the reference upcasts them exactly: a documented difference for real checkpoints);
// a value beyond fp16's range is an error rather than an infinity.
func toF16(t *tensor.Tensor, name string) (*tensor.Tensor, error) {
	switch t.DType {
	case tensor.F16:
		return t, nil
	case tensor.F32:
		o := tensor.New(tensor.F16, t.Shape...)
		for k, v := range t.F32 {
			o.F16[k] = float16.Fromfloat32(v)
			if o.F16[k].IsInf(0) {
				return nil, fmt.Errorf("model: tensor %s element %d = %g overflows fp16", name, k, v)
			}
		}
		return o, nil
	}
	return nil, fmt.Errorf("model: tensor %s has dtype %s, want a float type", name, t.DType)
}

func transpose(t *tensor.Tensor) *tensor.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	o := tensor.New(tensor.F16, c, r)
	for a := 0; a < r; a++ {
		for b := 0; b < c; b++ {
			o.F16[b*r+a] = t.F16[a*c+b]
		}
	}
	return o
}

// splitRows cuts t's first dimension into consecutive blocks of the given sizes.
func splitRows(t *tensor.Tensor, rows []int) []*tensor.Tensor {
	row := t.Len() / t.Shape[0]
	var out []*tensor.Tensor
	off := 0
	for _, n := range rows {
		shape := append([]int{n}, t.Shape[1:]...)
		out = append(out, tensor.FromF16(shape, append([]float16.Float16(nil), t.F16[off*row:(off+n)*row]...)))
		off += n
	}
	return out
}
