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
		if len(b.Epoch()) != 8 {
			t.Errorf("Epoch() = %q; want 8 hex digits", b.Epoch())
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
			if _, seq, err := ParseVersion(pc.Version()); err != nil || seq != pc.Seq() {
				t.Errorf("step %d: ParseVersion(%q) = %d, %v; want %d", i, pc.Version(), seq, err, pc.Seq())
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
		{"a", 0, "a-0"},
		{"a", 1, "a-1"},
		{"E", 1234567890, "E-1234567890"},
		{"9f3c2a71", 42, "9f3c2a71-42"},
		{strings.Repeat("z", 32), 18446744073709551615, strings.Repeat("z", 32) + "-18446744073709551615"},
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
		{name: "older", a: "e-9", b: "e-10", want: -1},
		{name: "newer", a: "e-10", b: "e-9", want: 1},
		{name: "equal", a: "e-10", b: "e-10", want: 0},
		{name: "zero", a: "e-0", b: "e-1", want: -1},
		{name: "different builders", a: "e-1", b: "f-2", wantErr: "come from different builders"},
		{name: "no dash", a: "e", b: "e-1", wantErr: "has no '-'"},
		{name: "empty sequence", a: "e-", b: "e-1", wantErr: "without leading zeros"},
		{name: "leading zero", a: "e-01", b: "e-1", wantErr: "without leading zeros"},
		{name: "zero padded", a: "e-00000000000000000001", b: "e-1", wantErr: "without leading zeros"},
		{name: "bad digits", a: "e-1x", b: "e-1", wantErr: "bad sequence"},
		{name: "sign", a: "e-+1", b: "e-1", wantErr: "bad sequence"},
		{name: "sequence overflow", a: "e-18446744073709551616", b: "e-1", wantErr: "bad sequence"},
		{name: "empty epoch", a: "-1", b: "e-1", wantErr: "bad epoch"},
		{name: "bad second", a: "e-1", b: "", wantErr: "has no '-'"},
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

// FuzzParseVersion checks that ParseVersion accepts exactly the canonical
// versions: whatever it accepts, formatVersion writes back unchanged.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"e-1", "9f3c2a71-42", "a-0", "a-01", "-1", "e-", "a-b-3", "x-18446744073709551615", "x-18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		epoch, seq, err := ParseVersion(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "pushcontext: ") {
				t.Errorf("ParseVersion(%q) error = %q; want the package prefix", s, err)
			}
			return
		}
		if got := formatVersion(epoch, seq); got != s {
			t.Errorf("formatVersion(ParseVersion(%q)) = %q; want the input back", s, got)
		}
	})
}
