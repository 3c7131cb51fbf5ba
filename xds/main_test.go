package xds

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A benchmark runs its clients in a copy of this binary (see
	// bench_test.go).
	if js := os.Getenv(fleetEnv); js != "" {
		var spec fleetSpec
		err := json.Unmarshal([]byte(js), &spec)
		if err == nil {
			err = runFleet(spec, os.Stdin, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "client fleet:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
