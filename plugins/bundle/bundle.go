// Package bundle names the built-in component types that agentd does not
// serve from its own binary: those whose packages are heavy to link (OPA,
// Helm, Kubernetes client-go), which live in byoc-plugins, a companion
// multi-call binary installed beside agentd. Every package linked into a
// Go binary runs its init in every process of that binary, and agentd is
// one long-lived process per customer install; a plugin process lives for
// one job.
//
// This package imports only the standard library, so that agentd can know
// the names without linking what serves them.
package bundle

// Binary is the companion's file name, looked for in the directory of
// agentd's own executable.
const Binary = "byoc-plugins"

// Types returns the component types byoc-plugins serves, sorted.
func Types() []string {
	return []string{"helm", "image", "terraform"}
}
