package main

import (
	"io/fs"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// The configuration format (parsing, validation, snapshots, and how a
// snapshot is stated in a resources.Store) is package meshconfig's, which
// etcdcp shares; filecp reads it from a directory.
type (
	// Snapshot is one consistent configuration of the directory.
	Snapshot = meshconfig.Snapshot
	// Problem is one thing wrong with the directory.
	Problem = meshconfig.Problem
	// LoadError lists every problem of a rejected load.
	LoadError = meshconfig.LoadError
)

// loaderName starts the message of every LoadError filecp reports.
const loaderName = "filecp"

// Load reads a configuration directory and returns its Snapshot, or a
// *LoadError listing every problem found (see meshconfig.Loader.LoadFS).
func Load(fsys fs.FS) (*Snapshot, error) { return meshconfig.NewLoader(loaderName).LoadFS(fsys) }
