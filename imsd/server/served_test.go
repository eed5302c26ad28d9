package server

import (
	"strings"
	"testing"
)

// imsd states the agent versions it serves (imsd --version, its start
// line): its own minor version and the two before it, of its major.
func TestServedAgentVersions(t *testing.T) {
	if got := servedText("v1.5.0"); got != ">= v1.3.0, < v1.6.0" {
		t.Errorf("v1.5.0 serves %q", got)
	}
	if got := servedText("dev"); !strings.Contains(got, "not a release build") {
		t.Errorf("dev serves %q", got)
	}
}
