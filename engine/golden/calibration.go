package golden

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// A model set's calibration.json (docs/golden-format.md, "Calibration") records, for every tap
// of the set, the error that an independent fp16 implementation of the same forward makes
// against the fp32 reference. Tap limits are derived from it (compare.Tolerances.CalibratedTap),
// so that they follow each model's own depth and conditioning instead of limits tuned on one
// model.
const (
	// RoleCalibration marks calibration.json: checked by sha256 and parsed, never a tensor.
	RoleCalibration = "calibration"
	// CalibrationName and CalibrationFile are the only name and file a calibration entry may have.
	CalibrationName = "calibration"
	CalibrationFile = "calibration.json"
	// CalibrationVersion is the layout of calibration.json this reader understands.
	CalibrationVersion = 1
	// CalibrationMaxNMSE bounds every recorded nmse. It is the error of a correct
	// implementation: one this large means the calibration forward computes something else
	// than the reference, and limits derived from it would let real bugs pass (a wrong RoPE
	// theta moves nmse to 1e-2 and beyond). The generator refuses to write one too.
	CalibrationMaxNMSE = 1e-2
	// CalibrationMaxNMSEFP8 is the bound for an implementation that quantises activations to
	// FP8 at every linear (CalibrationFP8 suffix): rounding moves some inputs across an e4m3
	// midpoint, one code is 6-12% of a value, and the flips compound with depth (measured up
	// to 0.022 on the committed FP8 sets; tools/gen-golden/models/calibration.py).
	CalibrationMaxNMSEFP8 = 5e-2
)

// TapError is the calibration record of one tap: compare's metrics of the fp16
// implementation's tap against the reference (the same definitions as compare.Compare).
type TapError struct {
	NMSE        float64 // sum((got-want)²) / sum(want²)
	OneMinusCos float64 // 1 - cosine(got, want), flattened
	MaxErrRMS   float64 // max over elements of |got-want| / rms(the reference's row), row = last dim
	// Logits only (nil elsewhere): the worst |got-want| in logit units, and the mean over rows
	// of KL(softmax(want) || softmax(got)).
	MaxAbs, KL *float64
}

// Calibration is a parsed calibration.json.
type Calibration struct {
	Version        int
	Implementation string
	// Order lists the taps in file order; Taps holds their records.
	Order []string
	Taps  map[string]TapError
	// sequenceKL is the largest KL of any logits tap of each sequence, by the prefix of its
	// taps' names ("" for a model set, "s<i>." for a batch set's sequence i): SequenceKL.
	sequenceKL map[string]float64
	// decodeWorst is, for each tap of a sequence's decode steps (by decodeKey), the largest of
	// each metric over all of its steps: DecodeWorst.
	decodeWorst map[string]TapError
}

// DecodeWorst is the calibration of a decode step's tap pooled over the sequence's decode
// steps: the largest nmse, 1 - cosine and max_err_rms the implementation made at that tap in
// any step (false for a tap of no decode step). A tap of a few elements (a router's logits over
// 4 or 8 experts at one token) gives per step a sample of its error too small to stand for the
// implementation: mixtral-tiny-b4's layer-1 router_logits calibrate to 1 - cosine from 1.3e-8
// to 8.5e-7 over the 8 decode steps of one sequence, the same rounding at every step, and a
// correct engine's served pass reached 28x one step's value (H200, 2026-11-28). The worst step
// is the implementation's error there, as SequenceKL is for the logits.
func (c *Calibration) DecodeWorst(name string) (TapError, bool) {
	key, ok := decodeKey(name)
	if !ok {
		return TapError{}, false
	}
	e, ok := c.decodeWorst[key]
	return e, ok
}

// decodeKey is a decode step's tap name with its step elided ("s1.decode.*.layers.0.q" for
// "s1.decode.3.layers.0.q"); false for any other tap.
func decodeKey(name string) (string, bool) {
	_, tap := SplitSequence(name)
	prefix := name[:len(name)-len(tap)]
	rest, ok := strings.CutPrefix(tap, "decode.")
	if !ok {
		return "", false
	}
	step, rest, ok := strings.Cut(rest, ".")
	if !ok || step == "" || strings.Trim(step, "0123456789") != "" {
		return "", false
	}
	return prefix + "decode.*." + rest, true
}

// SequenceKL is the largest KL the calibration implementation made at any logits tap of the
// sequence that tap name belongs to (the prefill's and every decode step's). KL at one step is
// the implementation's logit error weighed by that step's distribution: at a near one-hot step
// it is 1e-11, at a spread one 1e-5, from the same rounding. A logits limit derived from one
// step's KL would follow that step's luck more than the implementation's accuracy, and a
// correct kernel whose error lands differently fails it (a full batch set's logits at 17x one
// step's calibrated KL, H100, 2026-11-27). The sequence's worst step is the implementation's KL.
func (c *Calibration) SequenceKL(name string) float64 {
	return c.sequenceKL[sequencePrefix(name)]
}

// sequencePrefix is the "s<i>." of a batch set's tap name, "" for any other.
func sequencePrefix(name string) string {
	_, tap := SplitSequence(name)
	return name[:len(name)-len(tap)]
}

// calibrationFile is the JSON layout; pointers tell a missing key from a zero.
type calibrationFile struct {
	Version        *int             `json:"version"`
	Implementation string           `json:"implementation"`
	Taps           []calibrationTap `json:"taps"`
}

type calibrationTap struct {
	Tap         string   `json:"tap"`
	NMSE        *float64 `json:"nmse"`
	OneMinusCos *float64 `json:"one_minus_cos"`
	MaxErrRMS   *float64 `json:"max_err_rms"`
	MaxAbs      *float64 `json:"max_abs"`
	KL          *float64 `json:"kl"`
}

// isLogitsTap reports whether a tap name is a pass's logits ("prefill.logits", "decode.3.logits").
func isLogitsTap(name string) bool { return name == "logits" || strings.HasSuffix(name, ".logits") }

// ParseCalibration decodes and validates calibration.json; path is only used in errors. It is
// strict like ParseManifest: unknown or duplicated keys, a missing value, a value that is not a
// finite number >= 0 (or an nmse above CalibrationMaxNMSE, a 1 - cosine above 2) and a tap
// listed twice are errors; logits taps must carry max_abs and kl, other taps must not.
func ParseCalibration(data []byte, path string) (*Calibration, error) {
	if err := checkDuplicateKeys(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var f calibrationFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: data after the calibration object", path)
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}
	switch {
	case f.Version == nil:
		bad("version missing (want %d)", CalibrationVersion)
	case *f.Version != CalibrationVersion:
		bad("version %d: this reader wants %d (regenerate the set, or update the engine)", *f.Version, CalibrationVersion)
	}
	if f.Implementation == "" {
		bad("implementation missing")
	} else if _, err := (&Calibration{Implementation: f.Implementation}).DType(); err != nil {
		bad("%v", err)
	}
	if len(f.Taps) == 0 {
		bad("taps: empty")
	}
	c := &Calibration{Implementation: f.Implementation, Taps: map[string]TapError{}, sequenceKL: map[string]float64{},
		decodeWorst: map[string]TapError{}}
	maxNMSE := CalibrationMaxNMSE
	if c.FP8Activations() {
		maxNMSE = CalibrationMaxNMSEFP8
	}
	if f.Version != nil {
		c.Version = *f.Version
	}
	for i, t := range f.Taps {
		label := fmt.Sprintf("taps[%d]", i)
		if err := checkIdent(t.Tap); err != nil {
			bad("%s: tap: %v", label, err)
			continue
		}
		label = fmt.Sprintf("taps[%d] (%s)", i, t.Tap)
		if _, dup := c.Taps[t.Tap]; dup {
			bad("%s: listed twice", label)
			continue
		}
		value := func(key string, p *float64, max float64) float64 {
			switch {
			case p == nil:
				bad("%s: %s missing", label, key)
				return 0
			case !(*p >= 0 && *p <= max):
				bad("%s: %s = %v: want a number in [0, %g]", label, key, *p, max)
				return 0
			}
			return *p
		}
		e := TapError{
			NMSE:        value("nmse", t.NMSE, maxNMSE),
			OneMinusCos: value("one_minus_cos", t.OneMinusCos, 2),
			MaxErrRMS:   value("max_err_rms", t.MaxErrRMS, math.MaxFloat64),
		}
		if isLogitsTap(t.Tap) {
			a, k := value("max_abs", t.MaxAbs, math.MaxFloat64), value("kl", t.KL, math.MaxFloat64)
			e.MaxAbs, e.KL = &a, &k
			p := sequencePrefix(t.Tap)
			c.sequenceKL[p] = max(c.sequenceKL[p], k)
		} else if t.MaxAbs != nil || t.KL != nil {
			bad("%s: max_abs and kl belong to logits taps only", label)
		}
		c.Order = append(c.Order, t.Tap)
		c.Taps[t.Tap] = e
		if key, ok := decodeKey(t.Tap); ok {
			w := c.decodeWorst[key]
			w.NMSE, w.OneMinusCos, w.MaxErrRMS = max(w.NMSE, e.NMSE), max(w.OneMinusCos, e.OneMinusCos), max(w.MaxErrRMS, e.MaxErrRMS)
			c.decodeWorst[key] = w
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// tapFiles lists the set's tap tensors (expected files of the prefill and decode passes) in
// manifest order: exactly what a calibration must cover.
func (s *Set) tapFiles() []string {
	var names []string
	for _, f := range s.Files(RoleExpected) {
		if _, tap := SplitSequence(f.Name); strings.HasPrefix(tap, "prefill.") || strings.HasPrefix(tap, "decode.") {
			names = append(names, f.Name)
		}
	}
	return names
}

// SplitSequence splits a batch set's file name "s<i>.<name>" into i and name; any other name
// comes back whole with i = -1.
func SplitSequence(name string) (int, string) {
	head, rest, ok := strings.Cut(name, ".")
	if !ok || len(head) < 2 || head[0] != 's' || (len(head) > 2 && head[1] == '0') {
		return -1, name
	}
	i := 0
	for _, c := range head[1:] {
		if c < '0' || c > '9' || i > 1<<20 {
			return -1, name
		}
		i = 10*i + int(c-'0')
	}
	return i, rest
}

// Calibration reads the set's calibration.json after checking its sha256, parses it and
// checks that it records exactly the set's taps, in manifest order. A model set without one
// predates calibration: its tap limits cannot be derived, and the error says to regenerate it.
func (s *Set) Calibration() (*Calibration, error) {
	f, ok := s.File(CalibrationName)
	if !ok || f.Role != RoleCalibration {
		return nil, fmt.Errorf("%s: no %s (the per-tap error of an fp16 implementation, from which tap limits are derived): the set predates calibration; regenerate it (%s; gen-golden models --checkpoint DIR --name %s for a checkpoint set)",
			s.ID(), CalibrationFile, s.regenerateHint(), s.Manifest.Model)
	}
	path := filepath.Join(s.Dir, f.File)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: missing (listed in %s as %q); regenerate with %s", path, ManifestName, f.Name, s.regenerateHint())
	}
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, fmt.Errorf("%s: sha256 mismatch: manifest says %s, file has %s; the set is corrupt or stale: regenerate with %s",
			path, f.SHA256, hex.EncodeToString(sum[:]), s.regenerateHint())
	}
	c, err := ParseCalibration(data, path)
	if err != nil {
		return nil, err
	}
	taps := s.tapFiles()
	for i, name := range taps {
		if i >= len(c.Order) || c.Order[i] != name {
			got := "nothing"
			if i < len(c.Order) {
				got = c.Order[i]
			}
			return nil, fmt.Errorf("%s: entry %d is %s, the set's tap %d is %s (a calibration lists every tap of its set, in manifest order): regenerate with %s",
				path, i, got, i, name, s.regenerateHint())
		}
	}
	if len(c.Order) != len(taps) {
		return nil, fmt.Errorf("%s: %d taps for the set's %d (extra: %s): regenerate with %s", path, len(c.Order), len(taps), c.Order[len(taps)], s.regenerateHint())
	}
	return c, nil
}

// Calibration implementations by storage dtype: the generator's forward rounds every stored
// value to fp16 or to bf16 (tools/gen-golden/models/calibration.py, CALIBRATION_IMPLEMENTATION).
const (
	CalibrationF16  = "transformers-fp32-rounded-fp16"
	CalibrationBF16 = "transformers-fp32-rounded-bf16"
	// CalibrationFP8 suffixes an implementation whose linears quantise their inputs to FP8
	// (a quantized set of an FP8 format): the same rounding, with FP8's larger calibrated
	// error allowed (CalibrationMaxNMSEFP8).
	CalibrationFP8 = "-fp8-activations"
)

// FP8Activations reports whether the implementation quantises activations to FP8.
func (c *Calibration) FP8Activations() bool {
	return strings.HasSuffix(c.Implementation, CalibrationFP8)
}

// DType is the storage dtype the calibration's implementation rounds to, from Implementation;
// an implementation this reader does not know is an error naming it.
func (c *Calibration) DType() (tensor.DType, error) {
	switch strings.TrimSuffix(c.Implementation, CalibrationFP8) {
	case CalibrationF16:
		return tensor.F16, nil
	case CalibrationBF16:
		return tensor.BF16, nil
	}
	return tensor.Invalid, fmt.Errorf("calibration implementation %q: want %q or %q (optionally suffixed %q)", c.Implementation, CalibrationF16, CalibrationBF16, CalibrationFP8)
}
