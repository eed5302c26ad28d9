// Package bench measures byoc's dispatch path against a real imsd process:
// pickup latency, dispatch throughput and memory per connected agent, on
// SQLite and on PostgreSQL. The agents are protocol-level agents in this
// process (they ack each job and finish it once imsd accepted the ack, as
// agentd starts a job, like a no-op plugin), each
// with its own TCP connection, so the figures are imsd's. Run with
// `make bench`; figures are printed, not asserted.
package bench

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// TestMain removes the binaries cluster.Binaries built when the tests
// end, and fails a passing run that leaves goroutines behind.
func TestMain(m *testing.M) { cluster.Main(m) }

// imsProc is imsd running as its own process (cluster.IMSProcess), so
// its memory and CPU can be read.
type imsProc struct {
	*cluster.IMSProcess
	url string
	// debug is imsd's pprof address, when it has one.
	debug string
}

func startIMS(b *testing.B, databaseURL string) *imsProc { return startIMSDebug(b, databaseURL, false) }

// startIMSDebug is startIMS; withDebug gives imsd a pprof address even
// when BYOC_BENCH_PPROF does not.
func startIMSDebug(b *testing.B, databaseURL string, withDebug bool) *imsProc {
	b.Helper()
	// The bench agents send no heartbeats, and imsd cuts a stream silent
	// for three heartbeat intervals: 30s keeps the first agents of a
	// 10,000-agent fleet connected while the last ones connect.
	args := []string{"--log-level", "warn", "--heartbeat", "30s", "--lease", "60s"}
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	debug := os.Getenv("BYOC_BENCH_PPROF") // profile imsd while a benchmark runs
	if debug == "" && withDebug {
		debug = cluster.FreeAddr(b)
	}
	if debug != "" {
		args = append(args, "--debug-addr", debug)
	}
	p := cluster.StartIMSProcess(b, os.Stderr, args...)
	return &imsProc{IMSProcess: p, url: p.URL(), debug: debug}
}

func (p *imsProc) client() imsv1connect.OperatorServiceClient { return p.Client() }

// rss returns imsd's resident set in bytes.
func (p *imsProc) rss(b *testing.B) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpu returns the CPU time imsd has used, user and system.
func (p *imsProc) cpu(b *testing.B) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which ends with the last ')':
	// utime and stime are the 12th and 13th, in clock ticks (100 per
	// second on Linux).
	_, rest, _ := strings.Cut(string(st[strings.LastIndexByte(string(st), ')'):]), " ")
	f := strings.Fields(rest)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+stime) * 10 * time.Millisecond
}

// runQueueWait returns how long the threads of process pid have waited
// for a CPU while runnable (the second field of each thread's
// /proc/PID/task/TID/schedstat): on a shared machine, the time a process
// was ready to run and could not. pid 0 is this process. Threads that
// have ended are not counted.
func runQueueWait(pid int) time.Duration {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	ts, _ := os.ReadDir(dir)
	var sum time.Duration
	for _, t := range ts {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// selfCPU returns the CPU time this process (the load generator) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gc makes imsd collect its garbage (through its pprof endpoint), so the
// heap figures that follow are live memory, not the garbage of the
// enrolment burst. With path set, it also writes imsd's heap profile
// there.
func (p *imsProc) gc(b *testing.B, path string) {
	if p.debug == "" {
		return
	}
	r, err := http.Get("http://" + p.debug + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Body.Close()
	w := io.Discard
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	io.Copy(w, r.Body)
}

// goroutines writes imsd's goroutines, grouped by stack, to path.
func (p *imsProc) goroutines(b *testing.B, path string) {
	r, err := http.Get("http://" + p.debug + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	io.Copy(f, r.Body)
}

// metrics reads imsd's unlabelled metrics, all from one scrape.
func (p *imsProc) metrics(b *testing.B) map[string]float64 {
	r, err := http.Get(p.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if ok && !strings.HasPrefix(name, "#") && !strings.Contains(name, "{") {
			m[name], _ = strconv.ParseFloat(v, 64)
		}
	}
	return m
}

// metric reads one unlabelled metric from imsd's metrics endpoint.
func (p *imsProc) metric(b *testing.B, name string) float64 {
	r, err := http.Get(p.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// benchAgent is a protocol-level agent that finishes every job at once.
type benchAgent struct {
	id      string
	key     ed25519.PrivateKey
	install string
	client  agentv1connect.AgentServiceClient
	picked  func(jobID string, at time.Time)
	cancel  context.CancelFunc
	// heartbeat, when set, is how often the agent sends a heartbeat (as
	// agentd does): a benchmark longer than three of imsd's heartbeat
	// intervals needs it, or imsd cuts the silent streams.
	heartbeat time.Duration
	// instance names this agent's process in its hellos, as agentd's
	// random per-process id does (made at the first hello): on
	// PostgreSQL each hello is then told to the other replicas
	// (store.NotifyHello), as an agentd's is.
	instance string
}

// fleetHeartbeat is the heartbeat of the agents fleet makes (0: none).
var fleetHeartbeat time.Duration

// fleet creates n installs with one connected agent each.
func fleet(b *testing.B, p *imsProc, n int, picked func(string, time.Time)) []*benchAgent {
	b.Helper()
	c := p.client()
	ctx := context.Background()
	if _, err := c.CreateApp(ctx, connect.NewRequest(&imsv1.CreateAppRequest{Name: "bench"})); err != nil {
		b.Fatal(err)
	}
	agents := make([]*benchAgent, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var failed atomic.Value
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			name := fmt.Sprintf("i%05d", i)
			r, err := c.CreateInstall(ctx, connect.NewRequest(&imsv1.CreateInstallRequest{App: "bench", Name: name}))
			if err != nil {
				failed.Store(err)
				return
			}
			key, _ := identity.NewKey()
			// One transport per agent: one TCP connection each, as in the field.
			hc := agent.DefaultHTTPClient()
			ac := agentv1connect.NewAgentServiceClient(hc, p.url)
			er, err := ac.Enroll(ctx, connect.NewRequest(&agentv1.EnrollRequest{EnrollmentToken: r.Msg.EnrollmentToken.Token, PublicKey: key.Public().(ed25519.PublicKey)}))
			if err != nil {
				failed.Store(err)
				return
			}
			// As agentd does after enrolling: the stream opens its own
			// connection.
			hc.CloseIdleConnections()
			agents[i] = &benchAgent{id: er.Msg.AgentId, key: key, install: name, client: ac, picked: picked, heartbeat: fleetHeartbeat}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	// Connect them as a fleet reconnecting after an imsd restart would,
	// its jittered backoff spreading the storm: here at most connectMax
	// handshakes in flight at once. The time it takes is printed.
	const connectMax = 200
	ready := make(chan struct{}, n)
	slots := make(chan struct{}, connectMax)
	start := time.Now()
	go func() {
		for _, a := range agents {
			slots <- struct{}{}
			go a.run(b, ready)
		}
	}()
	for range n {
		<-ready
		<-slots
	}
	fmt.Printf("%d agents connected (stream, hello and welcome) in %s, %d at a time [%s]\n", n, time.Since(start).Round(time.Millisecond), connectMax, machine())
	b.Cleanup(func() {
		for _, a := range agents {
			a.cancel()
		}
	})
	return agents
}

func (a *benchAgent) run(b *testing.B, ready chan<- struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	// As agentd does: the encrypted channel's handshake carries the
	// hello, tried again when imsd's admission control sheds it.
	// BYOC_BENCH_AUDIT_COPY=1: ask for the install's audit records as
	// agentd does (imsd then reads them before answering each ack and
	// after each result); the agents here only receive them.
	st, err := a.helloAdmitted(ctx, os.Getenv("BYOC_BENCH_AUDIT_COPY") == "1")
	if err != nil {
		b.Error(err)
		ready <- struct{}{}
		return
	}
	ready <- struct{}{}
	// Sends from this loop and the heartbeats are one at a time.
	var mu sync.Mutex
	send := func(m *agentv1.ConnectRequest) {
		mu.Lock()
		defer mu.Unlock()
		st.Send(m)
	}
	if every := a.heartbeat; every > 0 {
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			var seq uint64
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					seq++
					send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq}}})
				}
			}
		}()
	}
	var wid uint64
	// As agentd does: a job starts (here: ends at once) only once imsd
	// has accepted its ack, so the result follows the ack's answer.
	acked := map[uint64]*agentv1.JobAssignment{}
	for {
		m, err := st.Receive()
		if err != nil {
			return
		}
		if acc := m.GetAccepted(); acc != nil {
			as, ok := acked[acc.WriteId]
			if !ok {
				continue
			}
			delete(acked, acc.WriteId)
			wid++
			send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
				WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED,
			}}})
			continue
		}
		as := m.GetAssignment()
		if as == nil {
			continue
		}
		a.picked(as.JobId, time.Now())
		wid++
		acked[wid] = as
		send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken}}})
	}
}

var noop = func() *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "noop", "script": "true"}}})
	return s
}()

// loadAverage is the machine's load average (1, 5 and 15 minutes).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s, %d CPUs, %s, host %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), host)
}

// BenchmarkPickupLatency enqueues jobs at 100/s across 1,000 connected
// agents and measures enqueue → assignment received.
//
// It prints p50, p99, p99.9 and the maximum over BYOC_BENCH_PICKUP_JOBS
// jobs (10,000), with what the tail is made of: the enqueue call's own
// p99 and maximum (the write and its commit: the assignment is sent after
// it), how late the load generator's ticker fired (its own scheduling),
// imsd's garbage collections and longest pause, and the load average.
func BenchmarkPickupLatency(b *testing.B) {
	const agents, rate = 1000, 100
	jobs := 10000
	if n, err := strconv.Atoi(os.Getenv("BYOC_BENCH_PICKUP_JOBS")); err == nil && n >= 100 {
		jobs = n
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			dsn := ""
			if name == "postgres" {
				dsn = benchPostgres(b)
			}
			p := startIMS(b, dsn)
			var mu sync.Mutex
			sent := map[string]time.Time{}
			early := map[string]time.Time{}
			var lat []time.Duration
			done := make(chan struct{}, jobs)
			fleet(b, p, agents, func(id string, at time.Time) {
				mu.Lock()
				if t0, ok := sent[id]; ok {
					lat = append(lat, at.Sub(t0))
					delete(sent, id)
					done <- struct{}{}
				} else {
					early[id] = at
				}
				mu.Unlock()
			})
			c := p.client()
			b.ResetTimer()
			var calls, lateness []time.Duration
			var gcs0 float64
			var start time.Time
			var imsWait0, genWait0 time.Duration
			for range b.N {
				lat, calls, lateness = lat[:0], calls[:0], lateness[:0]
				gcs0 = p.metric(b, "go_gc_duration_seconds_count")
				start, imsWait0, genWait0 = time.Now(), runQueueWait(p.PID()), runQueueWait(0)
				tick := time.NewTicker(time.Second / rate)
				for i := range jobs {
					tk := <-tick.C
					install := fmt.Sprintf("i%05d", (i*7919)%agents)
					t0 := time.Now()
					lateness = append(lateness, t0.Sub(tk))
					r, err := c.EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{Install: install, ComponentType: "action", Operation: "apply", Config: noop}))
					if err != nil {
						b.Fatal(err)
					}
					calls = append(calls, time.Since(t0))
					mu.Lock()
					if at, ok := early[r.Msg.Job.Id]; ok {
						// The assignment beat the enqueue response.
						lat = append(lat, at.Sub(t0))
						delete(early, r.Msg.Job.Id)
						done <- struct{}{}
					} else {
						sent[r.Msg.Job.Id] = t0
					}
					mu.Unlock()
				}
				tick.Stop()
				deadline := time.After(30 * time.Second)
				for range jobs {
					select {
					case <-done:
					case <-deadline:
						b.Fatalf("only %d of %d jobs picked up", len(lat), jobs)
					}
				}
			}
			b.StopTimer()
			// How much of the run imsd's and the load generator's threads
			// spent runnable but waiting for a CPU: the machine's share of
			// the tail.
			elapsed := time.Since(start)
			imsWait, genWait := runQueueWait(p.PID())-imsWait0, runQueueWait(0)-genWait0
			gcs := p.metric(b, "go_gc_duration_seconds_count") - gcs0
			maxPause := p.metric(b, `go_gc_duration_seconds{quantile="1"}`)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			q := func(ds []time.Duration, f float64) time.Duration {
				slices.Sort(ds)
				return ds[min(len(ds)-1, int(float64(len(ds))*f))]
			}
			p50, p99, p999, pmax := q(lat, 0.5), q(lat, 0.99), q(lat, 0.999), q(lat, 1)
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p99), "p99-ms")
			b.ReportMetric(ms(p999), "p99.9-ms")
			b.ReportMetric(ms(pmax), "max-ms")
			fmt.Printf("pickup latency %s: %d agents, %d jobs at %d/s: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms (target p99 < 5 ms); the enqueue call p99 %.2f ms, max %.2f ms; the ticker late p99 %.2f ms, max %.2f ms; imsd %.0f GCs, longest pause %.2f ms; waiting for a CPU while runnable: imsd's threads %.1f ms, the load generator's %.1f ms per second of run; load average %s [%s]\n",
				name, agents, jobs, rate, ms(p50), ms(p99), ms(p999), ms(pmax), ms(q(calls, 0.99)), ms(q(calls, 1)),
				ms(q(lateness, 0.99)), ms(q(lateness, 1)), gcs, maxPause*1000,
				ms(imsWait)/elapsed.Seconds(), ms(genWait)/elapsed.Seconds(), loadAverage(), machine())
		})
	}
}

// BenchmarkDispatchThroughput drains no-op jobs across 1,000 agents as fast
// as imsd hands them out. Jobs are enqueued two ways: one EnqueueJob call
// per job from 32 concurrent enqueuers ("single"), and EnqueueJobs calls
// of 100 jobs from 4 enqueuers ("batch", how a fleet-wide run enqueues).
// BYOC_BENCH_ENQUEUE=single or batch runs one of them.
//
// BYOC_BENCH_POSTGRES_URL names an empty PostgreSQL database to use
// instead of a new one from pgtest: bench/river passes one on the server
// River ran on (make bench-river).
func BenchmarkDispatchThroughput(b *testing.B) {
	agents, jobs := 1000, 50000
	if n, err := strconv.Atoi(os.Getenv("BYOC_BENCH_JOBS")); err == nil {
		jobs = n
	}
	modes := []string{"single", "batch"}
	if m := os.Getenv("BYOC_BENCH_ENQUEUE"); m != "" {
		modes = []string{m}
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, mode := range modes {
			b.Run(name+"/"+mode, func(b *testing.B) {
				dsn := ""
				if name == "postgres" {
					dsn = benchPostgres(b)
				}
				p := startIMS(b, dsn)
				var picked atomic.Int64
				all := make(chan struct{}, 1)
				var target atomic.Int64
				fleet(b, p, agents, func(string, time.Time) {
					if picked.Add(1) == target.Load() {
						all <- struct{}{}
					}
				})
				c := p.client()
				enqueuers, per := 32, 1
				if mode == "batch" {
					enqueuers, per = 4, 100
				}
				b.ResetTimer()
				var best float64
				var imsCPU, genCPU, pgCPU time.Duration
				var bestSys [2]syscalls
				for range b.N {
					picked.Store(0)
					target.Store(int64(jobs))
					start := time.Now()
					var pg *pgtest.Backends
					if dsn != "" {
						pg = pgtest.WatchBackends(dsn)
					}
					cpu0, gen0 := p.cpu(b), selfCPU()
					sys0 := [2]syscalls{syscallsOf(p.PID()), syscallsOf(0)}
					var wg sync.WaitGroup
					var next atomic.Int64
					for range enqueuers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								first := next.Add(int64(per)) - int64(per)
								if first >= int64(jobs) {
									return
								}
								reqs := make([]*imsv1.EnqueueJobRequest, 0, per)
								for i := first; i < first+int64(per) && i < int64(jobs); i++ {
									install := fmt.Sprintf("i%05d", (i*7919)%int64(agents))
									reqs = append(reqs, &imsv1.EnqueueJobRequest{Install: install, ComponentType: "action", Operation: "apply", Config: noop})
								}
								var err error
								if mode == "batch" {
									_, err = c.EnqueueJobs(context.Background(), connect.NewRequest(&imsv1.EnqueueJobsRequest{Jobs: reqs}))
								} else {
									_, err = c.EnqueueJob(context.Background(), connect.NewRequest(reqs[0]))
								}
								if err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					select {
					case <-all:
					case <-time.After(120 * time.Second):
						b.Fatalf("only %d of %d jobs picked up", picked.Load(), jobs)
					}
					// Wait for the results too: a job is done when its result is stored.
					cluster.Eventually(b, 120*time.Second, "every job to finish", func() bool {
						r, err := c.ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{
							States: []imsv1.JobState{imsv1.JobState_JOB_STATE_QUEUED, imsv1.JobState_JOB_STATE_ASSIGNED, imsv1.JobState_JOB_STATE_RUNNING}, PageSize: 1}))
						return err == nil && len(r.Msg.Jobs) == 0
					})
					rate := float64(jobs) / time.Since(start).Seconds()
					ims, gen := p.cpu(b)-cpu0, selfCPU()-gen0
					sys := [2]syscalls{syscallsOf(p.PID()).minus(sys0[0]), syscallsOf(0).minus(sys0[1])}
					var pgc time.Duration
					if pg != nil {
						pgc = pg.Stop()
					}
					if rate > best {
						best = rate
						imsCPU, genCPU, pgCPU = ims, gen, pgc
						bestSys = sys
					}
				}
				b.StopTimer()
				b.ReportMetric(best, "jobs/s")
				perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(jobs) }
				b.ReportMetric(perJob(imsCPU), "imsd-cpu-µs/job")
				pgPart := ""
				if dsn != "" {
					b.ReportMetric(perJob(pgCPU), "postgres-cpu-µs/job")
					pgPart = fmt.Sprintf(", PostgreSQL %.0f µs", perJob(pgCPU))
				}
				fmt.Printf("dispatch throughput %s, %s enqueue: %d no-op jobs across %d agents, %d enqueuers of %d job(s) per call: %.0f jobs/s, enqueue to result stored (target on SQLite: 5000); CPU per job: imsd %.0f µs, load generator %.0f µs%s; read and write calls per job: imsd %s, load generator %s; load average %s [%s]\n",
					name, mode, jobs, agents, enqueuers, per, best, perJob(imsCPU), perJob(genCPU), pgPart, bestSys[0].perJob(jobs), bestSys[1].perJob(jobs), loadAverage(), machine())
			})
		}
	}
}

// benchPostgres returns BYOC_BENCH_POSTGRES_URL, else a new database from
// pgtest.
func benchPostgres(b *testing.B) string {
	if u := os.Getenv("BYOC_BENCH_POSTGRES_URL"); u != "" {
		return u
	}
	return pgtest.Start(b)
}

// BenchmarkIdleAgentMemory connects idle agents and divides imsd's RSS and
// heap growth by their number.
func BenchmarkIdleAgentMemory(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			for range b.N {
				p := startIMSDebug(b, "", true)
				c := p.client()
				c.ListApps(context.Background(), connect.NewRequest(&imsv1.ListAppsRequest{}))
				// Two collections before the first reading too: the first
				// leaves what sync.Pools held at start-up (the migrations'
				// parser buffers, 12 MiB) in the pools' victim caches,
				// which the second frees; read after one, that start-up
				// memory was counted against the agents.
				base := ""
				if path := os.Getenv("BYOC_BENCH_HEAPPROFILE"); path != "" {
					base = path + ".before"
				}
				p.gc(b, "")
				p.gc(b, base)
				rss0, m0 := p.rss(b), p.metrics(b)
				fleet(b, p, n, func(string, time.Time) {})
				// Let imsd settle after the enrolment burst: collect its
				// garbage twice (the second pass also shrinks the stacks
				// the first found mostly unused).
				p.gc(b, "")
				p.gc(b, os.Getenv("BYOC_BENCH_HEAPPROFILE"))
				// Read everything at once, right after the collection:
				// imsd's periodic work (the health sweep, the fleet
				// watcher) makes garbage between two reads.
				rss, m := p.rss(b), p.metrics(b)
				if path := os.Getenv("BYOC_BENCH_HEAPPROFILE"); path != "" {
					p.goroutines(b, path+".goroutines")
				}
				per := func(name string) float64 { return (m[name] - m0[name]) / float64(n) / 1024 }
				perRSS := float64(rss-rss0) / float64(n)
				perHeap := per("go_memstats_heap_inuse_bytes") * 1024
				fmt.Printf("  of which goroutine stacks %.1f KiB/agent, %.1f goroutines/agent\n", per("go_memstats_stack_inuse_bytes"), per("go_goroutines")*1024)
				// What RSS holds besides live objects and stacks: the
				// unused slots of the heap's spans (in use less objects),
				// and free pages the runtime has not yet returned to the
				// OS (idle less released), which the next cycle reuses.
				kept := func(m map[string]float64) float64 {
					return m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"]
				}
				fmt.Printf("  heap objects %.1f KiB/agent, free heap pages kept %.1f KiB/agent (next GC at %d MiB)\n",
					per("go_memstats_heap_alloc_bytes"), (kept(m)-kept(m0))/float64(n)/1024, int64(m["go_memstats_next_gc_bytes"])>>20)
				// The runtime's own (span and GC metadata, profiling
				// buckets), and what RSS holds that is none of the above:
				// memory not Go's (SQLite's page caches) and pages of the
				// binary.
				meta := func(m map[string]float64) float64 {
					return m["go_memstats_sys_bytes"] - m["go_memstats_heap_sys_bytes"] - m["go_memstats_stack_sys_bytes"]
				}
				perMeta := (meta(m) - meta(m0)) / float64(n) / 1024
				rest := perRSS/1024 - per("go_memstats_heap_inuse_bytes") - (kept(m)-kept(m0))/float64(n)/1024 - per("go_memstats_stack_inuse_bytes") - perMeta
				fmt.Printf("  runtime metadata %.1f KiB/agent, the rest of RSS %.1f KiB/agent\n", perMeta, rest)
				b.ReportMetric(perRSS/1024, "rss-KiB/agent")
				b.ReportMetric(perHeap/1024, "heap-KiB/agent")
				fmt.Printf("memory per idle agent, %d agents: RSS %.1f KiB, heap %.1f KiB (imsd RSS %d MiB; target 16 KiB) [%s]\n",
					n, perRSS/1024, perHeap/1024, rss>>20, machine())
			}
		})
	}
}

// syscalls are a process's read and write system calls so far
// (/proc/PID/io's syscr and syscw; pid 0 is this process): on this
// benchmark nearly all are the sockets' (the agents' streams, imsd's
// connections to PostgreSQL).
type syscalls struct{ reads, writes int64 }

func syscallsOf(pid int) syscalls {
	path := "/proc/self/io"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/io", pid)
	}
	bs, _ := os.ReadFile(path)
	var s syscalls
	for _, l := range strings.Split(string(bs), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			s.reads = n
		case "syscw":
			s.writes = n
		}
	}
	return s
}

func (s syscalls) minus(o syscalls) syscalls { return syscalls{s.reads - o.reads, s.writes - o.writes} }

func (s syscalls) perJob(jobs int) string {
	return fmt.Sprintf("%.2f/%.2f", float64(s.reads)/float64(jobs), float64(s.writes)/float64(jobs))
}
