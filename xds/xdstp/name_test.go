package xdstp_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/xdspush/xdspush/xds/xdstp"
)

const lds = "envoy.config.listener.v3.Listener"

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"already canonical", "xdstp://auth/" + lds + "/ns/foo", "xdstp://auth/" + lds + "/ns/foo"},
		{"scheme in upper case", "XDSTP://auth/" + lds + "/foo", "xdstp://auth/" + lds + "/foo"},
		{"no authority", "xdstp:///" + lds + "/foo", "xdstp:///" + lds + "/foo"},
		{"context sorted", "xdstp://a/" + lds + "/foo?z=1&a=2&m=3", "xdstp://a/" + lds + "/foo?a=2&m=3&z=1"},
		{"':' left as it is", "xdstp://a/" + lds + "/10.0.0.1:8080", "xdstp://a/" + lds + "/10.0.0.1:8080"},
		{"':' decoded", "xdstp://a/" + lds + "/10.0.0.1%3a8080", "xdstp://a/" + lds + "/10.0.0.1:8080"},
		{"'@' decoded", "xdstp://a/" + lds + "/x%40y", "xdstp://a/" + lds + "/x@y"},
		{"unreserved decoded", "xdstp://a/" + lds + "/%66%6F%6f", "xdstp://a/" + lds + "/foo"},
		{"hex in upper case", "xdstp://a/" + lds + "/a%2fb", "xdstp://a/" + lds + "/a%2Fb"},
		{"space encoded", "xdstp://a/" + lds + "/a b", "xdstp://a/" + lds + "/a%20b"},
		{"percent encoded", "xdstp://a/" + lds + "/100%25", "xdstp://a/" + lds + "/100%25"},
		{"glob", "xdstp://a/" + lds + "/ns/*", "xdstp://a/" + lds + "/ns/*"},
		{"glob's star decoded", "xdstp://a/" + lds + "/ns/%2A", "xdstp://a/" + lds + "/ns/*"},
		{"parameter separators encoded", "xdstp://a/" + lds + "/x?k=a%26b%3Dc%2Bd", "xdstp://a/" + lds + "/x?k=a%26b%3Dc%2Bd"},
		{"'/' and '?' in a parameter", "xdstp://a/" + lds + "/x?k=%2Fp%3Fq", "xdstp://a/" + lds + "/x?k=/p?q"},
		{"empty query", "xdstp://a/" + lds + "/x?", "xdstp://a/" + lds + "/x"},
		{"empty value", "xdstp://a/" + lds + "/x?k=", "xdstp://a/" + lds + "/x?k="},
		{"authority with a port", "xdstp://a.example:443/" + lds + "/x", "xdstp://a.example:443/" + lds + "/x"},
		{"IPv6 authority", "xdstp://[::1]:443/" + lds + "/x", "xdstp://[::1]:443/" + lds + "/x"},
		{"not xdstp", "backend-1", "backend-1"},
		{"not xdstp, with odd bytes", "a b%zz", "a b%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := xdstp.Canonical(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("Canonical(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
			again, err := xdstp.Canonical(got)
			if err != nil || again != got {
				t.Fatalf("Canonical(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, in, errHas string
	}{
		{"another scheme", "http://a/" + lds + "/x", "not an xdstp"},
		{"no type", "xdstp://a", "no resource type"},
		{"empty type", "xdstp://a//x", "no resource type"},
		{"no id", "xdstp://a/" + lds, "no id"},
		{"empty id", "xdstp://a/" + lds + "/", "no id"},
		{"empty segment", "xdstp://a/" + lds + "/ns//x", "empty segment"},
		{"trailing slash", "xdstp://a/" + lds + "/ns/", "empty segment"},
		{"type with a space", "xdstp://a/envoy config/x", "resource type"},
		{"type percent-encoded", "xdstp://a/envoy%2Econfig/x", "resource type"},
		{"bad escape", "xdstp://a/" + lds + "/x%zz", "malformed percent-encoding"},
		{"cut escape", "xdstp://a/" + lds + "/x%2", "malformed percent-encoding"},
		{"bad escape in the authority", "xdstp://a%/" + lds + "/x", "authority"},
		{"fragment", "xdstp://a/" + lds + "/x#entry=y", "fragment"},
		{"parameter without '='", "xdstp://a/" + lds + "/x?k", "key=value"},
		{"empty key", "xdstp://a/" + lds + "/x?=v", "empty key"},
		{"key twice", "xdstp://a/" + lds + "/x?k=1&k=2", "twice"},
		{"key twice, spelt differently", "xdstp://a/" + lds + "/x?k=1&%6B=2", "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := xdstp.Parse(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Parse(%q) = %v, %v; want an error about %q", tt.in, n, err, tt.errHas)
			}
			if _, err := xdstp.Canonical(tt.in); xdstp.Is(tt.in) && err == nil {
				t.Fatalf("Canonical(%q) accepted what Parse refuses", tt.in)
			}
		})
	}
}

func TestParse(t *testing.T) {
	n, err := xdstp.Parse("xdstp://auth%2Done/" + lds + "/ns/a%2Fb?b=2&a=1")
	if err != nil {
		t.Fatal(err)
	}
	want := xdstp.Name{Authority: "auth-one", Type: lds, ID: []string{"ns", "a/b"}, Context: map[string]string{"a": "1", "b": "2"}}
	if !n.Equal(want) {
		t.Fatalf("Parse = %+v; want %+v", n, want)
	}
	if got := n.TypeURL(); got != "type.googleapis.com/"+lds {
		t.Errorf("TypeURL() = %q", got)
	}
}

func TestCollections(t *testing.T) {
	parse := func(s string) xdstp.Name {
		t.Helper()
		n, err := xdstp.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	glob := parse("xdstp://a/" + lds + "/ns/*?k=v")
	tests := []struct {
		name   string
		member string
		want   bool
	}{
		{"member", "xdstp://a/" + lds + "/ns/l1?k=v", true},
		{"member, spelt differently", "XDSTP://a/" + lds + "/n%73/l1?k=v", true},
		{"other context", "xdstp://a/" + lds + "/ns/l1?k=w", false},
		{"no context", "xdstp://a/" + lds + "/ns/l1", false},
		{"other authority", "xdstp://b/" + lds + "/ns/l1?k=v", false},
		{"other type", "xdstp://a/envoy.config.cluster.v3.Cluster/ns/l1?k=v", false},
		{"deeper", "xdstp://a/" + lds + "/ns/sub/l1?k=v", false},
		{"other prefix", "xdstp://a/" + lds + "/other/l1?k=v", false},
		{"the collection itself", "xdstp://a/" + lds + "/ns/*?k=v", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := parse(tt.member)
			if got := glob.Contains(m); got != tt.want {
				t.Fatalf("%v.Contains(%v) = %v; want %v", glob, m, got, tt.want)
			}
			if got := xdstp.InCollection(glob.String(), m.String()); got != tt.want {
				t.Fatalf("InCollection(%q, %q) = %v; want %v", glob, m, got, tt.want)
			}
			if tt.want && !m.Collection().Equal(glob) {
				t.Fatalf("%v.Collection() = %v; want %v", m, m.Collection(), glob)
			}
		})
	}
	if !glob.IsGlob() || parse("xdstp://a/"+lds+"/ns/l1").IsGlob() {
		t.Error("IsGlob is wrong")
	}
	if !xdstp.IsGlob(glob.String()) || xdstp.IsGlob("xdstp://a/"+lds+"/ns/l1") || xdstp.IsGlob("*") || xdstp.IsGlob("xdstp://a/*") {
		t.Error("the function IsGlob is wrong")
	}
	if got := parse("xdstp://a/" + lds + "/l1").Collection().String(); got != "xdstp://a/"+lds+"/*" {
		t.Errorf("Collection of a one-segment id = %q", got)
	}
	// Collection does not change the name it is called on.
	m := parse("xdstp://a/" + lds + "/ns/l1")
	_ = m.Collection()
	if !slices.Equal(m.ID, []string{"ns", "l1"}) {
		t.Errorf("Collection changed its receiver: %v", m.ID)
	}
}

// FuzzParse checks that Parse never panics, that what it accepts has a
// canonical form it parses back to the same parts, and that the canonical
// form is a fixed point.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"xdstp://auth/" + lds + "/ns/foo?b=2&a=1",
		"xdstp:///" + lds + "/x%2Fy",
		"xdstp://[::1]:80/" + lds + "/ns/*",
		"XDSTP://a/" + lds + "/10.0.0.1%3a8080?k=%26",
		"xdstp://a/" + lds + "/x#frag",
		"xdstp://a/" + lds + "/x?k=1&k=2",
		"backend",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := xdstp.Parse(s)
		if err != nil {
			return
		}
		c := n.String()
		m, err := xdstp.Parse(c)
		if err != nil {
			t.Fatalf("Parse(%q) failed on the canonical form of %q: %v", c, s, err)
		}
		if !m.Equal(n) || !maps.Equal(m.Context, n.Context) {
			t.Fatalf("Parse(String(Parse(%q))) = %+v; want %+v", s, m, n)
		}
		if again := m.String(); again != c {
			t.Fatalf("canonical form of %q is not a fixed point: %q, then %q", s, c, again)
		}
	})
}

// FuzzInCollection checks the string forms against the parsed ones: for
// two names in canonical form, IsGlob and InCollection agree with
// Name.IsGlob and Name.Contains.
func FuzzInCollection(f *testing.F) {
	f.Add("xdstp://a/"+lds+"/ns/*?k=v", "xdstp://a/"+lds+"/ns/l1?k=v")
	f.Add("xdstp://a/"+lds+"/ns/*", "xdstp://a/"+lds+"/ns/sub/l1")
	f.Add("xdstp://a/"+lds+"/*", "xdstp://a/"+lds+"/x%3Fy")
	f.Add("xdstp:///"+lds+"/*?a=1&b=2", "xdstp:///"+lds+"/l?b=2&a=1")
	f.Fuzz(func(t *testing.T, a, b string) {
		g, err := xdstp.Parse(a)
		if err != nil {
			return
		}
		m, err := xdstp.Parse(b)
		if err != nil {
			return
		}
		gs, ms := g.String(), m.String()
		if got := xdstp.IsGlob(gs); got != g.IsGlob() {
			t.Fatalf("IsGlob(%q) = %v; Name.IsGlob %v", gs, got, g.IsGlob())
		}
		if got, want := xdstp.InCollection(gs, ms), g.Contains(m); got != want {
			t.Fatalf("InCollection(%q, %q) = %v; Name.Contains %v", gs, ms, got, want)
		}
	})
}
