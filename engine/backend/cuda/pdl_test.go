package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every kernel of the CUDA library is launched with programmatic dependent launch (PDL,
// cuda/internal.h): it may start while the kernel before it on the stream is still finishing,
// so its first statement must be the wait for that kernel (ts::pdl_wait). A kernel that touched
// its inputs before the wait would read half-written data, and only now and then: the race
// would not show reliably in a test of the results, so this checks the sources.

// kernelPrologueOK says whether a kernel body (the text after its opening brace) starts with
// the PDL wait (comments may come before it).
func kernelPrologueOK(body string) bool {
	s := body
	for {
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "/*"):
			end := strings.Index(s, "*/")
			if end < 0 {
				return false
			}
			s = s[end+2:]
		case strings.HasPrefix(s, "//"):
			end := strings.Index(s, "\n")
			if end < 0 {
				return false
			}
			s = s[end+1:]
		default:
			return strings.HasPrefix(s, "ts::pdl_wait();")
		}
	}
}

// kernelBody is one __global__ function: its name and the text after its opening brace.
type kernelBody struct{ name, body string }

// kernelBodies returns the __global__ functions of C++/CUDA source (declarations in comments
// are skipped; __launch_bounds__ and __cluster_dims__ are not names).
func kernelBodies(src string) []kernelBody {
	call := regexp.MustCompile(`(\w+)\s*\(`)
	var out []kernelBody
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if !strings.Contains(t, "__global__") || strings.HasPrefix(t, "*") || strings.HasPrefix(t, "/") {
			continue
		}
		rest := strings.Join(lines[i:], "\n")
		brace := strings.Index(rest, "{")
		if brace < 0 {
			continue
		}
		name := ""
		for _, m := range call.FindAllStringSubmatch(rest[:brace], -1) {
			if m[1] != "__launch_bounds__" && m[1] != "__cluster_dims__" {
				name = m[1]
				break
			}
		}
		if name != "" {
			out = append(out, kernelBody{name, rest[brace+1:]})
		}
	}
	return out
}

func TestKernelPrologueCheck(t *testing.T) {
	src := `
/* a comment naming __global__ void commented(int) { x; } */
__global__ void good(int *x) {
    ts::pdl_wait();
    x[0] = 1;
}
template <int MR>
__global__ void __launch_bounds__(256)
    bounded(int *x) {
    /* why */
    ts::pdl_wait();
}
__global__ void late(int *x) {
    const int v = x[0];
    ts::pdl_wait();
}
__global__ void none(int *x) { x[0] = 1; }
`
	want := []struct {
		name string
		ok   bool
	}{{"good", true}, {"bounded", true}, {"late", false}, {"none", false}}
	bodies := kernelBodies(src)
	if len(bodies) != len(want) {
		t.Fatalf("found %d kernels, want %d: %v", len(bodies), len(want), bodies)
	}
	for i, w := range want {
		if bodies[i].name != w.name {
			t.Errorf("kernel %d: name %q, want %q", i, bodies[i].name, w.name)
		}
		if got := kernelPrologueOK(bodies[i].body); got != w.ok {
			t.Errorf("%s: prologue ok = %v, want %v", w.name, got, w.ok)
		}
	}
}

func TestEveryKernelWaitsForItsPredecessor(t *testing.T) {
	root := filepath.Join("..", "..", "..", "cuda")
	var files []string
	for _, pat := range []string{"*.cu", "*.cuh", "kernels/*.cu"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	kernels := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kernelBodies(string(src)) {
			kernels++
			if !kernelPrologueOK(k.body) {
				t.Errorf("%s: kernel %s does not begin with ts::pdl_wait(): it is launched "+
					"with programmatic dependent launch and may otherwise read its inputs before the kernel "+
					"before it has written them (cuda/internal.h)", f, k.name)
			}
		}
	}
	t.Logf("%d kernels checked", kernels)
	if kernels < 30 {
		t.Fatalf("found %d kernels under %s: the source layout changed, update this test", kernels, root)
	}
}
