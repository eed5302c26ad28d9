// Package dispatch keeps track of the agents connected to this imsd and wakes
// them when there is work: an enqueue signals the install's sessions at once,
// so pickup takes one round trip, never a polling interval. At enqueue it can
// also hand a whole job to a connected agent with a free slot (Reserve, then
// the session's Deliver), so the job is stored already assigned and needs no
// claim. It fans out "new log lines" signals to log followers and a fleet
// signal to fleet watchers. The database stays the only source of truth:
// losing a wake-up or a hand-over costs latency, never correctness (sessions
// re-check on every heartbeat, and an assignment that never reaches its
// agent is requeued when its lease expires).
package dispatch

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/byoc-dev/byoc/imsd/store"
)

// Session is one connected agent stream as the hub sees it. The hub may
// call its Agent's methods with the hub's lock held: they must not block
// and must not call back into the hub synchronously.
type Session struct {
	AgentID   string
	InstallID string
	Agent
}

// Agent is how the hub reaches a session: the agent API's stream (its
// own type: one interface value per session, where a struct of func
// values cost seven closures and a larger Session for every idle agent,
// docs/performance-storm.md 2026-11-29), or Handlers. An idle agent stream
// owns no goroutine of its own besides the one reading it, so the hub
// signals a session by calling it rather than through a channel someone
// must watch.
type Agent interface {
	// Wake is called when the install may have queued jobs.
	Wake()
	// Cancel is called when an operator cancels one of the agent's jobs.
	Cancel(CancelRequest)
	// Replaced is called when a newer stream of the same agent registers.
	Replaced()
	// Reserve takes one of the agent's free job slots for a job about to
	// be handed to it at enqueue (Hub.Reserve), and reports whether it had
	// one. It must not block: it runs under the hub's lock.
	Reserve() bool
	// Release gives back the slot Reserve took, when the job was not
	// handed over after all.
	Release()
	// Deliver passes the agent a job stored as assigned to it, in the slot
	// Reserve took. If the stream is gone by then, the job waits for its
	// lease to expire, as any assignment lost on the way does.
	Deliver(store.Job)
	// Push sends msg (an *agentv1.ConnectResponse: a support shell's
	// open or input) on the stream now; it may block on the stream's
	// writes, never on the hub.
	Push(msg any) error
}

// Handlers is an Agent made of functions (tests, and callers with no type
// of their own); a nil function does nothing (Reserve: no slot; Push: an
// error).
type Handlers struct {
	Wake     func()
	Cancel   func(CancelRequest)
	Replaced func()
	Reserve  func() bool
	Release  func()
	Deliver  func(store.Job)
	Push     func(msg any) error
}

// handlerFuncs gives Handlers the Agent's methods (a struct cannot have
// a field and a method of one name).
type handlerFuncs struct{ h Handlers }

func (f *handlerFuncs) Wake() {
	if f.h.Wake != nil {
		f.h.Wake()
	}
}

func (f *handlerFuncs) Cancel(r CancelRequest) {
	if f.h.Cancel != nil {
		f.h.Cancel(r)
	}
}

func (f *handlerFuncs) Replaced() {
	if f.h.Replaced != nil {
		f.h.Replaced()
	}
}

func (f *handlerFuncs) Reserve() bool { return f.h.Reserve != nil && f.h.Reserve() }

func (f *handlerFuncs) Release() {
	if f.h.Release != nil {
		f.h.Release()
	}
}

func (f *handlerFuncs) Deliver(j store.Job) {
	if f.h.Deliver != nil {
		f.h.Deliver(j)
	}
}

// errNoPush is Push on a session whose Handlers have none.
var errNoPush = errors.New("this session takes no pushes")

func (f *handlerFuncs) Push(msg any) error {
	if f.h.Push == nil {
		return errNoPush
	}
	return f.h.Push(msg)
}

// CancelRequest asks an agent to stop a job.
type CancelRequest struct {
	JobID  string
	Reason string
}

// Hub is the registry of connected sessions. It is safe for concurrent use.
type Hub struct {
	mu sync.Mutex
	// byInstall holds each install's sessions: a slice, not a set, since
	// an install has one agent or a few (a set of one cost a map per
	// idle agent). Hub.sessions walks it from a random start, as the map
	// it replaced was walked in random order.
	byInstall map[string][]*Session
	byAgent   map[string]*Session
	logs      map[string]chan struct{} // job id -> closed on new lines
	// queued marks installs that may have queued jobs. Wake sets it; a
	// session takes (clears) it before it looks at the queue, so a claim
	// that would surely find nothing is skipped without missing a job
	// enqueued meanwhile: that enqueue sets the mark again after its commit.
	queued map[string]bool
	// fleet is closed when any install's status may have changed.
	fleet chan struct{}
	// deliverAll hands over a batch of jobs (SetDeliverAll; nil: each
	// session's Deliver).
	deliverAll func([]Handover)
	// elsewhere passes on a cancellation for an agent not connected here
	// (SetElsewhere; nil: none).
	elsewhere func(agentID string, req CancelRequest)
	// offers counts the agent update offers recorded through this imsd
	// (OfferChanged): a stream reads its agent's offer again when it
	// changed, and once a minute besides (for other replicas').
	offers atomic.Int64
	// shells are the support shells' relays (shell.go).
	shells shells
}

// OfferChanged says an agent update offer was recorded.
func (h *Hub) OfferChanged() { h.offers.Add(1) }

// Offers is the count OfferChanged raises.
func (h *Hub) Offers() int64 { return h.offers.Load() }

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{
		byInstall: make(map[string][]*Session),
		byAgent:   make(map[string]*Session),
		logs:      make(map[string]chan struct{}),
		queued:    make(map[string]bool),
		fleet:     make(chan struct{}),
	}
}

// TakeQueued reports whether installID may have queued jobs, and clears the
// mark. Call it before reading the queue.
func (h *Hub) TakeQueued(installID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queued[installID]
	delete(h.queued, installID)
	return q
}

// Register adds a session for agentID reached through hs (RegisterAgent).
func (h *Hub) Register(agentID, installID string, hs Handlers) *Session {
	return h.RegisterAgent(agentID, installID, &handlerFuncs{hs})
}

// RegisterAgent adds a session for agentID. A previous session of the
// same agent is told it was replaced.
func (h *Hub) RegisterAgent(agentID, installID string, a Agent) *Session {
	s := &Session{AgentID: agentID, InstallID: installID, Agent: a}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.byAgent[agentID]; old != nil {
		h.removeLocked(old)
		go old.Replaced()
	}
	h.byAgent[agentID] = s
	h.byInstall[installID] = append(h.byInstall[installID], s)
	h.fleetChangedLocked()
	return s
}

// sessions returns installID's sessions starting at a random one (each
// turn of Reserve favours no agent of an install); h.mu is held.
func (h *Hub) sessions(installID string) func(yield func(*Session) bool) {
	set := h.byInstall[installID]
	return func(yield func(*Session) bool) {
		n := len(set)
		if n == 0 {
			return
		}
		start := 0
		if n > 1 {
			start = rand.IntN(n)
		}
		for i := range n {
			if !yield(set[(start+i)%n]) {
				return
			}
		}
	}
}

// Kick ends agentID's session here (the agent was revoked): as with a
// replacement, its stream ends at its next message. It reports whether
// the agent had a session on this hub.
func (h *Hub) Kick(agentID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.byAgent[agentID]
	if s == nil {
		return false
	}
	h.removeLocked(s)
	go s.Replaced()
	return true
}

// Unregister removes s if it is still registered.
func (h *Hub) Unregister(s *Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(s)
}

func (h *Hub) removeLocked(s *Session) {
	h.fleetChangedLocked()
	defer func() {
		if len(h.byInstall[s.InstallID]) == 0 {
			delete(h.queued, s.InstallID)
		}
	}()
	if h.byAgent[s.AgentID] == s {
		delete(h.byAgent, s.AgentID)
		h.shellsGone(s.AgentID)
	}
	if set := h.byInstall[s.InstallID]; set != nil {
		if i := slices.Index(set, s); i >= 0 {
			set = slices.Delete(set, i, i+1)
			h.byInstall[s.InstallID] = set
		}
		if len(set) == 0 {
			delete(h.byInstall, s.InstallID)
		}
	}
}

// Wake signals every session of installID that there may be work.
func (h *Hub) Wake(installID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fleetChangedLocked() // an enqueue changes the install's job counts
	if len(h.byInstall[installID]) == 0 {
		return // a session claims everything queued when it connects
	}
	h.queued[installID] = true
	for s := range h.sessions(installID) {
		s.Wake()
	}
}

// Reserve finds a connected agent of installID with a free job slot and
// reserves the slot, so an enqueue can store the job already assigned to
// that agent (store.EnqueueAssigned) instead of waking the install's agents
// to claim it: one write per job less, and one round trip less before the
// agent has it. The caller then calls the session's Deliver, or Release
// if the job was stored queued. It returns nil when the install may still
// have queued jobs (those go first, through the claim path) or no agent of
// it has a free slot here.
func (h *Hub) Reserve(installID string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queued[installID] {
		return nil
	}
	for s := range h.sessions(installID) {
		if s.Reserve() {
			return s
		}
	}
	return nil
}

// A Handover is a job stored assigned to Session's agent, in the slot
// Reserve took.
type Handover struct {
	Session *Session
	Job     store.Job
}

// SetDeliverAll sets what DeliverAll calls: the agent API's handler,
// which builds the assignments of a batch at once (and signs them with
// one signature). fn must not block: it runs on the enqueue's goroutine.
func (h *Hub) SetDeliverAll(fn func([]Handover)) {
	h.mu.Lock()
	h.deliverAll = fn
	h.mu.Unlock()
}

// DeliverAll hands over the jobs an enqueue stored assigned: through the
// handler SetDeliverAll set, else each session's Deliver.
func (h *Hub) DeliverAll(hs []Handover) {
	if len(hs) == 0 {
		return
	}
	h.mu.Lock()
	fn := h.deliverAll
	h.mu.Unlock()
	if fn != nil && len(hs) > 1 {
		fn(hs)
		return
	}
	for _, ho := range hs {
		ho.Session.Deliver(ho.Job)
	}
}

// Connected reports whether agentID has a stream on this imsd.
func (h *Hub) Connected(agentID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byAgent[agentID] != nil
}

// InstallConnected reports how many agents of installID are connected here.
func (h *Hub) InstallConnected(installID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byInstall[installID])
}

// Count returns the number of connected sessions.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byAgent)
}

// Cancel forwards a cancellation to agentID's session, if it is connected
// here, and reports whether it was. Otherwise it passes it to the
// function SetElsewhere set, which reaches the other replicas; an agent
// that misses it learns of the cancellation at its next heartbeat.
func (h *Hub) Cancel(agentID string, req CancelRequest) bool {
	if h.CancelHere(agentID, req) {
		return true
	}
	h.mu.Lock()
	fn := h.elsewhere
	h.mu.Unlock()
	if fn != nil {
		fn(agentID, req)
	}
	return false
}

// CancelHere forwards a cancellation to agentID's session if it is
// connected here, and reports whether it was; it never passes it on (a
// cancellation another replica sent).
func (h *Hub) CancelHere(agentID string, req CancelRequest) bool {
	h.mu.Lock()
	s := h.byAgent[agentID]
	h.mu.Unlock()
	if s == nil {
		return false
	}
	s.Cancel(req)
	return true
}

// SetElsewhere sets what Cancel does with a cancellation for an agent
// not connected here: with several replicas, pass it to the one that
// holds the agent's stream. fn is called on Cancel's goroutine.
func (h *Hub) SetElsewhere(fn func(agentID string, req CancelRequest)) {
	h.mu.Lock()
	h.elsewhere = fn
	h.mu.Unlock()
}

// LogSignal returns a channel that is closed the next time job's log grows
// or the job ends.
func (h *Hub) LogSignal(jobID string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.logs[jobID]
	if ch == nil {
		ch = make(chan struct{})
		h.logs[jobID] = ch
	}
	return ch
}

// NotifyLog wakes the followers of job's log.
func (h *Hub) NotifyLog(jobID string) {
	h.mu.Lock()
	ch := h.logs[jobID]
	delete(h.logs, jobID)
	h.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// FleetSignal returns a channel that is closed the next time an install's
// status may have changed: an agent connected or disconnected, a job was
// enqueued, claimed, finished or cancelled, an install was created. Fleet
// watchers re-read the database when it fires; changes made on another
// replica reach them only through their periodic re-read.
func (h *Hub) FleetSignal() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fleet
}

// FleetChanged wakes the fleet watchers.
func (h *Hub) FleetChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fleetChangedLocked()
}

func (h *Hub) fleetChangedLocked() {
	close(h.fleet)
	h.fleet = make(chan struct{})
}
