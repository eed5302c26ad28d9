package agentapi

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// keptUntil reads what imsd sends on cs until it confirms keeping
// session last's recording, and returns the sessions it confirmed, in
// order.
func keptUntil(t *testing.T, cs *chanStream, last string) []string {
	t.Helper()
	var got []string
	for {
		m := cs.next(t)
		if k := m.GetRecordingKept(); k != nil {
			got = append(got, k.SessionId)
			if k.SessionId == last {
				return got
			}
		}
	}
}

// A recording the agent sends again on a later stream (its session not
// opened through that stream) is kept, once, for a session imsd
// recorded as started on that agent, and confirmed to the agent (again
// when it was kept before, with the same bytes). A stream takes at most
// maxResentPerStream such recordings, counting refused ones, and holds
// at most maxRecordingBytesPerStream of recordings at once; the rest
// wait for the next stream. A piece at offset 0 starts a copy again;
// a piece of a sending cut short, a copy of another agent's session and
// one differing from the copy kept are not kept nor confirmed.
func TestRecordingsSentAgainBounded(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	start := func(id, agent string) {
		t.Helper()
		if err := e.st.StartSupportSession(ctx, store.SupportSession{ID: id, InstallID: "ins_1", AgentID: agent, StartedAt: e.clk.Now()},
			store.AuditEvent{Chain: "ins_1", At: e.clk.Now(), Kind: "support.session.started", Actor: "token:t", Subject: id}); err != nil {
			t.Fatal(err)
		}
	}
	data := func(id string) []byte { return []byte("{\"version\":2}\n[0.1,\"o\",\"" + id + "\"]\n") }
	ids := make([]string, maxResentPerStream+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("ss_resent%03d", i)
		start(ids[i], e.agent)
	}
	start("ss_otheragent", "agt_9")

	cs, _ := e.open(t, "i1")
	cs.next(t) // welcome
	if err := e.svc.hub.InstallSession("ins_1").Push(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{
		ShellOpen: &agentv1.ShellOpen{SessionId: "ss_barrier1"}}}); err != nil {
		t.Fatal(err)
	}
	piece := func(cs *chanStream, id string, b []byte, off int64, last bool) {
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: id,
			Recording: b, RecordingOffset: off, RecordingLast: last}}}
	}
	piece(cs, ids[0], []byte("the rest of a sending cut short"), 7, true)
	sendRecording(cs, "ss_otheragent", data("ss_otheragent"))
	piece(cs, ids[0], []byte("a sending cut short, started again"), 0, false)
	for _, id := range ids {
		sendRecording(cs, id, data(id))
	}
	sendRecording(cs, "ss_barrier1", data("ss_barrier1"))
	got := keptUntil(t, cs, "ss_barrier1")
	want := append(append([]string(nil), ids[:maxResentPerStream-1]...), "ss_barrier1")
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("confirmed on the first stream:\n%v\nwant\n%v", got, want)
	}
	if r, err := e.st.GetSessionRecording(ctx, ids[0]); err != nil || !bytes.Equal(r.Data, data(ids[0])) {
		t.Fatalf("%s kept as %q (%v)", ids[0], r.Data, err)
	}
	if _, err := e.st.GetSessionRecording(ctx, "ss_otheragent"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another agent's session's recording kept (%v)", err)
	}

	// The next stream takes the rest; one kept before is confirmed
	// again, not kept twice; one with other bytes is refused.
	cs2, _ := e.open(t, "i1")
	cs2.next(t)
	sendRecording(cs2, ids[1], []byte("other bytes\n"))
	sendRecording(cs2, ids[0], data(ids[0]))
	for _, id := range ids[maxResentPerStream-1:] {
		sendRecording(cs2, id, data(id))
	}
	got = keptUntil(t, cs2, ids[len(ids)-1])
	want = append([]string{ids[0]}, ids[maxResentPerStream-1:]...)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("confirmed on the second stream:\n%v\nwant\n%v", got, want)
	}
	if r, _ := e.st.GetSessionRecording(ctx, ids[1]); !bytes.Equal(r.Data, data(ids[1])) {
		t.Fatalf("%s replaced by %q", ids[1], r.Data)
	}
	kept := 0
	evs, err := e.st.ListAuditEvents(ctx, store.AuditFilter{Chain: "ins_1", OneChain: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == store.KindRecordingKept {
			kept++
		}
	}
	if kept != len(ids)+1 {
		t.Fatalf("%d recording_kept records, want %d (each session once)", kept, len(ids)+1)
	}

	// Three recordings of the largest size sent at once: the stream holds
	// two; the one whose piece would pass that is dropped.
	cs3, _ := e.open(t, "i1")
	cs3.next(t)
	big := []string{"ss_bigone01", "ss_bigtwo02", "ss_bigthree3"}
	for _, id := range big {
		start(id, e.agent)
	}
	chunk := bytes.Repeat([]byte("x"), agentproto.MaxShellData)
	go func() {
		for off := 0; off < MaxSessionRecording; off += len(chunk) {
			for _, id := range big {
				piece(cs3, id, chunk, int64(off), false)
			}
		}
		for _, id := range big {
			piece(cs3, id, nil, MaxSessionRecording, true)
		}
	}()
	got = keptUntil(t, cs3, big[2])
	if strings.Join(got, " ") != big[0]+" "+big[2] {
		t.Fatalf("confirmed of three recordings at once: %v, want %s and %s", got, big[0], big[2])
	}
	if _, err := e.st.GetSessionRecording(ctx, big[1]); !errs.Is(err, errs.NotFound) {
		t.Fatalf("%s kept past the stream's bound (%v)", big[1], err)
	}
}
