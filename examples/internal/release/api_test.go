package release_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdspush/xdspush/examples/internal/release"
)

var update = flag.Bool("update", false, "TestAPI: write the public API to api/xdspush.txt")

// The exported API of every public package is the one recorded in
// api/xdspush.txt: a change to it shows in review as a change to that
// file, and is then listed in CHANGELOG.md. After an intended change, run
// go test -run TestAPI ./internal/release -update (in examples/).
func TestAPI(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, m := range release.PublicModules() {
		patterns = append(patterns, m.Path+"/...")
	}
	got, err := release.API(repo, patterns...)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("API() is empty")
	}
	for _, want := range []string{"pkg github.com/xdspush/xdspush/xds, func New(", "pkg github.com/xdspush/xdspush/xds/xdsotel, func New("} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("API() lacks %q", want)
		}
	}
	file := filepath.Join(repo, "api", "xdspush.txt")
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	recorded, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(strings.Split(string(recorded), "\n"), strings.Split(text, "\n")); d != "" {
		t.Errorf("the exported API differs from api/xdspush.txt (-recorded +now); if intended, run go test -run TestAPI ./internal/release -update in examples/ and list the change in CHANGELOG.md:\n%s", d)
	}
}
