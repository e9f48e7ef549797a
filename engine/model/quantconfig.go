package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// QuantFormat is the weight format of a quantized checkpoint's linear layers.
type QuantFormat int

const (
	// QuantNone: every weight is a 16- or 32-bit float.
	QuantNone QuantFormat = iota
	// QuantFP8Block is transformers' fine-grained FP8 (quant_method "fp8", weight_block_size
	// [128, 128], dynamic activations): an f8e4m3 weight with an f32 weight_scale_inv per
	// 128x128 block, activations quantised per token in groups of 128 at run time.
	QuantFP8Block
	// QuantFP8Channel is compressed-tensors' FP8-dynamic scheme (format "float-quantized"): an
	// f8e4m3 weight with a weight_scale per output channel, activations quantised per token.
	QuantFP8Channel
	// QuantAWQ is AutoAWQ's GEMM packing (quant_method "awq", version "gemm"), 4 bits, zero
	// points, groups of GroupSize inputs.
	QuantAWQ
	// QuantGPTQ is the GPTQ packing (quant_method "gptq", checkpoint_format "gptq"), 4 bits,
	// with g_idx (act-order when desc_act).
	QuantGPTQ
)

// String names the format as docs/quantization.md does.
func (f QuantFormat) String() string {
	switch f {
	case QuantFP8Block:
		return "fp8-block"
	case QuantFP8Channel:
		return "fp8-channel"
	case QuantAWQ:
		return "awq"
	case QuantGPTQ:
		return "gptq"
	}
	return "none"
}

// Quant is a checkpoint's quantization_config as the engine runs it.
type Quant struct {
	Format QuantFormat
	// GroupSize is the 4-bit formats' group of inputs (GPTQ's -1, one group per column, is
	// resolved per layer to its K); the FP8 formats' activation group: 128 (block) or 0 (per
	// token, the layer's K).
	GroupSize int
	// Skip names the modules the config keeps unquantized (modules_to_not_convert, ignore),
	// as the config writes them. A linear is run quantized exactly when the checkpoint stores
	// it in the format's tensors; the list is reported, not trusted (weights.go).
	Skip []string
}

// parseQuant reads a config.json's quantization_config. A null or absent one is no
// quantization. A format, or a variant of one, that the engine does not run is refused by
// name: quant_method and the keys that tell its variants apart, so a user sees at once what
// was refused and why.
func parseQuant(raw json.RawMessage) (*Quant, error) {
	if isNull(raw) {
		return nil, nil
	}
	var q map[string]any
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("config: quantization_config: %w", err)
	}
	method, _ := q["quant_method"].(string)
	var why string
	var out *Quant
	switch method {
	case "fp8":
		out, why = parseFP8(q)
	case "compressed-tensors":
		out, why = parseCompressedTensors(q)
	case "awq":
		out, why = parseAWQ(q)
	case "gptq":
		out, why = parseGPTQ(q)
	default:
		why = "formats implemented: fp8 (weight_block_size [128, 128], dynamic), compressed-tensors (FP8-dynamic), awq (4-bit GEMM), gptq (4-bit)"
	}
	if out != nil {
		return out, nil
	}
	return nil, fmt.Errorf("config: quantization_config with %s is not implemented: %s (docs/quantization.md)", describeQuant(method, q), why)
}

// describeQuant names a quantization_config by quant_method and the keys that tell its
// variants apart, as transformers' quantizers read them.
func describeQuant(method string, q map[string]any) string {
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
	switch method {
	case "fp8":
		add("activation_scheme")
		add("weight_block_size")
		add("scale_fmt")
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
		add("checkpoint_format")
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
	return what
}

// number reads a JSON number key as an int: ok false when absent, not a number or not whole.
func number(q map[string]any, key string) (int, bool) {
	v, ok := q[key].(float64)
	if !ok || v != float64(int(v)) {
		return 0, false
	}
	return int(v), true
}

// stringList reads a list of strings (modules_to_not_convert, ignore); other entries are dropped.
func stringList(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func parseFP8(q map[string]any) (*Quant, string) {
	if s, _ := q["activation_scheme"].(string); s != "" && s != "dynamic" {
		return nil, fmt.Sprintf("activation_scheme %q: only dynamic activation scales are implemented", s)
	}
	if s, ok := q["scale_fmt"].(string); ok && s != "float" {
		return nil, fmt.Sprintf("scale_fmt %q: only float32 weight_scale_inv is implemented", s)
	}
	b, _ := q["weight_block_size"].([]any)
	if len(b) != 2 || b[0] != float64(128) || b[1] != float64(128) {
		return nil, "only weight_block_size [128, 128] is implemented (per-tensor FP8 is not)"
	}
	return &Quant{Format: QuantFP8Block, GroupSize: 128, Skip: stringList(q["modules_to_not_convert"])}, ""
}

// parseCompressedTensors accepts the FP8-dynamic scheme exactly: one config group whose
// weights are 8-bit floats, symmetric, static, one scale per output channel, and whose input
// activations are 8-bit floats quantised dynamically per token.
func parseCompressedTensors(q map[string]any) (*Quant, string) {
	if f, _ := q["format"].(string); f != "float-quantized" {
		return nil, fmt.Sprintf("format %q: only float-quantized (FP8-dynamic) is implemented", f)
	}
	if s, _ := q["quantization_status"].(string); s != "compressed" && s != "frozen" {
		return nil, fmt.Sprintf("quantization_status %q: want compressed or frozen", s)
	}
	groups, _ := q["config_groups"].(map[string]any)
	if len(groups) != 1 {
		return nil, fmt.Sprintf("%d config_groups: one FP8-dynamic group is implemented", len(groups))
	}
	for name, g := range groups {
		grp, _ := g.(map[string]any)
		w, _ := grp["weights"].(map[string]any)
		a, _ := grp["input_activations"].(map[string]any)
		targets := stringList(grp["targets"])
		switch {
		case !isScheme(w, "float", "channel", false):
			return nil, fmt.Sprintf("config_groups.%s.weights %s: want 8-bit float, symmetric, static, strategy channel", name, compact(grp["weights"]))
		case !isScheme(a, "float", "token", true):
			return nil, fmt.Sprintf("config_groups.%s.input_activations %s: want 8-bit float, symmetric, dynamic, strategy token", name, compact(grp["input_activations"]))
		case grp["output_activations"] != nil:
			return nil, fmt.Sprintf("config_groups.%s.output_activations: quantized outputs are not implemented", name)
		case !slices.Equal(targets, []string{"Linear"}):
			return nil, fmt.Sprintf("config_groups.%s.targets %q: want [\"Linear\"]", name, targets)
		}
	}
	return &Quant{Format: QuantFP8Channel, Skip: stringList(q["ignore"])}, ""
}

// isScheme reports whether a compressed-tensors quantization args object is 8-bit of type
// typ, symmetric, with the strategy and dynamic flag given.
func isScheme(s map[string]any, typ, strategy string, dynamic bool) bool {
	if s == nil {
		return false
	}
	bits, _ := number(s, "num_bits")
	sym, _ := s["symmetric"].(bool)
	dyn, _ := s["dynamic"].(bool)
	return bits == 8 && s["type"] == typ && s["strategy"] == strategy && sym && dyn == dynamic
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

func parseAWQ(q map[string]any) (*Quant, string) {
	if bits, _ := number(q, "bits"); bits != 4 {
		return nil, "only 4-bit AWQ is implemented"
	}
	if v, _ := q["version"].(string); !strings.EqualFold(v, "gemm") {
		return nil, fmt.Sprintf("version %q: only the GEMM packing is implemented (gemv, exllama and marlin repack it)", v)
	}
	if z, ok := q["zero_point"].(bool); ok && !z {
		return nil, "zero_point false: AWQ without zero points is not implemented"
	}
	g, ok := number(q, "group_size")
	if !ok || g <= 0 {
		return nil, "group_size must be a positive integer"
	}
	return &Quant{Format: QuantAWQ, GroupSize: g, Skip: stringList(q["modules_to_not_convert"])}, ""
}

func parseGPTQ(q map[string]any) (*Quant, string) {
	if bits, _ := number(q, "bits"); bits != 4 {
		return nil, "only 4-bit GPTQ is implemented"
	}
	if f, ok := q["checkpoint_format"].(string); ok && f != "gptq" {
		return nil, fmt.Sprintf("checkpoint_format %q: only the gptq packing (zero points stored minus one) is implemented", f)
	}
	g, ok := number(q, "group_size")
	if !ok || (g <= 0 && g != -1) {
		return nil, "group_size must be a positive integer or -1"
	}
	return &Quant{Format: QuantGPTQ, GroupSize: g, Skip: stringList(q["modules_to_not_convert"])}, ""
}
