package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

const identityUsage = `usage: agentd identity [--state-dir DIR] COMMAND

The agent's own identity: the Ed25519 key it made at enrolment, which
authenticates it to imsd and signs the customer's control files
(permissions.json, breakglass.json) in DIR.

  show                 print the agent, its install, its key's id, the keys
                       it replaced, and the rotation under way, if any
  rotate [--wait D]    rotate the agent's key: make the next key, endorsed by
                       the current one (DIR/identity-next.json). The agent,
                       running or at its next start, announces it to imsd in
                       its hello; once imsd records it, the agent re-signs
                       the control files with it, saves it in identity.json
                       and reconnects under it, and imsd refuses the old key
                       from then on. No re-enrolment; jobs keep running.
                       With --wait, wait up to D for the agent to complete it
                       (exit 1 if it did not).

A rotation never goes backwards: stopped at any step, the agent starts
with the old or the new key and every control file verifies; it completes
when imsd can be reached. See docs/customer/control-files.md.
`

// identityCmd runs "agentd identity ...".
func identityCmd(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd identity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), identityUsage) }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	wait := fs.Duration("wait", 0, "with rotate: wait up to this `long` for the agent to complete the rotation")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	if len(rest) != 0 {
		fmt.Fprintf(stderr, "agentd identity %s: takes no arguments\n", cmd)
		return 2
	}
	if cmd != "show" && cmd != "rotate" {
		fmt.Fprintf(stderr, "agentd identity: unknown command %q: want show or rotate\n", cmd)
		return 2
	}
	dir, id, code := agentIdentity("agentd identity "+cmd, *stateDir, stderr)
	if code != 0 {
		return code
	}
	if cmd == "show" {
		return identityShow(dir, id, stdout, stderr)
	}
	r, err := identity.BeginRotation(dir, now(), whoami())
	if errors.Is(err, identity.ErrRotationPending) && *wait > 0 {
		fmt.Fprintf(stdout, "A rotation is under way already: next key %s.\n", agentproto.KeyID(r.Public()))
	} else if err != nil {
		fmt.Fprintf(stderr, "agentd identity rotate: %v\n", err)
		return 1
	} else {
		fmt.Fprintf(stdout, "Next key %s written to %s, endorsed by the current key %s.\n", agentproto.KeyID(r.Public()), identity.RotationFileName, identity.KeyIDOf(id.PrivateKey))
	}
	if *wait <= 0 {
		fmt.Fprintln(stdout, "The agent completes the rotation when it next reaches imsd (a running agent within seconds); `agentd identity show` says when it is done.")
		return 0
	}
	deadline := time.NewTimer(*wait)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if cur, err := identity.Load(dir); (err == nil || errors.Is(err, identity.ErrNoIMSDKey)) && cur.PrivateKey.Equal(r.PrivateKey) {
			fmt.Fprintf(stdout, "Rotated: the agent's key is %s; imsd refuses the old key %s from the agent's next hello.\n", agentproto.KeyID(r.Public()), identity.KeyIDOf(id.PrivateKey))
			return 0
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr, "agentd identity rotate: interrupted; the rotation stays under way")
			return 1
		case <-deadline.C:
			fmt.Fprintf(stderr, "agentd identity rotate: the agent did not complete the rotation within %s (is it running, and can it reach imsd?); it stays under way and completes at the agent's next connection\n", *wait)
			return 1
		case <-tick.C:
		}
	}
}

func identityShow(dir string, id identity.Identity, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "Agent:      %s\nInstall:    %s\nimsd:       %s\nKey:        %s\n", id.AgentID, id.InstallID, id.IMSURL, identity.KeyIDOf(id.PrivateKey))
	if !id.KeyRotatedAt.IsZero() {
		fmt.Fprintf(stdout, "Rotated:    %s\n", id.KeyRotatedAt.UTC().Format(time.RFC3339))
	}
	if len(id.PreviousKeyIDs) > 0 {
		fmt.Fprintf(stdout, "Replaced:   %s\n", strings.Join(id.PreviousKeyIDs, ", "))
	}
	r, err := identity.PendingRotation(dir, id)
	switch {
	case err != nil:
		fmt.Fprintf(stdout, "Rotation:   refused: %v\n", err)
		return 1
	case r == nil:
		fmt.Fprintln(stdout, "Rotation:   none under way")
	default:
		fmt.Fprintf(stdout, "Rotation:   under way to key %s (started %s by %s): the agent completes it when imsd has recorded it\n",
			agentproto.KeyID(r.PrivateKey.Public().(ed25519.PublicKey)), r.StartedAt.Format(time.RFC3339), r.StartedBy)
	}
	return 0
}
