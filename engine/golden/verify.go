package golden

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/touchstone-llm/touchstone/engine/tensor"
)

// Tensor loads the named tensor after checking, in order, that the file exists, that its bytes
// hash to the manifest's sha256, that it decodes, and that the decoded dtype and shape are the
// manifest's. A tensor that fails any check is never returned.
func (s *Set) Tensor(name string) (*tensor.Tensor, error) {
	if s.kept != nil {
		return s.kept.get(s, name)
	}
	return s.readTensor(name)
}

// readTensor is Tensor without the kept copies.
func (s *Set) readTensor(name string) (*tensor.Tensor, error) {
	f, ok := s.File(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor named %q", s.manifestPath(), name)
	}
	if f.Role == RoleCheckpoint {
		return nil, fmt.Errorf("%s: %q is a checkpoint file, not a tensor (use CheckpointPath)", s.manifestPath(), name)
	}
	if f.Role == RoleCalibration {
		return nil, fmt.Errorf("%s: %q is the calibration file, not a tensor (use Calibration)", s.manifestPath(), name)
	}
	path := filepath.Join(s.Dir, f.File)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: missing (listed in %s as %q); regenerate with %s", path, ManifestName, name, s.regenerateHint())
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
		return nil, fmt.Errorf("%s: sha256 mismatch: manifest says %s, file has %s; the set is corrupt or stale: regenerate with %s",
			path, f.SHA256, got, s.regenerateHint())
	}
	t, err := tensor.DecodeNPY(bytes.NewReader(data), path)
	if err != nil {
		return nil, err
	}
	want, _ := tensor.ParseDType(f.DType)
	if t.DType == tensor.U8 && want.IsFP8() {
		t.DType = want // FP8 travels as '|u1' bytes; the manifest says which format they are
	}
	if t.DType != want {
		return nil, fmt.Errorf("%s: holds %v, manifest says %s", path, t.DType, f.DType)
	}
	if !tensor.SameShape(t.Shape, f.Shape) {
		return nil, fmt.Errorf("%s: has shape %s, manifest says %s", path, tensor.ShapeString(t.Shape), tensor.ShapeString(f.Shape))
	}
	return t, nil
}

// Verify checks every listed tensor as Tensor does (checkpoint and calibration files by their
// own readers), that a model set has a calibration, and that the directory holds nothing the
// manifest does not list: a stray file is usually a leftover from an older generation that a
// reader could pick up by mistake. All problems are returned together.
func (s *Set) Verify() error {
	var errs []error
	listed := map[string]bool{ManifestName: true}
	for _, f := range s.Manifest.Files {
		listed[f.File] = true
		var err error
		switch f.Role {
		case RoleCheckpoint:
			_, err = s.CheckpointPath(f.Name)
		case RoleCalibration:
			_, err = s.Calibration()
		default:
			_, err = s.Tensor(f.Name)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	// A model set's tap limits derive from its calibration: one without (made before it
	// existed) cannot be judged and is reported with the command that regenerates it.
	if _, listed := s.File(CalibrationName); (s.Manifest.Kind == KindModel || s.Manifest.Kind == KindBatch) && !listed {
		_, err := s.Calibration()
		errs = append(errs, err)
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if !listed[e.Name()] {
			errs = append(errs, fmt.Errorf("%s: not listed in %s (a set directory may hold only the files its manifest lists)",
				filepath.Join(s.Dir, e.Name()), ManifestName))
		}
	}
	return errors.Join(errs...)
}

// CheckpointPath returns the path of a checkpoint file after checking that its bytes hash to
// the manifest's sha256. The file is streamed, so multi-gigabyte checkpoints cost no memory.
func (s *Set) CheckpointPath(name string) (string, error) {
	f, ok := s.File(name)
	if !ok || f.Role != RoleCheckpoint {
		return "", fmt.Errorf("%s: no checkpoint file named %q", s.manifestPath(), name)
	}
	path := filepath.Join(s.Dir, f.File)
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: missing (listed in %s as %q); regenerate with %s", path, ManifestName, name, s.regenerateHint())
	}
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return "", fmt.Errorf("%s: sha256 mismatch: manifest says %s, file has %s; the set is corrupt or stale: regenerate with %s",
			path, f.SHA256, got, s.regenerateHint())
	}
	return path, nil
}
