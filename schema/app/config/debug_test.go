package config

import (
	"maps"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

var logsCmd = &DebugCommand{Name: "logs", Script: `echo "$ARG_COMPONENT"`, Args: []DebugArg{
	{Name: "component", Type: "component", Required: true},
	{Name: "since", Type: "duration", Default: "10m"},
	{Name: "tail", Type: "int", Min: ptr[int64](1), Max: ptr[int64](1000)},
	{Name: "level", Type: "enum", Values: []string{"info", "debug"}},
	{Name: "grep", Pattern: `[a-z]+`},
	{Name: "text"},
}}

func TestDebugBind(t *testing.T) {
	comps := []string{"sandbox", "api"}
	got, err := logsCmd.Bind([]string{"api"}, map[string]string{"tail": "50", "level": "debug"}, comps)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"component": "api", "since": "10m", "tail": "50", "level": "debug"}
	if !maps.Equal(got, want) {
		t.Fatalf("Bind = %v, want %v", got, want)
	}
	if env := Env(got); env["ARG_COMPONENT"] != "api" || env["ARG_SINCE"] != "10m" {
		t.Fatalf("Env = %v", env)
	}
	// A hostile value is data: a free string argument takes it as it is
	// (the script gets it in its environment, never in its text).
	hostile := `x; rm -rf / $(id)`
	if got, err := logsCmd.Bind([]string{"api"}, map[string]string{"text": hostile}, comps); err != nil || got["text"] != hostile {
		t.Fatalf("Bind(text=hostile) = %v, %v", got, err)
	}
	for _, c := range []struct {
		pos   []string
		named map[string]string
		want  string
	}{
		{nil, nil, "argument component: is required"},
		{[]string{"web"}, nil, `argument component: "web" is not a component of the app (its components: sandbox, api)`},
		{[]string{"api"}, map[string]string{"follow": "1"}, `argument follow: debug command logs has no argument "follow" (its arguments: component, since, tail, level, grep, text)`},
		{[]string{"api"}, map[string]string{"component": "api"}, "argument component: given both as a positional argument and by name"},
		{[]string{"api", "1h", "1", "info", "x", "y", "z"}, nil, "takes at most 6 positional arguments"},
		{[]string{"api"}, map[string]string{"since": "$(id)"}, `argument since: "$(id)" is not a duration`},
		{[]string{"api"}, map[string]string{"tail": "0"}, "argument tail: 0 is less than the minimum 1"},
		{[]string{"api"}, map[string]string{"tail": "1; id"}, `argument tail: "1; id" is not an integer`},
		{[]string{"api"}, map[string]string{"level": "trace"}, `argument level: "trace" is not one of info, debug`},
		{[]string{"api"}, map[string]string{"grep": "x; rm -rf /"}, `argument grep: "x; rm -rf /" does not match the pattern "[a-z]+"`},
		{[]string{"api"}, map[string]string{"text": strings.Repeat("a", DebugArgMaxLen+1)}, "argument text: is 1025 bytes"},
		{[]string{"api"}, map[string]string{"text": "a\x00b"}, "argument text: holds a NUL byte"},
	} {
		_, err := logsCmd.Bind(c.pos, c.named, comps)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Bind(%q, %v) = %v, want %q", c.pos, c.named, err, c.want)
		}
	}
}
