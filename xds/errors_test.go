package xds

import (
	"errors"
	"reflect"
	"testing"

	"github.com/xdspush/xdspush/internal/session"
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
			&session.RefError{FromType: string(RouteType), From: "r0", ToType: string(ClusterType), To: "c1"},
			&ReferenceError{FromType: RouteType, From: "r0", ToType: ClusterType, To: "c1"}},
		{"dangling until the client holds it",
			&session.RefError{FromType: string(ListenerType), From: "l0", ToType: string(ClusterType), To: "c1", Rejected: true},
			&ReferenceError{FromType: ListenerType, From: "l0", ToType: ClusterType, To: "c1", Rejected: true}},
		{"removal held back by the configuration",
			&session.RefError{FromType: string(RouteType), From: "r0", ToType: string(ClusterType), To: "c0", Removal: true},
			&ReferenceError{FromType: RouteType, From: "r0", ToType: ClusterType, To: "c0", Removal: true}},
		{"removal held back, rejected",
			&session.RefError{FromType: string(ListenerType), From: "l0", ToType: string(RouteType), To: "r0", Removal: true, Rejected: true},
			&ReferenceError{FromType: ListenerType, From: "l0", ToType: RouteType, To: "r0", Removal: true, Rejected: true}},
		{"removal held back by a subscription",
			&session.RefError{FromType: string(RouteType), ToType: string(ClusterType), To: "c0", Removal: true, Rejected: true},
			&ReferenceError{FromType: RouteType, ToType: ClusterType, To: "c0", Removal: true, Rejected: true}},
		{"state too large",
			&session.TooLargeError{Type: string(ClusterType), Bytes: 5000, Max: 4096},
			&ResponseTooLargeError{Type: ClusterType, Bytes: 5000, Max: 4096}},
		{"resource too large",
			&session.TooLargeError{Type: string(EndpointType), Resource: "big", Bytes: 9000, Max: 4096},
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
