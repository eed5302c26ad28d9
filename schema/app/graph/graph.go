// Package graph is the dependency graph of an app's components: waves
// that can deploy in parallel, the set downstream of a change, and whole
// cycles for the validator to report. It knows nothing of the config
// format; config.App builds one from listed and implied dependencies.
package graph

import (
	"maps"
	"slices"
	"strings"
)

// Graph is the component dependency graph of an app: the sandbox (when the
// app has one) before everything, then components after their
// dependencies, listed or implied by references to their outputs.
type Graph struct {
	// nodes in name order; "sandbox" when the app has one.
	nodes []string
	// deps[n] are the nodes n waits for; users[n] the nodes waiting for n.
	deps, users map[string][]string
}

// New builds a graph from each node's dependencies. A dependency on a
// node that is not in the graph is ignored (validation reports it).
func New(deps map[string][]string) *Graph {
	g := &Graph{nodes: slices.Sorted(maps.Keys(deps)), deps: map[string][]string{}, users: map[string][]string{}}
	for _, n := range g.nodes {
		for _, d := range deps[n] {
			if _, ok := deps[d]; !ok || d == n || slices.Contains(g.deps[n], d) {
				continue
			}
			g.deps[n] = append(g.deps[n], d)
			g.users[d] = append(g.users[d], n)
		}
		slices.Sort(g.deps[n])
	}
	for _, n := range g.nodes {
		slices.Sort(g.users[n])
	}
	return g
}

// Nodes returns the nodes in name order.
func (g *Graph) Nodes() []string { return slices.Clone(g.nodes) }

// Deps returns the nodes n waits for directly.
func (g *Graph) Deps(n string) []string { return slices.Clone(g.deps[n]) }

// Users returns the nodes that wait for n directly.
func (g *Graph) Users(n string) []string { return slices.Clone(g.users[n]) }

// Cycles returns the dependency cycles, each as the path that closes it
// ("a", "b", "a"), each cycle once, starting at its smallest name.
func (g *Graph) Cycles() [][]string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	seen := map[string]bool{}
	var out [][]string
	var visit func(n string)
	visit = func(n string) {
		color[n] = grey
		stack = append(stack, n)
		for _, d := range g.deps[n] {
			switch color[d] {
			case white:
				visit(d)
			case grey:
				i := slices.Index(stack, d)
				cyc := slices.Clone(stack[i:])
				// Report in dependency order (a needs b needs ... needs
				// a), rotated to start at the smallest name.
				m := slices.Index(cyc, slices.Min(cyc))
				cyc = append(cyc[m:], cyc[:m]...)
				key := strings.Join(cyc, ">")
				if !seen[key] {
					seen[key] = true
					out = append(out, append(cyc, cyc[0]))
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
	}
	for _, n := range g.nodes {
		if color[n] == white {
			visit(n)
		}
	}
	return out
}

// Levels returns the nodes in waves: every node of a wave depends only on
// nodes of earlier waves, so a wave can run in parallel. Nodes on a cycle
// are left out.
func (g *Graph) Levels() [][]string {
	indeg := map[string]int{}
	for _, n := range g.nodes {
		indeg[n] = len(g.deps[n])
	}
	var wave []string
	for _, n := range g.nodes {
		if indeg[n] == 0 {
			wave = append(wave, n)
		}
	}
	var out [][]string
	for len(wave) > 0 {
		out = append(out, wave)
		var next []string
		for _, n := range wave {
			for _, u := range g.users[n] {
				if indeg[u]--; indeg[u] == 0 {
					next = append(next, u)
				}
			}
		}
		slices.Sort(next)
		wave = next
	}
	return out
}

// Order returns a topological order (the waves, flattened).
func (g *Graph) Order() []string {
	var out []string
	for _, w := range g.Levels() {
		out = append(out, w...)
	}
	return out
}

// Downstream returns the given nodes and every node that depends on them,
// directly or not, in topological order.
func (g *Graph) Downstream(from ...string) []string {
	in := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		if in[n] {
			return
		}
		in[n] = true
		for _, u := range g.users[n] {
			walk(u)
		}
	}
	for _, n := range from {
		if slices.Contains(g.nodes, n) {
			walk(n)
		}
	}
	var out []string
	for _, n := range g.Order() {
		if in[n] {
			out = append(out, n)
		}
	}
	return out
}
