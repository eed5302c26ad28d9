package agentproto

import "testing"

func TestAgentVersionServed(t *testing.T) {
	for _, tc := range []struct {
		imsd, agent string
		served      bool
		window      string
	}{
		{"v1.5.2", "v1.5.0", true, ">= v1.3.0, < v1.6.0"},
		{"v1.5.2", "v1.3.9", true, ">= v1.3.0, < v1.6.0"},
		{"v1.5.2", "v1.2.9", false, ">= v1.3.0, < v1.6.0"},
		{"v1.5.2", "v1.6.0", false, ">= v1.3.0, < v1.6.0"},
		{"v1.5.2", "v2.5.0", false, ">= v1.3.0, < v1.6.0"},
		{"v1.1.0", "v1.0.0-rc.1", true, ">= v1.0.0, < v1.2.0"},
		{"v1.5.2", "dev-0123abc", true, ">= v1.3.0, < v1.6.0"},
		{"dev", "v0.0.1", true, ""},
		{"1.5.2", "v0.1.0", true, ""},
	} {
		served, window := AgentVersionServed(tc.imsd, tc.agent)
		if served != tc.served || window != tc.window {
			t.Errorf("imsd %s, agent %s: %v %q, want %v %q", tc.imsd, tc.agent, served, window, tc.served, tc.window)
		}
	}
}
