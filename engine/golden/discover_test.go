package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiscover(t *testing.T) {
	root := t.TempDir()
	writeSet(t, filepath.Join(root, "kernels", "rmsnorm", "b"), "rmsnorm", "b", TierCommitted, nil)
	writeSet(t, filepath.Join(root, "kernels", "rmsnorm", "a"), "rmsnorm", "a", TierCommitted, nil)
	writeSet(t, filepath.Join(root, "kernels", "gemm", "deep", "er", "z"), "gemm", "z", TierCommitted, nil)
	writeSet(t, filepath.Join(root, ".cache", "kernels", "rmsnorm", "a"), "rmsnorm", "a", TierFull, nil)
	broken := filepath.Join(root, "kernels", "rope", "broken")
	writeSet(t, broken, "rope", "broken", TierCommitted, func(m *Manifest) { m.Tier = "weekly" })
	// A directory that merely looks like a set is not one without its manifest.
	os.MkdirAll(filepath.Join(root, "kernels", "swiglu", "empty"), 0o755)
	os.WriteFile(filepath.Join(root, "tolerances.yaml"), []byte("{}\n"), 0o644)

	sets, err := Discover(root)
	wantErr(t, err, filepath.Join(broken, ManifestName), `tier "weekly"`)
	if n := len(strings.Split(err.Error(), "\n")); n != 1 {
		t.Errorf("want only the broken manifest reported, got: %v", err)
	}
	var got []string
	for _, s := range sets {
		got = append(got, s.ID()+"@"+s.Manifest.Tier)
	}
	want := "gemm/z@committed rmsnorm/a@committed rmsnorm/a@full rmsnorm/b@committed"
	if strings.Join(got, " ") != want {
		t.Errorf("Discover order = %v, want %v", got, want)
	}
	for _, s := range sets {
		if err := s.Verify(); err != nil {
			t.Errorf("%s: %v", s.ID(), err)
		}
	}
}

func TestDiscoverSortsKindFirst(t *testing.T) {
	root := t.TempDir()
	writeSet(t, filepath.Join(root, "m"), "", "c", TierCommitted, func(m *Manifest) {
		m.Kind, m.Op, m.Model = KindModel, "", "aaa"
		m.Files = append(m.Files, File{Name: "config", File: "config.json", Role: RoleCheckpoint, SHA256: strings.Repeat("0", 64)})
	})
	writeSet(t, filepath.Join(root, "k"), "zzz", "c", TierCommitted, nil)
	sets, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 || sets[0].Manifest.Kind != KindKernel || sets[1].ID() != "aaa/c" {
		t.Errorf("order: %v then %v", sets[0].ID(), sets[1].ID())
	}
}

func TestDiscoverFollowsSymlinks(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	writeSet(t, filepath.Join(elsewhere, "kernels", "gelu", "big"), "gelu", "big", TierFull, nil)
	if err := os.Symlink(elsewhere, filepath.Join(root, ".cache")); err != nil {
		t.Skip("symlinks unavailable:", err)
	}
	// A cycle must not make the walk loop.
	if err := os.Symlink(root, filepath.Join(elsewhere, "loop")); err != nil {
		t.Fatal(err)
	}
	sets, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 || sets[0].ID() != "gelu/big" {
		t.Errorf("Discover through a symlink found %d sets", len(sets))
	}
}

func TestDiscoverDuplicateIdentity(t *testing.T) {
	root := t.TempDir()
	writeSet(t, filepath.Join(root, "a"), "gelu", "c", TierCommitted, nil)
	writeSet(t, filepath.Join(root, "b"), "gelu", "c", TierCommitted, nil)
	sets, err := Discover(root)
	wantErr(t, err, filepath.Join(root, "a"), filepath.Join(root, "b"), "gelu/c")
	if len(sets) != 2 {
		t.Errorf("got %d sets, want both returned", len(sets))
	}
}

func TestDiscoverBadRoot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := Discover(missing)
	wantErr(t, err, missing)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	_, err = Discover(file)
	wantErr(t, err, file, "not a directory")
	sets, err := Discover(t.TempDir())
	if err != nil || len(sets) != 0 {
		t.Errorf("empty root: %v, %v", sets, err)
	}
}

func TestFindRootEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvRoot, dir)
	got, err := FindRoot()
	if err != nil || got != dir {
		t.Errorf("FindRoot = %q, %v; want %q", got, err, dir)
	}
	missing := filepath.Join(dir, "nope")
	t.Setenv(EnvRoot, missing)
	_, err = FindRoot()
	wantErr(t, err, EnvRoot, missing)
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	t.Setenv(EnvRoot, file)
	_, err = FindRoot()
	wantErr(t, err, "not a directory")
}

func TestFindRootWalksUp(t *testing.T) {
	t.Setenv(EnvRoot, "")
	repo, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(repo, "golden"), 0o755)
	os.WriteFile(filepath.Join(repo, "golden", "tolerances.yaml"), nil, 0o644)
	deep := filepath.Join(repo, "engine", "golden", "x")
	os.MkdirAll(deep, 0o755)
	// A golden/ without tolerances.yaml on the way up is not the root.
	os.MkdirAll(filepath.Join(repo, "engine", "golden", "golden"), 0o755)
	t.Chdir(deep)
	got, err := FindRoot()
	if err != nil || got != filepath.Join(repo, "golden") {
		t.Errorf("FindRoot = %q, %v", got, err)
	}
}

func TestFindRootNotFound(t *testing.T) {
	t.Setenv(EnvRoot, "")
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	t.Chdir(dir)
	_, err := FindRoot()
	wantErr(t, err, EnvRoot, "golden/tolerances.yaml", dir)
}
