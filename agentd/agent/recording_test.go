package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/sessionrec"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The recordings the agent sends imsd: only of ended sessions the
// customer allowed to the vendor when they started, and only while the
// customer still allows it; not those imsd confirmed keeping, nor one
// sent on this stream already, nor one larger than imsd keeps; oldest
// first, at most the bound at a time.
func TestPendingRecordings(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m := func(id string, mod func(*sessionrec.Meta)) sessionrec.Meta {
		x := sessionrec.Meta{ID: id, Started: t0, Ended: t0.Add(time.Minute), ToVendor: true, SHA256: "sum-" + id, Size: 100}
		if mod != nil {
			mod(&x)
		}
		return x
	}
	ms := []sessionrec.Meta{
		m("ss_a", nil),
		m("ss_notallowed", func(x *sessionrec.Meta) { x.ToVendor = false }),
		m("ss_running", func(x *sessionrec.Meta) { x.Ended = time.Time{} }),
		m("ss_kept", func(x *sessionrec.Meta) { x.VendorKept = true }),
		m("ss_sent", nil),
		m("ss_huge", func(x *sessionrec.Meta) { x.Size = agentproto.MaxSessionRecording + 1 }),
		m("ss_nohash", func(x *sessionrec.Meta) { x.SHA256 = "" }),
		m("ss_b", nil),
	}
	ids := func(ms []sessionrec.Meta) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.ID)
		}
		return strings.Join(s, " ")
	}
	if got := ids(pendingRecordings(ms, true, map[string]bool{"ss_sent": true}, 10)); got != "ss_a ss_b" {
		t.Fatalf("pending: %q, want ss_a ss_b", got)
	}
	if got := pendingRecordings(ms, false, nil, 10); len(got) != 0 {
		t.Fatalf("pending while the customer does not allow copies: %v", ids(got))
	}
	var many []sessionrec.Meta
	for i := range agentproto.MaxRecordingsResent + 3 {
		many = append(many, m(fmt.Sprintf("ss_%03d", i), nil))
	}
	got := pendingRecordings(many, true, nil, agentproto.MaxRecordingsResent)
	if len(got) != agentproto.MaxRecordingsResent || got[0].ID != "ss_000" {
		t.Fatalf("pending of %d: %d from %s, want the %d oldest", len(many), len(got), got[0].ID, agentproto.MaxRecordingsResent)
	}
}
