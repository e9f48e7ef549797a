package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// The Go build cache does not see changes to the C headers cgo includes (golang/go#24355): after
// an edit of touchstone.h, a cached build of this package keeps the old TS_ABI_VERSION and the
// old signatures, and then refuses a freshly built library as a mismatch (or worse, calls it
// with a stale signature). This test reads the header itself and fails with the fix.
func TestCompiledABIVersionIsTheHeaders(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "cuda", "include", "touchstone.h"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define TS_ABI_VERSION (\d+)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("cuda/include/touchstone.h defines no TS_ABI_VERSION")
	}
	header, _ := strconv.Atoi(string(m[1]))
	if header != abiVersion {
		t.Fatalf("this package was compiled against TS_ABI_VERSION %d, cuda/include/touchstone.h now says %d: "+
			"the Go build cache does not track cgo headers; run `go clean -cache` and build again", abiVersion, header)
	}
}
