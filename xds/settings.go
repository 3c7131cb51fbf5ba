package xds

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xdspush/xdspush/internal/session"
	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/pushqueue"
)

// settings is the validated, defaulted form of a Config. A field taken
// from the Config keeps its name (phaseWait is !Phases.NoWait). What a
// connection's core reads of them is session.Settings.
type settings struct {
	session.Settings
	order                   []TypeURL // type index → type URL
	index                   map[TypeURL]int
	builder                 Builder
	generators              []Generator      // by type index
	deltaGeneratorOf        []DeltaGenerator // by type index: the Generator as a DeltaGenerator, or nil
	named                   map[string]int   // Config.NamedKinds: kind → type index
	digestSlot              []int            // by type index: its place in a connection's digest, -1 if no kind of it is named (see fanout.go)
	digestSlots             int
	digestSeed              maphash.Seed
	knownKinds              func(kind string) bool
	initProxy               InitProxyFunc
	authenticate            AuthenticateFunc
	authorize               func(context.Context, *Proxy) error
	debounce                DebounceConfig
	concurrency             int
	writeTimeout            time.Duration
	generateTimeout         time.Duration
	newStreamRate           float64 // +Inf: no rate limit
	newStreamWait           time.Duration
	newStreamBurst          int
	maxOpeningStreams       int // bound of the streams opening at once; 0: none
	firstRequestTimeout     time.Duration
	maxStreamsPerConnection int
	clock                   Clock
	logger                  *slog.Logger
	// hooks are the Config's Hooks and those added by Server.Observe; a
	// caller loads them once per event.
	hooks atomic.Pointer[Hooks]
}

// kindLister is implemented by Builders that know the kinds their indexes
// are registered with (*pushcontext.Builder).
type kindLister interface {
	Kinds() []string
}

// settings checks cfg and returns what the Server runs with.
func (cfg *Config) settings() (*settings, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	order, err := pushOrder(cfg.Order, cfg.Generators)
	if err != nil {
		return nil, err
	}
	s := cfg.withDefaults(order)
	if err := s.typeRoles(cfg); err != nil {
		return nil, err
	}
	if err := s.configKinds(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// check refuses a Config whose required fields are missing or whose
// numbers are out of range.
func (cfg *Config) check() error {
	if cfg.Builder == nil {
		return errors.New("xds: Config.Builder is nil")
	}
	if len(cfg.Generators) == 0 {
		return errors.New("xds: Config.Generators is empty")
	}
	for t, g := range cfg.Generators {
		if t == "" {
			return errors.New("xds: Config.Generators has an empty type URL")
		}
		if g == nil {
			return fmt.Errorf("xds: Config.Generators[%s] is nil", t)
		}
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{
		{"WriteTimeout", cfg.WriteTimeout}, {"GenerateTimeout", cfg.GenerateTimeout},
		{"Debounce.After", cfg.Debounce.After}, {"Debounce.Max", cfg.Debounce.Max},
		{"Phases.Timeout", cfg.Phases.Timeout},
		{"Backoff.Initial", cfg.Backoff.Initial}, {"Backoff.Max", cfg.Backoff.Max},
		{"FirstRequestTimeout", cfg.FirstRequestTimeout},
	} {
		if c.v < 0 {
			return fmt.Errorf("xds: Config.%s %v is negative", c.name, c.v)
		}
	}
	switch {
	case cfg.Concurrency < 0:
		return fmt.Errorf("xds: Config.Concurrency %d is negative", cfg.Concurrency)
	case cfg.NewStreamRate < 0 || math.IsNaN(cfg.NewStreamRate):
		return fmt.Errorf("xds: Config.NewStreamRate %v is negative", cfg.NewStreamRate)
	case cfg.NewStreamWait < 0:
		return fmt.Errorf("xds: Config.NewStreamWait %v is negative", cfg.NewStreamWait)
	case cfg.NewStreamBurst < 0:
		return fmt.Errorf("xds: Config.NewStreamBurst %d is negative", cfg.NewStreamBurst)
	case cfg.MaxResourceNames < 0:
		return fmt.Errorf("xds: Config.MaxResourceNames %d is negative", cfg.MaxResourceNames)
	case cfg.MaxNameLength < 0:
		return fmt.Errorf("xds: Config.MaxNameLength %d is negative", cfg.MaxNameLength)
	case cfg.MaxSubscriptionBytes < 0:
		return fmt.Errorf("xds: Config.MaxSubscriptionBytes %d is negative", cfg.MaxSubscriptionBytes)
	case cfg.MaxSubscriptionBytes > math.MaxInt32:
		return fmt.Errorf("xds: Config.MaxSubscriptionBytes %d exceeds %d", cfg.MaxSubscriptionBytes, math.MaxInt32)
	case cfg.MaxRequestBytes < 0:
		return fmt.Errorf("xds: Config.MaxRequestBytes %d is negative", cfg.MaxRequestBytes)
	case cfg.MaxInitialRequestBytes < 0:
		return fmt.Errorf("xds: Config.MaxInitialRequestBytes %d is negative", cfg.MaxInitialRequestBytes)
	case cfg.MaxInitialResourceVersions < 0:
		return fmt.Errorf("xds: Config.MaxInitialResourceVersions %d is negative", cfg.MaxInitialResourceVersions)
	case cfg.MaxResponseBytes < 0:
		return fmt.Errorf("xds: Config.MaxResponseBytes %d is negative", cfg.MaxResponseBytes)
	case cfg.MaxStreamsPerConnection < 0:
		return fmt.Errorf("xds: Config.MaxStreamsPerConnection %d is negative", cfg.MaxStreamsPerConnection)
	case cfg.Backoff.Max > 0 && cfg.Backoff.Initial > cfg.Backoff.Max:
		return fmt.Errorf("xds: Config.Backoff.Initial %v exceeds Backoff.Max %v", cfg.Backoff.Initial, cfg.Backoff.Max)
	}
	return nil
}

// withDefaults returns the settings of cfg, each zero field given its
// default, for types in order.
func (cfg *Config) withDefaults(order []TypeURL) *settings {
	s := &settings{
		Settings: session.Settings{
			TypeURLs:                   make([]string, len(order)),
			TypeIndex:                  make(map[string]int, len(order)),
			FullState:                  make([]bool, len(order)),
			Kinds:                      make([][]string, len(order)),
			BackoffInitial:             cmpOr(cfg.Backoff.Initial, DefaultBackoffInitial),
			BackoffMax:                 cmpOr(cfg.Backoff.Max, DefaultBackoffMax),
			MaxResourceNames:           cmpOr(cfg.MaxResourceNames, DefaultMaxResourceNames),
			MaxNameLength:              cmpOr(cfg.MaxNameLength, DefaultMaxNameLength),
			MaxSubscriptionBytes:       cmpOr(cfg.MaxSubscriptionBytes, DefaultMaxSubscriptionBytes),
			MaxRequestBytes:            cmpOr(cfg.MaxRequestBytes, DefaultMaxRequestBytes),
			MaxInitialRequestBytes:     cmpOr(cfg.MaxInitialRequestBytes, DefaultMaxInitialRequestBytes),
			MaxInitialResourceVersions: cmpOr(cfg.MaxInitialResourceVersions, DefaultMaxInitialResourceVersions),
			MaxResponseBytes:           cmpOr(cfg.MaxResponseBytes, DefaultMaxResponseBytes),
			SendOversized:              cfg.SendOversized,
			ResourceErrors:             cfg.ResourceErrors,
			PhaseWait:                  !cfg.Phases.NoWait,
			PhaseTimeout:               cmpOr(cfg.Phases.Timeout, DefaultPhaseTimeout),
			SendMissingReferences:      cfg.Phases.SendMissingReferences,
			Deferred:                   make([]bool, len(order)),
			AnswerReason:               pushcontext.NewReasonStats(pushcontext.ReasonProxyRequest),
		},
		order:                   order,
		index:                   make(map[TypeURL]int, len(order)),
		builder:                 cfg.Builder,
		generators:              make([]Generator, len(order)),
		initProxy:               cfg.InitProxy,
		authenticate:            cfg.Authenticate,
		authorize:               cfg.Authorize,
		debounce:                cfg.Debounce,
		concurrency:             cfg.Concurrency,
		writeTimeout:            cmpOr(cfg.WriteTimeout, DefaultWriteTimeout),
		generateTimeout:         cmpOr(cfg.GenerateTimeout, DefaultGenerateTimeout),
		newStreamRate:           cmpOr(cfg.NewStreamRate, math.Inf(1)),
		maxOpeningStreams:       max(cmpOr(cfg.MaxOpeningStreams, DefaultMaxOpeningStreams()), 0),
		newStreamBurst:          cfg.NewStreamBurst,
		newStreamWait:           cmpOr(cfg.NewStreamWait, DefaultNewStreamWait),
		firstRequestTimeout:     cmpOr(cfg.FirstRequestTimeout, DefaultFirstRequestTimeout),
		maxStreamsPerConnection: cmpOr(cfg.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection),
		clock:                   cfg.Clock,
		logger:                  cfg.Logger,
	}
	s.hooks.Store(&cfg.Hooks)
	s.BackoffInitial = min(s.BackoffInitial, s.BackoffMax)
	if s.newStreamBurst == 0 {
		s.newStreamBurst = max(1, int(min(s.newStreamRate, 1<<20)))
	}
	if s.concurrency == 0 {
		s.concurrency = pushqueue.DefaultConcurrency()
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	s.Epoch = s.clock.Now()
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s
}

// typeRoles records each type's place: its index, generator, whether it is
// a leaf, full-state, or has its removals deferred.
func (s *settings) typeRoles(cfg *Config) error {
	order := s.order
	s.Leaf = make([]bool, len(order))
	s.DeltaGenerators = make([]bool, len(order))
	s.deltaGeneratorOf = make([]DeltaGenerator, len(order))
	for i, t := range order {
		s.index[t] = i
		s.TypeURLs[i], s.TypeIndex[string(t)] = string(t), i
		s.generators[i] = cfg.Generators[t]
		s.deltaGeneratorOf[i], s.DeltaGenerators[i] = s.generators[i].(DeltaGenerator)
		s.Leaf[i] = t == EndpointType || t == SecretType
	}
	s.EDSIndex = s.typeIndex(EndpointType)
	s.CDSIndex = s.typeIndex(ClusterType)
	s.LDSIndex = s.typeIndex(ListenerType)
	s.RDSIndex = s.typeIndex(RouteType)
	full := cfg.FullStateTypes
	if len(full) == 0 {
		full = DefaultFullStateTypes()
	}
	for _, t := range full {
		if t == "" {
			return errors.New("xds: Config.FullStateTypes has an empty type URL")
		}
		if i := s.typeIndex(t); i >= 0 {
			s.FullState[i] = true
		}
	}
	deferred := cfg.Phases.DeferredRemovals
	if len(deferred) == 0 {
		deferred = DefaultDeferredRemovals()
	}
	for _, t := range deferred {
		if t == "" {
			return errors.New("xds: Config.Phases.DeferredRemovals has an empty type URL")
		}
		if i := s.typeIndex(t); i >= 0 && !s.Deferred[i] {
			s.Deferred[i] = true
			s.RemovalOrder = append(s.RemovalOrder, i)
		}
	}
	return nil
}

// configKinds checks and records the config kinds of each type
// (TypeKinds) and of InitProxy (ProxyKinds).
func (s *settings) configKinds(cfg *Config) error {
	external := make(map[string]bool, len(cfg.ExternalKinds))
	for _, k := range cfg.ExternalKinds {
		if k == "" {
			return errors.New("xds: Config.ExternalKinds has an empty kind")
		}
		external[k] = true
	}
	s.knownKinds = func(string) bool { return true }
	if kl, ok := cfg.Builder.(kindLister); ok {
		s.knownKinds = func(k string) bool { return external[k] || slices.Contains(kl.Kinds(), k) }
	}
	for t, kinds := range cfg.TypeKinds {
		i := s.typeIndex(t)
		if i < 0 {
			return fmt.Errorf("xds: Config.TypeKinds names %s, which has no generator", t)
		}
		if kinds == nil {
			kinds = []string{} // declared, fed by no kind: only Forced pushes
		}
		for _, k := range kinds {
			if k == "" {
				return fmt.Errorf("xds: Config.TypeKinds[%s] has an empty kind", t)
			}
			if !s.knownKinds(k) {
				return fmt.Errorf("xds: Config.TypeKinds[%s] has kind %q, which no Builder index is registered with (register the index before New, or list the kind in Config.ExternalKinds)", t, k)
			}
		}
		s.Kinds[i] = slices.Clone(kinds)
	}
	for _, k := range cfg.ProxyKinds {
		if k == "" {
			return errors.New("xds: Config.ProxyKinds has an empty kind")
		}
		if !s.knownKinds(k) {
			return fmt.Errorf("xds: Config.ProxyKinds has kind %q, which no Builder index is registered with (register the index before New, or list the kind in Config.ExternalKinds)", k)
		}
	}
	s.ProxyKinds = slices.Clone(cfg.ProxyKinds)
	s.IndexKinds()
	return s.namedKinds(cfg)
}

// namedKinds checks and records Config.NamedKinds: each kind feeds its
// type alone, every type declares its kinds, and InitProxy reads none.
func (s *settings) namedKinds(cfg *Config) error {
	if len(cfg.NamedKinds) == 0 {
		return nil
	}
	if cfg.ProxyKinds == nil && cfg.InitProxy != nil {
		return errors.New("xds: Config.NamedKinds is set but ProxyKinds is nil (InitProxy reads every kind, so a named change could change any proxy)")
	}
	for i, t := range s.order {
		if s.Kinds[i] == nil {
			return fmt.Errorf("xds: Config.NamedKinds is set but TypeKinds has no entry for %s, which every kind then feeds", t)
		}
	}
	s.named = make(map[string]int, len(cfg.NamedKinds))
	for k, t := range cfg.NamedKinds {
		i := s.typeIndex(t)
		switch {
		case k == "":
			return errors.New("xds: Config.NamedKinds has an empty kind")
		case i < 0:
			return fmt.Errorf("xds: Config.NamedKinds[%q] is %s, which has no generator", k, t)
		case !slices.Contains(s.Kinds[i], k):
			return fmt.Errorf("xds: Config.NamedKinds[%q] is %s, whose TypeKinds do not list %q", k, t, k)
		case slices.Contains(cfg.ProxyKinds, k):
			return fmt.Errorf("xds: Config.NamedKinds has %q, which ProxyKinds lists: a key of it may change what InitProxy returns", k)
		}
		for j, kinds := range s.Kinds {
			if j != i && slices.Contains(kinds, k) {
				return fmt.Errorf("xds: Config.NamedKinds[%q] is %s, but TypeKinds[%s] lists %q too", k, t, s.order[j], k)
			}
		}
		s.named[k] = i
	}
	s.digestSlot = make([]int, len(s.order))
	for i := range s.digestSlot {
		s.digestSlot[i] = -1
	}
	for _, i := range s.named {
		if s.digestSlot[i] < 0 {
			s.digestSlot[i] = s.digestSlots
			s.digestSlots++
		}
	}
	s.digestSeed = maphash.MakeSeed()
	return nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// typeIndex returns the index of t in the push order, or -1.
func (s *settings) typeIndex(t TypeURL) int {
	if i, ok := s.index[t]; ok {
		return i
	}
	return -1
}
