package testout_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/examples/internal/testout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWaitFor(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"at once", []string{"ready\n"}, "ready"},
		{"across writes", []string{"rea", "dy\n"}, "ready"},
		{"after others", []string{"starting\n", "ready\n"}, "ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testout.NewBuffer(time.Minute)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for _, w := range tt.writes {
					fmt.Fprint(b, w)
				}
			}()
			b.WaitFor(t, tt.want)
			<-done
		})
	}
}

func TestWaitForCount(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		n      int
	}{
		{"none asked", nil, 0},
		{"one of one", []string{"changed\n"}, 1},
		{"third across writes", []string{"changed\nchan", "ged\nother\n", "changed\n"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testout.NewBuffer(time.Minute)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for _, w := range tt.writes {
					fmt.Fprint(b, w)
				}
			}()
			b.WaitForCount(t, "changed", tt.n)
			<-done
			if got := b.Count("changed"); got != tt.n {
				t.Errorf("Count = %d after all writes; want %d", got, tt.n)
			}
		})
	}
}

func Example() {
	b := testout.NewBuffer(time.Minute)
	go fmt.Fprintln(b, "push version=1")
	b.WaitFor(&testing.T{}, "push version=")
	fmt.Print(b.String())
	// Output: push version=1
}
