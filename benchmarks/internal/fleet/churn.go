package fleet

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Churn reconnects clients while it runs: every second, PerSecond clients
// drawn at random close their connection and open a new one, as an empty
// client (as Envoy does when its ADS stream fails: it starts over on a new
// stream). See Fleet.StartChurn.
type Churn struct {
	f    *Fleet
	stop chan struct{}
	done chan struct{}
	n    int64 // reconnections made; read after done is closed
}

// StartChurn starts reconnecting perSecond clients every second, drawn
// from seed, until Stop. A client that leaves is no longer counted as
// holding the configuration of the current phase (ExpectMesh) until it
// holds it again; a reconnection is not a regression. No other method of
// the Fleet may be called until Stop returns, but for ExpectMesh's
// configuration being waited for by WaitMesh after it.
func (f *Fleet) StartChurn(perSecond int, seed uint64) *Churn {
	ch := &Churn{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go ch.run(perSecond, rand.New(rand.NewPCG(seed, 0x636875726e))) // "churn"
	return ch
}

// Stop stops the churn, once the reconnections under way have been made,
// and returns how many were made.
func (ch *Churn) Stop() int64 {
	close(ch.stop)
	<-ch.done
	return ch.n
}

func (ch *Churn) run(perSecond int, r *rand.Rand) {
	defer close(ch.done)
	if perSecond <= 0 {
		<-ch.stop
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ch.stop:
			return
		case <-t.C:
		}
		idx := r.Perm(len(ch.f.clients))[:min(perSecond, len(ch.f.clients))]
		var wg sync.WaitGroup
		for _, i := range idx {
			c := ch.f.clients[i]
			wg.Go(func() {
				c.disconnect()
				c.leave()
				if err := c.connect(); err != nil {
					ch.f.streamError(err)
				}
			})
		}
		wg.Wait()
		ch.n += int64(len(idx))
	}
}

// leave takes the client, whose connection is closed (its goroutine has
// returned), out of the count of the current phase, if it was counted in
// it: it will start again as an empty client. Unlike uncount, it is not a
// regression: no response took the configuration away.
func (c *client) leave() {
	if ph := c.phaseOf.Load(); ph != nil && ph == c.f.phase.Load() {
		c.convAt.Store(0)
		c.phaseOf.Store(nil)
		ph.add(-1)
	}
}
