package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// PluginName is the name under which the component plugin is dispensed.
const PluginName = "component"

// Handshake is the go-plugin handshake shared by the agent and every
// plugin. The cookie is not a secret; it only stops a plugin binary from
// being run as a normal program by mistake.
//
// Its ProtocolVersion is the major protocol version: go-plugin refuses a
// plugin of another major before any call. Minor versions are negotiated
// by [Client.Negotiate].
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolMajor,
	MagicCookieKey:   "BYOC_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "77394d7629366ce6710feee806aa17dbe37b198a17ade280",
}

// PluginMap returns the go-plugin plugin set: on the plugin side pass the
// implementation, on the host side pass nil. A plugin served with it
// writes [StdioSyncLine] after each Validate and operation.
func PluginMap(impl Plugin) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl, stdioSync: impl != nil}}
}

// StdioSyncLine is the line (protocol 1.2) a plugin served by go-plugin
// writes to its stdout and to its stderr after each Validate and each
// operation, before it answers. go-plugin forwards what plugin code
// prints to os.Stdout and os.Stderr to the host over a stream of its
// own; once the host has read this line on both, it has everything
// printed before it, and puts it in the job's log ahead of the result.
const StdioSyncLine = "\x00byoc-stdio-sync\x00"

// writeStdioSync writes StdioSyncLine to the plugin's stdout and stderr
// as they are now (go-plugin replaced them while serving).
func writeStdioSync() {
	fmt.Fprint(os.Stdout, StdioSyncLine+"\n")
	fmt.Fprint(os.Stderr, StdioSyncLine+"\n")
}

// Serve serves p over go-plugin gRPC and never returns. It is the one call
// in a plugin's main. Run as "byoc-plugin-x describe", it prints p's
// description as JSON and exits instead.
func Serve(p Plugin) {
	ServeArgs(p, os.Args[1:])
}

// ServeArgs is Serve with explicit arguments, for a binary that serves a
// plugin from a subcommand (the agent serving its built-in types).
func ServeArgs(p Plugin, args []string) {
	if len(args) > 0 && args[0] == "describe" {
		if err := PrintDescription(context.Background(), os.Stdout, p); err != nil {
			fmt.Fprintln(os.Stderr, "describe:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if (len(args) > 0 && args[0] == "debug") || os.Getenv(DebugEnv) != "" {
		os.Exit(serveDebug(p, os.Stdout))
	}
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		// Run by hand, not by an agent: go-plugin's banner would say only
		// that this is a plugin.
		prog := os.Args[0]
		if n := len(os.Args) - len(args); n > 1 && n <= len(os.Args) {
			prog = strings.Join(os.Args[:n], " ") // agentd plugin action
		}
		os.Exit(directRunHint(os.Stderr, prog, args))
	}
	// The host interrupts an operation (protocol 1.3) with SIGINT to this
	// process: every operation's context is cancelled with
	// ErrInterrupted, and the host waits for the operations to return
	// before it kills the process. go-plugin ignores SIGINT itself.
	interrupted := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	go func() {
		<-sigs
		close(interrupted)
	}()
	leasePath := os.Getenv(HostLeaseEnv)
	os.Unsetenv(HostLeaseEnv) // nothing the plugin starts needs it
	gp, newServer, stop := serving(p, interrupted, leasePath)
	defer stop()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: gp},
		GRPCServer:      newServer,
	})
	os.Exit(0)
}

// serving is what Serve serves: p, its operations cancelled when the
// host interrupts them or when the host's lease in the file at leasePath
// (HostLeaseEnv) runs out. A host that keeps a lease file is waited for
// while it holds the lease, frozen or not; without one, the keepalive
// (NewGRPCServer) bounds how long a silent host is waited for. stop ends
// the lease's watch.
func serving(p Plugin, interrupted <-chan struct{}, leasePath string) (*GRPCPlugin, func([]grpc.ServerOption) *grpc.Server, func()) {
	lease := watchHostLease(leasePath)
	newServer := NewGRPCServer
	if lease != nil {
		newServer = func(opts []grpc.ServerOption) *grpc.Server { return grpc.NewServer(opts...) }
	}
	return &GRPCPlugin{Impl: p, stdioSync: true, interrupted: interrupted, hostLost: lease.Lost()}, newServer, lease.Stop
}

// ErrInterrupted is the cause of an operation's context when the host
// interrupted it (protocol 1.3): an operator cancelled the job, its time
// ran out, or the customer's permissions no longer allow it. The host
// waits a grace period for the operation to return; stop what runs
// cleanly (Terraform: interrupt it once and wait) and return.
var ErrInterrupted = errors.New("interrupted by the agent")

// Keepalive bounds how long a plugin keeps working for a host that has
// stopped answering, when the host keeps no lease file (HostLeaseEnv: an
// agent older than that, a Validate outside any job): the plugin pings
// the host after KeepaliveTime without hearing from it and drops the
// connection, cancelling every operation in flight, when KeepaliveTimeout
// more passes without an answer. An agent frozen (SIGSTOP, a stalled VM)
// cannot stop its plugin itself, and imsd may then hand the job to
// another agent once its lease and grace have passed: the plugin stops on
// its own first. Keep well inside imsd's --lease-grace. With a lease
// file the plugin serves without it and waits out a freeze inside the
// lease.
const (
	KeepaliveTime    = time.Second
	KeepaliveTimeout = time.Second
)

// NewGRPCServer is the plugin's gRPC server: go-plugin's default with the
// keepalive above.
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}))
	return grpc.NewServer(opts...)
}

// PrintDescription writes p's description to w as indented JSON: type,
// version, protocol, protocol_versions, capabilities, config_schema and
// outputs_schema. This is what "byoc-plugin-x describe" prints.
func PrintDescription(ctx context.Context, w io.Writer, p Plugin) error {
	d, err := describe(ctx, p, ProtocolVersion{})
	if err != nil {
		return err
	}
	out := struct {
		*Description
		// Schemas are JSON already; print them as objects, not strings.
		ConfigSchema  json.RawMessage `json:"config_schema,omitempty"`
		OutputsSchema json.RawMessage `json:"outputs_schema,omitempty"`
	}{Description: d}
	if out.ConfigSchema, err = rawSchema("config", d.ConfigSchema); err != nil {
		return err
	}
	if out.OutputsSchema, err = rawSchema("outputs", d.OutputsSchema); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// rawSchema checks that a declared schema compiles, so a broken schema is
// found by its author's describe, not by the first agent that loads it.
func rawSchema(what, s string) (json.RawMessage, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if _, err := CompileSchema(s); err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	return json.RawMessage(s), nil
}

// directRunHint tells someone who ran the plugin by hand what it is and
// what they can run, and returns the exit code (2 for an unknown
// argument, else 1).
func directRunHint(w io.Writer, prog string, args []string) int {
	code := 1
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
		fmt.Fprintf(w, "%s: unknown argument %q\n", prog, args[0])
		code = 2
	}
	fmt.Fprintf(w, `%[1]s is a byoc component plugin: an agent starts it for each job, over go-plugin.
By hand:
  %[1]s describe   print its type, version, protocol and config schema as JSON
                   (for byoc plugin register and byoc app validate --plugin-schema)
  %[1]s debug      serve it outside any agent, for a debugger; prints the
                   %[2]s value that has an agent use it
`, prog, ReattachEnv)
	return code
}
