package dispatch

import "sync"

// ShellRelay carries one support shell's events from the agent's stream
// (ShellEvent, on the stream's goroutine) to the operator's call that
// opened it. Events is bounded: the agent sends output only against
// flow-control credit the operator's call returns, so a full buffer means
// an agent that ignored it, and the session ends.
type ShellRelay struct {
	ID      string
	AgentID string
	// Events are the agent's events (*agentv1.ShellEvent), in order.
	Events chan any
	// Gone is closed when the agent's stream on this imsd ended or the
	// relay overflowed.
	Gone     chan struct{}
	goneOnce sync.Once
	// Overflowed is set when the agent sent more than the buffer holds.
	Overflowed bool
}

func (r *ShellRelay) gone() { r.goneOnce.Do(func() { close(r.Gone) }) }

// shells holds the relays of this imsd (Hub.shellMu).
type shells struct {
	mu sync.Mutex
	m  map[string]*ShellRelay
}

// AddShell registers the relay of session id, opened through agentID's
// stream here, with room for buf events.
func (h *Hub) AddShell(agentID, id string, buf int) *ShellRelay {
	r := &ShellRelay{ID: id, AgentID: agentID, Events: make(chan any, buf), Gone: make(chan struct{})}
	h.shells.mu.Lock()
	if h.shells.m == nil {
		h.shells.m = make(map[string]*ShellRelay)
	}
	h.shells.m[id] = r
	h.shells.mu.Unlock()
	// A stream that ended before the relay was added is gone already.
	if !h.Connected(agentID) {
		r.gone()
	}
	return r
}

// RemoveShell forgets the relay of session id.
func (h *Hub) RemoveShell(id string) {
	h.shells.mu.Lock()
	delete(h.shells.m, id)
	h.shells.mu.Unlock()
}

// ShellEvent hands an event of session id from agentID's stream to its
// relay, without blocking, and reports whether there was one to take it.
// An event from another agent than the one the session was opened on is
// dropped.
func (h *Hub) ShellEvent(agentID, id string, ev any) bool {
	h.shells.mu.Lock()
	r := h.shells.m[id]
	h.shells.mu.Unlock()
	if r == nil || r.AgentID != agentID {
		return false
	}
	select {
	case r.Events <- ev:
		return true
	default:
		r.Overflowed = true
		r.gone()
		return false
	}
}

// shellsGone ends the relays opened through agentID's stream (it ended).
func (h *Hub) shellsGone(agentID string) {
	h.shells.mu.Lock()
	defer h.shells.mu.Unlock()
	for _, r := range h.shells.m {
		if r.AgentID == agentID {
			r.gone()
		}
	}
}

// InstallSession returns a session of installID connected here, or nil.
func (h *Hub) InstallSession(installID string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.sessions(installID) {
		return s
	}
	return nil
}
