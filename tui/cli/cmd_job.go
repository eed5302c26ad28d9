package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/internal/backoff"
	"github.com/byoc-dev/byoc/internal/reltime"
	"github.com/byoc-dev/byoc/plugins/sdk/loglevel"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

func (a *app) actionCommand() *cobra.Command {
	return group("action", "Run scripted actions on installs", a.actionRunCommand(), a.actionListCommand(), a.actionRunsCommand())
}

func (a *app) actionRunCommand() *cobra.Command {
	var timeout time.Duration
	var maxAttempts int32
	var follow, wait, windowBound bool
	var reason, mode string
	lf := logFormat{}
	cmd := &cobra.Command{
		Use:   "run INSTALL ACTION [--wait] | run INSTALL... [--timeout 10m] [--mode M] [--follow] -- SCRIPT...",
		Short: "Run a named action of an install's app, or an ad-hoc script",
		Long: `Run one of the app's actions (actions/*.toml; byoc action list INSTALL
lists them) as an action run: a workflow of kind action with one step, run
when the install has no other workflow running. With --wait, follow it to
its end, print its outputs and exit 1 unless it succeeded.

With -- instead of ACTION, run an ad-hoc script as an action job: the words
after -- are joined with spaces into one script step. Prints the job id;
with --follow, streams the job's logs and exits with the job's exit code.
Name several installs before -- to run the script on each: the jobs are
enqueued together, all or none, and a line per job is printed (job id,
install).

Every job needs a permission mode that the customer has turned on in their
account (agentd permissions); a named action needs the mode it declares,
a script needs --mode (default maintenance). A job whose mode is off is
refused by the agent and never runs.`,
		Example: `  byoc action run shop-acme migrate --wait
  byoc action run shop-acme -- 'df -h && uptime'
  byoc action run shop-acme -f --timeout 5m -- ./migrate.sh --dry-run
  byoc action run shop-acme shop-globex shop-initech -- 'systemctl is-active app'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0 || dash == 0:
				return usagef("missing INSTALL")
			case dash < 0 && len(args) == 1:
				return usagef("missing ACTION (byoc action list %s lists them), or a script after --, as in: byoc action run %s -- echo hello", args[0], args[0])
			case dash < 0 && len(args) > 2:
				return usagef("unexpected argument %q after ACTION (a script goes after --)", args[2])
			case dash >= 1 && len(args) == dash:
				return usagef("missing the script: put it after --, as in: byoc action run %s -- echo hello", args[0])
			}
			if dash > 1 {
				seen := map[string]bool{}
				for _, in := range args[:dash] {
					if seen[in] {
						return usagef("install %q is named twice", in)
					}
					seen[in] = true
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 0 {
				if follow || windowBound || cmd.Flags().Changed("timeout") || cmd.Flags().Changed("max-attempts") || cmd.Flags().Changed("mode") {
					return usagef("--follow, --timeout, --max-attempts and --mode are for a script after --; a named action has its own timeout and mode (use --wait to follow it)")
				}
				return a.runNamedAction(cmd.Context(), args[0], args[1], reason, wait)
			}
			if wait || reason != "" {
				return usagef("--wait and --reason are for a named action; follow a script job with --follow")
			}
			dash := cmd.ArgsLenAtDash()
			installs, script := args[:dash], strings.Join(args[dash:], " ")
			if len(installs) > 1 && follow {
				return usagef("--follow follows one job; with several installs, follow each with byoc job logs -f JOB")
			}
			if strings.TrimSpace(script) == "" {
				return usagef("the script is empty")
			}
			secs, err := ttlSeconds("timeout", timeout)
			if err != nil {
				return err
			}
			if maxAttempts < 0 {
				return usagef("--max-attempts must not be negative")
			}
			config, err := structpb.NewStruct(map[string]any{
				"steps": []any{map[string]any{"name": "run", "script": script}},
			})
			if err != nil {
				return err
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// One key for this invocation: a retry after a lost answer
			// gets the jobs already stored instead of new ones.
			key := newIdempotencyKey()
			reqs := make([]*imsv1.EnqueueJobRequest, len(installs))
			for i, in := range installs {
				reqs[i] = &imsv1.EnqueueJobRequest{
					Install:        in,
					ComponentType:  "action",
					Operation:      "apply",
					Config:         config,
					TimeoutSeconds: secs,
					MaxAttempts:    maxAttempts,
					Mode:           mode,
					WindowBound:    windowBound,
				}
			}
			if len(reqs) > 1 {
				var res *connect.Response[imsv1.EnqueueJobsResponse]
				err := a.retryTransient(ctx, "enqueue", func() (err error) {
					res, err = c.EnqueueJobs(ctx, connect.NewRequest(&imsv1.EnqueueJobsRequest{Jobs: reqs, IdempotencyKey: key}))
					return err
				})
				if err != nil {
					return c.wrap(err)
				}
				for _, in := range installs {
					a.warnAgentOffline(ctx, c, in)
				}
				if a.jsonOutput() {
					return writeJSONList(a.stdout, res.Msg.GetJobs())
				}
				t := newTable(a.stdout, "JOB", "INSTALL")
				for i, j := range res.Msg.GetJobs() {
					t.row(j.GetId(), installs[i])
				}
				if err := t.flush(); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "Follow a job's logs with: byoc job logs -f JOB\n")
				return nil
			}
			install := installs[0]
			reqs[0].IdempotencyKey = key
			var res *connect.Response[imsv1.EnqueueJobResponse]
			err = a.retryTransient(ctx, "enqueue", func() (err error) {
				res, err = c.EnqueueJob(ctx, connect.NewRequest(reqs[0]))
				return err
			})
			if err != nil {
				return c.wrap(err)
			}
			job := res.Msg.GetJob()
			a.warnAgentOffline(ctx, c, install)
			switch {
			case follow:
				fmt.Fprintf(a.stderr, "==> job %s queued on %s\n", job.GetId(), install)
			case a.jsonOutput():
				return writeJSON(a.stdout, job)
			default:
				fmt.Fprintln(a.stdout, job.GetId())
				fmt.Fprintf(a.stderr, "Follow its logs with: byoc job logs -f %s\n", job.GetId())
				return nil
			}
			return a.followJob(ctx, c, job.GetId(), lf)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&timeout, "timeout", 0, "the job's time limit on the agent (default: the server's, 1h)")
	f.Int32Var(&maxAttempts, "max-attempts", 0, "how often to hand the job out again after its lease expires (default: the server's, 3)")
	f.BoolVarP(&follow, "follow", "f", false, "stream the job's logs and exit with its exit code")
	f.BoolVar(&wait, "wait", false, "named action: follow the run until it ends, print its outputs (exit 1 unless it succeeds)")
	f.StringVar(&reason, "reason", "", "named action: why, recorded on the run")
	f.StringVar(&mode, "mode", "maintenance", "script: the permission mode the job needs (provision, maintenance, deprovision, break_glass)")
	f.BoolVar(&windowBound, "window-bound", false, "script: run it as a release's job: held by imsd until the install's maintenance windows (the vendor's and the customer's) are open, refused by the agent outside the customer's")
	lf.flags(cmd)
	return cmd
}

func (a *app) jobCommand() *cobra.Command {
	return group("job", "Inspect jobs, stream their logs, cancel them",
		a.jobListCommand(),
		a.jobGetCommand(),
		a.jobLogsCommand(),
		a.jobCancelCommand(),
	)
}

// stateName renders a job state for people: "queued", "timed_out".
func stateName(s imsv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// parseStates parses --state values: names with or without the JOB_STATE_
// prefix, in any case, with - or _.
func parseStates(names []string) ([]imsv1.JobState, error) {
	var states []imsv1.JobState
	for _, n := range names {
		key := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(n), "-", "_"))
		if key == "" {
			continue
		}
		if !strings.HasPrefix(key, "JOB_STATE_") {
			key = "JOB_STATE_" + key
		}
		v, ok := imsv1.JobState_value[key]
		if !ok || v == 0 {
			return nil, usagef("--state %q is not one of queued, assigned, running, succeeded, failed, cancelled, timed_out, refused", n)
		}
		states = append(states, imsv1.JobState(v))
	}
	return states, nil
}

func isTerminal(s imsv1.JobState) bool {
	switch s {
	case imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED,
		imsv1.JobState_JOB_STATE_CANCELLED, imsv1.JobState_JOB_STATE_TIMED_OUT, imsv1.JobState_JOB_STATE_REFUSED:
		return true
	}
	return false
}

// refused reports whether j was refused by its agent (its mode is off in
// the customer's account); its error then says why, starting "refused: ".
func refused(j *imsv1.Job) bool { return j.GetState() == imsv1.JobState_JOB_STATE_REFUSED }

// neverStarted says why an ended job has no log by design: it was
// cancelled (or refused) before its agent started it (no start time: an
// agent's acknowledgement was never accepted). It is "" for any other
// job.
func neverStarted(j *imsv1.Job) string {
	if j.GetStartTime() != nil {
		return ""
	}
	switch j.GetState() {
	case imsv1.JobState_JOB_STATE_CANCELLED:
		why := "cancelled before it started"
		if e := j.GetError(); e != "" {
			why += " (" + e + ")"
		}
		return why
	case imsv1.JobState_JOB_STATE_REFUSED:
		return "refused before it started (" + refusedText(j) + ")"
	}
	return ""
}

// refusedText is what people see of a refused job: the agent's words.
func refusedText(j *imsv1.Job) string {
	if e := j.GetError(); strings.HasPrefix(e, "refused: ") {
		return e
	}
	return strings.TrimSpace("refused: " + j.GetError())
}

// maxPageSize is the server's largest page.
const maxPageSize = 1000

// jobHeader is the header of job tables.
func (a *app) jobHeader() []string {
	header := []string{"ID", "INSTALL", "COMPONENT", "TYPE", "OPERATION", "STATE", "ATTEMPT", "CREATED", "EXIT"}
	if a.wideOutput() {
		header = slices.Insert(header, 2, "INSTALL ID")
	}
	return header
}

// jobRow is job j's row of a job table; installName is its install's
// name.
func (a *app) jobRow(j *imsv1.Job, installName string, now time.Time) []string {
	exit := ""
	if isTerminal(j.GetState()) && !refused(j) {
		exit = fmt.Sprint(j.GetExitCode())
	}
	row := []string{j.GetId(), installName, cmp.Or(j.GetComponent(), "-"), j.GetComponentType(), j.GetOperation(), stateName(j.GetState()),
		attemptText(j), ago(now, j.GetCreateTime()), exit}
	if a.wideOutput() {
		row = slices.Insert(row, 2, j.GetInstallId())
	}
	return row
}

func (a *app) jobListCommand() *cobra.Command {
	var install, selector string
	var watch bool
	var states []string
	var limit int
	cmd := &cobra.Command{
		Use:     "list [--install I] [-l SELECTOR] [--state queued,running,...] [--limit N] [--watch]",
		Aliases: []string{"ls"},
		Short:   "List jobs, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := parseStates(states)
			if err != nil {
				return err
			}
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			fetch := func(ctx context.Context) ([]*imsv1.Job, error) {
				var jobs []*imsv1.Job
				token := ""
				for len(jobs) < limit {
					res, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{
						Install:   install,
						Selector:  selector,
						States:    st,
						PageSize:  int32(min(limit-len(jobs), maxPageSize)),
						PageToken: token,
					}))
					if err != nil {
						return nil, withFlags(c.wrap(err), fieldFlag{"selector", "--selector"})
					}
					jobs = append(jobs, res.Msg.GetJobs()...)
					token = res.Msg.GetNextPageToken()
					if token == "" || len(res.Msg.GetJobs()) == 0 {
						break
					}
				}
				if len(jobs) > limit {
					jobs = jobs[:limit]
				}
				return jobs, nil
			}
			// Tables name the install; its id is in -o wide and -o json.
			installs := &names{list: func(ctx context.Context) map[string]string { return a.installNames(ctx, c) }}
			return runList(cmd.Context(), a, watch, listing[*imsv1.Job]{
				noun: "jobs", empty: "No jobs.", fetch: fetch, id: (*imsv1.Job).GetId, header: a.jobHeader(),
				get: func(ctx context.Context, id string) (*imsv1.Job, error) {
					res, err := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
					if err != nil {
						return nil, c.wrap(err)
					}
					return res.Msg.GetJob(), nil
				},
				row: func(ctx context.Context, now time.Time, j *imsv1.Job) []string {
					return a.jobRow(j, installs.of(ctx, j.GetInstallId()), now)
				},
			})
		},
	}
	f := cmd.Flags()
	watchFlag(cmd, &watch, "each job again as it changes (new jobs too; one that leaves --state in its new state)")
	f.StringVar(&install, "install", "", "only jobs of this install (name or id)")
	selectorFlag(cmd, &selector, "jobs of installs")
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (comma-separated or repeated)")
	f.IntVar(&limit, "limit", 100, "list at most this many jobs")
	return cmd
}

// attemptText is a job's attempt for a table: "1/3" while it may still be
// tried again, only "1" once it has ended (a failed job is not retried).
func attemptText(j *imsv1.Job) string {
	if isTerminal(j.GetState()) {
		return fmt.Sprint(j.GetAttempt())
	}
	return fmt.Sprintf("%d/%d", j.GetAttempt(), j.GetMaxAttempts())
}

func (a *app) jobGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB",
		Short: "Show a job, and why it is not running if it is pending",
		Args:  exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetJob(cmd.Context(), connect.NewRequest(&imsv1.GetJobRequest{Id: args[0]}))
			if err != nil {
				return notAJob(c.wrap(err), args[0])
			}
			j := res.Msg.GetJob()
			if a.jsonOutput() {
				return writeJSON(a.stdout, j)
			}
			return a.printJob(j, a.installName(cmd.Context(), c, j.GetInstallId()))
		},
	}
}

// printJob writes a job for people; install is its install's name.
func (a *app) printJob(j *imsv1.Job, install string) error {
	now := a.now()
	f := newFields(a.stdout)
	f.add("ID", j.GetId())
	f.add("Install", cmp.Or(install, j.GetInstallId()))
	if a.wideOutput() {
		f.add("Install ID", j.GetInstallId())
	}
	if j.GetComponent() != "" {
		f.add("Component", j.GetComponent())
	}
	f.add("Type", j.GetComponentType())
	f.add("Operation", j.GetOperation())
	state := stateName(j.GetState())
	if j.GetCancelRequested() && !isTerminal(j.GetState()) {
		state += " (cancel requested)"
	}
	if refused(j) {
		state = refusedText(j)
	}
	f.add("State", state)
	if j.GetMode() != "" {
		f.add("Mode", j.GetMode())
	}
	if j.GetPendingReason() != "" {
		f.add("Pending", j.GetPendingReason())
	}
	if isTerminal(j.GetState()) {
		f.add("Attempt", fmt.Sprintf("%d (final)", j.GetAttempt()))
	} else {
		f.add("Attempt", fmt.Sprintf("%d of %d", j.GetAttempt(), j.GetMaxAttempts()))
	}
	if j.GetTimeoutSeconds() > 0 {
		f.add("Timeout", (time.Duration(j.GetTimeoutSeconds()) * time.Second).String())
	}
	f.add("Agent", j.GetAgentId())
	f.add("Created", when(now, j.GetCreateTime()))
	f.add("Created by", j.GetCreatedBy())
	if j.GetStartTime() != nil {
		f.add("Started", when(now, j.GetStartTime()))
	}
	if j.GetLeaseExpireTime() != nil && !isTerminal(j.GetState()) {
		f.add("Lease expires", ago(now, j.GetLeaseExpireTime()))
	}
	if j.GetEndTime() != nil {
		f.add("Ended", when(now, j.GetEndTime()))
	}
	if isTerminal(j.GetState()) && !refused(j) {
		f.add("Exit code", fmt.Sprint(j.GetExitCode()))
	}
	if j.GetError() != "" && !refused(j) {
		f.add("Error", j.GetError())
	}
	if len(j.GetOutputs()) > 0 {
		f.add("Outputs", keyValues(j.GetOutputs()))
	}
	if j.GetConfig() != nil {
		b, err := protojson.Marshal(j.GetConfig())
		if err == nil {
			f.add("Config", string(b))
		}
	}
	if err := f.flush(); err != nil {
		return err
	}
	printPlan(a.stdout, j.GetPlannedChanges())
	printPolicy(a.stdout, j.GetPolicyFindings())
	return nil
}

// logFormat is how log lines are printed.
type logFormat struct {
	timestamps   bool
	streamPrefix bool
	// level, if set, leaves out lines below it (a plugin's leveled
	// lines, sdk.NewLogger; a line without a level counts as info).
	level string
}

func (lf *logFormat) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&lf.timestamps, "timestamps", false, "prefix each line with its time")
	cmd.Flags().BoolVar(&lf.streamPrefix, "stream-prefix", false, `mark each line with its stream ("out | ", "err | ")`)
	cmd.Flags().StringVar(&lf.level, "level", "", "show only lines at `LEVEL` or above: "+strings.Join(loglevel.Levels, ", ")+
		" (a plugin's leveled lines; others count as info)")
	_ = cmd.RegisterFlagCompletionFunc("level", cobra.FixedCompletions(loglevel.Levels, cobra.ShellCompDirectiveNoFileComp))
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if lf.level != "" && loglevel.Rank(lf.level) < 0 {
			return usagef("--level %q: want one of %s", lf.level, strings.Join(loglevel.Levels, ", "))
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// logPrinter prints log lines: system lines after "==> ", and, on request,
// timestamps and stream marks. All streams go to one writer, so that their
// order is kept.
type logPrinter struct {
	w      io.Writer
	format logFormat
	// clean shows control sequences in the text instead of sending them
	// (on a terminal); otherwise the text is written byte for byte.
	clean       bool
	lastAttempt int32
	// The position of the last line printed, to resume a broken stream.
	afterAttempt int32
	afterSeq     int64
	// json prints each line as one JSON object (-o json).
	json bool
	// since, if set, leaves out lines written before it (byoc logs
	// --since).
	since time.Time
	// prefix starts every line (byoc logs -f, which interleaves the
	// lines of several jobs); in JSON, job and component are added to
	// each line's object instead.
	prefix         string
	job, component string
	// mu, if set, is held while a line is written, for printers
	// sharing one output.
	mu *sync.Mutex
}

// write writes a printed line, under p.mu if set.
func (p *logPrinter) write(line string) {
	if p.mu != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	io.WriteString(p.w, line)
}

// writeJSONLine writes a line as JSON, with the job and component when
// the printer names them.
func (p *logPrinter) writeJSONLine(l *imsv1.LogLine) {
	b, err := marshalJSON(l)
	if err != nil {
		return
	}
	if p.job != "" {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			return
		}
		m["jobId"], _ = json.Marshal(p.job)
		if p.component != "" {
			m["component"], _ = json.Marshal(p.component)
		}
		if b, err = json.Marshal(m); err != nil {
			return
		}
	}
	if p.mu != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	writeDocument(p.w, l, b)
}

func (p *logPrinter) print(l *imsv1.LogLine) {
	if l.GetAttempt() < p.afterAttempt || l.GetAttempt() == p.afterAttempt && l.GetSeq() <= p.afterSeq {
		return // already printed before a reconnect
	}
	p.afterAttempt, p.afterSeq = l.GetAttempt(), l.GetSeq()
	if !p.since.IsZero() && l.GetTime().AsTime().Before(p.since) {
		return
	}
	if p.format.level != "" && !loglevel.AtLeast(l.GetText(), p.format.level) {
		return
	}
	var b strings.Builder
	if p.lastAttempt != 0 && l.GetAttempt() != p.lastAttempt {
		fmt.Fprintf(&b, "%s==> attempt %d\n", p.prefix, l.GetAttempt())
	}
	p.lastAttempt = l.GetAttempt()
	b.WriteString(p.prefix)
	if p.format.timestamps {
		b.WriteString(l.GetTime().AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"))
		b.WriteByte(' ')
	}
	switch l.GetStream() {
	case imsv1.LogStream_LOG_STREAM_SYSTEM:
		b.WriteString("==> ")
	case imsv1.LogStream_LOG_STREAM_STDERR:
		if p.format.streamPrefix {
			b.WriteString("err | ")
		}
	default:
		if p.format.streamPrefix {
			b.WriteString("out | ")
		}
	}
	if p.json {
		// One object a line (JSON Lines), so that a follow can be read as
		// it comes; the text is exact, as in a pipe.
		p.writeJSONLine(l)
		return
	}
	text := strings.TrimSuffix(l.GetText(), "\n")
	if p.clean {
		text = termtext.Clean(text, "\t")
	}
	b.WriteString(text)
	b.WriteByte('\n')
	p.write(b.String())
}

func (a *app) jobLogsCommand() *cobra.Command {
	var follow bool
	lf := logFormat{}
	cmd := &cobra.Command{
		Use:   "logs JOB [--follow] [--timestamps] [--stream-prefix]",
		Short: "Print a job's log lines; with --follow, until the job ends",
		Long: `Print a job's log lines, stdout and stderr alike, on standard output; lines
the agent writes itself start with "==> ". With --follow, keep streaming until
the job ends, print a summary on standard error and exit with the job's exit
code.`,
		Args: exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			if follow {
				return notAJob(a.followJob(cmd.Context(), c, args[0], lf), args[0])
			}
			p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput()}
			job, err := a.streamLogs(cmd.Context(), c, args[0], false, p)
			if err != nil || p.afterSeq > 0 {
				return notAJob(err, args[0])
			}
			// No line at all: say why when the job never started, rather
			// than print nothing.
			if job == nil {
				res, err := c.GetJob(cmd.Context(), connect.NewRequest(&imsv1.GetJobRequest{Id: args[0]}))
				if err != nil {
					return c.wrap(err)
				}
				job = res.Msg.GetJob()
			}
			if why := neverStarted(job); why != "" {
				fmt.Fprintf(a.stderr, "==> job %s has no log lines: %s\n", job.GetId(), why)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream new lines until the job ends, then exit with its exit code")
	lf.flags(cmd)
	return cmd
}

// streamLogs prints the lines of one StreamJobLogs call, resuming after the
// last line p printed, and returns the ended job if the server sent it.
func (a *app) streamLogs(ctx context.Context, c *client, jobID string, follow bool, p *logPrinter) (*imsv1.Job, error) {
	stream, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{
		JobId:        jobID,
		Follow:       follow,
		AfterAttempt: p.afterAttempt,
		AfterSeq:     p.afterSeq,
	}))
	if err != nil {
		return nil, c.wrap(err)
	}
	defer stream.Close()
	var job *imsv1.Job
	for stream.Receive() {
		msg := stream.Msg()
		for _, l := range msg.GetLines() {
			p.print(l)
		}
		if msg.GetJob() != nil {
			job = msg.GetJob()
		}
	}
	if err := stream.Err(); err != nil {
		return job, c.wrap(err)
	}
	return job, nil
}

// followJob streams a job's logs until it ends, reconnecting after a broken
// stream, then reports how it ended: nil for success, or an exitCodeError
// carrying the job's exit code.
func (a *app) followJob(ctx context.Context, c *client, jobID string, lf logFormat) error {
	return a.followJobWith(ctx, c, jobID, &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput()})
}

// followJobWith is followJob printing with p.
func (a *app) followJobWith(ctx context.Context, c *client, jobID string, p *logPrinter) error {
	job, err := a.followJobLines(ctx, c, jobID, p)
	if ctx.Err() != nil {
		at := "before its first log line"
		if p.afterSeq > 0 {
			at = fmt.Sprintf("after log line %d of attempt %d", p.afterSeq, p.afterAttempt)
		}
		fmt.Fprintf(a.stderr, "Stopped following job %s %s; it keeps running (resume with: byoc job logs %s --follow; cancel it with: byoc job cancel %s).\n",
			jobID, at, jobID, jobID)
		return &exitCodeError{code: exitInterrupted}
	}
	if err != nil {
		return err
	}
	return a.jobEnded(job, p.afterSeq == 0)
}

// followJobLines streams a job's log lines with p until the job ends,
// reconnecting after a broken stream, and returns the ended job; or
// the error that stopped it (ctx's when ctx ended).
func (a *app) followJobLines(ctx context.Context, c *client, jobID string, p *logPrinter) (*imsv1.Job, error) {
	out := newOutage(a.now)
	first := true
	for {
		job, err := a.streamLogs(ctx, c, jobID, true, p)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if job == nil && err == nil {
			// The stream ended without the final job, as when a server
			// restarts: ask for the job, and resume if it has not ended.
			res, gerr := c.GetJob(ctx, connect.NewRequest(&imsv1.GetJobRequest{Id: jobID}))
			if gerr != nil {
				err = c.wrap(gerr)
			} else if isTerminal(res.Msg.GetJob().GetState()) {
				job = res.Msg.GetJob()
			}
		}
		if job != nil {
			return job, nil
		}
		d := time.Duration(0)
		if err != nil {
			// A first call that fails is a wrong server or job, not a
			// broken stream: report it at once.
			var retry bool
			if d, retry = out.failed(ctx, err); (first && p.afterAttempt == 0) || !retry {
				return nil, err
			}
		} else {
			// The stream ended cleanly (a server shutting down): at once.
			out.ok()
		}
		first = false
		p.note(a.stderr, "==> log stream interrupted; reconnecting\n")
		backoff.Wait(ctx, d)
	}
}

// note writes text to w (standard error) under p.mu if set, prefixed.
func (p *logPrinter) note(w io.Writer, text string) {
	if p.mu != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	io.WriteString(w, p.prefix+text)
}

func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeAborted, connect.CodeInternal, connect.CodeUnknown:
		// Internal and unknown cover a connection dropped mid-stream.
		return true
	}
	return false
}

// jobEnded prints a one-line summary of an ended job on stderr and returns
// the error that makes the process exit with the job's exit code. noLines
// says no log line was printed (a job cancelled before it started has
// none, and the summary says so).
func (a *app) jobEnded(j *imsv1.Job, noLines bool) error {
	took := ""
	if j.GetStartTime() != nil && j.GetEndTime() != nil {
		took = " in " + reltime.Duration(j.GetEndTime().AsTime().Sub(j.GetStartTime().AsTime()))
	}
	if j.GetState() == imsv1.JobState_JOB_STATE_SUCCEEDED {
		fmt.Fprintf(a.stderr, "==> job %s succeeded%s\n", j.GetId(), took)
		return nil
	}
	if refused(j) {
		// Nothing ran: no exit code, no time taken; the agent's words.
		return &exitCodeError{code: exitError, msg: fmt.Sprintf("job %s %s", j.GetId(), refusedText(j))}
	}
	code := int(j.GetExitCode())
	if code <= 0 || code > 255 {
		// Exit codes above 255 wrap around in the shell; never let a failed
		// job look like a success.
		code = exitError
	}
	msg := fmt.Sprintf("job %s %s%s", j.GetId(), strings.ReplaceAll(stateName(j.GetState()), "_", " "), took)
	if noLines && j.GetState() == imsv1.JobState_JOB_STATE_CANCELLED && j.GetStartTime() == nil {
		msg += " before it started (no log lines)"
	}
	if j.GetExitCode() != 0 {
		msg += fmt.Sprintf(" with exit code %d", j.GetExitCode())
	}
	if j.GetError() != "" {
		msg += ": " + j.GetError()
	}
	if a.terminal(a.stderr) {
		msg = termtext.Clean(msg, "\t")
	}
	return &exitCodeError{code: code, msg: msg}
}

func (a *app) jobCancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel JOB [--reason R]",
		Short: "Cancel a queued job, or ask the agent to stop a running one",
		Args:  exactArgs("JOB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.CancelJob(cmd.Context(), connect.NewRequest(&imsv1.CancelJobRequest{Id: args[0], Reason: reason}))
			if err != nil {
				return notAJob(c.wrap(err), args[0])
			}
			j := res.Msg.GetJob()
			if a.jsonOutput() {
				return writeJSON(a.stdout, j)
			}
			if isTerminal(j.GetState()) {
				fmt.Fprintf(a.stdout, "Job %s is %s.\n", j.GetId(), stateName(j.GetState()))
			} else {
				fmt.Fprintf(a.stdout, "Asked the agent to stop job %s (%s); follow it with: byoc job logs -f %s\n",
					j.GetId(), stateName(j.GetState()), j.GetId())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}
