package xds

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// PeerIdentity is the identity of a client authenticated by mutual TLS, as
// MTLSAuthenticate finds it in the client's verified certificate.
type PeerIdentity struct {
	// SPIFFEID is the certificate's spiffe:// URI SAN, if it has exactly
	// one.
	SPIFFEID string
	// DNSNames are the certificate's DNS SANs.
	DNSNames []string
	// Certificate is the client's leaf certificate.
	Certificate *x509.Certificate
}

// Name returns the identity's name: the SPIFFE ID if there is one,
// otherwise the first DNS SAN.
func (id *PeerIdentity) Name() string {
	if id.SPIFFEID != "" {
		return id.SPIFFEID
	}
	if len(id.DNSNames) > 0 {
		return id.DNSNames[0]
	}
	return ""
}

// MTLSAuthenticate is an AuthenticateFunc for streams over mutual TLS:
// the gRPC server's TLS configuration must require and verify client
// certificates (tls.RequireAndVerifyClientCert with the clients' CA). It
// returns a *PeerIdentity taken from the verified leaf certificate: its
// SPIFFE ID (a spiffe:// URI SAN; a certificate with several is refused,
// as the SPIFFE X.509-SVID specification allows one), otherwise its DNS
// SANs. A stream without TLS, without a verified client certificate, or
// whose certificate names neither is refused (Unauthenticated).
//
// Bind the identity to what the client claims with Config.Authorize: a
// client can put anything in its Node.
func MTLSAuthenticate(ctx context.Context) (any, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errors.New("no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, errors.New("the connection is not TLS")
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, errors.New("no verified client certificate")
	}
	leaf := chains[0][0]
	id := &PeerIdentity{DNSNames: leaf.DNSNames, Certificate: leaf}
	for _, u := range leaf.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if id.SPIFFEID != "" {
			return nil, errors.New("the certificate has more than one SPIFFE ID")
		}
		id.SPIFFEID = u.String()
	}
	if id.Name() == "" {
		return nil, errors.New("the certificate has no SPIFFE ID and no DNS name")
	}
	return id, nil
}

// hostError turns an error of host code into what the client is told: an
// error that comes of the Server's shutdown (stoppedBy) is Unavailable,
// as for every stream the shutdown ends; a gRPC status error the host
// chose is passed on as is; anything else becomes a generic status of
// code with a correlation id, and the detail goes to the log (and,
// through the returned error, to DisconnectEvent.Err and the hooks).
func (s *Server) hostError(ctx context.Context, code codes.Code, what string, p *Proxy, err error) (toClient, detail error) {
	if s.stoppedBy(err) {
		return errShuttingDown, err
	}
	if st, ok := status.FromError(err); ok && !isPanic(err) {
		return st.Err(), err
	}
	id := uuid.NewString()
	attrs := []slog.Attr{slog.String("correlation_id", id), slog.String("what", what), slog.Any("err", err)}
	if p != nil {
		attrs = append(attrs, slog.String("proxy", p.ID), slog.String("conn", p.ConnID))
	}
	s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: stream refused", attrs...)
	return status.Errorf(code, "xds: %s (correlation id %s)", what, id),
		fmt.Errorf("xds: %s (correlation id %s): %w", what, id, err)
}
