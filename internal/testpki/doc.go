// Package testpki is a certificate authority for tests of mutual TLS: a
// CA made for one test, and the client and server certificates it issues,
// with SPIFFE IDs (URI SANs) or DNS names.
//
// Contract:
//   - New makes a fresh CA (ECDSA P-256), valid from an hour ago for two
//     hours; every certificate it issues has the same validity and a serial
//     number of its own.
//   - Issue returns a certificate for a client (ExtKeyUsageClientAuth) or,
//     with server, a server (ExtKeyUsageServerAuth), whose SANs are the
//     spiffe:// URIs, IP addresses and DNS names given, with its private
//     key.
//   - Pool holds the CA; CAPEM and PEM encode the CA and an issued
//     certificate and key (PKCS #8) as PEM, and WriteFiles writes them to
//     a directory, for programs that read files.
//   - Failures end the test (testing.TB.Fatal); only WriteFiles writes to
//     disk, and no goroutine is started.
//
// Only tests import it.
package testpki
