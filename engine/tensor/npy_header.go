package tensor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

const (
	npyMagic = "\x93NUMPY"
	// npyPrefixLen covers the magic and the two version bytes, before the header length.
	npyPrefixLen = len(npyMagic) + 2
	// npyAlign and npyGrowthDigits mirror numpy's ARRAY_ALIGN and GROWTH_AXIS_MAX_DIGITS: the
	// padding they produce is part of what makes EncodeNPY byte-identical to numpy.save.
	npyAlign        = 64
	npyGrowthDigits = 21
	// npyMaxHeader bounds a version 2.0 header (whose length field is 32-bit) so a hostile
	// length cannot force a large allocation; numpy itself refuses headers over 10000 bytes.
	npyMaxHeader = 1 << 20
	// npyMaxDims is numpy's own limit (NPY_MAXDIMS in numpy 2).
	npyMaxDims = 64
	// npyMaxPayload rejects shapes no golden file could plausibly have before any
	// arithmetic on them can overflow.
	npyMaxPayload = int64(1) << 40
)

// bf16 travels as '<u2', its raw bits: numpy has no bfloat16, and no golden file holds real
// uint16 data, so the descr is unambiguous (a manifest must still say "bf16" for it).
//
// FP8 travels as '|u1', its raw bytes, and decodes as U8: only the manifest knows whether the
// bytes are f8e4m3 or f8e5m2 (golden.Set.Tensor relabels them).
var npyDescr = map[string]DType{"<f2": F16, "<f4": F32, "<i4": I32, "<u2": BF16, "|u1": U8}

func npyDescrOf(dt DType) string {
	switch dt {
	case F16:
		return "<f2"
	case F32:
		return "<f4"
	case I32:
		return "<i4"
	case BF16:
		return "<u2"
	case F8E4M3, F8E5M2, U8:
		return "|u1"
	}
	return ""
}

// npyHeader is the parsed header dictionary, before any semantic checks.
type npyHeader struct {
	descr   string
	fortran bool
	shape   []int
}

// parseNPYHeader is a strict parser for the Python dict literal numpy writes, e.g.
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   \n". It exists because
// npyio's parser slices the header by the positions of its keys and panics or misreads on
// input that is not laid out exactly as numpy writes it; everything is validated here first.
func parseNPYHeader(h []byte) (npyHeader, error) {
	var hdr npyHeader
	if len(h) == 0 || h[len(h)-1] != '\n' {
		return hdr, fmt.Errorf("%w: header does not end in a newline", ErrBadHeader)
	}
	for i, c := range h[:len(h)-1] {
		if c < 0x20 || c > 0x7e {
			return hdr, fmt.Errorf("%w: non-printable byte 0x%02x at header offset %d", ErrBadHeader, c, i)
		}
	}
	p := &headerParser{s: string(h[:len(h)-1])}
	seen := map[string]bool{}
	p.space()
	if !p.eat('{') {
		return hdr, p.errorf("want '{'")
	}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return hdr, err
		}
		if seen[key] {
			return hdr, p.errorf("duplicate key %q", key)
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return hdr, p.errorf("want ':' after key %q", key)
		}
		p.space()
		switch key {
		case "descr":
			if hdr.descr, err = p.str(); err != nil {
				return hdr, fmt.Errorf("%w (descr must be a plain string: %w)", ErrUnsupportedDType, err)
			}
		case "fortran_order":
			hdr.fortran, err = p.boolean()
		case "shape":
			hdr.shape, err = p.tuple()
		default:
			return hdr, p.errorf("unexpected key %q", key)
		}
		if err != nil {
			return hdr, err
		}
		p.space()
		if p.eat('}') {
			break
		}
		if !p.eat(',') {
			return hdr, p.errorf("want ',' or '}'")
		}
	}
	p.space()
	if p.i != len(p.s) {
		return hdr, p.errorf("unexpected text after '}'")
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return hdr, fmt.Errorf("%w: missing key %q", ErrBadHeader, k)
		}
	}
	return hdr, nil
}

type headerParser struct {
	s string
	i int
}

func (p *headerParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at header offset %d", ErrBadHeader, fmt.Sprintf(format, args...), p.i)
}

func (p *headerParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *headerParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a quoted string without escapes; no key or supported descr needs one.
func (p *headerParser) str() (string, error) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", p.errorf("want a quoted string")
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", p.errorf("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.IndexByte(v, '\\') >= 0 {
		return "", p.errorf("escape in string")
	}
	p.i += end + 2
	return v, nil
}

func (p *headerParser) boolean() (bool, error) {
	for _, lit := range []string{"True", "False"} {
		if strings.HasPrefix(p.s[p.i:], lit) {
			p.i += len(lit)
			return lit == "True", nil
		}
	}
	return false, p.errorf("fortran_order is not True or False")
}

// tuple reads a Python tuple of ints. "(4)" is refused: in Python it is the int 4, and numpy
// rejects a shape that is not a tuple.
func (p *headerParser) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, p.errorf("shape is not a tuple")
	}
	shape := []int{}
	for {
		p.space()
		if p.eat(')') {
			if len(shape) == 1 && !strings.HasSuffix(strings.TrimRight(p.s[:p.i-1], " \t"), ",") {
				return nil, p.errorf("shape (n) is not a tuple (want (n,))")
			}
			return shape, nil
		}
		if len(shape) >= npyMaxDims {
			return nil, fmt.Errorf("%w: more than %d dimensions", ErrBadShape, npyMaxDims)
		}
		d, err := p.dim()
		if err != nil {
			return nil, err
		}
		shape = append(shape, d)
		p.space()
		if p.eat(',') {
			continue
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, p.errorf("want ',' or ')' in shape")
		}
	}
}

func (p *headerParser) dim() (int, error) {
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits {
		return 0, p.errorf("want an integer in shape")
	}
	tok := p.s[start:p.i]
	if tok[0] == '-' {
		return 0, fmt.Errorf("%w: negative dimension %s", ErrBadShape, tok)
	}
	d, err := strconv.ParseInt(tok, 10, 64)
	if err != nil || d > math.MaxInt {
		return 0, fmt.Errorf("%w: dimension %s out of range", ErrBadShape, tok)
	}
	return int(d), nil
}

// payloadBytes returns the payload size a validated header implies, refusing sizes beyond
// npyMaxPayload so that nothing downstream can overflow or attempt a huge allocation.
func payloadBytes(dt DType, shape []int) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension in %s", ErrBadShape, ShapeString(shape))
		}
	}
	if slices.Contains(shape, 0) {
		return 0, nil
	}
	limit := npyMaxPayload / int64(dt.Size())
	n := int64(1)
	for _, d := range shape {
		if int64(d) > limit/n {
			return 0, fmt.Errorf("%w: %s is absurdly large (over %d bytes)", ErrBadShape, ShapeString(shape), npyMaxPayload)
		}
		n *= int64(d)
	}
	return n * int64(dt.Size()), nil
}

// formatNPYHeader returns everything numpy.save writes before the data, for format 1.0.
func formatNPYHeader(dt DType, shape []int) ([]byte, error) {
	descr := npyDescrOf(dt)
	if descr == "" {
		return nil, fmt.Errorf("cannot encode dtype %v", dt)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, pyTuple(shape))
	if len(shape) > 0 {
		b.WriteString(strings.Repeat(" ", max(0, npyGrowthDigits-len(strconv.Itoa(shape[0])))))
	}
	hlen := b.Len() + 1
	pad := npyAlign - (npyPrefixLen+2+hlen)%npyAlign
	if hlen+pad > math.MaxUint16 {
		return nil, errors.New("header too long for .npy format 1.0")
	}
	out := make([]byte, 0, npyPrefixLen+2+hlen+pad)
	out = append(out, npyMagic...)
	out = append(out, 1, 0, byte(hlen+pad), byte((hlen+pad)>>8))
	out = append(out, b.String()...)
	for range pad {
		out = append(out, ' ')
	}
	return append(out, '\n'), nil
}

// pyTuple formats a shape as Python's repr of a tuple does: "()", "(4,)", "(2, 3)".
func pyTuple(shape []int) string {
	switch len(shape) {
	case 0:
		return "()"
	case 1:
		return "(" + strconv.Itoa(shape[0]) + ",)"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.Itoa(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
