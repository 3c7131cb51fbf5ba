package redact_test

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/xdspush/xdspush/internal/redact"
)

func ExampleMessage() {
	secret := &tlsv3.Secret{Name: "server-cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/certs/chain.pem"}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("-----BEGIN PRIVATE KEY-----")}},
	}}}
	changed, err := redact.Message(secret)
	fmt.Println(changed, err)
	fmt.Println(secret.GetTlsCertificate().GetPrivateKey().GetInlineString())
	fmt.Println(secret.GetTlsCertificate().GetCertificateChain().GetFilename())
	// Output:
	// true <nil>
	// [redacted]
	// /etc/certs/chain.pem
}
