package pluginhost

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/byoc-dev/byoc/plugins/sdk"
)

// reattach connects to a plugin of type typ served in debug mode outside
// the agent (sdk.Debug) instead of starting one: over its socket, in
// plain gRPC (a debug server has no AutoMTLS), with no pin, no sandbox
// and no process of the agent's. The plugin gets the job's directories
// and environment in each request as usual; what it prints stays on its
// own terminal.
func (l *Loader) reattach(ctx context.Context, typ string, r sdk.ReattachInfo, opt StartOptions) (*Instance, error) {
	target := "unix:" + r.Addr.String
	if r.Addr.Network == "tcp" {
		target = "passthrough:///" + r.Addr.String
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: reattach to %s %s (%s): %w", typ, r.Addr.Network, r.Addr.String, sdk.ReattachEnv, err)
	}
	logger := l.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	logger = logger.With("plugin", typ)
	inst := &Instance{typ: typ, conn: conn, logger: logger, out: newOutput(typ, logger, opt.Output)}
	rpc := sdk.NewClient(conn)
	if inst.desc, err = rpc.Negotiate(ctx); err == nil && inst.desc.Type != typ {
		err = fmt.Errorf("plugin says it serves type %q, not %q", inst.desc.Type, typ)
	}
	if err != nil {
		inst.Kill()
		return nil, fmt.Errorf("start plugin %s: reattach to pid %d at %s (%s): %w; is the plugin still running in debug mode?",
			typ, r.Pid, r.Addr.String, sdk.ReattachEnv, err)
	}
	inst.rpc = rpc
	logger.Warn("reattached to a plugin in debug mode: not pinned, not sandboxed", "pid", r.Pid, "addr", r.Addr.String)
	return inst, nil
}
