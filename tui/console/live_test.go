package console

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"
	"github.com/charmbracelet/x/exp/teatest/v2"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// TestConsoleAgainstRealIMS runs the real program (teatest) against an
// in-process imsd and a protocol-level agent that writes 3,000 log lines,
// with a log buffer of 1,500 lines: the fleet arrives by the watch, the log
// opens at its end, and paging back twice past the buffer's bound reaches
// the first line from imsd; G reloads the end.
func TestConsoleAgainstRealIMS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the paging test against a real imsd (full tier)")
	}
	t.Parallel()
	ims := cluster.StartIMS(t, cluster.Options{})
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "acme")
	ra := cluster.EnrollRaw(t, ims.URL(), tok)
	ra.Connect(t, 1)
	cfg, _ := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "run", "script": "true"}}})
	if _, err := c.EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "action", Operation: "apply", Config: cfg})); err != nil {
		t.Fatal(err)
	}
	as := ra.Assignment(t)
	ra.Answer(t, ra.Send(t, cluster.Ack(as.JobId, as.FencingToken)))
	for from := 1; from <= 3000; from += 500 {
		logs := &agentv1.JobLogs{JobId: as.JobId, FencingToken: as.FencingToken}
		for i := from; i < from+500; i++ {
			logs.Lines = append(logs.Lines, &agentv1.LogLine{Seq: int64(i), Time: timestamppb.Now(), Stream: 1, Text: fmt.Sprintf("line %04d", i)})
		}
		ra.Answer(t, ra.Send(t, &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: logs}}))
	}

	client := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))
	m, err := New(context.Background(), Options{Conn: &Conn{Server: ims.URL(), Client: client}, LogLines: 1500})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, m)
	r.wait("the fleet", "acme", "online")
	r.keys("enter")
	r.wait("the install's job", as.JobId, "running")
	r.keys("enter")
	r.wait("the log's end", "line 3000", "1500 lines")
	lv := m.top().(*logView)
	// Scroll back past the first line held: pages of 750 come from imsd,
	// and the newest lines leave memory.
	for i := 0; i < 100 && lv.r.At(0).seq >= 1501; i++ {
		r.keys("pgup")
		r.settle()
	}
	if !lv.tailGap || lv.r.Len() != 1500 || lv.r.At(0).seq != 751 {
		t.Fatalf("after a page back past the bound: tailGap %v, %d lines held from %d", lv.tailGap, lv.r.Len(), lv.r.At(0).seq)
	}
	r.keys("g") // the log's real start
	r.wait("the log's first line", "line 0001")
	// Read forward to the end, page by page, then follow from there.
	for i := 0; i < 400 && lv.tailGap; i++ {
		r.keys("pgdown")
		r.settle()
	}
	if lv.tailGap || !lv.streamOn || lv.r.At(lv.r.Len()-1).seq != 3000 {
		t.Fatalf("reading forward never reached the end: tailGap %v, stream %v", lv.tailGap, lv.streamOn)
	}
	r.keys("G")
	r.wait("the end again", "line 3000", "following")
	// A line written now arrives by the resumed follow stream.
	ra.Answer(t, ra.Send(t, cluster.Logs1(as.JobId, as.FencingToken, 3001, "the newest line")))
	r.wait("the newest line", "the newest line")
}

// TestProgramOpensAndQuits runs the whole Bubble Tea program (teatest)
// against a real imsd: the fleet reaches the screen, and :q quits.
func TestProgramOpensAndQuits(t *testing.T) {
	t.Parallel()
	ims := cluster.StartIMS(t, cluster.Options{})
	cluster.NewInstall(t, ims.Admin(), "shop", "initrode")
	client := imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(), connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))
	m, err := New(context.Background(), Options{Conn: &Conn{Server: ims.URL(), Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(80, 20))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("initrode")) },
		teatest.WithDuration(15*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	for _, msg := range keyMsgs(":q") {
		tm.Send(msg)
	}
	tm.Send(tea.KeyPressMsg(named["enter"]))
	tm.WaitFinished(t, teatest.WithFinalTimeout(10*time.Second))
	fm := tm.FinalModel(t).(*Model)
	if !fm.fleet.loaded || len(fm.fleet.byID) != 1 {
		t.Fatalf("final model holds %d installs (loaded %v), want initrode", len(fm.fleet.byID), fm.fleet.loaded)
	}
}

// runner is a minimal Bubble Tea event loop for tests: Update and Render
// run on the test's goroutine, commands in goroutines, as in the real
// program, so screens can be checked without racing the model.
type runner struct {
	t    *testing.T
	m    *Model
	msgs chan tea.Msg
}

func newRunner(t *testing.T, m *Model) *runner {
	r := &runner{t: t, m: m, msgs: make(chan tea.Msg, 1024)}
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	r.exec(m.Init())
	return r
}

func (r *runner) exec(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		if msg := cmd(); msg != nil {
			r.msgs <- msg
		}
	}()
}

func (r *runner) handle(msg tea.Msg) {
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, c := range b {
			r.exec(c)
		}
		return
	}
	_, cmd := r.m.Update(msg)
	r.exec(cmd)
}

func (r *runner) keys(ks ...string) {
	for _, k := range ks {
		for _, msg := range keyMsgs(k) {
			r.handle(msg)
		}
	}
}

// settle handles the messages that arrive within a short while.
func (r *runner) settle() {
	t := time.NewTimer(30 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case msg := <-r.msgs:
			r.handle(msg)
		case <-t.C:
			return
		}
	}
}

// wait handles messages until the screen holds every one of texts.
func (r *runner) wait(what string, texts ...string) {
	r.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		s := screen(r.m)
		ok := true
		for _, x := range texts {
			ok = ok && bytes.Contains([]byte(s), []byte(x))
		}
		if ok {
			return
		}
		select {
		case msg := <-r.msgs:
			r.handle(msg)
		case <-deadline:
			if lv, ok := r.m.top().(*logView); ok {
				r.t.Logf("log view: top %d sub %d held %d first %+v fetching %v noOlder %v tailGap %v err %v", lv.top, lv.sub, lv.r.Len(), *lv.r.At(0), lv.fetching, lv.noOlder, lv.tailGap, lv.err)
			}
			r.t.Fatalf("never saw %s; screen:\n%s", what, s)
		}
	}
}
