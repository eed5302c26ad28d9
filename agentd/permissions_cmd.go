package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/flaghelp"
)

const permissionsUsage = `usage: agentd permissions [--state-dir DIR] COMMAND

The customer's permission modes, kept in DIR/permissions.json. Only this
command changes them; imsd (the vendor) cannot. A running agentd applies a
change within a second: it refuses new jobs of a mode turned off and
cancels running ones.

  show              print the modes and the kill switch
  enable MODE       allow jobs of MODE
  disable MODE      refuse jobs of MODE
  disable-all       kill switch: refuse every job and cancel running ones
                    (the agent stays connected, so the vendor sees
                    "disabled by customer"), until enable-all
  enable-all        lift the kill switch; each mode keeps its own setting

  verify            check the signatures of permissions.json and
                    breakglass.json as the agent does; exit 1 if either
                    is refused
  adopt             sign, as they are, files written before agentd signed
                    them (prints what it signed)
  reset             write the defaults, signed, to permissions.json (and
                    an empty grant list to breakglass.json if it is
                    refused): the way back from a refused file

MODE is provision, maintenance, deprovision or break_glass.

Every write is signed with the agent's key (identity.json) and numbered;
the agent refuses, and then refuses every job, a file it did not sign,
one for another agent, an older copy put back, or one removed after it
accepted one. See docs/customer/control-files.md.
`

// modeDoc says what each mode allows, for show.
var modeDoc = map[permissions.Mode]string{
	permissions.Provision:   "provision workflows: create the install's sandbox and components",
	permissions.Maintenance: "updates, day-2 actions, ad-hoc scripts",
	permissions.Deprovision: "deprovision workflows: tear the install down",
	permissions.BreakGlass:  "break-glass actions, only while a grant you approved is live (agentd breakglass)",
}

// permissionsCmd runs "agentd permissions ...".
func permissionsCmd(args []string, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("agentd permissions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), permissionsUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	dir, code := stateDirArg("agentd permissions", *stateDir, stderr)
	if code != 0 {
		return code
	}
	wantArgs := map[string]int{"show": 0, "enable": 1, "disable": 1, "disable-all": 0, "enable-all": 0, "verify": 0, "adopt": 0, "reset": 0}
	n, ok := wantArgs[cmd]
	if !ok {
		fmt.Fprintf(stderr, "agentd permissions: unknown command %q\n\n%s", cmd, permissionsUsage)
		return 2
	}
	if len(rest) != n {
		fmt.Fprintf(stderr, "agentd permissions %s: want %d argument(s), got %d\n", cmd, n, len(rest))
		return 2
	}
	var change func(*permissions.State)
	switch cmd {
	case "verify":
		return verifyControls(stdout, dir)
	case "adopt":
		return adoptControls(stdout, stderr, dir)
	case "reset":
		st, err := permissions.Reset(dir, now, whoami())
		if err != nil {
			fmt.Fprintf(stderr, "agentd permissions: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "Wrote the defaults, signed.")
		printPermissions(stdout, dir, st)
		return 0
	case "enable", "disable":
		m, err := permissions.ParseMode(rest[0])
		if err != nil {
			fmt.Fprintf(stderr, "agentd permissions %s: %v\n", cmd, err)
			return 2
		}
		change = func(s *permissions.State) { s.Set(m, cmd == "enable") }
	case "disable-all":
		change = func(s *permissions.State) { s.DisabledAll = true }
	case "enable-all":
		change = func(s *permissions.State) { s.DisabledAll = false }
	}
	var st permissions.State
	var err error
	if change == nil {
		st, err = permissions.Load(dir)
	} else {
		st, err = permissions.Update(dir, now, whoami(), change)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd permissions: %v\n", err)
		return 1
	}
	printPermissions(stdout, dir, st)
	return 0
}

func printPermissions(w io.Writer, dir string, st permissions.State) {
	install := ""
	if id, err := identity.Load(dir); err == nil {
		install = " (install " + id.InstallID + ")"
	}
	fmt.Fprintf(w, "Permissions of the agent in %s%s\n", dir, install)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range permissions.Modes {
		on := "off"
		if st.On(m) {
			on = "on"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", m, on, modeDoc[m])
	}
	tw.Flush()
	if st.DisabledAll {
		fmt.Fprintln(w, "All jobs:   DISABLED (kill switch): every job is refused; agentd permissions enable-all lifts it")
	} else {
		fmt.Fprintln(w, "All jobs:   enabled (the modes above decide)")
	}
	if st.ChangedAt.IsZero() {
		fmt.Fprintln(w, "Changed:    never (the defaults)")
	} else {
		by := ""
		if st.ChangedBy != "" {
			by = " by " + st.ChangedBy
		}
		fmt.Fprintf(w, "Changed:    %s%s\n", st.ChangedAt.UTC().Format(time.RFC3339), by)
	}
	if len(st.Windows) > 0 {
		fmt.Fprintf(w, "Windows:    %s (jobs of a release run only inside them; agentd window show)\n", strings.Join(st.Windows, "; "))
	}
}

// verifyControls prints what the agent would make of each control file.
func verifyControls(w io.Writer, dir string) int {
	code := 0
	for _, s := range permissions.Verify(dir) {
		switch {
		case s.Err != nil:
			code = 1
			fmt.Fprintf(w, "REFUSED  %v\n", s.Err)
		case s.Missing && s.Accepted == 0:
			fmt.Fprintf(w, "ok       %s: none (the defaults)\n", s.Path)
		default:
			fmt.Fprintf(w, "ok       %s: signed by key %s, generation %d (the agent accepted up to %d)\n", s.Path, s.KeyID, s.Generation, s.Accepted)
		}
	}
	if code != 0 {
		fmt.Fprintln(w, "The agent refuses every job while a control file is refused.")
	}
	return code
}

// adoptControls signs control files from before signing as they are.
func adoptControls(stdout, stderr io.Writer, dir string) int {
	a, err := permissions.Adopt(dir)
	if err != nil {
		fmt.Fprintf(stderr, "agentd permissions adopt: %v\n", err)
		return 1
	}
	if !a.State && !a.Grants {
		fmt.Fprintln(stdout, "Nothing to adopt: no unsigned control file.")
	}
	if a.Grants {
		gs, err := permissions.LoadGrants(dir)
		if err != nil {
			fmt.Fprintf(stderr, "agentd permissions adopt: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "Signed %s as it was: %d break-glass grant(s)", permissions.GrantsPath(dir), len(gs.Grants))
		if g, ok := gs.Live(time.Now()); ok {
			fmt.Fprintf(stdout, "; LIVE: %s (role %s, approved by %s, until %s)", g.ID, g.Role, g.ApprovedBy, g.ExpiresAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(stdout)
	}
	if a.State {
		st, err := permissions.Load(dir)
		if err != nil {
			fmt.Fprintf(stderr, "agentd permissions adopt: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "Signed %s as it was:\n", permissions.Path(dir))
		printPermissions(stdout, dir, st)
	}
	return 0
}

func whoami() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strings.TrimSpace(os.Getenv("USER"))
}

// parseWords parses a subcommand's flags, which may come before, between
// or after its words, and returns the words. words is nil, after the
// usage or the flag's error was printed, when the flags are bad or there
// is no word (code 2), or when help was asked for (code 0, the usage on
// stdout).
func parseWords(fs *flag.FlagSet, args []string, stdout io.Writer) (words []string, code int) {
	for {
		if code, done := flaghelp.Parse(fs, args, stdout); done {
			return nil, code
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(words) == 0 {
		fs.Usage()
		return nil, 2
	}
	return words, 0
}
