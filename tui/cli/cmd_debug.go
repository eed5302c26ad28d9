package cli

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// debugCommand runs a debug command an app declares (debug/*.toml). Its
// arguments are the command's own (--since 10m), which cobra cannot know:
// it parses the line itself, handing byoc's flags to cobra.
func (a *app) debugCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "debug INSTALL [COMMAND [ARGS...] [--ARG VALUE]...]",
		Short: "Run a read-only debug command the app declares (logs, describe, ...) in an install",
		Long: `Run a debug command of INSTALL's app (debug/*.toml): a read-only script
with typed arguments (string with a pattern, int with bounds, enum,
duration, component name). Positional ARGS fill the arguments in their
declared order; --ARG VALUE (or --ARG=VALUE) gives one by name. byoc
checks them against their declared shapes, and imsd again: an undeclared
or ill-typed argument is refused, named. The script gets them only in its
environment (ARG_NAME), never in its text.

The command runs as a job in the maintenance mode, without a break-glass
grant (the agent refuses it when the customer turned maintenance off),
audited as debug.run with its arguments; its output is streamed. Without
COMMAND, list the install's debug commands and their arguments. Needs the
debug permission (support, operator, admin).`,
		Example: `  byoc debug acme
  byoc debug acme logs api --since 10m`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			words, named, own, err := splitDebugArgs(cmd, args)
			if err != nil {
				return err
			}
			if own == nil {
				return cmd.Help()
			}
			// cobra's ParseFlags does nothing with DisableFlagParsing.
			fs := cmd.Flags()
			fs.AddFlagSet(cmd.InheritedFlags())
			if err := fs.Parse(own); err != nil {
				return &usageError{msg: err.Error()}
			}
			if pre := cmd.Root().PersistentPreRunE; pre != nil {
				if err := pre(cmd, words); err != nil {
					return err
				}
			}
			if len(words) == 0 {
				return usagef("byoc debug needs INSTALL (and a COMMAND; without one, the install's commands are listed)")
			}
			ctx := cmd.Context()
			c, err := a.connect()
			if err != nil {
				return err
			}
			list, err := c.ListDebugCommands(ctx, connect.NewRequest(&imsv1.ListDebugCommandsRequest{Install: words[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if len(words) == 1 {
				return a.listDebugCommands(words[0], list.Msg)
			}
			var d *imsv1.DebugCommand
			var names []string
			for _, x := range list.Msg.GetCommands() {
				names = append(names, x.GetName())
				if x.GetName() == words[1] {
					d = x
				}
			}
			if d == nil {
				if len(names) == 0 {
					return usagef("app revision %d of %s declares no debug commands (debug/*.toml)", list.Msg.GetAppRevision(), words[0])
				}
				return usagef("no debug command %q in app revision %d of %s; its debug commands: %s", words[1], list.Msg.GetAppRevision(), words[0], strings.Join(names, ", "))
			}
			// Checked here for a quick answer; imsd checks again.
			if _, err := debugCommandFromProto(d).Bind(words[2:], named, list.Msg.GetComponents()); err != nil {
				return usagef("%v", err)
			}
			res, err := c.RunDebugCommand(ctx, connect.NewRequest(&imsv1.RunDebugCommandRequest{Install: words[0], Command: words[1],
				Positional: words[2:], Args: named, Reason: reason}))
			if err != nil {
				return c.wrap(err)
			}
			job := res.Msg.GetJob()
			a.warnAgentOffline(ctx, c, words[0])
			fmt.Fprintf(a.stderr, "==> debug %s on %s (job %s, mode maintenance)%s\n", words[1], words[0], job.GetId(), argsText(d, res.Msg.GetArgs()))
			p := &logPrinter{w: a.stdout, clean: a.terminal(a.stdout), json: a.jsonOutput()}
			return a.followJobWith(ctx, c, job.GetId(), p)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why you run it (recorded in the audit log)")
	return cmd
}

// splitDebugArgs splits byoc debug's command line: words (INSTALL,
// COMMAND, positional arguments), the debug command's named arguments
// (--name value, --name=value; - in a name reads as _), and byoc's own
// flags (--reason, the global ones), for cobra. own is nil when the line
// asks for help.
func splitDebugArgs(cmd *cobra.Command, args []string) (words []string, named map[string]string, own []string, err error) {
	named = map[string]string{}
	own = []string{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			words = append(words, args[i+1:]...)
			return words, named, own, nil
		case arg == "-h" || arg == "--help":
			return nil, nil, nil, nil
		case strings.HasPrefix(arg, "--") && len(arg) > 2:
			name, val, hasVal := strings.Cut(arg[2:], "=")
			f := cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
			if f != nil {
				own = append(own, arg)
				if !hasVal && f.NoOptDefVal == "" && i+1 < len(args) {
					i++
					own = append(own, args[i])
				}
				continue
			}
			if !hasVal {
				if i+1 >= len(args) {
					return nil, nil, nil, usagef("argument --%s needs a value", name)
				}
				i++
				val = args[i]
			}
			name = strings.ReplaceAll(name, "-", "_")
			if _, dup := named[name]; dup {
				return nil, nil, nil, usagef("argument --%s is given twice", name)
			}
			named[name] = val
		case arg == "-o" && i+1 < len(args):
			own = append(own, arg, args[i+1])
			i++
		case strings.HasPrefix(arg, "-o"):
			own = append(own, arg)
		case strings.HasPrefix(arg, "-") && len(arg) > 1:
			return nil, nil, nil, usagef("unknown flag %s: a debug command's arguments are given as --NAME VALUE", arg)
		default:
			words = append(words, arg)
		}
	}
	return words, named, own, nil
}

// debugCommandFromProto is the command p describes, to check arguments
// against (config.DebugCommand.Bind).
func debugCommandFromProto(p *imsv1.DebugCommand) *config.DebugCommand {
	d := &config.DebugCommand{Name: p.GetName(), Description: p.GetDescription(), Timeout: config.Duration(time.Duration(p.GetTimeoutSeconds()) * time.Second)}
	for _, a := range p.GetArgs() {
		d.Args = append(d.Args, config.DebugArg{Name: a.GetName(), Description: a.GetDescription(), Type: a.GetType(), Pattern: a.GetPattern(),
			Min: a.Min, Max: a.Max, Values: a.GetValues(), Required: a.GetRequired(), Default: a.GetDefaultValue(), Sensitive: a.GetSensitive()})
	}
	return d
}

// argsText is a run's arguments, in declared order, for its first line.
func argsText(d *imsv1.DebugCommand, vals map[string]string) string {
	var parts []string
	for _, a := range d.GetArgs() {
		if v, ok := vals[a.GetName()]; ok {
			parts = append(parts, a.GetName()+"="+fmt.Sprintf("%q", v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, " ")
}

// argShape is an argument's declared shape, in a few words.
func argShape(a *imsv1.DebugArg) string {
	s := a.GetType()
	switch {
	case a.GetPattern() != "":
		s += " matching " + a.GetPattern()
	case len(a.GetValues()) > 0:
		s += " (" + strings.Join(a.GetValues(), "|") + ")"
	case a.Min != nil || a.Max != nil:
		lo, hi := "", ""
		if a.Min != nil {
			lo = fmt.Sprint(*a.Min)
		}
		if a.Max != nil {
			hi = fmt.Sprint(*a.Max)
		}
		s += " " + lo + ".." + hi
	}
	switch {
	case a.GetRequired():
		s += ", required"
	case a.GetDefaultValue() != "":
		s += ", default " + a.GetDefaultValue()
	}
	if a.GetSensitive() {
		s += ", sensitive"
	}
	return s
}

func (a *app) listDebugCommands(install string, res *imsv1.ListDebugCommandsResponse) error {
	if a.jsonOutput() {
		return writeJSON(a.stdout, res)
	}
	if len(res.GetCommands()) == 0 {
		fmt.Fprintf(a.stderr, "App revision %d of %s declares no debug commands (debug/*.toml).\n", res.GetAppRevision(), install)
		return nil
	}
	t := newTable(a.stdout, "NAME", "ARGUMENTS", "DESCRIPTION")
	for _, d := range res.GetCommands() {
		var args []string
		for _, x := range d.GetArgs() {
			args = append(args, x.GetName()+": "+argShape(x))
		}
		t.row(d.GetName(), strings.Join(args, "; "), d.GetDescription())
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "From app revision %d. Run one with: byoc debug %s COMMAND [ARGS...] [--ARG VALUE]\n", res.GetAppRevision(), install)
	return nil
}
