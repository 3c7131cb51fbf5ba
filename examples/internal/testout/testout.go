// Package testout is, for the examples' tests, a buffer that stands for a
// program's standard output or error while it runs: safe for concurrent
// use, and waited on until it holds a given text.
//
// Contract:
//   - Write and String are safe for concurrent use; Write never blocks.
//   - WaitFor returns once the buffer holds the text (WaitForCount: that
//     many times), waking on each write,
//     and ends the test if the buffer's timeout passes first, showing what
//     it holds. No goroutine is started.
//
// Only tests import it.
package testout

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent use that signals writes.
type Buffer struct {
	timeout time.Duration
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

// NewBuffer returns an empty Buffer whose WaitFor waits at most timeout.
func NewBuffer(timeout time.Duration) *Buffer {
	return &Buffer{timeout: timeout, written: make(chan struct{}, 1)}
}

// Write appends p and wakes a WaitFor.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.written <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor waits until b contains s.
func (b *Buffer) WaitFor(t testing.TB, s string) {
	t.Helper()
	b.WaitForCount(t, s, 1)
}

// Count returns how many times b contains s, without overlaps.
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// WaitForCount waits until b contains s at least n times.
func (b *Buffer) WaitForCount(t testing.TB, s string, n int) {
	t.Helper()
	deadline := time.NewTimer(b.timeout)
	defer deadline.Stop()
	for b.Count(s) < n {
		select {
		case <-b.written:
		case <-deadline.C:
			if n == 1 {
				t.Fatalf("output does not contain %q after %v; got:\n%s", s, b.timeout, b.String())
			}
			t.Fatalf("output does not contain %q %d times after %v; got:\n%s", s, n, b.timeout, b.String())
		}
	}
}
