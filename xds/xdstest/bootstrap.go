package xdstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// bootstrapCreds are the channel_creds types every gRPC xDS client
// supports (grpc-js-xds knows only these two).
var bootstrapCreds = []string{"insecure", "google_default"}

// A BootstrapOption relaxes what CheckBootstrap requires.
type BootstrapOption func(*bootstrapRules)

type bootstrapRules struct {
	tls bool
}

// AllowTLSCreds lets CheckBootstrap accept a server whose channel_creds
// have only the "tls" type of gRFC A65 (mutual TLS with the xDS server:
// config with ca_certificate_file, and certificate_file with
// private_key_file, each a file name): grpc-go, grpc-java and gRPC C-core
// load it, grpc-js-xds does not. Use it for a bootstrap meant for a server
// that requires client certificates, where no other type may be listed
// (a client uses the first type it knows, and would connect without one).
func AllowTLSCreds() BootstrapOption { return func(r *bootstrapRules) { r.tls = true } }

// CheckBootstrap reports what in a gRPC xDS bootstrap (the JSON of
// GRPC_XDS_BOOTSTRAP) one of the gRPC xDS clients would refuse, checking
// the strictest of their rules: grpc-go's, and grpc-js-xds's, which also
// requires node.locality ("locality field missing in node element"; an
// empty object will do). It returns nil for a bootstrap that every one of
// them loads, and otherwise an error naming the first field at fault:
//
//   - xds_servers: a non-empty list; each server an object with a
//     non-empty server_uri string and a channel_creds list in which every
//     entry has a string type and at least one type is "insecure" or
//     "google_default"; server_features, if present, a list of strings;
//   - node: an object with a non-empty id string and a locality object
//     (region, zone and sub_zone, if present, strings); cluster, if
//     present, a string; metadata, if present, an object;
//   - federation (gRFC A47), if present: client_default_listener_resource_name_template
//     a string; authorities an object whose every entry is an object
//     whose xds_servers, if present and not empty, follow the rules of the
//     top-level ones, and whose client_listener_resource_name_template, if
//     present, is a string starting with "xdstp://" and the entry's
//     authority (path-escaped), as grpc-go requires.
//
// Options relax these rules (AllowTLSCreds). Use it in a test of every
// bootstrap a project documents or generates.
func CheckBootstrap(data []byte, opts ...BootstrapOption) error {
	var rules bootstrapRules
	for _, o := range opts {
		o(&rules)
	}
	var b struct {
		XDSServers      []json.RawMessage `json:"xds_servers"`
		Node            json.RawMessage   `json:"node"`
		DefaultTemplate json.RawMessage   `json:"client_default_listener_resource_name_template"`
		Authorities     json.RawMessage   `json:"authorities"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("xdstest: bootstrap: %w", err)
	}
	if len(b.XDSServers) == 0 {
		return errors.New("xdstest: bootstrap: xds_servers is missing or empty")
	}
	for i, raw := range b.XDSServers {
		if err := checkServer(raw, rules); err != nil {
			return fmt.Errorf("xdstest: bootstrap: xds_servers[%d]: %w", i, err)
		}
	}
	if err := checkNode(b.Node); err != nil {
		return fmt.Errorf("xdstest: bootstrap: node: %w", err)
	}
	if !isNull(b.DefaultTemplate) {
		var tmpl string
		if err := json.Unmarshal(b.DefaultTemplate, &tmpl); err != nil {
			return errors.New("xdstest: bootstrap: client_default_listener_resource_name_template is not a string")
		}
	}
	if err := checkAuthorities(b.Authorities, rules); err != nil {
		return fmt.Errorf("xdstest: bootstrap: authorities: %w", err)
	}
	return nil
}

// checkAuthorities checks the authorities of a bootstrap (gRFC A47).
func checkAuthorities(raw json.RawMessage, rules bootstrapRules) error {
	if isNull(raw) {
		return nil
	}
	var auths map[string]json.RawMessage
	if err := json.Unmarshal(raw, &auths); err != nil {
		return errors.New("not an object")
	}
	for _, name := range slices.Sorted(maps.Keys(auths)) {
		var a struct {
			XDSServers []json.RawMessage `json:"xds_servers"`
			Template   json.RawMessage   `json:"client_listener_resource_name_template"`
		}
		if err := json.Unmarshal(auths[name], &a); err != nil || isNull(auths[name]) {
			return fmt.Errorf("%q: not an object with the expected fields", name)
		}
		for i, s := range a.XDSServers {
			if err := checkServer(s, rules); err != nil {
				return fmt.Errorf("%q: xds_servers[%d]: %w", name, i, err)
			}
		}
		if isNull(a.Template) {
			continue
		}
		var tmpl string
		if err := json.Unmarshal(a.Template, &tmpl); err != nil {
			return fmt.Errorf("%q: client_listener_resource_name_template is not a string", name)
		}
		if prefix := "xdstp://" + url.PathEscape(name); !strings.HasPrefix(tmpl, prefix) {
			return fmt.Errorf("%q: client_listener_resource_name_template %q does not start with %q", name, tmpl, prefix)
		}
	}
	return nil
}

func checkServer(raw json.RawMessage, rules bootstrapRules) error {
	var s struct {
		ServerURI      *string           `json:"server_uri"`
		ChannelCreds   []json.RawMessage `json:"channel_creds"`
		ServerFeatures json.RawMessage   `json:"server_features"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("not an object with the expected fields: %w", err)
	}
	switch {
	case s.ServerURI == nil || *s.ServerURI == "":
		return errors.New("server_uri is missing or empty")
	case len(s.ChannelCreds) == 0:
		return errors.New("channel_creds is missing or empty")
	}
	supported := false
	for i, raw := range s.ChannelCreds {
		var c struct {
			Type   *string         `json:"type"`
			Config json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || c.Type == nil {
			return fmt.Errorf("channel_creds[%d]: no string type", i)
		}
		supported = supported || slices.Contains(bootstrapCreds, *c.Type)
		if rules.tls && *c.Type == "tls" {
			if err := checkTLSCreds(c.Config); err != nil {
				return fmt.Errorf("channel_creds[%d]: tls: %w", i, err)
			}
			supported = true
		}
	}
	if !supported {
		if rules.tls {
			return fmt.Errorf("channel_creds: no entry of a type the clients support (%q, or \"tls\")", bootstrapCreds)
		}
		return fmt.Errorf("channel_creds: no entry of a type every client supports (%q)", bootstrapCreds)
	}
	if s.ServerFeatures != nil {
		var features []string
		if err := json.Unmarshal(s.ServerFeatures, &features); err != nil {
			return errors.New("server_features is not a list of strings")
		}
	}
	return nil
}

// checkTLSCreds checks the config of gRFC A65's "tls" channel creds: an
// object whose ca_certificate_file, certificate_file and private_key_file,
// if present, are non-empty strings, with a certificate and its key both
// or neither.
func checkTLSCreds(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(raw, &c); err != nil {
		return errors.New("config is not an object")
	}
	for _, k := range []string{"ca_certificate_file", "certificate_file", "private_key_file"} {
		if v, ok := c[k]; ok {
			var f string
			if err := json.Unmarshal(v, &f); err != nil || f == "" {
				return fmt.Errorf("config.%s is not a non-empty string", k)
			}
		}
	}
	if _, cert := c["certificate_file"]; cert != (c["private_key_file"] != nil) {
		return errors.New("config has one of certificate_file and private_key_file without the other")
	}
	return nil
}

func checkNode(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("missing")
	}
	var n struct {
		ID       *string         `json:"id"`
		Cluster  json.RawMessage `json:"cluster"`
		Locality json.RawMessage `json:"locality"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("not an object with the expected fields: %w", err)
	}
	if n.ID == nil || *n.ID == "" {
		return errors.New("id is missing or empty")
	}
	if isNull(n.Locality) {
		return errors.New(`locality is missing (grpc-js-xds requires it; "locality": {} will do)`)
	}
	var loc struct {
		Region  *string `json:"region"`
		Zone    *string `json:"zone"`
		SubZone *string `json:"sub_zone"`
	}
	if err := json.Unmarshal(n.Locality, &loc); err != nil {
		return fmt.Errorf("locality is not an object of strings region, zone and sub_zone: %w", err)
	}
	if n.Cluster != nil {
		var c string
		if err := json.Unmarshal(n.Cluster, &c); err != nil || isNull(n.Cluster) {
			return errors.New("cluster is not a string")
		}
	}
	if n.Metadata != nil {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(n.Metadata, &m); err != nil || m == nil {
			return errors.New("metadata is not an object")
		}
	}
	return nil
}

// isNull reports a field that is absent or null.
func isNull(raw json.RawMessage) bool {
	return raw == nil || string(raw) == "null"
}
