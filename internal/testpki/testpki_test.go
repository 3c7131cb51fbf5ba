package testpki_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/xdspush/xdspush/internal/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIssue(t *testing.T) {
	pki := testpki.New(t, "test CA")
	tests := []struct {
		name   string
		server bool
		sans   []string
		usage  x509.ExtKeyUsage
		uris   []string
		dns    []string
	}{
		{"client with a SPIFFE ID", false, []string{"spiffe://mesh.test/ns/a/sa/b"}, x509.ExtKeyUsageClientAuth, []string{"spiffe://mesh.test/ns/a/sa/b"}, nil},
		{"client with a DNS name", false, []string{"envoy-1"}, x509.ExtKeyUsageClientAuth, nil, []string{"envoy-1"}},
		{"server", true, []string{"xds.test"}, x509.ExtKeyUsageServerAuth, nil, []string{"xds.test"}},
		{"server on an IP address", true, []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth, nil, nil},
		{"both", false, []string{"spiffe://mesh.test/x", "x.test"}, x509.ExtKeyUsageClientAuth, []string{"spiffe://mesh.test/x"}, []string{"x.test"}},
	}
	serials := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := x509.ParseCertificate(pki.Issue(tt.server, tt.sans...).Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: pki.Pool(), KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Errorf("Verify() = %v", err)
			}
			var uris []string
			for _, u := range c.URIs {
				uris = append(uris, u.String())
			}
			if !slices.Equal(uris, tt.uris) || !slices.Equal(c.DNSNames, tt.dns) {
				t.Errorf("SANs = %v %v; want %v %v", uris, c.DNSNames, tt.uris, tt.dns)
			}
			if serials[c.SerialNumber.String()] {
				t.Errorf("serial %v issued twice", c.SerialNumber)
			}
			serials[c.SerialNumber.String()] = true
		})
	}
}

func TestWriteFiles(t *testing.T) {
	pki := testpki.New(t, "test CA")
	certFile, keyFile, caFile := pki.WriteFiles(t.TempDir(), "server", pki.Issue(true, "127.0.0.1"))
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("LoadX509KeyPair() = %v", err)
	}
	c, _ := x509.ParseCertificate(pair.Certificate[0])
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs = %v; want 127.0.0.1", c.IPAddresses)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil || !slices.Equal(ca, pki.CAPEM()) {
		t.Errorf("ca.pem = %q, %v; want the CA", ca, err)
	}
}

func TestPEM(t *testing.T) {
	pki := testpki.New(t, "test CA")
	cert := pki.Issue(true, "xds.test")
	certPEM, keyPEM := pki.PEM(cert)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("X509KeyPair() = %v", err)
	}
	if !slices.Equal(pair.Certificate[0], cert.Certificate[0]) {
		t.Error("the PEM pair holds another certificate")
	}
	if b, _ := pem.Decode(pki.CAPEM()); b == nil || b.Type != "CERTIFICATE" {
		t.Errorf("CAPEM() = %q; want a PEM certificate", pki.CAPEM())
	}
}

func Example() {
	t := &testing.T{} // in a test, the test's own
	pki := testpki.New(t, "example CA")
	cert := pki.Issue(false, "spiffe://mesh.test/ns/edge/sa/envoy-1")
	c, _ := x509.ParseCertificate(cert.Certificate[0])
	_, err := c.Verify(x509.VerifyOptions{Roots: pki.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	fmt.Println(c.URIs[0], err)
	// Output: spiffe://mesh.test/ns/edge/sa/envoy-1 <nil>
}
