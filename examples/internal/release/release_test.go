package release_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/semver"

	"github.com/xdspush/xdspush/examples/internal/release"
)

// consumer is a program outside the repository that uses each public
// module.
const consumer = `package main

import (
	"fmt"

	"github.com/xdspush/xdspush/pushcontext"
	"github.com/xdspush/xdspush/xds"
	"github.com/xdspush/xdspush/xds/resources"
	"github.com/xdspush/xdspush/xds/xdsotel"
	"github.com/xdspush/xdspush/xds/xdstest"
)

var (
	_ = resources.New
	_ = xdstest.NewServer
	_ = xdsotel.New
)

func main() {
	b, err := pushcontext.NewBuilder(pushcontext.BuilderConfig{})
	if err != nil {
		panic(err)
	}
	fmt.Println(xds.ClusterType.Short(), b != nil)
}
`

// The public modules, served by a module proxy at the version the release
// procedure sets, install and build in a module outside the repository,
// with no workspace and no replace directive.
func TestInstall(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	otel, err := os.ReadFile(filepath.Join(repo, "xds/xdsotel/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	version, err := release.RequiredVersion(otel, "github.com/xdspush/xdspush")
	if err != nil {
		t.Fatal(err)
	}
	if !semver.IsValid(version) || version == "v0.0.0" {
		t.Fatalf("xds/xdsotel requires the root module at %q; want the version to be released (see the README's \"Releasing\")", version)
	}
	proxy := t.TempDir()
	mods := release.PublicModules()
	if err := release.WriteProxy(proxy, repo, version, mods); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/consumer\n\ngo 1.26.0\n")
	write("main.go", consumer)
	// The checksums of the dependencies, as the repository's modules have
	// verified them: the consumer needs the checksum database for none.
	var sums bytes.Buffer
	for _, m := range mods {
		b, err := os.ReadFile(filepath.Join(repo, m.Dir, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		sums.Write(b)
	}
	write("go.sum", sums.String())

	upstream, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-mod=mod",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+strings.TrimSpace(string(upstream)),
		"GONOSUMDB=github.com/xdspush",
	)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	get := []string{"get"}
	for _, m := range mods {
		get = append(get, m.Path+"@"+version)
	}
	run(get...)
	run("build", "-o", filepath.Join(dir, "consumer"), ".")
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "consumer"))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "CDS true" {
		t.Fatalf("the consumer printed %q (%v); want \"CDS true\"", out, err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if got, err := release.RequiredVersion(gomod, m.Path); err != nil || got != version {
			t.Errorf("the consumer requires %s at %q (%v); want %s", m.Path, got, err, version)
		}
	}
}

// WriteProxy refuses what a module proxy could not serve, and says why.
func TestWriteProxyRefuses(t *testing.T) {
	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module example.com/lib\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		version string
		mods    []release.Module
		want    string
	}{
		{"no module", "v0.1.0", nil, "no modules"},
		{"another path than go.mod's", "v0.1.0", []release.Module{{Path: "example.com/other", Dir: "."}}, `declares module "example.com/lib"`},
		{"not a version", "1.0", []release.Module{{Path: "example.com/lib", Dir: "."}}, "1.0"},
		{"no go.mod", "v0.1.0", []release.Module{{Path: "example.com/lib/sub", Dir: "sub"}}, "example.com/lib/sub"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := release.WriteProxy(t.TempDir(), repo, tt.version, tt.mods)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WriteProxy() = %v; want an error with %q", err, tt.want)
			}
		})
	}
}
