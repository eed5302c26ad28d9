package store

import (
	"context"
	"sync"
)

// CallRecord is the audit record of an operator call (operatorapi's
// Auditor) that the call's own write appends, in the write's transaction,
// instead of a write of its own before the call: one commit instead of
// two on the path of every enqueue (docs/performance-postgres.md,
// "pickup"). The record and the call's change then commit together or not
// at all, as the Auditor's rule asks (no change without its record).
// Written reports whether a write appended it; when none did (the call
// failed before its write, or its write failed), the Auditor appends it
// with RecordAudit afterwards.
type CallRecord struct {
	ev AuditEvent
	mu sync.Mutex
	// state: callFree, callTaken (a write is running with it) or
	// callWritten (a write with it committed).
	state int
}

const (
	callFree = iota
	callTaken
	callWritten
)

type callRecordKey struct{}

// WithCallRecord returns ctx carrying ev, for the enqueue writes
// (EnqueueJob, EnqueueAssigned, EnqueueJobs, EnqueueJobsKeyed) made under
// it to append ev in their own transaction, once.
func WithCallRecord(ctx context.Context, ev AuditEvent) (context.Context, *CallRecord) {
	c := &CallRecord{ev: ev}
	return context.WithValue(ctx, callRecordKey{}, c), c
}

// Written reports whether a write under the record's context committed it.
func (c *CallRecord) Written() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == callWritten
}

// Event is the record.
func (c *CallRecord) Event() AuditEvent { return c.ev }

// takeCallRecord returns ctx's call record when no other write has it or
// has written it; the caller appends it in its write and then calls done.
// nil when there is none to take.
func takeCallRecord(ctx context.Context) *CallRecord {
	c, _ := ctx.Value(callRecordKey{}).(*CallRecord)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != callFree {
		return nil
	}
	c.state = callTaken
	return c
}

// audit queues the record in tx (c may be nil).
func (c *CallRecord) audit(ctx context.Context, s *Store, tx *txn) error {
	if c == nil {
		return nil
	}
	return s.Audit(ctx, tx, c.ev)
}

// done ends a write that took c: written when err is nil, else free for
// another write (or the Auditor) to append.
func (c *CallRecord) done(err error) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.state = callWritten
	} else {
		c.state = callFree
	}
}
