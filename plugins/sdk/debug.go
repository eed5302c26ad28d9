package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/hashicorp/go-plugin"
)

// DebugEnv, set to a non-empty value in a plugin's environment (or the
// plugin run with the argument "debug"), makes [Serve] serve in debug
// mode: outside any agent, until interrupted, printing the
// [ReattachEnv] line that has an agent use it. Run the plugin under a
// debugger this way:
//
//	dlv exec ./byoc-plugin-kvfile -- debug
//
// then start agentd with the printed BYOC_REATTACH_PLUGINS in its
// environment: its jobs of the type call the plugin under the debugger,
// and breakpoints hold them.
const DebugEnv = "BYOC_PLUGIN_DEBUG"

// ReattachEnv is the agent's environment variable naming plugins served
// in debug mode, by type: a JSON object of [ReattachInfo]. The agent
// calls them instead of starting a plugin process for their jobs: no
// pin, no sandbox, and the plugin keeps running after each job. For
// development only; agentd says so loudly at start and in each job's
// log.
const ReattachEnv = "BYOC_REATTACH_PLUGINS"

// ReattachInfo is where a plugin served in debug mode listens.
type ReattachInfo struct {
	// Protocol is "grpc".
	Protocol string `json:"protocol"`
	// ProtocolVersion is the plugin protocol's major version.
	ProtocolVersion int `json:"protocol_version"`
	// Addr is the listener's address: Network "unix" (or "tcp") and the
	// socket's path (or host:port) in String.
	Addr struct {
		Network string `json:"network"`
		String  string `json:"string"`
	} `json:"addr"`
	// Pid is the plugin process's.
	Pid int `json:"pid"`
}

// ParseReattach reads a ReattachEnv value: a JSON object of ReattachInfo
// by type. An error names the type and the field.
func ParseReattach(s string) (map[string]ReattachInfo, error) {
	var out map[string]ReattachInfo
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of plugins by type, as a plugin in debug mode prints: %w", ReattachEnv, err)
	}
	for typ, r := range out {
		switch {
		case r.Protocol != string(plugin.ProtocolGRPC):
			return nil, fmt.Errorf("%s: %s.protocol: %q, want %q", ReattachEnv, typ, r.Protocol, plugin.ProtocolGRPC)
		case r.ProtocolVersion != ProtocolMajor:
			return nil, fmt.Errorf("%s: %s.protocol_version: the plugin speaks byoc plugin protocol %d.x, this build %d.x", ReattachEnv, typ, r.ProtocolVersion, ProtocolMajor)
		case !slices.Contains([]string{"unix", "tcp"}, r.Addr.Network) || r.Addr.String == "":
			return nil, fmt.Errorf("%s: %s.addr: want a unix socket path or a tcp address", ReattachEnv, typ)
		}
	}
	return out, nil
}

// Debug serves p in debug mode until ctx ends: on a socket of its own,
// not started by an agent. ready is called once with the plugin's type
// and where it listens (the value of ReattachEnv for it). What p prints
// goes to this process's own stdout and stderr. Debug returns when the
// server has stopped.
func Debug(ctx context.Context, p Plugin, ready func(typ string, r ReattachInfo)) error {
	d, err := describe(ctx, p, Protocol)
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reattach := make(chan *plugin.ReattachConfig, 1)
	closed := make(chan struct{})
	go plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		// No sync lines: stdout and stderr stay the terminal's.
		Plugins:    plugin.PluginSet{PluginName: &GRPCPlugin{Impl: p}},
		GRPCServer: NewGRPCServer,
		Test:       &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed},
	})
	select {
	case rc := <-reattach:
		var r ReattachInfo
		r.Protocol, r.ProtocolVersion, r.Pid = string(rc.Protocol), rc.ProtocolVersion, rc.Pid
		r.Addr.Network, r.Addr.String = rc.Addr.Network(), rc.Addr.String()
		ready(d.Type, r)
	case <-closed:
		return errors.New("the plugin server stopped before it listened")
	}
	<-closed
	return nil
}

// serveDebug is Serve in debug mode: it prints how an agent reattaches
// to w and serves until SIGINT or SIGTERM.
func serveDebug(p Plugin, w io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := Debug(ctx, p, func(typ string, r ReattachInfo) {
		b, _ := json.Marshal(map[string]ReattachInfo{typ: r})
		fmt.Fprintf(w, "byoc plugin %s: debug mode, pid %d. Start agentd with this in its environment to have its %s jobs call this process:\n\n"+
			"\t%s='%s'\n\nThe agent then skips the pin and the sandbox for %s. Stop with Ctrl-C.\n", typ, r.Pid, typ, ReattachEnv, b, typ)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "debug:", err)
		return 1
	}
	return 0
}
