package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// skipInCopy are the repository paths a mutant's copy leaves out: version control, build
// outputs (hundreds of MB of CUDA toolchain, the bundle) and the full-scale golden tier, which
// the committed-tier runs never read. golden/ itself is copied.
var skipInCopy = []string{".git", "build", "dist", "golden/.cache", ".venv", "cuda/build"}

// findRepo returns the repository root: dir or the nearest parent holding go.mod, golden/
// and cuda/.
func findRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isRepo(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no touchstone repository (go.mod, golden/, cuda/) at or above %s: pass -repo", dir)
		}
	}
}

func isRepo(d string) bool {
	for _, p := range []string{"go.mod", "golden", "cuda/Makefile"} {
		if _, err := os.Stat(filepath.Join(d, p)); err != nil {
			return false
		}
	}
	return true
}

// copyTree copies the regular files, directories and symlinks of src (relative paths in skip
// and below them left out) into dst, keeping modification times: make decides what to
// rebuild from them (cudaside.go).
func copyTree(src, dst string, skip []string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && skipped(filepath.ToSlash(rel), skip) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if err := copyFile(p, to, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(to, info.ModTime(), info.ModTime())
		}
		return nil // sockets, devices: nothing a build reads
	})
}

func skipped(rel string, skip []string) bool {
	for _, s := range skip {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
	}
	return false
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// applyAll checks every mutant against the tree at root without writing anything; the
// result has one error per mutant that does not apply (nil entries for those that do).
func applyAll(root string, ms []Mutant) []error {
	errs := make([]error, len(ms))
	for i, m := range ms {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", m.ID, err)
			continue
		}
		_, errs[i] = m.Apply(src)
	}
	return errs
}

// triage gives every mutant its outcome record and returns the indices of those that apply to
// the tree at base; the others are NOT-APPLICABLE already.
func (o opts) triage(base string, ms []Mutant) (outs []Outcome, todo []int) {
	outs = make([]Outcome, len(ms))
	for i, err := range applyAll(base, ms) {
		outs[i] = outcomeOf(ms[i])
		if err != nil {
			outs[i].Status, outs[i].Detail = NotApplicable, err.Error()
			o.progress("%s: NOT-APPLICABLE: %v", ms[i].ID, err)
			continue
		}
		todo = append(todo, i)
	}
	return outs, todo
}

// plant writes m's edit into the tree at root and returns a function that restores the file.
func plant(root string, m Mutant) (restore func() error, err error) {
	p := filepath.Join(root, filepath.FromSlash(m.File))
	orig, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	mutated, err := m.Apply(orig)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, mutated, info.Mode().Perm()); err != nil {
		return nil, err
	}
	return func() error { return os.WriteFile(p, orig, info.Mode().Perm()) }, nil
}
