package meshconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
)

// NewStore returns a resources.Store that serves the supported types
// (TypeURLs), for Apply.
func NewStore() (*resources.Store, error) {
	return resources.New(resources.Config{Types: TypeURLs()})
}

// NoSecrets is the SDS generator of a server whose clients are not
// authenticated and that serves them no Secret in its Store's stead: every
// client holds none, and no SDS response carries one.
type NoSecrets struct{}

// Generate returns no resource.
func (NoSecrets) Generate(context.Context, *xds.Proxy, xds.Watch, *pushcontext.PushRequest) ([]xds.Resource, error) {
	return nil, nil
}

var _ xds.Generator = NoSecrets{}

// Apply states snap in store as one transaction: a group per fleet holding
// what its nodes see (the global resources and the fleet's own), the
// global resources alone as the default group (resources.DefaultGroup),
// and the groups of fleets that are gone deleted. It returns what the
// Store announced to its Server (nil when nothing changed), with start as
// its Start.
//
// A refusal of the Store (what it checks beyond the Snapshot, such as a
// tcp_proxy naming a missing cluster) is a *LoadError locating each
// problem in the files. An error of the Server after the Store accepted
// the change (it has stopped) is not one: the change is made.
func (l *Loader) Apply(store *resources.Store, snap *Snapshot, start time.Time) (*pushcontext.PushRequest, error) {
	groups := map[string][]proto.Message{resources.DefaultGroup: snap.messages("")}
	for _, fleet := range snap.Fleets() {
		groups[fleet] = snap.messages(fleet)
	}
	req, err := store.Apply(resources.Update{Set: groups, DeleteOthers: true, Start: start})
	var re *resources.Error
	switch {
	case errors.As(err, &re):
		return nil, &LoadError{Name: l.name, Problems: snap.locate(re.Problems)}
	case err != nil && req == nil:
		return nil, l.rejected([]Problem{{File: ".", Index: -1, Msg: err.Error()}})
	}
	return req, nil
}

// PrintKeys writes a line per key of req, naming its group: "global" for
// the default group (the global files, served to nodes of no fleet),
// "fleet F" for a fleet (the global files and F's own). A group's own key
// says whether it was created or deleted (it is in snap or not):
//
//	fleet edge: created
//	Cluster backend (global)
//	Cluster backend (fleet edge)
func PrintKeys(w io.Writer, snap *Snapshot, req *pushcontext.PushRequest) {
	for _, k := range req.ConfigsUpdated.Sorted() {
		group := "global"
		if k.Namespace != resources.DefaultGroup {
			group = "fleet " + k.Namespace
		}
		if k.Kind == resources.GroupKind {
			what := "deleted"
			if snap != nil && (k.Namespace == resources.DefaultGroup || snap.scopes[k.Namespace] != nil) {
				what = "created"
			}
			fmt.Fprintf(w, "  %s: %s\n", group, what)
			continue
		}
		fmt.Fprintf(w, "  %s %s (%s)\n", ShortType(k.Kind), k.Name, group)
	}
}
