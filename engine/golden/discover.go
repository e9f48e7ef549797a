package golden

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Discover finds every set under root, hidden directories included (the full-scale tier lives
// in root/.cache), following directory symlinks so the cache can live on another disk. Sets
// whose manifest fails to load are reported in the joined error while the good ones are still
// returned, so one broken set does not hide the rest; so are two sets claiming the same
// identity, since which of them is the reference would be a guess.
func Discover(root string) ([]*Set, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("golden root: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("golden root %s is not a directory", root)
	}
	var (
		sets []*Set
		errs []error
	)
	visited := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		// Keyed by the resolved path so a symlink cycle is walked once, not forever.
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			if visited[real] {
				return
			}
			visited[real] = true
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			isDir := e.IsDir()
			if e.Type()&fs.ModeSymlink != 0 {
				if st, err := os.Stat(path); err == nil {
					isDir = st.IsDir()
				}
			}
			switch {
			case isDir:
				walk(path)
			case e.Name() == ManifestName:
				set, err := Load(dir)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				sets = append(sets, set)
			}
		}
	}
	walk(root)
	slices.SortFunc(sets, compareSets)
	for i := 1; i < len(sets); i++ {
		if a, b := sets[i-1], sets[i]; sameIdentity(a, b) {
			errs = append(errs, fmt.Errorf("%s and %s are both %s set %s (tier %s)", a.Dir, b.Dir, a.Manifest.Kind, a.ID(), a.Manifest.Tier))
		}
	}
	return sets, errors.Join(errs...)
}

func compareSets(a, b *Set) int {
	return cmp.Or(
		cmp.Compare(a.Manifest.Kind, b.Manifest.Kind),
		// Exactly one of Op and Model is set, by validation, so their concatenation is the name.
		cmp.Compare(a.Manifest.Op+a.Manifest.Model, b.Manifest.Op+b.Manifest.Model),
		cmp.Compare(a.Manifest.Case, b.Manifest.Case),
		cmp.Compare(a.Manifest.Tier, b.Manifest.Tier),
		cmp.Compare(a.Dir, b.Dir),
	)
}

func sameIdentity(a, b *Set) bool {
	return a.Manifest.Kind == b.Manifest.Kind && a.ID() == b.ID() && a.Manifest.Tier == b.Manifest.Tier
}

// EnvRoot names the environment variable that overrides FindRoot's search.
const EnvRoot = "TOUCHSTONE_GOLDEN"

// FindRoot locates the golden directory: $TOUCHSTONE_GOLDEN when set and non-empty (it must
// then exist, since a typo should not fall back to some other tree), otherwise the nearest
// golden/ holding tolerances.yaml, searching upward from the working directory so tests run
// from any package directory find the repository's sets.
func FindRoot() (string, error) {
	if env := os.Getenv(EnvRoot); env != "" {
		st, err := os.Stat(env)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvRoot, env, err)
		}
		if !st.IsDir() {
			return "", fmt.Errorf("%s=%s is not a directory", EnvRoot, env)
		}
		return filepath.Abs(env)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding golden root: %w", err)
	}
	for dir := wd; ; {
		if st, err := os.Stat(filepath.Join(dir, "golden", "tolerances.yaml")); err == nil && st.Mode().IsRegular() {
			return filepath.Join(dir, "golden"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("no golden directory found: set %s to the golden directory, or run from inside the touchstone checkout "+
		"(no golden/tolerances.yaml in %s or any parent)", EnvRoot, wd)
}
