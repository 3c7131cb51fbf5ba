package release_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xdspush/xdspush/examples/internal/release"
)

// WriteProxy lays out what a module proxy serves for a module at a
// version.
func ExampleWriteProxy() {
	repo, _ := os.MkdirTemp("", "repo")
	defer os.RemoveAll(repo)
	proxy, _ := os.MkdirTemp("", "proxy")
	defer os.RemoveAll(proxy)
	os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module example.com/Lib\n\ngo 1.26.0\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "lib.go"), []byte("package lib\n"), 0o644)

	if err := release.WriteProxy(proxy, repo, "v0.1.0", []release.Module{{Path: "example.com/Lib", Dir: "."}}); err != nil {
		fmt.Println(err)
		return
	}
	filepath.WalkDir(proxy, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(proxy, path)
			fmt.Println(filepath.ToSlash(rel))
		}
		return nil
	})
	// Output:
	// example.com/!lib/@v/list
	// example.com/!lib/@v/v0.1.0.info
	// example.com/!lib/@v/v0.1.0.mod
	// example.com/!lib/@v/v0.1.0.zip
}
