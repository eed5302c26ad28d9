package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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
named first. With --follow, then keep streaming the newest job until it
ends and exit with its exit code.`,
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
			p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput()}
			if since > 0 {
				p.since = a.now().Add(-since)
			}
			if follow {
				return a.followJobWith(ctx, c, job.GetId(), p)
			}
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
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream new lines until the job ends, then exit with its exit code")
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
	for i, job := range jobs {
		what := "job " + job.GetId() + " (" + cmp.Or(job.GetComponent()+": ", "") + job.GetComponentType() + " " + job.GetOperation() + ")"
		if job.GetComponent() == "" {
			what = "job " + job.GetId() + " (" + job.GetComponentType() + " " + job.GetOperation() + ")"
		}
		fmt.Fprintf(a.stderr, "==> %s, %s, created %s\n", what, stateName(job.GetState()), ago(a.now(), job.GetCreateTime()))
		p := &logPrinter{w: a.stdout, format: lf, clean: a.terminal(a.stdout), json: a.jsonOutput(), since: from}
		if follow && i == len(jobs)-1 {
			return a.followJobWith(ctx, c, job.GetId(), p)
		}
		if _, err := a.streamLogs(ctx, c, job.GetId(), false, p); err != nil {
			return err
		}
	}
	return nil
}

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
		return nil, fmt.Errorf("install %s has no job of component %q among its newest %d (byoc job list --install %s lists them)",
			install, component, latestJobPages*maxPageSize, install)
	}
	return nil, fmt.Errorf("install %s has no jobs yet (byoc install provision %s starts its first)", install, install)
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
