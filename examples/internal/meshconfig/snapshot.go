package meshconfig

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

// Snapshot is one consistent configuration: every resource of a
// directory (or of an etcd prefix), by scope (fleet), type URL and name,
// with a content hash per resource.
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

// LoadError reports why a configuration could not become a Snapshot.
// Every problem found is listed, each naming its file and, where known,
// its resource.
type LoadError struct {
	// Name is the name of the Loader, which starts the message.
	Name     string
	Problems []Problem
}

// Error lists the problems, one per line after the first, after
// "NAME: configuration rejected: ".
func (e *LoadError) Error() string {
	var b strings.Builder
	if e.Name != "" {
		b.WriteString(e.Name + ": ")
	}
	b.WriteString("configuration rejected: ")
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

// IgnoredName reports whether a directory entry (or an element of a path)
// is skipped, by loading and by watching: hidden names (a leading '.') and the temporary and backup
// files editors and tools leave next to the files they write (name~,
// #name#, vim's 4913 probe, *.swp/*.swo/*.swx, *.tmp, *.bak, *.part).
func IgnoredName(name string) bool {
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

// File is one configuration file to load: its slash-separated path,
// relative to the directory (or the key under an etcd prefix), and its
// content. A path of one element is a global file; "fleet/name" is a file
// of that fleet.
type File struct {
	Path string
	Data []byte
}

// input is a file to build a Snapshot of, with its fleet (see Place);
// kept marks one LoadFSChanged did not read, whose previous parse (in
// Loader.cache) stands.
type input struct {
	File
	fleet string
	kept  bool
}

// Loader turns configurations into Snapshots, and states them in a
// resources.Store (Loader.Apply). It remembers the outcome of parsing each
// file, by path, with the SHA-256 of the content parsed, so that a load
// parses again only the files whose content changed since the previous
// load. Resources are immutable, so two snapshots may share them.
//
// A Loader is not safe for concurrent use: its host serialises loads.
type Loader struct {
	name  string
	cache map[string]parsedFile // by path: the last load's parses
}

// parsedFile is the outcome of parsing one file.
type parsedFile struct {
	sum       [sha256.Size]byte
	resources []*Resource
	problems  []Problem
}

// NewLoader returns a Loader whose errors start with name ("filecp":
// "filecp: configuration rejected: …"). It starts with no parse cached.
func NewLoader(name string) *Loader { return &Loader{name: name} }

// Load reads a configuration directory with a Loader of its own (nothing
// cached) and returns its Snapshot; see Loader.LoadFS.
func Load(fsys fs.FS) (*Snapshot, error) { return NewLoader("").LoadFS(fsys) }

// LoadFS reads a configuration directory and returns its Snapshot, or a
// *LoadError listing every problem found. Layout:
//
//   - *.yaml, *.yml and *.json at the top apply to every node (global scope);
//   - DIR/<fleet>/*.{yaml,yml,json} apply only to nodes whose Node.cluster is
//     <fleet>; together with the global files they form that fleet's view;
//   - directories below a fleet directory are ignored, with a warning in the
//     Snapshot;
//   - names that IgnoredName rejects, and files with other extensions, are
//     skipped; symbolic links are followed.
//
// Within a view a (type, name) pair is defined once; a fleet cannot
// redefine a global resource. Every view must be referentially consistent
// (see validateView).
func (l *Loader) LoadFS(fsys fs.FS) (*Snapshot, error) { return l.LoadFSChanged(fsys, nil) }

// LoadFSChanged is LoadFS for a directory of which only the paths in
// changed may differ since the Loader's previous load: it lists the
// directory as LoadFS does, but reads again only the files named in
// changed, those in a fleet directory named in changed, every file that
// is or is in a symbolic link, and every file the Loader has no parse of
// (new files, and those it could not read); the others it takes as its
// previous load parsed them, without reading them. changed nil, or
// holding "." (the directory itself), reads every file, as LoadFS does.
// Paths are slash paths relative to the directory, as a watch of it
// reports them. "..data", the link a Kubernetes volume swaps on update,
// needs no rule of its own: the files it stands behind are symbolic
// links, which are read anyway.
//
// Reading a file costs system calls, which at thousands of files cost
// more than a reload's parsing and checks: a host that watches the
// directory knows which paths changed. A change the watch cannot see (a
// file written through a hard link from outside the directory) is read
// when its path is next named, or by the next load of every file (LoadFS;
// filecp's Watcher.Resync, on SIGHUP).
func (l *Loader) LoadFSChanged(fsys fs.FS, changed []string) (*Snapshot, error) {
	// listed is a directory entry, with its fleet ("" for a global file)
	// and whether it is, or is in, a symbolic link: what is behind a link
	// changes without an event on the path.
	type listed struct {
		path, fleet string
		linked      bool
	}
	var (
		files    []input
		problems []Problem
		warnings []Problem
	)
	top, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, l.rejected([]Problem{{File: ".", Index: -1, Msg: err.Error()}})
	}
	var fleets, paths []listed
	for _, e := range top {
		name := e.Name()
		if IgnoredName(name) {
			continue
		}
		linked := e.Type()&fs.ModeSymlink != 0
		isDir, err := entryIsDir(fsys, name, e)
		switch {
		case err != nil:
			if FileFormat(name) != FormatNone {
				problems = append(problems, Problem{File: name, Index: -1, Msg: err.Error()})
			}
		case isDir:
			fleets = append(fleets, listed{path: name, linked: linked})
		case FileFormat(name) != FormatNone:
			paths = append(paths, listed{path: name, linked: linked})
		}
	}
	for _, fleet := range fleets {
		entries, err := fs.ReadDir(fsys, fleet.path)
		if err != nil {
			problems = append(problems, Problem{File: fleet.path, Index: -1, Msg: err.Error()})
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if IgnoredName(name) {
				continue
			}
			p := fleet.path + "/" + name
			isDir, err := entryIsDir(fsys, p, e)
			switch {
			case err != nil:
				if FileFormat(name) != FormatNone {
					problems = append(problems, Problem{File: p, Index: -1, Msg: err.Error()})
				}
			case isDir:
				warnings = append(warnings, nestedWarning(p))
			case FileFormat(name) != FormatNone:
				paths = append(paths, listed{path: p, fleet: fleet.path, linked: fleet.linked || e.Type()&fs.ModeSymlink != 0})
			}
		}
	}
	named := map[string]bool{}
	for _, p := range changed {
		named[p] = true
	}
	all := changed == nil || named["."]
	for _, f := range paths {
		if !all && !named[f.path] && !named[f.fleet] && !f.linked {
			if _, ok := l.cache[f.path]; ok {
				files = append(files, input{File: File{Path: f.path}, fleet: f.fleet, kept: true})
				continue
			}
		}
		data, err := fs.ReadFile(fsys, f.path)
		if err != nil {
			problems = append(problems, Problem{File: f.path, Index: -1, Msg: err.Error()})
			continue
		}
		files = append(files, input{File: File{Path: f.path, Data: data}, fleet: f.fleet})
	}
	return l.build(files, problems, warnings)
}

// Place says what a path means in a configuration: the fleet of the file
// ("" for a global one) and whether it is configuration at all. A path of
// one element is a global file, "fleet/name" a file of that fleet; a path
// with an element that IgnoredName rejects, or whose name has no
// configuration extension (see FileFormat), is not configuration, and
// neither is a deeper path, of which nested is then true (LoadFiles warns
// about it, as LoadFS warns about a nested directory).
func Place(path string) (fleet string, ok, nested bool) {
	elems := strings.Split(path, "/")
	for _, e := range elems {
		if IgnoredName(e) {
			return "", false, false
		}
	}
	switch {
	case len(elems) > 2:
		return "", false, true
	case FileFormat(elems[len(elems)-1]) == FormatNone:
		return "", false, false
	case len(elems) == 2:
		return elems[0], true, false
	}
	return "", true, false
}

// LoadFiles returns the Snapshot of a set of files named by path, in any
// order, as the directory they would form would load (see LoadFS and
// Place): paths that are not configuration are skipped, deeper ones with a
// warning naming their directory.
func (l *Loader) LoadFiles(files []File) (*Snapshot, error) {
	var (
		keep     []input
		warnings []Problem
		nested   = map[string]bool{}
	)
	for _, f := range files {
		fleet, ok, deep := Place(f.Path)
		if deep {
			elems := strings.SplitN(f.Path, "/", 3)
			if dir := elems[0] + "/" + elems[1]; !nested[dir] {
				nested[dir] = true
				warnings = append(warnings, nestedWarning(dir))
			}
		}
		if ok {
			keep = append(keep, input{File: f, fleet: fleet})
		}
	}
	slices.SortFunc(keep, func(a, b input) int { return cmp.Compare(a.Path, b.Path) })
	return l.build(keep, nil, warnings)
}

// nestedWarning is the warning about a directory below a fleet.
func nestedWarning(dir string) Problem {
	return Problem{File: dir, Index: -1, Msg: "nested directory ignored: only files directly in a fleet directory apply"}
}

// rejected returns the *LoadError of problems, sorted.
func (l *Loader) rejected(problems []Problem) *LoadError {
	sortProblems(problems)
	return &LoadError{Name: l.name, Problems: problems}
}

// build parses files (reusing the cache for the files whose content is
// unchanged), checks them, and returns their Snapshot, or a *LoadError
// with problems and every problem found. The paths of files must be
// configuration (Place), distinct, and given with their fleet. The cache
// becomes the parses of files, whether or not the load succeeds.
func (l *Loader) build(files []input, problems, warnings []Problem) (*Snapshot, error) {
	scopes := map[string]scope{"": {}}
	next := make(map[string]parsedFile, len(files))
	for _, f := range files {
		parsed, ok := l.cache[f.Path]
		if !f.kept {
			if sum := sha256.Sum256(f.Data); !ok || parsed.sum != sum {
				parsed.sum = sum
				parsed.resources, parsed.problems = ParseFile(f.Path, f.fleet, f.Data)
			}
		}
		next[f.Path] = parsed
		problems = append(problems, parsed.problems...)
		sc := scopes[f.fleet]
		if sc == nil {
			sc = scope{}
			scopes[f.fleet] = sc
		}
		for _, r := range parsed.resources {
			if prev := sc.add(r); prev != nil {
				problems = append(problems, resourceProblem(r, "duplicate name: also defined at %s resources[%d]", prev.File, prev.Index))
			}
		}
	}
	l.cache = next
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
		return nil, l.rejected(problems)
	}

	for fleet := range scopes {
		ps, ws := validateView(scopes, fleet)
		problems = append(problems, ps...)
		warnings = append(warnings, ws...)
	}
	if len(problems) > 0 {
		return nil, l.rejected(problems)
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
	return s, nil
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

// Count returns the number of resources of typeURL in all scopes.
func (s *Snapshot) Count(typeURL string) int {
	n := 0
	for _, sc := range s.scopes {
		n += len(sc[typeURL])
	}
	return n
}

// Warnings returns what Load tolerated but a person should know about, such
// as an EDS cluster without endpoints or an ignored nested directory. The
// caller must not modify the slice.
func (s *Snapshot) Warnings() []Problem { return s.warnings }

// Fleets returns the names of the fleets, sorted.
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
// type: the group Apply states for that fleet. "" is the default group,
// the global resources alone.
func (s *Snapshot) messages(fleet string) []proto.Message {
	var out []proto.Message
	for _, t := range Types() {
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
			out = append(out, Problem{File: ".", Index: -1, Type: ShortType(string(p.Type)), Name: p.Name, Msg: p.Msg + " (in " + where + ")"})
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
			for _, t := range Types() {
				for _, r := range sortedByName(sc[t], nil) {
					if !yield(r) {
						return
					}
				}
			}
		}
	}
}
