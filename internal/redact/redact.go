package redact

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// Marker replaces the content of a sensitive field.
const Marker = "[redacted]"

// ErrUnresolvable is returned for a google.protobuf.Any whose type is not
// linked into the program: its content cannot be checked.
var ErrUnresolvable = errors.New("redact: unresolvable Any")

// sensitiveName is the option Envoy marks sensitive fields with.
const sensitiveName = "udpa.annotations.sensitive"

// knownSensitive are fields treated as sensitive even if their descriptor
// lacks the option: those the option marks in Envoy's TLS API.
var knownSensitive = map[protoreflect.FullName]bool{
	"envoy.extensions.transport_sockets.tls.v3.TlsCertificate.private_key":      true,
	"envoy.extensions.transport_sockets.tls.v3.TlsCertificate.password":         true,
	"envoy.extensions.transport_sockets.tls.v3.TlsCertificate.pkcs12":           true,
	"envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys.keys":       true,
	"envoy.extensions.transport_sockets.tls.v3.GenericSecret.secret":            true,
	"envoy.extensions.transport_sockets.tls.v3.GenericSecret.secrets":           true,
	"envoy.extensions.transport_sockets.tls.v3.PrivateKeyProvider.typed_config": true,
}

const (
	anyName        protoreflect.FullName = "google.protobuf.Any"
	dataSourceName protoreflect.FullName = "envoy.config.core.v3.DataSource"
)

// walker carries the option's extension type through one walk.
type walker struct {
	ext protoreflect.ExtensionType // nil if not linked into the program
}

func newWalker() walker {
	xt, err := protoregistry.GlobalTypes.FindExtensionByName(sensitiveName)
	if err != nil {
		return walker{}
	}
	return walker{ext: xt}
}

// Message replaces the content of every sensitive field of m, in place,
// and drops the fields unknown to m's descriptors, at any depth (inside
// Any too). It reports whether it changed anything. On error (an Any of a
// type not linked into the program, or that does not decode) m may be
// partly redacted and must not be shown.
func Message(m proto.Message) (changed bool, err error) {
	if m == nil {
		return false, nil
	}
	return newWalker().visit(m.ProtoReflect(), false)
}

// Any returns a with the content of every sensitive field replaced and the
// unknown fields dropped: a itself if nothing had to change, a new Any
// otherwise (a is never modified). It reports whether it changed
// anything. It returns ErrUnresolvable (wrapped) if a's type, or that of
// an Any inside it, is not linked into the program.
func Any(a *anypb.Any) (out *anypb.Any, changed bool, err error) {
	if a == nil {
		return nil, false, nil
	}
	m, err := unpack(a)
	if err != nil {
		return nil, false, err
	}
	changed, err = newWalker().visit(m.ProtoReflect(), false)
	if err != nil || !changed {
		if err != nil {
			return nil, false, err
		}
		return a, false, nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, false, fmt.Errorf("redact: %s: %w", a.GetTypeUrl(), err)
	}
	return &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: b}, true, nil
}

// unpack decodes a into a new message of its type.
func unpack(a *anypb.Any) (proto.Message, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		if errors.Is(err, protoregistry.NotFound) {
			return nil, fmt.Errorf("%w: %s", ErrUnresolvable, a.GetTypeUrl())
		}
		return nil, fmt.Errorf("redact: %s: %w", a.GetTypeUrl(), err)
	}
	return m, nil
}

// sensitive reports whether fd holds secret material.
func (w walker) sensitive(fd protoreflect.FieldDescriptor) bool {
	if knownSensitive[fd.FullName()] {
		return true
	}
	if w.ext == nil {
		return false
	}
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, w.ext) {
		return false
	}
	v, _ := proto.GetExtension(opts, w.ext).(bool)
	return v
}

// visit redacts m: all of it if scrub (m is, or is inside, the value of a
// sensitive field), else its sensitive fields, descending into the others.
// It reports whether it changed m.
func (w walker) visit(m protoreflect.Message, scrub bool) (bool, error) {
	switch m.Descriptor().FullName() {
	case anyName:
		return w.visitAny(m, scrub)
	case dataSourceName:
		if scrub {
			return scrubDataSource(m), nil
		}
	}
	changed := false
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil)
		changed = true
	}
	// Collected first: m is modified while its fields are visited.
	var fds []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fds = append(fds, fd)
		return true
	})
	for _, fd := range fds {
		c, err := w.visitField(m, fd, scrub || w.sensitive(fd))
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	return changed, nil
}

// visitField redacts the values of fd in m.
func (w walker) visitField(m protoreflect.Message, fd protoreflect.FieldDescriptor, scrub bool) (bool, error) {
	changed := false
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		for i := range l.Len() {
			c, err := w.visitValue(fd, l.Get(i), scrub, func(v protoreflect.Value) { l.Set(i, v) })
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		var err error
		mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
			var c bool
			c, err = w.visitValue(fd.MapValue(), v, scrub, func(v protoreflect.Value) { mp.Set(k, v) })
			changed = changed || c
			return err == nil
		})
		if err != nil {
			return false, err
		}
	case fd.Message() != nil:
		return w.visit(m.Mutable(fd).Message(), scrub)
	default:
		return w.visitValue(fd, m.Get(fd), scrub, func(v protoreflect.Value) { m.Set(fd, v) })
	}
	return changed, nil
}

// visitValue redacts one value of kind fd (a field, list element or map
// value): a message is visited, a string or bytes replaced by Marker (with
// set) if scrub.
func (w walker) visitValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, scrub bool, set func(protoreflect.Value)) (bool, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return w.visit(v.Message(), scrub)
	case protoreflect.StringKind:
		if scrub {
			set(protoreflect.ValueOfString(Marker))
			return true, nil
		}
	case protoreflect.BytesKind:
		if scrub {
			set(protoreflect.ValueOfBytes([]byte(Marker)))
			return true, nil
		}
	}
	return false, nil
}

// visitAny redacts the message an Any holds and packs it again if it
// changed. Inside a sensitive field, an Any of a type not linked into the
// program loses its value; elsewhere it is an error.
func (w walker) visitAny(m protoreflect.Message, scrub bool) (bool, error) {
	fields := m.Descriptor().Fields()
	typeURL, value := fields.ByName("type_url"), fields.ByName("value")
	a := &anypb.Any{TypeUrl: m.Get(typeURL).String(), Value: m.Get(value).Bytes()}
	inner, err := unpack(a)
	if err != nil {
		if scrub && errors.Is(err, ErrUnresolvable) {
			m.Clear(value)
			return true, nil
		}
		return false, err
	}
	changed, err := w.visit(inner.ProtoReflect(), scrub)
	if err != nil || !changed {
		return false, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil {
		return false, fmt.Errorf("redact: %s: %w", a.GetTypeUrl(), err)
	}
	m.Set(value, protoreflect.ValueOfBytes(b))
	return true, nil
}

// scrubDataSource replaces the inline content of a DataSource by Marker;
// a filename, environment variable name or watched directory stays.
func scrubDataSource(m protoreflect.Message) bool {
	fields := m.Descriptor().Fields()
	changed := false
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil)
		changed = true
	}
	inlineBytes, inlineString := fields.ByName("inline_bytes"), fields.ByName("inline_string")
	if inlineBytes == nil || inlineString == nil {
		return changed
	}
	if m.Has(inlineBytes) || m.Has(inlineString) {
		m.Clear(inlineBytes)
		m.Set(inlineString, protoreflect.ValueOfString(Marker))
		changed = true
	}
	return changed
}
