// Package xdstp parses xdstp:// resource names (xRFC TP1, gRFC A47) and
// writes them in one canonical form, so that two spellings of the same name
// — context parameters in another order, characters percent-encoded or not,
// hex digits in either case — compare equal wherever they come from: a
// client's subscription, a host's configuration, a Store.
//
// A name is
//
//	xdstp://[authority]/<type>/<id>[?<context parameters>]
//
// where type is the resource's protobuf message type without its
// "type.googleapis.com/" prefix (envoy.config.listener.v3.Listener), id is
// one or more path segments, and the context parameters are key=value
// pairs joined by '&'. An id whose last segment is "*" names a glob
// collection: every resource of that type and authority whose id has the
// same other segments and one more, with the same context parameters.
//
// Contract:
//
//   - Parse accepts a name in any spelling the URI rules allow and returns
//     its parts decoded; String writes the canonical form; Canonical is
//     both, and leaves a name that is not xdstp:// as it is. Parse of a
//     canonical name returns the same parts, and String of them the same
//     name (fuzzed). IsGlob and InCollection answer Name.IsGlob and
//     Name.Contains for names in canonical form, as strings, without
//     parsing or allocating (fuzzed against them): for matching a
//     subscription's glob collections against resource names.
//   - The canonical form: the scheme in lower case; the authority, each id
//     segment and each parameter with every byte that is not allowed there
//     unencoded percent-encoded, in upper-case hex, and every byte that is
//     allowed decoded — ':' and '@' among them, as Envoy writes them (they
//     are allowed in a path segment); context parameters sorted by key.
//   - Errors are returned, never a panic: another scheme, a missing type
//     or id, an empty id segment, a type with characters other than
//     letters, digits, '.' and '_', a malformed percent-encoding, a key
//     given twice, a fragment (processing directives belong to resource
//     locators, not names). An error names what is wrong.
//   - No globals, no I/O; every function is safe for concurrent use, and a
//     Name is a value (its Context map is its own after Parse; String
//     does not change it).
package xdstp
