package redact_test

import (
	"bytes"
	"errors"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdspush/xdspush/internal/redact"
)

// Secret material of the fixtures: none of it may survive redaction.
var secrets = []string{"PRIVATE-KEY", "PASSWORD", "PKCS12", "TICKET-KEY-1", "TICKET-KEY-2", "GENERIC", "HMAC", "PROVIDER-KEY"}

func inlineBytes(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(s)}}
}

func inlineString(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
}

func file(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func redacted() *corev3.DataSource { return inlineString(redact.Marker) }

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func certificate(key *corev3.DataSource) *tlsv3.TlsCertificate {
	return &tlsv3.TlsCertificate{CertificateChain: inlineString("CERTIFICATE-CHAIN"), PrivateKey: key}
}

func listenerWith(t *testing.T, tls *tlsv3.DownstreamTlsContext) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: "https",
		FilterChains: []*listenerv3.FilterChain{{
			Name: "tls",
			TransportSocket: &corev3.TransportSocket{
				Name:       "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, tls)},
			},
		}},
	}
}

func clusterWith(t *testing.T, tls *tlsv3.UpstreamTlsContext) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name: "backend",
		TransportSocket: &corev3.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, tls)},
		},
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		name string
		in   func(t *testing.T) proto.Message
		want func(t *testing.T) proto.Message // nil: unchanged
	}{{
		name: "certificate: private key, password and PKCS#12; the chain stays",
		in: func(*testing.T) proto.Message {
			c := certificate(inlineBytes("PRIVATE-KEY"))
			c.Password, c.Pkcs12 = inlineString("PASSWORD"), inlineBytes("PKCS12")
			return &tlsv3.Secret{Name: "cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: c}}
		},
		want: func(*testing.T) proto.Message {
			c := certificate(redacted())
			c.Password, c.Pkcs12 = redacted(), redacted()
			return &tlsv3.Secret{Name: "cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: c}}
		},
	}, {
		name: "a private key in a file is named, not held: it stays",
		in: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: certificate(file("/etc/key.pem"))}}
		},
	}, {
		name: "session ticket keys",
		in: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "stek", Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
				Keys: []*corev3.DataSource{inlineBytes("TICKET-KEY-1"), inlineBytes("TICKET-KEY-2")},
			}}}
		},
		want: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "stek", Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
				Keys: []*corev3.DataSource{redacted(), redacted()},
			}}}
		},
	}, {
		name: "generic secrets, an HMAC key among them",
		in: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
				Secret:  inlineString("GENERIC"),
				Secrets: map[string]*corev3.DataSource{"hmac": inlineBytes("HMAC")},
			}}}
		},
		want: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
				Secret:  redacted(),
				Secrets: map[string]*corev3.DataSource{"hmac": redacted()},
			}}}
		},
	}, {
		name: "a validation context holds nothing secret",
		in: func(*testing.T) proto.Message {
			return &tlsv3.Secret{Name: "ca", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: inlineString("CA-BUNDLE"),
			}}}
		},
	}, {
		name: "a listener's DownstreamTlsContext, inside its transport socket's Any",
		in: func(t *testing.T) proto.Message {
			return listenerWith(t, &tlsv3.DownstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{certificate(inlineString("PRIVATE-KEY"))}},
				SessionTicketKeysType: &tlsv3.DownstreamTlsContext_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
					Keys: []*corev3.DataSource{inlineBytes("TICKET-KEY-1")},
				}},
			})
		},
		want: func(t *testing.T) proto.Message {
			return listenerWith(t, &tlsv3.DownstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{certificate(redacted())}},
				SessionTicketKeysType: &tlsv3.DownstreamTlsContext_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
					Keys: []*corev3.DataSource{redacted()},
				}},
			})
		},
	}, {
		name: "a cluster's UpstreamTlsContext, with a private key provider of an unknown type",
		in: func(t *testing.T) proto.Message {
			c := certificate(inlineBytes("PRIVATE-KEY"))
			c.PrivateKeyProvider = &tlsv3.PrivateKeyProvider{
				ProviderName: "hsm",
				ConfigType: &tlsv3.PrivateKeyProvider_TypedConfig{TypedConfig: &anypb.Any{
					TypeUrl: "type.googleapis.com/example.UnknownProvider", Value: []byte("PROVIDER-KEY"),
				}},
			}
			return clusterWith(t, &tlsv3.UpstreamTlsContext{Sni: "backend.example",
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{c}}})
		},
		want: func(t *testing.T) proto.Message {
			c := certificate(redacted())
			c.PrivateKeyProvider = &tlsv3.PrivateKeyProvider{
				ProviderName: "hsm",
				ConfigType: &tlsv3.PrivateKeyProvider_TypedConfig{TypedConfig: &anypb.Any{
					TypeUrl: "type.googleapis.com/example.UnknownProvider",
				}},
			}
			return clusterWith(t, &tlsv3.UpstreamTlsContext{Sni: "backend.example",
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{c}}})
		},
	}, {
		name: "a private key provider's known config: its strings are replaced",
		in: func(t *testing.T) proto.Message {
			cfg, err := structpb.NewStruct(map[string]any{"key": "PROVIDER-KEY", "slot": 3})
			if err != nil {
				t.Fatal(err)
			}
			return &tlsv3.TlsCertificate{PrivateKeyProvider: &tlsv3.PrivateKeyProvider{
				ProviderName: "hsm",
				ConfigType:   &tlsv3.PrivateKeyProvider_TypedConfig{TypedConfig: mustAny(t, cfg)},
			}}
		},
		want: func(t *testing.T) proto.Message {
			cfg, err := structpb.NewStruct(map[string]any{"key": redact.Marker, "slot": 3})
			if err != nil {
				t.Fatal(err)
			}
			return &tlsv3.TlsCertificate{PrivateKeyProvider: &tlsv3.PrivateKeyProvider{
				ProviderName: "hsm",
				ConfigType:   &tlsv3.PrivateKeyProvider_TypedConfig{TypedConfig: mustAny(t, cfg)},
			}}
		},
	}, {
		name: "a gRPC service's SSL credentials",
		in: func(*testing.T) proto.Message {
			return &corev3.GrpcService_GoogleGrpc_SslCredentials{RootCerts: inlineString("CA-BUNDLE"), PrivateKey: inlineBytes("PRIVATE-KEY")}
		},
		want: func(*testing.T) proto.Message {
			return &corev3.GrpcService_GoogleGrpc_SslCredentials{RootCerts: inlineString("CA-BUNDLE"), PrivateKey: redacted()}
		},
	}, {
		name: "nothing secret",
		in:   func(*testing.T) proto.Message { return &clusterv3.Cluster{Name: "plain"} },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.in(t)
			want := tt.want
			if want == nil {
				want = tt.in
			}
			changed, err := redact.Message(m)
			if err != nil {
				t.Fatalf("Message() = %v", err)
			}
			if changed != (tt.want != nil) {
				t.Errorf("Message() changed = %t; want %t", changed, tt.want != nil)
			}
			// Anys are compared by content, not by their bytes.
			if diff := cmp.Diff(want(t), m, protocmp.Transform()); diff != "" {
				t.Errorf("Message() (-want +got):\n%s", diff)
			}
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%q survived redaction", s)
				}
			}
		})
	}
}

func TestAny(t *testing.T) {
	secret := &tlsv3.Secret{Name: "cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: certificate(inlineBytes("PRIVATE-KEY"))}}
	in := mustAny(t, secret)
	orig := proto.Clone(in)
	out, changed, err := redact.Any(in)
	if err != nil || !changed {
		t.Fatalf("Any() = %v, %t; want changed", err, changed)
	}
	if !proto.Equal(in, orig) {
		t.Error("Any() modified its argument")
	}
	if bytes.Contains(out.Value, []byte("PRIVATE-KEY")) || out.TypeUrl != in.TypeUrl {
		t.Errorf("Any() = %v; want the key redacted, the type kept", out)
	}

	plain := mustAny(t, &clusterv3.Cluster{Name: "plain"})
	if out, changed, err := redact.Any(plain); err != nil || changed || out != plain {
		t.Errorf("Any(nothing secret) = %p, %t, %v; want the argument itself, unchanged", out, changed, err)
	}
}

func TestUncheckable(t *testing.T) {
	unknownAny := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: []byte("PRIVATE-KEY")}
	if _, _, err := redact.Any(unknownAny); !errors.Is(err, redact.ErrUnresolvable) {
		t.Errorf("Any(unknown type) = %v; want ErrUnresolvable", err)
	}
	// An unknown Any where a secret could hide, outside a sensitive field.
	l := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{
		TransportSocket: &corev3.TransportSocket{Name: "custom", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: unknownAny}},
	}}}
	if _, err := redact.Message(l); !errors.Is(err, redact.ErrUnresolvable) {
		t.Errorf("Message(listener with an unknown Any) = %v; want ErrUnresolvable", err)
	}

	// Fields the program's descriptors do not know are dropped: a newer
	// API could hold a secret there.
	c := &clusterv3.Cluster{Name: "c"}
	c.ProtoReflect().SetUnknown([]byte{0xfa, 0x3f, 0x03, 'K', 'E', 'Y'}) // field 1023, bytes
	changed, err := redact.Message(c)
	if err != nil || !changed || len(c.ProtoReflect().GetUnknown()) != 0 {
		t.Errorf("Message(unknown fields) = %t, %v, unknown %q; want them dropped", changed, err, c.ProtoReflect().GetUnknown())
	}
}
