package xds

import "testing"

func TestTypeURLShort(t *testing.T) {
	tests := []struct {
		t    TypeURL
		want string
	}{
		{ClusterType, "CDS"},
		{EndpointType, "EDS"},
		{ListenerType, "LDS"},
		{RouteType, "RDS"},
		{SecretType, "SDS"},
		{ScopedRouteType, "SRDS"},
		{VirtualHostType, "VHDS"},
		{ExtensionConfigType, "ECDS"},
		{RuntimeType, "RTDS"},
		{"type.googleapis.com/example.Unknown", "type.googleapis.com/example.Unknown"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.t.Short(); got != tt.want {
				t.Errorf("TypeURL(%q).Short() = %q; want %q", tt.t, got, tt.want)
			}
		})
	}
}
