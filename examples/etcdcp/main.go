package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// defaultPrefix is the key prefix the configuration lives under.
const defaultPrefix = "/xdspush/config/"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// run is the whole program: "put ..." writes configuration files to etcd
// (see runPut); anything else serves: it parses args, starts an embedded
// etcd unless -etcd names a cluster, and runs a Replica on -addr and
// -admin until ctx ends, printing every push to stdout. It returns nil
// when ctx ends and an error if it cannot start.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "put" {
		return runPut(ctx, args[1:], stdout, stderr)
	}
	flags := flag.NewFlagSet("etcdcp", flag.ContinueOnError)
	flags.SetOutput(stderr)
	ef := addEtcdFlags(flags, "")
	addr := flags.String("addr", "127.0.0.1:18000", "ADS (xDS) listen `address`")
	admin := flags.String("admin", "127.0.0.1:18001", "admin HTTP listen `address`; empty to disable")
	maxAge := flags.Duration("max-conn-age", 30*time.Minute,
		"close each ADS connection after this `duration` (±10%), so that clients reconnect and spread over replicas; 0 disables")
	insecureSecrets := flags.Bool("insecure-secrets", false, "serve Secrets (SDS) to any client; without it, none are served")
	dataDir := flags.String("etcd-data", "etcdcp.etcd", "data `directory` of the embedded etcd (without -etcd)")
	etcdListen := flags.String("etcd-listen", "127.0.0.1:2379", "client `address` of the embedded etcd (without -etcd), for other replicas, etcdctl and etcdcp put")
	etcdPeer := flags.String("etcd-peer", "127.0.0.1:2380", "peer `address` of the embedded etcd (without -etcd)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("etcdcp: unexpected arguments %q", flags.Args())
	}
	if *maxAge < 0 {
		return fmt.Errorf("etcdcp: -max-conn-age %v is negative", *maxAge)
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	endpoints := ef.endpoints()
	if len(endpoints) == 0 {
		m, err := StartEmbedded(EmbedConfig{Dir: *dataDir, ClientAddr: *etcdListen, PeerAddr: *etcdPeer})
		if err != nil {
			return err
		}
		defer m.Close()
		endpoints = []string{m.ClientAddr()}
		logger.Info("embedded etcd serving", "addr", m.ClientAddr(), "data", *dataDir)
		go func() {
			// An embedded etcd that fails stops the program.
			select {
			case err := <-m.Err():
				logger.Error("embedded etcd failed", "err", err)
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	client, err := NewClient(ef.config(endpoints))
	if err != nil {
		return err
	}
	defer client.Close()

	r, err := NewReplica(ReplicaConfig{
		KV: client, Watcher: client, Prefix: *ef.prefix,
		MaxConnectionAge: *maxAge,
		InsecureSecrets:  *insecureSecrets,
		Out:              stdout,
		Logger:           logger,
	})
	if err != nil {
		return err
	}
	adsLn, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("etcdcp: ads: %w", err)
	}
	var adminLn net.Listener
	if *admin != "" {
		if adminLn, err = net.Listen("tcp", *admin); err != nil {
			adsLn.Close()
			return fmt.Errorf("etcdcp: admin: %w", err)
		}
	}
	logger.Info("watching", "etcd", strings.Join(endpoints, ","), "prefix", *ef.prefix)
	return r.Serve(ctx, adsLn, adminLn)
}

// etcdFlags are the flags that say how to reach etcd and where the
// configuration lives.
type etcdFlags struct {
	etcd, cert, key, ca, prefix *string
}

// addEtcdFlags defines the etcd flags on fs; def is the default of -etcd.
func addEtcdFlags(fs *flag.FlagSet, def string) etcdFlags {
	usage := "etcd cluster `endpoints`, host:port,...; empty starts an embedded etcd"
	if def != "" {
		usage = "etcd cluster `endpoints`, host:port,..."
	}
	return etcdFlags{
		etcd:   fs.String("etcd", def, usage),
		cert:   fs.String("etcd-cert", "", "client certificate `file` for etcd (TLS)"),
		key:    fs.String("etcd-key", "", "client certificate key `file` for etcd (TLS)"),
		ca:     fs.String("etcd-ca", "", "CA bundle `file` that verifies etcd's certificates (TLS)"),
		prefix: fs.String("prefix", defaultPrefix, "etcd key `prefix` of the configuration"),
	}
}

// endpoints returns the endpoints of -etcd, nil if it is empty.
func (f etcdFlags) endpoints() []string {
	var out []string
	for e := range strings.SplitSeq(*f.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// config returns the ClientConfig of endpoints with the TLS flags.
func (f etcdFlags) config(endpoints []string) ClientConfig {
	return ClientConfig{Endpoints: endpoints, CertFile: *f.cert, KeyFile: *f.key, CAFile: *f.ca}
}
