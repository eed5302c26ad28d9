package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// logsCommand is byoc logs: the way from an install's name to what its
// latest job printed, without looking up a job id first.
func (a *app) logsCommand() *cobra.Command {
	var component string
	var since time.Duration
	var follow bool
	lf := logFormat{}
	cmd := &cobra.Command{
		Use:   "logs INSTALL [--component C] [--since DURATION] [-f]",
		Short: "Print the log of an install's jobs: the latest, or every job of the last DURATION (or its component's)",
		Long: `Print the log lines of the newest job of an install, or with --component
of the newest job of that component (a workflow step's, a drift check's),
as byoc job logs JOB prints them. A line on standard error names the job
first. With --since, the lines of the last DURATION of every job of the
install (or component) that ran in that time, oldest job first, each
named first.

With --follow, then keep following the install, as kubectl logs -f with a
selector or stern do: the newest job, any other job of the install (or
component) still running, and every job that starts later, their lines
interleaved as they come, each line prefixed with "[COMPONENT JOB] " (with
-o json, jobId and component fields); a line on standard error names each
job as it starts and says how it ended. Stop with Ctrl-C (exit code 130);
the jobs keep running. To wait for one job and take its exit code, use
byoc job logs JOB --follow.`,
		Example: `  byoc logs acme
  byoc logs acme --component db -f
  byoc logs acme --since 10m --timestamps`,
		Args: exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since < 0 {
				return usagef("--since must not be negative")
			}
			c, err := a.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if since > 0 {
				return a.logsSince(ctx, c, args[0], component, since, follow, lf)
			}
			job, err := a.latestJob(ctx, c, args[0], component)
			if nj := (*noJobError)(nil); follow && errors.As(err, &nj) {
				// Nothing to show yet: follow the jobs to come.
				fmt.Fprintf(a.stderr, "==> %v; waiting for one to start\n", err)
				return a.followInstall(ctx, c, args[0], component, nil, nil, lf, time.Time{})
			}
			if err != nil {
				return err
			}
			what := "job " + job.GetId()
			if job.GetComponent() != "" {
				what += " (" + job.GetComponent() + ": " + job.GetComponentType() + " " + job.GetOperation() + ")"
			} else {
				what += " (" + job.GetComponentType() + " " + job.GetOperation() + ")"
			}
			fmt.Fprintf(a.stderr, "==> %s, %s, created %s\n", what, stateName(job.GetState()), ago(a.now(), job.GetCreateTime()))
			if follow {
				return a.followInstall(ctx, c, args[0], component, []*imsv1.Job{job}, nil, lf, time.Time{})
			}
			p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput()}
			if _, err := a.streamLogs(ctx, c, job.GetId(), false, p); err != nil {
				return err
			}
			if p.afterSeq == 0 {
				if why := neverStarted(job); why != "" {
					fmt.Fprintf(a.stderr, "==> job %s has no log lines: %s\n", job.GetId(), why)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&component, "component", "", "the newest job of this component")
	cmd.Flags().DurationVar(&since, "since", 0, "only lines written in the last DURATION (as 10m, 2h)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep streaming the lines of the install's jobs, and of every job that starts, until interrupted")
	lf.flags(cmd)
	return cmd
}

// logsSince prints the lines of the last since of every job of install
// (of component, when set) that ran then: created before now and not
// ended before now-since, oldest first; with follow, it then follows the
// newest of them.
func (a *app) logsSince(ctx context.Context, c *client, install, component string, since time.Duration, follow bool, lf logFormat) error {
	from := a.now().Add(-since)
	var jobs []*imsv1.Job
	token := ""
	for range latestJobPages {
		res, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: install, PageSize: maxPageSize, PageToken: token}))
		if err != nil {
			return c.wrap(err)
		}
		older := false
		for _, j := range res.Msg.GetJobs() {
			if component != "" && j.GetComponent() != component {
				continue
			}
			if j.GetEndTime() != nil && j.GetEndTime().AsTime().Before(from) {
				older = older || j.GetCreateTime().AsTime().Before(from)
				continue
			}
			jobs = append(jobs, j)
		}
		token = res.Msg.GetNextPageToken()
		if token == "" || older || len(res.Msg.GetJobs()) == 0 {
			break
		}
	}
	if len(jobs) == 0 {
		what := "install " + install
		if component != "" {
			what += " component " + component
		}
		return fmt.Errorf("%s has no job that ran in the last %s (byoc job list --install %s lists them)", what, since, install)
	}
	slices.Reverse(jobs) // oldest first
	// With follow, the jobs still running are followed together after
	// the ended ones are printed.
	var running []*imsv1.Job
	for _, job := range jobs {
		if follow && !isTerminal(job.GetState()) {
			running = append(running, job)
			continue
		}
		fmt.Fprintf(a.stderr, "==> %s, %s, created %s\n", jobWhat(job), stateName(job.GetState()), ago(a.now(), job.GetCreateTime()))
		p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput(), since: from}
		if _, err := a.streamLogs(ctx, c, job.GetId(), false, p); err != nil {
			return err
		}
	}
	if !follow {
		return nil
	}
	for _, job := range running {
		fmt.Fprintf(a.stderr, "==> %s, %s, created %s\n", jobWhat(job), stateName(job.GetState()), ago(a.now(), job.GetCreateTime()))
	}
	return a.followInstall(ctx, c, install, component, running, jobs, lf, from)
}

// followPollEvery is how often byoc logs -f asks imsd for the install's
// new jobs.
var followPollEvery = time.Second

// followInstall streams the lines of the jobs in seed, of the
// install's (component's) other jobs still running, and of every job of
// it that starts later, each line prefixed by its job, until ctx ends
// (Ctrl-C). Jobs in known are already printed and left out; since, if
// set, leaves out older lines. Jobs of other components are left out
// when component is set.
func (a *app) followInstall(ctx context.Context, c *client, install, component string, seed, known []*imsv1.Job, lf logFormat, since time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex // every write to stdout and stderr
		wg   sync.WaitGroup
		seen = map[string]bool{}
	)
	follow := func(j *imsv1.Job, announce bool) {
		seen[j.GetId()] = true
		if announce {
			mu.Lock()
			fmt.Fprintf(a.stderr, "==> %s, %s\n", jobWhat(j), stateName(j.GetState()))
			mu.Unlock()
		}
		wg.Go(func() { a.followInstallJob(ctx, c, j, lf, since, &mu) })
	}
	for _, j := range known {
		seen[j.GetId()] = true
	}
	for _, j := range seed {
		follow(j, false)
	}
	tick := time.NewTicker(followPollEvery)
	defer tick.Stop()
	var err error
	failing := false
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		res, lerr := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: install, PageSize: maxPageSize}))
		if lerr != nil {
			if ctx.Err() != nil {
				break
			}
			if !retryable(lerr) {
				err = c.wrap(lerr)
				break
			}
			if !failing {
				mu.Lock()
				fmt.Fprintf(a.stderr, "==> cannot list the jobs of install %s (%v); retrying\n", install, c.wrap(lerr))
				mu.Unlock()
			}
			failing = true
			continue
		}
		failing = false
		jobs := res.Msg.GetJobs()
		var fresh []*imsv1.Job
		for _, j := range jobs {
			if seen[j.GetId()] || (component != "" && j.GetComponent() != component) {
				continue
			}
			if first && isTerminal(j.GetState()) {
				seen[j.GetId()] = true // ended before the follow began
				continue
			}
			fresh = append(fresh, j)
		}
		if !first && len(fresh) == len(jobs) && res.Msg.GetNextPageToken() != "" {
			mu.Lock()
			fmt.Fprintf(a.stderr, "==> more than %d jobs of install %s started within %s; some may be left out\n", len(jobs), install, followPollEvery)
			mu.Unlock()
		}
		slices.Reverse(fresh) // oldest first
		for _, j := range fresh {
			follow(j, true)
		}
	}
	interrupted := ctx.Err() != nil
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	if interrupted {
		fmt.Fprintf(a.stderr, "Stopped following install %s; its jobs keep running.\n", install)
	}
	return &exitCodeError{code: exitInterrupted}
}

// followInstallJob streams one job's lines for followInstall, prefixed,
// then says on standard error how it ended.
func (a *app) followInstallJob(ctx context.Context, c *client, j *imsv1.Job, lf logFormat, since time.Time, mu *sync.Mutex) {
	label := cmp.Or(j.GetComponent(), j.GetComponentType()+" "+j.GetOperation())
	p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput(), since: since,
		prefix: "[" + label + " " + j.GetId() + "] ", job: j.GetId(), component: j.GetComponent(), mu: mu}
	if p.json {
		p.prefix = ""
	}
	job, err := a.followJobLines(ctx, c, j.GetId(), p)
	if ctx.Err() != nil {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		fmt.Fprintf(a.stderr, "==> cannot follow job %s: %v\n", j.GetId(), err)
		return
	}
	// jobEnded says how a job ended: on standard error when it succeeded,
	// else in the error it returns.
	if e := a.jobEnded(job, p.afterSeq == 0); e != nil {
		fmt.Fprintf(a.stderr, "==> %v\n", e)
	}
}

// jobWhat names a job for people: its id, component, type and operation.
func jobWhat(j *imsv1.Job) string {
	if j.GetComponent() != "" {
		return "job " + j.GetId() + " (" + j.GetComponent() + ": " + j.GetComponentType() + " " + j.GetOperation() + ")"
	}
	return "job " + j.GetId() + " (" + j.GetComponentType() + " " + j.GetOperation() + ")"
}

// noJobError is latestJob's error when the install has no job to show.
type noJobError struct{ msg string }

func (e *noJobError) Error() string { return e.msg }

// latestJobPages bounds how far back latestJob looks for a component's
// job (pages of maxPageSize jobs, newest first).
const latestJobPages = 5

// latestJob returns the newest job of install, or of its component when
// component is set.
func (a *app) latestJob(ctx context.Context, c *client, install, component string) (*imsv1.Job, error) {
	token := ""
	for range latestJobPages {
		size := int32(maxPageSize)
		if component == "" {
			size = 1
		}
		res, err := c.ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{Install: install, PageSize: size, PageToken: token}))
		if err != nil {
			return nil, c.wrap(err)
		}
		for _, j := range res.Msg.GetJobs() {
			if component == "" || j.GetComponent() == component {
				return j, nil
			}
		}
		token = res.Msg.GetNextPageToken()
		if token == "" || len(res.Msg.GetJobs()) == 0 {
			break
		}
	}
	if component != "" {
		return nil, &noJobError{fmt.Sprintf("install %s has no job of component %q among its newest %d (byoc job list --install %s lists them)",
			install, component, latestJobPages*maxPageSize, install)}
	}
	return nil, &noJobError{fmt.Sprintf("install %s has no jobs yet (byoc install provision %s starts its first)", install, install)}
}

// workflowID resolves byoc workflow get's argument: a workflow id as it
// is, else an install's name or id, whose newest workflow it means.
func (a *app) workflowID(ctx context.Context, c *client, arg string) (string, error) {
	if strings.HasPrefix(arg, "wf_") {
		return arg, nil
	}
	res, err := c.ListWorkflows(ctx, connect.NewRequest(&imsv1.ListWorkflowsRequest{Install: arg, PageSize: 1}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return "", fmt.Errorf("no workflow or install named %q (workflow ids start with wf_; byoc workflow list lists them)", arg)
		}
		return "", c.wrap(err)
	}
	wfs := res.Msg.GetWorkflows()
	if len(wfs) == 0 {
		return "", fmt.Errorf("install %s has no workflows yet (byoc install provision %s starts one)", arg, arg)
	}
	fmt.Fprintf(a.stderr, "==> the newest workflow of install %s: %s\n", cmp.Or(wfs[0].GetInstallName(), arg), wfs[0].GetId())
	return wfs[0].GetId(), nil
}
