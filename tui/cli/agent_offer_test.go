package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc install get's "Agent update offer" line says what a deferred offer
// waits for: the customer's window (when it opens), or, the window open,
// imsd's confirmation (at once for a connected agent, on reconnect for a
// disconnected one); other answers read as before.
func TestUpdateOfferTextDeferred(t *testing.T) {
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC) // a Sunday
	agent := func(kind, window string, connected bool) *imsv1.AgentStatus {
		return &imsv1.AgentStatus{Connected: connected,
			UpdateOffer: &imsv1.AgentUpdateOffer{Id: "uo_1", Release: "oci://r/agent@sha256:1", OfferedBy: "alice", OfferTime: timestamppb.New(now.Add(-time.Hour))},
			Update:      &imsv1.AgentUpdate{Window: window, LastKind: kind, LastOfferId: "uo_1"}}
	}
	for _, c := range []struct {
		name string
		ag   *imsv1.AgentStatus
		want string
	}{
		{"window shut", agent("deferred", "Sun 16:00-18:00 UTC", true), ": deferred until the customer's window opens, 2026-11-29T16:00:00Z (in 2h0m0s)"},
		{"window open, connected", agent("deferred", "Sun 13:00-18:00 UTC", true), ": deferred; the customer's window is open: the agent applies it once imsd confirms it still stands"},
		{"window open, disconnected", agent("deferred", "Sun 13:00-18:00 UTC", false), ": deferred; the customer's window is open but the agent is disconnected: it asks imsd to confirm the offer when it reconnects"},
		{"no window reported", agent("deferred", "", true), "by alice 1h ago: deferred"},
		{"applied", agent("applied", "Sun 13:00-18:00 UTC", true), "by alice 1h ago: applied"},
	} {
		got := updateOfferText(now, c.ag)
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q in it", c.name, got, c.want)
		}
		if c.name == "no window reported" || c.name == "applied" {
			if !strings.HasSuffix(got, c.want) {
				t.Errorf("%s: %q, want it to end %q", c.name, got, c.want)
			}
		}
	}
}
