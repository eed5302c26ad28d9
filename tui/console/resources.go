package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The `:` lists of what the CLI has and the fleet does not show: the
// workflows (enter opens a workflow's steps), the apps (enter opens an
// app's revisions), the break-glass grants and the CLI's contexts (enter
// switches to one). Each is a tableView; the calls to imsd are in
// backend.go.

func tsAgo(e *env, t interface{ AsTime() time.Time }, set bool) string {
	if !set {
		return dash
	}
	return ago(e.now, t.AsTime())
}

func newWorkflowsView(e *env) view {
	return newTableView(e, tableSpec[*imsv1.Workflow]{
		title: "workflows", refresh: true, empty: "no workflows yet",
		cols: []column{{"ID", 14, 0}, {"INSTALL", 12, 1}, {"KIND", 12, 2}, {"STATE", 16, 1}, {"STEPS", 12, 3}, {"STARTED", 9, 4}, {"BY", 10, 5}, {"ERROR", 0, 6}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.Workflow, error) {
			return fetchWorkflows(ctx, e.conn.Client, "")
		},
		cells: func(e *env, w *imsv1.Workflow) map[string]string {
			return map[string]string{"ID": w.Id, "INSTALL": orDash(w.InstallName), "KIND": enumText(w.Kind, "WORKFLOW_KIND_"),
				"STATE": enumText(w.State, "WORKFLOW_STATE_"), "STEPS": stepCounts(w), "STARTED": tsAgo(e, w.CreateTime, w.CreateTime != nil),
				"BY": orDash(w.CreatedBy), "ERROR": orDash(w.Error)}
		},
		sel: func(e *env, w *imsv1.Workflow) selection { return selection{w, "workflow", w.Id, w.Id} },
		open: func(_ context.Context, e *env, w *imsv1.Workflow) tea.Cmd {
			return e.nav.push(newStepsView(e, w))
		},
	})
}

// stepCounts is "3/5 succeeded" from a workflow's steps or step counts.
func stepCounts(w *imsv1.Workflow) string {
	total, done := 0, 0
	if len(w.Steps) > 0 {
		for _, s := range w.Steps {
			total++
			if s.State == imsv1.StepState_STEP_STATE_SUCCEEDED || s.State == imsv1.StepState_STEP_STATE_SKIPPED {
				done++
			}
		}
	} else {
		for k, n := range w.StepCounts {
			total += int(n)
			if strings.Contains(k, "succeeded") || strings.Contains(k, "skipped") {
				done += int(n)
			}
		}
	}
	if total == 0 {
		return dash
	}
	return fmt.Sprintf("%d/%d done", done, total)
}

// newStepsView lists a workflow's steps, read again (GetWorkflow) when the
// fleet changes, so they move as they run; enter on a step with a job
// reads the job (GetJob) and opens its log, on one without describes it.
func newStepsView(e *env, w *imsv1.Workflow) view {
	id := w.Id
	jobGen := 0 // of the job read that enter started
	return newTableView(e, tableSpec[*imsv1.WorkflowStep]{
		title: "workflow " + id, refresh: true, empty: "the workflow has no steps",
		cols: []column{{"STEP", 14, 0}, {"COMPONENT", 12, 2}, {"OPERATION", 10, 3}, {"STATE", 12, 1}, {"TRIES", 5, 5}, {"JOB", 14, 4}, {"ERROR", 0, 6}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.WorkflowStep, error) {
			c := e.conn.Client
			return func() ([]*imsv1.WorkflowStep, error) {
				w, err := getWorkflow(ctx, c, id)()
				return w.GetSteps(), err
			}
		},
		cells: func(e *env, s *imsv1.WorkflowStep) map[string]string {
			comp := s.Component
			if s.Action != "" {
				comp = "action " + s.Action
			}
			return map[string]string{"STEP": s.Name, "COMPONENT": orDash(comp), "OPERATION": orDash(s.Operation),
				"STATE": enumText(s.State, "STEP_STATE_"), "TRIES": fmt.Sprint(s.Attempts), "JOB": orDash(s.JobId), "ERROR": orDash(s.Error)}
		},
		sel: func(e *env, s *imsv1.WorkflowStep) selection {
			return selection{s, "step", id + "/" + s.Name, orDash(s.JobId)}
		},
		open: func(ctx context.Context, e *env, s *imsv1.WorkflowStep) tea.Cmd {
			if s.JobId == "" {
				return e.nav.push(newObjectView(e, selection{s, "step", id + "/" + s.Name, id + "/" + s.Name}, fmtDescribe))
			}
			jobGen = e.nextGen()
			return getJob(ctx, e.conn.Client, jobGen, s.JobId)
		},
		other: func(e *env, msg tea.Msg) tea.Cmd {
			m, ok := msg.(jobMsg)
			if !ok || m.gen != jobGen || jobGen == 0 {
				return nil
			}
			jobGen = 0
			if m.err != nil {
				e.nav.setStatus(true, "job not read: %s", errText(m.err))
				return nil
			}
			return e.nav.push(newLogView(e, m.job))
		},
	})
}

func newAppsView(e *env) view {
	return newTableView(e, tableSpec[*imsv1.App]{
		title: "apps", empty: "no apps yet (byoc app create)",
		cols: []column{{"NAME", 16, 0}, {"ID", 14, 2}, {"CREATED", 9, 3}, {"DESCRIPTION", 0, 1}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.App, error) {
			return listApps(ctx, e.conn.Client)
		},
		cells: func(e *env, a *imsv1.App) map[string]string {
			return map[string]string{"NAME": a.Name, "ID": a.Id, "CREATED": tsAgo(e, a.CreateTime, a.CreateTime != nil), "DESCRIPTION": orDash(a.Description)}
		},
		sel: func(e *env, a *imsv1.App) selection { return selection{a, "app", a.Name, a.Id} },
		open: func(_ context.Context, e *env, a *imsv1.App) tea.Cmd {
			return e.nav.push(newRevisionsView(e, a))
		},
	})
}

func newRevisionsView(e *env, a *imsv1.App) view {
	name := a.Name
	return newTableView(e, tableSpec[*imsv1.AppRevision]{
		title: name + " revisions", empty: "no revisions yet (byoc app push)",
		// WARNINGS counts what imsd's check said at push (d shows them).
		cols: []column{{"REVISION", 8, 0}, {"VERSION", 10, 1}, {"PUSHED", 9, 2}, {"BY", 10, 3}, {"WARNINGS", 8, 2}, {"DIGEST", 14, 5}, {"COMPONENTS", 0, 4}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.AppRevision, error) {
			return listRevisions(ctx, e.conn.Client, name)
		},
		cells: func(e *env, r *imsv1.AppRevision) map[string]string {
			return map[string]string{"REVISION": fmt.Sprint(r.Number), "VERSION": orDash(r.Version), "PUSHED": tsAgo(e, r.CreateTime, r.CreateTime != nil),
				"BY": orDash(r.CreatedBy), "WARNINGS": countOrDash(len(r.Warnings)), "DIGEST": orDash(r.Digest), "COMPONENTS": orDash(strings.Join(r.Components, ", "))}
		},
		sel: func(e *env, r *imsv1.AppRevision) selection {
			return selection{r, "revision", fmt.Sprintf("%s@%d", name, r.Number), fmt.Sprint(r.Number)}
		},
	})
}

func newGrantsView(e *env) view {
	return newTableView(e, tableSpec[*imsv1.BreakGlassGrant]{
		title: "break-glass grants", refresh: true, empty: "no break-glass grants (b on an install requests one)",
		cols: []column{{"ID", 14, 0}, {"INSTALL", 12, 1}, {"ROLE", 12, 2}, {"STATE", 10, 1}, {"BY", 10, 4}, {"DECIDED BY", 10, 5}, {"ENDS", 9, 3}, {"REASON", 0, 6}},
		load: func(ctx context.Context, e *env) func() ([]*imsv1.BreakGlassGrant, error) {
			return listGrants(ctx, e.conn.Client)
		},
		cells: func(e *env, g *imsv1.BreakGlassGrant) map[string]string {
			return map[string]string{"ID": g.Id, "INSTALL": orDash(g.InstallName), "ROLE": g.Role, "STATE": g.State,
				"BY": orDash(g.RequestedBy), "DECIDED BY": orDash(g.DecidedBy), "ENDS": grantEnds(e.now, g), "REASON": orDash(g.Reason)}
		},
		sel: func(e *env, g *imsv1.BreakGlassGrant) selection { return selection{g, "grant", g.Id, g.Id} },
	})
}

// grantEnds is the ENDS of :breakglass, as byoc breakglass list's UNTIL:
// "in 59:00" while live, "ended 5m ago" once past (imsd may not have
// marked it expired yet), "revoked 2m ago"; never a countdown for a grant
// that no longer runs.
func grantEnds(now time.Time, g *imsv1.BreakGlassGrant) string {
	switch g.State {
	case "approved", "expired":
		if g.ExpireTime == nil {
			return dash
		}
		if d := g.ExpireTime.AsTime().Sub(now); d > 0 && g.State == "approved" {
			return "in " + countdown(d)
		}
		return "ended " + ago(now, g.ExpireTime.AsTime())
	case "revoked":
		if g.RevokeTime == nil {
			return "revoked"
		}
		return "revoked " + ago(now, g.RevokeTime.AsTime())
	}
	return dash
}

// ContextInfo is one context of the CLI's config, for :ctx.
type ContextInfo struct {
	Name, Server string
	Current      bool
}

func newContextsView(e *env) view {
	return newTableView(e, tableSpec[ContextInfo]{
		title: "contexts", empty: "the CLI config has no contexts (byoc context add NAME --server URL)",
		cols: []column{{"CURRENT", 7, 1}, {"NAME", 12, 0}, {"SERVER", 0, 2}},
		load: func(ctx context.Context, e *env) func() ([]ContextInfo, error) {
			f := e.opts.Contexts
			return func() ([]ContextInfo, error) { return f() }
		},
		cells: func(e *env, c ContextInfo) map[string]string {
			cur := ""
			if (e.conn != nil && e.conn.Context == c.Name) || (e.conn == nil && c.Current) {
				cur = "*"
			}
			return map[string]string{"CURRENT": cur, "NAME": c.Name, "SERVER": c.Server}
		},
		sel:  func(e *env, c ContextInfo) selection { return selection{nil, "context", c.Name, c.Name} },
		open: func(_ context.Context, e *env, c ContextInfo) tea.Cmd { return e.nav.switchContext(c.Name) },
	})
}
