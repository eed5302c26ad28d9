package fault

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Lease timing of every world: short, so that schedules run in seconds.
const (
	lease     = 4 * time.Second
	heartbeat = time.Second
)

// ---- recorder ----

// recorder is where jobs write their start, beats and end: an HTTP
// server on loopback that stamps each record with its own wall clock as
// it arrives and appends it to a file. A record arrives while the curl
// that sent it, a process of the attempt, is alive, so an attempt ran at
// least from its first record to its last.
type recorder struct {
	srv  *http.Server
	url  string
	path string
	mu   sync.Mutex
	f    *os.File
}

type record struct {
	at      time.Time
	kind    string
	job     string
	attempt int
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "records.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{url: "http://" + ln.Addr().String() + "/r", path: path, f: f}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		now := time.Now().UnixNano()
		r.mu.Lock()
		fmt.Fprintf(r.f, "%d %s %s %s\n", now, q.Get("kind"), q.Get("job"), q.Get("attempt"))
		r.mu.Unlock()
	})}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close(); f.Close() })
	return r
}

// records reads the file back.
func (r *recorder) records(t *testing.T) []record {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Open(r.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) != 4 {
			t.Fatalf("record %q: want 4 fields", sc.Text())
		}
		ns, _ := strconv.ParseInt(p[0], 10, 64)
		att, err := strconv.Atoi(p[3])
		if err != nil {
			t.Fatalf("record %q: attempt: %v", sc.Text(), err)
		}
		out = append(out, record{at: time.Unix(0, ns), kind: p[1], job: p[2], attempt: att})
	}
	return out
}

// script is a job of beats×200ms that reports to the recorder.
func (r *recorder) script(beats int) string {
	return fmt.Sprintf(`u="%s?job=$BYOC_JOB_ID&attempt=$BYOC_ATTEMPT"
rec() { curl -fsS -m 2 "$u&kind=$1" >/dev/null 2>&1 || true; }
rec start
echo "start attempt=$BYOC_ATTEMPT"
i=0
while [ $i -lt %d ]; do sleep 0.2; rec beat; i=$((i+1)); done
rec end
echo "done attempt=$BYOC_ATTEMPT"`, r.url, beats)
}

// ---- imsd as a process ----

// startIMSD runs imsd as a process (cluster.IMSProcess) with the
// harness's lease timing, its log in a file shown when the test fails.
func startIMSD(t *testing.T, databaseURL string) *cluster.IMSProcess {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "imsd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("imsd output (last 200 lines):\n%s", tail(string(b), 200))
		}
		out.Close()
	})
	args := []string{"--lease", lease.String(), "--heartbeat", heartbeat.String(), "--log-level", "debug"}
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	return cluster.StartIMSProcess(t, out, args...)
}

// ---- a TCP proxy that can cut the network ----

type netMode int

const (
	netPass      netMode = iota
	netBlackhole         // connections stay open; nothing gets through
	netDrop              // connections are closed; new ones are closed at once
	// netHostile relays, but alters what imsd sends the agent: a bit of
	// the last byte of every read is flipped, as a tampering proxy would
	// alter a message. The agent's channel refuses it (or HTTP/2 does,
	// where the byte is framing), the stream ends, and the agent
	// reconnects into the same proxy until the fault ends.
	netHostile
)

// proxy stands between an agent and imsd.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   netMode
	conns  map[net.Conn]struct{}
	// altered counts the reads from imsd a hostile proxy altered: none
	// when imsd sent the agent nothing while the fault lasted (an idle
	// agent's heartbeats get no answer).
	altered atomic.Int64
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == netDrop {
			c.Close()
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(s, c, false)
		go p.pipe(c, s, true)
	}
}

// pipe copies src to dst; down is imsd's side to the agent's.
func (p *proxy) pipe(dst, src net.Conn, down bool) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if n > 0 && mode == netHostile && down {
			buf[n-1] ^= 0x20
			p.altered.Add(1)
		}
		if n > 0 && (mode == netPass || mode == netHostile) {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// retarget sends new connections to target and closes the open ones.
func (p *proxy) retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.closeAll()
}

func (p *proxy) set(m netMode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
	if m == netDrop {
		p.closeAll()
	}
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// ---- the world: imsd, agents, jobs ----

type agentSlot struct {
	name     string
	stateDir string
	proxy    *proxy
	proc     *cluster.AgentProc
}

type world struct {
	t   *testing.T
	rec *recorder
	ims *cluster.IMSProcess
	// replicas, when set, are the imsd replicas of a replica world
	// (newReplicaWorld; ims is the first), each reaching PostgreSQL
	// through its own proxy (dbPaths), behind one balancer (lb).
	replicas []*cluster.IMSProcess
	dbPaths  []*proxy
	lb       *cluster.Balancer
	c        imsv1connect.OperatorServiceClient
	install  string
	agents   []*agentSlot
	jobs     []string
	events   []string // what the schedule did, for the failure message
	start    time.Time
}

// agentFlags are the agents' flags: the jobs' steps report to the
// recorder on this machine's loopback, which the plugin sandbox's network
// (the egress proxy, agentd's default) reaches only where the agent says
// so. BYOC_FAULT_SANDBOX_NETWORK=host runs them on the machine's network
// instead (--sandbox-network host), to tell a fault of the proxy from
// one of the spine.
func (w *world) agentFlags() []string {
	if os.Getenv("BYOC_FAULT_SANDBOX_NETWORK") == "host" {
		return []string{"--capacity", "4", "--sandbox-network", "host"}
	}
	return []string{"--capacity", "4", "--insecure-sandbox-egress-allow", strings.TrimSuffix(strings.TrimPrefix(w.rec.url, "http://"), "/r")}
}

// newWorld starts imsd (SQLite, or PostgreSQL when pg) and n agents of
// one install, each behind its own proxy.
func newWorld(t *testing.T, databaseURL string, agents int) *world {
	t.Helper()
	w := &world{t: t, rec: startRecorder(t), ims: startIMSD(t, databaseURL), install: "acme", start: time.Now()}
	w.c = w.ims.Client()
	w.addAgents(w.ims.Addr, agents)
	return w
}

// addAgents creates the install and starts n agents of it, each behind
// its own proxy to target (imsd, or the replicas' balancer), and waits
// until they are connected.
func (w *world) addAgents(target string, agents int) {
	t := w.t
	t.Helper()
	_, token := cluster.NewInstall(t, w.c, "shop", w.install)
	for i := 0; i < agents; i++ {
		if i > 0 {
			r, err := w.c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: w.install}))
			if err != nil {
				t.Fatalf("enrolment token: %v", err)
			}
			token = r.Msg.EnrollmentToken.Token
		}
		a := &agentSlot{name: fmt.Sprintf("agent%d", i+1), stateDir: filepath.Join(t.TempDir(), "agent"), proxy: startProxy(t, target)}
		a.proc = cluster.StartAgent(t, a.proxy.url(), token, a.stateDir, w.agentFlags()...)
		w.agents = append(w.agents, a)
	}
	w.waitAgents()
}

func (w *world) logf(format string, args ...any) {
	line := fmt.Sprintf("%6.2fs ", time.Since(w.start).Seconds()) + fmt.Sprintf(format, args...)
	w.events = append(w.events, line)
	w.t.Log(line)
}

// waitAgents waits until every agent has a stream.
func (w *world) waitAgents() {
	w.t.Helper()
	cluster.Eventually(w.t, 30*time.Second, "agents to connect", func() bool {
		r, err := w.c.GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: w.install}))
		return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected
	})
}

// enqueue queues one job of beats×200ms; an enqueue refused because imsd
// is down is retried until it is accepted.
func (w *world) enqueue(beats int) {
	w.t.Helper()
	w.enqueueScript(fmt.Sprintf("%d beats", beats), w.rec.script(beats))
}

// enqueueScript queues one job running script (described as what),
// retried as enqueue is.
func (w *world) enqueueScript(what, script string) {
	w.t.Helper()
	cfg, err := structpb.NewStruct(map[string]any{
		"steps":   []any{map[string]any{"name": "run", "script": script}},
		"sandbox": map[string]any{"network": true},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := w.c.EnqueueJob(ctx, connect.NewRequest(&imsv1.EnqueueJobRequest{
			Install: w.install, ComponentType: "action", Operation: "apply", Config: cfg,
			TimeoutSeconds: 120, MaxAttempts: 10,
		}))
		cancel()
		if err == nil {
			w.jobs = append(w.jobs, r.Msg.Job.Id)
			w.logf("enqueued %s (%s)", r.Msg.Job.Id, what)
			return
		}
		if code := connect.CodeOf(err); time.Now().After(deadline) || code != connect.CodeUnavailable && code != connect.CodeUnknown && code != connect.CodeDeadlineExceeded {
			w.t.Fatalf("enqueue: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---- faults ----

func (w *world) killIMS(down time.Duration) {
	w.logf("kill -9 imsd; down for %s", down)
	w.ims.Kill()
	time.Sleep(down)
	w.ims.Start()
	w.logf("imsd restarted")
}

func (w *world) stopAgent(a *agentSlot, d time.Duration) {
	w.logf("SIGSTOP %s for %s", a.name, d)
	syscall.Kill(a.proc.Cmd.Process.Pid, syscall.SIGSTOP)
	time.Sleep(d)
	syscall.Kill(a.proc.Cmd.Process.Pid, syscall.SIGCONT)
	w.logf("SIGCONT %s", a.name)
}

func (w *world) killAgent(a *agentSlot, down time.Duration) {
	w.logf("kill -9 %s; down for %s", a.name, down)
	a.proc.Kill()
	time.Sleep(down)
	a.proc = cluster.StartAgent(w.t, a.proxy.url(), "", a.stateDir, w.agentFlags()...)
	w.logf("%s restarted", a.name)
}

func (w *world) cut(a *agentSlot, m netMode, d time.Duration) {
	what := map[netMode]string{netBlackhole: "blackhole", netDrop: "drop", netHostile: "hostile proxy"}[m]
	w.logf("network of %s: %s for %s", a.name, what, d)
	a.proxy.set(m)
	time.Sleep(d)
	a.proxy.set(netPass)
	w.logf("network of %s restored", a.name)
}

// ---- the checker ----

// check waits for every job to end and asserts the promises: no two
// attempts of one job overlapped, every accepted job finished exactly
// once in imsd's record with the result of an attempt that really ran to
// its end, and no attempt imsd does not know ran.
func (w *world) check() {
	t := w.t
	t.Helper()
	for _, id := range w.jobs {
		cluster.WaitJob(t, w.c, id, 3*time.Minute, imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED,
			imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_TIMED_OUT)
	}
	// Let any straggler report, so that a late attempt is seen.
	time.Sleep(2 * time.Second)
	recs := w.rec.records(t)
	type span struct {
		first, last time.Time
		ended       bool
	}
	spans := map[string]map[int]*span{}
	for _, r := range recs {
		if spans[r.job] == nil {
			spans[r.job] = map[int]*span{}
		}
		s := spans[r.job][r.attempt]
		if s == nil {
			s = &span{first: r.at, last: r.at}
			spans[r.job][r.attempt] = s
		}
		if r.at.Before(s.first) {
			s.first = r.at
		}
		if r.at.After(s.last) {
			s.last = r.at
		}
		if r.kind == "end" {
			s.ended = true
		}
	}
	var problems []string
	known := map[string]bool{}
	for _, id := range w.jobs {
		known[id] = true
		r, err := w.c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		if err != nil {
			problems = append(problems, fmt.Sprintf("job %s: lost: %v", id, err))
			continue
		}
		j := r.Msg.Job
		if j.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			problems = append(problems, fmt.Sprintf("job %s ended %v: %s", id, j.State, j.Error))
		}
		atts := spans[id]
		var order []int
		for a := range atts {
			order = append(order, a)
			if a > int(j.Attempt) {
				problems = append(problems, fmt.Sprintf("job %s: attempt %d ran, but imsd's last attempt is %d", id, a, j.Attempt))
			}
		}
		sort.Slice(order, func(i, k int) bool { return atts[order[i]].first.Before(atts[order[k]].first) })
		for i := 1; i < len(order); i++ {
			prev, cur := atts[order[i-1]], atts[order[i]]
			if !cur.first.After(prev.last) {
				problems = append(problems, fmt.Sprintf("job %s: attempts %d and %d ran at once: %d from %s to %s, %d from %s",
					id, order[i-1], order[i], order[i-1], w.at(prev.first), w.at(prev.last), order[i], w.at(cur.first)))
			}
		}
		if j.State == imsv1.JobState_JOB_STATE_SUCCEEDED {
			if s := atts[int(j.Attempt)]; s == nil || !s.ended {
				problems = append(problems, fmt.Sprintf("job %s: imsd recorded attempt %d as succeeded, but that attempt never reached its end", id, j.Attempt))
			}
			done := false
			for _, l := range cluster.Logs(t, w.c, id) {
				if l.Attempt == j.Attempt && l.Text == fmt.Sprintf("done attempt=%d", j.Attempt) {
					done = true
				}
			}
			if !done {
				problems = append(problems, fmt.Sprintf("job %s: the log has no output from its final attempt %d", id, j.Attempt))
			}
		}
	}
	for id := range spans {
		if !known[id] {
			problems = append(problems, fmt.Sprintf("job %s ran but was never accepted", id))
		}
	}
	if len(problems) > 0 {
		t.Errorf("the schedule broke the promises:\n  %s\nschedule:\n  %s", strings.Join(problems, "\n  "), strings.Join(w.events, "\n  "))
		for _, a := range w.agents {
			t.Logf("%s output (last 150 lines):\n%s", a.name, tail(a.proc.Output(), 150))
		}
	}
}

func (w *world) at(t time.Time) string { return fmt.Sprintf("%.2fs", t.Sub(w.start).Seconds()) }

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// jobAgent is the agent imsd last gave job id to.
func (w *world) jobAgent(id string) string {
	r, err := w.c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
	if err != nil {
		return ""
	}
	return r.Msg.Job.AgentId
}
