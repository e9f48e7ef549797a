package model

import (
	"fmt"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/x448/float16"
)

// CompareTapsIsolated is CompareTaps as an isolated replay: the same passes and ops, but every
// tap the set stores is written over the engine's own value as soon as it has been copied out,
// so the op after it reads the reference's input. Each tap then measures the error of the one
// op that produced it from the reference's inputs, with no drift carried from the layers and
// ops before: a bug in layer 20 shows at layer 20, and the first tap out of tolerance names
// the op that introduced the error (TapOp). The KV cache is filled from the reference's keys
// and values too (the k_rope and v taps are written over before set_rows stores them). Rows
// are judged by the same limits as CompareTaps, which allow an accumulated error: an isolated
// tap uses less of its budget than the same tap in a plain run.
func CompareTapsIsolated(m *Model, set *golden.Set, p *SetParams, tols *compare.Tolerances) ([]compare.TapResult, error) {
	return compareTaps(m, set, p, tols, true)
}

// TapOp names the op that computes a tap (a canonical golden name) in this model's forward
// (model.go): the ABI op, and what it is for when one op serves several taps. decode selects
// a decode step's ops, which with m.Fused are the fused ones (prenorm.go).
func (m *Model) TapOp(name string) string {
	c := &m.Cfg
	pass, layer, kind, _ := compare.TapPlace(name)
	decode := strings.HasPrefix(pass, "decode.")
	fused := decode && m.Fused
	// As the forward decides (Norm.Forward, normGemm): a norm with a bias is a LayerNorm; either
	// fuses with the q/k/v projection after it in a fused decode.
	rms := len(m.Layers) == 0 || m.Layers[0].AttnNorm.B == nil
	// Gemma's fp32 norm weights have no fused norm-and-projection op (normGemm)
	normFused := fused && !c.NormPlusOne
	if q := m.tapLinear(layer, kind); q != nil {
		return q.opName(kind, fused)
	}
	norm := "layernorm"
	if rms {
		norm = "rmsnorm"
	}
	switch kind {
	case "embed":
		if c.Family == "gpt2" {
			return "embedding, then pos_embedding"
		}
		return "embedding"
	case "attn_norm":
		if layer == 0 {
			return norm + " (the embedding's attn_norm)"
		}
		return norm + "_residual (the previous layer's ffn_out added, then attn_norm)"
	case "attn_post_norm", "ffn_post_norm":
		return "rmsnorm (the " + strings.TrimSuffix(kind, "_post_norm") + " block's output, before its residual add)"
	case "resid_attn", "ffn_norm":
		if c.PostNorms {
			return norm + "_residual (attn_post_norm added to the stream, then ffn_norm)"
		}
		return norm + "_residual (attn_out added to the stream, then ffn_norm)"
	case "resid_ffn", "final_norm":
		if c.PostNorms {
			return norm + "_residual (ffn_post_norm added to the stream, then the next norm)"
		}
		return norm + "_residual (ffn_out added to the stream, then the next norm)"
	case "q", "k", "v":
		if normFused {
			return norm + "_gemm (attn_norm and the fused q/k/v projection)"
		}
		return "gemm (the " + kind + " projection)"
	case "q_norm", "k_norm":
		return "rmsnorm (each head of " + strings.TrimSuffix(kind, "_norm") + " over head_dim)"
	case "q_rope", "k_rope":
		return "rope"
	case "attn":
		if decode {
			return "attention_decode"
		}
		return "attention_prefill"
	case "attn_out":
		return "gemm (the output projection)"
	case "ffn_gate", "ffn_up":
		// a shared expert's projections read the norm the router read (forwardMoE): no fused norm
		if normFused && c.Activation == "silu" && c.SharedIntermediate == 0 {
			return "rmsnorm_gemm (ffn_norm and the fused gate/up projection)"
		}
		return "gemm (the " + strings.TrimPrefix(kind, "ffn_") + " projection)"
	case "ffn_act":
		switch c.Activation {
		case "silu":
			return "swiglu"
		case "gelu_pytorch_tanh":
			return "geglu (tanh)"
		}
		return "gelu_tanh"
	case "router_logits":
		return "gemm (the router)"
	case "moe_out":
		return "moe_router, then moe_ffn (the chosen experts and their weighted sum)"
	case "ffn_out", "shared_out":
		switch {
		case kind == "ffn_out" && c.SharedIntermediate > 0:
			return "moe_shared_add (moe_out plus the shared expert's shared_out scaled by its sigmoid gate)"
		case kind == "ffn_out" && c.Experts > 0:
			return "moe_router, then moe_ffn (the chosen experts and their weighted sum)"
		case fused && c.Activation == "silu":
			return "swiglu_gemm (the activation and the down projection)"
		case fused && c.Activation == "gelu_new":
			return "gpt_ffn (up projection, gelu_tanh and down projection)"
		}
		return "gemm (the down projection)"
	case "logits":
		if c.FinalSoftcap > 0 {
			return "gemm (the LM head, fp32 out), then logit_softcap"
		}
		return "gemm (the LM head, fp32 out)"
	default:
		return "(no op known for tap kind " + kind + ")"
	}
}

// castTo converts a reference tap (fp32) to the dtype of the engine buffer it is written into.
func castTo(dt tensor.DType, t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.DType == dt {
		return t, nil
	}
	switch dt {
	case tensor.F32:
		return tensor.FromF32(t.Shape, t.Float32()), nil
	case tensor.F16:
		src := t.Float32()
		h := make([]float16.Float16, len(src))
		for i, v := range src {
			h[i] = float16.Fromfloat32(v)
		}
		return tensor.FromF16(t.Shape, h), nil
	case tensor.BF16:
		o := tensor.New(tensor.BF16, t.Shape...)
		for i, v := range t.Float32() {
			o.BF16[i] = tensor.BF16FromFloat32(v)
		}
		return o, nil
	}
	return nil, fmt.Errorf("cannot write a %s reference into a %s buffer", t.DType, dt)
}
