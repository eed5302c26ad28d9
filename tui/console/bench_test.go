package console

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// timed wraps the console to time every View call the program makes.
type timed struct {
	m     *Model
	mu    *sync.Mutex
	views *[]time.Duration
}

func (t timed) Init() tea.Cmd { return t.m.Init() }
func (t timed) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := t.m.Update(msg)
	return t, cmd
}
func (t timed) View() tea.View {
	start := time.Now()
	v := t.m.View()
	d := time.Since(start)
	t.mu.Lock()
	*t.views = append(*t.views, d)
	t.mu.Unlock()
	return v
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFleet10k runs the real console program (Bubble Tea renderer and
// all, output discarded) on a 200×50 window with 10,000 and 100,000
// installs, idle and then with 100 install updates per second pushed as
// watch messages, and prints View p50/p99/max and the process CPU of each phase. Run it with
//
//	go test -run '^$' -bench Fleet10k -benchtime 1x ./tui/console/
//
// BYOC_BENCH_SECONDS changes the length of each phase (default 5).
func BenchmarkFleet10k(b *testing.B) {
	phase := 5 * time.Second
	if s := os.Getenv("BYOC_BENCH_SECONDS"); s != "" {
		var n int
		fmt.Sscan(s, &n)
		phase = time.Duration(n) * time.Second
	}
	for _, n := range []int{10_000, 100_000} {
		for _, sortBy := range []string{"name", "heartbeat"} {
			b.Run(fmt.Sprintf("installs=%d/sort=%s", n, sortBy), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					benchFleet(b, phase, sortBy, n)
				}
			})
		}
	}
}

func benchFleet(b *testing.B, phase time.Duration, sortBy string, n int) {
	m := newTestModel(b, Options{Now: time.Now})
	snap := &imsv1.WatchInstallsResponse{Snapshot: true}
	now := time.Now()
	for i := 0; i < n; i++ {
		agent := []string{"online", "offline", "none"}[i%3]
		s := status(fmt.Sprintf("install-%05d", i), []string{"shop", "billing", "search"}[i%3], agent, time.Duration(i)*time.Millisecond, int32(i%2), int32(i%3), map[string]string{"region": "eu-west-1"})
		if s.Install.Agent != nil {
			s.Install.Agent.LastSeenTime = timestamppb.New(now.Add(-time.Duration(i) * time.Millisecond))
		}
		snap.Installs = append(snap.Installs, s)
	}
	feed(m, snap)
	for sortKeys[m.fleet.sortBy] != sortBy {
		press(m, "s")
	}
	var mu sync.Mutex
	var views []time.Duration
	in, inW := io.Pipe()
	defer inW.Close()
	p := tea.NewProgram(timed{m, &mu, &views}, tea.WithInput(in), tea.WithOutput(io.Discard),
		tea.WithoutSignalHandler(), tea.WithContext(context.Background()))
	done := make(chan struct{})
	go func() { p.Run(); close(done) }()
	p.Send(tea.WindowSizeMsg{Width: 200, Height: 50})
	time.Sleep(500 * time.Millisecond) // let the first frames render
	runtime.GC()

	measure := func(name string, load func(stop <-chan struct{})) {
		mu.Lock()
		views = views[:0]
		mu.Unlock()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if load != nil {
			wg.Add(1)
			go func() { defer wg.Done(); load(stop) }()
		}
		c0, t0 := cpuTime(), time.Now()
		time.Sleep(phase)
		c1, t1 := cpuTime(), time.Now()
		close(stop)
		wg.Wait()
		mu.Lock()
		d := slices.Clone(views)
		mu.Unlock()
		slices.Sort(d)
		pct := func(q float64) time.Duration {
			if len(d) == 0 {
				return 0
			}
			return d[min(len(d)-1, int(q*float64(len(d))))]
		}
		cpu := 100 * float64(c1-c0) / float64(t1.Sub(t0))
		target := ""
		if load == nil {
			target = " (target < 1%)"
		}
		fmt.Printf("console, %d installs, 200x50, sort by %s, %s: %d frames, View p50 %s p99 %s max %s, CPU %.2f%% of one core%s\n",
			n, sortBy, name, len(d), pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond), cpu, target)
		unit := strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), "/", "per")
		b.ReportMetric(float64(pct(0.99).Microseconds())/1000, unit+"-view-p99-ms")
		b.ReportMetric(cpu, unit+"-cpu-%")
	}
	measure("idle", nil)
	measure("100 updates/s", func(stop <-chan struct{}) {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			s := snap.Installs[rand.N(n)]
			c := &imsv1.InstallStatus{Install: s.Install, AppName: s.AppName, RunningJobs: rand.N(int32(3)), QueuedJobs: rand.N(int32(3))}
			if s.Install.Agent != nil {
				in := proto.Clone(s.Install).(*imsv1.Install)
				in.Agent.LastSeenTime = timestamppb.Now()
				c.Install = in
			}
			p.Send(fleetMsg{gen: m.fleetGen, events: []fleetEvent{{resp: &imsv1.WatchInstallsResponse{Installs: []*imsv1.InstallStatus{c}}}}})
		}
	})
	p.Quit()
	<-done
	fmt.Printf("machine: %d CPUs, %s\n", runtime.NumCPU(), runtime.Version())
}
