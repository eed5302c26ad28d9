// Package cli implements the byoc operator command line: contexts (named
// servers and tokens kept in a config file) and commands that call imsd's
// OperatorService over Connect. Main runs one command line and returns its
// exit code, so that tests drive the real commands with buffers.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// Exit codes. A followed job that ends badly exits with the job's own exit
// code instead (or exitError when it has none).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitChanges ends a diff or a plan given --detailed-exitcode that
	// found changes, as terraform plan -detailed-exitcode does.
	exitChanges = 2
	// exitAwaitingApproval ends a --wait whose workflow stopped to await
	// the approval of its plan: not finished, and not failed.
	exitAwaitingApproval = 3
	// exitInterrupted ends a run stopped by Ctrl-C or SIGTERM (128+SIGINT,
	// as shells report it).
	exitInterrupted = 130
)

// Main runs the byoc command line args (without the program name) and
// returns the process exit code: 0 on success, 1 on an error, 2 on a usage
// error, or a followed job's exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{
		stdin:    stdin,
		stdout:   stdout,
		stderr:   stderr,
		getenv:   os.Getenv,
		now:      time.Now,
		terminal: isTerm,
		stdinTerminal: func() bool {
			f, ok := stdin.(*os.File)
			return ok && term.IsTerminal(f.Fd())
		},
	}
	return a.run(ctx, args)
}

// isTerm reports whether w is a terminal.
func isTerm(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

// app is the state of one command line run: its streams, the global flags
// and, once resolved, the config.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	// terminal reports whether a stream is a terminal, where text that
	// jobs wrote is cleaned of control sequences (termtext).
	terminal func(io.Writer) bool
	// stdinTerminal reports whether standard input is a terminal, where a
	// destructive command may ask for confirmation.
	stdinTerminal func() bool

	// Global flags.
	contextName string
	server      string
	token       string
	output      string
	readOnly    bool

	// format is the parsed --output when it asks for structured output
	// (json, yaml, name, jsonpath, go-template), nil for text and wide.
	format *outputFormat
	// sortBy is a list command's --sort-by (sort.go).
	sortBy string
	// showLabels is install list's --show-labels: a LABELS column.
	showLabels bool

	// started is set once cobra has parsed and validated the command line
	// and runs a command; errors before that are usage errors.
	started bool
}

// usageError is a command line mistake: exit code 2 and a pointer to --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCodeError ends the run with a given exit code after its message (if
// any) has been printed.
type exitCodeError struct {
	code int
	msg  string // printed as "error: msg" unless empty
}

func (e *exitCodeError) Error() string { return e.msg }

func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	var ee *exitCodeError
	switch {
	case errors.As(err, &ee):
		if ee.msg != "" {
			a.printError(ee.msg, ee.code, "")
		}
		return ee.code
	case errors.As(err, &ue) || !a.started:
		if cmd == nil {
			cmd = root
		}
		a.printError(err.Error(), exitUsage, fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath()))
		return exitUsage
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		a.printError("interrupted", exitInterrupted, "")
		return exitInterrupted
	default:
		a.printError(a.describe(err), exitError, "")
		return exitError
	}
}

// errorJSON is an error as -o json prints it on standard error: one
// object, so that a script reading JSON never has to parse text.
type errorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exitCode"`
	Hint     string `json:"hint,omitempty"`
}

// printError prints an error on standard error: "error: msg" and the
// hint's line, or under -o json one errorJSON object.
func (a *app) printError(msg string, code int, hint string) {
	// A script reading JSON or YAML gets its error as an object too.
	f := a.format
	if f == nil {
		// The command line stopped before --output was checked.
		f, _ = parseOutput(a.output)
	}
	if f != nil && (f.name == "json" || f.name == "yaml") {
		var w io.Writer = a.stderr
		if f.name == "yaml" {
			w = &formatWriter{w: a.stderr, f: f}
		}
		if writeJSONValue(w, errorJSON{Error: msg, ExitCode: code, Hint: hint}) == nil {
			return
		}
	}
	if a.terminal != nil && a.terminal(a.stderr) {
		// An error may quote what a job, a workflow or an agent wrote.
		msg, hint = termLines(msg), termLines(hint)
	}
	fmt.Fprintf(a.stderr, "error: %s\n", msg)
	if hint != "" {
		fmt.Fprintln(a.stderr, hint)
	}
}

// termLines is s with every control character and escape sequence of
// each line shown, not obeyed (termtext); its line breaks stay.
func termLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termtext.Clean(l, "\t")
	}
	return strings.Join(lines, "\n")
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "byoc",
		Short: "Operate byoc: apps, installs, jobs and their logs",
		Long: `byoc is the operator program of byoc. It talks to one imsd server, chosen
by the current context (see "byoc context --help") or by --server and --token.
Without a command it opens the interactive console (press ? in it for keys).

Exit codes: 0 success; 1 an error, or a --wait whose workflow failed; 2 a
usage error; 3 a --wait whose workflow awaits approval; 130 stopped by
Ctrl-C or SIGTERM (a follow says where it stopped); --follow on a job
exits with the job's own exit code.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Without a command, open the interactive console.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return a.runConsole(cmd.Context())
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseOutput(a.output)
			if err != nil {
				return err
			}
			a.format = f
			if f != nil && f.name != "json" {
				a.stdout = &formatWriter{w: a.stdout, f: f}
			}
			return nil
		},
		// "completion" is listed in --help: how to install it is there.
		Version: buildinfo.Get().String("byoc"),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// Declared here so that cobra adds no -v shorthand.
	root.Flags().Bool("version", false, "print the version, commit and build date")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// A mistyped command followed by its flags ("byoc instal list
		// --app shop"): cobra stops at the command it found (byoc) and
		// trips on a flag it lacks. The command is the mistake: say so.
		if words := cmd.Flags().Args(); cmd.HasSubCommands() && len(words) > 0 {
			if sub, _, ferr := cmd.Find(words[:1]); ferr == nil && sub == cmd {
				return unknownCommand(cmd, words[0])
			}
		}
		return &usageError{msg: err.Error()}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.contextName, "context", "", "use this context instead of the current one")
	pf.StringVar(&a.server, "server", "", "imsd URL, overriding the context's (http:// or https://)")
	pf.StringVar(&a.token, "token", "", "API token, overriding the context's")
	pf.StringVarP(&a.output, "output", "o", "text", outputHelp)
	root.Flags().BoolVar(&a.readOnly, "readonly", false, "console: leave every key that changes something unbound")

	root.AddCommand(
		a.contextCommand(),
		a.whoamiCommand(),
		a.authCommand(),
		a.loginCommand(),
		a.tokenCommand(),
		a.appCommand(),
		a.installCommand(),
		a.componentCommand(),
		a.workflowCommand(),
		a.releaseCommand(),
		a.actionCommand(),
		a.debugCommand(),
		a.telemetryCommand(),
		a.supportCommand(),
		a.jobCommand(),
		a.logsCommand(),
		a.pluginCommand(),
		a.breakglassCommand(),
		a.auditCommand(),
		a.buildCommand(),
		a.agentCommand(),
		a.bundleCommand(),
	)
	a.addSortFlags(root)
	addExamples(root)
	a.addCompletions(root)
	a.markStart(root)
	return root
}

// markStart wraps the RunE of cmd and its descendants to record that cobra
// accepted the command line: cobra checks required flags only just before
// RunE, after every hook.
func (a *app) markStart(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			a.started = true
			return run(cmd, args)
		}
	}
	for _, sub := range cmd.Commands() {
		a.markStart(sub)
	}
}

// group returns a command that only holds subcommands: without arguments it
// prints its help, and an unknown subcommand is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}

// unknownCommand is the usage error for a mistyped command name under
// cmd, suggesting the subcommands it is close to (cobra's edit distance
// and prefix match), as kubectl does.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if sug := cmd.SuggestionsFor(name); len(sug) > 0 {
		for i, s := range sug {
			sug[i] = strconv.Quote(s)
		}
		msg += " (did you mean " + strings.Join(sug, " or ") + "?)"
	}
	return &usageError{msg: msg}
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usagef("missing %s", strings.Join(names[len(args):], ", "))
		}
		if len(args) > len(names) {
			return usagef("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}

var noArgs = exactArgs()

// jsonOutput reports whether the command prints its objects (as JSON, or
// in a format rendered from the JSON) rather than text.
func (a *app) jsonOutput() bool { return a.format != nil }

// wideOutput reports whether tables show ids beside the names they show.
func (a *app) wideOutput() bool { return a.output == "wide" }
