package pushcontext

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// strictOpts compares requests exactly (a nil map differs from an empty one).
var strictOpts = cmp.Comparer(func(a, b *PushContext) bool { return a == b })

func TestMerge(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Second)
	pc1, pc2 := &PushContext{seq: 1}, &PushContext{seq: 2}
	ka, kb, kc := key("K", "a"), key("K", "b"), key("L", "c")

	tests := []struct {
		name string
		r    *PushRequest
		next *PushRequest
		want *PushRequest
	}{
		// Full: OR.
		{"full false+false", &PushRequest{}, &PushRequest{}, &PushRequest{}},
		{"full true+false", &PushRequest{Full: true}, &PushRequest{}, &PushRequest{Full: true}},
		{"full false+true", &PushRequest{}, &PushRequest{Full: true}, &PushRequest{Full: true}},
		{"full true+true", &PushRequest{Full: true}, &PushRequest{Full: true}, &PushRequest{Full: true}},
		// Forced: OR.
		{"forced true+false", &PushRequest{Forced: true}, &PushRequest{}, &PushRequest{Forced: true}},
		{"forced false+true", &PushRequest{}, &PushRequest{Forced: true}, &PushRequest{Forced: true}},
		{"forced true+true", &PushRequest{Forced: true}, &PushRequest{Forced: true}, &PushRequest{Forced: true}},
		// ConfigsUpdated: union.
		{
			"keys disjoint",
			&PushRequest{ConfigsUpdated: NewConfigSet(ka)}, &PushRequest{ConfigsUpdated: NewConfigSet(kb, kc)},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb, kc)},
		},
		{
			"keys overlapping",
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb)}, &PushRequest{ConfigsUpdated: NewConfigSet(kb, kc)},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb, kc)},
		},
		{
			"keys newer subset of older",
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb)}, &PushRequest{ConfigsUpdated: NewConfigSet(kb)},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb)},
		},
		{
			"keys older subset of newer",
			&PushRequest{ConfigsUpdated: NewConfigSet(kb)}, &PushRequest{ConfigsUpdated: NewConfigSet(ka, kb)},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka, kb)},
		},
		{
			"keys only older",
			&PushRequest{ConfigsUpdated: NewConfigSet(ka)}, &PushRequest{},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka)},
		},
		{
			"keys only newer",
			&PushRequest{ConfigsUpdated: ConfigSet{}}, &PushRequest{ConfigsUpdated: NewConfigSet(ka)},
			&PushRequest{ConfigsUpdated: NewConfigSet(ka)},
		},
		// Reason: summed.
		{
			"reasons same summed",
			&PushRequest{Reason: ReasonStats{ReasonConfigUpdate: 2}}, &PushRequest{Reason: NewReasonStats(ReasonConfigUpdate)},
			&PushRequest{Reason: ReasonStats{ReasonConfigUpdate: 3}},
		},
		{
			"reasons different kept",
			&PushRequest{Reason: NewReasonStats(ReasonConfigUpdate)}, &PushRequest{Reason: NewReasonStats(ReasonEndpointUpdate, "host")},
			&PushRequest{Reason: ReasonStats{ReasonConfigUpdate: 1, ReasonEndpointUpdate: 1, "host": 1}},
		},
		{
			"reasons only older",
			&PushRequest{Reason: NewReasonStats(ReasonSecretUpdate)}, &PushRequest{},
			&PushRequest{Reason: NewReasonStats(ReasonSecretUpdate)},
		},
		{
			"reasons only newer",
			&PushRequest{}, &PushRequest{Reason: NewReasonStats(ReasonSecretUpdate)},
			&PushRequest{Reason: NewReasonStats(ReasonSecretUpdate)},
		},
		// Start: the oldest non-zero.
		{"start older first", &PushRequest{Start: t0}, &PushRequest{Start: t1}, &PushRequest{Start: t0}},
		{"start newer first", &PushRequest{Start: t1}, &PushRequest{Start: t0}, &PushRequest{Start: t0}},
		{"start zero older", &PushRequest{}, &PushRequest{Start: t1}, &PushRequest{Start: t1}},
		{"start zero newer", &PushRequest{Start: t1}, &PushRequest{}, &PushRequest{Start: t1}},
		// Push: the newest non-nil.
		{"push newer wins", &PushRequest{Push: pc1}, &PushRequest{Push: pc2}, &PushRequest{Push: pc2}},
		{"push newer nil keeps older", &PushRequest{Push: pc2}, &PushRequest{}, &PushRequest{Push: pc2}},
		{"push older nil", &PushRequest{}, &PushRequest{Push: pc1}, &PushRequest{Push: pc1}},
		// Merged out of order (a parked push rejoining a newer one): the
		// later snapshot wins, not the argument.
		{"push later wins merged out of order", &PushRequest{Push: pc2}, &PushRequest{Push: pc1}, &PushRequest{Push: pc2}},
		// Delta: merged, newer wins name by name.
		{
			"delta subscriptions unite",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("b")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a", "b")}},
		},
		{
			"delta later subscribe cancels earlier unsubscribe",
			&PushRequest{Delta: ResourceDelta{Unsubscribed: names("a", "b")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("b")}},
		},
		{
			"delta later unsubscribe cancels earlier subscribe",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a", "b")}},
			&PushRequest{Delta: ResourceDelta{Unsubscribed: names("b")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("b")}},
		},
		{
			"delta unsubscribe everything subscribed",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a")}},
			&PushRequest{Delta: ResourceDelta{Unsubscribed: names("a")}},
			&PushRequest{Delta: ResourceDelta{Unsubscribed: names("a")}},
		},
		{
			"delta only older",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("b")}},
			&PushRequest{},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("b")}},
		},
		{
			"delta newer repeats older",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a", "b"), Unsubscribed: names("c")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("c")}},
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a", "b"), Unsubscribed: names("c")}},
		},
		// Every field at once.
		{
			"all fields",
			&PushRequest{
				Full: true, ConfigsUpdated: NewConfigSet(ka), Reason: NewReasonStats(ReasonConfigUpdate),
				Start: t1, Push: pc1, Delta: ResourceDelta{Subscribed: names("x")},
			},
			&PushRequest{
				Forced: true, ConfigsUpdated: NewConfigSet(kb), Reason: NewReasonStats(ReasonConfigUpdate),
				Start: t0, Push: pc2, Delta: ResourceDelta{Unsubscribed: names("x")},
			},
			&PushRequest{
				Full: true, Forced: true, ConfigsUpdated: NewConfigSet(ka, kb), Reason: ReasonStats{ReasonConfigUpdate: 2},
				Start: t0, Push: pc2, Delta: ResourceDelta{Unsubscribed: names("x")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r0, next0 := tt.r.Clone(), tt.next.Clone()
			got := tt.r.Merge(tt.next)
			if diff := cmp.Diff(tt.want, got, requestOpts); diff != "" {
				t.Errorf("Merge() mismatch (-want +got):\n%s", diff)
			}
			if got == tt.r || got == tt.next {
				t.Errorf("Merge() returned one of its inputs; want a new request")
			}
			if diff := cmp.Diff(r0, tt.r, strictOpts); diff != "" {
				t.Errorf("Merge() modified its receiver (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(next0, tt.next, strictOpts); diff != "" {
				t.Errorf("Merge() modified its argument (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMergeNil(t *testing.T) {
	r := &PushRequest{Full: true}
	tests := []struct {
		name    string
		r, next *PushRequest
		want    *PushRequest
	}{
		{"nil receiver returns argument", nil, r, r},
		{"nil argument returns receiver", r, nil, r},
		{"both nil", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Merge(tt.next); got != tt.want {
				t.Errorf("Merge() = %p; want %p", got, tt.want)
			}
		})
	}
}

// TestMergeSharing pins down when Merge shares an input's map (documented
// under "Ownership") and that it never writes into one.
func TestMergeSharing(t *testing.T) {
	ka, kb := key("K", "a"), key("K", "b")
	older := &PushRequest{ConfigsUpdated: NewConfigSet(ka, kb), Reason: NewReasonStats(ReasonConfigUpdate)}
	sub := &PushRequest{ConfigsUpdated: NewConfigSet(kb)}
	got := older.Merge(sub)
	if reflect.ValueOf(got.ConfigsUpdated).Pointer() != reflect.ValueOf(older.ConfigsUpdated).Pointer() {
		t.Error("merging a subset: ConfigsUpdated is a new map; want the older request's map")
	}
	if reflect.ValueOf(got.Reason).Pointer() != reflect.ValueOf(older.Reason).Pointer() {
		t.Error("merging no reasons: Reason is a new map; want the older request's map")
	}
	grown := older.Merge(&PushRequest{ConfigsUpdated: NewConfigSet(key("K", "c")), Reason: NewReasonStats(ReasonConfigUpdate)})
	if len(older.ConfigsUpdated) != 2 || older.Reason[ReasonConfigUpdate] != 1 {
		t.Errorf("older after merge = %v %v; want it unchanged", older.ConfigsUpdated, older.Reason)
	}
	if len(grown.ConfigsUpdated) != 3 || grown.Reason[ReasonConfigUpdate] != 2 {
		t.Errorf("merged = %v %v; want 3 keys and config:2", grown.ConfigsUpdated, grown.Reason)
	}
}

// TestMergeCoversEveryField fails when PushRequest gains a field that Merge
// does not carry over. Each field is set alone, on either side, and must
// survive a merge with an otherwise empty request. A new field must also be
// given a rule here (and rows in TestMerge and the fuzz model).
func TestMergeCoversEveryField(t *testing.T) {
	rules := map[string]string{
		"Full":           "OR",
		"ConfigsUpdated": "union",
		"Reason":         "sum",
		"Forced":         "OR",
		"Start":          "oldest non-zero",
		"Push":           "newest non-nil",
		"Delta":          "newer wins per name",
	}
	typ := reflect.TypeFor[PushRequest]()
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		seen[f.Name] = true
		if _, ok := rules[f.Name]; !ok {
			t.Errorf("PushRequest.%s has no merge rule: merge it in Merge, then list it in this test, TestMerge and FuzzMerge", f.Name)
		}
		for _, side := range []string{"older", "newer"} {
			t.Run(f.Name+"/"+side, func(t *testing.T) {
				val := sample(t, f.Type)
				set, empty := &PushRequest{}, &PushRequest{}
				reflect.ValueOf(set).Elem().Field(i).Set(val)
				var got *PushRequest
				if side == "older" {
					got = set.Merge(empty)
				} else {
					got = empty.Merge(set)
				}
				gotField := reflect.ValueOf(got).Elem().Field(i).Interface()
				if diff := cmp.Diff(val.Interface(), gotField, strictOpts); diff != "" {
					t.Errorf("Merge() dropped %s set on the %s side (-want +got):\n%s", f.Name, side, diff)
				}
			})
		}
	}
	for name := range rules {
		if !seen[name] {
			t.Errorf("rule for %s, which PushRequest no longer has", name)
		}
	}
}

// sample returns a non-zero value of type typ.
func sample(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	switch {
	case typ == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)))
	case typ.Kind() == reflect.Bool:
		v.SetBool(true)
	case typ.Kind() == reflect.String:
		v.SetString("x")
	case v.CanInt():
		v.SetInt(7)
	case v.CanUint():
		v.SetUint(7)
	case typ.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(sample(t, typ.Key()), sample(t, typ.Elem()))
	case typ.Kind() == reflect.Slice:
		v.Set(reflect.Append(v, sample(t, typ.Elem())))
	case typ.Kind() == reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
	case typ.Kind() == reflect.Struct:
		if typ.NumField() == 0 {
			return v // struct{}: the only value of its type
		}
		for i := range typ.NumField() {
			if !typ.Field(i).IsExported() {
				t.Fatalf("cannot make a sample %s: field %s is unexported", typ, typ.Field(i).Name)
			}
			v.Field(i).Set(sample(t, typ.Field(i).Type))
		}
	default:
		t.Fatalf("cannot make a sample %s: add its kind to sample", typ)
	}
	return v
}

func TestHasChanges(t *testing.T) {
	tests := []struct {
		name string
		r    *PushRequest
		want bool
	}{
		{"nil", nil, false},
		{"empty", &PushRequest{}, false},
		{"full without keys changes nothing", &PushRequest{Full: true, Reason: NewReasonStats(ReasonGlobalUpdate)}, false},
		{"forced", &PushRequest{Forced: true}, true},
		{"keys", &PushRequest{ConfigsUpdated: NewConfigSet(key("K", "a"))}, true},
		{"empty non-nil keys", &PushRequest{ConfigsUpdated: ConfigSet{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.HasChanges(); got != tt.want {
				t.Errorf("HasChanges() = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		r       *PushRequest
		wantErr string
	}{
		{"nil", nil, "pushcontext: nil request"},
		{"empty", &PushRequest{}, ""},
		{"valid", &PushRequest{
			ConfigsUpdated: NewConfigSet(key("K", "a")), Reason: NewReasonStats(ReasonConfigUpdate),
			Delta: ResourceDelta{Subscribed: names("a"), Unsubscribed: names("b")},
		}, ""},
		{"empty kind", &PushRequest{ConfigsUpdated: NewConfigSet(ConfigKey{Name: "a"})}, `pushcontext: config key "//a" has an empty Kind`},
		{"negative count", &PushRequest{Reason: ReasonStats{ReasonConfigUpdate: -1}}, `pushcontext: reason "config" has a negative count -1`},
		{"empty reason", &PushRequest{Reason: ReasonStats{"": 1}}, "pushcontext: reason stats hold an empty reason"},
		{
			"name both subscribed and unsubscribed",
			&PushRequest{Delta: ResourceDelta{Subscribed: names("a", "b"), Unsubscribed: names("b")}},
			`pushcontext: resource "b" is both subscribed and unsubscribed`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("Validate() = %q; want %q", got, tt.wantErr)
			}
		})
	}
	if err := (*PushRequest)(nil).Validate(); !errors.Is(err, ErrNilRequest) {
		t.Errorf("nil.Validate() = %v; want ErrNilRequest", err)
	}
}

func TestClone(t *testing.T) {
	pc := &PushContext{seq: 3}
	r := &PushRequest{
		Full: true, Forced: true, ConfigsUpdated: NewConfigSet(key("K", "a")), Reason: NewReasonStats(ReasonConfigUpdate),
		Start: time.Unix(10, 0), Push: pc, Delta: ResourceDelta{Subscribed: names("s"), Unsubscribed: names("u")},
	}
	c := r.Clone()
	if diff := cmp.Diff(r, c, strictOpts); diff != "" {
		t.Fatalf("Clone() mismatch (-orig +clone):\n%s", diff)
	}
	c.ConfigsUpdated[key("K", "b")] = struct{}{}
	c.Reason[ReasonConfigUpdate]++
	c.Delta.Subscribed["t"] = struct{}{}
	c.Delta.Unsubscribed["v"] = struct{}{}
	if len(r.ConfigsUpdated) != 1 || r.Reason[ReasonConfigUpdate] != 1 || len(r.Delta.Subscribed) != 1 || len(r.Delta.Unsubscribed) != 1 {
		t.Errorf("modifying the clone changed the original: %+v", r)
	}
	if (*PushRequest)(nil).Clone() != nil {
		t.Error("nil.Clone() != nil")
	}
	if got := (&PushRequest{}).Clone(); got.ConfigsUpdated != nil || got.Reason != nil || got.Delta.Subscribed != nil {
		t.Errorf("Clone() of an empty request = %+v; want nil maps kept nil", got)
	}
}

// TestMergeAllocations pins the allocation counts documented under
// "Performance". Each fresh map costs two allocations in Go (its header and
// its first group of slots), so a merge that must build a new key set and a
// new reason map costs 1 + 2 + 2.
func TestMergeAllocations(t *testing.T) {
	ka, kb := key("K", "a"), key("K", "b")
	tests := []struct {
		name         string
		older, newer *PushRequest
		max          float64
	}{
		{
			name:  "newer adds nothing new",
			older: &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(ka, kb), Reason: NewReasonStats(ReasonConfigUpdate)},
			newer: &PushRequest{Full: true, ConfigsUpdated: NewConfigSet(kb)},
			max:   1,
		},
		{
			name:  "one side without keys or reasons",
			older: &PushRequest{Full: true},
			newer: &PushRequest{ConfigsUpdated: NewConfigSet(ka), Reason: NewReasonStats(ReasonConfigUpdate), Delta: ResourceDelta{Subscribed: names("x")}},
			max:   1,
		},
		{
			name:  "disjoint keys, reasons on both sides",
			older: &PushRequest{ConfigsUpdated: NewConfigSet(ka), Reason: NewReasonStats(ReasonConfigUpdate)},
			newer: &PushRequest{ConfigsUpdated: NewConfigSet(kb), Reason: NewReasonStats(ReasonConfigUpdate)},
			max:   5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(100, func() { sink = tt.older.Merge(tt.newer) }); got > tt.max {
				t.Errorf("Merge() allocations = %v; want at most %v", got, tt.max)
			}
		})
	}
}
