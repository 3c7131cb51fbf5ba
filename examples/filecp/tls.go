package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// serverTLS returns the TLS configuration of the ADS port for mutual TLS:
// the server presents the certificate of certFile and keyFile (PEM), and
// requires of every client a certificate that verifies against the CAs of
// caFile (PEM; one or more certificates). The files are read once: restart
// to rotate them.
func serverTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("filecp: -tls-cert/-tls-key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("filecp: -client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("filecp: -client-ca: %s holds no PEM certificate", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// tlsFlags checks that -tls-cert, -tls-key and -client-ca are given all
// together or not at all, and that -insecure-secrets is not given with
// them; it reports whether they are given.
func tlsFlags(cert, key, ca string, insecureSecrets bool) (bool, error) {
	n := 0
	for _, f := range []string{cert, key, ca} {
		if f != "" {
			n++
		}
	}
	switch {
	case n == 0:
		return false, nil
	case n < 3:
		return false, fmt.Errorf("filecp: -tls-cert, -tls-key and -client-ca go together (got -tls-cert=%q -tls-key=%q -client-ca=%q)", cert, key, ca)
	case insecureSecrets:
		return false, fmt.Errorf("filecp: -insecure-secrets is for plaintext ADS; over mutual TLS, Secrets are served to the clients of their fleet")
	}
	return true, nil
}

// secretsWarner logs a warning when a load brings Secrets that are not
// served (plaintext ADS without -insecure-secrets): at the first load that
// has Secrets, and again at the first after a load that had none. It is
// called from one goroutine at a time (main, then the Watcher's reloads).
type secretsWarner struct {
	logger *slog.Logger
	had    bool // the previous load had Secrets
}

// loaded checks snap, the snapshot a successful load made current.
func (w *secretsWarner) loaded(snap *Snapshot) {
	if snap == nil {
		return
	}
	n := snap.Count(meshconfig.TypeSecret)
	if n > 0 && !w.had {
		w.logger.Warn("secrets are configured but not served: ADS is plaintext; serve it over mutual TLS (-tls-cert, -tls-key, -client-ca), or pass -insecure-secrets to serve them to any client",
			"secrets", n)
	}
	w.had = n > 0
}
