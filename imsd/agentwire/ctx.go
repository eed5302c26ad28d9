package agentwire

// The stream's context.

import (
	"context"
	"slices"
	"sync"
	"time"
)

// streamCtx is the context a stream's handler runs with: done when the
// stream ends. It is not context.WithCancel's for memory: a cancelCtx
// keeps, for its whole life, the map its first child made (every database
// query on the stream's context makes one, as database/sql's Rows
// registers a child while it is open), some 250 bytes for every idle
// agent (docs/performance-storm.md, 2026-11-29). A streamCtx takes its
// children through AfterFunc, which the context package uses for a
// parent of a type of its own, and keeps them in a slice it drops when
// the last one is done.
type streamCtx struct {
	done chan struct{}

	mu     sync.Mutex
	err    error
	afters []*afterFunc // nil when none
}

// afterFunc is one function AfterFunc registered.
type afterFunc struct{ f func() }

func newStreamCtx() *streamCtx { return &streamCtx{done: make(chan struct{})} }

func (c *streamCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *streamCtx) Done() <-chan struct{} { return c.done }

func (c *streamCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *streamCtx) Value(any) any { return nil }

// AfterFunc runs f on a goroutine of its own once c is done (at once if
// it is), unless the returned stop is called first; stop reports whether
// it stopped f from running. context.AfterFunc's contract, and what
// context.WithCancel and the others use on a parent that has it.
func (c *streamCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.afters = append(c.afters, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, a)
		if i < 0 {
			return false
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		if len(c.afters) == 0 {
			c.afters = nil
		}
		return true
	}
}

// cancel ends c (context.Canceled) and runs what AfterFunc registered.
func (c *streamCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	close(c.done)
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	for _, a := range afters {
		go a.f()
	}
}
