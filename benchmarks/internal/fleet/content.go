package fleet

import (
	"crypto/sha256"
	"fmt"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// digest identifies a resource's content: the SHA-256 of its
// deterministic encoding, so that two servers that encode the same message
// differently give the same digest.
type digest [sha256.Size]byte

// content is what a client needs of one encoded resource: its digest and,
// for a listener or a route configuration, what it references. It is
// immutable and shared by every client that receives the same bytes.
type content struct {
	d digest
	// refs are, for a listener, the RDS route configurations its HTTP
	// connection managers name (sorted); for a route configuration, the
	// clusters its routes name.
	refs []string
}

// contents remembers the content of every encoded resource the clients
// received, by type and bytes, so that a resource that reaches a thousand
// clients is decoded once. It is safe for concurrent use.
type contents struct {
	mu     sync.RWMutex
	byType map[string]map[string]*content // type URL → encoded bytes → content
}

func newContents() *contents {
	return &contents{byType: make(map[string]map[string]*content, 4)}
}

// of returns the content of the encoded resource b of type typ.
func (c *contents) of(typ string, b []byte) (*content, error) {
	c.mu.RLock()
	ct, ok := c.byType[typ][string(b)]
	c.mu.RUnlock()
	if ok {
		return ct, nil
	}
	ct, err := decode(typ, b)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byType[typ]
	if m == nil {
		m = make(map[string]*content)
		c.byType[typ] = m
	}
	m[string(b)] = ct
	return ct, nil
}

// newMessage returns an empty message of the mesh's type typ.
func newMessage(typ string) (proto.Message, error) {
	switch typ {
	case mesh.ClusterType:
		return &clusterv3.Cluster{}, nil
	case mesh.EndpointType:
		return &endpointv3.ClusterLoadAssignment{}, nil
	case mesh.ListenerType:
		return &listenerv3.Listener{}, nil
	case mesh.RouteType:
		return &routev3.RouteConfiguration{}, nil
	}
	return nil, fmt.Errorf("fleet: unknown type %q", typ)
}

// decode decodes b, of type typ, into its content.
func decode(typ string, b []byte) (*content, error) {
	m, err := newMessage(typ)
	if err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return contentOf(m)
}

// contentOf returns the content of m.
func contentOf(m proto.Message) (*content, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	ct := &content{d: sha256.Sum256(b)}
	switch x := m.(type) {
	case *listenerv3.Listener:
		ct.refs = listenerRoutes(x)
	case *routev3.RouteConfiguration:
		ct.refs = routeClusters(x)
	}
	return ct, nil
}

// want is a whole configuration a client converges to: the digest of
// every resource it must hold, by type and name. It is immutable.
type want map[string]map[string]digest

// wantOf returns the configuration of s.
func wantOf(s *mesh.Snapshot) (want, error) {
	w := want{
		mesh.ClusterType:  make(map[string]digest, len(s.Clusters)),
		mesh.EndpointType: make(map[string]digest, len(s.Assignments)),
		mesh.ListenerType: make(map[string]digest, 1),
		mesh.RouteType:    make(map[string]digest, 1),
	}
	add := func(typ, name string, m proto.Message) error {
		ct, err := contentOf(m)
		if err != nil {
			return err
		}
		w[typ][name] = ct.d
		return nil
	}
	for _, c := range s.Clusters {
		if err := add(mesh.ClusterType, c.Name, c); err != nil {
			return nil, err
		}
	}
	for _, a := range s.Assignments {
		if err := add(mesh.EndpointType, a.ClusterName, a); err != nil {
			return nil, err
		}
	}
	if err := add(mesh.ListenerType, s.Listener.Name, s.Listener); err != nil {
		return nil, err
	}
	if err := add(mesh.RouteType, s.Route.Name, s.Route); err != nil {
		return nil, err
	}
	return w, nil
}
