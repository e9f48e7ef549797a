// Package tensor holds host-side tensors and reads and writes them as NumPy .npy files.
//
// The golden sets that define what a correct kernel computes are written by a Python script
// with numpy.save, so the .npy codec here is the boundary between the reference and the
// engine. It is deliberately narrow (little-endian f16, f32 and i32 in C order, the only
// layouts the golden format allows) and deliberately paranoid: a golden file that decodes to
// the wrong numbers would silently turn a broken kernel into a passing one.
package tensor
