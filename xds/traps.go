package xds

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/xdspush/xdspush/pushcontext"
)

// Two configurations are valid but rarely what the host meant, and fail
// quietly: an index that also feeds other kinds regenerates a type on
// changes the type does not list, and an InitProxy that reads an index
// ProxyKinds does not list returns a Scope that goes stale. The Server
// warns of each (a Warn log), at New for the first and at the first
// InitProxy call that shows it for the second.

// indexLister is implemented by Builders that can describe their indexes
// (*pushcontext.Builder).
type indexLister interface {
	Indexes() []pushcontext.IndexInfo
}

// warnWideIndexes logs, for each type whose TypeKinds are given, every
// index registered with one of those kinds and with others as well: a
// change of the others rebuilds the index and so regenerates the type. A
// host that means it lists the other kinds in TypeKinds too.
func (s *settings) warnWideIndexes(b Builder) {
	il, ok := b.(indexLister)
	if !ok {
		return
	}
	indexes := il.Indexes()
	for i, kinds := range s.Kinds {
		if kinds == nil {
			continue // fed by every kind
		}
		for _, ix := range indexes {
			feeds := slices.ContainsFunc(ix.Kinds, func(k string) bool { return slices.Contains(kinds, k) })
			var others []string
			for _, k := range ix.Kinds {
				if !slices.Contains(kinds, k) {
					others = append(others, k)
				}
			}
			if !feeds || len(others) == 0 {
				continue
			}
			s.logger.LogAttrs(context.Background(), slog.LevelWarn,
				"xds: an index registered with a kind of Config.TypeKinds and with others regenerates the type when the others change; list them in TypeKinds if that is meant, or split the index",
				slog.String("type", string(s.order[i])), slog.Any("typeKinds", kinds),
				slog.String("index", ix.Name), slog.Any("indexKinds", ix.Kinds), slog.Any("alsoRegeneratedBy", others))
		}
	}
}

// staleScopes remembers the indexes InitProxy was found to read that
// ProxyKinds does not list, so that each is warned of once.
type staleScopes struct {
	mu     sync.Mutex
	warned map[string]bool // by index name
}

// check logs each index of read whose kinds ProxyKinds does not list: a
// change of it does not call InitProxy again, so what InitProxy made of
// it goes stale.
func (w *staleScopes) check(set *settings, read []pushcontext.IndexInfo) {
	for _, ix := range read {
		if len(ix.Kinds) == 0 || slices.ContainsFunc(ix.Kinds, func(k string) bool { return slices.Contains(set.ProxyKinds, k) }) {
			continue
		}
		w.mu.Lock()
		seen := w.warned[ix.Name]
		if !seen {
			if w.warned == nil {
				w.warned = make(map[string]bool)
			}
			w.warned[ix.Name] = true
		}
		w.mu.Unlock()
		if !seen {
			set.logger.LogAttrs(context.Background(), slog.LevelWarn,
				"xds: InitProxy read an index whose kinds Config.ProxyKinds does not list: a change of them does not call InitProxy again, and the Scope, View and Data it returned go stale; list the kinds in ProxyKinds, or set it to nil",
				slog.String("index", ix.Name), slog.Any("indexKinds", ix.Kinds), slog.Any("proxyKinds", set.ProxyKinds))
		}
	}
}
