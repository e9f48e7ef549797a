// Package golden reads golden sets: the directories of .npy tensors plus manifest.json that a
// Python reference writes and that every kernel conformance check is judged against.
//
// docs/golden-format.md is the contract. This side of it is strict on purpose: a set that is
// stale, corrupt or only half understood must fail loudly, because a reference that quietly
// decodes to the wrong thing turns broken kernels into passing ones.
package golden
