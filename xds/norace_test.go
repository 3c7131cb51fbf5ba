//go:build !race

package xds_test

// raceEnabled reports whether the tests run under the race detector,
// which makes a fault run about four times as long (see TestFaultSeeds).
const raceEnabled = false
