package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
)

// runPut is "etcdcp put": it writes configuration files under the prefix,
// all in one transaction (one revision: the replicas push them as one
// change). -f names a file, written to the key PREFIX[FLEET/]NAME (NAME is
// the file's name unless -key says otherwise), or a directory laid out as
// filecp's: its files are global, the files of its subdirectories belong to
// the fleet of the subdirectory's name. Before writing, the configuration
// the prefix would then hold is loaded as a replica loads it, and a
// rejected one is not written: the problems are printed instead.
func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("etcdcp put", flag.ContinueOnError)
	flags.SetOutput(stderr)
	ef := addEtcdFlags(flags, "127.0.0.1:2379")
	from := flags.String("f", "", "configuration `file` or directory to write (required)")
	fleet := flags.String("fleet", "", "`fleet` the file belongs to; empty for a global file")
	key := flags.String("key", "", "`name` of the file under the prefix (and the fleet); default: the file's name")
	timeout := flags.Duration("timeout", 10*time.Second, "bound on the whole `duration` of the put")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("etcdcp put: unexpected arguments %q", flags.Args())
	}
	if *from == "" {
		return errors.New("etcdcp put: -f is required")
	}
	files, err := filesToPut(*from, *fleet, *key)
	if err != nil {
		return err
	}
	client, err := NewClient(ef.config(ef.endpoints()))
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rev, err := putFiles(ctx, client, *ef.prefix, files)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintf(stdout, "put %s%s (%d bytes)\n", *ef.prefix, f.Path, len(f.Data))
	}
	fmt.Fprintf(stdout, "revision %d\n", rev)
	return nil
}

// filesToPut reads what -f names: a file, as the path fleet/key (key
// defaulting to its name), or a directory, every configuration file
// directly in it and in its subdirectories (fleets).
func filesToPut(from, fleet, key string) ([]meshconfig.File, error) {
	fi, err := os.Stat(from)
	if err != nil {
		return nil, fmt.Errorf("etcdcp put: %w", err)
	}
	if !fi.IsDir() {
		if key == "" {
			key = filepath.Base(from)
		}
		p := key
		if fleet != "" {
			p = fleet + "/" + key
		}
		if _, ok, _ := meshconfig.Place(p); !ok {
			return nil, fmt.Errorf("etcdcp put: %q is not a configuration file's path (NAME.yaml, .yml or .json, or FLEET/NAME.…, not hidden)", p)
		}
		data, err := os.ReadFile(from)
		if err != nil {
			return nil, fmt.Errorf("etcdcp put: %w", err)
		}
		return []meshconfig.File{{Path: p, Data: data}}, nil
	}
	if fleet != "" || key != "" {
		return nil, errors.New("etcdcp put: -fleet and -key name one file; a directory's layout names its files")
	}
	var files []meshconfig.File
	fsys := os.DirFS(from)
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.Count(p, "/") > 0 || meshconfig.IgnoredName(path.Base(p))) {
				return fs.SkipDir
			}
			return nil
		}
		if _, ok, _ := meshconfig.Place(p); !ok {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		files = append(files, meshconfig.File{Path: p, Data: data})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcdcp put: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("etcdcp put: no configuration files in %s", from)
	}
	return files, nil
}

// putFiles writes files under prefix in one transaction, if the
// configuration the prefix then holds loads; it returns the revision of
// the write. The transaction succeeds only if no key under the prefix
// changed since it was read, so that what was checked is what is
// written; otherwise it is tried again.
func putFiles(ctx context.Context, client *clientv3.Client, prefix string, files []meshconfig.File) (int64, error) {
	for attempt := 0; ; attempt++ {
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, fmt.Errorf("etcdcp put: list %s: %w", prefix, err)
		}
		held := map[string][]byte{}
		for _, kv := range resp.Kvs {
			held[pathOf(prefix, string(kv.Key))] = kv.Value
		}
		for _, f := range files {
			held[f.Path] = f.Data
		}
		all := make([]meshconfig.File, 0, len(held))
		for p, data := range held { // LoadFiles sorts them
			all = append(all, meshconfig.File{Path: p, Data: data})
		}
		if _, err := meshconfig.NewLoader("etcdcp put").LoadFiles(all); err != nil {
			return 0, err
		}
		ops := make([]clientv3.Op, 0, len(files))
		for _, f := range files {
			ops = append(ops, clientv3.OpPut(prefix+f.Path, string(f.Data)))
		}
		txn, err := client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(prefix), "<", resp.Header.Revision+1).WithPrefix()).
			Then(ops...).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("etcdcp put: %w", err)
		}
		if txn.Succeeded {
			return txn.Header.Revision, nil
		}
		if attempt == 2 {
			return 0, errors.New("etcdcp put: the prefix keeps changing; try again")
		}
	}
}
