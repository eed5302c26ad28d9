package agentapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// drain reads what imsd sends on cs until the test ends.
func drain(t *testing.T, cs *chanStream) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-cs.out:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// sendRecording sends data as session id's recording, in pieces of at
// most agentproto.MaxShellData from offset 0, the last one marked.
func sendRecording(cs *chanStream, id string, data []byte) {
	off := 0
	for {
		n := min(len(data)-off, agentproto.MaxShellData)
		last := off+n == len(data)
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: id,
			Recording: data[off : off+n], RecordingOffset: int64(off), RecordingLast: last}}}
		off += n
		if last {
			return
		}
	}
}

// waitKept waits for session id's recording to be kept and returns it.
func waitKept(t *testing.T, st *store.Store, id string) store.SessionRecording {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := st.GetSessionRecording(context.Background(), id)
		if err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("recording of %s not kept: %v", id, err)
		}
		time.Sleep(5 * time.Millisecond) // polling the store, with a deadline
	}
}

// imsd keeps a session's recording only from the stream the session was
// opened on, once, whole, in order and within MaxSessionRecording, under
// that stream's install and with its own SHA-256. An agent of another
// install naming the session, a recording of a session imsd never
// opened, one sent twice, one out of order and one over the limit are
// not kept (the second sending of one kept leaves the first).
func TestSessionRecordingOnlyFromItsStream(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	// A second install with its own agent, on the same imsd.
	if err := e.st.CreateInstall(ctx, store.Install{ID: "ins_2", AppID: "app_1", Name: "other", CreatedAt: e.clk.Now()},
		store.EnrollmentToken{Hash: "h2", ExpiresAt: e.clk.Now().Add(time.Hour), CreatedAt: e.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	pub2, key2, _ := ed25519.GenerateKey(nil)
	a2, err := e.st.Enroll(ctx, "h2", store.Agent{ID: "agt_2", PublicKey: pub2, Hostname: "h2", Version: "v"}, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	e2 := *e
	e2.agent, e2.key = a2.ID, key2

	cs1, _ := e.open(t, "i1")
	cs1.next(t) // welcome
	cs2, _ := e2.open(t, "i2")
	cs2.next(t)
	drain(t, cs1)
	drain(t, cs2)
	push := func(install, id string) {
		t.Helper()
		s := e.svc.hub.InstallSession(install)
		if s == nil {
			t.Fatalf("no stream of %s", install)
		}
		if err := s.Push(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_ShellOpen{ShellOpen: &agentv1.ShellOpen{SessionId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"ss_a", "ss_twice", "ss_order", "ss_big", "ss_last"} {
		push("ins_1", id)
	}
	push("ins_2", "ss_b")

	// The other install's agent sends a recording of acme's session, then
	// one of its own (kept: the barrier of its stream).
	sendRecording(cs2, "ss_a", []byte("forged by the other install's agent\n"))
	sendRecording(cs2, "ss_b", []byte("b\n"))
	if r := waitKept(t, e.st, "ss_b"); r.InstallID != "ins_2" {
		t.Fatalf("ss_b kept under %s", r.InstallID)
	}

	sendRecording(cs1, "ss_never", []byte("never opened\n"))
	sendRecording(cs1, "ss_twice", []byte("first\n"))
	sendRecording(cs1, "ss_twice", []byte("second\n"))
	// (A piece at offset 0 starts the copy again: a gap is out of order.)
	cs1.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: "ss_order", Recording: []byte("a"), RecordingOffset: 0}}}
	cs1.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Shell{Shell: &agentv1.ShellEvent{SessionId: "ss_order", Recording: []byte("c"), RecordingOffset: 2, RecordingLast: true}}}
	sendRecording(cs1, "ss_big", bytes.Repeat([]byte("x"), MaxSessionRecording+1))
	good := []byte("{\"version\":2}\n[0.1,\"o\",\"$ \"]\n")
	sendRecording(cs1, "ss_a", good)
	sendRecording(cs1, "ss_last", []byte("last\n")) // the barrier of this stream

	waitKept(t, e.st, "ss_last")
	r := waitKept(t, e.st, "ss_a")
	sum := sha256.Sum256(good)
	if r.InstallID != "ins_1" || r.AgentID != e.agent || !bytes.Equal(r.Data, good) || r.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("ss_a kept as %+v", r)
	}
	if r := waitKept(t, e.st, "ss_twice"); string(r.Data) != "first\n" {
		t.Fatalf("ss_twice kept as %q, want the first sending", r.Data)
	}
	for _, id := range []string{"ss_never", "ss_order", "ss_big"} {
		if _, err := e.st.GetSessionRecording(ctx, id); !errs.Is(err, errs.NotFound) {
			t.Errorf("%s: kept (%v)", id, err)
		}
	}
	if recs, _ := e.st.ListSessionRecordings(ctx, "ins_2"); len(recs) != 1 {
		t.Errorf("the other install holds %d recordings, want its own one", len(recs))
	}
}
