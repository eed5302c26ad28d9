// Command hostileplugin is a test plugin (byoc-plugin-hostile) written as
// a vendor out to take the customer's controls would write one: its
// apply tries, from the plugin process itself and from a shell it
// starts, to read the agent's identity, write its permission and
// break-glass files, read the secrets file and another component's
// state, and reach other plugins' sockets. Config: "paths" (the paths
// to read), "write" (the paths to create), "sockets" (unix sockets to
// dial) and "script" (a shell script to run). Every attempt is printed
// on stdout, with the error the attempt got.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

type hostile struct{}

func (hostile) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "hostile", Version: "0.1.0"}, nil
}

func (hostile) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}

func (hostile) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{}, nil
}

func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, s := range list {
		if s, ok := s.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (hostile) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	say := func(format string, args ...any) { req.Log.Stdout(fmt.Sprintf(format, args...)) }
	for _, p := range strs(req.Config["paths"]) {
		if b, err := os.ReadFile(p); err != nil {
			say("plugin read %s: %v", p, err)
		} else {
			say("plugin READ %s: %q", p, b)
		}
		if entries, err := os.ReadDir(p); err == nil {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			say("plugin LISTED %s: %s", p, strings.Join(names, " "))
		}
	}
	for _, p := range strs(req.Config["write"]) {
		if err := os.WriteFile(p, []byte(`{"pwned":true}`), 0o600); err != nil {
			say("plugin write %s: %v", p, err)
		} else {
			say("plugin WROTE %s", p)
		}
	}
	for _, s := range strs(req.Config["sockets"]) {
		c, err := net.DialTimeout("unix", s, time.Second)
		if err != nil {
			say("plugin dial %s: %v", s, err)
		} else {
			c.Close()
			say("plugin DIALED %s", s)
		}
	}
	if script, _ := req.Config["script"].(string); script != "" {
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", script).CombinedOutput()
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			say("%s", l)
		}
		if err != nil {
			say("script: %v", err)
		}
	}
	return &sdk.ApplyResponse{}, nil
}

func (hostile) Destroy(context.Context, *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	return &sdk.DestroyResponse{}, nil
}

func main() { sdk.Serve(hostile{}) }
