package servers

import (
	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/benchmarks/internal/mesh"
)

// The floor's on-demand streams: a Delta stream whose first CDS
// subscription names clusters rather than "*" is served by name. Each
// subscription is answered with exactly the resources it newly names
// (each marshalled once, for every stream that subscribes to it; the
// response around them is the stream's own), and a change reaches only the
// streams subscribed to what it changed: an endpoint change sends the
// changed ClusterLoadAssignment, marshalled once, to the streams
// subscribed to it; a cluster change sends the changed cluster to the
// streams subscribed to it, then its ClusterLoadAssignment to those of
// them subscribed to that too. Route changes and swaps do not reach
// on-demand streams (they subscribe to no route, and a swap's removals
// are not sent by name).

// floorPush is what one stream receives of a change.
type floorPush struct {
	fs   *floorStream
	msgs []*encoded
}

// pushesOf returns what each stream receives of a change of kind to the
// cluster called name, whose responses are sotw and delta: every stream
// of f.conns all of them, and on-demand streams what they subscribed to.
// f.mu is held.
func (f *floorServer) pushesOf(kind, name string, sotw, delta []*encoded) []floorPush {
	out := make([]floorPush, 0, len(f.conns))
	for fs := range f.conns {
		if fs.delta {
			out = append(out, floorPush{fs, delta})
		} else {
			out = append(out, floorPush{fs, sotw})
		}
	}
	switch kind {
	case mesh.EndpointChange:
		for fs := range f.byName[fEDS][name] {
			out = append(out, floorPush{fs, delta})
		}
	case mesh.ClusterChange:
		for fs := range f.byName[fCDS][name] {
			if _, ok := fs.names[fEDS][name]; ok {
				out = append(out, floorPush{fs, delta})
			} else {
				out = append(out, floorPush{fs, delta[:1]})
			}
		}
	}
	return out
}

// answerByName applies an on-demand stream's request of type t: it
// subscribes the stream to sub, unsubscribes it from unsub and sends the
// resources of sub it did not subscribe to before, if any exist.
//
// The stream's lock is held from before the subscription until the
// answer is sent: a change made after the subscription pushes to the
// stream, and that push, which takes the stream's lock, follows the
// answer, which holds the content from before the change.
func (f *floorServer) answerByName(fs *floorStream, t int, sub, unsub []string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.mu.Lock()
	if f.snap == nil {
		f.snap = f.m.Snapshot()
	}
	if fs.names[t] == nil {
		fs.names[t] = make(map[string]struct{})
	}
	if f.byName[t] == nil {
		f.byName[t] = make(map[string]map[*floorStream]struct{})
	}
	for _, n := range unsub {
		delete(fs.names[t], n)
		delete(f.byName[t][n], fs)
	}
	var msgs []proto.Message
	for _, n := range sub {
		if _, ok := fs.names[t][n]; ok {
			continue
		}
		fs.names[t][n] = struct{}{}
		if f.byName[t][n] == nil {
			f.byName[t][n] = make(map[*floorStream]struct{})
		}
		f.byName[t][n][fs] = struct{}{}
		if m := namedIn(f.snap, t, n); m != nil {
			msgs = append(msgs, m)
		}
	}
	var e *encoded
	if len(msgs) > 0 {
		e = f.encodeDelta(t, msgs, nil)
	}
	f.mu.Unlock()
	if e == nil {
		return nil
	}
	return fs.stream.SendMsg(e)
}

// namedIn returns the resource of type t called name in s, nil if
// there is none.
func namedIn(s *mesh.Snapshot, t int, name string) proto.Message {
	switch t {
	case fCDS, fEDS:
		i, ok := s.Service(name)
		if !ok {
			return nil
		}
		if t == fCDS {
			return s.Clusters[i]
		}
		return s.Assignments[i]
	case fLDS:
		if name == s.Listener.Name {
			return s.Listener
		}
	case fRDS:
		if name == s.Route.Name {
			return s.Route
		}
	}
	return nil
}

// forget removes a stream that has ended from the streams pushed to.
func (f *floorServer) forget(fs *floorStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, fs)
	for t, names := range fs.names {
		for n := range names {
			delete(f.byName[t][n], fs)
			if len(f.byName[t][n]) == 0 {
				delete(f.byName[t], n)
			}
		}
	}
}
