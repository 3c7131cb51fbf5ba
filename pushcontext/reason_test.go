package pushcontext

import "testing"

func TestReasonStats(t *testing.T) {
	tests := []struct {
		name    string
		stats   ReasonStats
		total   int
		str     string
		onlyReq bool
	}{
		{name: "nil", stats: nil, total: 0, str: ""},
		{name: "one", stats: NewReasonStats(ReasonProxyRequest), total: 1, str: "proxyrequest:1", onlyReq: true},
		{
			name:  "repeated reasons count each time",
			stats: NewReasonStats(ReasonEndpointUpdate, ReasonConfigUpdate, ReasonEndpointUpdate),
			total: 3, str: "config:1 endpoint:2",
		},
		{
			name:  "zero count is ignored by Only",
			stats: ReasonStats{ReasonProxyRequest: 2, ReasonConfigUpdate: 0},
			total: 2, str: "config:0 proxyrequest:2", onlyReq: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.stats.Total(); got != tt.total {
				t.Errorf("Total() = %d; want %d", got, tt.total)
			}
			if got := tt.stats.String(); got != tt.str {
				t.Errorf("String() = %q; want %q", got, tt.str)
			}
			if got := tt.stats.Only(ReasonProxyRequest); got != tt.onlyReq {
				t.Errorf("Only(proxyrequest) = %v; want %v", got, tt.onlyReq)
			}
		})
	}
	s := NewReasonStats(ReasonEndpointUpdate, ReasonEndpointUpdate)
	if got := s.Count(ReasonEndpointUpdate); got != 2 {
		t.Errorf("Count(endpoint) = %d; want 2", got)
	}
	if s.Has(ReasonConfigUpdate) || !s.Has(ReasonEndpointUpdate) {
		t.Errorf("Has(config), Has(endpoint) = %v, %v; want false, true", s.Has(ReasonConfigUpdate), s.Has(ReasonEndpointUpdate))
	}
}

func TestKnownReasons(t *testing.T) {
	known := KnownReasons()
	if len(known) != 12 {
		t.Errorf("len(KnownReasons()) = %d; want 12", len(known))
	}
	seen := map[TriggerReason]bool{}
	for _, r := range known {
		if !r.Known() {
			t.Errorf("%q.Known() = false; want true", r)
		}
		if seen[r] {
			t.Errorf("KnownReasons() lists %q twice", r)
		}
		seen[r] = true
	}
	if TriggerReason("host-defined").Known() {
		t.Error(`"host-defined".Known() = true; want false`)
	}
	known[0] = "changed"
	if KnownReasons()[0] != ReasonEndpointUpdate {
		t.Error("modifying the result of KnownReasons changed the next result")
	}
}
