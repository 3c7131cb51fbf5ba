package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Module is a module of the repository: its path, and its directory
// relative to the repository's root.
type Module struct {
	Path string
	Dir  string
}

// PublicModules returns the modules of this repository meant to be
// imported from outside it. The examples and benchmarks modules are not.
func PublicModules() []Module {
	return []Module{
		{Path: "github.com/xdspush/xdspush", Dir: "."},
		{Path: "github.com/xdspush/xdspush/xds/xdsotel", Dir: "xds/xdsotel"},
	}
}

// WriteProxy writes under proxyDir what a module proxy serves for each of
// mods at version, from the repository at repo: GOPROXY=file://proxyDir
// then serves them. Each module's go.mod must name its path.
func WriteProxy(proxyDir, repo, version string, mods []Module) error {
	if len(mods) == 0 {
		return errors.New("release: no modules")
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		return err
	}
	for _, m := range mods {
		dir := filepath.Join(repo, m.Dir)
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return fmt.Errorf("release: %s: %w", m.Path, err)
		}
		if p := modfile.ModulePath(gomod); p != m.Path {
			return fmt.Errorf("release: %s/go.mod declares module %q; want %q", m.Dir, p, m.Path)
		}
		mv := module.Version{Path: m.Path, Version: version}
		if err := module.Check(mv.Path, mv.Version); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		at := filepath.Join(proxyDir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(at, version+".zip"))
		if err != nil {
			return err
		}
		err = zip.CreateFromDir(f, mv, dir)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("release: zip of %s: %w", m.Path, err)
		}
		for name, data := range map[string][]byte{
			version + ".mod":  gomod,
			version + ".info": info,
			"list":            []byte(version + "\n"),
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// RequiredVersion returns the version at which the go.mod gomod requires
// the module path, or an error if it does not require it.
func RequiredVersion(gomod []byte, path string) (string, error) {
	f, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version, nil
		}
	}
	return "", fmt.Errorf("release: go.mod does not require %s", path)
}
