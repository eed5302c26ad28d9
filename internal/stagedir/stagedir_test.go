package stagedir

import "testing"

// Only the names New gives are a staging folder's: the prefix, then
// digits, and nothing else (agentd's and imsd's tests kill real imports).
func TestNamed(t *testing.T) {
	k := Kind{Prefix: "byoc-results-", Noun: "results import"}
	for name, want := range map[string]bool{
		"byoc-results-123456":   true,
		"byoc-results-0":        true,
		"byoc-results-":         false,
		"byoc-results-12a":      false,
		"byoc-results-upload-1": false,
		"xbyoc-results-1":       false,
		"byoc-results-1/..":     false,
	} {
		if got := k.named(name); got != want {
			t.Errorf("named(%q) = %v, want %v", name, got, want)
		}
	}
}
