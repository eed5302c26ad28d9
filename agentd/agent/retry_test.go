package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// A stream imsd shed with a retry hint is tried again after a random
// time up to the hint (capped at the agent's maximum backoff), not after
// the backoff's next delay; any other end of a stream takes the backoff.
func TestRetryDelayHonoursIMSDsHint(t *testing.T) {
	// Rand returning its argument shows the bound drawn from.
	b := &backoff.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second, Rand: func(n time.Duration) time.Duration { return n }}
	shed := connect.NewError(connect.CodeResourceExhausted, errors.New("imsd is serving 64 hellos already"))
	shed.Meta().Set(agentproto.RetryAfterHeader, "7000")
	if d := retryDelay(fmt.Errorf("read challenge: %w", shed), b, 30*time.Second); d != 7*time.Second {
		t.Fatalf("delay after a shed with a 7s hint = %s; want drawn up to 7s", d)
	}
	if d := retryDelay(shed, b, 5*time.Second); d != 5*time.Second {
		t.Fatalf("delay after a 7s hint with a 5s maximum backoff = %s; want 5s", d)
	}
	if d := retryDelay(errors.New("connection refused"), b, 30*time.Second); d != 100*time.Millisecond {
		t.Fatalf("delay after a refused connection = %s; want the backoff's first, 100ms (the hints did not advance it)", d)
	}
	// The hint counts only on resource_exhausted.
	other := connect.NewError(connect.CodeUnavailable, errors.New("x"))
	other.Meta().Set(agentproto.RetryAfterHeader, "7000")
	if d := retryDelay(other, b, 30*time.Second); d != 200*time.Millisecond {
		t.Fatalf("delay after unavailable carrying a hint = %s; want the backoff's, 200ms", d)
	}
	// Without a test Rand: uniform in [0, hint].
	b.Rand = nil
	for range 100 {
		if d := retryDelay(shed, b, 30*time.Second); d < 0 || d > 7*time.Second {
			t.Fatalf("delay %s outside [0, 7s]", d)
		}
	}
}
