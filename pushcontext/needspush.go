package pushcontext

// Scope is what one client (proxy) depends on. The host implements it from
// what it knows about the proxy: the services it can reach, the routes and
// secrets it uses, and so on.
//
// NeedsPush calls DependsOn from the goroutine that serves the proxy, once or
// twice per changed key; it must be fast, must not block, and must give the
// same answer for the same key while a Scope value is in use. A Scope must
// be safe for concurrent use if the host shares it between proxies.
type Scope interface {
	// DependsOn reports whether a change to key may change what the proxy
	// receives.
	DependsOn(key ConfigKey) bool
}

// ScopeFunc adapts a function to Scope.
//
// A nil ScopeFunc depends on every key, like a nil Scope passed to
// NeedsPush as the current scope.
type ScopeFunc func(key ConfigKey) bool

// DependsOn calls f(key); a nil f depends on every key.
func (f ScopeFunc) DependsOn(key ConfigKey) bool {
	if f == nil {
		return true
	}
	return f(key)
}

var (
	_ Scope = ScopeFunc(nil)
	_ Scope = ConfigSet(nil)
)

// NeedsPush decides whether a proxy needs req, and with which keys.
//
// scope is the proxy's current dependency scope and prev the one it had
// when it last received a push (nil if there was none, or if it has not
// changed). A key is kept if scope or prev depends on it: prev is what
// carries the removal of a dependency to the proxy that used to have it
// (after a route stops referencing a cluster, the proxy that used that route
// must still hear about the cluster).
//
// The rules, in order:
//
//   - req nil: (nil, false).
//   - req.Forced: (req, true), unchanged; dependencies are not consulted.
//   - no ConfigsUpdated: (nil, false); nothing changed.
//   - scope nil (or a nil ScopeFunc): the proxy depends on every key, so
//     (req, true). A host that tracks no dependencies passes nil.
//   - otherwise the keys that scope or prev depend on are kept. None kept:
//     (nil, false). All kept: (req, true), req itself, without allocating.
//     Some kept: (copy, true), where copy is a new PushRequest equal to req
//     except that ConfigsUpdated holds only the kept keys; its other maps
//     are req's own (see "Ownership" in the package documentation).
//
// NeedsPush never modifies req, which is typically shared by every proxy of
// a push. It is safe to call concurrently as long as the Scopes are.
func NeedsPush(scope, prev Scope, req *PushRequest) (*PushRequest, bool) {
	switch {
	case req == nil:
		return nil, false
	case req.Forced:
		return req, true
	case len(req.ConfigsUpdated) == 0:
		return nil, false
	case isNilScope(scope):
		return req, true
	}
	if isNilScope(prev) {
		prev = nil
	}
	// First pass: count without allocating, so that the common "all kept"
	// and "none kept" outcomes cost nothing.
	kept := 0
	for k := range req.ConfigsUpdated {
		if keep(scope, prev, k) {
			kept++
		}
	}
	switch kept {
	case 0:
		return nil, false
	case len(req.ConfigsUpdated):
		return req, true
	}
	// Second pass: copy the kept keys. DependsOn answers the same as in
	// the first pass (a Scope is stable while in use), so kept is exact.
	out := make(ConfigSet, kept)
	for k := range req.ConfigsUpdated {
		if keep(scope, prev, k) {
			out[k] = struct{}{}
		}
	}
	cp := *req
	cp.ConfigsUpdated = out
	return &cp, true
}

func keep(scope, prev Scope, k ConfigKey) bool {
	return scope.DependsOn(k) || (prev != nil && prev.DependsOn(k))
}

// isNilScope reports a nil interface or a nil ScopeFunc inside one.
func isNilScope(s Scope) bool {
	if s == nil {
		return true
	}
	f, ok := s.(ScopeFunc)
	return ok && f == nil
}
