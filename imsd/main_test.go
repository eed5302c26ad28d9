package main

import (
	"context"
	"testing"
)

// --agentwire takes on or off, and nothing else.
func TestAgentWireFlag(t *testing.T) {
	if got := run(context.Background(), []string{"--agentwire=maybe", "--data-dir", t.TempDir()}); got != 2 {
		t.Fatalf("--agentwire=maybe: exit %d, want 2", got)
	}
}
