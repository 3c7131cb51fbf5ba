package meshconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

const clusterYAML = `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
  type: STATIC
  connect_timeout: 1s
`

const clusterJSON = `{"resources": [{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
  "name": "a", "type": "STATIC", "connect_timeout": "1s"}]}`

func TestParseFile(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		data      string
		wantNames []string // type short name + "/" + name, in order
		wantErrs  []string // substrings, one per problem, in order
	}{
		{name: "yaml", file: "c.yaml", data: clusterYAML, wantNames: []string{"Cluster/a"}},
		{name: "yml", file: "c.yml", data: clusterYAML, wantNames: []string{"Cluster/a"}},
		{name: "json", file: "c.json", data: clusterJSON, wantNames: []string{"Cluster/a"}},
		{name: "json in yaml file", file: "c.yaml", data: clusterJSON, wantNames: []string{"Cluster/a"}},
		{
			name: "several types and version_info",
			file: "c.yaml",
			data: `version_info: "7"
resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: a
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: cert
  generic_secret: {secret: {inline_string: x}}
`,
			wantNames: []string{"ClusterLoadAssignment/a", "Secret/cert"},
		},
		{name: "empty resources list", file: "c.yaml", data: "resources: []\n"},
		{name: "null resources list", file: "c.yaml", data: "resources:\n"},
		{
			name:      "type_url matches",
			file:      "c.yaml",
			data:      "type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster\n" + clusterYAML,
			wantNames: []string{"Cluster/a"},
		},
		{name: "empty file", file: "c.yaml", data: "", wantErrs: []string{"c.yaml: no resources list"}},
		{name: "yaml syntax", file: "c.yaml", data: "resources: [", wantErrs: []string{"c.yaml: yaml: line 1"}},
		{name: "json syntax", file: "c.json", data: `{"resources": [}`, wantErrs: []string{"c.json: invalid character"}},
		{name: "top level list", file: "c.yaml", data: "- a\n", wantErrs: []string{"top level must be an object"}},
		{name: "unknown top-level field", file: "c.yaml", data: "resource: []\n", wantErrs: []string{`unknown top-level field "resource"`}},
		{name: "resources not a list", file: "c.yaml", data: "resources: 3\n", wantErrs: []string{"resources must be a list"}},
		{name: "item not an object", file: "c.yaml", data: "resources: [3]\n", wantErrs: []string{"c.yaml: resources[0]: not an object"}},
		{name: "missing @type", file: "c.yaml", data: "resources: [{name: a}]\n", wantErrs: []string{"resources[0]: missing @type"}},
		{
			name:     "unsupported @type",
			file:     "c.yaml",
			data:     "resources: [{'@type': type.googleapis.com/google.protobuf.Duration, value: 1s}]\n",
			wantErrs: []string{`unsupported @type "type.googleapis.com/google.protobuf.Duration" (want one of Cluster, ClusterLoadAssignment, Listener, RouteConfiguration, Secret)`},
		},
		{
			name:     "unknown field",
			file:     "c.yaml",
			data:     strings.Replace(clusterYAML, "name: a", "name: a\n  colour: red", 1),
			wantErrs: []string{`resources[0] Cluster: unknown field "colour"`},
		},
		{
			name:     "unresolvable nested type",
			file:     "c.yaml",
			data:     "resources:\n- '@type': type.googleapis.com/envoy.config.listener.v3.Listener\n  name: l\n  api_listener: {api_listener: {'@type': type.googleapis.com/no.Such}}\n",
			wantErrs: []string{"resources[0] Listener:  && no.Such"},
		},
		{
			name:     "empty name",
			file:     "c.yaml",
			data:     strings.Replace(clusterYAML, "name: a", "name: ''", 1),
			wantErrs: []string{"resources[0] Cluster: name is empty"},
		},
		{
			name:     "empty cluster_name",
			file:     "c.yaml",
			data:     "resources: [{'@type': type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment}]\n",
			wantErrs: []string{"resources[0] ClusterLoadAssignment: cluster_name is empty"},
		},
		{
			name: "fails ValidateAll",
			file: "c.yaml",
			data: `resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: a
  endpoints:
  - lb_endpoints:
    - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 70000}}}
`,
			wantErrs: []string{`resources[0] ClusterLoadAssignment "a": invalid:  && PortValue && 65535`},
		},
		{
			name:     "type_url mismatch",
			file:     "c.yaml",
			data:     "type_url: type.googleapis.com/envoy.config.listener.v3.Listener\n" + clusterYAML,
			wantErrs: []string{`resources[0] Cluster "a": @type differs from the file's type_url`},
		},
		{
			name: "good and bad items",
			file: "c.yaml",
			data: clusterYAML + `- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: b
  bogus: 1
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: c
`,
			wantNames: []string{"Cluster/a", "Cluster/c"},
			wantErrs:  []string{`resources[1] Cluster: unknown field "bogus"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, problems := ParseFile(tc.file, "", []byte(tc.data))
			var names []string
			for _, r := range rs {
				names = append(names, ShortType(r.TypeURL)+"/"+r.Name)
				if r.File != tc.file || r.Fleet != "" {
					t.Errorf("resource %s has File %q, Fleet %q; want %q, \"\"", r.Name, r.File, r.Fleet, tc.file)
				}
				if r.Hash == [32]byte{} {
					t.Errorf("resource %s has no hash", r.Name)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Errorf("parsed %q; want %q", names, tc.wantNames)
			}
			if len(problems) != len(tc.wantErrs) {
				t.Fatalf("got %d problems %q; want %d", len(problems), problems, len(tc.wantErrs))
			}
			for i, want := range tc.wantErrs {
				got := problems[i].String()
				if !strings.HasPrefix(got, tc.file+": ") {
					t.Errorf("problem %q; want it to start with %q", got, tc.file+": ")
				}
				for _, part := range strings.Split(want, " && ") {
					if !strings.Contains(got, part) {
						t.Errorf("problem %q; want it to contain %q", got, part)
					}
				}
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		name string
		p    Problem
		want string
	}{
		{"whole file", Problem{File: "a.yaml", Index: -1, Msg: "m"}, "a.yaml: m"},
		{"index only", Problem{File: "a.yaml", Index: 2, Msg: "m"}, "a.yaml: resources[2]: m"},
		{"index and type", Problem{File: "a.yaml", Index: 0, Type: "Cluster", Msg: "m"}, "a.yaml: resources[0] Cluster: m"},
		{"everything", Problem{File: "e/a.yaml", Index: 1, Type: "Cluster", Name: "b", Msg: "m"}, `e/a.yaml: resources[1] Cluster "b": m`},
		{"name without index", Problem{File: "a.yaml", Index: -1, Name: "b", Msg: "m"}, `a.yaml: "b": m`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.String(); got != tc.want {
				t.Errorf("String() = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestHashIgnoresFormatting(t *testing.T) {
	reordered := `# a comment
resources:
- connect_timeout: 1.000s
  type: STATIC
  name: a
  "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
`
	a, pa := ParseFile("a.yaml", "", []byte(clusterYAML))
	b, pb := ParseFile("b.json", "", []byte(clusterJSON))
	c, pc := ParseFile("c.yaml", "", []byte(reordered))
	if len(pa)+len(pb)+len(pc) > 0 {
		t.Fatalf("problems: %v %v %v", pa, pb, pc)
	}
	if a[0].Hash != b[0].Hash || a[0].Hash != c[0].Hash {
		t.Errorf("hashes differ for equal content: %x %x %x", a[0].Hash, b[0].Hash, c[0].Hash)
	}
	d, _ := ParseFile("d.yaml", "", []byte(strings.Replace(clusterYAML, "1s", "2s", 1)))
	if d[0].Hash == a[0].Hash {
		t.Errorf("hash unchanged after a content change")
	}
}

func TestIgnoredName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"clusters.yaml", false},
		{"edge", false},
		{"4913.yaml", false},
		{".clusters.yaml", true},
		{"..data", true},
		{".git", true},
		{"clusters.yaml~", true},
		{"#clusters.yaml#", true},
		{"4913", true},
		{"clusters.yaml.swp", true},
		{".clusters.yaml.swx", true},
		{"clusters.yaml.swo", true},
		{"clusters.tmp", true},
		{"clusters.yaml.TMP", true},
		{"clusters.yaml.bak", true},
		{"clusters.yaml.part", true},
		{"", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IgnoredName(tc.name); got != tc.want {
				t.Errorf("IgnoredName(%q) = %t; want %t", tc.name, got, tc.want)
			}
		})
	}
}

// FuzzParse checks that parseFile never panics, that every problem names
// the file, and that what it accepts survives a round trip: writing the
// parsed resources back out in the same format and parsing them again gives
// the same resources with the same hashes.
func FuzzParse(f *testing.F) {
	f.Add("c.yaml", []byte(clusterYAML))
	f.Add("c.json", []byte(clusterJSON))
	f.Add("c.yaml", []byte("resources: ["))
	f.Add("c.yaml", []byte(""))
	f.Add("c.yaml", []byte("resources: [{'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster}]"))
	entries, err := filepath.Glob(filepath.Join(bundled, "*.*"))
	if err != nil {
		f.Fatal(err)
	}
	edge, _ := filepath.Glob(filepath.Join(bundled, "edge", "*.*"))
	for _, p := range append(entries, edge...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(filepath.Base(p), b)
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		file := "x.yaml"
		if strings.HasSuffix(name, ".json") {
			file = "x.json"
		}
		rs, problems := ParseFile(file, "", data)
		for _, p := range problems {
			if !strings.HasPrefix(p.String(), file+": ") {
				t.Errorf("problem %q does not start with the file name", p.String())
			}
		}
		if len(rs) == 0 {
			return
		}
		var b strings.Builder
		b.WriteString(`{"resources":[`)
		for i, r := range rs {
			a, err := anypb.New(r.Message)
			if err != nil {
				t.Fatal(err)
			}
			js, err := protojson.Marshal(a)
			if err != nil {
				t.Fatalf("marshal %s: %v", r.Name, err)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(js)
		}
		b.WriteString("]}")
		again, problems := ParseFile("y.json", "", []byte(b.String()))
		if len(problems) > 0 || len(again) != len(rs) {
			t.Fatalf("round trip: %d resources, problems %q; want %d resources and none", len(again), problems, len(rs))
		}
		for i := range rs {
			if again[i].Name != rs[i].Name || again[i].TypeURL != rs[i].TypeURL || again[i].Hash != rs[i].Hash {
				t.Errorf("round trip of %s %q changed it", ShortType(rs[i].TypeURL), rs[i].Name)
			}
		}
	})
}
