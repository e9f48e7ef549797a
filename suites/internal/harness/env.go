package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	. "github.com/onsi/ginkgo/v2"

	"github.com/touchstone-llm/touchstone/engine/backend"
	_ "github.com/touchstone-llm/touchstone/engine/backend/cpu"  // the always-available backend
	"github.com/touchstone-llm/touchstone/engine/backend/cuda"   // dlopens libtouchstone_cuda.so when asked for
	_ "github.com/touchstone-llm/touchstone/engine/backend/exec" // TOUCHSTONE_BACKEND=exec:<command>
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/golden"
	"github.com/touchstone-llm/touchstone/engine/model"
)

// OpenBackend selects the backend from TOUCHSTONE_BACKEND / TOUCHSTONE_REQUIRE_GPU and
// records the choice in the report. A failure to get the backend asked for fails the
// suite: a GPU runner must never pass by testing nothing.
func OpenBackend() backend.Backend {
	// Under ginkgo -p each process opens its own GPU (device (p-1) mod count unless
	// TOUCHSTONE_DEVICE names one).
	sel, err := backend.ForProcess(GinkgoParallelProcess())
	if err != nil {
		Fail("backend selection: " + err.Error())
	}
	info := sel.Backend.Info()
	name := info.Name
	if info.Backend == "cuda" {
		// Which GPU this process runs on: under ginkgo -p each process picks its own.
		name = fmt.Sprintf("%s, device %d, Ginkgo process %d", name, info.Index, GinkgoParallelProcess())
	}
	AddReportEntry("backend", fmt.Sprintf("%s: %s (requested %s, unsupported cases: %s)", info.Backend, name, sel.Requested, UnsupportedPolicy()), ReportEntryVisibilityAlways)
	if sel.Fallback != "" {
		fmt.Fprintf(GinkgoWriter, "TOUCHSTONE_BACKEND=auto fell back to cpu: %s\n", sel.Fallback)
	}
	// Cleanups run last-registered first: Close is registered before the memory check so
	// the check still sees an open backend.
	DeferCleanup(func() error {
		// after a hang the backend refuses even Close; the hung spec has failed already
		if err := sel.Backend.Close(); err != nil && !errors.Is(err, backend.ErrHang) {
			return err
		}
		return nil
	})
	trackDeviceMemory(sel.Backend)
	return sel.Backend
}

// UnsupportedPolicy reads TOUCHSTONE_UNSUPPORTED: skip (the default) or fail. A value that
// is neither fails the spec rather than quietly skipping: dist/run sets fail on GPU CI.
func UnsupportedPolicy() conformance.UnsupportedPolicy {
	p, err := conformance.ParseUnsupportedPolicy(os.Getenv(conformance.EnvUnsupported))
	if err != nil {
		Fail(conformance.EnvUnsupported + "=" + err.Error())
	}
	return p
}

// Unsupported reports whether err is the unsupported verdict under TOUCHSTONE_UNSUPPORTED:
// the backend does not implement the request (backend.ErrUnsupported) and the policy does
// not make that a failure.
func Unsupported(err error) bool { return UnsupportedPolicy().Skips(err) }

// SkipUnsupported applies the one unsupported rule to the error of running a case: the
// spec is skipped with "unsupported: <reason>", neither passed nor failed, or, under
// TOUCHSTONE_UNSUPPORTED=fail, fails saying so. Any other error (or nil) is left to the
// caller's Expect.
func SkipUnsupported(err error) {
	if !errors.Is(err, backend.ErrUnsupported) {
		return
	}
	if Unsupported(err) {
		Skip("unsupported: "+err.Error(), 1)
	}
	Fail(fmt.Sprintf("unsupported, and %s=fail: %v", conformance.EnvUnsupported, err), 1)
}

// SkipExternal skips a spec that does not apply to an external backend (TOUCHSTONE_BACKEND=
// exec:<command>), which runs whole golden cases through its adapter and nothing else: the
// specs of touchstone's own argument checks, memory accounting and kernel paths.
func SkipExternal(b backend.Backend, why string) {
	if _, ok := b.(backend.OpRunner); ok {
		Skip("not for an external backend: "+why, 1)
	}
}

// AbortOnHang registers, for every spec of the suite that calls it at the top level
// (`var _ = harness.AbortOnHang()`), a check after the spec: one that failed because a kernel
// did not finish (an error wrapping backend.ErrHang, whose message says "HANG: ") aborts the
// suite. The backend refuses every later call, so the other specs could only fail; the
// suite ends with its reports written, the hung spec named in them.
//
// A call that never returns at all (a launch blocked behind a hung kernel) cannot fail its
// spec: the CUDA backend's monitor hands it to the handler set here, which interrupts the
// process as Ctrl-C would. Ginkgo then marks the spec interrupted, gives it its grace period
// (--grace-period), runs the cleanup, where the check finds the hang and aborts the suite
// with it, and writes the reports.
func AbortOnHang() bool {
	registerStuck.Do(func() {
		cuda.OnStuck(func(err error) {
			stuck.Store(&err)
			fmt.Fprintf(os.Stderr, "\n%v\n(interrupting the suite: its reports are written after the grace period)\n", err)
			syscall.Kill(os.Getpid(), syscall.SIGINT)
		})
	})
	BeforeEach(func() {
		if resumeSkips()[CurrentSpecReport().FullText()] {
			Skip(conformance.ResumeSkipMessage)
		}
	})
	AfterEach(func() {
		const note = "\n(the backend refuses every later call: the suite stops at this spec, " +
			"and dist/run restarts it without the specs already reported)"
		if e := stuck.Load(); e != nil {
			AbortSuite((*e).Error() + note)
		}
		r := CurrentSpecReport()
		if r.Failed() && strings.Contains(r.Failure.Message, backend.HangMarker) {
			// AbortSuite's message replaces the spec's failure: keep the hang's own in it.
			AbortSuite(r.Failure.Message + note)
		}
	})
	return true
}

var (
	registerStuck sync.Once
	// stuck is the hang of a call that never returned (cuda.OnStuck).
	stuck atomic.Pointer[error]
)

var resumeSkips = sync.OnceValue(func() map[string]bool {
	path := os.Getenv(conformance.EnvResumeSkip)
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		Fail(conformance.EnvResumeSkip + ": " + err.Error())
	}
	skip := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" {
			skip[line] = true
		}
	}
	return skip
})

// InconclusivePolicy reads TOUCHSTONE_INCONCLUSIVE: skip (the default) or fail. A value that
// is neither fails the spec.
func InconclusivePolicy() conformance.InconclusivePolicy {
	p, err := conformance.ParseInconclusivePolicy(os.Getenv(conformance.EnvInconclusive))
	if err != nil {
		Fail(conformance.EnvInconclusive + "=" + err.Error())
	}
	return p
}

// Decided reports a token check's tally (its decisive steps) and applies the inconclusive
// rule to a check that passed: one that decided fewer than model.MinDecisiveShare of its steps
// is skipped with a message starting "inconclusive:", neither passed nor failed, or, under
// TOUCHSTONE_INCONCLUSIVE=fail, fails saying so. Call it after the check's own expectations,
// so a wrong token at a decisive step stays a failure.
func Decided(what string, t model.TokenTally) {
	AddReportEntry(what, t.String(), ReportEntryVisibilityAlways)
	if !t.Inconclusive() {
		return
	}
	msg := fmt.Sprintf("inconclusive: %s: %s", what, t)
	if InconclusivePolicy() == conformance.SkipInconclusive {
		Skip(msg, 1)
	}
	Fail(fmt.Sprintf("%s, and %s=fail", msg, conformance.EnvInconclusive), 1)
}

// trackDeviceMemory records device memory in use when the suite starts and, when it ends,
// fails the suite if any buffer is still allocated: a leak in a runner or a backend.
func trackDeviceMemory(b backend.Backend) {
	dm, ok := b.(backend.DeviceMemory)
	if !ok {
		return
	}
	before, err := dm.MemoryInUse()
	if err != nil {
		Fail("device memory in use: " + err.Error())
	}
	DeferCleanup(func() {
		after, err := dm.MemoryInUse()
		if errors.Is(err, backend.ErrHang) {
			// the hung spec failed already; the backend answers nothing more
			AddReportEntry("device memory", "not measured: "+err.Error(), ReportEntryVisibilityAlways)
			return
		}
		if err != nil {
			Fail("device memory in use: " + err.Error())
		}
		summary := fmt.Sprintf("device memory in use (the whole device, information only): %d bytes before the suite, %d after (library workspaces and cuBLAS included); this process's live buffers at the end: %d (%d bytes)",
			before, after, dm.LiveBuffers(), dm.LiveBytes())
		// Printed, not only a report entry: suite-level cleanup entries are not shown otherwise.
		fmt.Fprintln(os.Stdout, summary)
		AddReportEntry("device memory", summary, ReportEntryVisibilityAlways)
		if dm.LiveBuffers() != 0 || dm.LiveBytes() != 0 {
			Fail(fmt.Sprintf("%d device buffers (%d bytes) were never freed", dm.LiveBuffers(), dm.LiveBytes()))
		}
	})
}

var (
	goldenOnce sync.Once
	goldenRoot string
	goldenErr  error
)

// GoldenRoot locates golden/ (TOUCHSTONE_GOLDEN, or found above the working directory).
func GoldenRoot() (string, error) {
	goldenOnce.Do(func() { goldenRoot, goldenErr = golden.FindRoot() })
	return goldenRoot, goldenErr
}

// KernelSets discovers every kernel golden set, both tiers, at tree-construction time. A
// discovery error is returned with the sets that were found, for a spec to fail on.
func KernelSets() ([]*golden.Set, error) { return setsOfKind(golden.KindKernel) }

// ModelSets discovers every model golden set, both tiers, at tree-construction time.
func ModelSets() ([]*golden.Set, error) { return setsOfKind(golden.KindModel) }

// BatchSets discovers every batch golden set at tree-construction time.
func BatchSets() ([]*golden.Set, error) { return setsOfKind(golden.KindBatch) }

// SamplingSets discovers every sampling golden set at tree-construction time.
func SamplingSets() ([]*golden.Set, error) { return setsOfKind(golden.KindSampling) }

func setsOfKind(kind string) ([]*golden.Set, error) {
	root, err := GoldenRoot()
	if err != nil {
		return nil, err
	}
	all, err := golden.Discover(root)
	var sets []*golden.Set
	for _, s := range all {
		if s.Manifest.Kind == kind {
			sets = append(sets, s)
		}
	}
	return sets, err
}

// Tolerances loads golden/tolerances.yaml.
func Tolerances() (*compare.Tolerances, error) {
	root, err := GoldenRoot()
	if err != nil {
		return nil, err
	}
	return compare.LoadTolerances(filepath.Join(root, "tolerances.yaml"))
}

// TriageDir is where a failing spec writes its triage files (the HTML layer-diff report):
// TOUCHSTONE_REPORTS/triage (dist/run and make test set it to the reports directory), else a
// directory under the system's temporary one.
func TriageDir() string {
	if d := os.Getenv("TOUCHSTONE_REPORTS"); d != "" {
		return filepath.Join(d, "triage")
	}
	return filepath.Join(os.TempDir(), "touchstone-triage")
}
