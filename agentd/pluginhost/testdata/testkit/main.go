// Command testkit is an external plugin for pluginhost tests. Its Apply
// behaves according to config "mode": ok, env, crash, hang, print (to
// stdout, stderr and the log package), panic (in Apply),
// goroutine-panic, big (a result of config "mb" MiB) or sh (runs config
// "script" with /bin/sh, its output on stdout). It has no optional
// capabilities.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"

	"github.com/hashicorp/go-plugin"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

type testkit struct{}

func (testkit) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "testkit", Version: "0.0.1"}, nil
}

func (testkit) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}

func (testkit) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{Changes: "nothing"}, nil
}

func (testkit) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	switch mode, _ := req.Config["mode"].(string); mode {
	case "ok":
		req.Log.Stdout("hello from testkit")
		return &sdk.ApplyResponse{Outputs: map[string]string{"mode": mode}}, nil
	case "env":
		for _, kv := range os.Environ() {
			req.Log.Stdout(kv)
		}
		return &sdk.ApplyResponse{}, nil
	case "crash":
		req.Log.Stdout("about to crash")
		os.Exit(3)
	case "hang":
		req.Log.Stdout("hanging")
		select {} // ignores ctx on purpose
	case "print":
		fmt.Println("debug via fmt.Println")
		fmt.Fprintln(os.Stderr, "debug via os.Stderr")
		fmt.Print("no newline at the end")
		log.Print("debug via the log package")
		return &sdk.ApplyResponse{}, nil
	case "sh":
		script, _ := req.Config["script"].(string)
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", script).CombinedOutput()
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			req.Log.Stdout(l)
		}
		return &sdk.ApplyResponse{}, err
	case "big":
		// A result as large as config "mb" says, in one message.
		mb, _ := req.Config["mb"].(float64)
		return &sdk.ApplyResponse{Outputs: map[string]string{"big": strings.Repeat("x", int(mb)<<20)}}, nil
	case "panic":
		var m map[string]int
		m["x"] = 1
	case "goroutine-panic":
		go func() { panic("boom in a goroutine") }()
		select {}
	}
	return nil, errors.New(fmt.Sprint("unknown mode ", req.Config["mode"]))
}

func main() {
	if s := os.Getenv("TESTKIT_STRAY_STDOUT"); s != "" {
		fmt.Println(s) // what a plugin must not do
	}
	// TESTKIT_PROTOCOL_MAJOR=2 makes this a plugin built for a future,
	// incompatible protocol: it offers major 2 at the handshake.
	if os.Getenv("TESTKIT_PROTOCOL_MAJOR") == "2" {
		hs := sdk.Handshake
		hs.ProtocolVersion = 2
		plugin.Serve(&plugin.ServeConfig{HandshakeConfig: hs, Plugins: sdk.PluginMap(testkit{}), GRPCServer: plugin.DefaultGRPCServer})
		return
	}
	sdk.Serve(testkit{})
}
