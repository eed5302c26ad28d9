package bench

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"database/sql"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", to count PostgreSQL's connections

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// BenchmarkSimulatedFleet is the simulated fleet of the design note
// docs/design/scale.md: BYOC_BENCH_AGENTS protocol-level agents (100,000)
// on BYOC_BENCH_REPLICAS imsd replicas (4) on one throwaway PostgreSQL.
//
// The database is prepared directly through imsd's store package (one
// app, an install and an enrolled agent per simulated agent, each with
// its audit records, as the operator API and enrolment write them):
// creating 100,000 installs through the API one call at a time measures
// nothing the fleet needs. Everything measured goes through the real
// protocol: each agent has its own TCP connection and HTTP/2 stream,
// the channel handshake and a signed hello, heartbeats every
// BYOC_BENCH_HEARTBEAT (10s, agentd's default, spread evenly), and jobs
// acked and finished as agentd does.
//
// The agents connect to the replicas directly, round robin (agent i to
// replica i mod R), not through cluster.Balancer: the balancer relays
// every byte in this process, two more sockets and two copy buffers per
// agent, which at 100,000 agents would cost the load generator more
// memory than the replicas hold; round robin is what the balancer's
// distribution is anyway. They dial from 16 loopback source addresses
// (127.0.0.2–17), each with its own ephemeral port range, and the
// process's open-file limit is raised (imsd's with it: the children
// inherit it).
//
// The agents run in BYOC_BENCH_LOADGEN_PROCS load-generator processes
// (ceil(agents/18,000) unless set): the test binary run again as
// TestFleetWorker, each with a slice of the agents (fleetgen_test.go).
// One process holds one socket per agent, and a container's open-file
// limit caps that (20,000 where this was first run). They report their
// counters, their CPU and memory, and each job picked with its
// wall-clock time to this process, which measures the replicas and
// PostgreSQL and sums the load generator's figures.
//
// It connects every agent with at most BYOC_BENCH_CONNECT_MAX (64)
// handshakes in flight, lets the fleet settle for a heartbeat interval,
// measures the steady state for BYOC_BENCH_STEADY (60s): each replica's
// RSS, heap and CPU, KiB per idle agent, the heartbeats absorbed per
// second, PostgreSQL's connections and CPU, the load generator's memory;
// then enqueues BYOC_BENCH_FLEET_JOBS jobs (10,000) at 100/s to random
// agents through the replicas in turn and prints pickup p50/p99/max.
// It stops cleanly, failing, when MemAvailable falls under 4 GiB or the
// benchmark's processes (the load generator's included) pass 12 GiB:
// run a smaller fleet then.
func BenchmarkSimulatedFleet(b *testing.B) {
	n := envInt("BYOC_BENCH_AGENTS", 100000)
	replicas := envInt("BYOC_BENCH_REPLICAS", 4)
	hb := envDuration("BYOC_BENCH_HEARTBEAT", 10*time.Second)
	steady := envDuration("BYOC_BENCH_STEADY", 60*time.Second)
	jobs := envInt("BYOC_BENCH_FLEET_JOBS", 10000)
	connectMax := envInt("BYOC_BENCH_CONNECT_MAX", 64)
	const rate = 100
	lgProcs := envInt("BYOC_BENCH_LOADGEN_PROCS", (n+fleetAgentsPerProc-1)/fleetAgentsPerProc)
	lgProcs = max(1, min(lgProcs, n))
	for range b.N {
		// One descriptor per agent, in each replica and in each
		// load-generator process (which inherit the limit).
		raiseNofile(b, uint64(max((n+replicas-1)/replicas, (n+lgProcs-1)/lgProcs))+500)
		guard := watchMemory(b)
		dsn := pgtest.Start(b)
		t0 := time.Now()
		seeds := seedFleet(b, dsn, n)
		fmt.Printf("seeded %d installs and enrolled agents through the store in %s [load %s]\n", n, time.Since(t0).Round(time.Millisecond), loadAverage())

		var dsns []string
		for i := range replicas {
			dsns = append(dsns, cluster.WithApplicationName(b, dsn, fmt.Sprintf("imsd-%d", i+1)))
		}
		args := []string{"--log-level", "warn", "--heartbeat", hb.String()}
		if hb >= 30*time.Second {
			// imsd's lease (30s by default) must outlast a heartbeat.
			args = append(args, "--lease", (2 * hb).String())
		}
		if v := os.Getenv("BYOC_BENCH_MAX_HELLOS"); v != "" {
			args = append(args, "--max-hellos", v)
		}
		ps := cluster.StartReplicas(b, dsns, func(int) io.Writer { return os.Stderr }, args...)
		procs := make([]*imsProc, len(ps))
		urls := make([]string, len(ps))
		for i, p := range ps {
			procs[i] = &imsProc{IMSProcess: p, url: p.URL()}
			urls[i] = p.URL()
		}
		guard.procs = procs
		rss0 := make([]int64, len(procs))
		heap0 := make([]float64, len(procs))
		for i, p := range procs {
			rss0[i], heap0[i] = p.rss(b), fleetMetric(p, "go_memstats_heap_inuse_bytes")
		}

		// Connect: the load-generator processes start their agents, at
		// most connectMax handshakes in flight among them.
		start := time.Now()
		lg := startLoadGen(b, lgProcs, seeds, urls, hb, connectMax)
		guard.lg.Store(lg)
		seeds = nil
		progress := time.NewTicker(10 * time.Second)
		poll := time.NewTicker(100 * time.Millisecond)
		var connected, failedHellos int64
		for connected+failedHellos < int64(n) {
			select {
			case <-poll.C:
				t := total(lg.snapshot())
				connected, failedHellos = t.Connected, t.Failed
				if why := guard.tripped(); why != "" {
					b.Fatalf("stopped at %d of %d agents connected: %s; run a smaller BYOC_BENCH_AGENTS", connected, n, why)
				}
				if why := lg.dead(); why != "" {
					b.Fatalf("stopped at %d of %d agents connected: %s", connected, n, why)
				}
			case <-progress.C:
				fmt.Printf("  connecting: %d of %d after %s (%.0f/s); replicas RSS %d MiB, load generator RSS %d MiB, MemAvailable %d MiB [load %s]\n",
					connected, n, time.Since(start).Round(time.Second), float64(connected)/time.Since(start).Seconds(),
					guard.replicasRSS()>>20, lg.rss()>>20, memAvailable()>>20, loadAverage())
			}
		}
		progress.Stop()
		poll.Stop()
		connectTime := time.Since(start)
		if failedHellos > 0 {
			b.Fatalf("%d of %d agents failed their hello", failedHellos, n)
		}
		genBase := total(lg.baseline())
		fmt.Printf("%d agents connected to %d replicas from %d load-generator processes in %s (%.0f hellos/s, %d handshakes in flight at most); drops so far %d [load %s] [%s]\n",
			n, len(procs), lgProcs, connectTime.Round(time.Millisecond), float64(n)/connectTime.Seconds(), max(1, connectMax/lgProcs)*lgProcs,
			total(lg.snapshot()).Dropped, loadAverage(), machine())

		// Steady state: settle one heartbeat interval, then measure.
		settle := time.After(hb + 5*time.Second)
		for done := false; !done; {
			select {
			case <-settle:
				done = true
			case <-time.After(time.Second):
				if why := guard.tripped(); why != "" {
					b.Fatalf("stopped while settling: %s", why)
				}
				if why := lg.dead(); why != "" {
					b.Fatalf("stopped while settling: %s", why)
				}
			}
		}
		cpu0 := make([]time.Duration, len(procs))
		for i, p := range procs {
			cpu0[i] = p.cpu(b)
		}
		pg := pgtest.WatchBackends(dsn)
		gen0, w0 := lg.snapshot(), time.Now()
		for end := time.Now().Add(steady); time.Now().Before(end); {
			if why := guard.tripped() + lg.dead(); why != "" {
				pg.Stop()
				b.Fatalf("stopped in the steady state: %s", why)
			}
			time.Sleep(time.Second)
		}
		window := time.Since(w0)
		pgCPU := pg.Stop()
		gen1 := lg.snapshot()
		hbs := heartbeatRate(gen0, gen1)
		genCPU := total(gen1).CPU - total(gen0).CPU
		var totalCPU time.Duration
		var totalRSS int64
		perReplica := make([]string, len(procs))
		for i, p := range procs {
			c := p.cpu(b) - cpu0[i]
			totalCPU += c
			rss := p.rss(b)
			totalRSS += rss
			heap := fleetMetric(p, "go_memstats_heap_inuse_bytes")
			stream := fleetMetric(p, "go_memstats_stack_inuse_bytes")
			agents := (n - i + len(procs) - 1) / len(procs)
			perReplica[i] = fmt.Sprintf("imsd-%d: %d agents, RSS %d MiB (%.1f KiB/agent), heap %.0f MiB (%.1f KiB/agent), stacks %.0f MiB, CPU %.0f %% of a core",
				i+1, agents, rss>>20, float64(rss-rss0[i])/1024/float64(agents), heap/(1<<20), (heap-heap0[i])/1024/float64(agents), stream/(1<<20),
				100*c.Seconds()/window.Seconds())
		}
		// The load generator's live memory: its processes collect first
		// (and write their heap profiles when BYOC_BENCH_HEAPPROFILE
		// names a file: one per process, .1, .2, ...).
		gen := total(lg.gc(b))
		conns := pgConnections(b, dsn)
		fmt.Printf("steady state over %s, %d agents on %d replicas, heartbeat %s:\n", window.Round(time.Second), n, len(procs), hb)
		for _, s := range perReplica {
			fmt.Printf("  %s\n", s)
		}
		fmt.Printf("  replicas together: RSS %d MiB (%.1f KiB/agent over their start), CPU %.0f %% of a core; heartbeats %.0f/s sent (%.1f µs of replica CPU each, all idle work included)\n",
			totalRSS>>20, float64(totalRSS-sum(rss0))/1024/float64(n), 100*totalCPU.Seconds()/window.Seconds(), hbs, float64(totalCPU.Microseconds())/(hbs*window.Seconds()))
		fmt.Printf("  PostgreSQL: %s; backends' CPU %.0f %% of a core\n", conns, 100*pgCPU.Seconds()/window.Seconds())
		fmt.Printf("  load generator, %d processes: RSS %d MiB (%.1f KiB/agent), Go heap in use %d MiB, stacks %d MiB, %d goroutines (%.1f/agent), CPU %.0f %% of a core\n",
			lgProcs, gen.RSS>>20, float64(gen.RSS-genBase.RSS)/1024/float64(n), gen.HeapInuse>>20, gen.StackInuse>>20, gen.Goroutines, float64(gen.Goroutines)/float64(n),
			100*genCPU.Seconds()/window.Seconds())
		fmt.Printf("  streams dropped so far %d, reconnected %d; the load generator's heartbeats late by up to %s, %d skipped (the previous one still being sent); MemAvailable %d MiB [load %s]\n",
			gen.Dropped, gen.Reconnected, gen.Late.Round(time.Millisecond), gen.Skipped, memAvailable()>>20, loadAverage())
		b.ReportMetric(float64(totalRSS-sum(rss0))/1024/float64(n), "replica-KiB/agent")
		b.ReportMetric(connectTime.Seconds(), "s-to-connect")
		b.ReportMetric(hbs, "heartbeats/s")

		if jobs == 0 {
			continue
		}
		// Jobs: rate per second to random agents, enqueued through the
		// replicas in turn.
		var mu sync.Mutex
		sent := map[string]time.Time{}
		early := map[string]time.Time{}
		var lat []time.Duration
		done := make(chan struct{}, jobs)
		lg.setPicked(func(id string, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if t0, ok := sent[id]; ok {
				lat = append(lat, at.Sub(t0))
				delete(sent, id)
				done <- struct{}{}
			} else {
				early[id] = at
			}
		})
		ops := make([]imsv1connect.OperatorServiceClient, len(procs))
		for i, p := range procs {
			ops[i] = p.client()
			cpu0[i] = p.cpu(b)
		}
		pg = pgtest.WatchBackends(dsn)
		gen0, w0 = lg.snapshot(), time.Now()
		tick := time.NewTicker(time.Second / rate)
		// The enqueue calls are one at a time: on a saturated machine
		// they fall behind the ticker, and the rate reached is printed.
		calls := make([]time.Duration, 0, jobs)
		for i := range jobs {
			<-tick.C
			install := fmt.Sprintf("f%06d", rand.N(n))
			t0 := time.Now()
			r, err := ops[i%len(ops)].EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{Install: install, ComponentType: "action", Operation: "apply", Config: noop}))
			if err != nil {
				tick.Stop()
				b.Fatal(err)
			}
			calls = append(calls, time.Since(t0))
			mu.Lock()
			if at, ok := early[r.Msg.Job.Id]; ok {
				lat = append(lat, at.Sub(t0))
				delete(early, r.Msg.Job.Id)
				done <- struct{}{}
			} else {
				sent[r.Msg.Job.Id] = t0
			}
			mu.Unlock()
			if i%1000 == 999 {
				if why := guard.tripped() + lg.dead(); why != "" {
					tick.Stop()
					b.Fatalf("stopped in the job stream: %s", why)
				}
			}
		}
		tick.Stop()
		enqueued := time.Since(w0)
		slices.Sort(calls)
		fmt.Printf("jobs: %d enqueued in %s (%.0f/s of the %d/s asked); the enqueue call p50 %.1f ms, p99 %.1f ms [load %s]\n",
			jobs, enqueued.Round(time.Millisecond), float64(jobs)/enqueued.Seconds(), rate,
			float64(calls[len(calls)/2].Microseconds())/1000, float64(calls[len(calls)*99/100].Microseconds())/1000, loadAverage())
		deadline := time.After(60 * time.Second)
	wait:
		for got := 0; got < jobs; got++ {
			select {
			case <-done:
			case <-deadline:
				b.Errorf("only %d of %d jobs picked up within a minute of the last enqueue", got, jobs)
				break wait
			}
		}
		window = time.Since(w0)
		pgCPU = pg.Stop()
		gen1 = lg.snapshot()
		gen = total(gen1)
		totalCPU = 0
		for i, p := range procs {
			totalCPU += p.cpu(b) - cpu0[i]
		}
		mu.Lock()
		if len(lat) == 0 {
			mu.Unlock()
			b.Fatal("no job picked up")
		}
		q := func(f float64) float64 {
			return float64(lat[min(len(lat)-1, int(float64(len(lat))*f))].Microseconds()) / 1000
		}
		slices.Sort(lat)
		fmt.Printf("jobs: %d of %d picked up, asked at %d/s to random agents of %d, enqueued through the %d replicas in turn: pickup p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms; "+
			"replicas' CPU %.0f %% of a core, PostgreSQL's %.0f %% (heartbeats %.0f/s meanwhile, late by up to %s); streams dropped %d, reconnected %d [load %s]\n",
			len(lat), jobs, rate, n, len(procs), q(0.5), q(0.99), q(0.999), q(1), 100*totalCPU.Seconds()/window.Seconds(), 100*pgCPU.Seconds()/window.Seconds(),
			heartbeatRate(gen0, gen1), gen.Late.Round(time.Millisecond), gen.Dropped, gen.Reconnected, loadAverage())
		b.ReportMetric(q(0.5), "pickup-p50-ms")
		b.ReportMetric(q(0.99), "pickup-p99-ms")
		mu.Unlock()
		if d := gen.Dropped; d > 0 {
			b.Errorf("%d streams dropped while the fleet was connected", d)
		}
	}
}

// fleetSeed is one simulated agent's identity, as the store holds it.
type fleetSeed struct {
	id, install string
	key         ed25519.PrivateKey
}

// seedFleet writes an app, n installs (f000000...) and an enrolled agent
// for each into dsn's database through imsd's store, as CreateInstall and
// Enroll write them (the rows and their audit records), 32 at a time.
func seedFleet(b *testing.B, dsn string, n int) []fleetSeed {
	b.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	app := store.App{ID: auth.NewID("app_"), Name: "bench", CreatedAt: now}
	if err := s.CreateApp(ctx, app); err != nil {
		b.Fatal(err)
	}
	seeds := make([]fleetSeed, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					return
				}
				in := store.Install{ID: auth.NewID("ins_"), AppID: app.ID, Name: fmt.Sprintf("f%06d", i), Inputs: map[string]string{}, CreatedAt: now}
				hash := fmt.Sprintf("seed-%d", i)
				if err := s.CreateInstall(ctx, in, store.EnrollmentToken{Hash: hash, ExpiresAt: now.Add(time.Hour), CreatedAt: now}); err != nil {
					failed.Store(err)
					return
				}
				// A key derived from i: 100,000 keys from crypto/rand
				// would cost nothing more than time.
				var seed [ed25519.SeedSize]byte
				copy(seed[:], fmt.Sprintf("simulated-agent-%012d", i))
				key := ed25519.NewKeyFromSeed(seed[:])
				a, err := s.Enroll(ctx, hash, store.Agent{ID: auth.NewID("agt_"), PublicKey: key.Public().(ed25519.PublicKey), Hostname: "sim", EnrolledAt: now}, now)
				if err != nil {
					failed.Store(err)
					return
				}
				seeds[i] = fleetSeed{id: a.ID, install: in.Name, key: key}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("seed the fleet: %v", err)
	}
	return seeds
}

// simFleet is the agents of BenchmarkSimulatedFleet and what they share.
type simFleet struct {
	agents         []*simAgent
	hb             time.Duration
	pickedMu       sync.RWMutex
	picked         func(jobID string, at time.Time)
	heartbeatsSent atomic.Int64
	// dropped counts streams that ended while the fleet ran, reconnected
	// the agents' new streams after one.
	dropped, reconnected atomic.Int64
	// hbLate is how late the load generator sent a heartbeat at worst
	// (its own scheduling, on a busy machine).
	hbLate atomic.Int64
	// hbSkipped counts heartbeats not sent because the agent's previous
	// one was still being sent.
	hbSkipped atomic.Int64
}

// heartbeats sends every connected agent a heartbeat once per f.hb,
// spread evenly over the interval, from 32 goroutines (not one per
// agent: the load generator's memory is part of what is measured).
func (f *simFleet) heartbeats(ctx context.Context) {
	const workers = 32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []*simAgent
			for i := w; i < len(f.agents); i += workers {
				mine = append(mine, f.agents[i])
			}
			if len(mine) == 0 {
				return
			}
			gap := f.hb / time.Duration(len(mine))
			// Each worker starts at its own offset in the interval.
			t := time.Now().Add(f.hb * time.Duration(w) / workers / time.Duration(len(mine)))
			for {
				for _, a := range mine {
					t = t.Add(gap)
					if d := time.Until(t); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					} else if ctx.Err() != nil {
						return
					}
					if late := -time.Until(t); late > time.Duration(f.hbLate.Load()) {
						f.hbLate.Store(int64(late)) // a race between workers only loses a near-equal maximum
					}
					// Sent from a goroutine of its own: a send blocked
					// on one stream (HTTP/2 flow control, a replica
					// slow to read) must not hold back the other
					// agents' heartbeats, as one agentd's does not.
					// An agent whose last one is still being sent
					// skips this one, as agentd's would wait.
					if a.sending.CompareAndSwap(false, true) {
						go func() {
							defer a.sending.Store(false)
							if a.heartbeat() {
								f.heartbeatsSent.Add(1)
							}
						}()
					} else {
						f.hbSkipped.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// simAgent is one simulated agent: a benchAgent with its own transport
// (one TCP connection) and the stream it holds.
type simAgent struct {
	*benchAgent
	tr  *http.Transport
	mu  sync.Mutex
	st  *agentchannel.AgentStream
	seq uint64
	wid uint64
	// sending is set while a heartbeat is being sent.
	sending atomic.Bool
}

// transportKey carries an agent's own transport in its stream's context:
// the agents of a replica share one connect client (about 10 KiB of
// configuration each otherwise), which routes each request through the
// transport of the agent making it.
type transportKey struct{}

type agentTransport struct{}

func (agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return r.Context().Value(transportKey{}).(*http.Transport).RoundTrip(r)
}

// replicaClient is the agent client shared by the agents of the replica
// at url.
func replicaClient(url string) agentv1connect.AgentServiceClient {
	return agentv1connect.NewAgentServiceClient(&http.Client{Transport: agent.WholeMessages(agentTransport{})}, url)
}

// newSimAgent makes agent i of the fleet, on client (its replica's),
// dialling from loopback source address 127.0.0.(2 + i mod 16) with a
// transport of its own (agentd's).
func newSimAgent(s fleetSeed, client agentv1connect.AgentServiceClient, i int) *simAgent {
	tr := agent.NewTransport()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%16))}
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: local}).DialContext
	return &simAgent{tr: tr, benchAgent: &benchAgent{id: s.id, key: s.key, install: s.install, client: client}}
}

// heartbeat sends a heartbeat if the agent's stream is up.
func (a *simAgent) heartbeat() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st == nil {
		return false
	}
	a.seq++
	return a.st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: a.seq}}}) == nil
}

func (a *simAgent) send(m *agentv1.ConnectRequest) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Send(m)
}

// run says hello (retried on imsd's retry hint, as agentd does), reports
// on ready, then holds the stream as agentd does: an assignment is
// acked, and finished at once when imsd accepts the ack. A stream that
// ends before ctx counts as dropped, and the agent connects again after
// agentd's backoff (jittered, from 100ms).
func (a *simAgent) run(ctx context.Context, f *simFleet, ready chan<- error) {
	ctx = context.WithValue(ctx, transportKey{}, a.tr)
	st, err := a.helloAdmitted(ctx, false)
	if err != nil {
		ready <- err
		return
	}
	ready <- nil
	retry := backoff.New(100*time.Millisecond, 30*time.Second)
	for {
		a.hold(ctx, f, st)
		if ctx.Err() != nil {
			return
		}
		f.dropped.Add(1)
		for {
			if !backoff.Wait(ctx, retry.Next()) {
				return
			}
			if st, err = a.helloAdmitted(ctx, false); err == nil {
				f.reconnected.Add(1)
				retry.Reset()
				break
			}
		}
	}
}

// hold serves one stream until it ends.
func (a *simAgent) hold(ctx context.Context, f *simFleet, st *agentchannel.AgentStream) {
	a.mu.Lock()
	a.st = st
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.st = nil
		a.mu.Unlock()
	}()
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
			a.mu.Lock()
			a.wid++
			wid := a.wid
			a.mu.Unlock()
			a.send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
				WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED}}})
			continue
		}
		as := m.GetAssignment()
		if as == nil {
			continue
		}
		f.pickedMu.RLock()
		f.picked(as.JobId, time.Now())
		f.pickedMu.RUnlock()
		a.mu.Lock()
		a.wid++
		wid := a.wid
		a.mu.Unlock()
		acked[wid] = as
		a.send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: wid, JobId: as.JobId, FencingToken: as.FencingToken}}})
	}
}

// memGuard watches the machine's MemAvailable and the benchmark's
// processes' memory, once a second.
type memGuard struct {
	procs []*imsProc
	lg    atomic.Pointer[loadGen]
	why   atomic.Value
}

const (
	memFloor   = 4 << 30  // MemAvailable below this stops the benchmark
	memCeiling = 12 << 30 // the load generator and the replicas together
)

func watchMemory(b *testing.B) *memGuard {
	g := &memGuard{}
	stop := make(chan struct{})
	done := make(chan struct{})
	b.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if avail := memAvailable(); avail > 0 && avail < memFloor {
				g.why.CompareAndSwap(nil, fmt.Sprintf("MemAvailable %d MiB, under %d MiB", avail>>20, memFloor>>20))
			}
			used := selfRSS() + g.replicasRSS()
			if lg := g.lg.Load(); lg != nil {
				used += lg.rss()
			}
			if used > memCeiling {
				g.why.CompareAndSwap(nil, fmt.Sprintf("the load generator and the replicas hold %d MiB, over %d MiB", used>>20, memCeiling>>20))
			}
		}
	}()
	return g
}

func (g *memGuard) tripped() string {
	s, _ := g.why.Load().(string)
	return s
}

func (g *memGuard) replicasRSS() (sum int64) {
	for _, p := range g.procs {
		sum += procRSS(p.PID())
	}
	return sum
}

// memAvailable is the machine's MemAvailable in bytes (0: unknown).
func memAvailable() int64 { return procStatusKB("/proc/meminfo", "MemAvailable:") << 10 }

// selfRSS is this process's resident set in bytes.
func selfRSS() int64 { return procStatusKB("/proc/self/status", "VmRSS:") << 10 }

// procRSS is process pid's resident set in bytes (0 when it is gone).
func procRSS(pid int) int64 { return procStatusKB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") << 10 }

// procStatusKB reads a "Key:   123 kB" line of a /proc file.
func procStatusKB(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// raiseNofile raises this process's open-file limit to at least want
// (the imsd processes it starts inherit it): one descriptor per agent.
func raiseNofile(b *testing.B, want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= want {
		return
	}
	nl := syscall.Rlimit{Cur: max(want, lim.Cur), Max: max(want, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl); err != nil {
		b.Fatalf("raise the open-file limit to %d (now %d, hard %d): %v; raise the hard limit (ulimit -Hn, as root) or run fewer agents: one process holds one descriptor per agent", want, lim.Cur, lim.Max, err)
	}
}

// pgConnections counts dsn's database's connections by application
// name (each replica names itself).
func pgConnections(b *testing.B, dsn string) string {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 1`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var parts []string
	total := 0
	for rows.Next() {
		var name string
		var c int
		if err := rows.Scan(&name, &c); err != nil {
			b.Fatal(err)
		}
		total += c
		parts = append(parts, fmt.Sprintf("%s %d", name, c))
	}
	return fmt.Sprintf("%d connections (%s)", total, strings.Join(parts, ", "))
}

// fleetMetric is imsProc.metric, NaN when the replica does not answer
// (a run on a saturated machine once got EOF from one): the figures
// printed say so rather than the run ending without them.
func fleetMetric(p *imsProc, name string) float64 {
	r, err := http.Get(p.url + "/metrics")
	if err != nil {
		fmt.Printf("  %s: %v\n", p.url, err)
		return math.NaN()
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return math.NaN()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func sum(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}
