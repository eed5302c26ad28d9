package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// tamperProxy stands between real agentd processes and the real imsd, as
// a man in the middle would (a proxy, a load balancer or a TLS terminator
// in front of imsd): it relays every message of the agent protocol, and
// on command alters, drops, holds, reorders, replays or copies imsd's
// messages to another agent, forges messages of its own, and answers a
// channel hello with an earlier stream's answer. It sees what such a
// party sees: the challenge, the agent id of each channel hello, and
// sealed bytes.
type tamperProxy struct {
	agentv1connect.UnimplementedAgentServiceHandler
	up  agentv1connect.AgentServiceClient
	url string

	mu sync.Mutex
	// down, when set, returns what to send agent in place of m, a sealed
	// message imsd sent it (nothing drops it). It runs on the stream's
	// goroutine.
	down func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse
	// accept, when set, returns what to send agent in place of imsd's
	// answer to its channel hello.
	accept func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse
	// streams holds each agent's current stream.
	streams map[string]*proxiedStream
	// history holds, by agent, every stream's messages from imsd.
	history map[string][][]*agentv1.ConnectResponse
	// wire is every message relayed, either way, marshalled.
	wire bytes.Buffer
}

type proxiedStream struct {
	inject chan *agentv1.ConnectResponse
	cancel context.CancelFunc
}

func startTamperProxy(t *testing.T, imsURL string) *tamperProxy {
	t.Helper()
	p := &tamperProxy{
		up:      agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), imsURL),
		streams: map[string]*proxiedStream{}, history: map[string][][]*agentv1.ConnectResponse{},
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(p))
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	protos.SetHTTP1(true)
	srv := &http.Server{Handler: mux, Protocols: protos}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + ln.Addr().String()
	return p
}

func (p *tamperProxy) Enroll(ctx context.Context, req *connect.Request[agentv1.EnrollRequest]) (*connect.Response[agentv1.EnrollResponse], error) {
	r, err := p.up.Enroll(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(r.Msg), nil
}

func (p *tamperProxy) see(m proto.Message) {
	b, _ := proto.Marshal(m)
	p.mu.Lock()
	p.wire.Write(b)
	p.mu.Unlock()
}

func (p *tamperProxy) Connect(ctx context.Context, st *connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := p.up.Connect(ctx)
	defer up.CloseRequest()
	if err := up.Send(nil); err != nil {
		return err
	}
	// Up: the agent's messages as they are; the agent id of its channel
	// hello names the stream.
	hello := make(chan string, 1)
	go func() {
		defer cancel()
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			p.see(m)
			if h := m.GetChannelHello(); h != nil {
				select {
				case hello <- h.AgentId:
				default:
				}
			}
			if up.Send(m) != nil {
				return
			}
		}
	}()
	downs := make(chan *agentv1.ConnectResponse)
	go func() {
		defer cancel()
		for {
			m, err := up.Receive()
			if err != nil {
				return
			}
			select {
			case downs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	agentID := ""
	ps := &proxiedStream{inject: make(chan *agentv1.ConnectResponse, 10), cancel: cancel}
	var history []*agentv1.ConnectResponse
	defer func() {
		if agentID != "" {
			p.mu.Lock()
			p.history[agentID] = append(p.history[agentID], history)
			if p.streams[agentID] == ps {
				delete(p.streams, agentID)
			}
			p.mu.Unlock()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ps.inject:
			if err := st.Send(m); err != nil {
				return err
			}
		case m := <-downs:
			p.see(m)
			if m.GetChallenge() == nil && agentID == "" {
				select {
				case agentID = <-hello:
				case <-ctx.Done():
					return nil
				}
				p.mu.Lock()
				p.streams[agentID] = ps
				p.mu.Unlock()
			}
			history = append(history, m)
			p.mu.Lock()
			hook := p.down
			if m.GetChannelAccept() != nil {
				hook = p.accept
			} else if m.GetSealed() == nil {
				hook = nil
			}
			p.mu.Unlock()
			out := []*agentv1.ConnectResponse{m}
			if hook != nil {
				out = hook(agentID, m)
			}
			for _, o := range out {
				if err := st.Send(o); err != nil {
					return err
				}
			}
		}
	}
}

func (p *tamperProxy) setDown(f func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse) {
	p.mu.Lock()
	p.down = f
	p.mu.Unlock()
}

// once makes a down hook that tampers with the first sealed message for
// any agent (through f) and passes everything else; the agent it hit is
// sent on the returned channel.
func (p *tamperProxy) once(f func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse) <-chan string {
	hit := make(chan string, 1)
	done := false
	p.setDown(func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
		if done {
			return []*agentv1.ConnectResponse{m}
		}
		done = true
		hit <- agent
		return f(agent, m)
	})
	return hit
}

// injectInto sends m to agent on its current stream, waiting for the
// agent to have one (it may be reconnecting).
func (p *tamperProxy) injectInto(t *testing.T, agentID string, m *agentv1.ConnectResponse) {
	t.Helper()
	cluster.Eventually(t, 20*time.Second, "a stream of agent "+agentID+" through the proxy", func() bool {
		p.mu.Lock()
		ps := p.streams[agentID]
		p.mu.Unlock()
		if ps == nil {
			return false
		}
		select {
		case ps.inject <- m:
			return true
		default:
			return false
		}
	})
}

// kick ends agent's current stream (it reconnects).
func (p *tamperProxy) kick(agentID string) {
	p.mu.Lock()
	ps := p.streams[agentID]
	p.mu.Unlock()
	if ps != nil {
		ps.cancel()
	}
}

func (p *tamperProxy) agentIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id := range p.streams {
		ids = append(ids, id)
	}
	return ids
}

// refusedLine is the ERROR line of an agent whose stream carried a
// message that was not imsd's.
const refusedLine = `level=ERROR msg="the stream to imsd carried a message that is not imsd's`

// channelRefusals counts an agent's refusals for reason so far.
func channelRefusals(p *cluster.AgentProc, reason string) int {
	n := 0
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, refusedLine) && strings.Contains(l, reason) {
			n++
		}
	}
	return n
}

// Tamper probes with real processes, through a man in the middle between
// two agents of one install and imsd. It reads nothing of a job; every
// message it alters, copies to the other agent, forges, replays or
// reorders, and an earlier stream's answer to a channel hello (a
// replayed welcome), ends the stream at the agent with an ERROR line
// saying so; the agent reconnects, and every job runs exactly once.
func TestTamperProbes(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	px := startTamperProxy(t, ims.URL())
	c := ims.Admin()
	_, tokA := cluster.NewInstall(t, c, "shop", "acme")
	procs := map[string]*cluster.AgentProc{}
	procA := cluster.StartAgent(t, px.url, tokA, filepath.Join(t.TempDir(), "a"))
	waitConnected(t, ims, "acme")
	tokB, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	procB := cluster.StartAgent(t, px.url, tokB.Msg.EnrollmentToken.Token, filepath.Join(t.TempDir(), "b"))
	cluster.Eventually(t, 30*time.Second, "both agents connected through the proxy", func() bool { return len(px.agentIDs()) == 2 })
	for _, p := range []*cluster.AgentProc{procA, procB} {
		cluster.Eventually(t, 10*time.Second, "the agent's id in its log", func() bool {
			for _, id := range px.agentIDs() {
				if strings.Contains(p.Output(), "agent="+id) {
					procs[id] = p
					return true
				}
			}
			return false
		})
	}
	other := func(id string) string {
		for o := range procs {
			if o != id {
				return o
			}
		}
		return ""
	}
	// runsOnce runs a job and checks it succeeded with its script run once.
	runsOnce := func(t *testing.T, marker string) {
		t.Helper()
		job := enqueue(t, c, "acme", `echo "`+marker+`"`, 60)
		lines, end := follow(t, c, job.Id)
		if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job ended %v (%s)", end.State, end.Error)
		}
		runs := 0
		for _, l := range lines {
			if l.Text == marker {
				runs++
			}
		}
		if runs != 1 {
			t.Fatalf("the script ran %d times (logs %v), want once", runs, lines)
		}
	}
	// wantRefusal waits for agent's next refusal for reason.
	wantRefusal := func(t *testing.T, id string, before int, reason string) {
		t.Helper()
		cluster.Eventually(t, 20*time.Second, "agent "+id+"'s refusal ("+reason+")", func() bool {
			return channelRefusals(procs[id], reason) > before
		})
	}
	counts := func(reason string) map[string]int {
		m := map[string]int{}
		for id, p := range procs {
			m[id] = channelRefusals(p, reason)
		}
		return m
	}
	const notOpen = "does not open"

	t.Run("reads nothing", func(t *testing.T) {
		marker := "config-and-output-marker-7f3a9c"
		runsOnce(t, marker)
		px.mu.Lock()
		seen := bytes.Contains(px.wire.Bytes(), []byte(marker))
		px.mu.Unlock()
		if seen {
			t.Fatal("the proxy read a job's config or output")
		}
	})
	t.Run("altered in flight", func(t *testing.T) {
		before := counts(notOpen)
		hit := px.once(func(_ string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
			b := bytes.Clone(m.GetSealed())
			b[len(b)/2] ^= 1
			return []*agentv1.ConnectResponse{{Msg: &agentv1.ConnectResponse_Sealed{Sealed: b}}}
		})
		defer px.setDown(nil)
		runsOnce(t, "altered")
		id := <-hit
		wantRefusal(t, id, before[id], notOpen)
	})
	t.Run("copied to the other agent of the install", func(t *testing.T) {
		before := counts(notOpen)
		copied := make(chan *agentv1.ConnectResponse, 1)
		hit := px.once(func(id string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
			copied <- proto.CloneOf(m)
			return []*agentv1.ConnectResponse{m}
		})
		defer px.setDown(nil)
		runsOnce(t, "copied")
		id := other(<-hit)
		px.injectInto(t, id, <-copied)
		wantRefusal(t, id, before[id], notOpen)
	})
	t.Run("forged answers", func(t *testing.T) {
		// A renewal of a lease and an answer to a write, forged: refused
		// before they are read.
		const clear = "in the clear"
		before := counts(clear)
		a, b := other(""), ""
		b = other(a)
		px.injectInto(t, a, &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Renewed{Renewed: &agentv1.LeasesRenewed{HeartbeatSeq: 1, JobIds: []string{"job_x"}}}})
		px.injectInto(t, b, &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: 1}}})
		wantRefusal(t, a, before[a], clear)
		wantRefusal(t, b, before[b], clear)
		runsOnce(t, "after forged answers")
	})
	t.Run("replayed", func(t *testing.T) {
		before := counts(notOpen)
		hit := px.once(func(_ string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
			return []*agentv1.ConnectResponse{m, m}
		})
		defer px.setDown(nil)
		runsOnce(t, "replayed")
		id := <-hit
		wantRefusal(t, id, before[id], notOpen)
	})
	t.Run("reordered", func(t *testing.T) {
		// The second message to the target agent is held and sent after
		// the third. The proxy sees only sealed messages, so the target
		// is the first agent it sends to after arming; that may be an
		// agent that then gets nothing more (an idle agent is sent
		// nothing, and the job may run on the other one), so each time
		// another job is run the proxy lets go of what it held (still in
		// order) and takes the next agent it sends to as the target.
		before := counts(notOpen)
		var mu sync.Mutex
		var held *agentv1.ConnectResponse
		target, n := "", 0
		hit := make(chan string, 1)
		px.setDown(func(id string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
			mu.Lock()
			defer mu.Unlock()
			if target == "" {
				target = id
			}
			if id != target || n > 2 {
				return []*agentv1.ConnectResponse{m}
			}
			n++
			switch n {
			case 2:
				held = m
				return nil
			case 3:
				hit <- id
				h := held
				held = nil
				return []*agentv1.ConnectResponse{m, h}
			}
			return []*agentv1.ConnectResponse{m}
		})
		defer px.setDown(nil)
		retarget := func() {
			mu.Lock()
			if n > 2 {
				mu.Unlock()
				return
			}
			h, to := held, target
			held, target, n = nil, "", 0
			mu.Unlock()
			// Outside the lock: the proxy's stream goroutine, which
			// takes what is injected, may be waiting for it.
			if h != nil {
				px.injectInto(t, to, h)
			}
		}
		runsOnce(t, "reordered")
		id := ""
		for i := 0; id == ""; i++ {
			select {
			case id = <-hit:
			case <-time.After(3 * time.Second):
				if i == 19 {
					t.Fatal("the proxy never held a message of a target agent after twenty jobs")
				}
				retarget()
				runsOnce(t, fmt.Sprintf("reordered-%d", i))
			}
		}
		wantRefusal(t, id, before[id], notOpen)
		runsOnce(t, "after reordered")
	})
	t.Run("replayed welcome", func(t *testing.T) {
		// An agent reconnects; the proxy answers its channel hello with
		// imsd's answer and the sealed welcome of its previous stream.
		const reason = "answer to the handshake does not verify"
		id := ""
		var streams [][]*agentv1.ConnectResponse
		px.mu.Lock()
		for a, h := range px.history {
			if len(h) > 0 {
				id, streams = a, h
			}
		}
		px.mu.Unlock()
		if id == "" {
			t.Fatal("no earlier stream of an agent recorded")
		}
		before := channelRefusals(procs[id], reason)
		old := streams[len(streams)-1]
		var replay []*agentv1.ConnectResponse
		for _, m := range old {
			if m.GetChallenge() == nil {
				replay = append(replay, m)
			}
		}
		var once sync.Once
		px.mu.Lock()
		px.accept = func(agent string, m *agentv1.ConnectResponse) []*agentv1.ConnectResponse {
			out := []*agentv1.ConnectResponse{m}
			if agent == id {
				once.Do(func() { out = replay })
			}
			return out
		}
		px.mu.Unlock()
		defer func() { px.mu.Lock(); px.accept = nil; px.mu.Unlock() }()
		px.kick(id)
		wantRefusal(t, id, before, reason)
		runsOnce(t, "after a replayed welcome")
	})
	if t.Failed() {
		for id, p := range procs {
			t.Logf("agent %s:\n%s", id, p.Output())
		}
	}
}
