package xds

import (
	"errors"
	"fmt"
	"strings"
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
	return (&refError{fromType: string(e.FromType), from: e.From, toType: string(e.ToType), to: e.To, removal: e.Removal, rejected: e.Rejected}).Error()
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
	return (&tooLargeError{typ: string(e.Type), resource: e.Resource, bytes: e.Bytes, max: e.Max}).Error()
}

// publicErr returns err, a failure the core recorded, as the Server
// reports it: a reference or a response the core held back becomes a
// *ReferenceError or a *ResponseTooLargeError; any other error (the host's
// code's) is reported as it is.
func publicErr(err error) error {
	switch e := err.(type) {
	case *refError:
		return e.public()
	case *tooLargeError:
		return &ResponseTooLargeError{Type: TypeURL(e.typ), Resource: e.resource, Bytes: e.bytes, Max: e.max}
	}
	return err
}

// public returns the *ReferenceError the Server reports of e.
func (e *refError) public() *ReferenceError {
	return &ReferenceError{FromType: TypeURL(e.fromType), From: e.from, ToType: TypeURL(e.toType), To: e.to, Removal: e.removal, Rejected: e.rejected}
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
