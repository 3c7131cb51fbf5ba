package pushcontext

import (
	"strings"
	"testing"
)

func TestNewBuilderEpoch(t *testing.T) {
	tests := []struct {
		name    string
		epoch   string
		wantErr string
	}{
		{name: "letters and digits", epoch: "prod7"},
		{name: "32 characters", epoch: strings.Repeat("a", 32)},
		{name: "33 characters", epoch: strings.Repeat("a", 33), wantErr: "must have 1 to 32 characters"},
		{name: "dash", epoch: "a-b", wantErr: "may hold only ASCII letters and digits"},
		{name: "dot", epoch: "a.b", wantErr: "may hold only ASCII letters and digits"},
		{name: "non-ASCII", epoch: "é", wantErr: "may hold only ASCII letters and digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBuilder(BuilderConfig{Epoch: tt.epoch})
			if tt.wantErr == "" {
				if err != nil || b.Epoch() != tt.epoch {
					t.Errorf("NewBuilder() = %v, %v; want epoch %q", b, err, tt.epoch)
				}
				return
			}
			if b != nil || err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "pushcontext: ") {
				t.Errorf("NewBuilder() = %v, %v; want nil and an error containing %q", b, err, tt.wantErr)
			}
		})
	}
}

func TestRandomEpochsDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		b, err := NewBuilder(BuilderConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Epoch()) != 16 {
			t.Errorf("Epoch() = %q; want 16 hex digits", b.Epoch())
		}
		if seen[b.Epoch()] {
			t.Fatalf("epoch %q chosen twice", b.Epoch())
		}
		seen[b.Epoch()] = true
		pc, _ := b.Build(nil, nil)
		if _, err := CompareVersions(pc.Version(), pc.Version()); err != nil {
			t.Errorf("CompareVersions(%q) error = %v", pc.Version(), err)
		}
	}
}

func TestVersionsIncrease(t *testing.T) {
	b, _ := NewBuilder(BuilderConfig{})
	var prev *PushContext
	for i := range 30 {
		pc, err := b.Build(prev, nil)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil {
			c, err := CompareVersions(prev.Version(), pc.Version())
			if err != nil || c != -1 {
				t.Errorf("step %d: CompareVersions(%q, %q) = %d, %v; want -1", i, prev.Version(), pc.Version(), c, err)
			}
			if !(prev.Version() < pc.Version()) {
				t.Errorf("step %d: %q < %q is false; want string order to follow Seq", i, prev.Version(), pc.Version())
			}
		}
		prev = pc
	}
}

func TestFormatVersion(t *testing.T) {
	tests := []struct {
		epoch string
		seq   uint64
		want  string
	}{
		{"a", 1, "a-00000000000000000001"},
		{"E", 1234567890, "E-00000000001234567890"},
		{"x", 18446744073709551615, "x-18446744073709551615"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := formatVersion(tt.epoch, tt.seq); got != tt.want {
				t.Errorf("formatVersion(%q, %d) = %q; want %q", tt.epoch, tt.seq, got, tt.want)
			}
			epoch, seq, err := ParseVersion(tt.want)
			if err != nil || epoch != tt.epoch || seq != tt.seq {
				t.Errorf("ParseVersion(%q) = %q, %d, %v; want %q, %d", tt.want, epoch, seq, err, tt.epoch, tt.seq)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		name    string
		a, b    string
		want    int
		wantErr string
	}{
		{name: "older", a: "e-00000000000000000009", b: "e-00000000000000000010", want: -1},
		{name: "newer", a: "e-00000000000000000010", b: "e-00000000000000000009", want: 1},
		{name: "equal", a: "e-00000000000000000010", b: "e-00000000000000000010", want: 0},
		{name: "different builders", a: "e-00000000000000000001", b: "f-00000000000000000002", wantErr: "come from different builders"},
		{name: "no dash", a: "e", b: "e-00000000000000000001", wantErr: "has no '-'"},
		{name: "short sequence", a: "e-1", b: "e-00000000000000000001", wantErr: "sequence must have 20 digits"},
		{name: "bad digits", a: "e-0000000000000000000x", b: "e-00000000000000000001", wantErr: "bad sequence"},
		{name: "sequence overflow", a: "e-99999999999999999999", b: "e-00000000000000000001", wantErr: "bad sequence"},
		{name: "empty epoch", a: "-00000000000000000001", b: "e-00000000000000000001", wantErr: "bad epoch"},
		{name: "bad second", a: "e-00000000000000000001", b: "", wantErr: "has no '-'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CompareVersions(tt.a, tt.b)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("CompareVersions() = %d, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("CompareVersions() = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
