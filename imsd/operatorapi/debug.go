package operatorapi

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// ListDebugCommands lists the debug commands of an install's app revision.
func (s *Service) ListDebugCommands(ctx context.Context, req *connect.Request[imsv1.ListDebugCommandsRequest]) (*connect.Response[imsv1.ListDebugCommandsResponse], error) {
	app, rev, err := s.installApp(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListDebugCommandsResponse{AppRevision: rev, Components: app.DebugComponents()}
	for _, d := range app.DebugCommands {
		out.Commands = append(out.Commands, DebugCommandToProto(d))
	}
	return connect.NewResponse(out), nil
}

// DebugCommandToProto is d as the API has it.
func DebugCommandToProto(d *config.DebugCommand) *imsv1.DebugCommand {
	p := &imsv1.DebugCommand{Name: d.Name, Description: d.Description, TimeoutSeconds: int64(time.Duration(d.Timeout) / time.Second)}
	for _, a := range d.Args {
		p.Args = append(p.Args, &imsv1.DebugArg{Name: a.Name, Description: a.Description, Type: cmp.Or(a.Type, "string"), Pattern: a.Pattern,
			Min: a.Min, Max: a.Max, Values: a.Values, Required: a.Required, DefaultValue: a.Default, Sensitive: a.Sensitive})
	}
	return p
}

// RunDebugCommand queues one run of a debug command: its arguments checked
// again here against the declared shapes (never trusting the client's
// check), audited as debug.run before the job is queued (no audit record,
// no run), the job in the maintenance mode.
func (s *Service) RunDebugCommand(ctx context.Context, req *connect.Request[imsv1.RunDebugCommandRequest]) (*connect.Response[imsv1.RunDebugCommandResponse], error) {
	m := req.Msg
	switch {
	case m.Install == "":
		return nil, s.err(ctx, errs.Field("install", "is required"))
	case m.Command == "":
		return nil, s.err(ctx, errs.Field("command", "is required"))
	case len(m.Reason) > 1024:
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	e, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if in.State == store.InstallDeprovisioned {
		return nil, s.err(ctx, errs.E(errs.Conflict, "install %s is deprovisioned: there is nothing to debug", in.Name))
	}
	p := callerFrom(ctx)
	run, err := e.DebugJob(ctx, in, m.Command, m.Positional, m.Args, p.Name)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	args, _ := json.Marshal(run.Args)
	data := map[string]string{"install": in.Name, "command": run.Command.Name, "args": string(args), "job": run.Job.ID,
		"mode": string(run.Job.Mode), "app_revision": strconv.FormatInt(run.AppRevision, 10)}
	if m.Reason != "" {
		data["reason"] = m.Reason
	}
	ev := store.AuditEvent{Chain: in.ID, At: s.now(), Kind: "debug.run", Actor: p.Actor(), Subject: run.Command.Name, Data: data}
	if err := s.store.RecordAudit(ctx, ev); err != nil {
		return nil, s.err(ctx, errs.E(errs.Unavailable, "cannot write the audit record of this debug command, so it was not run; try again"))
	}
	if run.SensitiveEnv != nil {
		// Held in memory only, before the job can be handed out.
		e.Sensitive.Put(run.Job.ID, run.SensitiveEnv, s.now(), s.now().Add(run.Job.Timeout+time.Hour))
	}
	jobs, err := s.enqueue(ctx, []store.Job{run.Job}, false, nil)
	if err != nil {
		e.Sensitive.Drop(run.Job.ID)
		return nil, s.err(ctx, err)
	}
	s.log.InfoContext(ctx, "debug command queued", "job", jobs[0].ID, "install", in.Name, "command", run.Command.Name, "by", p.Name)
	return connect.NewResponse(&imsv1.RunDebugCommandResponse{Job: jobFields(jobs[0]), Args: run.Args}), nil
}
