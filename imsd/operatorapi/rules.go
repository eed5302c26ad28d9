package operatorapi

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// targetKind is what a rule checks a permission on.
type targetKind int

const (
	// onPublic needs no credentials at all.
	onPublic targetKind = iota + 1
	// onSelf needs only credentials: the call is about the caller.
	onSelf
	// onAnywhere needs the permission on some scope; lists answer only
	// what the caller may see.
	onAnywhere
	// onEverything needs the permission on every install (an unscoped
	// grant): vendor-wide calls.
	onEverything
	// onApp needs it on the app the field names; for read, a grant on
	// one of the app's installs is enough.
	onApp
	// onInstall needs it on the install the field names (id or name).
	onInstall
	// onInstallOrList: onInstall when the field is set, else onAnywhere
	// and the answer is filtered.
	onInstallOrList
	// onJob and onWorkflow need it on the install of the job or workflow
	// whose id the field holds.
	onJob
	onWorkflow
	// onSupportRecording needs it on the install of the support session
	// whose kept recording the field names.
	onSupportRecording
	// onJobs needs it on the install of every jobs[i].
	onJobs
)

// rule says what a procedure needs.
type rule struct {
	perm  access.Perm
	on    targetKind
	field string
	// verb names the call in refusals.
	verb string
	// firstOnly applies the rule to a stream's first message only: the
	// one that names the target (a support shell's open); the handler
	// ignores the target field of later ones.
	firstOnly bool
}

func r(perm access.Perm, on targetKind, field, verb string) rule {
	return rule{perm: perm, on: on, field: field, verb: verb}
}

// rules holds every procedure the operator port serves. A procedure not
// here is refused to everyone, and TestEveryRPCHasARule fails.
// Handlers check more where the request alone does not say: a live
// PlanInstall needs deploy, a support role may run only break_glass
// actions, and a push needs deploy on the app it names.
var rules = map[string]rule{
	imsv1connect.OperatorServiceWhoAmIProcedure:                           r(access.Read, onSelf, "", "say who you are"),
	imsv1connect.OperatorServiceCheckAccessProcedure:                      r(access.Read, onSelf, "", "check access"),
	imsv1connect.OperatorServiceGetLoginConfigProcedure:                   r(access.Read, onPublic, "", "read the login config"),
	"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      r(access.Read, onSelf, "", "reflect"),
	"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": r(access.Read, onSelf, "", "reflect"),

	imsv1connect.OperatorServiceCreateApiTokenProcedure: r(access.Manage, onEverything, "", "create API tokens"),
	imsv1connect.OperatorServiceListApiTokensProcedure:  r(access.Manage, onEverything, "", "list API tokens"),
	imsv1connect.OperatorServiceRevokeApiTokenProcedure: r(access.Manage, onEverything, "", "revoke API tokens"),

	imsv1connect.OperatorServiceCreateAppProcedure:        r(access.Deploy, onEverything, "", "create apps"),
	imsv1connect.OperatorServiceListAppsProcedure:         r(access.Read, onAnywhere, "", "list apps"),
	imsv1connect.OperatorServiceGetAppProcedure:           r(access.Read, onApp, "id_or_name", "read"),
	imsv1connect.OperatorServicePushAppRevisionProcedure:  r(access.Deploy, onAnywhere, "", "push app revisions"),
	imsv1connect.OperatorServiceListAppRevisionsProcedure: r(access.Read, onApp, "app", "read"),
	imsv1connect.OperatorServiceDiffAppRevisionsProcedure: r(access.Read, onApp, "app", "read"),

	imsv1connect.OperatorServiceCreateInstallProcedure:    r(access.Deploy, onApp, "app", "create installs of"),
	imsv1connect.OperatorServiceListInstallsProcedure:     r(access.Read, onAnywhere, "", "list installs"),
	imsv1connect.OperatorServiceGetInstallProcedure:       r(access.Read, onInstall, "id_or_name", "read"),
	imsv1connect.OperatorServiceListInstallDriftProcedure: r(access.Read, onInstall, "install", "read"),
	// A drift check runs plans in the customer's account: deployers only.
	imsv1connect.OperatorServiceCheckInstallDriftProcedure:     r(access.Deploy, onInstall, "install", "check the drift of"),
	imsv1connect.OperatorServiceImportComponentProcedure:       r(access.Deploy, onInstall, "install", "import a component into"),
	imsv1connect.OperatorServiceWatchInstallsProcedure:         r(access.Read, onAnywhere, "", "watch installs"),
	imsv1connect.OperatorServiceCreateEnrollmentTokenProcedure: r(access.Deploy, onInstall, "install", "issue enrolment tokens for"),
	// Labels decide which selector grants cover an install: admins only.
	imsv1connect.OperatorServiceLabelInstallProcedure: r(access.Manage, onInstall, "install", "relabel"),
	// Cutting off an install's agent: admins only.
	imsv1connect.OperatorServiceRevokeAgentProcedure: r(access.Manage, onInstall, "install", "revoke the agent of"),
	// Offering an agent release: deployers (the customer's policy decides).
	imsv1connect.OperatorServiceOfferAgentUpdateProcedure:     r(access.Deploy, onInstall, "install", "offer agent updates to"),
	imsv1connect.OperatorServiceUpdateInstallProcedure:        r(access.Deploy, onInstall, "install", "update"),
	imsv1connect.OperatorServicePlanInstallProcedure:          r(access.Read, onInstall, "install", "plan"),
	imsv1connect.OperatorServiceGetInstallStackProcedure:      r(access.Read, onInstall, "install", "read the stack of"),
	imsv1connect.OperatorServiceCreateBundleProcedure:         r(access.Deploy, onInstall, "install", "create offline bundles for"),
	imsv1connect.OperatorServiceSignBundleProcedure:           r(access.Deploy, onInstall, "install", "sign offline bundles for"),
	imsv1connect.OperatorServiceImportBundleResultsProcedure:  r(access.Deploy, onInstall, "install", "import offline results of"),
	imsv1connect.OperatorServiceListInstallImagesProcedure:    r(access.Read, onInstall, "install", "read"),
	imsv1connect.OperatorServiceListInstallArtifactsProcedure: r(access.Read, onInstall, "install", "read"),
	// A results file in parts: the first message names the install.
	imsv1connect.OperatorServiceUploadBundleResultsProcedure: {perm: access.Deploy, on: onInstall, field: "install", verb: "import offline results of", firstOnly: true},

	imsv1connect.OperatorServiceStartWorkflowProcedure: r(access.Deploy, onInstall, "install", "start workflows on"),
	imsv1connect.OperatorServiceListWorkflowsProcedure: r(access.Read, onInstallOrList, "install", "read"),
	imsv1connect.OperatorServiceGetWorkflowProcedure:   r(access.Read, onWorkflow, "id", "read"),
	// Releases roll out across the fleet and name its installs: a role
	// on every install (an unscoped grant) is needed to see or drive one.
	imsv1connect.OperatorServiceCreateReleaseProcedure:     r(access.Deploy, onEverything, "", "create releases"),
	imsv1connect.OperatorServiceListReleasesProcedure:      r(access.Read, onEverything, "", "list releases"),
	imsv1connect.OperatorServiceGetReleaseProcedure:        r(access.Read, onEverything, "", "read releases"),
	imsv1connect.OperatorServiceApproveReleaseProcedure:    r(access.Deploy, onEverything, "", "approve releases"),
	imsv1connect.OperatorServicePauseReleaseProcedure:      r(access.Deploy, onEverything, "", "pause releases"),
	imsv1connect.OperatorServiceResumeReleaseProcedure:     r(access.Deploy, onEverything, "", "resume releases"),
	imsv1connect.OperatorServiceCancelReleaseProcedure:     r(access.Deploy, onEverything, "", "cancel releases"),
	imsv1connect.OperatorServiceRetryReleaseProcedure:      r(access.Deploy, onEverything, "", "retry releases"),
	imsv1connect.OperatorServiceRollbackReleaseProcedure:   r(access.Deploy, onEverything, "", "roll back releases"),
	imsv1connect.OperatorServiceApproveWorkflowProcedure:   r(access.Deploy, onWorkflow, "id", "approve workflows on"),
	imsv1connect.OperatorServiceCancelWorkflowProcedure:    r(access.Deploy, onWorkflow, "id", "cancel workflows on"),
	imsv1connect.OperatorServiceRetryWorkflowStepProcedure: r(access.Deploy, onWorkflow, "id", "retry workflow steps on"),

	imsv1connect.OperatorServiceEnqueueJobProcedure:    r(access.Deploy, onInstall, "install", "enqueue jobs on"),
	imsv1connect.OperatorServiceEnqueueJobsProcedure:   r(access.Deploy, onJobs, "jobs", "enqueue jobs on"),
	imsv1connect.OperatorServiceListJobsProcedure:      r(access.Read, onInstallOrList, "install", "read"),
	imsv1connect.OperatorServiceGetJobProcedure:        r(access.Read, onJob, "id", "read"),
	imsv1connect.OperatorServiceStreamJobLogsProcedure: r(access.Read, onJob, "job_id", "read logs of"),
	imsv1connect.OperatorServiceCancelJobProcedure:     r(access.Deploy, onJob, "id", "cancel jobs on"),

	imsv1connect.OperatorServiceRegisterPluginTypeProcedure: r(access.Manage, onEverything, "", "register plugin types"),
	imsv1connect.OperatorServiceListPluginTypesProcedure:    r(access.Read, onAnywhere, "", "list plugin types"),
	imsv1connect.OperatorServiceGetPluginTypeProcedure:      r(access.Read, onAnywhere, "", "read plugin types"),
	imsv1connect.OperatorServiceRemovePluginTypeProcedure:   r(access.Manage, onEverything, "", "remove plugin types"),

	imsv1connect.OperatorServiceListActionsProcedure:    r(access.Read, onInstall, "install", "read"),
	imsv1connect.OperatorServiceStartActionRunProcedure: r(access.Debug, onInstall, "install", "run actions on"),
	imsv1connect.OperatorServiceListActionRunsProcedure: r(access.Read, onInstall, "install", "read"),
	// Debug commands read: support and operators run them, viewers not.
	imsv1connect.OperatorServiceListDebugCommandsProcedure: r(access.Read, onInstall, "install", "read"),
	imsv1connect.OperatorServiceRunDebugCommandProcedure:   r(access.Debug, onInstall, "install", "run debug commands on"),
	imsv1connect.OperatorServiceGetActionRunProcedure:      r(access.Read, onWorkflow, "id", "read"),
	// Forwarded telemetry reads what the customer allowed out: readers.
	imsv1connect.OperatorServiceGetTelemetryProcedure: r(access.Read, onInstall, "install", "read telemetry of"),
	// A support shell needs the break-glass permission (support, admin);
	// the agent needs a live grant with sessions allowed besides.
	imsv1connect.OperatorServiceSupportShellProcedure: {perm: access.BreakGlass, on: onInstall, field: "install", verb: "open support shells on", firstOnly: true},

	// A kept support session recording shows what was typed and seen
	// under a break-glass grant: only those who may break glass on its
	// install (support, admin) read it; operators and viewers not.
	imsv1connect.OperatorServiceListSupportRecordingsProcedure: r(access.BreakGlass, onInstall, "install", "read support session recordings of"),
	imsv1connect.OperatorServiceGetSupportRecordingProcedure:   r(access.BreakGlass, onSupportRecording, "id", "read support session recordings of"),
	imsv1connect.OperatorServiceRequestBreakGlassProcedure:     r(access.BreakGlass, onInstall, "install", "request break-glass on"),
	imsv1connect.OperatorServiceListBreakGlassGrantsProcedure:  r(access.Read, onInstallOrList, "install", "read"),
	imsv1connect.OperatorServiceGetBreakGlassPolicyProcedure:   r(access.Read, onInstall, "install", "read"),
	imsv1connect.OperatorServiceListAuditEventsProcedure:       r(access.Read, onInstallOrList, "install", "read the audit of"),

	imsv1connect.OperatorServiceCreateBuildAgentTokenProcedure: r(access.Manage, onEverything, "", "enrol the build agent"),
	imsv1connect.OperatorServiceStartBuildProcedure:            r(access.Manage, onEverything, "", "start builds"),
	imsv1connect.OperatorServiceListBuildsProcedure:            r(access.Read, onAnywhere, "", "list builds"),
}

// mutating reports whether a call may change something: its rule needs
// more than read, or it is a live PlanInstall (which enqueues plan jobs
// on the agent and issues registry grants for them).
func mutating(procedure string, msg any) bool {
	if p, ok := msg.(*imsv1.PlanInstallRequest); ok && p.GetLive() {
		return true
	}
	ru, ok := rules[procedure]
	return !ok || ru.perm != access.Read
}

// stringField returns a message's top-level string field name.
func stringField(msg proto.Message, name string) string {
	if msg == nil {
		return ""
	}
	rm := msg.ProtoReflect()
	f := rm.Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil || f.IsList() || f.IsMap() || f.Kind() != protoreflect.StringKind {
		return ""
	}
	return rm.Get(f).String()
}

// installTarget is the access target of an install.
func installTarget(ctx context.Context, st *store.Store, in store.Install) (access.Target, error) {
	app, err := st.GetApp(ctx, in.AppID)
	if err != nil {
		return access.Target{}, err
	}
	return targetOf(in, app.Name), nil
}

// targetOf is the access target of install in of the app named app.
func targetOf(in store.Install, app string) access.Target {
	return access.Target{Install: in.Name, App: app, Labels: installLabels(in), Vendor: in.ID == store.VendorInstallID}
}

// installLabels returns an install's labels.
func installLabels(in store.Install) map[string]string { return in.Labels }

// denied is the error of a refused call: a permission_denied *errs.Error
// that also carries the target, for the refusal's audit record
// (refusals.go).
func denied(p access.Principal, verb string, perm access.Perm, t access.Target) error {
	return &refusalError{err: errs.E(errs.PermissionDenied, "%s", p.Refusal(verb, perm, t)), target: t}
}

// check applies the procedure's rule to a call by p with request msg.
func check(ctx context.Context, st *store.Store, p access.Principal, procedure string, msg proto.Message) error {
	ru, ok := rules[procedure]
	if !ok {
		return errs.E(errs.PermissionDenied, "%s has no access rule in imsd: nobody may call it", procedure)
	}
	switch ru.on {
	case onPublic, onSelf:
		return nil
	case onAnywhere:
		if p.Anywhere(ru.perm) {
			return nil
		}
		return denied(p, ru.verb, ru.perm, access.Target{})
	case onEverything:
		if p.Everywhere(ru.perm) {
			return nil
		}
		return denied(p, ru.verb, ru.perm, access.Target{})
	case onApp:
		return checkApp(ctx, st, p, ru, stringField(msg, ru.field))
	case onInstall:
		return checkInstall(ctx, st, p, ru, stringField(msg, ru.field))
	case onInstallOrList:
		name := stringField(msg, ru.field)
		if name == "" {
			if p.Anywhere(ru.perm) {
				return nil
			}
			return denied(p, ru.verb, ru.perm, access.Target{})
		}
		return checkInstall(ctx, st, p, ru, name)
	case onJob:
		id := stringField(msg, ru.field)
		if p.Everywhere(ru.perm) {
			return nil
		}
		j, err := st.GetJob(ctx, id)
		if err != nil {
			return notFoundAsDenied(err, p, ru, access.Target{Install: "of job " + id})
		}
		return checkInstall(ctx, st, p, ru, j.InstallID)
	case onWorkflow:
		id := stringField(msg, ru.field)
		if p.Everywhere(ru.perm) {
			return nil
		}
		wf, _, err := st.GetWorkflow(ctx, id)
		if err != nil {
			return notFoundAsDenied(err, p, ru, access.Target{Install: "of workflow " + id})
		}
		return checkInstall(ctx, st, p, ru, wf.InstallID)
	case onSupportRecording:
		id := stringField(msg, ru.field)
		if p.Everywhere(ru.perm) {
			return nil
		}
		rec, err := st.GetSessionRecording(ctx, id)
		if err != nil {
			return notFoundAsDenied(err, p, ru, access.Target{Install: "of support session " + id})
		}
		return checkInstall(ctx, st, p, ru, rec.InstallID)
	case onJobs:
		m, _ := msg.(*imsv1.EnqueueJobsRequest)
		if p.Everywhere(ru.perm) {
			return nil
		}
		seen := map[string]bool{}
		for _, j := range m.GetJobs() {
			if seen[j.GetInstall()] {
				continue
			}
			seen[j.GetInstall()] = true
			if err := checkInstall(ctx, st, p, ru, j.GetInstall()); err != nil {
				return err
			}
		}
		if len(seen) == 0 && !p.Anywhere(ru.perm) {
			return denied(p, ru.verb, ru.perm, access.Target{})
		}
		return nil
	}
	return fmt.Errorf("rule for %s: unknown target kind %d", procedure, ru.on)
}

func notFoundAsDenied(err error, p access.Principal, ru rule, t access.Target) error {
	if errs.Is(err, errs.NotFound) {
		return denied(p, ru.verb, ru.perm, t)
	}
	return err
}

// checkInstall checks p may do ru on the install with id or name
// idOrName. An install that does not exist is the handler's to report
// to a caller with the permission everywhere, and a refusal to others.
func checkInstall(ctx context.Context, st *store.Store, p access.Principal, ru rule, idOrName string) error {
	if p.Everywhere(ru.perm) {
		return nil
	}
	if idOrName == "" {
		return denied(p, ru.verb, ru.perm, access.Target{Install: "(none named)"})
	}
	in, err := st.GetInstall(ctx, idOrName)
	if err != nil {
		return notFoundAsDenied(err, p, ru, access.Target{Install: idOrName})
	}
	t, err := installTarget(ctx, st, in)
	if err != nil {
		return err
	}
	if _, ok := p.Can(ru.perm, t); ok {
		return nil
	}
	return denied(p, ru.verb, ru.perm, t)
}

// checkApp checks p may do ru on the app with id or name idOrName: a
// grant covering the app, or, to read, one covering one of its installs.
func checkApp(ctx context.Context, st *store.Store, p access.Principal, ru rule, idOrName string) error {
	if p.Everywhere(ru.perm) {
		return nil
	}
	app, err := st.GetApp(ctx, idOrName)
	if err != nil {
		return notFoundAsDenied(err, p, ru, access.Target{App: idOrName})
	}
	t := access.Target{App: app.Name}
	if _, ok := p.Can(ru.perm, t); ok {
		return nil
	}
	if ru.perm == access.Read {
		ins, err := st.ListInstalls(ctx, app.ID)
		if err != nil {
			return err
		}
		for _, in := range ins {
			if _, ok := p.Can(ru.perm, targetOf(in, app.Name)); ok {
				return nil
			}
		}
	}
	return denied(p, ru.verb, ru.perm, t)
}

// verbs maps byoc auth can-i verbs to permissions.
var verbs = map[string]access.Perm{
	"view": access.Read, "read": access.Read, "get": access.Read, "list": access.Read, "logs": access.Read,
	"deploy": access.Deploy, "provision": access.Deploy, "update": access.Deploy, "deprovision": access.Deploy,
	"approve": access.Deploy, "cancel": access.Deploy, "retry": access.Deploy, "enrol": access.Deploy, "enroll": access.Deploy,
	"action": access.Deploy, "run": access.Deploy,
	"debug": access.Debug, "break-glass": access.BreakGlass, "breakglass": access.BreakGlass,
	"manage": access.Manage, "tokens": access.Manage, "plugins": access.Manage, "builds": access.Manage, "admin": access.Manage,
}

// verbNames lists the verbs for errors.
func verbNames() string {
	return "view, deploy, provision, update, deprovision, approve, cancel, retry, enrol, action, debug, break-glass, manage"
}

var _ = strings.ToLower
