package tensor

import "errors"

// Classes of .npy decoding failure. Every error DecodeNPY returns wraps exactly one of them, so
// callers (and tests) can tell "regenerate the file" cases apart without matching on text.
var (
	ErrBadHeader        = errors.New("bad .npy header")
	ErrUnsupportedDType = errors.New("unsupported dtype")
	ErrFortranOrder     = errors.New("fortran_order is True")
	ErrBadShape         = errors.New("bad shape")
	ErrTruncated        = errors.New("truncated payload")
	ErrTrailingBytes    = errors.New("trailing bytes after payload")
)
