package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/console"
)

// runConsole opens the interactive console on the resolved target.
func (a *app) runConsole(ctx context.Context) error {
	in, ok := a.stdin.(*os.File)
	if !ok || !a.terminal(in) || !a.terminal(a.stdout) {
		return &exitCodeError{code: exitUsage, msg: `byoc without a command opens the interactive console, which needs a terminal (here standard input or output is not one).
In a script, run a command instead: byoc --help lists them (byoc install list, byoc job logs JOB, ...)`}
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	path, err := configPath(a.getenv)
	if err != nil {
		return err
	}
	settings, err := console.LoadSettings(filepath.Join(filepath.Dir(path), "console.json"))
	if err != nil {
		return err
	}
	identity, access, err := consoleIdentity(ctx, c)
	if err != nil {
		return err
	}
	streams, err := a.connectStreams() // support shells: a bidirectional stream needs HTTP/2
	if err != nil {
		return err
	}
	opts := console.Options{
		Conn: &console.Conn{Context: c.target.context, Server: c.target.server, Client: c.OperatorServiceClient, Streams: streams.OperatorServiceClient,
			Identity: identity, Access: access},
		ReadOnly: a.readOnly,
		Settings: settings,
	}
	if a.server == "" {
		// Contexts switch with :ctx only when the console runs on one.
		opts.Dial = func(ctx context.Context, name string) (*console.Conn, error) {
			b := *a
			b.contextName, b.server, b.token = name, "", ""
			c, err := b.connect()
			if err != nil {
				return nil, err
			}
			identity, access, err := consoleIdentity(ctx, c)
			if err != nil {
				return nil, err
			}
			streams, err := b.connectStreams()
			if err != nil {
				return nil, err
			}
			return &console.Conn{Context: c.target.context, Server: c.target.server, Client: c.OperatorServiceClient, Streams: streams.OperatorServiceClient,
				Identity: identity, Access: access}, nil
		}
		opts.Contexts = func() ([]console.ContextInfo, error) {
			cfg, err := loadConfig(path)
			if err != nil {
				return nil, err
			}
			out := make([]console.ContextInfo, 0, len(cfg.Contexts))
			for _, c := range cfg.Contexts {
				out = append(out, console.ContextInfo{Name: c.Name, Server: c.Server, Current: c.Name == cfg.CurrentContext})
			}
			return out, nil
		}
	}
	m, err := console.New(ctx, opts)
	if err != nil {
		return err
	}
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(a.stdout))
	_, err = p.Run()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// consoleIdentity says who the console is signed in as ("ann@example.com
// (support on installs with labels customer=acme)") and where the
// caller's grants allow the console's dangerous actions (the console
// binds their keys on those installs' rows only).
func consoleIdentity(ctx context.Context, c *client) (string, *console.Access, error) {
	who, err := c.WhoAmI(ctx, connect.NewRequest(&imsv1.WhoAmIRequest{}))
	if err != nil {
		return "", nil, c.wrap(err)
	}
	var roles []string
	for _, g := range who.Msg.GetGrants() {
		roles = append(roles, roleName(g.GetRole())+" on "+scopeText(g.GetScope()))
	}
	id := who.Msg.GetName()
	if who.Msg.GetKind() == "token" {
		id = "token " + id
	}
	if len(roles) == 0 {
		roles = []string{"no role"}
	}
	return id + " (" + strings.Join(roles, ", ") + ")", console.NewAccess(who.Msg.GetGrants()), nil
}
