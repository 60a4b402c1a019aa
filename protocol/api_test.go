package protocol

import (
	"slices"
	"testing"
)

func TestRolloutPhaseSizes(t *testing.T) {
	for _, c := range []struct {
		phases  []int
		targets int
		want    []int
	}{
		{[]int{1, 10, 50, 100}, 10, []int{1, 0, 4, 5}},
		{[]int{1, 10, 50, 100}, 1000, []int{10, 90, 400, 500}},
		{[]int{1, 10, 50, 100}, 0, []int{0, 0, 0, 0}},
		{[]int{100}, 7, []int{7}},
		{[]int{33, 66, 100}, 3, []int{1, 1, 1}},
	} {
		if got := RolloutPhaseSizes(c.phases, c.targets); !slices.Equal(got, c.want) {
			t.Errorf("RolloutPhaseSizes(%v, %d) = %v, want %v", c.phases, c.targets, got, c.want)
		}
	}
}
