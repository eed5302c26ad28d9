package cli

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/internal/asciicast"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

func (a *app) supportRecordingsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "recordings INSTALL",
		Short: "List the support session recordings imsd keeps of an install (those its customer sends)",
		Long: `List the recordings imsd keeps of INSTALL's support sessions: only those the
customer's agent sent (agentd --session-recordings-to-vendor; off by
default; the customer always keeps its own, agentd session list). Each
shows its session id, operator, start, end, size, the SHA-256 imsd
computed when it kept it, as the install's audit chain recorded it (what
byoc support play checks the bytes against), and CHECK: ok, or tampered
when the kept bytes do not match it (play refuses those). Needs the
break-glass permission (support, admin) on the install, as a support
shell does.`,
		Example: `  byoc support recordings acme
  byoc support play ses_…`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.ListSupportRecordings(cmd.Context(), connect.NewRequest(&imsv1.ListSupportRecordingsRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			recs := res.Msg.GetRecordings()
			if a.jsonOutput() {
				return writeJSONList(a.stdout, recs)
			}
			if len(recs) == 0 {
				fmt.Fprintf(a.stderr, "No recordings of %s's support sessions are kept: its customer keeps them (agentd session list) unless its agent runs with --session-recordings-to-vendor.\n", args[0])
				return nil
			}
			t := newTable(a.stdout, "ID", "OPERATOR", "STARTED", "ENDED", "SIZE", "SHA-256", "CHECK")
			when := func(ts *timestamppb.Timestamp) string {
				if ts == nil {
					return "-"
				}
				return ts.AsTime().UTC().Format(time.RFC3339)
			}
			for _, r := range recs {
				op := r.GetOperator()
				if op == "" {
					op = "-"
				}
				check := "ok"
				if r.GetTampered() {
					check = "tampered"
				}
				t.row(r.GetSessionId(), op, when(r.GetStartTime()), when(r.GetEndTime()),
					strconv.FormatInt(r.GetSize(), 10), cmp.Or(r.GetSha256(), "-"), check)
			}
			return t.flush()
		},
	}
}

func (a *app) supportPlayCommand() *cobra.Command {
	var speed float64
	var raw bool
	cmd := &cobra.Command{
		Use:   "play ID [--raw] [--speed N]",
		Short: "Replay a kept support session recording to the terminal, after checking its SHA-256",
		Long: `Replay the output of support session ID's recording, as imsd keeps it
(byoc support recordings INSTALL), with its timing, as agentd session play
does on the customer's side. The recording's SHA-256 is checked against
the one imsd stored when it kept it first: a recording that does not match
is refused, naming it, and nothing is played. --raw writes the output
bytes exactly, with no timing. Needs the break-glass permission (support,
admin) on the recording's install.`,
		Example: `  byoc support play ses_… --speed 4
  byoc support play ses_… --raw > session.txt`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if speed < 0.1 || speed > 1000 {
				return usagef("--speed must be between 0.1 and 1000, not %g", speed)
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetSupportRecording(cmd.Context(), connect.NewRequest(&imsv1.GetSupportRecordingRequest{Id: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			data := res.Msg.GetData()
			sum := sha256.Sum256(data)
			if got, want := hex.EncodeToString(sum[:]), res.Msg.GetRecording().GetSha256(); got != want {
				return fmt.Errorf("recording of support session %s is tampered with: its SHA-256 is %s, imsd stored %s when it kept it; not playing it", args[0], got, want)
			}
			_, evs, err := asciicast.Read(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("recording of support session %s: %w", args[0], err)
			}
			return asciicast.Play(cmd.Context(), evs, speed, raw, a.stdout)
		},
	}
	cmd.Flags().Float64Var(&speed, "speed", 1, "replay `N` times faster (0.1 to 1000)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the output bytes exactly, with no timing")
	return cmd
}
