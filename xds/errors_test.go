package xds

import (
	"errors"
	"reflect"
	"testing"
)

// TestPublicErr checks that the Server reports each failure the core
// records as its public error, every field carried over and the message
// the same, and the host's errors as they are.
func TestPublicErr(t *testing.T) {
	hostErr := errors.New("generator failed")
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"dangling reference",
			&refError{fromType: string(RouteType), from: "r0", toType: string(ClusterType), to: "c1"},
			&ReferenceError{FromType: RouteType, From: "r0", ToType: ClusterType, To: "c1"}},
		{"dangling until the client holds it",
			&refError{fromType: string(ListenerType), from: "l0", toType: string(ClusterType), to: "c1", rejected: true},
			&ReferenceError{FromType: ListenerType, From: "l0", ToType: ClusterType, To: "c1", Rejected: true}},
		{"removal held back by the configuration",
			&refError{fromType: string(RouteType), from: "r0", toType: string(ClusterType), to: "c0", removal: true},
			&ReferenceError{FromType: RouteType, From: "r0", ToType: ClusterType, To: "c0", Removal: true}},
		{"removal held back, rejected",
			&refError{fromType: string(ListenerType), from: "l0", toType: string(RouteType), to: "r0", removal: true, rejected: true},
			&ReferenceError{FromType: ListenerType, From: "l0", ToType: RouteType, To: "r0", Removal: true, Rejected: true}},
		{"removal held back by a subscription",
			&refError{fromType: string(RouteType), toType: string(ClusterType), to: "c0", removal: true, rejected: true},
			&ReferenceError{FromType: RouteType, ToType: ClusterType, To: "c0", Removal: true, Rejected: true}},
		{"state too large",
			&tooLargeError{typ: string(ClusterType), bytes: 5000, max: 4096},
			&ResponseTooLargeError{Type: ClusterType, Bytes: 5000, Max: 4096}},
		{"resource too large",
			&tooLargeError{typ: string(EndpointType), resource: "big", bytes: 9000, max: 4096},
			&ResponseTooLargeError{Type: EndpointType, Resource: "big", Bytes: 9000, Max: 4096}},
		{"host error", hostErr, hostErr},
		{"timeout", ErrGenerateTimeout, ErrGenerateTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := publicErr(tt.err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("publicErr(%#v) = %#v; want %#v", tt.err, got, tt.want)
			}
			if got.Error() != tt.err.Error() {
				t.Errorf("message %q; the core's was %q", got.Error(), tt.err.Error())
			}
		})
	}
}
