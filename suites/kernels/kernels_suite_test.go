package kernels_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/compare"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

func TestKernels(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Kernel conformance")
}

var (
	dev  backend.Backend
	tols *compare.Tolerances
)

var _ = harness.AbortOnHang()

var _ = BeforeSuite(func() {
	dev = harness.OpenBackend()
	var err error
	tols, err = harness.Tolerances()
	Expect(err).NotTo(HaveOccurred())
})
