package servers

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMaxPerWindow(t *testing.T) {
	const s = int64(time.Second)
	for _, tt := range []struct {
		name string
		ts   []int64
		want int
	}{
		{name: "none", want: 0},
		{name: "one", ts: []int64{5}, want: 1},
		{name: "together", ts: []int64{3, 3, 3}, want: 3},
		{name: "a second apart are apart", ts: []int64{0, s}, want: 1},
		{name: "just within a second", ts: []int64{0, s - 1}, want: 2},
		{name: "unsorted", ts: []int64{2 * s, 0, s / 2, 2*s + 1, s + s/2}, want: 3},
		{name: "the densest window is later", ts: []int64{0, 10 * s, 10*s + 1, 10*s + 2, 11 * s}, want: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxPerWindow(tt.ts, time.Second); got != tt.want {
				t.Errorf("maxPerWindow = %d; want %d", got, tt.want)
			}
		})
	}
}

func TestAdmissionLimit(t *testing.T) {
	for _, tt := range []struct {
		a    Admission
		want int
	}{
		{a: Admission{Rate: 400, Burst: 400}, want: 800},
		{a: Admission{Rate: 10.5, Burst: 1}, want: 11},
		{a: Admission{}, want: 0},
	} {
		if got := tt.a.Limit(); got != tt.want {
			t.Errorf("%+v.Limit() = %d; want %d", tt.a, got, tt.want)
		}
	}
}
