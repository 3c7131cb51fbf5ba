package release

import (
	"fmt"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// API returns the exported API of the packages patterns name, as sorted
// lines (one per exported constant, variable, function, type, method,
// struct field and interface method), in the manner of the Go project's
// api/*.txt: a change to any of them changes a line. Internal packages
// and commands are left out.
func API(dir string, patterns ...string) ([]string, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: dir}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	var lines []string
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("release: %s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Name == "main" || isInternal(p.PkgPath) {
			continue
		}
		lines = append(lines, packageAPI(p.Types)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

// packageAPI returns the lines of pkg's exported API.
func packageAPI(pkg *types.Package) []string {
	prefix := "pkg " + pkg.Path() + ", "
	qual := types.RelativeTo(pkg)
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s", name, types.TypeString(o.Type(), qual))
		case *types.Var:
			add("var %s %s", name, types.TypeString(o.Type(), qual))
		case *types.Func:
			add("func %s%s", name, strings.TrimPrefix(types.TypeString(o.Type(), qual), "func"))
		case *types.TypeName:
			typeAPI(add, o, qual)
		}
	}
	return out
}

// typeAPI adds the lines of an exported type: its definition (the
// underlying type, or its fields and methods one per line), and its
// exported methods.
func typeAPI(add func(string, ...any), tn *types.TypeName, qual types.Qualifier) {
	name := tn.Name()
	if tn.IsAlias() {
		add("type %s = %s", name, types.TypeString(tn.Type(), qual))
		return
	}
	named, ok := tn.Type().(*types.Named)
	if !ok {
		return
	}
	if tps := named.TypeParams(); tps.Len() > 0 {
		var ps []string
		for tp := range tps.TypeParams() {
			ps = append(ps, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
		}
		name += "[" + strings.Join(ps, ", ") + "]"
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", name)
		for f := range u.Fields() {
			if f.Exported() {
				if f.Embedded() {
					add("type %s struct, embedded %s", name, types.TypeString(f.Type(), qual))
				} else {
					add("type %s struct, %s %s", name, f.Name(), types.TypeString(f.Type(), qual))
				}
			}
		}
	case *types.Interface:
		add("type %s interface { %s }", name, interfaceMethods(u, qual))
	default:
		add("type %s %s", name, types.TypeString(u, qual))
	}
	for _, ptr := range []bool{false, true} {
		recv := types.Type(named)
		if ptr {
			recv = types.NewPointer(named)
		}
		ms := types.NewMethodSet(recv)
		for sel := range ms.Methods() {
			m := sel.Obj().(*types.Func)
			if !m.Exported() || (ptr && types.NewMethodSet(named).Lookup(m.Pkg(), m.Name()) != nil) {
				continue
			}
			if len(sel.Index()) > 1 {
				continue // promoted from an embedded field: listed with its own type
			}
			r := tn.Name()
			if ptr {
				r = "*" + r
			}
			add("method (%s) %s%s", r, m.Name(), strings.TrimPrefix(types.TypeString(m.Type(), qual), "func"))
		}
	}
}

// interfaceMethods lists an interface's exported methods and embedded
// types, sorted.
func interfaceMethods(it *types.Interface, qual types.Qualifier) string {
	var ms []string
	for m := range it.ExplicitMethods() {
		if m.Exported() {
			ms = append(ms, m.Name()+strings.TrimPrefix(types.TypeString(m.Type(), qual), "func"))
		}
	}
	for e := range it.EmbeddedTypes() {
		ms = append(ms, types.TypeString(e, qual))
	}
	slices.Sort(ms)
	return strings.Join(ms, "; ")
}
