package xdstp_test

import (
	"fmt"

	"github.com/xdspush/xdspush/xds/xdstp"
)

// Two spellings of one name compare equal once canonical.
func ExampleCanonical() {
	a, _ := xdstp.Canonical("xdstp://mesh/envoy.config.cluster.v3.Cluster/prod/10.0.0.1%3A8080?zone=a&region=eu")
	b, _ := xdstp.Canonical("XDSTP://mesh/envoy.config.cluster.v3.Cluster/prod/10.0.0.1:8080?region=eu&zone=a")
	fmt.Println(a)
	fmt.Println(a == b)
	// Output:
	// xdstp://mesh/envoy.config.cluster.v3.Cluster/prod/10.0.0.1:8080?region=eu&zone=a
	// true
}

// A glob collection holds every name of its type and authority one
// segment below it, with the same context parameters.
func ExampleName_Contains() {
	glob, _ := xdstp.Parse("xdstp://mesh/envoy.config.listener.v3.Listener/ns/*")
	l1, _ := xdstp.Parse("xdstp://mesh/envoy.config.listener.v3.Listener/ns/l1")
	other, _ := xdstp.Parse("xdstp://mesh/envoy.config.listener.v3.Listener/other/l1")
	fmt.Println(glob.Contains(l1), glob.Contains(other))
	fmt.Println(l1.Collection())
	// Output:
	// true false
	// xdstp://mesh/envoy.config.listener.v3.Listener/ns/*
}
