package dispatch

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/byoc-dev/byoc/imsd/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSession is an agent stream as the hub sees it: a slot counter like
// agentapi's (capacity less what is reserved), and a record of every call.
type fakeSession struct {
	cap  int64
	free atomic.Int64

	mu        sync.Mutex
	wakes     int
	cancels   []CancelRequest
	delivered []store.Job
	replaced  chan struct{}
}

func newFake(slots int64) *fakeSession {
	f := &fakeSession{cap: slots, replaced: make(chan struct{})}
	f.free.Store(slots)
	return f
}

func (f *fakeSession) handlers() Handlers {
	return Handlers{
		Wake: func() { f.mu.Lock(); f.wakes++; f.mu.Unlock() },
		Cancel: func(r CancelRequest) {
			f.mu.Lock()
			f.cancels = append(f.cancels, r)
			f.mu.Unlock()
		},
		Replaced: func() { close(f.replaced) },
		Reserve: func() bool {
			for {
				n := f.free.Load()
				if n <= 0 {
					return false
				}
				if f.free.CompareAndSwap(n, n-1) {
					return true
				}
			}
		},
		Release: func() {
			if f.free.Add(1) > f.cap {
				panic("a slot released twice")
			}
		},
		Deliver: func(j store.Job) {
			f.mu.Lock()
			f.delivered = append(f.delivered, j)
			f.mu.Unlock()
		},
	}
}

func (f *fakeSession) wakeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wakes
}

// fired reports whether ch is closed, without waiting.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWakeSignalsTheInstallsSessionsAndMarksIt(t *testing.T) {
	h := NewHub()
	a1, a2, b := newFake(1), newFake(1), newFake(1)
	h.Register("agt_a1", "ins_a", a1.handlers())
	h.Register("agt_a2", "ins_a", a2.handlers())
	h.Register("agt_b", "ins_b", b.handlers())

	h.Wake("ins_a")
	if a1.wakeCount() != 1 || a2.wakeCount() != 1 || b.wakeCount() != 0 {
		t.Fatalf("wakes a1=%d a2=%d b=%d; want 1 1 0", a1.wakeCount(), a2.wakeCount(), b.wakeCount())
	}
	if !h.TakeQueued("ins_a") {
		t.Fatal("TakeQueued(ins_a) = false after Wake; want true")
	}
	if h.TakeQueued("ins_a") {
		t.Fatal("TakeQueued(ins_a) = true twice; the mark must clear when taken")
	}
	if h.TakeQueued("ins_b") {
		t.Fatal("TakeQueued(ins_b) = true; only ins_a was woken")
	}

	// An install without sessions is not marked: its first session claims
	// everything queued when it connects.
	fleet := h.FleetSignal()
	h.Wake("ins_none")
	if h.TakeQueued("ins_none") {
		t.Fatal("an install without sessions was marked as having queued jobs")
	}
	if !fired(fleet) {
		t.Fatal("Wake (an enqueue) did not fire the fleet signal")
	}
}

func TestReserveHandsOverAndReleases(t *testing.T) {
	h := NewHub()
	f := newFake(1)
	s := h.Register("agt_a", "ins_a", f.handlers())

	got := h.Reserve("ins_a")
	if got != s {
		t.Fatalf("Reserve = %v; want the agent's session", got)
	}
	if f.free.Load() != 0 {
		t.Fatalf("free slots after Reserve = %d; want 0", f.free.Load())
	}
	if again := h.Reserve("ins_a"); again != nil {
		t.Fatalf("Reserve with no free slot = %v; want nil", again)
	}
	got.Deliver(store.Job{ID: "job_1", InstallID: "ins_a", State: store.JobAssigned})
	if len(f.delivered) != 1 || f.delivered[0].ID != "job_1" {
		t.Fatalf("delivered %v; want job_1", f.delivered)
	}

	// A job stored queued after all gives its slot back.
	f.free.Add(1) // job_1 ended
	s2 := h.Reserve("ins_a")
	s2.Release()
	if f.free.Load() != 1 {
		t.Fatalf("free slots after Release = %d; want 1", f.free.Load())
	}
	if h.Reserve("ins_other") != nil {
		t.Fatal("Reserve for an install with no session returned one")
	}
}

func TestReserveWaitsForQueuedJobsFirst(t *testing.T) {
	h := NewHub()
	f := newFake(4)
	h.Register("agt_a", "ins_a", f.handlers())
	h.Wake("ins_a") // jobs were stored queued: they go first, by claim
	if s := h.Reserve("ins_a"); s != nil {
		t.Fatal("Reserve handed a new job over while the install may have queued jobs")
	}
	if f.free.Load() != 4 {
		t.Fatalf("a refused Reserve took a slot: %d free; want 4", f.free.Load())
	}
	h.TakeQueued("ins_a") // the session looked at the queue
	if s := h.Reserve("ins_a"); s == nil {
		t.Fatal("Reserve refused after the queued mark was taken")
	}
}

func TestReserveSkipsFullSessions(t *testing.T) {
	h := NewHub()
	full, free := newFake(0), newFake(1)
	h.Register("agt_full", "ins_a", full.handlers())
	want := h.Register("agt_free", "ins_a", free.handlers())
	for range 3 { // the walk starts anywhere: whichever comes first, the free one wins
		got := h.Reserve("ins_a")
		if got != want {
			t.Fatalf("Reserve = %v; want the session with a free slot", got)
		}
		got.Release()
	}
	// A session without a Reserve handler never takes jobs at enqueue.
	h2 := NewHub()
	hs := newFake(1).handlers()
	hs.Reserve = nil
	h2.Register("agt_x", "ins_x", hs)
	if h2.Reserve("ins_x") != nil {
		t.Fatal("Reserve used a session without a Reserve handler")
	}
}

func TestRegisterReplacesTheAgentsOlderSession(t *testing.T) {
	h := NewHub()
	old, cur := newFake(1), newFake(1)
	so := h.Register("agt_a", "ins_a", old.handlers())
	sn := h.Register("agt_a", "ins_a", cur.handlers())
	select {
	case <-old.replaced:
	case <-time.After(10 * time.Second):
		t.Fatal("the older session was not told it was replaced")
	}
	if fired(cur.replaced) {
		t.Fatal("the newer session was told it was replaced")
	}
	if h.Count() != 1 || h.InstallConnected("ins_a") != 1 || !h.Connected("agt_a") {
		t.Fatalf("count %d, install connected %d, connected %v; want 1 1 true", h.Count(), h.InstallConnected("ins_a"), h.Connected("agt_a"))
	}
	// The old stream's own Unregister, arriving late, must not remove the
	// new one.
	h.Unregister(so)
	if !h.Connected("agt_a") || h.Reserve("ins_a") != sn {
		t.Fatal("unregistering the replaced session removed its replacement")
	}
	sn.Release()
	h.Wake("ins_a")
	h.Unregister(sn)
	if h.Connected("agt_a") || h.Count() != 0 || h.InstallConnected("ins_a") != 0 {
		t.Fatal("the agent is still connected after its session left")
	}
	if h.TakeQueued("ins_a") {
		t.Fatal("an install whose last session left kept its queued mark")
	}
}

func TestCancelReachesOnlyTheConnectedAgent(t *testing.T) {
	h := NewHub()
	f := newFake(1)
	h.Register("agt_a", "ins_a", f.handlers())
	req := CancelRequest{JobID: "job_1", Reason: "operator"}
	if !h.Cancel("agt_a", req) {
		t.Fatal("Cancel to a connected agent reported it was not connected")
	}
	if len(f.cancels) != 1 || f.cancels[0] != req {
		t.Fatalf("cancels %v; want [%v]", f.cancels, req)
	}
	if h.Cancel("agt_elsewhere", req) {
		t.Fatal("Cancel to an agent connected elsewhere reported it was delivered")
	}
}

// With several replicas, a cancellation for an agent not connected here
// is passed on (SetElsewhere), and one passed on from elsewhere is only
// delivered here (CancelHere), never passed on again.
func TestCancelForAnAgentElsewhereIsPassedOnOnce(t *testing.T) {
	h := NewHub()
	f := newFake(1)
	h.Register("agt_a", "ins_a", f.handlers())
	var passed []string
	h.SetElsewhere(func(agentID string, r CancelRequest) { passed = append(passed, agentID+"/"+r.JobID) })
	h.Cancel("agt_a", CancelRequest{JobID: "job_1"})
	h.Cancel("agt_b", CancelRequest{JobID: "job_2"})
	if len(passed) != 1 || passed[0] != "agt_b/job_2" {
		t.Fatalf("passed on %v; want only agt_b/job_2 (agt_a is connected here)", passed)
	}
	if h.CancelHere("agt_c", CancelRequest{JobID: "job_3"}) || len(passed) != 1 {
		t.Fatalf("CancelHere for an agent not here: passed on %v; want it dropped", passed)
	}
	if !h.CancelHere("agt_a", CancelRequest{JobID: "job_4"}) || len(f.cancels) != 2 {
		t.Fatalf("CancelHere for agt_a: its cancels %v; want job_1 and job_4", f.cancels)
	}
}

func TestLogSignal(t *testing.T) {
	h := NewHub()
	ch1, ch2 := h.LogSignal("job_1"), h.LogSignal("job_1")
	other := h.LogSignal("job_2")
	if ch1 != ch2 {
		t.Fatal("two followers of one job got different signals")
	}
	if fired(ch1) {
		t.Fatal("the log signal fired before any line")
	}
	h.NotifyLog("job_1")
	if !fired(ch1) {
		t.Fatal("NotifyLog did not wake the job's followers")
	}
	if fired(other) {
		t.Fatal("NotifyLog woke another job's followers")
	}
	if next := h.LogSignal("job_1"); fired(next) {
		t.Fatal("the signal after a notification is already fired")
	}
	h.NotifyLog("job_none") // no followers: nothing to do, no panic
}

func TestFleetSignalFiresOnEveryChange(t *testing.T) {
	h := NewHub()
	f := newFake(1)
	var s *Session
	for _, step := range []struct {
		name string
		do   func()
	}{
		{"register", func() { s = h.Register("agt_a", "ins_a", f.handlers()) }},
		{"wake", func() { h.Wake("ins_a") }},
		{"fleet changed", h.FleetChanged},
		{"unregister", func() { h.Unregister(s) }},
	} {
		ch := h.FleetSignal()
		if fired(ch) {
			t.Fatalf("%s: the fleet signal fired before the change", step.name)
		}
		step.do()
		if !fired(ch) {
			t.Fatalf("%s: the fleet signal did not fire", step.name)
		}
	}
	ch := h.FleetSignal()
	h.Reserve("ins_a")
	h.TakeQueued("ins_a")
	h.Cancel("agt_a", CancelRequest{})
	if fired(ch) {
		t.Fatal("the fleet signal fired without a change")
	}
}

// TestReserveNeverOverbooks runs enqueues, hand-overs, finished jobs and
// sessions coming and going at once (run it with -race): a session's slots
// never go below zero, and when everything has ended every slot is free
// again.
func TestReserveNeverOverbooks(t *testing.T) {
	h := NewHub()
	const agents, slots, enqueuers, perEnqueuer = 8, 3, 8, 300
	fakes := make([]*fakeSession, agents)
	for i := range fakes {
		fakes[i] = newFake(slots)
		h.Register(fmt.Sprintf("agt_%d", i), "ins_a", fakes[i].handlers())
	}
	var handed, refused atomic.Int64
	var wg sync.WaitGroup
	for e := range enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perEnqueuer {
				s := h.Reserve("ins_a")
				if s == nil {
					refused.Add(1)
					continue
				}
				handed.Add(1)
				if i%2 == 1 {
					s.Deliver(store.Job{ID: fmt.Sprintf("job_%d_%d", e, i)})
				}
				// Stored queued after all, or the delivered job ended: the
				// slot is free again.
				s.Release()
			}
		}()
	}
	// Meanwhile one agent reconnects over and over.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			s := h.Register("agt_flappy", "ins_a", newFake(1).handlers())
			if r := h.Reserve("ins_a"); r != nil {
				r.Release()
			}
			h.Unregister(s)
		}
	}()
	wg.Wait()
	delivered := 0
	for i, f := range fakes {
		delivered += len(f.delivered)
		if free := f.free.Load(); free != slots {
			t.Errorf("agent %d: %d free slots after every job ended; want %d", i, free, slots)
		}
	}
	if handed.Load() < enqueuers*perEnqueuer/2 {
		t.Fatalf("only %d of %d enqueues were handed over, with slots free", handed.Load(), enqueuers*perEnqueuer)
	}
	t.Logf("%d handed over (%d delivered), %d refused", handed.Load(), delivered, refused.Load())
}

// TestInstallSessionsSpreadAndLeave: an install's sessions kept in a slice
// (not a map) still spread enqueue hand-overs over its agents, and one
// leaving takes out only itself.
func TestInstallSessionsSpreadAndLeave(t *testing.T) {
	h := NewHub()
	fakes := []*fakeSession{newFake(1000), newFake(1000), newFake(1000)}
	var ss []*Session
	for i, f := range fakes {
		ss = append(ss, h.Register(fmt.Sprintf("agt_%d", i), "ins_a", f.handlers()))
	}
	h.Unregister(ss[1])
	if n := h.InstallConnected("ins_a"); n != 2 {
		t.Fatalf("InstallConnected after one of three left = %d; want 2", n)
	}
	h.Wake("ins_a")
	if w := [3]int{fakes[0].wakeCount(), fakes[1].wakeCount(), fakes[2].wakeCount()}; w != [3]int{1, 0, 1} {
		t.Fatalf("wakes %v; want 1 0 1 (the one that left is not woken)", w)
	}
	h.TakeQueued("ins_a")
	got := map[*Session]int{}
	for range 200 {
		s := h.Reserve("ins_a")
		if s == nil || s == ss[1] {
			t.Fatalf("Reserve = %v; want one of the two connected sessions", s)
		}
		got[s]++
	}
	if got[ss[0]] == 0 || got[ss[2]] == 0 {
		t.Fatalf("200 hand-overs went %d and %d to the install's two agents; want both used", got[ss[0]], got[ss[2]])
	}
	h.Unregister(ss[0])
	h.Unregister(ss[2])
	if n := h.InstallConnected("ins_a"); n != 0 || h.InstallSession("ins_a") != nil {
		t.Fatalf("after all left: InstallConnected %d, InstallSession %v; want 0, nil", n, h.InstallSession("ins_a"))
	}
}
