package session

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	pathpkg "path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// coreFiles returns the package's files but its tests: the connection's
// core (see Core), which does no I/O, starts no goroutine, takes no lock,
// reads no clock, logs nothing and calls no hook. What it needs of the
// world comes in as the arguments of its steps; what it does goes out as
// messages, notices and a deadline its runner applies, and what it needs
// of the host's code (InitProxy, a generation) as a Need, which the runner
// meets between steps. What it reads of its Server (Host) are the caches
// that connections share. That it names nothing of its runner, its Server
// or the host's objects the compiler sees to: it cannot import them.
func coreFiles(t *testing.T) []string {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if !strings.HasSuffix(n, "_test.go") {
			out = append(out, n)
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d files of the core: %q", len(out), out)
	}
	return out
}

// coreBannedImports are the packages a core file must not import: logging,
// the network, gRPC's transport (its codes and status, which describe a
// protocol error, are allowed), locks and atomics, the process and the
// runtime. The core recycles its values through internal/recycle, which
// neither blocks nor orders anything.
var coreBannedImports = map[string]bool{
	"log":                             true,
	"log/slog":                        true,
	"net":                             true,
	"os":                              true,
	"runtime":                         true,
	"sync":                            true,
	"sync/atomic":                     true,
	"google.golang.org/grpc":          true,
	"google.golang.org/grpc/peer":     true,
	"google.golang.org/grpc/metadata": true,
}

// coreBannedCalls are the functions of the standard library a core file
// must not use: the clock and timers (time comes in with each step).
var coreBannedCalls = map[string]map[string]bool{
	"time": {"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true},
}

// coreHostCalls are the methods through which the host's code runs
// (Generators, InitProxy, and the Server's guarded calls of them): a core
// file must not call them. What a step needs of them, it asks its runner
// for (need, see flow.go).
var coreHostCalls = map[string]bool{
	"Generate": true, "GenerateDelta": true, "generate": true, "generateDelta": true,
	"generateFor": true, "initProxy": true, "encode": true, "encodeAll": true,
}

// TestCoreStaysClosed reads the core's files and fails on what a closed
// core must not do: a banned import or call, a goroutine, a channel, a
// select, a call of a hook or a logger, or a call of the host's code.
func TestCoreStaysClosed(t *testing.T) {
	fset := token.NewFileSet()
	for _, name := range coreFiles(t) {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range coreViolations(fset, f) {
			t.Errorf("%s: %s", name, v)
		}
	}
}

// TestCoreViolations checks that coreViolations finds what it looks for.
func TestCoreViolations(t *testing.T) {
	tests := []struct {
		name, src string
		want      int
	}{
		{"clean", `package p; import "slices"; func f(s []int) { slices.Sort(s) }`, 0},
		{"sync's pool", `package p; import "sync"; var p = sync.Pool{}`, 1},
		{"recycled", `package p; import "github.com/xdspush/xdspush/internal/recycle"; var p = recycle.New(func() *int { return new(int) })`, 0},
		{"slog", `package p; import "log/slog"; func f() { slog.Info("x") }`, 1},
		{"grpc", `package p; import "google.golang.org/grpc"; var _ grpc.ServerStream`, 1},
		{"clock", `package p; import "time"; func f() time.Time { return time.Now() }`, 1},
		{"duration", `package p; import "time"; func f(t time.Time) time.Time { return t.Add(time.Second) }`, 0},
		{"mutex", `package p; import "sync"; var mu sync.Mutex`, 1},
		{"goroutine", `package p; func f() { go f() }`, 1},
		{"channel", `package p; func f(c chan int) { c <- 1 }`, 2},
		{"select", `package p; func f() { select {} }`, 1},
		{"hook", `package p; type h struct{ OnACK func() }; func f(hooks *h) { hooks.OnACK() }`, 1},
		{"callHook", `package p; func f() { callHook(nil, nil, 0) }`, 1},
		{"logger", `package p; type s struct{ logger any }; func f(set *s) { _ = set.logger }`, 1},
		{"generator", `package p; type g interface{ Generate() }; func f(x g) { x.Generate() }`, 1},
		{"initProxy", `package p; type h interface{ initProxy() }; func f(x h) { x.initProxy() }`, 1},
		{"generator named, not called", `package p; type g interface{ Generate() }; func f(x g) func() { return x.Generate }`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, tt.name+".go", tt.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if got := coreViolations(fset, f); len(got) != tt.want {
				t.Errorf("found %d (%q); want %d", len(got), got, tt.want)
			}
		})
	}
}

// coreViolations lists what f does that a core file must not.
func coreViolations(fset *token.FileSet, f *ast.File) []string {
	var out []string
	add := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	imported := map[string]string{} // local name → path
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		if coreBannedImports[path] {
			add(im, "imports "+path)
		}
		local := pathpkg.Base(path)
		if im.Name != nil {
			local = im.Name.Name
		}
		imported[local] = path
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			add(n, "starts a goroutine")
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "callHook" || id.Name == "guarded") {
				add(n, "calls "+id.Name)
			}
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && coreHostCalls[sel.Sel.Name] {
				add(n, "calls the host's code ("+sel.Sel.Name+")")
			}
		case *ast.SelectStmt:
			add(n, "selects")
		case *ast.SendStmt:
			add(n, "sends on a channel")
		case *ast.ChanType:
			add(n, "uses a channel")
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				add(n, "receives from a channel")
			}
		case *ast.SelectorExpr:
			name := n.Sel.Name
			if x, ok := n.X.(*ast.Ident); ok {
				if banned := coreBannedCalls[imported[x.Name]]; banned[name] {
					add(n, "uses "+imported[x.Name]+"."+name)
				}
			}
			switch {
			case name == "logger":
				add(n, "reads the logger")
			case len(name) > 2 && name[:2] == "On" && name[2] >= 'A' && name[2] <= 'Z':
				add(n, "calls the hook "+name)
			}
		}
		return true
	})
	return out
}

// TestCoreImports lists the imports of the package's files, as the
// go command sees them, and fails on any that a closed core must not
// have, or on one of the module's packages that shares state with the
// core's runner.
func TestCoreImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowedOfModule := map[string]bool{
		"github.com/xdspush/xdspush/internal/recycle":   true,
		"github.com/xdspush/xdspush/internal/shared":    true,
		"github.com/xdspush/xdspush/internal/sortedset": true,
		"github.com/xdspush/xdspush/internal/xdsrefs":   true,
		"github.com/xdspush/xdspush/pushcontext":        true,
		"github.com/xdspush/xdspush/xds/xdstp":          true,
	}
	for _, path := range pkg.Imports {
		switch {
		case coreBannedImports[path]:
			t.Errorf("the core imports %s", path)
		case strings.HasPrefix(path, "github.com/xdspush/xdspush/") && !allowedOfModule[path]:
			t.Errorf("the core imports %s, which it has no need of", path)
		}
	}
}
