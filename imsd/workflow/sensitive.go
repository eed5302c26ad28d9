package workflow

import (
	"sync"
	"time"
)

// SensitiveEnvKey is the top-level key of a debug job's stored config
// that names the environment variables of its step whose values are
// sensitive debug arguments (config.DebugArg.Sensitive): the stored
// config holds "***" for them, and imsd's memory the values
// (SensitiveValues), which imsd puts into the config only as it signs
// and sends the assignment, listed for the agent to redact, and removes
// this key. No database, log or audit record holds them.
const SensitiveEnvKey = "sensitive_env"

// maxHeld bounds the jobs whose sensitive values are held at once.
const maxHeld = 10000

// SensitiveValues holds the values of debug jobs' sensitive arguments
// in memory, by job id, until the job's time limit (and a lease's
// grace) has passed. Only the imsd that queued the job holds them: a
// restart, or another replica claiming the job, cannot send it, and the
// job fails saying so.
type SensitiveValues struct {
	mu sync.Mutex
	m  map[string]heldValues
}

type heldValues struct {
	env   map[string]string
	until time.Time
}

// Put holds env for job id until until.
func (h *SensitiveValues) Put(id string, env map[string]string, now, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldValues{}
	}
	for k, v := range h.m {
		if now.After(v.until) {
			delete(h.m, k)
		}
	}
	if len(h.m) >= maxHeld {
		var oldest string
		for k, v := range h.m {
			if oldest == "" || v.until.Before(h.m[oldest].until) {
				oldest = k
			}
		}
		delete(h.m, oldest)
	}
	h.m[id] = heldValues{env: env, until: until}
}

// Get returns the values held for job id.
func (h *SensitiveValues) Get(id string) (map[string]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	return v.env, ok
}

// Drop forgets job id's values.
func (h *SensitiveValues) Drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}
