package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/xdspush/xdspush/xds"
)

// nodeIdentity is what filecp reads from a verified client certificate
// (an *xds.PeerIdentity, from xds.MTLSAuthenticate): the fleet whose
// resources the client is served, and the name its Node.id must carry.
type nodeIdentity struct {
	Fleet string
	Name  string
}

// identityOf maps a client certificate's identity to its fleet and name:
//
//   - a SPIFFE ID spiffe://<trust-domain>/ns/<fleet>/sa/<name> gives
//     <fleet> and <name>, whatever the trust domain (the client CA is what
//     is trusted); a SPIFFE ID of any other shape is refused, and a
//     certificate with a SPIFFE ID is never read for DNS names;
//   - otherwise the first DNS SAN, <name>.<fleet> or
//     <name>.<fleet>.<domain…>, gives its first label as <name> and its
//     second as <fleet>; a name of one label is refused.
//
// <fleet> and <name> are compared as written, and must be made of
// letters, digits, '-', '_' and '.' (SPIFFE path segments; a DNS label has
// no '.'), and not be "." or "..". A fleet is the directory DIR/<fleet>/; a
// fleet without a directory is served the global files.
func identityOf(id *xds.PeerIdentity) (nodeIdentity, error) {
	if id == nil {
		return nodeIdentity{}, errors.New("no client identity")
	}
	if id.SPIFFEID != "" {
		return spiffeIdentity(id.SPIFFEID)
	}
	if len(id.DNSNames) == 0 {
		return nodeIdentity{}, errors.New("the certificate has no SPIFFE ID and no DNS name")
	}
	dns := id.DNSNames[0]
	labels := strings.Split(dns, ".")
	if len(labels) < 2 {
		return nodeIdentity{}, fmt.Errorf("DNS name %q is not <name>.<fleet>[.<domain>]", dns)
	}
	ni := nodeIdentity{Fleet: labels[1], Name: labels[0]}
	if !validSegment(ni.Name) || !validSegment(ni.Fleet) {
		return nodeIdentity{}, fmt.Errorf("DNS name %q is not <name>.<fleet>[.<domain>]", dns)
	}
	return ni, nil
}

// spiffeIdentity maps spiffe://<trust-domain>/ns/<fleet>/sa/<name>.
func spiffeIdentity(id string) (nodeIdentity, error) {
	u, err := url.Parse(id)
	if err != nil {
		return nodeIdentity{}, fmt.Errorf("SPIFFE ID %q: %w", id, err)
	}
	segs := strings.Split(u.EscapedPath(), "/")
	// "/ns/<fleet>/sa/<name>" splits into "", "ns", fleet, "sa", name.
	if u.Scheme != "spiffe" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery ||
		len(segs) != 5 || segs[0] != "" || segs[1] != "ns" || segs[3] != "sa" ||
		!validSegment(segs[2]) || !validSegment(segs[4]) {
		return nodeIdentity{}, fmt.Errorf("SPIFFE ID %q is not spiffe://<trust-domain>/ns/<fleet>/sa/<name>", id)
	}
	return nodeIdentity{Fleet: segs[2], Name: segs[4]}, nil
}

// validSegment reports whether s is a non-empty SPIFFE path segment made of
// letters, digits, '-', '_' and '.', other than "." and "..".
func validSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// nodeIDMatches reports whether a Node.id is the identity's: <name>
// itself, or <name>~<instance> (a non-empty instance), so that the
// replicas of one workload, which share a certificate, keep distinct ids.
// Neither a SPIFFE path segment nor a DNS label can hold '~', so one
// identity cannot take another's ids.
func nodeIDMatches(nodeID, name string) bool {
	instance, ok := strings.CutPrefix(nodeID, name)
	return ok && (instance == "" || len(instance) > 1 && instance[0] == '~')
}

// peerIdentity returns p's nodeIdentity, from the *xds.PeerIdentity
// xds.MTLSAuthenticate stored in Proxy.Identity.
func peerIdentity(p *xds.Proxy) (nodeIdentity, error) {
	id, _ := p.Identity.(*xds.PeerIdentity)
	return identityOf(id)
}

// authorizeNode is the Server's Config.Authorize over mutual TLS: it binds
// what the client claims in its Node to its certificate. It refuses a
// stream (the Server answers codes.PermissionDenied, with a correlation id,
// and logs the reason) whose certificate maps to no fleet (see identityOf),
// whose Node.cluster, if set, is not the certificate's fleet, or whose
// Node.id is not the certificate's name (see nodeIDMatches).
func authorizeNode(_ context.Context, p *xds.Proxy) error {
	ni, err := peerIdentity(p)
	if err != nil {
		return err
	}
	if c := p.Node.GetCluster(); c != "" && c != ni.Fleet {
		return fmt.Errorf("node %q claims fleet %q; its certificate's is %q", p.Node.GetId(), c, ni.Fleet)
	}
	if !nodeIDMatches(p.Node.GetId(), ni.Name) {
		return fmt.Errorf("node id %q is not %q or %q~<instance>, the certificate's name", p.Node.GetId(), ni.Name, ni.Name)
	}
	return nil
}

// certificateFleet is the group of a proxy over mutual TLS: its
// certificate's fleet, whatever its Node.cluster says.
func certificateFleet(p *xds.Proxy) (string, error) {
	ni, err := peerIdentity(p)
	if err != nil {
		return "", err
	}
	return ni.Fleet, nil
}
