package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdspush/xdspush/examples/internal/meshconfig"
	"github.com/xdspush/xdspush/xds"
)

// secretFile is a file of one Secret named name.
func secretFile(name string) []byte {
	return []byte(`resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: ` + name + `
  tls_certificate:
    certificate_chain: {inline_string: "chain of ` + name + `"}
    private_key: {inline_string: "key of ` + name + `"}
`)
}

// TestReplicaSecrets checks that a replica serves no Secret unless
// InsecureSecrets says so, and warns when the configuration holds Secrets
// it does not serve. A client of fleet edge asks for every Secret, then
// for the clusters: the SDS generator's result is observed (a hook), and
// nothing of SDS may arrive before the clusters do, nor anything at all
// when the replica serves none.
func TestReplicaSecrets(t *testing.T) {
	const warning = "secrets are configured but not served"
	tests := []struct {
		name     string
		insecure bool
		want     []string
	}{
		{"default", false, nil},
		{"InsecureSecrets", true, []string{"edge-key", "shared-key"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startEtcd(t)
			c := e.newClient(t)
			put(t, c, append(bundledFiles(t),
				meshconfig.File{Path: "secrets.yaml", Data: secretFile("shared-key")},
				meshconfig.File{Path: "edge/secrets.yaml", Data: secretFile("edge-key")},
				meshconfig.File{Path: "web/secrets.yaml", Data: secretFile("web-key")})...)
			log := newSyncBuffer()
			generated := make(chan xds.GenerateEvent, 16)
			r := startReplica(t, e, "0", func(cfg ReplicaConfig) ReplicaConfig {
				cfg.InsecureSecrets = tc.insecure
				cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
				cfg.Instrument = func(xcfg xds.Config) xds.Config {
					xcfg.Hooks.OnGenerate = func(ev xds.GenerateEvent) {
						if ev.Type == xds.SecretType {
							select {
							case generated <- ev:
							default: // hooks must not block; the test asks once
							}
						}
					}
					return xcfg
				}
				return replicaTuning(cfg)
			})
			if got := strings.Contains(log.String(), warning); got != !tc.insecure {
				t.Errorf("warning %q logged: %t; want %t. Log:\n%s", warning, got, !tc.insecure, log.String())
			}

			conn, err := grpc.NewClient(r.ads, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			node := &corev3.Node{Id: "n-1", Cluster: "edge"}
			for _, req := range []*discoveryv3.DiscoveryRequest{
				{Node: node, TypeUrl: string(xds.SecretType), ResourceNames: []string{"edge-key", "shared-key", "web-key"}},
				{TypeUrl: string(xds.ClusterType)},
			} {
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for clusters := false; !clusters || len(got) < len(tc.want); {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("Recv() = %v; secrets so far %v", err, got)
				}
				switch xds.TypeURL(resp.TypeUrl) {
				case xds.ClusterType:
					clusters = true
				case xds.SecretType:
					for _, a := range resp.Resources {
						var s tlsv3.Secret
						if err := a.UnmarshalTo(&s); err != nil {
							t.Fatal(err)
						}
						got = append(got, s.GetName())
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Secrets served = %v; want %v", got, tc.want)
			}
			select {
			case ev := <-generated:
				if ev.ProxyID != "n-1" || ev.Resources != len(tc.want) {
					t.Errorf("SDS generated %+v; want %d Secrets for n-1", ev, len(tc.want))
				}
			case <-ctx.Done():
				t.Fatal("no SDS generation")
			}
		})
	}
}
