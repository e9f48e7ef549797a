# touchstone — conformance harness for LLM inference kernels.
#
#   make check        conformance table on the best available backend (the CPU without a GPU)
#   make test         vet, formatting, unit tests and every Ginkgo suite on the CPU backend (CI)
#   make golden       regenerate the committed golden sets (needs tools/gen-golden/requirements.txt)
#   make golden-full  generate the full-scale tier into golden/.cache (GPU hosts)

SHELL        := bash
GO           ?= go
PYTHON       ?= python3
GINKGO       := $(GO) run github.com/onsi/ginkgo/v2/ginkgo
REPORTS      := build/reports
GINKGO_FLAGS ?= --randomize-all --fail-on-pending --fail-on-empty --keep-going \
                --junit-report=junit.xml --json-report=report.json --output-dir=$(REPORTS)
FUZZTIME     ?= 20s

.PHONY: check test vet fmt-check unit suites fuzz golden golden-full golden-check golden-verify clean

check:
	$(GO) run ./cmd/touchstone check

test: vet fmt-check unit suites

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test ./engine/... ./cmd/...

suites:
	@mkdir -p $(REPORTS)
	TOUCHSTONE_BACKEND=$${TOUCHSTONE_BACKEND:-cpu} $(GINKGO) -r $(GINKGO_FLAGS) suites

# Short coverage-guided runs of every parser of outside data.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeNPY -fuzztime=$(FUZZTIME) ./engine/tensor/
	$(GO) test -run='^$$' -fuzz=FuzzParseManifest -fuzztime=$(FUZZTIME) ./engine/golden/
	$(GO) test -run='^$$' -fuzz=FuzzParseTolerances -fuzztime=$(FUZZTIME) ./engine/compare/

golden:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden

golden-full:
	$(PYTHON) tools/gen-golden kernels --tier full --out golden/.cache

# Regenerates into a temporary directory and fails if any committed byte differs.
golden-check:
	$(PYTHON) tools/gen-golden kernels --tier committed --out golden --check

golden-verify:
	$(GO) run ./cmd/touchstone golden verify

clean:
	rm -rf build
