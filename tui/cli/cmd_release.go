package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/byoc-dev/byoc/internal/plural"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// exitHalted ends a release --wait whose release stopped for an operator:
// halted by its failure threshold, or paused.
const exitHalted = 4

func (a *app) releaseCommand() *cobra.Command {
	return group("release", "Roll an app revision out to many installs in waves; follow, pause, resume, cancel, retry and roll back releases",
		a.releaseCreateCommand(),
		a.releaseListCommand(),
		a.releaseGetCommand(),
		a.releaseChangeCommand("approve", "Start the wave a release awaits approval for"),
		a.releaseChangeCommand("pause", "Stop a release from starting more installs (what runs finishes)"),
		a.releaseChangeCommand("resume", "Run a paused or halted release again (a halted one's failures are accepted)"),
		a.releaseChangeCommand("cancel", "Cancel a release: installs not started never start, running ones are cancelled"),
		a.releaseChangeCommand("retry", "Run a release's failed and cancelled installs again, and the release with them"),
		a.releaseRollbackCommand(),
	)
}

func releaseStateName(s imsv1.ReleaseState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "RELEASE_STATE_")), "_", " ")
}

func releaseEnded(s imsv1.ReleaseState) bool {
	return s == imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED || s == imsv1.ReleaseState_RELEASE_STATE_FAILED ||
		s == imsv1.ReleaseState_RELEASE_STATE_CANCELLED
}

// releaseProgress is "12/20 done, 2 failed, 1 waiting".
func releaseProgress(counts map[string]int32) string {
	total := int32(0)
	for _, n := range counts {
		total += n
	}
	out := fmt.Sprintf("%d/%d done", counts["succeeded"], total)
	for _, st := range []string{"running", "waiting", "failed", "cancelled", "skipped"} {
		if n := counts[st]; n > 0 {
			out += fmt.Sprintf(", %d %s", n, st)
		}
	}
	return out
}

func (a *app) releaseCreateCommand() *cobra.Command {
	var rev int64
	var waves, selector, maxFailures, reason string
	var pause time.Duration
	var windows, approval, wait bool
	cmd := &cobra.Command{
		Use:   "create APP --revision N [--waves SPEC] [--selector SEL] [--max-failures N|P%] [--pause-between D] [--respect-windows] [--require-approval] [--wait]",
		Short: "Plan every selected install of an app for a revision and roll it out in waves",
		Long: `Plan every selected install of APP for revision N (installs whose plans
are identical are grouped, as byoc install plan --app shows them), then
roll the revision out wave by wave: an update workflow per install. A
wave starts when the previous one succeeded (and, with --pause-between,
that much later); with --respect-windows each install waits for its
maintenance window; with --require-approval each wave waits for byoc
release approve. More failed installs than --max-failures halt the
release and leave the rest untouched.

--waves is a comma-separated list: a count of installs ("2") or the share
of all the selected installs rolled out by the wave's end ("10%"), each
optionally named ("canary:2"); it must end with every install (100%).`,
		Args: exactArgs("APP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rev < 1 {
				return usagef("--revision is required (byoc app revisions %s lists them)", args[0])
			}
			if pause < 0 {
				return usagef("--pause-between must not be negative")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CreateRelease(cmd.Context(), connect.NewRequest(&imsv1.CreateReleaseRequest{App: args[0], AppRevision: rev,
				Waves: waves, Selector: selector, MaxFailures: maxFailures, PauseBetweenSeconds: int64(pause / time.Second),
				RespectWindows: windows, RequireApproval: approval, Reason: reason}))
			if err != nil {
				return withFlags(c.wrap(err), fieldFlag{"waves", "--waves"}, fieldFlag{"selector", "--selector"},
					fieldFlag{"max_failures", "--max-failures"}, fieldFlag{"revision", "--revision"}, fieldFlag{"app_revision", "--revision"},
					fieldFlag{"pause_between", "--pause-between"})
			}
			r := res.Msg.GetRelease()
			if wait {
				return a.followRelease(cmd.Context(), c, r.GetId())
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "Release %s of %s revision %d: %s in %s (%s).\n", r.GetId(), r.GetAppName(), r.GetAppRevision(),
				plural.Count(int(sumCounts(r.GetCounts())), "install"), plural.Count(len(r.GetWaves()), "wave"), waveSummary(r))
			printPlanGroupsOf(a.stdout, r)
			fmt.Fprintf(a.stdout, "Follow it with: byoc release get %s --wait\n", r.GetId())
			return nil
		},
	}
	cmd.Flags().Int64Var(&rev, "revision", 0, "the app revision to roll out (required)")
	cmd.Flags().StringVar(&waves, "waves", "100%", `the waves: counts or cumulative shares, optionally named ("canary:2,10%,50%,100%")`)
	cmd.Flags().StringVar(&selector, "selector", "", `only installs whose labels match ("tier!=canary")`)
	cmd.Flags().StringVar(&maxFailures, "max-failures", "0", `failed installs tolerated, a count or a share ("5%"); one more halts the release`)
	cmd.Flags().DurationVar(&pause, "pause-between", 0, "wait this long after a wave succeeded before the next starts")
	cmd.Flags().BoolVar(&windows, "respect-windows", false, "start each install only inside its maintenance window")
	cmd.Flags().BoolVar(&approval, "require-approval", false, "each wave waits for byoc release approve")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the release")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the release until it ends (exit codes as release get --wait)")
	return cmd
}

func sumCounts(m map[string]int32) int32 {
	var n int32
	for _, v := range m {
		n += v
	}
	return n
}

// waveSummary is "canary 2, wave 2 0, wave 3 8".
func waveSummary(r *imsv1.Release) string {
	var parts []string
	for _, w := range r.GetWaves() {
		parts = append(parts, fmt.Sprintf("%s: %d", w.GetName(), w.GetSize()))
	}
	return strings.Join(parts, ", ")
}

// printPlanGroupsOf writes a release's distinct plans.
func printPlanGroupsOf(w io.Writer, r *imsv1.Release) {
	if len(r.GetPlanGroups()) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", plural.Count(len(r.GetPlanGroups()), "distinct plan"))
	for i, g := range r.GetPlanGroups() {
		what := strings.Join(g.GetSteps(), "; ")
		switch {
		case g.GetError() != "":
			what = g.GetError()
		case what == "":
			what = "no changes"
		}
		fmt.Fprintf(w, "  %d. %s: %s\n", i+1, plural.Count(int(g.GetInstalls()), "install"), what)
	}
}

func (a *app) releaseListCommand() *cobra.Command {
	return a.releaseListOf("", "No releases; start one with: byoc release create APP --revision N --waves canary:1,100%")
}

// releaseListOf lists releases of kind ("app", "agent"; "" both).
func (a *app) releaseListOf(kind, empty string) *cobra.Command {
	var appName string
	var active, watch bool
	var limit int32
	cmd := &cobra.Command{
		Use:     "list [--app APP] [--active] [--watch]",
		Aliases: []string{"ls"},
		Short:   "List releases, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), a, watch, listing[*imsv1.Release]{
				noun: "releases", empty: empty,
				fetch: func(ctx context.Context) ([]*imsv1.Release, error) {
					res, err := c.ListReleases(ctx, connect.NewRequest(&imsv1.ListReleasesRequest{App: appName, Active: active, PageSize: limit, Kind: kind}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetReleases(), nil
				},
				get: func(ctx context.Context, id string) (*imsv1.Release, error) {
					res, err := c.GetRelease(ctx, connect.NewRequest(&imsv1.GetReleaseRequest{Id: id}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetRelease(), nil
				},
				id:     (*imsv1.Release).GetId,
				header: []string{"ID", "APP", "REVISION", "STATE", "WAVE", "PROGRESS", "CREATED"},
				row: func(_ context.Context, now time.Time, r *imsv1.Release) []string {
					return []string{r.GetId(), r.GetAppName(), revisionText(r), releaseStateName(r.GetState()), waveText(r),
						releaseProgress(r.GetCounts()), ago(now, r.GetCreateTime())}
				},
			})
		},
	}
	cmd.Flags().StringVar(&appName, "app", "", "only releases of this app")
	cmd.Flags().BoolVar(&active, "active", false, "only releases that have not ended")
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many (default 100)")
	watchFlag(cmd, &watch, "each release again as it changes (its wave, its progress; new ones too)")
	return cmd
}

func revisionText(r *imsv1.Release) string {
	if r.GetAgentRelease() != "" {
		return "agent " + shortRef(r.GetAgentRelease())
	}
	if r.GetKind() == "rollback" {
		return "rollback of " + r.GetRollbackOf()
	}
	return strconv.FormatInt(r.GetAppRevision(), 10)
}

// waveText is "2/4 (10%)".
func waveText(r *imsv1.Release) string {
	if len(r.GetWaves()) == 0 {
		return ""
	}
	w := r.GetWaves()[min(int(r.GetCurrentWave()), len(r.GetWaves())-1)]
	return fmt.Sprintf("%d/%d %s", r.GetCurrentWave()+1, len(r.GetWaves()), w.GetName())
}

func (a *app) releaseGetCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "get RELEASE [--wait]",
		Short: "Show a release: its waves, plans and installs; --wait follows it until it ends",
		Long: `Show a release: its waves with their progress, its distinct plans, and
each install that is not done yet or did not succeed.

With --wait, print each wave and install as it changes until the release
ends. Exit codes: 0 it succeeded; 1 it failed or was cancelled; 3 it
awaits approval (byoc release approve); 4 it halted on its failure
threshold or was paused (byoc release resume or retry); 130 interrupted.`,
		Args: exactArgs("RELEASE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if wait {
				return a.followRelease(cmd.Context(), c, args[0])
			}
			res, err := c.GetRelease(cmd.Context(), connect.NewRequest(&imsv1.GetReleaseRequest{Id: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg.GetRelease())
			}
			return a.printRelease(res.Msg.GetRelease())
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "print each change until the release ends (exit 1 unless it succeeds, 3 awaiting approval, 4 halted or paused)")
	return cmd
}

func (a *app) printRelease(r *imsv1.Release) error {
	now := a.now()
	f := newFields(a.stdout)
	f.add("ID", r.GetId())
	f.add("App", r.GetAppName())
	if r.GetAgentRelease() != "" {
		f.add("Agent release", r.GetAgentRelease())
		f.add("Confirm within", (time.Duration(r.GetConfirmWithinSeconds()) * time.Second).String())
	} else {
		f.add("Revision", revisionText(r))
	}
	state := releaseStateName(r.GetState())
	if r.GetCancelRequested() && !releaseEnded(r.GetState()) {
		state += " (cancelling)"
	}
	f.add("State", state)
	f.add("Progress", releaseProgress(r.GetCounts()))
	if r.GetSelector() != "" {
		f.add("Selector", r.GetSelector())
	}
	f.add("Max failures", fmt.Sprintf("%d (%s)", r.GetMaxFailures(), r.GetMaxFailuresSpec()))
	if r.GetFailuresAccepted() > 0 {
		f.add("Failures accepted", strconv.Itoa(int(r.GetFailuresAccepted())))
	}
	if r.GetPauseBetweenSeconds() > 0 {
		f.add("Pause between", (time.Duration(r.GetPauseBetweenSeconds()) * time.Second).String())
	}
	f.add("Windows", map[bool]string{true: "respected", false: "ignored"}[r.GetRespectWindows()])
	f.add("Created", when(now, r.GetCreateTime())+" by "+r.GetCreatedBy())
	if r.GetReason() != "" {
		f.add("Reason", r.GetReason())
	}
	if r.GetRolledBackBy() != "" {
		f.add("Rolled back by", r.GetRolledBackBy())
	}
	if r.GetEndTime() != nil {
		f.add("Ended", when(now, r.GetEndTime()))
	}
	if r.GetError() != "" {
		f.add("Error", r.GetError())
	}
	if err := f.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "", "WAVE", "SPEC", "INSTALLS", "PROGRESS")
	for i, w := range r.GetWaves() {
		mark := " "
		if i == int(r.GetCurrentWave()) && !releaseEnded(r.GetState()) {
			mark = ">"
		}
		t.row(mark, fmt.Sprintf("%d %s", i+1, w.GetName()), w.GetSpec(), strconv.Itoa(int(w.GetSize())), releaseProgress(w.GetCounts()))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	printPlanGroupsOf(a.stdout, r)
	var open []*imsv1.ReleaseInstall
	for _, in := range r.GetInstalls() {
		if in.GetState() != "succeeded" && in.GetState() != "pending" {
			open = append(open, in)
		}
	}
	if len(open) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	if r.GetAgentRelease() != "" {
		t = newTable(a.stdout, "INSTALL", "WAVE", "STATE", "WHAT", "OFFER", "WHY")
	} else {
		t = newTable(a.stdout, "INSTALL", "WAVE", "STATE", "REVISION", "WORKFLOW", "WHY")
	}
	for _, in := range open {
		why := in.GetError()
		if in.GetState() == "waiting" && in.GetWindowOpenTime() != nil {
			why = fmt.Sprintf("window opens %s (%s)", when(now, in.GetWindowOpenTime()), why)
		}
		rev, wf := fmt.Sprintf("%d → %d", in.GetFromRevision(), in.GetToRevision()), in.GetWorkflowId()
		if r.GetAgentRelease() != "" {
			rev, wf = "agent", in.GetOfferId()
		}
		t.row(in.GetInstallName(), strconv.Itoa(int(in.GetWave())+1), in.GetState(), rev, wf, why)
	}
	return t.flush()
}

// followRelease prints each wave start and install change of a release
// until it ends or stops for an operator (exit 3 awaiting approval, 4
// halted or paused).
func (a *app) followRelease(ctx context.Context, c *client, id string) error {
	seen := map[string]string{}
	wave := int32(-1)
	var r *imsv1.Release
	for {
		res, err := c.GetRelease(ctx, connect.NewRequest(&imsv1.GetReleaseRequest{Id: id}))
		if ctx.Err() != nil {
			return a.stoppedFollowingRelease(id, r)
		}
		if err != nil {
			return c.wrap(err)
		}
		r = res.Msg.GetRelease()
		if !a.jsonOutput() {
			if r.GetCurrentWave() != wave && int(r.GetCurrentWave()) < len(r.GetWaves()) {
				wave = r.GetCurrentWave()
				w := r.GetWaves()[wave]
				fmt.Fprintf(a.stdout, "wave %d/%d %s: %s\n", wave+1, len(r.GetWaves()), w.GetName(), plural.Count(int(w.GetSize()), "install"))
			}
			for _, in := range r.GetInstalls() {
				key := in.GetState() + in.GetError()
				if seen[in.GetInstallId()] == key || in.GetState() == "pending" {
					continue
				}
				seen[in.GetInstallId()] = key
				line := fmt.Sprintf("  %-9s %s", in.GetState(), in.GetInstallName())
				if in.GetWorkflowId() != "" && in.GetState() == "running" {
					line += " (workflow " + in.GetWorkflowId() + ")"
				}
				if in.GetOfferId() != "" && in.GetState() == "running" {
					line += " (offer " + in.GetOfferId() + ")"
				}
				if in.GetState() == "waiting" && in.GetWindowOpenTime() != nil {
					line += ": window opens " + when(a.now(), in.GetWindowOpenTime())
				}
				if in.GetError() != "" && in.GetState() != "waiting" {
					line += ": " + in.GetError()
				}
				fmt.Fprintln(a.stdout, line)
			}
		}
		code, msg := -1, ""
		// A halted or paused release stops starting installs; the running
		// ones finish first, so the picture is whole when the wait ends.
		settling := r.GetCounts()["running"] > 0
		switch r.GetState() {
		case imsv1.ReleaseState_RELEASE_STATE_AWAITING_APPROVAL:
			code, msg = exitAwaitingApproval, fmt.Sprintf("Release %s awaits approval of wave %d: byoc release approve %s starts it.", id, r.GetCurrentWave()+1, id)
		case imsv1.ReleaseState_RELEASE_STATE_HALTED:
			if settling {
				break
			}
			code, msg = exitHalted, fmt.Sprintf("Release %s halted: %s. Fix the cause, then byoc release retry %s (run the failed installs again) or byoc release resume %s (accept them and go on).",
				id, r.GetError(), id, id)
		case imsv1.ReleaseState_RELEASE_STATE_PAUSED:
			if settling {
				break
			}
			code, msg = exitHalted, fmt.Sprintf("Release %s is paused: byoc release resume %s goes on.", id, id)
		case imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED:
			code, msg = exitOK, fmt.Sprintf("Release %s succeeded: %s.", id, releaseProgress(r.GetCounts()))
		case imsv1.ReleaseState_RELEASE_STATE_FAILED, imsv1.ReleaseState_RELEASE_STATE_CANCELLED:
			code, msg = exitError, fmt.Sprintf("Release %s %s: %s.", id, releaseStateName(r.GetState()), r.GetError())
		}
		if code >= 0 {
			if a.jsonOutput() {
				if err := writeJSON(a.stdout, r); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(a.stdout, msg)
			}
			if code == exitOK {
				return nil
			}
			return &exitCodeError{code: code}
		}
		select {
		case <-ctx.Done():
			return a.stoppedFollowingRelease(id, r)
		case <-time.After(followPoll):
		}
	}
}

func (a *app) stoppedFollowingRelease(id string, r *imsv1.Release) error {
	at := ""
	if r != nil {
		at = fmt.Sprintf(" (%s: %s)", releaseStateName(r.GetState()), releaseProgress(r.GetCounts()))
	}
	fmt.Fprintf(a.stderr, "Stopped following release %s%s; it keeps running (resume with: byoc release get %s --wait; stop it with: byoc release pause %s).\n",
		id, at, id, id)
	return &exitCodeError{code: exitInterrupted}
}

// releaseChangeCommand is approve, pause, resume, cancel or retry.
func (a *app) releaseChangeCommand(verb, short string) *cobra.Command {
	var reason string
	var wait bool
	cmd := &cobra.Command{
		Use:   verb + " RELEASE [--reason TEXT] [--wait]",
		Short: short,
		Args:  exactArgs("RELEASE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			ctx, id := cmd.Context(), args[0]
			r, err := changeRelease(ctx, c, verb, id, reason)
			if err != nil {
				return c.wrap(err)
			}
			if wait {
				return a.followRelease(ctx, c, id)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "Release %s: %s (%s).\n", id, releaseStateName(r.GetState()), releaseProgress(r.GetCounts()))
			if verb == "cancel" && r.GetKind() == "agent" {
				fmt.Fprintln(a.stdout, "Offers no agent took are withdrawn: an agent drops one when it hears of it (a deferred one is never applied). An install whose agent applied the release keeps it (not rolled back): roll the previous release out to go back.")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit log")
	cmd.Flags().BoolVar(&wait, "wait", false, "then follow the release (exit codes as release get --wait)")
	return cmd
}

func (a *app) releaseRollbackCommand() *cobra.Command {
	var reason string
	var wait bool
	cmd := &cobra.Command{
		Use:   "rollback RELEASE [--reason TEXT] [--wait]",
		Short: "Re-deploy each install a release touched at its previous revision: a new release, last wave first",
		Long: `Create a release that re-deploys each install RELEASE touched (started)
at the revision it had before, in reverse wave order: the last wave's
installs first, the canaries last. RELEASE, if it has not ended, is
cancelled. The rollback never halts on failures; follow it with byoc
release get.`,
		Args: exactArgs("RELEASE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.RollbackRelease(cmd.Context(), connect.NewRequest(&imsv1.RollbackReleaseRequest{Id: args[0], Reason: reason}))
			if err != nil {
				return c.wrap(err)
			}
			r := res.Msg.GetRelease()
			if wait {
				return a.followRelease(cmd.Context(), c, r.GetId())
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "Rollback %s of release %s: %s in %s (%s).\n", r.GetId(), args[0], plural.Count(int(sumCounts(r.GetCounts())), "install"),
				plural.Count(len(r.GetWaves()), "wave"), waveSummary(r))
			fmt.Fprintf(a.stdout, "Follow it with: byoc release get %s --wait\n", r.GetId())
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the rollback and in the audit log")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the rollback until it ends (exit codes as release get --wait)")
	return cmd
}

// changeRelease calls the RPC of verb on release id.
func changeRelease(ctx context.Context, c *client, verb, id, reason string) (*imsv1.Release, error) {
	switch verb {
	case "approve":
		res, err := c.ApproveRelease(ctx, connect.NewRequest(&imsv1.ApproveReleaseRequest{Id: id, Reason: reason}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetRelease(), nil
	case "pause":
		res, err := c.PauseRelease(ctx, connect.NewRequest(&imsv1.PauseReleaseRequest{Id: id, Reason: reason}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetRelease(), nil
	case "resume":
		res, err := c.ResumeRelease(ctx, connect.NewRequest(&imsv1.ResumeReleaseRequest{Id: id, Reason: reason}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetRelease(), nil
	case "cancel":
		res, err := c.CancelRelease(ctx, connect.NewRequest(&imsv1.CancelReleaseRequest{Id: id, Reason: reason}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetRelease(), nil
	}
	res, err := c.RetryRelease(ctx, connect.NewRequest(&imsv1.RetryReleaseRequest{Id: id, Reason: reason}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetRelease(), nil
}
