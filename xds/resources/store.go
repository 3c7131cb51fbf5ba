package resources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
)

// DefaultGroup is the group of a proxy whose Node.cluster is empty, and the
// group served to a proxy whose own group has not been set, if it has
// been set itself (see Config.Group).
const DefaultGroup = ""

// GroupKind is the pushcontext.ConfigKey.Kind of the key that announces a
// group created or deleted: {Kind: GroupKind, Namespace: group}. Every
// other key a Store announces names a resource: {Kind: its type URL,
// Namespace: its group, Name: its name}.
const GroupKind = "resources.Group"

// snapshotKind is the kind of the Store's snapshot index, rebuilt for
// every PushContext; no key of it is announced.
const snapshotKind = "resources.snapshot"

// DefaultTypes returns the types a Store serves when Config.Types is empty:
// CDS, EDS, LDS, RDS and SDS. A new slice is returned on every call.
func DefaultTypes() []xds.TypeURL {
	return []xds.TypeURL{xds.ClusterType, xds.EndpointType, xds.ListenerType, xds.RouteType, xds.SecretType}
}

// Config configures a Store. The zero value serves CDS, EDS, LDS, RDS and
// SDS, groups proxies by Node.cluster and refuses dangling references.
type Config struct {
	// Types lists the type URLs the Store serves; a resource of another
	// type is refused by Set. Empty means DefaultTypes().
	Types []xds.TypeURL

	// Group returns the group a proxy belongs to. The Store calls it when
	// the proxy connects and before each Full push that creates or deletes
	// a group is applied to it (from xds.Config.InitProxy, whose
	// ProxyKinds is GroupKind), and serves the proxy the resources of that
	// group: what it returns must depend on the proxy alone. Nil means the proxy's Node.cluster, which is what the client
	// claims: a client that can reach the Server can ask for any group's
	// resources. With untrusted clients, read Proxy.Identity (what
	// xds.Config.Authenticate returned) to group proxies by who they are
	// rather than by what they claim. An error
	// ends the proxy's stream: a gRPC status error (status.Error) is
	// returned to the client as is, any other as codes.Internal.
	//
	// A proxy whose group has not been set (or has been deleted) is
	// served DefaultGroup instead, if that group has been set; otherwise
	// its stream ends with codes.NotFound, and the client retries. It
	// moves to its own group at the first Full push after the group is
	// set.
	Group func(p *xds.Proxy) (string, error)

	// AllowMissingReferences lets Set accept a group whose listeners name
	// route configurations (over ADS), or whose listeners and route
	// configurations name clusters, that the group does not hold: for
	// example clusters an Envoy has in its bootstrap. By default such a
	// group is refused (an *Error lists every missing reference).
	AllowMissingReferences bool

	// Epoch is the epoch of the PushContext versions (see
	// pushcontext.BuilderConfig.Epoch). Empty means random.
	Epoch string

	// Server is the template of the xds.Config that Store.Config returns:
	// set any of its fields (Logger, Hooks, Debounce, limits, Authenticate,
	// …) and the Store adds its Builder, its Generators and TypeKinds and
	// its InitProxy and ProxyKinds. Builder, InitProxy and ProxyKinds must
	// be nil; Generators and TypeKinds may hold types the Store does not
	// serve, with their own kinds (see xds.Config.ExternalKinds).
	// Server.Logger also receives the Store's logs: one Debug record per
	// change.
	Server xds.Config
}

// Store holds the resources each group of proxies should hold, and serves
// them through an xds.Server. Create it with New, build the Server with
// NewServer (or xds.New(s.Config()) and Attach), then state each group's
// resources with Set, Apply and Delete. A Store serves one Server: its
// Builder builds that Server's PushContexts.
//
// A Store is safe for concurrent use.
type Store struct {
	types      []xds.TypeURL
	typeIdx    map[xds.TypeURL]int
	byFullName map[protoreflect.FullName]int // message name → type index
	groupOf    func(p *xds.Proxy) (string, error)
	allowMiss  bool
	server     xds.Config
	logger     *slog.Logger

	b       *pushcontext.Builder
	snapIdx pushcontext.Index[*snapshot]
	// groupIdx holds the groups set, by name, each with the Proxy.Data
	// of the proxies that ask for it (shared by them all), rebuilt only
	// when a group is created or deleted: it is what InitProxy reads, so
	// that the Server calls InitProxy again only then
	// (xds.Config.ProxyKinds).
	groupIdx pushcontext.Index[map[string]*proxyGroup]
	byType   []pushcontext.Index[map[string]*typeSet] // by type index
	// building is the snapshot of the Build in progress. It is written
	// and read only on the goroutine that calls Build, during the Build
	// (the index build functions run there, and Builds never overlap).
	building *snapshot

	cur atomic.Pointer[snapshot] // the current snapshot; written under mu

	mu    sync.Mutex // serialises commits and protects the fields below
	srv   *xds.Server
	built bool // a PushContext has been built from the Store
}

// New returns a Store configured by cfg. It starts no goroutine.
func New(cfg Config) (*Store, error) {
	types := cfg.Types
	if len(types) == 0 {
		types = DefaultTypes()
	}
	s := &Store{
		types:      slices.Clone(types),
		typeIdx:    make(map[xds.TypeURL]int, len(types)),
		byFullName: make(map[protoreflect.FullName]int, len(types)),
		groupOf:    cfg.Group,
		allowMiss:  cfg.AllowMissingReferences,
		server:     cfg.Server,
		logger:     cfg.Server.Logger,
	}
	for i, t := range s.types {
		switch {
		case t == "":
			return nil, errors.New("resources: Config.Types has an empty type URL")
		case t == GroupKind:
			return nil, fmt.Errorf("resources: Config.Types names %q, the kind of group keys", t)
		}
		if _, dup := s.typeIdx[t]; dup {
			return nil, fmt.Errorf("resources: Config.Types names %s twice", t)
		}
		name, ok := strings.CutPrefix(string(t), typeURLPrefix)
		if !ok {
			return nil, fmt.Errorf("resources: Config.Types has %q, which does not start with %q", t, typeURLPrefix)
		}
		s.typeIdx[t] = i
		s.byFullName[protoreflect.FullName(name)] = i
	}
	switch {
	case cfg.Server.Builder != nil:
		return nil, errors.New("resources: Config.Server.Builder is set; the Store provides the Builder")
	case cfg.Server.InitProxy != nil:
		return nil, errors.New("resources: Config.Server.InitProxy is set; the Store provides it (group proxies with Config.Group)")
	case cfg.Server.ProxyKinds != nil:
		return nil, errors.New("resources: Config.Server.ProxyKinds is set; the Store provides it, with its InitProxy")
	}
	for _, t := range s.types {
		if _, ok := cfg.Server.Generators[t]; ok {
			return nil, fmt.Errorf("resources: Config.Server.Generators has %s, which the Store serves", t)
		}
		if _, ok := cfg.Server.TypeKinds[t]; ok {
			return nil, fmt.Errorf("resources: Config.Server.TypeKinds has %s, which the Store serves", t)
		}
	}
	if s.groupOf == nil {
		s.groupOf = func(p *xds.Proxy) (string, error) { return p.Node.GetCluster(), nil }
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.b, err = pushcontext.NewBuilder(pushcontext.BuilderConfig{Epoch: cfg.Epoch, Logger: cfg.Server.Logger}); err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	// The snapshot index is rebuilt for every PushContext (the Builder
	// asks for it); the group names only when a group was created or
	// deleted; each type's index only when that type changed.
	if s.snapIdx, err = pushcontext.Register(s.b, "snapshot", []string{snapshotKind},
		func(pushcontext.BuildContext[*snapshot]) (*snapshot, error) { return s.building, nil }); err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	if s.groupIdx, err = pushcontext.Register(s.b, "groups", []string{GroupKind},
		func(pushcontext.BuildContext[map[string]*proxyGroup]) (map[string]*proxyGroup, error) {
			groups := make(map[string]*proxyGroup, len(s.building.groups))
			for name := range s.building.groups {
				groups[name] = &proxyGroup{want: name, served: name, view: viewPrefix + name}
			}
			return groups, nil
		}); err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	s.byType = make([]pushcontext.Index[map[string]*typeSet], len(s.types))
	for i, t := range s.types {
		s.byType[i], err = pushcontext.Register(s.b, string(t), []string{string(t)},
			func(pushcontext.BuildContext[map[string]*typeSet]) (map[string]*typeSet, error) {
				return s.building.byType[i], nil
			})
		if err != nil {
			return nil, fmt.Errorf("resources: %w", err)
		}
	}
	s.cur.Store(emptySnapshot(len(s.types)))
	return s, nil
}

// Config returns the xds.Config of the Server that serves the Store:
// Config.Server, with the Store's Builder, a Generator and TypeKinds entry
// for each type it serves (a type is regenerated only when resources of
// that type changed), a NamedKinds entry for each (a change is queued
// only for the connections that watch what it changes; not when another
// Generator of Config.Server has no TypeKinds entry) and its InitProxy
// (groups and dependency scopes),
// which reads only which groups are set (ProxyKinds is GroupKind: a Full
// push calls it again only when a group was created or deleted). A host
// that wraps InitProxy with something reading more config adds the kinds
// to ProxyKinds, or sets it to nil. The maps are the caller's. Build one Server from it and Attach it; NewServer
// does both.
func (s *Store) Config() xds.Config {
	cfg := s.server
	cfg.Builder = storeBuilder{s}
	cfg.Generators = maps.Clone(cfg.Generators)
	if cfg.Generators == nil {
		cfg.Generators = make(map[xds.TypeURL]xds.Generator, len(s.types))
	}
	cfg.TypeKinds = maps.Clone(cfg.TypeKinds)
	if cfg.TypeKinds == nil {
		cfg.TypeKinds = make(map[xds.TypeURL][]string, len(s.types))
	}
	for i, t := range s.types {
		cfg.Generators[t] = generator{s: s, idx: i}
		cfg.TypeKinds[t] = []string{string(t)}
	}
	// A key of a type's kind names the one resource it changes, so a
	// change skips the connections that do not watch it (on-demand
	// clients), unless another generator reads every kind.
	declared := true
	for t := range cfg.Generators {
		_, ok := cfg.TypeKinds[t]
		declared = declared && ok
	}
	if declared {
		cfg.NamedKinds = maps.Clone(cfg.NamedKinds)
		if cfg.NamedKinds == nil {
			cfg.NamedKinds = make(map[string]xds.TypeURL, len(s.types))
		}
		for _, t := range s.types {
			cfg.NamedKinds[string(t)] = t
		}
	}
	cfg.InitProxy = s.initProxy
	cfg.ProxyKinds = []string{GroupKind}
	cfg.ExternalKinds = slices.Clone(cfg.ExternalKinds)
	cfg.Order = slices.Clone(cfg.Order)
	cfg.FullStateTypes = slices.Clone(cfg.FullStateTypes)
	return cfg
}

// Attach makes srv the Server the Store announces its changes to: every
// change committed after the Server's first PushContext is handed to
// srv.ConfigUpdate (the first PushContext is built from everything
// committed before it, so earlier changes need no announcing). srv must
// have been built from s.Config(). Once a PushContext has been built from
// the Store, changes are refused until a Server is attached
// (ErrNotAttached). Attach fails for a nil srv and when another Server is
// attached; attaching the same one again does nothing.
func (s *Store) Attach(srv *xds.Server) error {
	if srv == nil {
		return errors.New("resources: Attach(nil)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.srv {
	case nil:
		s.srv = srv
		return nil
	case srv:
		return nil
	}
	return errors.New("resources: Attach: another xds.Server is attached; a Store serves one Server")
}

// NewServer builds an xds.Server from s.Config() and attaches it. The
// caller registers it on a gRPC server, runs it, and calls its Loaded once
// the initial groups are set (until then it refuses streams).
func (s *Store) NewServer() (*xds.Server, error) {
	srv, err := xds.New(s.Config())
	if err != nil {
		return nil, err
	}
	if err := s.Attach(srv); err != nil {
		return nil, err
	}
	return srv, nil
}

// ErrNotAttached is returned by Set, Delete and Apply when a PushContext
// has been built from the Store but no Server is attached: the change
// could not be pushed.
var ErrNotAttached = errors.New("resources: the Store has served a PushContext but no xds.Server is attached (call Attach, or build the Server with NewServer)")

// Update is one transaction of a Store: groups to set and groups to
// delete, applied together or not at all.
type Update struct {
	// Set maps each group to set to the resources it should hold, of any
	// of the Store's types, in any order: exactly those, replacing what
	// it held. An empty list sets the group to hold nothing (its proxies
	// are told so). The messages must not be modified afterwards: the
	// Store and the Server share them (see Set).
	Set map[string][]proto.Message
	// Delete lists groups to delete. A group that is not set is ignored;
	// one that is also in Set is an error.
	Delete []string
	// DeleteOthers deletes every group that Set does not name.
	DeleteOthers bool
	// Start is when the change began, for convergence figures (see
	// pushcontext.PushRequest.Start). Zero means when it is applied.
	Start time.Time
}

// Set replaces the resources of group with resources, in one transaction:
// Apply(Update{Set: map[string][]proto.Message{group: resources}}).
//
// Each resource is a message of one of the Store's types (its type URL is
// "type.googleapis.com/" and its full name), named by its name field (a
// ClusterLoadAssignment by cluster_name). The messages must not be
// modified afterwards: the Store and the Server keep them, and marshal each
// once for every proxy. Setting the same message (pointer) again costs no
// hashing; a new message with the same content changes nothing.
func (s *Store) Set(group string, resources ...proto.Message) error {
	_, err := s.Apply(Update{Set: map[string][]proto.Message{group: resources}})
	return err
}

// Delete deletes group: Apply(Update{Delete: []string{group}}). Its proxies
// are served DefaultGroup if it is set, and refused otherwise (see
// Config.Group). Deleting a group that is not set does nothing.
func (s *Store) Delete(group string) error {
	_, err := s.Apply(Update{Delete: []string{group}})
	return err
}

// Apply applies u as one transaction and announces what changed to the
// attached Server (see Attach). It returns the request that describes the
// change, as handed to the Server's ConfigUpdate, or nil when nothing
// changed:
//
//   - ConfigsUpdated holds a key per resource added, removed or whose
//     content changed (by a hash of its deterministic encoding), as
//     {Kind: type URL, Namespace: group, Name: name}, and a
//     {Kind: GroupKind, Namespace: group} key per group created or deleted;
//   - Full is false when only ClusterLoadAssignments changed (Reason
//     ReasonEndpointUpdate; the Server regenerates EDS only), true
//     otherwise (ReasonConfigUpdate);
//   - Start is u.Start.
//
// Nothing is applied if any group is invalid: a nil message, a type the
// Store does not serve, a message without a name, two resources of one
// type with the same name (resources of different types never collide),
// a message that fails its ValidateAll method (Envoy's generated
// validation) or cannot be encoded, or, unless
// Config.AllowMissingReferences, a listener naming a route configuration
// or a cluster, or a route configuration naming a cluster, that the group
// does not hold. The error is an *Error listing every problem found.
//
// Apply also fails, applying nothing, with ErrNotAttached (see Attach). An
// error from the Server's ConfigUpdate (after its Run has stopped) is
// returned with the request: the change is applied then.
//
// Applies on different groups may run concurrently; they are committed one
// at a time, each as a whole. A PushContext holds every group as of one
// commit: never part of one.
func (s *Store) Apply(u Update) (*pushcontext.PushRequest, error) {
	for _, g := range u.Delete {
		if _, ok := u.Set[g]; ok {
			return nil, fmt.Errorf("resources: Apply: group %q is both set and deleted", g)
		}
	}
	// Hashing and validation, the costly part, read the current snapshot
	// only to reuse the hashes of messages set again; they need no lock.
	cur := s.cur.Load()
	prepared := make(map[string]*group, len(u.Set))
	var problems []Problem
	memo := make(map[proto.Message][hashSize]byte)
	for _, name := range slices.Sorted(maps.Keys(u.Set)) {
		g, ps := s.prepare(name, u.Set[name], cur.groups[name], memo)
		problems = append(problems, ps...)
		prepared[name] = g
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}

	s.mu.Lock()
	if s.built && s.srv == nil {
		s.mu.Unlock()
		return nil, ErrNotAttached
	}
	cur = s.cur.Load()
	next, keys, full := cur.apply(s.types, prepared, u.Delete, u.DeleteOthers)
	if len(keys) == 0 {
		s.mu.Unlock()
		return nil, nil
	}
	s.cur.Store(next)
	// Before the first PushContext, there is nothing to announce: the
	// first Build reads this commit (it reads the snapshot under mu).
	var srv *xds.Server
	if s.built {
		srv = s.srv
	}
	s.mu.Unlock()

	reason := pushcontext.ReasonConfigUpdate
	if !full {
		reason = pushcontext.ReasonEndpointUpdate
	}
	req := &pushcontext.PushRequest{
		Full:           full,
		ConfigsUpdated: keys,
		Reason:         pushcontext.NewReasonStats(reason),
		Start:          u.Start,
	}
	if s.logger.Enabled(context.Background(), slog.LevelDebug) {
		s.logger.LogAttrs(context.Background(), slog.LevelDebug, "resources: changed",
			slog.Uint64("seq", next.seq), slog.Bool("full", full), slog.Int("keys", len(keys)),
			slog.Any("groups", changedGroups(keys)))
	}
	if srv != nil {
		if err := srv.ConfigUpdate(req); err != nil {
			return req, fmt.Errorf("resources: %w", err)
		}
	}
	return req, nil
}

// changedGroups returns the groups of keys, sorted.
func changedGroups(keys pushcontext.ConfigSet) []string {
	var out []string
	for k := range keys {
		out = append(out, k.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Groups returns the groups set, sorted.
func (s *Store) Groups() []string {
	return slices.Sorted(maps.Keys(s.cur.Load().groups))
}

// Resources returns the resources group holds, by type, each list sorted
// by name, and whether the group is set. The messages are the Store's:
// do not modify them.
func (s *Store) Resources(group string) (map[xds.TypeURL][]proto.Message, bool) {
	g, ok := s.cur.Load().groups[group]
	if !ok {
		return nil, false
	}
	out := make(map[xds.TypeURL][]proto.Message)
	for i, ts := range g.types {
		if ts == nil {
			continue
		}
		ms := make([]proto.Message, len(ts.res))
		for j, r := range ts.res {
			ms[j] = r.Message
		}
		out[s.types[i]] = ms
	}
	return out, true
}
