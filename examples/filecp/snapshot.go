package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"path"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/xdspush/xdspush/xds/resources"
)

// Snapshot is one consistent configuration: every resource of a directory,
// by scope (fleet), type URL and name, with a content hash per resource.
// A Snapshot is immutable and safe for concurrent use.
type Snapshot struct {
	version  string
	scopes   map[string]scope // by fleet; "" is the global scope
	count    int
	warnings []Problem
}

// scope holds the resources of one directory level by type URL and name.
type scope map[string]map[string]*Resource

// lookup returns the resource of typeURL named name, or nil.
func (s scope) lookup(typeURL, name string) *Resource { return s[typeURL][name] }

// add stores r, or returns the resource already stored under its type and name.
func (s scope) add(r *Resource) *Resource {
	byName := s[r.TypeURL]
	if byName == nil {
		byName = make(map[string]*Resource)
		s[r.TypeURL] = byName
	}
	if prev := byName[r.Name]; prev != nil {
		return prev
	}
	byName[r.Name] = r
	return nil
}

// LoadError reports why a directory could not become a Snapshot. Every
// problem found is listed, each naming its file and, where known, its
// resource.
type LoadError struct {
	Problems []Problem
}

// Error lists the problems, one per line after the first.
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("filecp: configuration rejected: ")
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.String())
	}
	return b.String()
}

// ignoredName reports whether a directory entry is skipped by both loading
// and watching: hidden names (a leading '.') and the temporary and backup
// files editors and tools leave next to the files they write (name~,
// #name#, vim's 4913 probe, *.swp/*.swo/*.swx, *.tmp, *.bak, *.part).
func ignoredName(name string) bool {
	if name == "" || name[0] == '.' || name == "4913" || strings.HasSuffix(name, "~") {
		return true
	}
	if len(name) >= 2 && name[0] == '#' && name[len(name)-1] == '#' {
		return true
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".swp", ".swo", ".swx", ".tmp", ".bak", ".part":
		return true
	}
	return false
}

// Load reads a configuration directory and returns its Snapshot, or a
// *LoadError listing every problem found. Layout:
//
//   - *.yaml, *.yml and *.json at the top apply to every node (global scope);
//   - DIR/<fleet>/*.{yaml,yml,json} apply only to nodes whose Node.cluster is
//     <fleet>; together with the global files they form that fleet's view;
//   - directories below a fleet directory are ignored, with a warning in the
//     Snapshot;
//   - names that ignoredName rejects, and files with other extensions, are
//     skipped; symbolic links are followed.
//
// Within a view a (type, name) pair is defined once; a fleet cannot
// redefine a global resource. Every view must be referentially consistent
// (see validateView).
func Load(fsys fs.FS) (*Snapshot, error) {
	s, _, err := load(fsys, nil)
	return s, err
}

// parseCache remembers the outcome of parseFile by file path, with the
// SHA-256 of the content parsed, so that a reload parses again only the
// files whose content changed. Resources are immutable, so two snapshots
// may share them.
type parseCache map[string]parsedFile

// parsedFile is one entry of a parseCache.
type parsedFile struct {
	sum       [sha256.Size]byte
	resources []*Resource
	problems  []Problem
}

// load is Load with a cache of earlier parses (nil for none). It returns the
// cache for the next load: the parses of the files read this time, whether
// or not the load succeeded.
func load(fsys fs.FS, cache parseCache) (*Snapshot, parseCache, error) {
	var (
		files    []string // slash paths of configuration files, in load order
		problems []Problem
		warnings []Problem
	)
	top, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, cache, &LoadError{Problems: []Problem{{File: ".", Index: -1, Msg: err.Error()}}}
	}
	var fleets []string
	for _, e := range top {
		name := e.Name()
		if ignoredName(name) {
			continue
		}
		isDir, err := entryIsDir(fsys, name, e)
		switch {
		case err != nil:
			if fileFormat(name) != formatNone {
				problems = append(problems, Problem{File: name, Index: -1, Msg: err.Error()})
			}
		case isDir:
			fleets = append(fleets, name)
		case fileFormat(name) != formatNone:
			files = append(files, name)
		}
	}
	for _, fleet := range fleets {
		entries, err := fs.ReadDir(fsys, fleet)
		if err != nil {
			problems = append(problems, Problem{File: fleet, Index: -1, Msg: err.Error()})
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if ignoredName(name) {
				continue
			}
			p := fleet + "/" + name
			isDir, err := entryIsDir(fsys, p, e)
			switch {
			case err != nil:
				if fileFormat(name) != formatNone {
					problems = append(problems, Problem{File: p, Index: -1, Msg: err.Error()})
				}
			case isDir:
				warnings = append(warnings, Problem{File: p, Index: -1, Msg: "nested directory ignored: only files directly in a fleet directory apply"})
			case fileFormat(name) != formatNone:
				files = append(files, p)
			}
		}
	}

	scopes := map[string]scope{"": {}}
	nextCache := make(parseCache, len(files))
	for _, file := range files {
		fleet, _, _ := strings.Cut(file, "/")
		if fleet == file {
			fleet = ""
		}
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			problems = append(problems, Problem{File: file, Index: -1, Msg: err.Error()})
			continue
		}
		sum := sha256.Sum256(data)
		parsed, ok := cache[file]
		if !ok || parsed.sum != sum {
			parsed.sum = sum
			parsed.resources, parsed.problems = parseFile(file, fleet, data)
		}
		nextCache[file] = parsed
		rs := parsed.resources
		problems = append(problems, parsed.problems...)
		sc := scopes[fleet]
		if sc == nil {
			sc = scope{}
			scopes[fleet] = sc
		}
		for _, r := range rs {
			if prev := sc.add(r); prev != nil {
				problems = append(problems, resourceProblem(r, "duplicate name: also defined at %s resources[%d]", prev.File, prev.Index))
			}
		}
	}
	global := scopes[""]
	for fleet, sc := range scopes {
		if fleet == "" {
			continue
		}
		for _, byName := range sc {
			for _, r := range byName {
				if prev := global.lookup(r.TypeURL, r.Name); prev != nil {
					problems = append(problems, resourceProblem(r, "duplicate name: already defined globally at %s resources[%d]", prev.File, prev.Index))
				}
			}
		}
	}
	if len(problems) > 0 {
		// Reference checks on a view with missing or duplicate resources
		// would mostly repeat the problems already found.
		sortProblems(problems)
		return nil, nextCache, &LoadError{Problems: problems}
	}

	for fleet := range scopes {
		ps, ws := validateView(scopes, fleet)
		problems = append(problems, ps...)
		warnings = append(warnings, ws...)
	}
	if len(problems) > 0 {
		sortProblems(problems)
		return nil, nextCache, &LoadError{Problems: problems}
	}
	sortProblems(warnings)
	s := &Snapshot{scopes: scopes, warnings: warnings}
	h := sha256.New()
	for r := range s.All() {
		s.count++
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", r.Fleet, r.TypeURL, r.Name)
		h.Write(r.Hash[:])
	}
	s.version = hex.EncodeToString(h.Sum(nil)[:8])
	return s, nextCache, nil
}

// entryIsDir reports whether e (at slash path p) is a directory, following
// a symbolic link.
func entryIsDir(fsys fs.FS, p string, e fs.DirEntry) (bool, error) {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir(), nil
	}
	fi, err := fs.Stat(fsys, p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return false, fmt.Errorf("symbolic link: %v", err)
	}
	return fi.IsDir(), nil
}

// sortProblems orders problems by file, position and message, so reports do
// not depend on map iteration.
func sortProblems(ps []Problem) {
	slices.SortFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Index, b.Index), cmp.Compare(a.Msg, b.Msg))
	})
}

// Version identifies the snapshot's content: a hash over every resource's
// scope, type, name and content hash. Equal content gives an equal version,
// across loads and processes.
func (s *Snapshot) Version() string { return s.version }

// Len returns the number of resources in all scopes.
func (s *Snapshot) Len() int { return s.count }

// Warnings returns what Load tolerated but a person should know about, such
// as an EDS cluster without endpoints or an ignored nested directory. The
// caller must not modify the slice.
func (s *Snapshot) Warnings() []Problem { return s.warnings }

// Fleets returns the names of the fleet directories, sorted.
func (s *Snapshot) Fleets() []string {
	out := make([]string, 0, len(s.scopes))
	for f := range s.scopes {
		if f != "" {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// Lookup returns the resource of typeURL named name in the scope of fleet
// ("" for global) only.
func (s *Snapshot) Lookup(fleet, typeURL, name string) (*Resource, bool) {
	r := s.scopes[fleet].lookup(typeURL, name)
	return r, r != nil
}

// Resources returns the resources of typeURL in the scope of fleet ("" for
// global) only, sorted by name.
func (s *Snapshot) Resources(fleet, typeURL string) []*Resource {
	return sortedByName(s.scopes[fleet][typeURL], nil)
}

// ForNode returns the resources of typeURL that apply to a node whose
// Node.cluster is cluster: the global ones plus those of the fleet of that
// name, if there is one, sorted by name.
func (s *Snapshot) ForNode(cluster, typeURL string) []*Resource {
	var fleet map[string]*Resource
	if cluster != "" {
		fleet = s.scopes[cluster][typeURL]
	}
	return sortedByName(s.scopes[""][typeURL], fleet)
}

// sortedByName returns the resources of a and b sorted by name.
func sortedByName(a, b map[string]*Resource) []*Resource {
	out := make([]*Resource, 0, len(a)+len(b))
	for _, r := range a {
		out = append(out, r)
	}
	for _, r := range b {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *Resource) int { return cmp.Compare(x.Name, y.Name) })
	return out
}

// messages returns the messages a node of fleet sees (ForNode), of every
// type: the group the Source states for that fleet. "" is the default
// group, the global resources alone.
func (s *Snapshot) messages(fleet string) []proto.Message {
	var out []proto.Message
	for _, t := range supportedTypes() {
		for _, r := range s.ForNode(fleet, t) {
			out = append(out, r.Message)
		}
	}
	return out
}

// locate turns the problems the Store found in groups into Problems of the
// files that define the resources, each reported once.
func (s *Snapshot) locate(ps []resources.Problem) []Problem {
	var out []Problem
	for _, p := range ps {
		where := "the global files"
		if p.Group != resources.DefaultGroup {
			where = fmt.Sprintf("the view of fleet %q", p.Group)
		}
		r, ok := s.Lookup(p.Group, string(p.Type), p.Name)
		if !ok {
			r, ok = s.Lookup("", string(p.Type), p.Name)
		}
		if !ok {
			out = append(out, Problem{File: ".", Index: -1, Type: shortType(string(p.Type)), Name: p.Name, Msg: p.Msg + " (in " + where + ")"})
			continue
		}
		out = append(out, resourceProblem(r, "%s (in %s)", p.Msg, where))
	}
	sortProblems(out)
	return slices.Compact(out)
}

// All yields every resource, ordered by fleet (global first), type (in
// typeRank order) and name.
func (s *Snapshot) All() iter.Seq[*Resource] {
	return func(yield func(*Resource) bool) {
		fleets := append([]string{""}, s.Fleets()...)
		for _, fleet := range fleets {
			sc := s.scopes[fleet]
			for _, t := range supportedTypes() {
				for _, r := range sortedByName(sc[t], nil) {
					if !yield(r) {
						return
					}
				}
			}
		}
	}
}
