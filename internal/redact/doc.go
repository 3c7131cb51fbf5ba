// Package redact removes secret material from xDS resources before they
// are shown to an operator: by the debug pages of package xds/xdsdebug and
// by the client status service (CSDS) of package xds.
//
// Contract:
//
//   - Sensitive fields are found by walking the message with protoreflect,
//     not by a list of paths: a field is sensitive if its descriptor
//     carries Envoy's (udpa.annotations.sensitive) option, which marks
//     TlsCertificate's private_key, password and pkcs12,
//     TlsSessionTicketKeys' keys, GenericSecret's secret and secrets,
//     PrivateKeyProvider's typed_config and gRPC SSL credentials'
//     private_key, among others. The fields of that list are also
//     sensitive by name, should a descriptor lack the option.
//   - The walk enters every message, list, map and google.protobuf.Any
//     (resolved in protoregistry.GlobalTypes), so a private key inline in a
//     DownstreamTlsContext or UpstreamTlsContext of a listener's or a
//     cluster's transport socket is found like one in a Secret resource.
//   - A sensitive field is kept but its content is replaced by Marker: a
//     DataSource's inline_bytes or inline_string becomes inline_string
//     Marker (a filename, environment variable name or watched directory
//     is kept: it names where the secret is, not the secret); any other
//     string or bytes inside the field becomes Marker; numbers, booleans
//     and enums are kept.
//   - What cannot be checked is not shown: fields unknown to the
//     descriptors linked into the program are dropped, and an Any whose
//     type is not linked makes Message and Any fail with
//     ErrUnresolvable, as its content cannot be inspected.
//   - Message redacts in place; Any never modifies its argument and
//     returns it unchanged when nothing in it is sensitive.
//
// # Concurrency
//
// The functions are safe for concurrent use on distinct messages.
package redact
