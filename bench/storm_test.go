package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// BenchmarkReconnectStorm connects 10,000 agents (BYOC_BENCH_AGENTS),
// kills imsd (SIGKILL, as a crash) and starts it again two seconds
// later, while every agent reconnects as agentd does: jittered
// exponential backoff from 100ms to 30s, and imsd's retry hint when its
// admission control sheds a hello. It prints how long until every agent
// had a welcome again, imsd's peak CPU and RSS during the storm, the
// hello rate it sustained, and how many hellos it shed; and checks that
// no agent gave up and that 500 jobs enqueued during the storm all
// finish. Target: all back within 30s on two cores.
func BenchmarkReconnectStorm(b *testing.B) {
	n := stormAgents()
	for range b.N {
		p := stormIMS(b, "")
		agents := fleet(b, p, n, func(string, time.Time) {})
		storm(b, "SQLite", []*imsProc{p}, agents)
	}
}

// BenchmarkReconnectStormReplicas is BenchmarkReconnectStorm on a
// PostgreSQL replica pair: two imsd processes on one PostgreSQL behind a
// layer-4 balancer (as a vendor runs them), the agents spread across
// both by the balancer, both replicas killed at once and started again
// two seconds later. CPU and RSS are the two replicas' together; the
// PostgreSQL backends' are not counted.
//
// The balancer is BYOC_BENCH_BALANCERS processes (2) sharing one port
// with SO_REUSEPORT (cluster.StartBalancerProcesses): a relayed agent
// holds two of a balancer's descriptors, and this container caps a
// process at 20,000, so 10,000 agents need two. 0 runs the balancer in
// this process (cluster.StartBalancer), as before 2026-11-28.
func BenchmarkReconnectStormReplicas(b *testing.B) {
	n := stormAgents()
	nb := 2
	if v, err := strconv.Atoi(os.Getenv("BYOC_BENCH_BALANCERS")); err == nil && v >= 0 {
		nb = v
	}
	for range b.N {
		dsn := pgtest.Start(b)
		var dsns []string
		for i := range 2 {
			dsns = append(dsns, cluster.WithApplicationName(b, dsn, fmt.Sprintf("imsd-%d", i+1)))
		}
		ps := cluster.StartReplicas(b, dsns, func(int) io.Writer { return os.Stderr }, stormArgs("")...)
		p1, p2 := &imsProc{IMSProcess: ps[0], url: ps[0].URL()}, &imsProc{IMSProcess: ps[1], url: ps[1].URL()}
		var lb stormBalancer
		watch := []watched{postgresWatched(b, dsn)}
		if nb == 0 {
			lb = cluster.StartBalancer(b, p1.Addr, p2.Addr)
		} else {
			g := cluster.StartBalancerProcesses(b, nb, p1.Addr, p2.Addr)
			lb = g
			for i, pid := range g.PIDs() {
				watch = append(watch, watched{label: fmt.Sprintf("balancer %d", i+1), pid: func() int { return pid }})
			}
		}
		// Installs are made through one replica; the agents name the
		// balancer, as agentd --ims does.
		agents := fleet(b, &imsProc{IMSProcess: p1.IMSProcess, url: lb.URL()}, n, func(string, time.Time) {})
		fmt.Printf("agents per replica before the storm: %v; %s\n", lb.Active(), balancerReport(lb))
		storm(b, "PostgreSQL replica pair", []*imsProc{p1, p2}, agents, watch...)
		fmt.Printf("balancers after the storm: %s\n", balancerReport(lb))
	}
}

// stormBalancer is the balancer in front of the replica pair: one in
// this process or several processes sharing a port.
type stormBalancer interface {
	URL() string
	Active() []int
}

// balancerReport says how the balancer's accepts went, per process.
func balancerReport(lb stormBalancer) string {
	switch lb := lb.(type) {
	case *cluster.Balancer:
		n, err := lb.AcceptErrors()
		return fmt.Sprintf("the balancer marked the replicas unhealthy %v times; its accepts failed %d times (last: %v)", lb.Downs(), n, err)
	case *cluster.BalancerGroup:
		st, err := lb.Stats()
		if err != nil {
			return fmt.Sprintf("balancer stats: %v", err)
		}
		var parts []string
		for i, s := range st {
			parts = append(parts, fmt.Sprintf("balancer %d: routed %v, active %v, marked unhealthy %v times, failed accepts %d %s", i+1, s.Routed, s.Active, s.Downs, s.AcceptErrors, s.LastAcceptError))
		}
		return strings.Join(parts, "; ")
	}
	return ""
}

// stormAgents is the storm's fleet size: BYOC_BENCH_AGENTS, or 10,000.
func stormAgents() int {
	if v, err := strconv.Atoi(os.Getenv("BYOC_BENCH_AGENTS")); err == nil {
		return v
	}
	return 10000
}

// stormIMS is startIMS with stormArgs.
func stormIMS(b *testing.B, databaseURL string) *imsProc {
	b.Helper()
	p := cluster.StartIMSProcess(b, os.Stderr, stormArgs(databaseURL)...)
	return &imsProc{IMSProcess: p, url: p.URL()}
}

// stormArgs are the storm's imsd flags: a long heartbeat and lease (the
// bench agents send no heartbeats), BYOC_BENCH_MAX_HELLOS as
// --max-hellos and BYOC_BENCH_PPROF as --debug-addr when set (one
// process only: a replica pair would share the address).
func stormArgs(databaseURL string) []string {
	args := []string{"--log-level", "warn", "--heartbeat", "30s", "--lease", "60s"}
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	if v := os.Getenv("BYOC_BENCH_MAX_HELLOS"); v != "" {
		args = append(args, "--max-hellos", v)
	}
	if v := os.Getenv("BYOC_BENCH_PPROF"); v != "" && databaseURL == "" {
		args = append(args, "--debug-addr", v) // profile imsd during the storm
	}
	return args
}

// stormStats are what the agents of a storm saw.
type stormStats struct {
	welcomed, shed, failed, gaveUp atomic.Int64
	mu                             sync.Mutex
	welcomes                       []time.Time
	lastErr                        atomic.Value   // string: the last failed try's error, for a failure's message
	kinds                          map[string]int // failed tries by kind (failKind), under mu
}

// failKind is a failed try's error without its addresses and numbers,
// to count failures by kind.
func failKind(err error) string {
	if err == nil {
		return "stream ended"
	}
	m := err.Error()
	if i := strings.LastIndex(m, ": "); i >= 0 {
		m = m[i+2:]
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, m)
}

// listenOverflows is the kernel's count of connections dropped because a
// listener's accept queue was full (TcpExt ListenOverflows; this network
// namespace's, every process's).
func listenOverflows() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := range h {
			if h[j] == "ListenOverflows" && j < len(v) {
				n, _ := strconv.ParseInt(v[j], 10, 64)
				return n
			}
		}
	}
	return 0
}

// watched is a process whose CPU, RSS and open descriptors a storm
// samples; pid returns its process id now (a restarted imsd's is new).
type watched struct {
	label string
	pid   func() int
	// cpu, when set, is its CPU instead of pid's own (PostgreSQL: the
	// server and its backends).
	cpu func() time.Duration
}

// procPeaks are what a storm sampled of one process: its CPU in the
// storm, its peak CPU (over windows of at least a second), its peak RSS
// and its peak number of open descriptors.
type procPeaks struct {
	cpu0, cpu time.Duration
	peakCPU   float64
	peakRSS   int64
	peakFDs   int
}

// pidCPU returns the CPU time process pid has used, user and system (0
// when it is gone).
func pidCPU(pid int) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(st[strings.LastIndexByte(string(st), ')'):]), " ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+stime) * 10 * time.Millisecond
}

// postgresWatched watches the PostgreSQL server listening on dsn's port
// (pgtest's, found by its command line): its CPU is the server's, its
// backends' (those running and, through the server's children's times,
// those ended) and its other processes'; RSS and descriptors are the
// server process's own.
func postgresWatched(b *testing.B, dsn string) watched {
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	port := u.Port()
	var pm int
	ps, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range ps {
		c, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(c), "\x00")
		if !strings.HasSuffix(args[0], "/postgres") || args[0] == "runuser" {
			continue
		}
		if i := slices.Index(args, "-p"); i >= 0 && i+1 < len(args) && args[i+1] == port {
			pm, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
			break
		}
	}
	if pm == 0 {
		b.Fatalf("no postgres server on port %s", port)
	}
	return watched{label: "PostgreSQL", pid: func() int { return pm }, cpu: func() time.Duration {
		t := pidCPU(pm) + pidChildrenCPU(pm)
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range stats {
			st, err := os.ReadFile(p)
			if err != nil || len(st) == 0 {
				continue
			}
			_, rest, _ := strings.Cut(string(st[strings.LastIndexByte(string(st), ')'):]), " ")
			f := strings.Fields(rest)
			if len(f) > 1 && f[1] == strconv.Itoa(pm) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				t += pidCPU(pid)
			}
		}
		return t
	}}
}

// pidChildrenCPU returns the CPU time of process pid's children that
// ended and were waited for (cutime and cstime).
func pidChildrenCPU(pid int) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(st[strings.LastIndexByte(string(st), ')'):]), " ")
	f := strings.Fields(rest)
	if len(f) < 15 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[13], 10, 64)
	stime, _ := strconv.ParseInt(f[14], 10, 64)
	return time.Duration(ut+stime) * 10 * time.Millisecond
}

// pidRSS returns process pid's resident set in bytes (0 when it is gone).
func pidRSS(pid int) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(st[strings.LastIndexByte(string(st), ')'):]), " ")
	f := strings.Fields(rest)
	if len(f) < 22 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return pages * int64(os.Getpagesize())
}

// pidFDs returns how many descriptors process pid has open.
func pidFDs(pid int) int {
	d, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	return len(names)
}

// storm kills every process of procs at once (SIGKILL, as a crash),
// starts them again two seconds later while the agents reconnect, and
// prints what label's storm took. CPU and RSS are the processes' sums;
// each process of procs, the load generator (this process) and those of
// others are also sampled on their own.
func storm(b *testing.B, label string, procs []*imsProc, agents []*benchAgent, others ...watched) {
	b.Helper()
	n := len(agents)
	const down = 2 * time.Second
	var watch []watched
	for i, p := range procs {
		watch = append(watch, watched{label: fmt.Sprintf("imsd %d", i+1), pid: p.PID})
	}
	watch = append(watch, watched{label: "load generator", pid: os.Getpid})
	watch = append(watch, others...)
	peaks := make([]procPeaks, len(watch))
	loadAtKill := loadAverage()
	killedPIDs := make([]int, len(procs))
	for i, p := range procs {
		killedPIDs[i] = p.PID()
		p.Kill()
	}
	killed := time.Now()
	overflows0 := listenOverflows()
	cpu := func() (t time.Duration) {
		for _, p := range procs {
			t += p.cpu(b)
		}
		return t
	}
	rss := func() (m int64) {
		for _, p := range procs {
			m += p.rss(b)
		}
		return m
	}
	restarted := func() bool {
		for i, p := range procs {
			if p.PID() == killedPIDs[i] {
				return false
			}
		}
		return true
	}
	var st stormStats
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.reconnect(ctx, &st) }()
	}
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(down)
	// Sample imsd's CPU and RSS from its start (Start returns only once
	// /readyz answers, which in a storm is late) while the storm lasts;
	// the peak CPU is over windows of at least a second (a late tick can
	// follow the one before by a millisecond). Every watched process's
	// descriptors are counted every second.
	var peakCPU float64
	var peakRSS int64
	var cpu0 atomic.Int64
	sampleDone := make(chan struct{})
	stopSample := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for !restarted() {
			select {
			case <-stopSample:
				return
			case <-time.After(time.Millisecond):
			}
		}
		cpu0.Store(int64(cpu()))
		type sample struct {
			at  time.Time
			cpu time.Duration
			per []time.Duration
		}
		take := func() sample {
			s := sample{at: time.Now(), cpu: cpu(), per: make([]time.Duration, len(watch))}
			for i, w := range watch {
				if w.cpu != nil {
					s.per[i] = w.cpu()
				} else {
					s.per[i] = pidCPU(w.pid())
				}
			}
			return s
		}
		samples := []sample{take()}
		for i := range watch {
			peaks[i].cpu0 = samples[0].per[i]
		}
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for tick := 0; ; tick++ {
			select {
			case <-stopSample:
				return
			case <-t.C:
			}
			now := take()
			for i := len(samples) - 1; i >= 0; i-- {
				if d := now.at.Sub(samples[i].at); d >= time.Second {
					peakCPU = max(peakCPU, float64(now.cpu-samples[i].cpu)/float64(d))
					for j := range watch {
						peaks[j].peakCPU = max(peaks[j].peakCPU, float64(now.per[j]-samples[i].per[j])/float64(d))
					}
					break
				}
			}
			samples = append(samples, now)
			peakRSS = max(peakRSS, rss())
			for j, w := range watch {
				peaks[j].cpu = now.per[j] - peaks[j].cpu0
				peaks[j].peakRSS = max(peaks[j].peakRSS, pidRSS(w.pid()))
				if tick%4 == 0 {
					peaks[j].peakFDs = max(peaks[j].peakFDs, pidFDs(w.pid()))
				}
			}
		}
	}()
	started := time.Now()
	// Each process's /readyz, asked every 250 ms through the storm (a
	// balancer's health check): when it first answered 200, its slowest
	// answer after that and how many did not answer 200 within 2 s.
	probes := make([]readyProbe, len(procs))
	var probing sync.WaitGroup
	for i, p := range procs {
		probing.Add(1)
		go func() { defer probing.Done(); probes[i].run(p.URL(), started, stopSample) }()
	}
	// Every process starts at once (Start returns once its /readyz
	// answers); the first one here, the others beside it.
	var starting sync.WaitGroup
	for _, p := range procs[1:] {
		starting.Add(1)
		go func() { defer starting.Done(); p.Start() }()
	}
	procs[0].Start()
	starting.Wait()
	ready := time.Now()
	// Jobs enqueued while the fleet comes back: each must finish.
	const jobs = 500
	c := procs[0].client()
	reqs := make([]*imsv1.EnqueueJobRequest, 0, jobs)
	for i := range jobs {
		reqs = append(reqs, &imsv1.EnqueueJobRequest{Install: fmt.Sprintf("i%05d", (i*7919)%n), ComponentType: "action", Operation: "apply", Config: noop})
	}
	if _, err := c.EnqueueJobs(context.Background(), connect.NewRequest(&imsv1.EnqueueJobsRequest{Jobs: reqs})); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for st.welcomed.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	back := time.Now()
	stormCPU := cpu() - time.Duration(cpu0.Load())
	close(stopSample)
	<-sampleDone
	probing.Wait()
	if got := st.welcomed.Load(); got < int64(n) {
		last, _ := st.lastErr.Load().(string)
		b.Fatalf("only %d of %d agents back after 3 minutes (%d tries failed, %d shed, %d gave up; the last failure: %s)", got, n, st.failed.Load(), st.shed.Load(), st.gaveUp.Load(), last)
	}
	// Every job enqueued during the storm finishes.
	var left int
	ok := func() bool {
		r, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{
			States: []imsv1.JobState{imsv1.JobState_JOB_STATE_QUEUED, imsv1.JobState_JOB_STATE_ASSIGNED, imsv1.JobState_JOB_STATE_RUNNING}, PageSize: 1000}))
		if err != nil {
			return false
		}
		left = len(r.Msg.Jobs)
		return left == 0
	}
	for end := time.Now().Add(2 * time.Minute); !ok() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	r, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{States: []imsv1.JobState{imsv1.JobState_JOB_STATE_SUCCEEDED}, PageSize: 1000}))
	if err != nil {
		b.Fatal(err)
	}
	succeeded := len(r.Msg.Jobs)
	st.mu.Lock()
	slices.SortFunc(st.welcomes, func(x, y time.Time) int { return x.Compare(y) })
	peakRate := 0
	for i, j := 0, 0; j < len(st.welcomes); j++ {
		for st.welcomes[j].Sub(st.welcomes[i]) > time.Second {
			i++
		}
		peakRate = max(peakRate, j-i+1)
	}
	first := st.welcomes[0]
	st.mu.Unlock()
	all := back.Sub(started)
	var shedMetric float64
	for _, p := range procs {
		shedMetric += p.metric(b, "byoc_agent_hellos_shed_total")
	}
	fmt.Printf("reconnect storm, %s: %d agents back %s after imsd started (ready in %s; down %s; %s after the kill); first welcome %s after start; "+
		"hellos %.0f/s on average from the first welcome, %d/s at the peak second; imsd (all replicas) peak CPU %.0f %% of a core (%.1f s of CPU in the storm), peak RSS %d MiB; "+
		"hellos shed by admission control %d (imsd counter %.0f), other failed tries %d, agents that gave up %d; jobs enqueued during the storm %d, succeeded %d, unfinished %d (target: all back within 30s) [%s]\n",
		label, n, all.Round(time.Millisecond), ready.Sub(started).Round(time.Millisecond), down, back.Sub(killed).Round(time.Millisecond), first.Sub(started).Round(time.Millisecond),
		float64(n)/back.Sub(first).Seconds(), peakRate, 100*peakCPU, stormCPU.Seconds(), peakRSS>>20,
		st.shed.Load(), shedMetric, st.failed.Load(), st.gaveUp.Load(), jobs, succeeded, left, machine())
	for i, w := range watch {
		p := peaks[i]
		fmt.Printf("  %s: %.1f s of CPU in the storm, peak %.0f %% of a core, peak RSS %d MiB, peak open descriptors %d\n",
			w.label, p.cpu.Seconds(), 100*p.peakCPU, p.peakRSS>>20, p.peakFDs)
	}
	for i, pr := range probes {
		fmt.Printf("  imsd %d /readyz (every 250 ms, 2 s timeout, asked from the load generator's process: its times include that process's scheduling): first 200 %s after start; 200 %d times (slowest %s), other statuses %v, timeouts connecting %d, waiting for the answer %d, other errors %d %s\n",
			i+1, pr.first.Round(time.Millisecond), pr.ok, pr.slowest.Round(time.Millisecond), pr.status, pr.dialTimeouts, pr.timeouts, pr.other, pr.lastErr)
	}
	st.mu.Lock()
	fmt.Printf("  failed tries by kind: %v; connections dropped on a full accept queue (any listener on this machine) during the storm: %d\n", st.kinds, listenOverflows()-overflows0)
	st.mu.Unlock()
	fmt.Printf("  load average at the kill %s, after the storm %s\n", loadAtKill, loadAverage())
	b.ReportMetric(all.Seconds(), "s-all-back")
	b.ReportMetric(100*peakCPU, "peak-cpu-%")
	b.ReportMetric(float64(peakRSS>>20), "peak-rss-MiB")
	if st.gaveUp.Load() > 0 || left > 0 || succeeded < jobs {
		b.Errorf("%d agents gave up; %d jobs unfinished, %d of %d succeeded", st.gaveUp.Load(), left, succeeded, jobs)
	}
}

// readyProbe asks a process's /readyz every 250 ms, as a balancer's
// health check does (2 s timeout), and counts the answers from the
// first that was not a refused connection (the process listening).
type readyProbe struct {
	first               time.Duration // since the start: the first 200 (0: none)
	slowest             time.Duration // the slowest 200
	ok, timeouts, other int
	dialTimeouts        int         // timed out connecting
	status              map[int]int // answers other than 200, by status
	lastErr             string
}

func (pr *readyProbe) run(url string, started time.Time, stop <-chan struct{}) {
	// Whether the try's connection was made: a timeout before it is the
	// accept queue's (the SYN dropped), after it the answer's.
	var dialed atomic.Bool
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			dialed.Store(err == nil)
			return c, err
		}}}
	pr.status = map[int]int{}
	listening := false
	for {
		dialed.Store(false)
		t0 := time.Now()
		r, err := c.Get(url + "/readyz")
		took := time.Since(t0)
		var ne net.Error
		switch {
		case err == nil:
			listening = true
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				pr.ok++
				pr.slowest = max(pr.slowest, took)
				if pr.first == 0 {
					pr.first = time.Since(started)
				}
			} else {
				pr.status[r.StatusCode]++
			}
		case errors.As(err, &ne) && ne.Timeout():
			listening = true
			if dialed.Load() {
				pr.timeouts++
			} else {
				pr.dialTimeouts++
			}
		case listening:
			pr.other++
			pr.lastErr = err.Error()
		}
		select {
		case <-stop:
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// reconnect holds the agent's stream as agentd does: on every end it
// waits as agentd's Run does (retryDelay) and connects again, until ctx
// ends. The first welcome it gets counts it as back.
func (a *benchAgent) reconnect(ctx context.Context, st *stormStats) {
	retry := backoff.New(100*time.Millisecond, 30*time.Second)
	counted := false
	for {
		err := a.session(ctx, func() {
			if !counted {
				counted = true
				st.welcomed.Add(1)
				st.mu.Lock()
				st.welcomes = append(st.welcomes, time.Now())
				st.mu.Unlock()
			}
			retry.Reset()
		})
		if ctx.Err() != nil {
			return
		}
		delay := retry.Next()
		var ce *connect.Error
		if hint, ok := retryHint(err); ok {
			st.shed.Add(1)
			delay = rand.N(min(hint, 30*time.Second) + 1)
		} else if errors.As(err, &ce) && ce.Code() == connect.CodeUnauthenticated {
			st.gaveUp.Add(1) // agentd stops for good on a refused identity
			return
		} else {
			st.failed.Add(1)
			st.mu.Lock()
			if st.kinds == nil {
				st.kinds = map[string]int{}
			}
			st.kinds[failKind(err)]++
			st.mu.Unlock()
			if err != nil {
				st.lastErr.Store(err.Error())
			}
		}
		if !backoff.Wait(ctx, delay) {
			return
		}
	}
}

// hello opens a stream on ctx and says hello (auditCopy: asking for the
// install's audit records, as agentd does), and returns the stream once
// welcomed.
func (a *benchAgent) hello(ctx context.Context, auditCopy bool) (*agentchannel.AgentStream, error) {
	raw := a.client.Connect(ctx)
	if err := raw.Send(nil); err != nil {
		return nil, err
	}
	m, err := raw.Receive()
	if err != nil {
		return nil, err
	}
	// As agentd does, the agent names its process (unless
	// BYOC_BENCH_NO_INSTANCE=1, an agent from before instance ids: imsd
	// then neither checks it nor tells the other replicas of the hello).
	if a.instance == "" && os.Getenv("BYOC_BENCH_NO_INSTANCE") != "1" {
		a.instance = fmt.Sprintf("%016x", rand.Uint64())
	}
	sst, err := agentchannel.Dial(raw, m.GetChallenge(), a.key, a.id, nil, &agentv1.Hello{
		AgentId: a.id, Signature: agentproto.SignChallenge(a.key, a.id, m.GetChallenge().Nonce), Capacity: 4,
		Instance: a.instance, Hostname: "bench-agent",
		AuditCopy: auditCopy,
		// As agentd does: it verifies batch job signatures (unless
		// BYOC_BENCH_SINGLE_SIGNATURES=1, an older agent's hello).
		BatchSignatures: os.Getenv("BYOC_BENCH_SINGLE_SIGNATURES") != "1",
	})
	if err != nil {
		return nil, err
	}
	if _, err := sst.Receive(); err != nil {
		return nil, err
	}
	return sst, nil
}

// helloAdmitted is hello, tried again after imsd's retry hint (as
// agentd does) while imsd's admission control sheds the stream.
func (a *benchAgent) helloAdmitted(ctx context.Context, auditCopy bool) (*agentchannel.AgentStream, error) {
	for {
		sst, err := a.hello(ctx, auditCopy)
		hint, shed := retryHint(err)
		if !shed {
			return sst, err
		}
		if !backoff.Wait(ctx, rand.N(hint+1)) {
			return nil, ctx.Err()
		}
	}
}

// retryHint is the hint of a stream imsd shed, if err is one.
func retryHint(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return 0, false
	}
	return agentproto.ParseRetryAfter(ce.Meta().Get(agentproto.RetryAfterHeader))
}

// session is one stream: challenge, hello, welcome (then welcomed is
// called), and jobs finished at once, until the stream ends.
func (a *benchAgent) session(ctx context.Context, welcomed func()) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sst, err := a.hello(sctx, false)
	if err != nil {
		return err
	}
	welcomed()
	var wid uint64
	acked := map[uint64]*agentv1.JobAssignment{}
	for {
		m, err := sst.Receive()
		if err != nil {
			return err
		}
		if acc := m.GetAccepted(); acc != nil {
			if as, ok := acked[acc.WriteId]; ok {
				delete(acked, acc.WriteId)
				wid++
				sst.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
					WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED}}})
			}
			continue
		}
		if as := m.GetAssignment(); as != nil {
			wid++
			acked[wid] = as
			sst.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken}}})
		}
	}
}
