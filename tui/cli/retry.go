package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/internal/backoff"
)

// enqueueTries bounds the tries of one enqueue call: the first and up to
// four retries, about 3 s of waiting in all.
const enqueueTries = 5

// newIdempotencyKey returns a fresh idempotency key for the enqueue of one
// invocation: 130 random bits, in the characters imsd accepts.
func newIdempotencyKey() string { return "byoc-cli-" + strings.ToLower(rand.Text()) }

// retryTransient calls fn until it succeeds, fails with an error that is
// not transient, or has been tried enqueueTries times, waiting with
// jittered exponential backoff in between and saying so on stderr. It is
// only for calls that are safe to repeat: an enqueue that carries its
// idempotency key, which imsd answers with the jobs it already stored when
// an earlier try's answer was lost.
func (a *app) retryTransient(ctx context.Context, what string, fn func() error) error {
	b := backoff.New(200*time.Millisecond, 2*time.Second)
	for try := 1; ; try++ {
		err := fn()
		if err == nil || try == enqueueTries || !transient(ctx, err) {
			return err
		}
		d := b.Next()
		fmt.Fprintf(a.stderr, "==> %s: %v; retrying in %s (try %d of %d)\n", what, err, d.Round(time.Millisecond), try+1, enqueueTries)
		if !backoff.Wait(ctx, d) {
			return err
		}
	}
}

// transient reports whether err may pass if the call is made again: the
// server unreachable or restarting, a connection reset or cut before the
// answer, a server-side deadline. Not when ctx itself has ended.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
