package xds

import (
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestServerOptionsSettings reads the HTTP/2 settings a gRPC server built
// with ServerOptions announces to a new connection: the streams one
// connection may open (Config.MaxStreamsPerConnection) and no dynamic
// header table for what the client sends.
func TestServerOptionsSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		streams int // Config.MaxStreamsPerConnection; 0: the default
		want    map[http2.SettingID]uint32
	}{
		{"defaults", 0, map[http2.SettingID]uint32{
			http2.SettingHeaderTableSize:      0,
			http2.SettingMaxConcurrentStreams: DefaultMaxStreamsPerConnection,
		}},
		{"streams", 7, map[http2.SettingID]uint32{
			http2.SettingHeaderTableSize:      0,
			http2.SettingMaxConcurrentStreams: 7,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, newStore(), func(cfg *Config) { cfg.MaxStreamsPerConnection = tc.streams }, false)
			got := serverSettings(t, f)
			for id, want := range tc.want {
				if v, ok := got[id]; !ok || v != want {
					t.Errorf("%v = %d (announced: %t), want %d", id, v, ok, want)
				}
			}
		})
	}
}

// serverSettings opens an HTTP/2 connection to f's gRPC server and returns
// the settings of the server's first SETTINGS frame.
func serverSettings(t *testing.T, f *fixture) map[http2.SettingID]uint32 {
	t.Helper()
	nc, err := f.lis.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's settings: %v", err)
		}
		sf, ok := frame.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		got := map[http2.SettingID]uint32{}
		if err := sf.ForeachSetting(func(s http2.Setting) error {
			got[s.ID] = s.Val
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
}
