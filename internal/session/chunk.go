package session

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xdspush/xdspush/internal/shared"
)

// Responses are kept under Config.MaxResponseBytes (the budget) by
// splitting those that the protocol lets a server split: a Delta
// response, and a SotW response of a by-name type (Endpoint, Route; see
// Config.FullStateTypes), whose resources not carried are kept by the
// client. Each part is a response of its own, with its own nonce and
// flight (ack.go), sent in order: upserts first, sorted by name, then
// removals. A part changes what the client holds as if the client
// accepted it, as any response does, and its ACK or NACK settles it
// alone; a push's phase, which waits for the client to have answered the
// type's last response (TypeState.synced), waits for every part, since a
// client answers them in the order it reads them.
//
// What cannot be split — a SotW Listener or Cluster response, which
// carries the whole state, or one resource over the budget alone — fails
// its type when it is generated (fits), unless Config.SendOversized.
//
// Sizes are of the protobuf encoding, taken from the encoded resources'
// lengths: a resource's fields (name, version, the Any's type URL and
// value) and their tags, and for the response's own fields a bound
// (envelope).

// envelopeSlack is room, in a response's bound (see envelope), for fields
// besides its resources, type URL, version and nonce, which the Server
// does not set today (control_plane).
const envelopeSlack = 64

// Envelope bounds the size of a response of type i besides its resources:
// its type URL, version and nonce (the version, '/', and at most 20
// digits).
func (c *Core) Envelope(i int) int {
	v := len(c.At.Push.Version())
	return shared.FieldSize(len(c.set.TypeURLs[i])) + shared.FieldSize(v) + shared.FieldSize(v+21) + envelopeSlack
}

// budget is what the resources of one response of type i may take.
func (c *Core) budget(i int) int { return c.set.MaxResponseBytes - c.Envelope(i) }

// TooLargeError is a response of Type that cannot be split under
// Config.MaxResponseBytes (Max): the whole SotW state, or the Resource
// named, is Bytes encoded. The Server reports it as a
// ResponseTooLargeError (see the xds package's publicErr).
type TooLargeError struct {
	Type       string // type URL
	Resource   string
	Bytes, Max int
}

// Error describes the response, as ResponseTooLargeError does.
func (e *TooLargeError) Error() string {
	if e.Resource != "" {
		return fmt.Sprintf("xds: %s %q is %d bytes encoded, over Config.MaxResponseBytes (%d) on its own", ShortName(e.Type), e.Resource, e.Bytes, e.Max)
	}
	return fmt.Sprintf("xds: the %s state is %d bytes encoded, over Config.MaxResponseBytes (%d), and a SotW %s response cannot be split", ShortName(e.Type), e.Bytes, e.Max, ShortName(e.Type))
}

// fits returns a *TooLargeError if tgt, a target of type i, makes
// a response that cannot be split under the budget.
func (c *Core) fits(i int, tgt *Target) error {
	if c.set.SendOversized || tgt == nil {
		return nil
	}
	z, budget := tgt.Set.Sizes(), c.budget(i)
	t := c.set.TypeURLs[i]
	if c.replaces(i) && z.SotW > budget {
		return &TooLargeError{Type: t, Bytes: z.SotW + c.Envelope(i), Max: c.set.MaxResponseBytes}
	}
	if z.Largest > budget {
		return &TooLargeError{Type: t, Resource: z.LargestName, Bytes: z.Largest + c.Envelope(i), Max: c.set.MaxResponseBytes}
	}
	return nil
}

// part is one response of a split one: what it upserts and removes.
type part struct {
	ups  []shared.Entry
	gone []string
}

// split returns the parts of a response of type i that carries ups,
// removes gone (sorted) and carries errs (per-resource errors, which go
// with the last part), in order, or nil if it fits the budget whole or is
// a SotW full-state response (checked by fits). SotW by-name responses
// remove nothing: gone is the Server's record only, and goes with the last
// part.
func (c *Core) split(i int, ups []shared.Entry, gone []string, errs []namedErr) []part {
	if c.set.SendOversized || c.replaces(i) {
		return nil
	}
	budget := c.budget(i)
	size := errsSize(errs)
	for _, r := range ups {
		size += c.upSize(r)
	}
	if c.Delta {
		for _, n := range gone {
			size += shared.FieldSize(len(n))
		}
	}
	if size <= budget {
		return nil
	}
	var parts []part
	cur, used := part{}, 0
	cut := func(n int) {
		if used+n > budget && (len(cur.ups) > 0 || len(cur.gone) > 0) {
			parts = append(parts, cur)
			cur, used = part{}, 0
		}
		used += n
	}
	for _, r := range ups {
		cut(c.upSize(r))
		cur.ups = append(cur.ups, r)
	}
	for _, n := range gone {
		if c.Delta {
			cut(shared.FieldSize(len(n)))
		}
		cur.gone = append(cur.gone, n)
	}
	if n := errsSize(errs); n > 0 {
		cut(n)
	}
	return append(parts, cur)
}

// errsSize is what errs add to a response.
func errsSize(errs []namedErr) int {
	n := 0
	for _, e := range errs {
		detail := 1 + protowire.SizeVarint(uint64(e.err.Code)) + shared.FieldSize(len(e.err.Message))
		n += shared.FieldSize(shared.FieldSize(shared.FieldSize(len(e.name))) + shared.FieldSize(detail))
	}
	return n
}

// upSize is what r adds to a response on this stream.
func (c *Core) upSize(r shared.Entry) int {
	if c.Delta {
		return shared.DeltaSize(r)
	}
	return shared.SotWSize(r.Enc)
}

// releaseParts sends the response of the diff d of type i in parts (see
// split), each with its own flight, and returns the last, which the
// caller sends. removed names what the parts remove from what the client
// holds (a Delta response's removals also list names the client asked
// for that do not exist, which it does not hold). What the client holds
// that changes without being carried (kept content that differs from
// what it reported) changes with the first part.
func (c *Core) releaseParts(i int, tgt *Target, d *diffResult, parts []part, removed []string, o relOpts) *OutMsg {
	ts := c.Types[i]
	var m *OutMsg
	for k, p := range parts {
		f := newFlight()
		for _, r := range p.ups {
			f.put(&ts.Held, r.Name, r.Enc)
		}
		if k == 0 && d != nil {
			c.holdUncarried(ts, d, f)
		}
		for _, n := range p.gone {
			if _, ok := slices.BinarySearch(removed, n); ok {
				f.del(&ts.Held, n)
			}
		}
		m = c.partMsg(i, p, o)
		f.response = ts.lastSent()
		ts.addFlight(f)
		if k < len(parts)-1 {
			c.send(m)
		}
	}
	if d != nil {
		d.shareIfExact(ts, tgt)
	}
	c.foldHeld(ts)
	return m
}

// holdUncarried records in f what the client holds of d's kept content
// that differs from what the Server took it to hold, without a response
// carrying it (see hold).
func (c *Core) holdUncarried(ts *TypeState, d *diffResult, f *flight) {
	u := 0
	for _, r := range d.kept {
		for u < len(d.ups) && d.ups[u].Name < r.Name {
			u++
		}
		carried := u < len(d.ups) && d.ups[u].Name == r.Name
		if !carried && !ts.Held.Get(r.Name).Same(r.Enc) {
			f.put(&ts.Held, r.Name, r.Enc)
		}
	}
}

// partMsg makes the response of one part.
func (c *Core) partMsg(i int, p part, o relOpts) *OutMsg {
	if c.Delta {
		return c.deltaMsg(i, p.ups, p.gone, o)
	}
	return c.entriesMsg(i, p.ups, o)
}
