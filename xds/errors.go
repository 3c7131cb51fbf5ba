package xds

import (
	"errors"
	"fmt"
	"strings"

	"github.com/xdspush/xdspush/internal/session"
)

// Errors the Server returns.
var (
	// ErrStopped is returned by Sync and WaitForVersion when Run stops
	// before what they wait for has converged, and by WaitReady once Run
	// has returned.
	ErrStopped = errors.New("xds: server stopped")
	// ErrNotLoaded is what a WaitReady whose context ended before Loaded
	// was called wraps.
	ErrNotLoaded = errors.New("xds: the host has not called Loaded: its configuration is not loaded")
	// ErrGenerateTimeout is the error of a Generator call that overran
	// Config.GenerateTimeout.
	ErrGenerateTimeout = errors.New("xds: generate timed out")
)

// PanicError is a panic of host code (a Builder, Generator, InitProxy,
// Authenticate or Bypass), recovered by the Server and turned into an error
// of the call that panicked.
type PanicError struct {
	// Func names the host function: "Build", "Generate", "GenerateDelta",
	// "InitProxy", "Authenticate" or "Bypass".
	Func string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

// Error returns "xds: host Func panicked: Value".
func (e *PanicError) Error() string {
	return fmt.Sprintf("xds: host %s panicked: %v", e.Func, e.Value)
}

// Unwrap returns Value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ResourceError reports a resource a Generator returned that the Server
// refuses to send.
type ResourceError struct {
	Type TypeURL
	// Name is the resource's Name (possibly empty).
	Name string
	// Reason says what is wrong.
	Reason string
}

// Error returns `xds: TYPE resource "NAME": REASON`.
func (e *ResourceError) Error() string {
	return fmt.Sprintf("xds: %s resource %q: %s", e.Type.Short(), e.Name, e.Reason)
}

// ReferenceError reports a reference the Server did not let a client hold
// dangling: a resource naming one the client does not hold (the resource's
// update is held back), or the removal of a resource that one the client
// holds still names (the removal is held back).
type ReferenceError struct {
	// From names the resource that references To. It is empty when a
	// removal is held back because the client still subscribes to To by
	// name: a version of a FromType resource it still serves names it.
	FromType TypeURL
	From     string
	// To is the resource referenced.
	ToType TypeURL
	To     string
	// Removal is true when the removal of To is held back; false when
	// From's update is.
	Removal bool
	// Rejected is true when the hold-back is the client's doing and
	// passes: it rejected To (see its NACK), or it still holds an older
	// From on its way to the configuration. It is false when the proxy's
	// configuration itself is inconsistent: a From that names a To it does
	// not have. Only those are failures (Status, Sync).
	Rejected bool
}

// Error describes the reference.
func (e *ReferenceError) Error() string {
	return (&session.RefError{FromType: string(e.FromType), From: e.From, ToType: string(e.ToType), To: e.To, Removal: e.Removal, Rejected: e.Rejected}).Error()
}

// ResponseTooLargeError reports a response that cannot be split under
// Config.MaxResponseBytes: a SotW Listener or Cluster response, which
// carries the client's whole state of its type, or a single resource over
// the budget on its own. The type is not sent; it fails as a failed
// generation does (stage "generate"), and is retried.
type ResponseTooLargeError struct {
	Type TypeURL
	// Resource names the resource over the budget alone; empty when the
	// whole state of a SotW type is.
	Resource string
	// Bytes is the encoded size of what cannot be split; Max the budget.
	Bytes, Max int
}

// Error describes the response.
func (e *ResponseTooLargeError) Error() string {
	return (&session.TooLargeError{Type: string(e.Type), Resource: e.Resource, Bytes: e.Bytes, Max: e.Max}).Error()
}

// publicErr returns err, a failure the core recorded, as the Server
// reports it: a reference or a response the core held back becomes a
// *ReferenceError or a *ResponseTooLargeError; any other error (the host's
// code's) is reported as it is.
func publicErr(err error) error {
	switch e := err.(type) {
	case *session.RefError:
		return publicRefError(e)
	case *session.TooLargeError:
		return &ResponseTooLargeError{Type: TypeURL(e.Type), Resource: e.Resource, Bytes: e.Bytes, Max: e.Max}
	}
	return err
}

// publicRefError returns the *ReferenceError the Server reports of e.
func publicRefError(e *session.RefError) *ReferenceError {
	return &ReferenceError{FromType: TypeURL(e.FromType), From: e.From, ToType: TypeURL(e.ToType), To: e.To, Removal: e.Removal, Rejected: e.Rejected}
}

// Failure is one thing that keeps the configuration from reaching a
// client, as Sync and WaitForVersion report it.
type Failure struct {
	// Stage is "build" (the Builder; no proxy), "generate" (a Generator,
	// or a check of its output) or "reference" (a reference held back
	// because the configuration lacks what it names). InitProxy has no
	// stage: its failure ends the stream, and the client reconnects.
	Stage string
	// ProxyID, ConnID and Type say where, for every stage but "build".
	ProxyID string
	ConnID  string
	Type    TypeURL
	// Err is the last error.
	Err error
	// Attempts counts the consecutive failures.
	Attempts int
}

func (f Failure) String() string {
	if f.Stage == "build" {
		return fmt.Sprintf("build (%d attempts): %v", f.Attempts, f.Err)
	}
	return fmt.Sprintf("%s %s for %s (%d attempts): %v", f.Stage, f.Type.Short(), f.ConnID, f.Attempts, f.Err)
}

// FailureError is what Sync and WaitForVersion return while something
// they wait for is failing. The Server keeps retrying; a later call
// succeeds once the retries do.
type FailureError struct {
	Failures []Failure
}

// Error lists the failures.
func (e *FailureError) Error() string {
	var b strings.Builder
	b.WriteString("xds: not converging: ")
	for i, f := range e.Failures {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// Unwrap returns the failures' errors.
func (e *FailureError) Unwrap() []error {
	out := make([]error, len(e.Failures))
	for i, f := range e.Failures {
		out[i] = f.Err
	}
	return out
}
