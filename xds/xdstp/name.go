package xdstp

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Scheme is the scheme of the names this package handles, with its
// separator.
const Scheme = "xdstp://"

// typePrefix turns a Name's Type into a type URL.
const typePrefix = "type.googleapis.com/"

// Glob is the last id segment of a glob collection.
const Glob = "*"

// Name is an xdstp:// resource name, decoded.
type Name struct {
	// Authority is the authority the name is resolved against (gRFC A47);
	// it may be empty.
	Authority string
	// Type is the resource's protobuf message type, without the
	// "type.googleapis.com/" of its type URL.
	Type string
	// ID is the id's segments, at least one, none empty. A glob
	// collection's last segment is Glob.
	ID []string
	// Context holds the context parameters; nil or empty when there are
	// none.
	Context map[string]string
}

// Is reports whether s has the xdstp:// scheme (in any case). It does not
// check the rest of s.
func Is(s string) bool {
	return len(s) >= len(Scheme) && strings.EqualFold(s[:len(Scheme)], Scheme)
}

// Parse parses s, an xdstp:// name in any spelling, into its parts,
// decoded. See the package documentation for what it refuses.
func Parse(s string) (Name, error) {
	if !Is(s) {
		return Name{}, fmt.Errorf("xdstp: %q is not an xdstp:// name", s)
	}
	rest := s[len(Scheme):]
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return Name{}, fmt.Errorf("xdstp: %q has a fragment (%q): processing directives are not part of a resource name", s, rest[i:])
	}
	var query string
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i+1:]
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return Name{}, fmt.Errorf("xdstp: %q has no resource type", s)
	}
	var n Name
	var err error
	if n.Authority, err = unescape(rest[:slash]); err != nil {
		return Name{}, fmt.Errorf("xdstp: the authority of %q: %w", s, err)
	}
	rest = rest[slash+1:]
	typ, id, ok := strings.Cut(rest, "/")
	if typ == "" {
		return Name{}, fmt.Errorf("xdstp: %q has no resource type", s)
	}
	if !validType(typ) {
		return Name{}, fmt.Errorf("xdstp: resource type %q of %q: want a protobuf message name (letters, digits, '.', '_')", typ, s)
	}
	n.Type = typ
	if !ok || id == "" {
		return Name{}, fmt.Errorf("xdstp: %q has no id after its resource type", s)
	}
	for seg := range strings.SplitSeq(id, "/") {
		if seg == "" {
			return Name{}, fmt.Errorf("xdstp: the id of %q has an empty segment", s)
		}
		d, err := unescape(seg)
		if err != nil {
			return Name{}, fmt.Errorf("xdstp: the id of %q: %w", s, err)
		}
		n.ID = append(n.ID, d)
	}
	if n.Context, err = parseContext(query); err != nil {
		return Name{}, fmt.Errorf("xdstp: the context parameters of %q: %w", s, err)
	}
	return n, nil
}

// parseContext parses the query of a name: key=value pairs joined by '&'.
func parseContext(query string) (map[string]string, error) {
	if query == "" {
		return nil, nil
	}
	params := make(map[string]string)
	for kv := range strings.SplitSeq(query, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		key, err := unescape(k)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("%q has an empty key", kv)
		}
		val, err := unescape(v)
		if err != nil {
			return nil, err
		}
		if _, dup := params[key]; dup {
			return nil, fmt.Errorf("key %q is given twice", key)
		}
		params[key] = val
	}
	return params, nil
}

// Canonical returns s in canonical form if it is an xdstp:// name, and s
// unchanged otherwise (a plain name such as "backend" is its own canonical
// form). The error is Parse's.
func Canonical(s string) (string, error) {
	if !Is(s) {
		return s, nil
	}
	n, err := Parse(s)
	if err != nil {
		return "", err
	}
	return n.String(), nil
}

// String returns n in canonical form (see the package documentation).
func (n Name) String() string {
	var b strings.Builder
	b.Grow(len(Scheme) + len(n.Authority) + len(n.Type) + 16*len(n.ID) + 2)
	b.WriteString(Scheme)
	escape(&b, n.Authority, inAuthority)
	b.WriteByte('/')
	escape(&b, n.Type, inSegment)
	for _, seg := range n.ID {
		b.WriteByte('/')
		escape(&b, seg, inSegment)
	}
	for i, k := range slices.Sorted(maps.Keys(n.Context)) {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		escape(&b, k, inParam)
		b.WriteByte('=')
		escape(&b, n.Context[k], inParam)
	}
	return b.String()
}

// TypeURL returns the type URL of the resources n names.
func (n Name) TypeURL() string { return typePrefix + n.Type }

// IsGlob reports whether n names a glob collection.
func (n Name) IsGlob() bool { return len(n.ID) > 0 && n.ID[len(n.ID)-1] == Glob }

// Collection returns the glob collection n belongs to: n with the last
// segment of its id replaced by Glob. Its Context is n's, shared.
func (n Name) Collection() Name {
	c := n
	if len(n.ID) > 0 {
		c.ID = append(slices.Clone(n.ID[:len(n.ID)-1]), Glob)
	}
	return c
}

// Contains reports whether n, a glob collection, has member m: a name of
// the same authority, type and context parameters whose id is n's with
// its last segment, Glob, replaced by one that is not Glob.
func (n Name) Contains(m Name) bool {
	k := len(n.ID)
	return n.IsGlob() && !m.IsGlob() && len(m.ID) == k &&
		m.Authority == n.Authority && m.Type == n.Type &&
		slices.Equal(m.ID[:k-1], n.ID[:k-1]) && maps.Equal(m.Context, n.Context)
}

// Equal reports whether n and m are the same name (String(n) == String(m)).
func (n Name) Equal(m Name) bool {
	return n.Authority == m.Authority && n.Type == m.Type && slices.Equal(n.ID, m.ID) && maps.Equal(n.Context, m.Context)
}

// validType reports whether typ is a protobuf message name.
func validType(typ string) bool {
	for i := range len(typ) {
		c := typ[i]
		if !(isAlnum(c) || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Where a byte may stand unencoded, following RFC 3986: in an authority,
// in a path segment (pchar), or in a context parameter's key or value (a
// query, less the '&' and '=' that separate the parameters and the '+'
// that some decoders take for a space).
type place uint8

const (
	inAuthority place = iota
	inSegment
	inParam
)

// allowed reports whether c stands unencoded at p in the canonical form.
func allowed(c byte, p place) bool {
	if isAlnum(c) {
		return true
	}
	switch c {
	case '-', '.', '_', '~': // unreserved
		return true
	case '!', '$', '\'', '(', ')', '*', ',', ';': // sub-delims
		return true
	case '&', '=', '+': // sub-delims that separate parameters
		return p != inParam
	case ':', '@':
		return true
	case '/', '?':
		return p == inParam
	case '[', ']': // an IP literal's brackets
		return p == inAuthority
	}
	return false
}

const upperHex = "0123456789ABCDEF"

// escape writes s to b with every byte not allowed at p percent-encoded.
func escape(b *strings.Builder, s string, p place) {
	for i := range len(s) {
		c := s[i]
		if allowed(c, p) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
}

var errEscape = errors.New("malformed percent-encoding")

// unescape decodes the percent-encodings of s.
func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			out = append(out, c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w in %q", errEscape, s)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w in %q", errEscape, s)
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// The functions below work on names in canonical form, as strings, without
// parsing them: for a name that is not canonical, their answers are those
// for another name.

// IsGlob reports whether s, a name in canonical form, names a glob
// collection: an xdstp:// name whose id's last segment is Glob.
func IsGlob(s string) bool {
	if !Is(s) {
		return false
	}
	path, _ := splitQuery(s[len(Scheme):])
	// authority "/" type "/" id: the id's last segment follows the last '/'.
	return strings.Count(path, "/") >= 2 && strings.HasSuffix(path, "/"+Glob)
}

// InCollection reports whether name is a member of glob, both in canonical
// form: glob names a glob collection (IsGlob), and name is an xdstp://
// name of the same authority, type and context parameters whose id is
// glob's with the last segment replaced by one that is not Glob (see
// Name.Contains). It allocates nothing.
func InCollection(glob, name string) bool {
	if !IsGlob(glob) || !Is(name) {
		return false
	}
	gpath, gquery := splitQuery(glob)
	npath, nquery := splitQuery(name)
	prefix := gpath[:len(gpath)-len(Glob)] // up to and with the last '/'
	if gquery != nquery || len(npath) <= len(prefix) || !strings.HasPrefix(npath, prefix) {
		return false
	}
	last := npath[len(prefix):]
	return last != Glob && strings.IndexByte(last, '/') < 0
}

// splitQuery splits s at its first '?', which in a canonical name starts
// the context parameters (a '?' anywhere else is percent-encoded).
func splitQuery(s string) (path, query string) {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}
