package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// PKI is a CA and the certificates it issues, made for one test. It is
// safe for concurrent use.
type PKI struct {
	t     testing.TB
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey

	mu     sync.Mutex
	serial int64
}

// New returns a new CA named name, for the test t.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{t: t, ca: ca, caKey: key, serial: 1}
}

// Pool returns a new pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

// CAPEM returns the CA's certificate as PEM.
func (p *PKI) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.Raw})
}

// Issue returns a client certificate or, with server, a server
// certificate, whose SANs are sans: spiffe:// URIs, IP addresses or DNS
// names.
func (p *PKI) Issue(server bool, sans ...string) tls.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		NotBefore:    p.ca.NotBefore,
		NotAfter:     p.ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, s := range sans {
		if strings.HasPrefix(s, "spiffe://") {
			u, err := url.Parse(s)
			if err != nil {
				p.t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		} else if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// PEM returns cert's certificate and its private key (PKCS #8) as PEM.
func (p *PKI) PEM(cert tls.Certificate) (certPEM, keyPEM []byte) {
	p.t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		p.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// WriteFiles writes cert and its key as PEM files name.pem and name.key in
// dir, and the CA as ca.pem, and returns their paths.
func (p *PKI) WriteFiles(dir, name string, cert tls.Certificate) (certFile, keyFile, caFile string) {
	p.t.Helper()
	certPEM, keyPEM := p.PEM(cert)
	certFile, keyFile, caFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.pem")
	for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM, caFile: p.CAPEM()} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}
