package meshconfig

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// Resource is one parsed and individually valid xDS resource. A Resource is
// immutable once parsed: Message must not be modified, because snapshots
// share it and Hash describes it.
type Resource struct {
	TypeURL string        // type URL, one of the supported types
	Name    string        // name clients subscribe to (cluster_name for endpoints)
	Fleet   string        // fleet, "" for a global file
	File    string        // the file's slash-separated path (relative to the directory, or the key under the prefix)
	Index   int           // position in the file's resources list
	Message proto.Message // the typed message
	Hash    [sha256.Size]byte
}

// Problem is one thing wrong with a configuration, located as precisely as
// it is known.
type Problem struct {
	File  string `json:"file"`           // the file's slash-separated path
	Index int    `json:"index"`          // position in the resources list; -1 for the whole file
	Type  string `json:"type,omitempty"` // short type name, when known
	Name  string `json:"name,omitempty"` // resource name, when known
	Msg   string `json:"message"`        // what is wrong
}

// String formats p as `file: resources[i] Type "name": message`, leaving
// out what is not known.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	sep := ": "
	if p.Index >= 0 {
		b.WriteString(sep + "resources[" + strconv.Itoa(p.Index) + "]")
		sep = " "
	}
	if p.Type != "" {
		b.WriteString(sep + p.Type)
		sep = " "
	}
	if p.Name != "" {
		b.WriteString(sep + strconv.Quote(p.Name))
	}
	b.WriteString(": " + p.Msg)
	return b.String()
}

// resourceProblem returns a Problem located at r.
func resourceProblem(r *Resource, format string, args ...any) Problem {
	return Problem{File: r.File, Index: r.Index, Type: ShortType(r.TypeURL), Name: r.Name, Msg: fmt.Sprintf(format, args...)}
}

// Config file formats, chosen by extension.
const (
	FormatNone = iota // not a configuration file
	FormatYAML
	FormatJSON
)

// fileFormat returns the format of a configuration file by its extension:
// .yaml and .yml are YAML, .json is JSON, anything else is not
// configuration (FormatNone).
func FileFormat(name string) int {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml":
		return FormatYAML
	case ".json":
		return FormatJSON
	}
	return FormatNone
}

// ParseFile parses one file in Envoy's file-subscription format: an object
// with a "resources" list whose items are resources carrying an "@type"
// (optionally "version_info", ignored, and "type_url", which every resource
// must then match). file is the slash path used in problems and fleet the
// scope of the file's resources. Each resource is unmarshalled into its typed
// message, must have a name and must pass its ValidateAll method.
//
// ParseFile returns the resources that are valid and a problem for each one
// that is not, so one pass reports everything wrong with a file. An empty
// file is a problem, not an empty list: a file caught half-written must not
// withdraw its resources.
func ParseFile(file, fleet string, data []byte) ([]*Resource, []Problem) {
	whole := func(format string, args ...any) []Problem {
		return []Problem{{File: file, Index: -1, Msg: fmt.Sprintf(format, args...)}}
	}
	format := FileFormat(file)
	js := data
	if format == FormatYAML {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, whole("%v", err)
		}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		if _, syntax := err.(*json.SyntaxError); syntax {
			return nil, whole("%v", err)
		}
		return nil, whole("top level must be an object with a resources list")
	}
	var typeURL string
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		v := doc[k]
		switch k {
		case "resources", "version_info":
		case "type_url":
			if err := json.Unmarshal(v, &typeURL); err != nil {
				return nil, whole("type_url: %v", err)
			}
		default:
			return nil, whole("unknown top-level field %q (want resources, and optionally version_info and type_url)", k)
		}
	}
	items, ok := doc["resources"]
	if !ok {
		return nil, whole("no resources list")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(items, &raws); err != nil {
		return nil, whole("resources must be a list")
	}
	var (
		out      []*Resource
		problems []Problem
	)
	for i, raw := range raws {
		r, err := parseResource(raw, format == FormatYAML)
		if err != nil {
			p := Problem{File: file, Index: i, Msg: err.Error()}
			if r != nil {
				p.Type, p.Name = ShortType(r.TypeURL), r.Name
			}
			problems = append(problems, p)
			continue
		}
		if typeURL != "" && r.TypeURL != typeURL {
			problems = append(problems, Problem{File: file, Index: i, Type: ShortType(r.TypeURL), Name: r.Name,
				Msg: fmt.Sprintf("@type differs from the file's type_url %q", typeURL)})
			continue
		}
		r.Fleet, r.File, r.Index = fleet, file, i
		out = append(out, r)
	}
	return out, problems
}

// parseResource decodes one item of a resources list. On failure it returns
// an error and, when the type and name are already known, a partial Resource
// to locate the problem.
func parseResource(raw json.RawMessage, fromYAML bool) (*Resource, error) {
	var head struct {
		Type string `json:"@type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("not an object with an @type")
	}
	if head.Type == "" {
		return nil, fmt.Errorf("missing @type")
	}
	if !isSupportedType(head.Type) {
		names := make([]string, 0, numTypes)
		for _, t := range Types() {
			names = append(names, ShortType(t))
		}
		return nil, fmt.Errorf("unsupported @type %q (want one of %s)", head.Type, strings.Join(names, ", "))
	}
	partial := &Resource{TypeURL: head.Type}
	var a anypb.Any
	if err := protojson.Unmarshal(raw, &a); err != nil {
		return partial, fmt.Errorf("%s", cleanProtoError(err, fromYAML))
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return partial, err
	}
	partial.Message = m
	partial.Name = resourceName(m)
	if partial.Name == "" {
		field := "name"
		if head.Type == TypeEndpoint {
			field = "cluster_name"
		}
		return partial, fmt.Errorf("%s is empty", field)
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return partial, fmt.Errorf("invalid: %v", err)
		}
	}
	partial.Hash, err = hashMessage(m)
	if err != nil {
		return partial, err
	}
	return partial, nil
}

// hashMessage returns the SHA-256 of the deterministic wire encoding of m,
// so equal content hashes equally across loads.
func hashMessage(m proto.Message) ([sha256.Size]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("encode: %v", err)
	}
	return sha256.Sum256(b), nil
}

// cleanProtoError returns err's text without the "proto: " prefix (which
// the protobuf module spells with a regular or a non-breaking space) and, for
// YAML input, without the "(line L:C)" position, which would point into the
// JSON converted from the YAML and mislead.
func cleanProtoError(err error, fromYAML bool) string {
	s := err.Error()
	for _, prefix := range []string{"proto: ", "proto:\u00a0"} {
		s = strings.TrimPrefix(s, prefix)
	}
	if fromYAML && strings.HasPrefix(s, "(line ") {
		if i := strings.Index(s, "): "); i >= 0 {
			s = s[i+3:]
		}
	}
	return s
}
