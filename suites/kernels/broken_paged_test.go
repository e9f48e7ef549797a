package kernels_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/touchstone-llm/touchstone/engine/backend"
	"github.com/touchstone-llm/touchstone/engine/backend/cpu"
	"github.com/touchstone-llm/touchstone/engine/conformance"
	"github.com/touchstone-llm/touchstone/engine/tensor"
	"github.com/touchstone-llm/touchstone/suites/internal/harness"
)

// Tightness of paged decode: each variant reads the paged cache the way paged kernels go wrong
// at page boundaries (the block table read one entry off, the last partial page dropped, one
// slot past the length read); the committed cases must reject each. The variants corrupt what
// such a kernel would effectively read (the table, the lengths), then run the correct CPU op.
var _ = Describe("tolerance tightness", harness.Tightness, func() {
	DescribeTable("rejects a deliberately broken paged decode",
		func(bug pagedBug, mustCatch string) {
			expectRejectedBy("attention_decode_paged", setsOf("attention_decode_paged", "committed"), brokenPaged{cpu.New(), bug}, mustCatch)
		},
		Entry("attention_decode_paged: each position's page read from the next table entry", pagedBug{tableOffByOne: true}, "qwen2.5-0.5b_bs16_lens1-32-45"),
		Entry("attention_decode_paged: a sequence's last partial page dropped", pagedBug{dropLastPartial: true}, "gqa4_d128_bs16_len515"),
		Entry("attention_decode_paged: one slot past cache_lens read", pagedBug{pastLength: true}, "phi2-d80-gqa2"),
	)
	It("accepts the paged variant's host code without a bug", func() {
		sets := setsOf("attention_decode_paged", "committed")
		Expect(sets).NotTo(BeEmpty())
		for _, s := range sets {
			verdicts, err := conformance.Check(brokenPaged{cpu.New(), pagedBug{}}, s, tols)
			Expect(err).NotTo(HaveOccurred())
			for _, v := range verdicts {
				Expect(v.Pass()).To(BeTrue(), "%s output %s:\n%s", s.Manifest.Case, v.Output, v.Result.Table())
			}
		}
	})
})

// pagedBug says how a broken paged decode kernel misbehaves; the zero value is the contract.
type pagedBug struct {
	tableOffByOne, dropLastPartial, pastLength bool
}

type brokenPaged struct {
	*cpu.Backend
	bug pagedBug
}

func (k brokenPaged) AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens backend.Buffer, cfg backend.AttentionConfig) error {
	if err := backend.CheckAttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg); err != nil {
		return err
	}
	page, width := kCache.Shape()[1], blockTable.Shape()[1]
	lt, err := k.Download(cacheLens)
	if err != nil {
		return err
	}
	lens := lt.I32
	if k.bug.tableOffByOne {
		// Entry i of a sequence read where entry i - 1 belongs (wrapping within the pages its
		// length reaches: a kernel indexing the table with p / block_size + 1).
		if blockTable, err = mutated(k, blockTable, func(t *tensor.Tensor) {
			for b, n := range lens {
				used := (int(n) + page - 1) / page
				row := t.I32[b*width : b*width+used]
				first := row[0]
				copy(row, row[1:])
				row[used-1] = first
			}
		}); err != nil {
			return err
		}
		defer blockTable.Free()
	}
	if k.bug.dropLastPartial || k.bug.pastLength {
		if cacheLens, err = mutated(k, cacheLens, func(t *tensor.Tensor) {
			for i, n := range t.I32 {
				part := int(n) % page
				switch {
				case k.bug.dropLastPartial && part != 0 && int(n) > page:
					t.I32[i] = n - int32(part)
				case k.bug.pastLength && part != 0:
					// the next slot of the same page: a position a correct kernel never reads
					t.I32[i] = n + 1
				}
			}
		}); err != nil {
			return err
		}
		defer cacheLens.Free()
	}
	return k.Backend.AttentionDecodePaged(out, q, kCache, vCache, blockTable, cacheLens, cfg)
}
