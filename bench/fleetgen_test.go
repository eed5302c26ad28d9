package bench

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// The load generator of BenchmarkSimulatedFleet runs in worker
// processes: the test binary run again (os.Args[0]) with only
// TestFleetWorker and fleetWorkerEnv set, each holding a slice of the
// agents. One process holds one socket per agent, and a container's
// open-file limit (20,000 per process where the benchmark was first run,
// and not raisable without CAP_SYS_RESOURCE) caps what one process can
// hold. The parent writes the worker its configuration and then commands
// as JSON on its stdin; the worker reports on descriptor 3, one JSON
// object a line: its counters every 250 ms, each job an agent picked with
// the wall-clock time (comparable across the processes of one machine),
// and its agents' first failed hellos. A worker exits when its stdin
// closes or its parent dies (Pdeathsig).
const fleetWorkerEnv = "BYOC_BENCH_FLEET_WORKER"

// fleetAgentsPerProc is how many agents one load-generator process holds
// unless BYOC_BENCH_LOADGEN_PROCS says how many processes.
const fleetAgentsPerProc = 18000

// workerConfig is what the parent writes a worker first.
type workerConfig struct {
	// URLs are the replicas': agent I connects to URLs[I mod len].
	URLs        []string
	Heartbeat   time.Duration
	ConnectMax  int
	HeapProfile string `json:",omitempty"`
	Agents      []workerAgent
}

// workerAgent is one agent of a worker: I is its index in the fleet,
// which derives its key (fleetKey), replica and source address.
type workerAgent struct {
	I           int
	ID, Install string
}

// workerCommand is a command from the parent after the configuration.
type workerCommand struct {
	// GC: collect garbage, write the heap profile if configured, then
	// report (Status.GCs counts them).
	GC bool `json:",omitempty"`
}

// workerReport is one line a worker writes.
type workerReport struct {
	Status *workerStatus `json:",omitempty"`
	Picked string        `json:",omitempty"`
	At     int64         `json:",omitempty"` // Picked's time, Unix ns
	Err    string        `json:",omitempty"`
}

// workerStatus is a worker's counters; At is when it took them.
type workerStatus struct {
	At                                        int64
	Connected, Failed                         int64
	Heartbeats, Skipped, Dropped, Reconnected int64
	Late                                      time.Duration
	CPU                                       time.Duration
	RSS, HeapInuse, StackInuse                int64
	Goroutines, GCs                           int64
}

// fleetKey is agent i's key: derived from i, as seedFleet enrols it.
func fleetKey(i int) ed25519.PrivateKey {
	var seed [ed25519.SeedSize]byte
	copy(seed[:], fmt.Sprintf("simulated-agent-%012d", i))
	return ed25519.NewKeyFromSeed(seed[:])
}

// TestFleetWorker is a load-generator process of BenchmarkSimulatedFleet;
// it skips unless the benchmark started it.
func TestFleetWorker(t *testing.T) {
	if os.Getenv(fleetWorkerEnv) == "" {
		t.Skip("a load-generator process BenchmarkSimulatedFleet starts")
	}
	// Ends the process: the agents' goroutines are not stopped one by one.
	os.Exit(runFleetWorker())
}

func runFleetWorker() int {
	out := os.NewFile(3, "reports")
	var outMu sync.Mutex
	enc := json.NewEncoder(out)
	report := func(r workerReport) {
		outMu.Lock()
		defer outMu.Unlock()
		if enc.Encode(r) != nil {
			os.Exit(1) // the parent is gone
		}
	}
	dec := json.NewDecoder(bufio.NewReaderSize(os.Stdin, 1<<20))
	var cfg workerConfig
	if err := dec.Decode(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fleet worker: read the configuration: %v\n", err)
		return 1
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(len(cfg.Agents))+100 {
		fmt.Fprintf(os.Stderr, "fleet worker: open-file limit %d for %d agents\n", lim.Cur, len(cfg.Agents))
		return 1
	}

	f := &simFleet{hb: cfg.Heartbeat}
	f.picked = func(id string, at time.Time) { report(workerReport{Picked: id, At: at.UnixNano()}) }
	clients := make([]agentv1connect.AgentServiceClient, len(cfg.URLs))
	for i, u := range cfg.URLs {
		clients[i] = replicaClient(u)
	}
	f.agents = make([]*simAgent, len(cfg.Agents))
	for j, a := range cfg.Agents {
		f.agents[j] = newSimAgent(fleetSeed{id: a.ID, install: a.Install, key: fleetKey(a.I)}, clients[a.I%len(clients)], a.I)
	}
	cfg.Agents = nil
	ctx := context.Background()
	go f.heartbeats(ctx)

	var connected, failed, gcs atomic.Int64
	status := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		report(workerReport{Status: &workerStatus{
			At: time.Now().UnixNano(), Connected: connected.Load(), Failed: failed.Load(),
			Heartbeats: f.heartbeatsSent.Load(), Skipped: f.hbSkipped.Load(), Dropped: f.dropped.Load(), Reconnected: f.reconnected.Load(),
			Late: time.Duration(f.hbLate.Load()), CPU: selfCPU(), RSS: selfRSS(), HeapInuse: int64(ms.HeapInuse), StackInuse: int64(ms.StackInuse),
			Goroutines: int64(runtime.NumGoroutine()), GCs: gcs.Load(),
		}})
	}
	status() // the baseline, before any agent
	go func() {
		for range time.Tick(250 * time.Millisecond) {
			status()
		}
	}()

	slots := make(chan struct{}, max(1, cfg.ConnectMax))
	ready := make(chan error, len(f.agents))
	go func() {
		for _, a := range f.agents {
			slots <- struct{}{}
			go a.run(ctx, f, ready)
		}
	}()
	go func() {
		for range f.agents {
			err := <-ready
			<-slots
			if err != nil {
				if failed.Add(1) <= 3 {
					report(workerReport{Err: err.Error()})
				}
				continue
			}
			connected.Add(1)
		}
	}()

	for {
		var c workerCommand
		if err := dec.Decode(&c); err != nil {
			return 0 // stdin closed: the parent is done
		}
		if c.GC {
			runtime.GC()
			if cfg.HeapProfile != "" {
				if hf, err := os.Create(cfg.HeapProfile); err == nil {
					pprof.WriteHeapProfile(hf)
					hf.Close()
				}
			}
			gcs.Add(1)
			status()
		}
	}
}

// loadGen is the parent's side of the load-generator processes.
type loadGen struct {
	workers  []*fleetWorker
	pickedMu sync.RWMutex
	picked   func(jobID string, at time.Time)
	errs     atomic.Int64
}

// fleetWorker is one load-generator process.
type fleetWorker struct {
	cmd    *exec.Cmd
	enc    *json.Encoder
	in     interface{ Close() error }
	agents int
	mu     sync.Mutex
	first  *workerStatus
	last   workerStatus
	exited chan struct{}
	err    error
}

// startLoadGen starts procs worker processes, agents split evenly among
// them in order, connectMax handshakes in flight shared among them; the
// benchmark's cleanup kills them.
func startLoadGen(b *testing.B, procs int, seeds []fleetSeed, urls []string, hb time.Duration, connectMax int) *loadGen {
	b.Helper()
	lg := &loadGen{picked: func(string, time.Time) {}}
	b.Cleanup(func() {
		for _, w := range lg.workers {
			w.in.Close()
			w.cmd.Process.Kill()
		}
		for _, w := range lg.workers {
			<-w.exited
		}
	})
	n := len(seeds)
	for k := range procs {
		lo, hi := k*n/procs, (k+1)*n/procs
		cfg := workerConfig{URLs: urls, Heartbeat: hb, ConnectMax: max(1, connectMax/procs)}
		if p := os.Getenv("BYOC_BENCH_HEAPPROFILE"); p != "" {
			cfg.HeapProfile = fmt.Sprintf("%s.%d", p, k+1)
		}
		for i := lo; i < hi; i++ {
			cfg.Agents = append(cfg.Agents, workerAgent{I: i, ID: seeds[i].id, Install: seeds[i].install})
		}
		r, wr, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestFleetWorker$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), fleetWorkerEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.ExtraFiles = []*os.File{wr}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			r.Close()
			wr.Close()
			b.Fatalf("start load-generator process %d: %v", k+1, err)
		}
		wr.Close()
		w := &fleetWorker{cmd: cmd, in: in, enc: json.NewEncoder(in), agents: hi - lo, exited: make(chan struct{})}
		lg.workers = append(lg.workers, w)
		go lg.read(w, r, k+1)
		if err := w.enc.Encode(cfg); err != nil {
			b.Fatalf("configure load-generator process %d: %v", k+1, err)
		}
	}
	return lg
}

// read reads worker k's reports until it exits.
func (lg *loadGen) read(w *fleetWorker, r *os.File, k int) {
	defer close(w.exited)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m workerReport
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fmt.Printf("load-generator process %d: %v\n", k, err)
			continue
		}
		switch {
		case m.Status != nil:
			w.mu.Lock()
			if w.first == nil {
				w.first = m.Status
			}
			w.last = *m.Status
			w.mu.Unlock()
		case m.Picked != "":
			lg.pickedMu.RLock()
			lg.picked(m.Picked, time.Unix(0, m.At))
			lg.pickedMu.RUnlock()
		case m.Err != "":
			if lg.errs.Add(1) <= 3 {
				fmt.Printf("hello failed (load-generator process %d): %s\n", k, m.Err)
			}
		}
	}
	r.Close()
	err := w.cmd.Wait()
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

func (lg *loadGen) setPicked(fn func(string, time.Time)) {
	lg.pickedMu.Lock()
	lg.picked = fn
	lg.pickedMu.Unlock()
}

// dead says which worker has exited, if one has.
func (lg *loadGen) dead() string {
	for k, w := range lg.workers {
		select {
		case <-w.exited:
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Sprintf("load-generator process %d exited: %v", k+1, w.err)
		default:
		}
	}
	return ""
}

// snapshot is every worker's last status.
func (lg *loadGen) snapshot() []workerStatus {
	s := make([]workerStatus, len(lg.workers))
	for k, w := range lg.workers {
		w.mu.Lock()
		s[k] = w.last
		w.mu.Unlock()
	}
	return s
}

// baseline is every worker's first status, before its agents.
func (lg *loadGen) baseline() []workerStatus {
	s := make([]workerStatus, len(lg.workers))
	for k, w := range lg.workers {
		w.mu.Lock()
		if w.first != nil {
			s[k] = *w.first
		}
		w.mu.Unlock()
	}
	return s
}

// gc makes every worker collect its garbage and waits for their reports.
func (lg *loadGen) gc(b *testing.B) []workerStatus {
	b.Helper()
	before := lg.snapshot()
	for k, w := range lg.workers {
		if err := w.enc.Encode(workerCommand{GC: true}); err != nil {
			b.Fatalf("load-generator process %d: %v", k+1, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s := lg.snapshot()
		done := true
		for k := range s {
			done = done && s[k].GCs > before[k].GCs
		}
		if done {
			return s
		}
		if why := lg.dead(); why != "" {
			b.Fatal(why)
		}
		if time.Now().After(deadline) {
			b.Fatal("the load-generator processes did not report after a GC within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// total sums statuses (Late: the worst).
func total(s []workerStatus) (t workerStatus) {
	for _, x := range s {
		t.Connected += x.Connected
		t.Failed += x.Failed
		t.Heartbeats += x.Heartbeats
		t.Skipped += x.Skipped
		t.Dropped += x.Dropped
		t.Reconnected += x.Reconnected
		t.Late = max(t.Late, x.Late)
		t.CPU += x.CPU
		t.RSS += x.RSS
		t.HeapInuse += x.HeapInuse
		t.StackInuse += x.StackInuse
		t.Goroutines += x.Goroutines
	}
	return t
}

// heartbeatRate is the heartbeats per second the workers sent between
// two snapshots, each over its own clock's interval.
func heartbeatRate(from, to []workerStatus) float64 {
	var r float64
	for k := range from {
		if d := time.Duration(to[k].At - from[k].At); d > 0 {
			r += float64(to[k].Heartbeats-from[k].Heartbeats) / d.Seconds()
		}
	}
	return r
}

// rss is the workers' resident sets together, in bytes.
func (lg *loadGen) rss() (sum int64) {
	for _, w := range lg.workers {
		sum += procRSS(w.cmd.Process.Pid)
	}
	return sum
}
