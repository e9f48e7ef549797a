package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// modelSet writes a valid model set: the kernel helper's tensors plus a checkpoint file.
func modelSet(t *testing.T) (dir string, cfg []byte) {
	t.Helper()
	dir = t.TempDir()
	cfg = []byte(`{"model_type": "qwen2"}`)
	writeSet(t, dir, "", "greedy32", TierCommitted, func(m *Manifest) {
		m.Kind, m.Op, m.Model = KindModel, "", "qwen2-tiny"
		m.Files = append(m.Files, File{Name: "config", File: "config.json", Role: RoleCheckpoint, SHA256: digest(cfg)})
	})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, cfg
}

func TestCheckpointFiles(t *testing.T) {
	dir := calibratedSet(t, docCalibration)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err != nil {
		t.Fatalf("valid model set: %v", err)
	}
	p, err := s.CheckpointPath("config")
	if err != nil || p != filepath.Join(dir, "config.json") {
		t.Fatalf("CheckpointPath = %q, %v", p, err)
	}
	if _, err := s.Tensor("config"); err == nil || !strings.Contains(err.Error(), "checkpoint file") {
		t.Errorf("Tensor of a checkpoint file: %v", err)
	}

	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama"}`), 0o644)
	if _, err := s.CheckpointPath("config"); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("edited checkpoint: %v", err)
	}
	os.Remove(filepath.Join(dir, "config.json"))
	if err := s.Verify(); err == nil || !strings.Contains(err.Error(), "config.json: missing") {
		t.Errorf("missing checkpoint: %v", err)
	}
}

func TestCheckpointRoleRules(t *testing.T) {
	zero := strings.Repeat("0", 64)
	cases := map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"checkpoint in a kernel set": {func(m map[string]any) {
			addFile(m, map[string]any{"name": "config", "file": "config.json", "role": "checkpoint", "sha256": zero})
		}, "only model sets"},
		"checkpoint with a dtype": {func(m map[string]any) {
			toModel(m)
			addFile(m, map[string]any{"name": "config", "file": "config.json", "role": "checkpoint", "sha256": zero, "dtype": "f16"})
		}, "no dtype or shape"},
		"checkpoint of another type": {func(m map[string]any) {
			toModel(m)
			addFile(m, map[string]any{"name": "w", "file": "weights.bin", "role": "checkpoint", "sha256": zero})
		}, ".safetensors"},
		"model set without a checkpoint": {func(m map[string]any) { toModel(m) }, `no "checkpoint" file`},
	}
	for name, tc := range cases {
		_, err := ParseManifest(edit(t, tc.edit), "m.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func toModel(m map[string]any) {
	m["kind"] = "model"
	delete(m, "op")
	m["model"] = "qwen2-tiny"
}

func addFile(m map[string]any, f map[string]any) { m["files"] = append(m["files"].([]any), f) }
