package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

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
func hd(c *Config) []int   { return []int{c.HeadDim} }
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
	// Linear marks a transformer block's projection: a quantized checkpoint may store it in its
	// format (qlinear.go) instead of as a 16-bit weight.
	Linear bool
	// TiedTo is the tensor this one is when the config ties the LM head (the embedding). Some
	// tied exports still store lm_head.weight: it is never uploaded (a buffer nothing would
	// use or free), only checked to be the embedding's copy, since transformers unties a
	// checkpoint whose two tensors differ and would compute with lm_head.weight.
	TiedTo string
	// PlusOne marks a Gemma norm weight w, which the norm uses as 1 + w: it is loaded as that
	// sum in fp32 (w rounded to the storage dtype first, as the model holds it; the sum exact
	// but for w below 2^-24), which rmsnorm takes as an fp32 weight. transformers computes
	// 1.0 + w.float() at every call: the same value.
	PlusOne bool
}

// weightTables maps a family to its checkpoint layout. Llama's is Qwen2's without the q/k/v
// biases, Qwen3's Llama's with the per-head q and k norms after v_proj (weightTables' init below).
var weightTables = map[string][]weight{
	"qwen2": {
		{HF: "model.embed_tokens.weight", Shape: vh, Into: "embed"},
		{HF: "model.layers.{i}.input_layernorm.weight", Shape: h, Into: "layers.{i}.attn_norm"},
		{HF: "model.layers.{i}.self_attn.q_proj.weight", Shape: qh, Into: "layers.{i}.wq", Linear: true},
		{HF: "model.layers.{i}.self_attn.q_proj.bias", Shape: q, Into: "layers.{i}.bq"},
		{HF: "model.layers.{i}.self_attn.k_proj.weight", Shape: kvh, Into: "layers.{i}.wk", Linear: true},
		{HF: "model.layers.{i}.self_attn.k_proj.bias", Shape: kv, Into: "layers.{i}.bk"},
		{HF: "model.layers.{i}.self_attn.v_proj.weight", Shape: kvh, Into: "layers.{i}.wv", Linear: true},
		{HF: "model.layers.{i}.self_attn.v_proj.bias", Shape: kv, Into: "layers.{i}.bv"},
		{HF: "model.layers.{i}.self_attn.o_proj.weight", Shape: hq, Into: "layers.{i}.wo", Linear: true},
		{HF: "model.layers.{i}.post_attention_layernorm.weight", Shape: h, Into: "layers.{i}.ffn_norm"},
		{HF: "model.layers.{i}.mlp.gate_proj.weight", Shape: ih, Into: "layers.{i}.wgate", Linear: true},
		{HF: "model.layers.{i}.mlp.up_proj.weight", Shape: ih, Into: "layers.{i}.wup", Linear: true},
		{HF: "model.layers.{i}.mlp.down_proj.weight", Shape: hi, Into: "layers.{i}.wdown", Linear: true},
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

// The sparse MoE block of Mixtral, as its published checkpoints store it: the router, then each
// expert's w1 (gate), w3 (up) and w2 (down) ("{e}" is the expert). Load stacks each layer's
// experts into the [E, 2F, H] and [E, H, F] buffers moe_ffn takes (moeExperts).
var mixtralMoE = []weight{
	{HF: "model.layers.{i}.block_sparse_moe.gate.weight", Shape: eh, Into: "layers.{i}.router"},
	{HF: "model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight", Shape: ih, Into: "layers.{i}.experts.{e}.gate"},
	{HF: "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight", Shape: ih, Into: "layers.{i}.experts.{e}.up"},
	{HF: "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight", Shape: hi, Into: "layers.{i}.experts.{e}.down"},
}

// Qwen3-MoE's sparse block as its published checkpoints store it: the router mlp.gate, then
// each expert's gate_proj, up_proj and down_proj (of width moe_intermediate_size).
var qwen3MoE = []weight{
	{HF: "model.layers.{i}.mlp.gate.weight", Shape: eh, Into: "layers.{i}.router"},
	{HF: "model.layers.{i}.mlp.experts.{e}.gate_proj.weight", Shape: ih, Into: "layers.{i}.experts.{e}.gate"},
	{HF: "model.layers.{i}.mlp.experts.{e}.up_proj.weight", Shape: ih, Into: "layers.{i}.experts.{e}.up"},
	{HF: "model.layers.{i}.mlp.experts.{e}.down_proj.weight", Shape: hi, Into: "layers.{i}.experts.{e}.down"},
}

func eh(c *Config) []int { return []int{c.Experts, c.Hidden} }

// Qwen2-MoE's shared expert (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): a dense SwiGLU MLP of width
// shared_expert_intermediate_size loaded as a dense layer's (its gate and up fuse as those do),
// and its gate, a Linear [1, H] whose sigmoid scales the expert's output per token.
var qwen2MoEShared = []weight{
	{HF: "model.layers.{i}.mlp.shared_expert.gate_proj.weight", Shape: sh, Into: "layers.{i}.wgate"},
	{HF: "model.layers.{i}.mlp.shared_expert.up_proj.weight", Shape: sh, Into: "layers.{i}.wup"},
	{HF: "model.layers.{i}.mlp.shared_expert.down_proj.weight", Shape: hs, Into: "layers.{i}.wdown"},
	{HF: "model.layers.{i}.mlp.shared_expert_gate.weight", Shape: oneH, Into: "layers.{i}.shared_gate"},
}

func sh(c *Config) []int   { return []int{c.SharedIntermediate, c.Hidden} }
func hs(c *Config) []int   { return []int{c.Hidden, c.SharedIntermediate} }
func oneH(c *Config) []int { return []int{1, c.Hidden} }

// gemma3 is Gemma 3's layout (Gemma3ForCausalLM): Llama's projections, q_norm and k_norm, the
// four norms of a layer (post_attention_layernorm is the norm after attention here, not before
// the MLP: that is pre_feedforward_layernorm), every norm weight w used as 1 + w.
var gemma3 = []weight{
	{HF: "model.embed_tokens.weight", Shape: vh, Into: "embed"},
	{HF: "model.layers.{i}.input_layernorm.weight", Shape: h, Into: "layers.{i}.attn_norm", PlusOne: true},
	{HF: "model.layers.{i}.self_attn.q_proj.weight", Shape: qh, Into: "layers.{i}.wq"},
	{HF: "model.layers.{i}.self_attn.k_proj.weight", Shape: kvh, Into: "layers.{i}.wk"},
	{HF: "model.layers.{i}.self_attn.v_proj.weight", Shape: kvh, Into: "layers.{i}.wv"},
	{HF: "model.layers.{i}.self_attn.q_norm.weight", Shape: hd, Into: "layers.{i}.q_norm", PlusOne: true},
	{HF: "model.layers.{i}.self_attn.k_norm.weight", Shape: hd, Into: "layers.{i}.k_norm", PlusOne: true},
	{HF: "model.layers.{i}.self_attn.o_proj.weight", Shape: hq, Into: "layers.{i}.wo"},
	{HF: "model.layers.{i}.post_attention_layernorm.weight", Shape: h, Into: "layers.{i}.attn_post_norm", PlusOne: true},
	{HF: "model.layers.{i}.pre_feedforward_layernorm.weight", Shape: h, Into: "layers.{i}.ffn_norm", PlusOne: true},
	{HF: "model.layers.{i}.mlp.gate_proj.weight", Shape: ih, Into: "layers.{i}.wgate"},
	{HF: "model.layers.{i}.mlp.up_proj.weight", Shape: ih, Into: "layers.{i}.wup"},
	{HF: "model.layers.{i}.mlp.down_proj.weight", Shape: hi, Into: "layers.{i}.wdown"},
	{HF: "model.layers.{i}.post_feedforward_layernorm.weight", Shape: h, Into: "layers.{i}.ffn_post_norm", PlusOne: true},
	{HF: "model.norm.weight", Shape: h, Into: "final_norm", PlusOne: true},
	{HF: "lm_head.weight", Shape: vh, Into: "head", Optional: true, TiedTo: "model.embed_tokens.weight"},
}

func init() {
	weightTables["gemma3"] = gemma3
	// Gemma 2 (Gemma2ForCausalLM): Gemma 3's layer without q_norm and k_norm.
	for _, w := range gemma3 {
		if !strings.Contains(w.HF, "_norm.weight") || strings.Contains(w.HF, "layernorm") {
			weightTables["gemma2"] = append(weightTables["gemma2"], w)
		}
	}
	for _, w := range weightTables["qwen2"] {
		if !strings.HasSuffix(w.HF, ".bias") && !strings.Contains(w.HF, ".mlp.") {
			weightTables["mixtral"] = append(weightTables["mixtral"], w)
		}
		if w.HF == "model.layers.{i}.post_attention_layernorm.weight" {
			weightTables["mixtral"] = append(weightTables["mixtral"], mixtralMoE...)
		}
	}
	for _, w := range weightTables["qwen2"] {
		if !strings.HasSuffix(w.HF, ".bias") {
			weightTables["llama"] = append(weightTables["llama"], w)
			weightTables["qwen3"] = append(weightTables["qwen3"], w)
		}
		if w.HF == "model.layers.{i}.self_attn.v_proj.weight" {
			weightTables["qwen3"] = append(weightTables["qwen3"],
				weight{HF: "model.layers.{i}.self_attn.q_norm.weight", Shape: hd, Into: "layers.{i}.q_norm"},
				weight{HF: "model.layers.{i}.self_attn.k_norm.weight", Shape: hd, Into: "layers.{i}.k_norm"})
		}
	}
	// Qwen2-MoE: Qwen2's attention (q, k and v biases), every MLP the sparse block (the router
	// and experts named as Qwen3-MoE's) with the gated shared expert.
	for _, w := range weightTables["qwen2"] {
		if !strings.Contains(w.HF, ".mlp.") {
			weightTables["qwen2_moe"] = append(weightTables["qwen2_moe"], w)
		}
		if w.HF == "model.layers.{i}.post_attention_layernorm.weight" {
			weightTables["qwen2_moe"] = append(weightTables["qwen2_moe"], qwen3MoE...)
			weightTables["qwen2_moe"] = append(weightTables["qwen2_moe"], qwen2MoEShared...)
		}
	}
	// Qwen3-MoE: Qwen3's attention (with q_norm and k_norm), every MLP the sparse block.
	for _, w := range weightTables["qwen3"] {
		if !strings.Contains(w.HF, ".mlp.") {
			weightTables["qwen3_moe"] = append(weightTables["qwen3_moe"], w)
		}
		if w.HF == "model.layers.{i}.post_attention_layernorm.weight" {
			weightTables["qwen3_moe"] = append(weightTables["qwen3_moe"], qwen3MoE...)
		}
	}
}

// loadWeights reads every tensor of the family's table from ck, checks its shape, converts
// it to fp16, transposes or splits it as the table says and uploads it. The result maps
// engine weight names (layers.0.wq, embed, ...) to buffers.
//
// Reading, converting and transposing run on GOMAXPROCS goroutines (at most maxLoadWorkers),
// a few tensors ahead of the uploads: a multi-gigabyte checkpoint loaded one tensor at a time
// spent most of its time in host-side work that parallelises perfectly. The uploads stay on
// the calling goroutine, in table order: a Backend is not safe for concurrent use (the CUDA
// one keeps per-call error state), and in order the first error in table order is the one
// reported, as before.
func loadWeights(be backend.Backend, c *Config, ck *safetensors.Checkpoint) (map[string]backend.Buffer, error) {
	return loadWeightsWith(be, c, ck, min(runtime.GOMAXPROCS(0), maxLoadWorkers))
}

// maxLoadWorkers caps the workers: the serial uploads are the bottleneck long before 16 cores
// of reading and converting are, and every worker adds two tensors of host memory ahead (on
// a 128-core host, uncapped, that would be most of a 7B checkpoint).
const maxLoadWorkers = 16

// loadJob is one entry of a family's table for one layer: a tensor to read and upload (split
// into several engine weights when names has several), the check that a tied checkpoint's
// stored head copies the embedding (tiedTo set), or an error planning found (err set).
type loadJob struct {
	hfName    string       // the name in the checkpoint
	name      string       // the table's name (the one errors use; hfName may lack the gpt2 prefix)
	dtype     string       // safetensors dtype of hfName
	target    tensor.DType // the storage dtype it is converted to (Config.StorageDType)
	shape     []int
	transpose bool
	plusOne   bool     // weight.PlusOne
	names     []string // engine weights, in row order
	rows      []int    // their row counts when split, else nil
	tiedTo    string
	err       error
}

// loaded is what a worker hands the uploader for one job.
type loaded struct {
	parts    []*tensor.Tensor // one per job.names
	err      error
	panicked any // prepare's panic, re-raised by the uploader as the sequential loader would have
}

// planLoad lists the jobs of c's table in table order, with the name, presence and shape
// checks done (they read only the headers). It stops at the first failing one: the first
// error in table order is the one reported, so nothing after it needs reading.
func planLoad(c *Config, ck *safetensors.Checkpoint, table []weight) []loadJob {
	var jobs []loadJob
	for _, w := range table {
		if c.TiedHead && w.TiedTo != "" {
			jobs = append(jobs, loadJob{hfName: w.HF, name: w.HF, tiedTo: w.TiedTo})
			continue
		}
		n, experts := 1, 1
		if strings.Contains(w.HF, "{i}") {
			n = c.Layers
		}
		if strings.Contains(w.HF, "{e}") {
			experts = c.Experts
		}
		for at := 0; at < n*experts; at++ {
			layer, expert := at/experts, at%experts
			sub := func(s string) string {
				return strings.ReplaceAll(strings.ReplaceAll(s, "{i}", strconv.Itoa(layer)), "{e}", strconv.Itoa(expert))
			}
			name := sub(w.HF)
			hfName := name
			if _, ok := ck.Info(hfName); !ok && c.Family == "gpt2" {
				hfName = strings.TrimPrefix(name, "transformer.") // hub GPT-2 files carry no prefix
			}
			if w.Linear && storedQuantized(c, ck, name) {
				continue // loadQuantLinears reads it
			}
			info, ok := ck.Info(hfName)
			if !ok {
				if w.Optional {
					continue
				}
				return append(jobs, loadJob{err: fmt.Errorf("model: checkpoint has no tensor %s (want shape %s)", name, tensor.ShapeString(w.Shape(c)))})
			}
			if want := w.Shape(c); !tensor.SameShape(info.Shape, want) {
				return append(jobs, loadJob{err: fmt.Errorf("model: tensor %s has shape %s, the config wants %s", name, tensor.ShapeString(info.Shape), tensor.ShapeString(want))})
			}
			j := loadJob{hfName: hfName, name: name, dtype: info.DType, target: c.StorageDType(), shape: info.Shape, transpose: w.Transpose, plusOne: w.PlusOne, names: []string{sub(w.Into)}}
			if w.Split != nil {
				j.names, j.rows = nil, w.SplitRows(c)
				for _, s := range w.Split {
					j.names = append(j.names, sub(s))
				}
			}
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// prepare does a job's host work: read, convert to the storage dtype, transpose, split. It only reads ck,
// so workers run it concurrently.
func prepare(ck *safetensors.Checkpoint, j *loadJob) ([]*tensor.Tensor, error) {
	if j.err != nil {
		return nil, j.err
	}
	if j.tiedTo != "" {
		return nil, checkTiedCopy(ck, j.hfName, j.tiedTo)
	}
	read := readF16
	if j.target == tensor.BF16 {
		read = readBF16
	}
	t, err := read(ck, j)
	if err != nil {
		return nil, err
	}
	if j.transpose {
		t = transpose(t)
	}
	if j.plusOne {
		v := t.Float32()
		for k := range v {
			v[k]++
		}
		t = tensor.FromF32(t.Shape, v)
	}
	if j.rows == nil {
		return []*tensor.Tensor{t}, nil
	}
	return splitRows(t, j.rows), nil
}

// readF16 reads a job's tensor as fp16. BF16 is rounded in place in the slice its bits were
// read into (toF16's rounding), skipping the float32 tensor Checkpoint.Tensor would
// widen it to: BF16 is what most checkpoints on the hub store.
func readF16(ck *safetensors.Checkpoint, j *loadJob) (*tensor.Tensor, error) {
	if j.dtype != "BF16" {
		t, err := ck.Tensor(j.hfName)
		if err != nil {
			return nil, err
		}
		return toF16(t, j.name)
	}
	bits, _, err := ck.Uint16s(j.hfName)
	if err != nil {
		return nil, err
	}
	if k := roundBF16(bits); k >= 0 {
		// toF16's overflow error, for the same element and value (bits[:k] are fp16 by now;
		// bits[k] is still the BF16 read).
		return nil, fmt.Errorf("model: tensor %s element %d = %g overflows fp16", j.name, k, math.Float32frombits(uint32(bits[k])<<16))
	}
	// float16.Float16 is a uint16: the converted bits are the tensor's storage as they are.
	f16 := unsafe.Slice((*float16.Float16)(unsafe.Pointer(unsafe.SliceData(bits))), len(bits))
	return tensor.FromF16(j.shape, f16), nil
}

// readBF16 reads a job's tensor as bf16: a BF16 tensor's bits as they are stored (what the
// reference upcasts exactly), F16 and F32 values rounded to the nearest bf16 (bf16 has fp32's
// range, so nothing overflows; fp16's 10 mantissa bits lose 3).
func readBF16(ck *safetensors.Checkpoint, j *loadJob) (*tensor.Tensor, error) {
	if j.dtype == "BF16" {
		bits, _, err := ck.Uint16s(j.hfName)
		if err != nil {
			return nil, err
		}
		bf := unsafe.Slice((*tensor.BFloat16)(unsafe.Pointer(unsafe.SliceData(bits))), len(bits))
		return tensor.FromBF16(j.shape, bf), nil
	}
	t, err := ck.Tensor(j.hfName)
	if err != nil {
		return nil, err
	}
	switch t.DType {
	case tensor.F16, tensor.F32:
		v := t.Float32()
		o := tensor.New(tensor.BF16, t.Shape...)
		for k, x := range v {
			o.BF16[k] = tensor.BF16FromFloat32(x)
		}
		return o, nil
	}
	return nil, fmt.Errorf("model: tensor %s has dtype %s, want a float type", j.name, t.DType)
}

// loadWeightsWith is loadWeights with the number of workers given (tests vary it).
func loadWeightsWith(be backend.Backend, c *Config, ck *safetensors.Checkpoint, workers int) (map[string]backend.Buffer, error) {
	table, ok := weightTables[c.Family]
	if !ok {
		return nil, fmt.Errorf("model: no weight table for family %q", c.Family)
	}
	jobs := planLoad(c, ck, table)
	workers = max(1, min(workers, len(jobs)))

	// Each job's result has its own channel, buffered so that a worker never waits for the
	// uploader. window bounds host memory: a job is handed out only while fewer than
	// 2×workers jobs are being prepared or wait prepared, not yet uploaded. done, closed when
	// loadWeightsWith returns, stops the handing out and makes workers skip what they still
	// get; the deferred Wait means no goroutine touches ck (which the caller closes) or runs
	// on after the return.
	results := make([]chan loaded, len(jobs))
	for k := range results {
		results[k] = make(chan loaded, 1)
	}
	window := make(chan struct{}, 2*workers)
	next := make(chan int)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		defer close(next)
		for k := range jobs {
			select {
			case window <- struct{}{}:
			case <-done:
				return
			}
			select {
			case next <- k:
			case <-done:
				return
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for k := range next {
				select {
				case <-done:
					results[k] <- loaded{err: errLoadCanceled} // nobody reads it
					continue
				default:
				}
				results[k] <- prepareRecovering(ck, &jobs[k])
			}
		})
	}

	out := map[string]backend.Buffer{}
	fail := func(err error) (map[string]backend.Buffer, error) {
		for _, b := range out {
			b.Free()
		}
		return nil, err
	}
	for k := range jobs {
		r := <-results[k]
		if r.panicked != nil {
			fail(nil)
			panic(r.panicked)
		}
		if r.err != nil {
			return fail(r.err)
		}
		for i, p := range r.parts {
			b, err := be.Upload(p)
			if err != nil {
				return fail(fmt.Errorf("model: upload %s: %w", jobs[k].names[i], err))
			}
			out[jobs[k].names[i]] = b
		}
		<-window
	}
	return out, nil
}

// prepareRecovering is prepare for a worker: a panic (a bug: inputs are validated) goes to
// the uploader, which re-raises it on the caller's goroutine, rather than killing the process
// from one no caller can recover on.
func prepareRecovering(ck *safetensors.Checkpoint, j *loadJob) (r loaded) {
	defer func() {
		if p := recover(); p != nil {
			r = loaded{panicked: p}
		}
	}()
	parts, err := prepare(ck, j)
	return loaded{parts: parts, err: err}
}

// errLoadCanceled marks the jobs workers skip once the load has failed; never reported.
var errLoadCanceled = errors.New("model: weight load canceled")

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
		slices.Equal(a.F16, b.F16) && slices.Equal(a.BF16, b.BF16) && slices.EqualFunc(a.F32, b.F32, bits) && slices.Equal(a.I32, b.I32)
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
		if k := roundF32(o.F16, t.F32); k >= 0 {
			return nil, fmt.Errorf("model: tensor %s element %d = %g overflows fp16", name, k, t.F32[k])
		}
		return o, nil
	}
	return nil, fmt.Errorf("model: tensor %s has dtype %s, want a float type", name, t.DType)
}

// transpose returns t [r, c] as [c, r]. It goes tile by tile: walking whole columns of a
// large matrix touches one cache line per element, and GPT-2 transposes every matrix it
// loads. A tile's rows of src stay in cache while its columns are written out contiguously.
func transpose(t *tensor.Tensor) *tensor.Tensor {
	const tile = 64 // 64×64 fp16: 8 KiB of source and of destination, well inside L1
	r, c := t.Shape[0], t.Shape[1]
	o := tensor.New(t.DType, c, r)
	src, dst := bits16(t), bits16(o)
	for a0 := 0; a0 < r; a0 += tile {
		a1 := min(a0+tile, r)
		for b0 := 0; b0 < c; b0 += tile {
			b1 := min(b0+tile, c)
			for b := b0; b < b1; b++ {
				d := dst[b*r+a0 : b*r+a1]
				for k := range d {
					d[k] = src[(a0+k)*c+b]
				}
			}
		}
	}
	return o
}

// splitRows cuts t's first dimension into consecutive blocks of the given sizes. The blocks
// share t's storage (capacity clipped, so none can grow into the next): they only feed
// Upload, which copies, and a copy here was one more pass over every fused tensor.
func splitRows(t *tensor.Tensor, rows []int) []*tensor.Tensor {
	row := t.Len() / t.Shape[0]
	var out []*tensor.Tensor
	off := 0
	for _, n := range rows {
		shape := append([]int{n}, t.Shape[1:]...)
		lo, hi := off*row, (off+n)*row
		part := &tensor.Tensor{DType: t.DType, Shape: shape}
		if t.DType == tensor.BF16 {
			part.BF16 = t.BF16[lo:hi:hi]
		} else {
			part.F16 = t.F16[lo:hi:hi]
		}
		out = append(out, part)
		off += n
	}
	return out
}

// bits16 is the storage of a 16-bit float tensor (F16 or BF16) as its raw bits, shared, for
// the conversions that move elements without looking at their values.
func bits16(t *tensor.Tensor) []uint16 {
	switch t.DType {
	case tensor.F16:
		return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(t.F16))), len(t.F16))
	case tensor.BF16:
		return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(t.BF16))), len(t.BF16))
	}
	panic("model: bits16 of " + t.DType.String())
}
