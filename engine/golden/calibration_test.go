package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docCalibration is a calibration.json of a set whose taps are prefill.logits and out (the
// miniature set of helpers_test.go has one expected tensor, "out", which is no tap).
const docCalibration = `{
  "version": 1,
  "implementation": "transformers-fp32-rounded-fp16",
  "taps": [
    {"tap": "prefill.embed", "nmse": 0, "one_minus_cos": 0, "max_err_rms": 0},
    {"tap": "prefill.layers.0.ffn_act", "nmse": 1.23e-06, "one_minus_cos": 6.15e-07, "max_err_rms": 4.56e-03},
    {"tap": "prefill.logits", "nmse": 7.40e-07, "one_minus_cos": 3.70e-07, "max_err_rms": 4.13e-03, "max_abs": 1.61e-02, "kl": 4.85e-06}
  ]
}
`

func TestParseCalibration(t *testing.T) {
	c, err := ParseCalibration([]byte(docCalibration), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 1 || c.Implementation != "transformers-fp32-rounded-fp16" || len(c.Order) != 3 || c.Order[2] != "prefill.logits" {
		t.Fatalf("parsed %+v", c)
	}
	if e := c.Taps["prefill.layers.0.ffn_act"]; e.NMSE != 1.23e-6 || e.OneMinusCos != 6.15e-7 || e.MaxErrRMS != 4.56e-3 || e.MaxAbs != nil || e.KL != nil {
		t.Errorf("ffn_act: %+v", e)
	}
	if e := c.Taps["prefill.logits"]; e.MaxAbs == nil || *e.MaxAbs != 1.61e-2 || e.KL == nil || *e.KL != 4.85e-6 {
		t.Errorf("logits: %+v", e)
	}
}

func TestParseCalibrationErrors(t *testing.T) {
	rep := func(old, new string) string { return strings.Replace(docCalibration, old, new, 1) }
	for name, tc := range map[string]struct{ data, want string }{
		"not json":          {"{", "c.json"},
		"trailing data":     {docCalibration + "{}", "after the calibration object"},
		"unknown key":       {rep(`"version": 1,`, `"version": 1, "host": "x",`), `unknown field "host"`},
		"duplicate key":     {rep(`"nmse": 0,`, `"nmse": 0, "nmse": 1,`), `duplicate key "nmse"`},
		"no version":        {rep(`"version": 1,`, ``), "version missing"},
		"other version":     {rep(`"version": 1,`, `"version": 2,`), "version 2"},
		"no implementation": {rep(`"transformers-fp32-rounded-fp16"`, `""`), "implementation missing"},
		"no taps":           {`{"version": 1, "implementation": "transformers-fp32-rounded-fp16", "taps": []}`, "taps: empty"},
		"missing value":     {rep(`"one_minus_cos": 0, `, ``), "one_minus_cos missing"},
		"negative":          {rep(`"max_err_rms": 0}`, `"max_err_rms": -1e-3}`), "max_err_rms = -0.001"},
		"nmse implausible":  {rep(`"nmse": 1.23e-06`, `"nmse": 0.5`), "nmse = 0.5"},
		"cosine above 2":    {rep(`"one_minus_cos": 6.15e-07`, `"one_minus_cos": 2.5`), "one_minus_cos = 2.5"},
		"not a number":      {rep(`"nmse": 0,`, `"nmse": "0",`), "c.json"},
		"tap twice":         {rep(`"prefill.layers.0.ffn_act"`, `"prefill.embed"`), "listed twice"},
		"bad tap name":      {rep(`"prefill.embed"`, `"../embed"`), "tap:"},
		"logits without kl": {rep(`, "kl": 4.85e-06`, ``), "kl missing"},
		"kl off logits":     {rep(`"max_err_rms": 0}`, `"max_err_rms": 0, "kl": 0}`), "logits taps only"},
	} {
		_, err := ParseCalibration([]byte(tc.data), "c.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "c.json") {
			t.Errorf("%s: got %v, want an error naming c.json and saying %q", name, err, tc.want)
		}
	}
}

// FuzzParseCalibration must never panic; whatever it accepts is a valid record for every tap
// it lists, and a tap order without duplicates.
func FuzzParseCalibration(f *testing.F) {
	f.Add([]byte(docCalibration))
	f.Add([]byte(`{"version": 1, "implementation": "transformers-fp32-rounded-fp16", "taps": [{"tap": "a.logits", "nmse": 1e-3, "one_minus_cos": 0, "max_err_rms": 1, "max_abs": 0, "kl": 0}]}`))
	f.Add([]byte(`{"version": 1, "implementation": "transformers-fp32-rounded-fp16", "taps": [{"tap": "a", "nmse": 1e400}]}`))
	f.Add([]byte(`{"version": 1, "taps": [{"tap": "a", "tap": "b"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCalibration(data, "fuzz.json")
		if err != nil {
			if c != nil {
				t.Fatal("calibration returned with an error")
			}
			return
		}
		if len(c.Order) == 0 || len(c.Order) != len(c.Taps) {
			t.Fatalf("order %v for %d taps", c.Order, len(c.Taps))
		}
		for _, name := range c.Order {
			e := c.Taps[name]
			if !(e.NMSE >= 0 && e.NMSE <= CalibrationMaxNMSE && e.OneMinusCos >= 0 && e.OneMinusCos <= 2 && e.MaxErrRMS >= 0) {
				t.Fatalf("%s: accepted %+v", name, e)
			}
			if (e.MaxAbs != nil) != isLogitsTap(name) || (e.KL != nil) != isLogitsTap(name) {
				t.Fatalf("%s: logits fields %v %v", name, e.MaxAbs, e.KL)
			}
		}
	})
}

// calibratedSet writes a model set (modelSet) whose expected tensors include the taps of
// docCalibration, and the calibration itself.
func calibratedSet(t *testing.T, cal string) string {
	t.Helper()
	dir, _ := modelSet(t)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := s.File("out")
	for _, name := range []string{"prefill.embed", "prefill.layers.0.ffn_act", "prefill.logits"} {
		f := out
		f.Name, f.File = name, name+".npy"
		data, err := os.ReadFile(filepath.Join(dir, "out.npy"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.File), data, 0o644); err != nil {
			t.Fatal(err)
		}
		s.Manifest.Files = append(s.Manifest.Files, f)
	}
	if err := os.WriteFile(filepath.Join(dir, CalibrationFile), []byte(cal), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Manifest.Files = append(s.Manifest.Files, File{Name: CalibrationName, File: CalibrationFile, Role: RoleCalibration, SHA256: digest([]byte(cal))})
	writeManifest(t, dir, &s.Manifest)
	return dir
}

func TestSetCalibration(t *testing.T) {
	dir := calibratedSet(t, docCalibration)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err != nil {
		t.Fatalf("valid calibrated set: %v", err)
	}
	c, err := s.Calibration()
	if err != nil || len(c.Taps) != 3 {
		t.Fatalf("Calibration() = %+v, %v", c, err)
	}
	if _, err := s.Tensor(CalibrationName); err == nil || !strings.Contains(err.Error(), "calibration file") {
		t.Errorf("Tensor of the calibration: %v", err)
	}

	// The calibration must list exactly the set's taps, in manifest order.
	for name, cal := range map[string]string{
		"tap missing": strings.Replace(docCalibration, `    {"tap": "prefill.embed", "nmse": 0, "one_minus_cos": 0, "max_err_rms": 0},
`, "", 1),
		"tap extra": strings.Replace(docCalibration, `    {"tap": "prefill.embed"`, `    {"tap": "prefill.final_norm", "nmse": 0, "one_minus_cos": 0, "max_err_rms": 0},
    {"tap": "prefill.embed"`, 1),
	} {
		s, err := Load(calibratedSet(t, cal))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Calibration(); err == nil || !strings.Contains(err.Error(), "regenerate") {
			t.Errorf("%s: %v", name, err)
		}
	}

	os.WriteFile(filepath.Join(dir, CalibrationFile), []byte(strings.Replace(docCalibration, "1.23e-06", "1.23e-02", 1)), 0o644)
	if err := s.Verify(); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("edited calibration: %v", err)
	}
	os.Remove(filepath.Join(dir, CalibrationFile))
	if _, err := s.Calibration(); err == nil || !strings.Contains(err.Error(), "calibration.json: missing") {
		t.Errorf("missing calibration: %v", err)
	}

	// A set generated before calibration existed: an error that says to regenerate.
	old, _ := modelSet(t)
	s, err = Load(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Calibration(); err == nil || !strings.Contains(err.Error(), "predates calibration; regenerate it (make golden") {
		t.Errorf("set without calibration: %v", err)
	}
	if err := s.Verify(); err == nil || !strings.Contains(err.Error(), "predates calibration") {
		t.Errorf("Verify of a set without calibration: %v", err)
	}
}

func TestCalibrationRoleRules(t *testing.T) {
	zero := strings.Repeat("0", 64)
	cal := func(name, file string) map[string]any {
		return map[string]any{"name": name, "file": file, "role": "calibration", "sha256": zero}
	}
	ckpt := map[string]any{"name": "config", "file": "config.json", "role": "checkpoint", "sha256": zero}
	for name, tc := range map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"calibration in a kernel set": {func(m map[string]any) { addFile(m, cal("calibration", "calibration.json")) }, "only model sets"},
		"other name": {func(m map[string]any) {
			toModel(m)
			addFile(m, ckpt)
			addFile(m, cal("cal", "calibration.json"))
		}, `named "calibration" with file "calibration.json"`},
		"other file": {func(m map[string]any) {
			toModel(m)
			addFile(m, ckpt)
			addFile(m, cal("calibration", "limits.json"))
		}, `named "calibration" with file "calibration.json"`},
		"with a shape": {func(m map[string]any) {
			toModel(m)
			addFile(m, ckpt)
			c := cal("calibration", "calibration.json")
			c["shape"] = []int{1}
			addFile(m, c)
		}, "no dtype or shape"},
		"twice": {func(m map[string]any) {
			toModel(m)
			addFile(m, ckpt)
			addFile(m, cal("calibration", "calibration.json"))
			addFile(m, cal("calibration", "calibration.json"))
		}, "listed twice"},
	} {
		_, err := ParseManifest(edit(t, tc.edit), "m.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
}

// A logits tap's KL for its limit is its sequence's worst step: per sequence of a batch set, the
// whole set for a model set.
func TestCalibrationSequenceKL(t *testing.T) {
	logits := func(name string, kl string) string {
		return `{"tap": "` + name + `", "nmse": 1e-06, "one_minus_cos": 5e-07, "max_err_rms": 4e-03, "max_abs": 1e-02, "kl": ` + kl + `}`
	}
	data := `{"version": 1, "implementation": "transformers-fp32-rounded-fp16", "taps": [` + strings.Join([]string{
		logits("s0.prefill.logits", "2e-06"), logits("s0.decode.0.logits", "1e-11"), logits("s0.decode.1.logits", "3e-05"),
		logits("s1.prefill.logits", "4e-07"), logits("s1.decode.0.logits", "5e-09"),
		`{"tap": "s1.decode.0.layers.0.attn", "nmse": 1e-06, "one_minus_cos": 5e-07, "max_err_rms": 4e-03}`,
	}, ", ") + `]}`
	c, err := ParseCalibration([]byte(data), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"s0.decode.0.logits": 3e-5, "s0.prefill.logits": 3e-5, "s1.decode.0.logits": 4e-7, "s2.decode.0.logits": 0} {
		if got := c.SequenceKL(name); got != want {
			t.Errorf("SequenceKL(%s) = %g, want %g", name, got, want)
		}
	}
	m, err := ParseCalibration([]byte(docCalibration), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.SequenceKL("prefill.logits"); got != 4.85e-6 {
		t.Errorf("a model set's SequenceKL = %g", got)
	}
}

// A decode step's tap pools over the sequence's steps; prefill taps and other sequences do not.
func TestDecodeWorst(t *testing.T) {
	c, err := ParseCalibration([]byte(`{"version": 1, "implementation": "transformers-fp32-rounded-fp16", "taps": [
		{"tap": "s0.prefill.layers.1.router_logits", "nmse": 9e-6, "one_minus_cos": 9e-6, "max_err_rms": 9e-3},
		{"tap": "s0.decode.0.layers.1.router_logits", "nmse": 1e-7, "one_minus_cos": 5e-8, "max_err_rms": 2e-3},
		{"tap": "s0.decode.11.layers.1.router_logits", "nmse": 3e-7, "one_minus_cos": 1e-8, "max_err_rms": 1e-3},
		{"tap": "s1.decode.0.layers.1.router_logits", "nmse": 5e-7, "one_minus_cos": 5e-7, "max_err_rms": 5e-3}]}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := c.DecodeWorst("s0.decode.0.layers.1.router_logits"); !ok || e.NMSE != 3e-7 || e.OneMinusCos != 5e-8 || e.MaxErrRMS != 2e-3 {
		t.Errorf("s0's decode steps pooled: %+v %v, want nmse 3e-7, 1-cos 5e-8, max_err_rms 2e-3", e, ok)
	}
	if e, ok := c.DecodeWorst("s1.decode.0.layers.1.router_logits"); !ok || e.NMSE != 5e-7 {
		t.Errorf("s1 is its own: %+v %v", e, ok)
	}
	for _, name := range []string{"s0.prefill.layers.1.router_logits", "decode.x.layers.1.q", "decode.0"} {
		if _, ok := c.DecodeWorst(name); ok {
			t.Errorf("%s pooled, want no decode-step pool", name)
		}
	}
}
