package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

const identityUsage = `usage: agentd identity [--state-dir DIR] [--ims URL] COMMAND

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
  revoke --yes [--reason R]
                       end the vendor's access through this agent for good,
                       beyond the kill switch (agentd permissions
                       disable-all, which keeps the agent connected and can
                       be lifted): imsd is told, signed with the agent's key,
                       and refuses the agent from then on; the agent's keys
                       are erased from DIR; a running agent stops every job
                       and exits within a second; no agent starts on DIR
                       again. The way back is a new agent, enrolled with a
                       new enrolment token from the vendor, in a new DIR.
                       If imsd cannot be reached the revocation still holds
                       here (the vendor then sees the agent offline).

The agent can also rotate on its own schedule (agentd --rotate-key-every).
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
	ims := fs.String("ims", os.Getenv("BYOC_IMS_URL"), "with revoke: imsd `URL` (default: the one the agent enrolled with); also $BYOC_IMS_URL")
	yes := fs.Bool("yes", false, "with revoke: confirm (a revocation is final)")
	reason := fs.String("reason", "", "with revoke: why, for the vendor's audit log")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	cmd, rest := words[0], words[1:]
	if len(rest) != 0 {
		fmt.Fprintf(stderr, "agentd identity %s: takes no arguments\n", cmd)
		return 2
	}
	if cmd != "show" && cmd != "rotate" && cmd != "revoke" {
		fmt.Fprintf(stderr, "agentd identity: unknown command %q: want show, rotate or revoke\n", cmd)
		return 2
	}
	if cmd == "revoke" {
		return identityRevoke(ctx, *stateDir, *ims, *reason, *yes, stdout, stderr, now)
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
		// Done when identity.json holds the new key and the rotation's
		// file is gone (the agent removes it right after saving the key).
		if cur, err := identity.Load(dir); (err == nil || errors.Is(err, identity.ErrNoIMSDKey)) && cur.PrivateKey.Equal(r.PrivateKey) && rotationGone(dir) {
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

// rotationGone reports whether no rotation file is left in dir.
func rotationGone(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, identity.RotationFileName))
	return errors.Is(err, fs.ErrNotExist)
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

// identityRevoke runs "agentd identity revoke": imsd first (the key is
// needed to sign), then the state dir, which holds whatever imsd said.
func identityRevoke(ctx context.Context, stateDir, ims, reason string, yes bool, stdout, stderr io.Writer, now func() time.Time) int {
	if len(reason) > 512 {
		fmt.Fprintln(stderr, "agentd identity revoke: --reason is longer than 512 bytes")
		return 2
	}
	dir, code := stateDirArg("agentd identity revoke", stateDir, stderr)
	if code != 0 {
		return code
	}
	if r, err := identity.Revoked(dir); err == nil && r != nil {
		if r.IMSDTold || r.Call == nil {
			fmt.Fprintf(stdout, "Already revoked: %v\n", identity.RevokedError(dir, r))
			return 0
		}
		return identityRevokeTellAgain(ctx, dir, ims, r, stdout, stderr)
	}
	id, err := identity.Load(dir)
	if err != nil && !errors.Is(err, identity.ErrNoIMSDKey) {
		fmt.Fprintf(stderr, "agentd identity revoke: the agent's identity in %s: %v\n", dir, err)
		return 1
	}
	if !yes {
		fmt.Fprintf(stderr, "agentd identity revoke: this ends the vendor's access through agent %s for good (a new agent must be enrolled to restore it); pass --yes to go ahead, or use `agentd permissions disable-all` to refuse every job until you lift it\n", id.AgentID)
		return 2
	}
	if ims == "" {
		ims = id.IMSURL
	}
	by := whoami()
	rev := identity.Revocation{At: now().UTC().Truncate(time.Second), By: by, Reason: reason}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	t := now()
	client, done := commandClient(dir, id.InstallID, ims, stderr)
	sig := agentproto.SignRevokeSelf(id.PrivateKey, id.AgentID, by, reason, t)
	_, terr := client.RevokeSelf(cctx, connect.NewRequest(&agentv1.RevokeSelfRequest{
		AgentId: id.AgentID, Time: timestamppb.New(t), By: by, Reason: reason, Signature: sig}))
	done()
	rev.IMSDTold = terr == nil
	if terr != nil {
		// Kept to tell imsd later: the key that signs it is erased now.
		rev.Call = &identity.RevokeCall{Time: t, Signature: sig}
	}
	if err := identity.Revoke(dir, rev); err != nil {
		fmt.Fprintf(stderr, "agentd identity revoke: %v\n", err)
		return 1
	}
	if terr != nil {
		fmt.Fprintf(stdout, "Revoked agent %s here: its keys are erased and it never connects again. imsd at %s could not be told (%v): the vendor sees the agent offline, not revoked, and a copy of this state directory made before now can still connect. Run this command again once imsd is reachable: it sends the revocation signed now (kept in %s).\n",
			id.AgentID, ims, terr, identity.RevokedFileName)
		return 0
	}
	fmt.Fprintf(stdout, "Revoked agent %s: imsd refuses it from now on (audited agent.revoked), its keys are erased here, and a running agent stops within a second.\n", id.AgentID)
	return 0
}

// identityRevokeTellAgain sends imsd the revocation the customer made
// while imsd could not be reached, as it was signed then (the key is
// erased since), and records that imsd has it.
func identityRevokeTellAgain(ctx context.Context, dir, ims string, r *identity.Revocation, stdout, stderr io.Writer) int {
	id, err := identity.LoadErased(dir)
	if err != nil {
		fmt.Fprintf(stderr, "agentd identity revoke: the agent's identity in %s: %v\n", dir, err)
		return 1
	}
	if ims == "" {
		ims = id.IMSURL
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	client, done := commandClient(dir, id.InstallID, ims, stderr)
	_, err = client.RevokeSelf(cctx, connect.NewRequest(&agentv1.RevokeSelfRequest{
		AgentId: id.AgentID, Time: timestamppb.New(r.Call.Time), By: r.By, Reason: r.Reason, Signature: r.Call.Signature}))
	done()
	if err != nil {
		fmt.Fprintf(stderr, "agentd identity revoke: agent %s is revoked here, but imsd at %s still could not be told: %v; run this again once it is reachable\n", id.AgentID, ims, err)
		return 1
	}
	if err := identity.MarkIMSDTold(dir); err != nil {
		fmt.Fprintf(stderr, "agentd identity revoke: imsd has the revocation, but %s: %v\n", identity.RevokedFileName, err)
		return 1
	}
	fmt.Fprintf(stdout, "Told imsd of the revocation of agent %s made here at %s: imsd refuses it from now on (audited agent.revoked).\n", id.AgentID, r.At.UTC().Format(time.RFC3339))
	return 0
}
