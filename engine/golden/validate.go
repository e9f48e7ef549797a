package golden

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// maxElements bounds a manifest shape so that code sizing buffers from it (tensor.NumElements,
// device allocations) cannot overflow; it matches the .npy decoder's own ceiling in spirit.
const maxElements = 1 << 40

// validate returns every contract violation, each naming the offending field or file.
func (m *Manifest) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if m.Generator.Name == "" {
		bad("generator.name missing")
	}
	if m.Generator.Version == "" {
		bad("generator.version missing")
	}
	switch m.Kind {
	case KindKernel:
		if m.Model != "" {
			bad("model %q set on a kernel set (kernel sets name their op only)", m.Model)
		}
		if err := checkIdent(m.Op); err != nil {
			bad("op: %v", err)
		}
	case KindModel:
		if m.Op != "" {
			bad("op %q set on a model set (model sets name their model only)", m.Op)
		}
		if err := checkIdent(m.Model); err != nil {
			bad("model: %v", err)
		}
	case KindBatch:
		if m.Op != "" {
			bad("op %q set on a batch set (batch sets name themselves in model)", m.Op)
		}
		if err := checkIdent(m.Model); err != nil {
			bad("model: %v", err)
		}
	case KindSampling:
		if m.Op != "" || m.Model != "" {
			bad("op %q / model %q set on a sampling set (sampling sets name their case only)", m.Op, m.Model)
		}
	default:
		bad("kind %q: want %q, %q, %q or %q", m.Kind, KindKernel, KindModel, KindBatch, KindSampling)
	}
	if err := checkIdent(m.Case); err != nil {
		bad("case: %v", err)
	}
	if m.Tier != TierCommitted && m.Tier != TierFull {
		bad("tier %q: want %q or %q", m.Tier, TierCommitted, TierFull)
	}
	if p := bytes.TrimSpace(m.Params); len(p) > 0 && p[0] != '{' && string(p) != "null" {
		bad("params must be a JSON object, got %.40s", p)
	}
	errs = append(errs, m.validateFiles()...)
	return errs
}

func (m *Manifest) validateFiles() []error {
	var errs []error
	if len(m.Files) == 0 {
		return append(errs, fmt.Errorf("files: empty (a set needs its inputs and expected outputs)"))
	}
	names := map[string]bool{}
	files := map[string]bool{}
	roles := map[string]int{}
	for i, f := range m.Files {
		label := fmt.Sprintf("files[%d]", i)
		if f.Name != "" {
			label = fmt.Sprintf("files[%d] (%q)", i, f.Name)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", label, fmt.Sprintf(format, args...)))
		}
		if err := checkIdent(f.Name); err != nil {
			bad("name: %v", err)
		} else if names[f.Name] {
			bad("name %q listed twice", f.Name)
		}
		names[f.Name] = true
		checkpoint := f.Role == RoleCheckpoint
		calibration := f.Role == RoleCalibration
		if calibration {
			// One fixed name and file: a reader finds it without searching, and a second
			// calibration (two sets of limits) cannot be listed.
			if f.Name != CalibrationName || f.File != CalibrationFile {
				bad("a calibration entry is named %q with file %q", CalibrationName, CalibrationFile)
			}
		}
		if err := checkFileName(f.File, checkpoint || calibration); err != nil {
			bad("file %q: %v", f.File, err)
		} else if files[f.File] {
			bad("file %q listed twice", f.File)
		}
		files[f.File] = true
		switch {
		case f.Role == RoleInput || f.Role == RoleExpected:
			roles[f.Role]++
		case f.Role == RoleAllowance && m.Kind == KindKernel:
			roles[f.Role]++
		case f.Role == RoleAllowance:
			bad("role %q: only kernel sets hold allowance files", f.Role)
		case (checkpoint || calibration) && m.Kind == KindModel, calibration && m.Kind == KindBatch:
			roles[f.Role]++
		case checkpoint || calibration:
			bad("role %q: only model sets hold %s files", f.Role, f.Role)
		default:
			bad("role %q: want %q, %q, (kernel sets) %q or (model sets) %q or %q", f.Role, RoleInput, RoleExpected, RoleAllowance, RoleCheckpoint, RoleCalibration)
		}
		if checkpoint || calibration {
			// A checkpoint or calibration file is not a tensor: a dtype or shape would be a
			// claim nobody checks.
			if f.DType != "" || f.Shape != nil {
				bad("a %s file has no dtype or shape", f.Role)
			}
		} else {
			if _, err := tensor.ParseDType(f.DType); err != nil {
				bad("dtype: %v", err)
			}
			if err := checkShape(f.Shape); err != nil {
				bad("shape: %v", err)
			}
		}
		if !isSHA256(f.SHA256) {
			bad("sha256 %q: want 64 lower-case hex digits", f.SHA256)
		}
	}
	errs = append(errs, m.validateAllowances()...)
	// A kernel set without an expected output would pass any kernel, and one without inputs
	// cannot drive one.
	if m.Kind == KindKernel {
		for _, r := range []string{RoleInput, RoleExpected} {
			if roles[r] == 0 {
				errs = append(errs, fmt.Errorf("files: no %q file (a kernel set needs inputs and expected outputs)", r))
			}
		}
	}
	// A sampling set keeps its expected tokens in params; without logits it has nothing to draw from.
	if m.Kind == KindSampling && roles[RoleInput] == 0 {
		errs = append(errs, fmt.Errorf("files: no %q file (a sampling set needs its logits)", RoleInput))
	}
	// A model set without a checkpoint has nothing to run, and one without expected taps
	// would pass any forward pass.
	// A batch set's limits derive from its calibration, and its checkpoint is its model set's.
	if m.Kind == KindBatch {
		for _, r := range []string{RoleExpected, RoleCalibration} {
			if roles[r] == 0 {
				errs = append(errs, fmt.Errorf("files: no %q file (a batch set needs expected taps and their calibration)", r))
			}
		}
	}
	if m.Kind == KindModel {
		for _, r := range []string{RoleCheckpoint, RoleExpected} {
			if roles[r] == 0 {
				errs = append(errs, fmt.Errorf("files: no %q file (a model set needs a checkpoint and expected taps)", r))
			}
		}
	}
	return errs
}

// checkIdent accepts the names that end up in set IDs and messages; '/' would make an ID
// ambiguous and whitespace or control characters would make messages misleading.
func checkIdent(s string) error {
	if s == "" {
		return fmt.Errorf("missing")
	}
	for _, r := range s {
		if r == '/' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q contains %q", s, r)
		}
	}
	return nil
}

// checkFileName keeps every file directly inside its set directory: the manifest is data,
// and a path in it must not be able to point anywhere else. Tensors are .npy files;
// checkpoint files (and calibration.json, which the caller checks by name) are .json or
// .safetensors.
func checkFileName(s string, checkpoint bool) error {
	switch {
	case s == "":
		return fmt.Errorf("missing")
	case strings.ContainsAny(s, `/\`) || strings.Contains(s, ".."):
		return fmt.Errorf("must be a plain file name (no '/', '\\' or '..')")
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return fmt.Errorf("contains whitespace or control characters")
	case checkpoint && (strings.HasSuffix(s, ".json") || strings.HasSuffix(s, ".safetensors")) && s != ManifestName:
		return nil
	case checkpoint:
		return fmt.Errorf("a checkpoint file must be a .json (not %s) or .safetensors file", ManifestName)
	case !strings.HasSuffix(s, ".npy") || s == ".npy":
		return fmt.Errorf("must be a .npy file")
	}
	return nil
}

func checkShape(shape []int) error {
	if shape == nil {
		return fmt.Errorf("missing (a 0-d tensor has shape [])")
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("%s has a negative dimension", tensor.ShapeString(shape))
		}
		if d != 0 && n > maxElements/d {
			return fmt.Errorf("%s is absurdly large", tensor.ShapeString(shape))
		}
		n *= d
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validateAllowances checks that every allowance names an expected output of its own shape and
// is f32: an allowance for nothing, or of another shape, would widen a check nobody can see.
func (m *Manifest) validateAllowances() []error {
	var errs []error
	expected := map[string]File{}
	for _, f := range m.Files {
		if f.Role == RoleExpected {
			expected[f.Name] = f
		}
	}
	for _, f := range m.Files {
		if f.Role != RoleAllowance {
			continue
		}
		out, ok := strings.CutSuffix(f.Name, AllowanceSuffix)
		want, found := expected[out]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("files (%q): an allowance's name is <expected output>%s", f.Name, AllowanceSuffix))
		case !found:
			errs = append(errs, fmt.Errorf("files (%q): allowance for %q, which is no expected output of the set", f.Name, out))
		case !slices.Equal(f.Shape, want.Shape):
			errs = append(errs, fmt.Errorf("files (%q): shape %v, its output %q has %v", f.Name, f.Shape, out, want.Shape))
		case f.DType != "f32":
			errs = append(errs, fmt.Errorf("files (%q): dtype %q, an allowance is f32", f.Name, f.DType))
		}
	}
	return errs
}
