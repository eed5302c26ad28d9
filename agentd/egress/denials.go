package egress

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// MaxReported is how many distinct refused destinations a Denials
// reports one by one; the rest are only counted.
const MaxReported = 50

// Denials aggregates one sandbox's refused connections so that a plugin
// retrying a refused destination in a loop cannot flood the job's log or
// the agent's journal: each distinct destination and rule is reported
// once (up to MaxReported), and Summary counts them all.
type Denials struct {
	// Report is called, outside any lock, for the first refusal of each
	// distinct destination and rule.
	Report func(Denial)

	mu     sync.Mutex
	counts map[Denial]int
	order  []Denial
	total  int
}

// Add records one refusal.
func (a *Denials) Add(d Denial) {
	a.mu.Lock()
	if a.counts == nil {
		a.counts = map[Denial]int{}
	}
	a.total++
	n, seen := a.counts[d]
	report := false
	if seen || len(a.counts) < MaxReported {
		a.counts[d] = n + 1
		if !seen {
			a.order = append(a.order, d)
			report = true
		}
	}
	a.mu.Unlock()
	if report && a.Report != nil {
		a.Report(d)
	}
}

// Total is how many connections were refused.
func (a *Denials) Total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// Summary says in one line how many connections were refused and to
// where (the most refused first, up to max of them); empty when none.
func (a *Denials) Summary(max int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total == 0 {
		return ""
	}
	ds := append([]Denial(nil), a.order...)
	sort.SliceStable(ds, func(i, j int) bool { return a.counts[ds[i]] > a.counts[ds[j]] })
	var parts []string
	for i, d := range ds {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(ds)-max))
			break
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", d, a.counts[d]))
	}
	other := a.total
	for _, n := range a.counts {
		other -= n
	}
	s := fmt.Sprintf("%d connections refused: %s", a.total, strings.Join(parts, "; "))
	if other > 0 {
		s += fmt.Sprintf("; %d to destinations beyond the first %d", other, MaxReported)
	}
	return s
}
