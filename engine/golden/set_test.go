package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

func TestLoadGoodSet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kernels", "rmsnorm", "tiny")
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, nil)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != "rmsnorm/tiny" || s.Dir != dir {
		t.Errorf("ID %q Dir %q", s.ID(), s.Dir)
	}
	if err := s.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if f, ok := s.File("weight"); !ok || f.File != "weight.npy" || f.DType != "f16" {
		t.Errorf("File(weight) = %+v, %v", f, ok)
	}
	if _, ok := s.File("weight.npy"); ok {
		t.Error("File looked up by file name instead of tensor name")
	}
	var names []string
	for _, f := range s.Files(RoleInput) {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "x,weight" || len(s.Files(RoleExpected)) != 1 || len(s.Files("bogus")) != 0 {
		t.Errorf("Files(input) = %v", names)
	}
	for name, want := range setTensors() {
		got, err := s.Tensor(name)
		if err != nil {
			t.Fatalf("Tensor(%s): %v", name, err)
		}
		if got.String() != want.String() || !equalFloats(got.Float64(), want.Float64()) {
			t.Errorf("Tensor(%s) = %v %v, want %v %v", name, got, got.Float64(), want, want.Float64())
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	wantErr(t, err, filepath.Join(dir, ManifestName))

	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, func(m *Manifest) { m.FormatVersion = 7 })
	_, err = Load(dir)
	wantErr(t, err, filepath.Join(dir, ManifestName), "format_version 7", "newer generator")
}

// TestTensorCorruptHeader flips bytes inside the .npy header and fixes the checksum, so only
// the decoder stands between the corruption and the kernel under test.
func TestTensorCorruptHeader(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, nil)
	path := filepath.Join(dir, "x.npy")
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte("'shape': (2, 3)"))
	copy(data[i:], "'shape': (3, 3)")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setFileChecksum(t, dir, "x")
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Tensor("x")
	if x != nil {
		t.Error("returned a tensor that failed a check")
	}
	wantErr(t, err, path, "truncated payload")
	wantErr(t, s.Verify(), path)
}

func TestTensorChecksumMismatch(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, nil)
	path := filepath.Join(dir, "out.npy")
	data, _ := os.ReadFile(path)
	want := digest(data)
	data[len(data)-1] ^= 1 // a payload bit: the file still decodes, only the checksum can tell
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Tensor("out")
	if out != nil {
		t.Error("returned a tensor that failed its checksum")
	}
	wantErr(t, err, path, want, digest(data), "corrupt or stale", "make golden")
}

func TestTensorChecksumMismatchFullTier(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierFull, func(m *Manifest) { m.Files[0].SHA256 = strings.Repeat("0", 64) })
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Tensor("x")
	wantErr(t, err, "make golden-full")
}

func TestTensorMissingFile(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, nil)
	path := filepath.Join(dir, "weight.npy")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Tensor("weight")
	wantErr(t, err, path, "missing")
	_, err = s.Tensor("nope")
	wantErr(t, err, filepath.Join(dir, ManifestName), `no tensor named "nope"`)
}

func TestTensorManifestDisagrees(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string
		edit   func(*Manifest)
		want   string
	}{
		{"dtype", "x", func(m *Manifest) { m.Files[0].DType = "f32" }, "holds f16, manifest says f32"},
		{"shape", "x", func(m *Manifest) { m.Files[0].Shape = []int{3, 2} }, "has shape [2,3], manifest says [3,2]"},
		{"rank", "weight", func(m *Manifest) { m.Files[1].Shape = []int{3, 1} }, "has shape [3], manifest says [3,1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, tc.edit)
			s, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range m.Files {
				got, err := s.Tensor(f.Name)
				if f.Name != tc.target {
					if err != nil {
						t.Errorf("untouched tensor %s: %v", f.Name, err)
					}
					continue
				}
				if got != nil {
					t.Errorf("%s: returned a tensor that disagrees with the manifest", f.Name)
				}
				wantErr(t, err, filepath.Join(dir, f.File), tc.want)
			}
			wantErr(t, s.Verify(), tc.want)
		})
	}
}

func TestVerifyUnlistedFiles(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, nil)
	if err := os.WriteFile(filepath.Join(dir, "old_out.npy"), npyBytes(t, tensor.New(tensor.F32, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Verify()
	wantErr(t, err, filepath.Join(dir, "old_out.npy"), filepath.Join(dir, "sub"), "not listed")
	// The listed tensors are still fine on their own.
	if _, err := s.Tensor("x"); err != nil {
		t.Error(err)
	}
}

// TestVerifyReportsEverything breaks three things at once and expects all three reported.
func TestVerifyReportsEverything(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "rmsnorm", "tiny", TierCommitted, func(m *Manifest) { m.Files[2].SHA256 = strings.Repeat("a", 64) })
	os.Remove(filepath.Join(dir, "weight.npy"))
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Verify()
	wantErr(t, err, "weight.npy: missing", "out.npy: sha256 mismatch", "notes.txt: not listed")
	if n := len(strings.Split(err.Error(), "\n")); n != 3 {
		t.Errorf("want 3 problems, got %d: %v", n, err)
	}
}

type rmsParams struct {
	Eps float64 `json:"eps"`
}

type gemmParams struct {
	HasBias  bool   `json:"has_bias"`
	OutDType string `json:"out_dtype"`
	Note     string `json:"note,omitempty"`
	_        int    // unexported fields are not params
}

func TestDecodeParams(t *testing.T) {
	set := func(params string) *Set {
		m := newManifest(t, "rmsnorm", "tiny", TierCommitted)
		m.Params = []byte(params)
		return &Set{Dir: "/sets/x", Manifest: *m}
	}
	var p rmsParams
	if err := set(`{"eps": 1e-06}`).DecodeParams(&p); err != nil || p.Eps != 1e-6 {
		t.Errorf("DecodeParams = %+v, %v", p, err)
	}
	var g gemmParams
	if err := set(`{"has_bias": true, "out_dtype": "f32"}`).DecodeParams(&g); err != nil || !g.HasBias || g.OutDType != "f32" {
		t.Errorf("DecodeParams(gemm) = %+v, %v", g, err)
	}
	var none struct{}
	for _, params := range []string{"", "null", "{}"} {
		if err := set(params).DecodeParams(&none); err != nil {
			t.Errorf("DecodeParams(%q) into an empty struct: %v", params, err)
		}
	}
	var anyMap map[string]any
	if err := set(`{"a": 1}`).DecodeParams(&anyMap); err != nil || anyMap["a"] != 1.0 {
		t.Errorf("DecodeParams into a map = %v, %v", anyMap, err)
	}

	wantErr(t, set(`{"eps": 1e-06, "epsilon": 1e-5}`).DecodeParams(&p), "/sets/x/manifest.json: params", `unknown field "epsilon"`)
	wantErr(t, set(`{}`).DecodeParams(&p), "/sets/x/manifest.json: params: missing eps")
	wantErr(t, set(`{"EPS": 1e-06}`).DecodeParams(&p), "missing eps")
	wantErr(t, set(`{"has_bias": true}`).DecodeParams(&g), "missing out_dtype")
	wantErr(t, set(`{"eps": "small"}`).DecodeParams(&p), "params")
}
