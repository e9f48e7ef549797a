// Package compare measures how far a backend's output is from the reference and decides,
// against a reviewed tolerance, whether that distance is a pass.
package compare

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Tolerance is one entry of golden/tolerances.yaml. Every limit is optional; an entry must
// set at least one and say why it has the values it has.
type Tolerance struct {
	// MaxAbs bounds max |got - want|.
	MaxAbs *float64 `yaml:"max_abs,omitempty"`
	// Atol and Rtol define allclose: |got - want| <= Atol + AtolRMS·rms(row) + Rtol·|want|
	// per element.
	Atol *float64 `yaml:"atol,omitempty"`
	Rtol *float64 `yaml:"rtol,omitempty"`
	// AtolRMS is the part of allclose's absolute allowance that follows the scale of the
	// reference: a multiple of the root mean square of the reference's row (its last
	// dimension: a token's hidden vector, a head's output) that holds the element. An op
	// whose error comes from accumulating many terms (a GEMM, attention, an FFN) makes an
	// absolute error proportional to the magnitude of what it sums, which the row's rms
	// measures; a fixed atol would be too loose for small rows and fail correct kernels on
	// rows with outlier channels. Needs atol and rtol.
	AtolRMS *float64 `yaml:"atol_rms,omitempty"`
	// MaxMismatch is the fraction of elements allowed to fail allclose (0: none), or with
	// MaxSteps the fraction of FP8 codes allowed to differ from the reference's at all.
	MaxMismatch float64 `yaml:"max_mismatch,omitempty"`
	// MaxSteps compares FP8 outputs (f8e4m3, f8e5m2) by their codes' positions on the format's
	// number line, not by value: adjacent representable values are one step apart (+0 and -0
	// are one position; a NaN code must meet a NaN code), and no code may lie more than
	// MaxSteps from the reference's. With it MaxMismatch bounds the share of codes that differ
	// at all. For an output that is an exact function (quant_fp8's) of an intermediate a kernel
	// computes in its own order: where that intermediate lands on the other side of a rounding
	// boundary, a code on an FP8 rounding boundary moves by one step, and nowhere else. A bug in
	// the quantisation moves many codes, or a code by more. It takes no other limit.
	MaxSteps *int `yaml:"max_steps,omitempty"`
	// NMSE bounds sum((got-want)²) / sum(want²).
	NMSE *float64 `yaml:"nmse,omitempty"`
	// MinCosine is the least cosine similarity of got and want, flattened.
	MinCosine *float64 `yaml:"min_cosine,omitempty"`
	// MaxKL bounds the mean over rows of KL(softmax(want) || softmax(got)): for logits.
	MaxKL *float64 `yaml:"max_kl,omitempty"`
	// TopK asks, per k, for at least Min mean overlap of the top-k sets of each row.
	TopK []TopKLimit `yaml:"top_k,omitempty"`
	// Why is the one-line rationale of the numbers above.
	Why string `yaml:"why"`
}

// TopKLimit is one top-k agreement requirement: the mean over rows of
// |topk(got) ∩ topk(want)| / k must be at least Min. With TieMargin > 0 an index of
// topk(got) outside topk(want) still counts when its reference value is within TieMargin of
// the reference's k-th largest: where the reference itself ranks two entries closer than the
// accepted numerical error, either order is correct.
type TopKLimit struct {
	K         int     `yaml:"k"`
	Min       float64 `yaml:"min"`
	TieMargin float64 `yaml:"tie_margin,omitempty"`
}

// exact reports whether t asks for equality: max_abs 0 and no other limit.
func (t Tolerance) exact() bool {
	return t.MaxAbs != nil && *t.MaxAbs == 0 && t.Atol == nil && t.Rtol == nil && t.AtolRMS == nil &&
		t.NMSE == nil && t.MinCosine == nil && t.MaxKL == nil && len(t.TopK) == 0
}

func (t Tolerance) validate() error {
	if t.Why == "" {
		return fmt.Errorf("no rationale (why)")
	}
	set := 0
	for name, p := range map[string]*float64{"max_abs": t.MaxAbs, "atol": t.Atol, "rtol": t.Rtol, "atol_rms": t.AtolRMS, "nmse": t.NMSE, "max_kl": t.MaxKL} {
		if p == nil {
			continue
		}
		set++
		if *p < 0 || math.IsNaN(*p) {
			return fmt.Errorf("%s = %v: must be >= 0", name, *p)
		}
	}
	if (t.Atol == nil) != (t.Rtol == nil) {
		return fmt.Errorf("atol and rtol must be set together")
	}
	if t.AtolRMS != nil && t.Atol == nil {
		return fmt.Errorf("atol_rms needs atol and rtol")
	}
	if !(t.MaxMismatch >= 0 && t.MaxMismatch < 1) {
		return fmt.Errorf("max_mismatch = %v: must be in [0, 1)", t.MaxMismatch)
	}
	if t.MaxSteps != nil {
		set++
		switch {
		case *t.MaxSteps < 0:
			return fmt.Errorf("max_steps = %d: must be >= 0", *t.MaxSteps)
		case set > 1 || t.MinCosine != nil || len(t.TopK) > 0:
			return fmt.Errorf("max_steps compares FP8 codes, not values: it takes no other limit but max_mismatch")
		case *t.MaxSteps > 0 && t.MaxMismatch == 0:
			return fmt.Errorf("max_steps = %d needs max_mismatch, the share of codes that may move", *t.MaxSteps)
		}
	}
	if t.MaxMismatch > 0 && t.Atol == nil && t.MaxSteps == nil {
		return fmt.Errorf("max_mismatch needs atol and rtol, or max_steps")
	}
	if t.MinCosine != nil {
		set++
		if !(*t.MinCosine > 0 && *t.MinCosine <= 1) {
			return fmt.Errorf("min_cosine = %v: must be in (0, 1]", *t.MinCosine)
		}
	}
	for _, k := range t.TopK {
		set++
		if k.K < 1 || !(k.Min > 0 && k.Min <= 1) {
			return fmt.Errorf("top_k {k: %d, min: %v}: want k >= 1 and min in (0, 1]", k.K, k.Min)
		}
		if !(k.TieMargin >= 0 && !math.IsInf(k.TieMargin, 1)) {
			return fmt.Errorf("top_k {k: %d}: tie_margin = %v: must be finite and >= 0", k.K, k.TieMargin)
		}
	}
	if set == 0 {
		return fmt.Errorf("no limit set")
	}
	return nil
}

// Tolerances is the parsed golden/tolerances.yaml.
type Tolerances struct {
	Version int `yaml:"version"`
	// Kernels maps op -> output dtype (f16, f32) -> tolerance. A key <dtype>@<storage>
	// (f32@bf16) is that output dtype in a set whose 16-bit inputs are stored in storage (f16
	// or bf16), for an output whose error is a unit of the storage type although it is not
	// stored in it (the fused quantisers' fp32 scales, amax / 448 of a 16-bit amax): KernelFor
	// takes it before the plain <dtype> entry. A key <output>:<dtype> (out:bf16) is that
	// dtype for the output of that golden name alone, for an op whose outputs carry different
	// errors (a fused residual norm's sum and normalised row): KernelForOutput takes it first.
	Kernels map[string]map[string]Tolerance `yaml:"kernels"`
	// Taps maps a model tap kind (attn_norm, q_rope, logits, ...) to its tolerance: the floor
	// of the limits CalibratedTap derives from a set's calibration.
	Taps map[string]Tolerance `yaml:"taps,omitempty"`
	// TapCalibration says how a tap's limits follow its set's calibration.
	TapCalibration *TapCalibration `yaml:"tap_calibration,omitempty"`
	// TapDTypeScale scales the taps: floors of a set stored in another dtype than fp16, whose
	// floors are stated in fp16's unit roundoff (by dtype name: bf16).
	TapDTypeScale map[string]DTypeScale `yaml:"tap_dtype_scale,omitempty"`

	path string
}

// TapCalibration is tolerances.yaml's tap_calibration. A model set records, per tap, the error
// an independent fp16 implementation of the same forward makes against the reference
// (golden.Calibration); a backend may make Factor times that error, in amplitude, before a
// tap fails. The limits of squared quantities (nmse, 1 - cosine, KL) therefore scale with
// Factor², per-element ones (atol_rms, max_abs, top-k tie margins) with Factor, and the static
// taps: entry of the tap is the floor of each. So the limits follow a model's own depth and
// conditioning (fp16 drift of a 28-layer model is not that of a 2-layer one) and stay tight
// where the drift is small.
type TapCalibration struct {
	Factor float64 `yaml:"factor"`
	Why    string  `yaml:"why"`
}

// DTypeScale is one tap_dtype_scale entry: the ratio of the dtype's unit roundoff to fp16's.
// Amplitude limits of a floor (atol, rtol, atol_rms, max_abs, tie margins) scale by Factor,
// squared ones (nmse, 1 - min_cosine, max_kl) by Factor².
type DTypeScale struct {
	Factor float64 `yaml:"factor"`
	Why    string  `yaml:"why"`
}

// TolerancesVersion is the layout version of tolerances.yaml this code reads.
const TolerancesVersion = 1

// LoadTolerances reads and validates a tolerances file.
func LoadTolerances(path string) (*Tolerances, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTolerances(data, path)
}

// ParseTolerances parses a tolerances file; name is used in errors. Unknown keys are
// errors, so a misspelt limit can never be silently ignored.
func ParseTolerances(data []byte, name string) (*Tolerances, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var t Tolerances
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if t.Version != TolerancesVersion {
		return nil, fmt.Errorf("%s: version %d, this build reads version %d", name, t.Version, TolerancesVersion)
	}
	for _, op := range sortedKeys(t.Kernels) {
		for _, dt := range sortedKeys(t.Kernels[op]) {
			if err := checkKernelKey(dt); err != nil {
				return nil, fmt.Errorf("%s: kernels.%s.%s: %w", name, op, dt, err)
			}
			if err := t.Kernels[op][dt].validate(); err != nil {
				return nil, fmt.Errorf("%s: kernels.%s.%s: %w", name, op, dt, err)
			}
		}
	}
	for _, tap := range sortedKeys(t.Taps) {
		if err := t.Taps[tap].validate(); err != nil {
			return nil, fmt.Errorf("%s: taps.%s: %w", name, tap, err)
		}
	}
	// A factor above 16 (nmse limits 256 times the calibrated error) could no longer tell a
	// bug from drift: more likely a typo than a reviewed value.
	if c := t.TapCalibration; c != nil && !(c.Factor >= 1 && c.Factor <= 16 && c.Why != "") {
		return nil, fmt.Errorf("%s: tap_calibration: want a factor in [1, 16] and a rationale (why)", name)
	}
	for _, dt := range sortedKeys(t.TapDTypeScale) {
		d, err := tensor.ParseDType(dt)
		s := t.TapDTypeScale[dt]
		switch {
		case err != nil || d != tensor.BF16:
			return nil, fmt.Errorf("%s: tap_dtype_scale.%s: only bf16 is scaled (fp16 is the floors' own unit)", name, dt)
		case !(s.Factor > 1 && s.Factor <= 64 && s.Why != ""):
			return nil, fmt.Errorf("%s: tap_dtype_scale.%s: want a factor in (1, 64] and a rationale (why)", name, dt)
		}
	}
	t.path = name
	return &t, nil
}

// TapFloor is the taps: entry of a tap kind for a set stored in dt: the entry itself for fp16,
// scaled by tap_dtype_scale for bf16 (amplitude limits by its factor, squared ones by its
// square). A bf16 set without a tap_dtype_scale entry is an error: fp16 floors would fail a
// correct bf16 engine at its first tap.
func (t *Tolerances) TapFloor(name string, dt tensor.DType) (Tolerance, error) {
	floor, err := t.Tap(name)
	if err != nil || dt == tensor.F16 {
		return floor, err
	}
	s, ok := t.TapDTypeScale[dt.String()]
	if !ok {
		return Tolerance{}, fmt.Errorf("%s: a %s model set needs tap_dtype_scale.%s: the taps: floors are stated in fp16's unit roundoff", t.path, dt, dt)
	}
	f := s.Factor
	scale := func(p *float64, by float64) *float64 {
		if p == nil {
			return nil
		}
		v := *p * by
		return &v
	}
	out := floor
	out.Atol, out.Rtol, out.AtolRMS, out.MaxAbs = scale(floor.Atol, f), scale(floor.Rtol, f), scale(floor.AtolRMS, f), scale(floor.MaxAbs, f)
	out.NMSE, out.MaxKL = scale(floor.NMSE, f*f), scale(floor.MaxKL, f*f)
	if floor.MinCosine != nil {
		c := 1 - (1-*floor.MinCosine)*f*f
		out.MinCosine = &c
	}
	out.TopK = make([]TopKLimit, len(floor.TopK))
	for i, k := range floor.TopK {
		out.TopK[i] = k
		out.TopK[i].TieMargin = k.TieMargin * f
	}
	out.Why = fmt.Sprintf("%s; %s floor (x%g amplitude, x%g squared: %s)", floor.Why, dt, f, f*f, s.Why)
	return out, nil
}

// checkKernelKey validates a kernels entry's key: an output dtype, <dtype>@<storage> with a
// 16-bit storage dtype, or <output>:<dtype> with an output's golden name.
func checkKernelKey(key string) error {
	if name, dt, named := strings.Cut(key, ":"); named {
		if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return fmt.Errorf("output %q before ':': want an output's golden name (lower case, digits, _)", name)
		}
		_, err := tensor.ParseDType(dt)
		return err
	}
	out, storage, qualified := strings.Cut(key, "@")
	if _, err := tensor.ParseDType(out); err != nil {
		return err
	}
	if !qualified {
		return nil
	}
	if st, err := tensor.ParseDType(storage); err != nil || !st.IsFloat16Bit() {
		return fmt.Errorf("storage %q after @: want f16 or bf16, the storage dtype of a set's 16-bit inputs", storage)
	}
	return nil
}

// KernelForOutput returns the tolerance of op's output named output, of dtype dt, in a set whose
// 16-bit inputs are stored in storage: kernels.<op>.<output>:<dt> where the file has it, else
// KernelFor's.
func (t *Tolerances) KernelForOutput(op, output string, dt, storage tensor.DType) (Tolerance, error) {
	if tol, ok := t.Kernels[op][output+":"+dt.String()]; ok {
		return tol, nil
	}
	return t.KernelFor(op, dt, storage)
}

// KernelFor returns the tolerance of op for outputs of dtype dt in a set whose 16-bit inputs are
// stored in storage (tensor.Invalid: none): kernels.<op>.<dt>@<storage> where the file has it,
// else kernels.<op>.<dt>.
func (t *Tolerances) KernelFor(op string, dt, storage tensor.DType) (Tolerance, error) {
	if storage.IsFloat16Bit() {
		if tol, ok := t.Kernels[op][dt.String()+"@"+storage.String()]; ok {
			return tol, nil
		}
	}
	return t.Kernel(op, dt)
}

// Kernel returns the tolerance of op for outputs of dtype dt.
func (t *Tolerances) Kernel(op string, dt tensor.DType) (Tolerance, error) {
	byType, ok := t.Kernels[op]
	if !ok {
		return Tolerance{}, fmt.Errorf("%s: no tolerance for op %q: add kernels.%s.%s with a rationale", t.path, op, op, dt)
	}
	tol, ok := byType[dt.String()]
	if !ok {
		return Tolerance{}, fmt.Errorf("%s: no tolerance for op %q with %s output: add kernels.%s.%s", t.path, op, dt, op, dt)
	}
	return tol, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
