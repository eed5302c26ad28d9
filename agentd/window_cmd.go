package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/window"
)

const windowUsage = `usage: agentd window [--state-dir DIR] COMMAND

The customer's maintenance windows, kept with the permission modes in
DIR/permissions.json (signed, like them). Only this command changes them;
imsd (the vendor) cannot. The agent refuses a job of a release (a
window-bound job) while none of these windows is open, by its own clock,
even if imsd sends one, and records the refusal in its journal. imsd
reads the windows from the agent's hello and holds such jobs until they
and the vendor's windows are open. Other jobs (actions, drift checks,
one-off provisions) are not bound by windows.

  show                 print the windows, whether one is open now, and
                       when the next opens
  set WINDOW...        replace the windows with these (at least one)
  clear                remove every window: no restriction

WINDOW is DAYS HH:MM-HH:MM ZONE, quoted, such as
  "Sat 02:00-06:00 Europe/Berlin"
  "Mon-Fri 22:00-02:00 America/New_York"   (ends 02:00 the next day)
  "Sat,Sun 00:00-24:00 UTC"  or  "daily 03:00-04:00 Asia/Tokyo"
Times are wall clock in the zone (an IANA name). See
docs/customer/maintenance-windows.md.
`

// windowCmd runs "agentd window ...".
func windowCmd(args []string, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("agentd window", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), windowUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	dir, code := stateDirArg("agentd window", *stateDir, stderr)
	if code != 0 {
		return code
	}
	var st permissions.State
	var err error
	switch cmd {
	case "show":
		if len(rest) != 0 {
			fmt.Fprintf(stderr, "agentd window show: takes no arguments\n")
			return 2
		}
		st, err = permissions.Load(dir)
	case "set":
		if len(rest) == 0 {
			fmt.Fprintf(stderr, "agentd window set: give at least one window, such as \"Sat 02:00-06:00 Europe/Berlin\"\n")
			return 2
		}
		s, perr := window.ParseSchedule(rest)
		if perr != nil {
			fmt.Fprintf(stderr, "agentd window set: %v\n", perr)
			return 2
		}
		texts := make([]string, 0, len(rest))
		for _, w := range s.Windows() {
			texts = append(texts, w.String())
		}
		st, err = permissions.Update(dir, now, whoami(), func(s *permissions.State) { s.Windows = texts })
	case "clear":
		if len(rest) != 0 {
			fmt.Fprintf(stderr, "agentd window clear: takes no arguments\n")
			return 2
		}
		st, err = permissions.Update(dir, now, whoami(), func(s *permissions.State) { s.Windows = nil })
	default:
		fmt.Fprintf(stderr, "agentd window: unknown command %q\n\n%s", cmd, windowUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd window: %v\n", err)
		return 1
	}
	printWindows(stdout, dir, st, now)
	return 0
}

func printWindows(w io.Writer, dir string, st permissions.State, now time.Time) {
	install := ""
	if id, err := identity.Load(dir); err == nil {
		install = " (install " + id.InstallID + ")"
	}
	fmt.Fprintf(w, "Maintenance windows of the agent in %s%s\n", dir, install)
	s, err := window.ParseSchedule(st.Windows)
	switch {
	case err != nil:
		fmt.Fprintf(w, "  UNREADABLE: %v (jobs of a release are refused; set them again)\n", err)
		return
	case s.Empty():
		fmt.Fprintln(w, "  none: jobs of a release may run at any time (the vendor's windows still apply at imsd)")
		return
	}
	for _, x := range s.Windows() {
		fmt.Fprintf(w, "  %s\n", x)
	}
	if s.Contains(now) {
		fmt.Fprintf(w, "Now:        open, until %s\n", s.CloseAfter(now).UTC().Format(time.RFC3339))
	} else {
		next := s.NextOpening(now)
		fmt.Fprintf(w, "Now:        closed: jobs of a release are refused; next opens %s (in %s)\n",
			next.UTC().Format(time.RFC3339), next.Sub(now).Round(time.Minute))
	}
}
