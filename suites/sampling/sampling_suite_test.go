package sampling_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

func TestSampling(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Seeded sampling")
}

var dev backend.Backend

var _ = harness.AbortOnHang()

var _ = BeforeSuite(func() {
	dev = harness.OpenBackend()
})
