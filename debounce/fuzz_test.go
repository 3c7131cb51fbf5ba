package debounce_test

import (
	"testing"
	"time"

	"github.com/xdspush/xdspush/debounce"
)

// modelCore is a deliberately naive Core: it keeps every event of a lane in a
// slice and recomputes everything from the slice. FuzzCore checks that Core
// agrees with it.
type modelCore struct {
	after, max time.Duration
	lanes      [2]modelLane // 0: debounced, 1: bypass
}

type modelLane struct {
	events []modelEvent
	busy   bool
}

type modelEvent struct {
	at time.Time
	id int
}

func (m *modelCore) add(now time.Time, id int, bypass bool) {
	l := &m.lanes[0]
	if bypass {
		l = &m.lanes[1]
	}
	l.events = append(l.events, modelEvent{now, id})
}

// next returns the ids of the batch to push, or nil and the wake time.
func (m *modelCore) next(now time.Time) (ids []int, bypass bool, wakeAt time.Time) {
	if l := &m.lanes[1]; len(l.events) > 0 && !l.busy {
		return l.take(), true, time.Time{}
	}
	l := &m.lanes[0]
	if len(l.events) == 0 || l.busy {
		return nil, false, time.Time{}
	}
	latest := l.events[0].at
	for _, e := range l.events {
		if e.at.After(latest) {
			latest = e.at
		}
	}
	due := latest.Add(m.after)
	if byMax := l.events[0].at.Add(m.max); byMax.Before(due) {
		due = byMax
	}
	if now.Before(due) {
		return nil, false, due
	}
	return l.take(), false, time.Time{}
}

func (l *modelLane) take() []int {
	ids := make([]int, len(l.events))
	for i, e := range l.events {
		ids[i] = e.id
	}
	l.events, l.busy = nil, true
	return ids
}

// FuzzCore drives Core and modelCore with the same operations and compares
// every answer. Each input byte is one operation: the low 3 bits pick it, the
// high 5 bits advance the clock by up to 310ms.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 2, 0x52, 3, 2, 1, 2, 4, 2})
	f.Add([]byte{0, 0x20, 0x20, 0x20, 0x20, 0x22, 0x22, 0x22, 0x23, 2})
	f.Add([]byte{1, 1, 2, 1, 0, 2, 4, 2, 3, 0xfa, 2})
	f.Add([]byte{0, 2, 0xfa, 0xfa, 0xfa, 0xfa, 2, 0, 3, 2, 5, 0, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		cfg := debounce.Config[req]{After: 100 * ms, Max: 400 * ms, Bypass: isBypass}
		c, err := debounce.NewCore(cfg)
		if err != nil {
			t.Fatalf("NewCore() error = %v; want nil", err)
		}
		m := &modelCore{after: cfg.After, max: cfg.Max}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		id, added, pushed, discarded := 0, 0, 0, 0
		for i, op := range ops {
			now = now.Add(time.Duration(op>>3) * 10 * ms)
			switch op & 7 {
			case 0, 1:
				id++
				added++
				bypass := op&7 == 1
				r := newReq(id)
				r.bypass = bypass
				c.Add(now, r)
				m.add(now, id, bypass)
			case 2, 5, 6:
				b, fire, wakeAt := c.Next(now)
				ids, bypass, wantWake := m.next(now)
				if fire != (ids != nil) {
					t.Fatalf("op %d: Next fire = %v; model fires %v", i, fire, ids)
				}
				if !wakeAt.Equal(wantWake) {
					t.Fatalf("op %d: Next wakeAt = %v; model %v", i, wakeAt, wantWake)
				}
				if !wakeAt.IsZero() && !wakeAt.After(now) {
					t.Fatalf("op %d: Next wakeAt = %v; want after now %v", i, wakeAt, now)
				}
				if !fire {
					continue
				}
				sum := 0
				for _, x := range ids {
					sum += x
				}
				if b.Merged != len(ids) || b.Req.n != len(ids) || b.Req.first != ids[0] ||
					b.Req.last != ids[len(ids)-1] || b.Req.sum != sum || b.Bypass != bypass {
					t.Fatalf("op %d: batch %+v (Merged %d, Bypass %v); model ids %v bypass %v",
						i, b.Req, b.Merged, b.Bypass, ids, bypass)
				}
				pushed += b.Merged
			case 3, 4:
				bypass := op&7 == 4
				c.Done(debounce.Batch[req]{Bypass: bypass})
				l := &m.lanes[0]
				if bypass {
					l = &m.lanes[1]
				}
				l.busy = false
			case 7:
				discarded += c.Discard()
				m.lanes[0].events, m.lanes[1].events = nil, nil
			}
			if got, want := c.Pending(), len(m.lanes[0].events)+len(m.lanes[1].events); got != want {
				t.Fatalf("op %d: Pending() = %d; model %d", i, got, want)
			}
		}
		if pushed+discarded+c.Pending() != added {
			t.Fatalf("pushed %d + discarded %d + pending %d; want %d added", pushed, discarded, c.Pending(), added)
		}
	})
}
