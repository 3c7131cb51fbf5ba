//go:build race

package xds_test

// raceEnabled reports whether the tests run under the race detector,
// which makes the long randomized tests (TestMakeBeforeBreakRandom,
// TestFault, TestFaultSeeds) run about four times as long. Under it they
// run shorter (see raceSized), long enough to put their concurrency to
// the race detector; .ci/run runs them at full size without it as well.
const raceEnabled = true
