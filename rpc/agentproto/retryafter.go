package agentproto

import (
	"strconv"
	"time"
)

// Admission control. imsd serves a bounded number of hellos at once; a
// stream beyond that is ended at once, before any handshake, with
// resource_exhausted and RetryAfterHeader in its end-of-stream metadata:
// how long imsd expects to need for the hellos ahead of it. The agent
// waits a uniform random time up to that (full jitter, so a fleet told
// the same spreads over it), at most its own maximum backoff. The hint
// comes before the channel, so it is not authenticated: a path attacker
// can only delay an agent with it, which dropping its packets does too,
// and the agent's cap bounds that.

// RetryAfterHeader is the end-of-stream metadata key of the hint.
const RetryAfterHeader = "Byoc-Retry-After-Ms"

// FormatRetryAfter is the header value for the hint d: milliseconds.
func FormatRetryAfter(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// ParseRetryAfter reads a header value: a positive number of
// milliseconds, at most an hour.
func ParseRetryAfter(v string) (time.Duration, bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
