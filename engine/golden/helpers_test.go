package golden

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/x448/float16"
)

// setTensors is what the test sets hold: a miniature rmsnorm case.
func setTensors() map[string]*tensor.Tensor {
	h := func(vs ...float32) []float16.Float16 {
		out := make([]float16.Float16, len(vs))
		for i, v := range vs {
			out[i] = float16.Fromfloat32(v)
		}
		return out
	}
	return map[string]*tensor.Tensor{
		"x":      tensor.FromF16([]int{2, 3}, h(1, -2, 3, 0.5, 0, -0.25)),
		"weight": tensor.FromF16([]int{3}, h(1, 1, 2)),
		"out":    tensor.FromF32([]int{2, 3}, []float32{0.46, -0.93, 2.78, 1.6, 0, -1.6}),
	}
}

func npyBytes(t testing.TB, x *tensor.Tensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tensor.EncodeNPY(&b, x); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// newManifest returns a valid kernel manifest for the tensors of setTensors, checksums filled in.
func newManifest(t testing.TB, op, cse, tier string) *Manifest {
	m := &Manifest{
		FormatVersion: FormatVersion,
		Generator:     Generator{Name: "gen-golden", Version: "1.0.0", Numpy: "2.4.6", Device: "cpu"},
		Kind:          KindKernel,
		Op:            op,
		Case:          cse,
		Tier:          tier,
		Seed:          3735928559,
		Params:        json.RawMessage(`{"eps": 1e-06}`),
	}
	ts := setTensors()
	for _, name := range []string{"x", "weight", "out"} {
		role := RoleInput
		if name == "out" {
			role = RoleExpected
		}
		m.Files = append(m.Files, File{
			Name: name, File: name + ".npy", Role: role, DType: ts[name].DType.String(),
			Shape: ts[name].Shape, SHA256: digest(npyBytes(t, ts[name])),
		})
	}
	return m
}

// writeSet writes a complete, valid set into dir (created if needed) after letting edit alter
// the manifest; it returns the manifest as written.
func writeSet(t testing.TB, dir, op, cse, tier string, edit func(*Manifest)) *Manifest {
	t.Helper()
	m := newManifest(t, op, cse, tier)
	if edit != nil {
		edit(m)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, x := range setTensors() {
		if err := os.WriteFile(filepath.Join(dir, name+".npy"), npyBytes(t, x), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeManifest(t, dir, m)
	return m
}

func writeManifest(t testing.TB, dir string, m *Manifest) {
	t.Helper()
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// setFileChecksum rewrites the manifest entry for a file after a test has changed its bytes.
func setFileChecksum(t testing.TB, dir, name string) {
	t.Helper()
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Manifest.Files {
		if s.Manifest.Files[i].Name == name {
			s.Manifest.Files[i].SHA256 = digest(data)
		}
	}
	writeManifest(t, dir, &s.Manifest)
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}
