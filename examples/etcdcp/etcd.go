package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// EmbedConfig configures an embedded single-node etcd.
type EmbedConfig struct {
	// Dir is the data directory; it is created if missing, and an etcd
	// started again on it finds its keys and revisions. Required.
	Dir string

	// ClientAddr is the host:port the etcd serves its clients on (the
	// replicas, etcdctl, etcdcp put). Empty means 127.0.0.1:2379; port 0
	// picks a free port (Embedded.ClientAddr says which).
	ClientAddr string

	// PeerAddr is the host:port of its peer (raft) listener, which a
	// single node uses for nothing but its identity. Empty means
	// 127.0.0.1:2380. A data directory remembers it: start the etcd again
	// with the same PeerAddr.
	PeerAddr string

	// StartTimeout bounds the wait until the etcd serves (it elects
	// itself leader). Zero means 30 seconds.
	StartTimeout time.Duration
}

// Embedded is an etcd running in this process.
type Embedded struct {
	e *embed.Etcd
}

// StartEmbedded starts a single-node etcd as cfg says and returns once it
// serves its clients, or an error if it cannot start. Close it.
func StartEmbedded(cfg EmbedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdcp: EmbedConfig.Dir is empty")
	}
	clientAddr := cmp.Or(cfg.ClientAddr, "127.0.0.1:2379")
	peerAddr := cmp.Or(cfg.PeerAddr, "127.0.0.1:2380")
	timeout := cmp.Or(cfg.StartTimeout, 30*time.Second)
	ec := embed.NewConfig()
	ec.Name = "etcdcp"
	ec.Dir = cfg.Dir
	cu := url.URL{Scheme: "http", Host: clientAddr}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	// etcd logs through zap, at Info by default: only its errors here.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdcp: embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Embedded{e: e}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdcp: embedded etcd: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("etcdcp: embedded etcd: not ready after %v", timeout)
	}
}

// ClientAddr returns the host:port the etcd serves its clients on.
func (m *Embedded) ClientAddr() string { return m.e.Clients[0].Addr().String() }

// Err returns a channel that receives an error if the etcd fails while
// running.
func (m *Embedded) Err() <-chan error { return m.e.Err() }

// Close stops the etcd and waits until it has stopped.
func (m *Embedded) Close() { m.e.Close() }

// ClientConfig says how to reach an etcd cluster.
type ClientConfig struct {
	// Endpoints are the host:port of its members. Required.
	Endpoints []string

	// CertFile and KeyFile are the client certificate and key to present,
	// CAFile the CA bundle that verifies the servers' certificates. Any of
	// them enables TLS; empty CAFile means the system's roots.
	CertFile, KeyFile, CAFile string

	// DialTimeout bounds the first connection. Zero means 5 seconds.
	DialTimeout time.Duration
}

// NewClient returns a client of the etcd cluster cfg names. It connects
// in the background: a cluster that is down makes its calls fail, not
// NewClient.
func NewClient(cfg ClientConfig) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdcp: no etcd endpoints")
	}
	cc := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cmp.Or(cfg.DialTimeout, 5*time.Second),
		Logger:      zap.NewNop(),
		// A broken connection to a member is noticed within seconds even
		// when nothing is written.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// Reconnect at most 5s apart (gRPC's default backs off to 2
		// minutes): a replica serves what etcd holds soon after etcd is
		// back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		if (cfg.CertFile == "") != (cfg.KeyFile == "") {
			return nil, errors.New("etcdcp: a client certificate needs both its file and its key's")
		}
		info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcdcp: etcd TLS: %w", err)
		}
		cc.TLS = tc
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcdcp: etcd client: %w", err)
	}
	return c, nil
}
