package main

import (
	"slices"
	"testing"
)

func TestParseBatches(t *testing.T) {
	got, err := parseBatches("1, 4,16")
	if err != nil || !slices.Equal(got, []int{1, 4, 16}) {
		t.Errorf("parseBatches(\"1, 4,16\") = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "65", "4,4", "x", "1,,2"} {
		if _, err := parseBatches(bad); err == nil {
			t.Errorf("parseBatches(%q): no error", bad)
		}
	}
}
