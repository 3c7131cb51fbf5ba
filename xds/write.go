package xds

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/xdspush/xdspush/internal/session"
)

// nextBatch takes the responses queued for the writer, if none is running,
// and arms the check for a blocked write. It returns nil if there is
// nothing to write or a writer is running.
func (c *conn) nextBatch() []*session.OutMsg {
	if c.writing || len(c.outbox) == 0 {
		return nil
	}
	batch := c.outbox
	c.outbox = nil
	c.writing = true
	c.writingApplied = session.LowestApplied(batch)
	c.writeAt = c.s.set.Instant(c.s.set.clock.Now().Add(c.s.set.writeTimeout))
	c.arm()
	return batch
}

// onWritten records the end of a successful write batch, as a step on the
// writer goroutine, and returns the next batch for it to write, if any.
func (c *conn) onWritten() []*session.OutMsg {
	c.writing = false
	c.writingApplied = 0
	c.writeAt = 0 // settle re-arms the timer
	return c.settle(false)
}

// checkWrite ends the stream if a Send has been blocked for
// Config.WriteTimeout, and otherwise re-arms the check while a batch is
// being written.
func (c *conn) checkWrite(ctx context.Context) error {
	c.writeAt = 0
	if !c.writing {
		return nil
	}
	timeout := c.s.set.writeTimeout
	wait := timeout
	if at := c.sendStart.Load(); at != 0 {
		blocked := c.s.set.clock.Now().Sub(time.Unix(0, at))
		if blocked >= timeout {
			c.s.set.logger.LogAttrs(ctx, slog.LevelWarn, "xds: write timed out; closing stream",
				slog.String("proxy", c.proxy.ID), slog.String("conn", c.proxy.ConnID),
				slog.Duration("timeout", timeout))
			callHook(c.s.set, c.s.set.hooks.Load().OnWriteTimeout, WriteTimeoutEvent{ProxyID: c.proxy.ID, ConnID: c.proxy.ConnID,
				Type: c.s.set.order[c.sendType.Load()], Waited: blocked})
			return status.Errorf(codes.DeadlineExceeded, "xds: a write to the client blocked for more than %v", timeout)
		}
		wait = timeout - blocked
	}
	c.writeAt = c.s.set.Instant(c.s.set.clock.Now().Add(wait))
	c.arm()
	return nil
}

// write is the writer goroutine: it sends batch in order, then records
// its end as a step and goes on with the responses queued meanwhile, until
// there are none. A failed Send ends the stream.
func (c *conn) write(batch []*session.OutMsg) {
	for batch != nil {
		batch = c.writeBatch(batch)
	}
}

// writeBatch sends batch and records the end of the write as a step; it
// returns the next batch to write, nil if none or if the stream ends (a
// failed Send ends it).
func (c *conn) writeBatch(batch []*session.OutMsg) []*session.OutMsg {
	if err := c.send(batch); err != nil {
		c.postEvent(event{kind: evWriteFailed, v: err})
		return nil
	}
	if !c.lockStep() {
		return nil
	}
	next := c.onWritten()
	c.unlockStep(nil)
	return next
}

// send sends batch in order, on the writer goroutine.
func (c *conn) send(batch []*session.OutMsg) error {
	clock := c.s.set.clock
	var err error
	for i, m := range batch {
		start := clock.Now()
		c.sendType.Store(int32(m.TypeIndex))
		c.sendStart.Store(start.UnixNano())
		switch {
		case m.Shared != nil && c.plain && m.Shared.Prepare(c.stream) != nil:
			err = c.stream.SendMsg(m.Shared.Prepared)
		case m.DeltaResp != nil:
			err = c.stream.SendMsg(m.DeltaResp)
		default:
			err = c.stream.SendMsg(m.Resp)
		}
		c.sendStart.Store(0)
		if err != nil {
			break
		}
		if h := c.s.set.hooks.Load().OnSend; h != nil {
			ev := SendEvent{
				ProxyID: c.proxy.ID,
				ConnID:  c.proxy.ConnID,
				Type:    c.s.set.order[m.TypeIndex],
				Bytes:   m.Bytes,
				Push:    m.Push,
				Queued:  start.Sub(m.Made),
				Took:    clock.Now().Sub(start),
			}
			if m.DeltaResp != nil {
				ev.Delta = true
				ev.Version, ev.Nonce = m.DeltaResp.SystemVersionInfo, m.DeltaResp.Nonce
				ev.Resources, ev.Removed = len(m.DeltaResp.Resources), len(m.DeltaResp.RemovedResources)
			} else {
				ev.Version, ev.Nonce, ev.Resources = m.Resp.VersionInfo, m.Resp.Nonce, len(m.Resp.Resources)
			}
			c.takeLock(&c.hooking)
			if !c.ended {
				callHook(c.s.set, h, ev)
			}
			c.giveLock(&c.hooking)
		}
		batch[i] = nil
		m.Free()
	}
	return err
}

// plainStream reports whether a stream's responses are sent uncompressed:
// the client asked for no compression (gRPC compresses responses only as
// the request was, when the compressor is registered).
func plainStream(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, e := range md.Get("grpc-encoding") {
		if e != "" && e != "identity" {
			return false
		}
	}
	return true
}

// close marks the connection ended and releases anyone waiting on it.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	c.inbox = nil
	done := c.done
	c.mu.Unlock()
	c.stopTimer()
	if done != nil {
		close(done) // else doneChan makes it closed
	}
}

// doneChan returns the channel closed when the stream ends (conn.done),
// made if there is none yet: closed already if the stream has ended.
func (c *conn) doneChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.closed {
			close(c.done)
		}
	}
	return c.done
}

// hostStreamError ends a stream because of host code: OnDisconnect gets
// the detail, the client what Server.hostError made of it.
type hostStreamError struct{ err, toClient error }

func (e *hostStreamError) Error() string { return e.err.Error() }

func (e *hostStreamError) Unwrap() error { return e.err }

// GRPCStatus is what the client is told.
func (e *hostStreamError) GRPCStatus() *status.Status { return status.Convert(e.toClient) }
