package cuda

import (
	"strings"
	"testing"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

func TestParseRecordedPaths(t *testing.T) {
	got, err := parseRecordedPaths("rope\trope_kernel<true, __nv_bfloat16>\t3\ngemm\tcublasGemmEx\t1\nrope\tfault:position\t2\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[backend.PathKey]int64{
		{Op: "rope", What: "rope_kernel<true, __nv_bfloat16>"}: 3,
		{Op: "gemm", What: "cublasGemmEx"}:                     1,
		{Op: "rope", What: "fault:position"}:                   2,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: got %d, want %d", k, got[k], n)
		}
	}
	if got, err := parseRecordedPaths(""); err != nil || len(got) != 0 {
		t.Errorf("empty text: got %v, %v", got, err)
	}
	for _, bad := range []string{"rope\trope_kernel<true>\n", "rope\tk\tx\n", "rope\tk\t0\n", "\tk\t1\n", "a\tb\tc\t1\n"} {
		if _, err := parseRecordedPaths(bad); err == nil || !strings.Contains(err.Error(), "ts_recorded_paths line 1") {
			t.Errorf("%q: want an error naming the line, got %v", bad, err)
		}
	}
}

func TestPathCoverage(t *testing.T) {
	table := []KernelPath{
		{Op: "rope", What: "rope_kernel<true>", When: "rope_dim/2 % 8 == 0"},
		{Op: "rope", What: "rope_kernel<false>", When: "otherwise"},
		{Op: "gemm", What: "cublasGemmEx", When: "always"},
	}
	rec := map[backend.PathKey]int64{
		{Op: "rope", What: "rope_kernel<true>"}: 4,
		{Op: "rope", What: "rope_kernel<2>"}:    1, // unlisted
		{Op: "softmax", What: "other"}:          1, // op not in scope
	}
	missing, unlisted := PathCoverage(table, rec, []string{"rope", "gemm"})
	if len(missing) != 2 || missing[0].What != "cublasGemmEx" || missing[1].What != "rope_kernel<false>" {
		t.Errorf("missing = %v", missing)
	}
	if len(unlisted) != 1 || unlisted[0].What != "rope_kernel<2>" {
		t.Errorf("unlisted = %v", unlisted)
	}
	missing, unlisted = PathCoverage(table, rec, []string{"softmax"})
	if len(missing) != 0 || len(unlisted) != 1 {
		t.Errorf("softmax only: missing %v, unlisted %v", missing, unlisted)
	}
}

// A row with the storage-type placeholder becomes its fp16 and its bf16 instance; others stay.
func TestWithStorageTwins(t *testing.T) {
	got := withStorageTwins([]KernelPath{
		{Op: "gemm", What: "gemv_kernel<1, ts::GemvBiasStore<{T}>, {T}>", When: "m == 1"},
		{Op: "gemm", What: "cublasGemmEx", When: "no bias"},
	})
	want := []KernelPath{
		{Op: "gemm", What: "gemv_kernel<1, ts::GemvBiasStore<__half>, __half>", When: "m == 1"},
		{Op: "gemm", What: "gemv_kernel<1, ts::GemvBiasStore<__nv_bfloat16>, __nv_bfloat16>", When: "bf16 storage (TS_BF16), m == 1"},
		{Op: "gemm", What: "cublasGemmEx", When: "no bias"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// The table names every op of the library, each path once, each with its condition; every
// 16-bit kernel has its fp16 and its bf16 instance.
func TestKernelPathTable(t *testing.T) {
	known := map[string]bool{"sample": true, "philox": true}
	for _, op := range LoadTimeOps {
		known[op] = true
	}
	for _, op := range backend.Ops {
		known[op] = true
	}
	seen := map[backend.PathKey]bool{}
	perOp := map[string]int{}
	for _, p := range KernelPaths {
		if !known[p.Op] {
			t.Errorf("%v: unknown op", p)
		}
		if p.What == "" || p.When == "" {
			t.Errorf("%v: a path needs its name and its condition", p)
		}
		if seen[p.Key()] {
			t.Errorf("%v: listed twice", p)
		}
		seen[p.Key()] = true
		perOp[p.Op]++
		if strings.Contains(p.What, storageType) {
			t.Errorf("%v: the storage-type placeholder was not expanded", p)
		}
	}
	for _, p := range KernelPaths {
		for _, pair := range [][2]string{{"__half", "__nv_bfloat16"}, {"__nv_bfloat16", "__half"}} {
			if strings.Contains(p.What, pair[0]) {
				twin := backend.PathKey{Op: p.Op, What: strings.ReplaceAll(p.What, pair[0], pair[1])}
				if !seen[twin] {
					t.Errorf("%v: no %s twin (%s): write the row once with %s", p, pair[1], twin.What, storageType)
				}
			}
		}
	}
	for op := range known {
		if perOp[op] == 0 {
			t.Errorf("op %s has no path in KernelPaths", op)
		}
	}
}

// RecordPaths and RecordedPaths reach the library (the fake returns FAKETS_PATHS).
func TestRecordedPathsThroughTheLibrary(t *testing.T) {
	b := openFake(t)
	t.Setenv("FAKETS_PATHS", "rmsnorm\trmsnorm_vec_kernel<4, float, __half>\t2\n")
	if err := b.RecordPaths(true); err != nil {
		t.Fatal(err)
	}
	got, err := b.RecordedPaths()
	if err != nil {
		t.Fatal(err)
	}
	if got[backend.PathKey{Op: "rmsnorm", What: "rmsnorm_vec_kernel<4, float, __half>"}] != 2 || len(got) != 1 {
		t.Errorf("got %v", got)
	}
	if err := b.RecordPaths(false); err != nil {
		t.Fatal(err)
	}
	var sawOn, sawOff bool
	for _, c := range calls(t) {
		sawOn = sawOn || c == "ts_record_paths on=1"
		sawOff = sawOff || c == "ts_record_paths on=0"
	}
	if !sawOn || !sawOff {
		t.Errorf("calls: %v", calls(t))
	}
	t.Setenv("FAKETS_PATHS", "garbage\n")
	if _, err := b.RecordedPaths(); err == nil {
		t.Error("a malformed line must be an error")
	}
}
