package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// Instance is one running plugin process.
type Instance struct {
	typ    string
	client *plugin.Client
	rpc    *sdk.Client
	cmd    *exec.Cmd
	pgid   int
	logger *slog.Logger
	// desc is what the plugin said of itself when the protocol was
	// negotiated.
	desc *sdk.Description
	// sockDir holds the plugin's gRPC socket; removed by Kill.
	sockDir string
	// sock is the socket the agent connects to (checked at start);
	// closed by Kill.
	sock *pluginSocket
	// cgroup is the plugin's delegated cgroup, or nil; removed by Kill
	// once the plugin's process group is gone.
	cgroup *sandbox.Delegated
	// sandbox is where the plugin runs; nil for none.
	sandbox *Sandbox
	// proxy is the plugin's egress proxy (NetworkProxy), stopped by
	// Kill once the plugin is gone.
	proxy *proxyRun
	// lease keeps the plugin's lease file (StartOptions.Lease), or is
	// nil; stopped by Kill.
	lease *leaseKeeper
	// out takes what the plugin prints outside the protocol; writers are
	// its line splitters, flushed by Kill.
	out     *output
	writers []*lineWriter
	// synced counts the calls after which the plugin writes sync lines
	// (protocol 1.2); guarded by syncMu.
	syncMu sync.Mutex
	synced int

	killOnce sync.Once
	// conn is the connection to a plugin served in debug mode
	// (Loader.Reattach): Kill closes it and leaves the process running.
	conn *grpc.ClientConn
}

// Reattached reports whether the instance is a plugin served in debug
// mode outside the agent (Loader.Reattach).
func (i *Instance) Reattached() bool { return i.conn != nil }

// Type returns the component type the instance serves.
func (i *Instance) Type() string { return i.typ }

// PGID returns the plugin's process group id, which is also its pid.
func (i *Instance) PGID() int { return i.pgid }

// Description is what the plugin said of itself at start, with the
// protocol version negotiated with it.
func (i *Instance) Description() *sdk.Description { return i.desc }

// Describe asks the plugin what it is.
func (i *Instance) Describe(ctx context.Context) (*sdk.Description, error) {
	d, err := i.rpc.Describe(ctx)
	if err != nil {
		return nil, i.callError(ctx, "describe", err)
	}
	return d, nil
}

// Validate asks the plugin to check config.
func (i *Instance) Validate(ctx context.Context, config map[string]any) (*sdk.ValidateResponse, error) {
	v, err := i.rpc.Validate(ctx, config)
	if err != nil {
		return nil, i.callError(ctx, "validate", err)
	}
	i.syncOutput()
	return v, nil
}

// Run performs op (sdk.OpPlan, sdk.OpApply or sdk.OpDestroy), calling onLog
// for each log line as it arrives. A failed operation is reported in the
// Result; an error means the call itself failed. If ctx ends first, the
// plugin's process group is killed and the error wraps ctx.Err(). If the
// plugin dies, the error says so, with its exit status.
func (i *Instance) Run(ctx context.Context, op string, req *sdk.RunRequest, onLog func(sdk.LogEvent)) (*sdk.Result, error) {
	res, err := i.rpc.Run(ctx, op, req, onLog)
	if err != nil {
		return nil, i.callError(ctx, op, err)
	}
	i.syncOutput()
	return res, nil
}

// syncOutput waits, after a call that succeeded, until what the plugin
// printed during it has arrived: a plugin of protocol 1.2 writes a sync
// line to its stdout and stderr after each Validate and operation, and
// go-plugin forwards them in order behind the rest.
func (i *Instance) syncOutput() {
	if i.conn != nil || i.desc == nil || i.desc.Negotiated.Less(sdk.ProtocolVersion{Major: 1, Minor: 2}) {
		return
	}
	i.syncMu.Lock()
	i.synced++
	n := i.synced
	i.syncMu.Unlock()
	i.out.waitSync(n)
}

// callError explains why a call failed: the caller gave up, or the plugin
// died, or else whatever gRPC said.
func (i *Instance) callError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		i.Kill()
		return fmt.Errorf("plugin %s: %s: %w", i.typ, what, ctx.Err())
	}
	if _, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded {
		// gRPC runs its own timer for ctx's deadline and may fire a moment
		// before ctx reports it: the caller's deadline passed either way.
		i.Kill()
		return fmt.Errorf("plugin %s: %s: %w", i.typ, what, context.DeadlineExceeded)
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.Internal:
		// A dead plugin shows up as a broken transport; wait a moment to
		// tell that apart from a live plugin's error.
	default:
		return fmt.Errorf("plugin %s: %s: %w", i.typ, what, err)
	}
	if !pollUntil(exitWait, func() bool { return i.exited() }) {
		return fmt.Errorf("plugin %s: %s: %w", i.typ, what, err)
	}
	// Kill clears up what the plugin left behind and reaps it, after which
	// its exit status is known.
	i.Kill()
	return fmt.Errorf("plugin %s exited during %s: %s", i.typ, what, i.exitStatus())
}

// EgressRefused says in one line how many connections the plugin's
// egress proxy refused and to where; empty when none (or no proxy).
// Complete once Kill returned.
func (i *Instance) EgressRefused() string {
	if i.proxy == nil {
		return ""
	}
	return i.proxy.denials.Summary(10)
}

// exited reports whether the plugin process has ended.
func (i *Instance) exited() bool {
	if i.conn != nil {
		return false // not the agent's process
	}
	return i.client.Exited() || (i.pgid > 0 && processExited(i.pgid))
}

// exitStatus describes how the plugin ended; call it only after Kill.
func (i *Instance) exitStatus() string {
	if i.cmd.ProcessState == nil {
		return "unknown exit status"
	}
	return i.cmd.ProcessState.String()
}

// CanInterrupt reports whether the plugin stops its operations when
// interrupted (protocol 1.3).
func (i *Instance) CanInterrupt() bool {
	return i.desc != nil && !i.desc.Negotiated.Less(sdk.ProtocolVersion{Major: 1, Minor: 3})
}

// Interrupt asks the plugin to stop its running operations (protocol 1.3):
// SIGINT to the plugin process alone, whose SDK cancels the operations'
// contexts with sdk.ErrInterrupted. The caller waits for Run to return,
// up to a grace of its choosing, and then cancels Run's context, which
// kills the process group.
func (i *Instance) Interrupt() {
	if i.pgid > 0 {
		// In a sandbox the process the agent started is the sandbox's;
		// the plugin itself is found inside.
		if err := syscall.Kill(i.sandbox.pluginPID(i.pgid), syscall.SIGINT); err != nil {
			i.logger.Warn("interrupt plugin", "pid", i.pgid, "err", err)
		}
	}
}

// Kill ends the plugin and everything in its process group: SIGTERM, then
// SIGKILL to what is still running after a grace period. It returns once
// the group is gone and the plugin reaped. It is safe to call more than
// once and from several goroutines.
func (i *Instance) Kill() {
	i.killOnce.Do(func() {
		if i.conn != nil {
			_ = i.conn.Close()
			return
		}
		if i.pgid > 0 {
			i.killGroup()
		}
		// Reaps the plugin and stops go-plugin's goroutines; the process is
		// already dead, so this does not wait for a graceful exit. It
		// returns once the process's stderr is read to its end.
		i.client.Kill()
		for _, w := range i.writers {
			w.flush()
		}
		i.out.close()
		i.proxy.stop()
		i.lease.end()
		os.RemoveAll(i.sockDir)
		i.sock.close()
		if i.cgroup != nil {
			if err := i.cgroup.Remove(); err != nil {
				i.logger.Warn("remove the plugin's cgroup", "err", err)
			}
		}
	})
}

func (i *Instance) killGroup() {
	if err := signalGroup(i.pgid, syscall.SIGTERM); err != nil {
		i.logger.Warn("terminate plugin process group", "pgid", i.pgid, "err", err)
	}
	if pollUntil(killGrace, func() bool { return !groupAlive(i.pgid) }) {
		return
	}
	i.logger.Warn("plugin process group outlived SIGTERM; killing it", "pgid", i.pgid)
	if err := signalGroup(i.pgid, syscall.SIGKILL); err != nil {
		i.logger.Warn("kill plugin process group", "pgid", i.pgid, "err", err)
	}
	if !pollUntil(killGrace, func() bool { return !groupAlive(i.pgid) }) {
		i.logger.Error("plugin process group survived SIGKILL", "pgid", i.pgid)
	}
}

// pollUntil polls cond with a short, growing interval until it holds or
// timeout passes, and reports whether it held.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := 500 * time.Microsecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
		interval = min(2*interval, 20*time.Millisecond)
	}
}
