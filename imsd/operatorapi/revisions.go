package operatorapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/diff"
	"github.com/byoc-dev/byoc/schema/app/load"
)

// maxPushBytes caps the files of one push, all together.
const maxPushBytes = 8 << 20

// PushAppRevision validates an app config and stores it as a revision.
// Each component's config is checked against its type's schema: a
// built-in type's, or the one registered with RegisterPluginType.
func (s *Service) PushAppRevision(ctx context.Context, req *connect.Request[imsv1.PushAppRevisionRequest]) (*connect.Response[imsv1.PushAppRevisionResponse], error) {
	files := map[string][]byte{}
	total := 0
	for i, f := range req.Msg.Files {
		p := f.Path
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\\") {
			return nil, s.err(ctx, errs.Field(fmt.Sprintf("files[%d].path", i), "%q is not a clean relative path", p))
		}
		if _, dup := files[p]; dup {
			return nil, s.err(ctx, errs.Field(fmt.Sprintf("files[%d].path", i), "%q is given twice", p))
		}
		if len(f.Content) > config.MaxFileBytes {
			return nil, s.err(ctx, errs.Field(fmt.Sprintf("files[%d].content", i), "%s is %d bytes; files may be at most %d", p, len(f.Content), config.MaxFileBytes))
		}
		total += len(f.Content)
		files[p] = f.Content
	}
	if total > maxPushBytes {
		return nil, s.err(ctx, errs.Field("files", "are %d bytes in all; a push may be at most %d", total, maxPushBytes))
	}
	opts, err := s.configOptions(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	app, err := load.Parse(files, opts)
	if err != nil {
		return nil, configError(err)
	}
	a, err := s.store.GetApp(ctx, app.Metadata.Name)
	switch {
	case err == nil:
		if err := s.requireApp(ctx, "push revisions of", access.Deploy, a.Name); err != nil {
			return nil, s.err(ctx, err)
		}
		if !req.Msg.NoDeploy {
			if err := s.checkRelabels(ctx, a, app); err != nil {
				return nil, s.err(ctx, err)
			}
		}
	case errs.Is(err, errs.NotFound):
		// A first push creates the app: vendor-wide.
		if err := s.requireApp(ctx, "push a new app", access.Deploy, ""); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	if errs.Is(err, errs.NotFound) {
		a = store.App{ID: auth.NewID("app_"), Name: app.Metadata.Name, Description: app.Metadata.Description, CreatedAt: s.now()}
		if err = s.store.CreateApp(ctx, a); errs.Is(err, errs.AlreadyExists) {
			a, err = s.store.GetApp(ctx, app.Metadata.Name) // created meanwhile by another push
		}
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	rev, created, err := s.store.CreateAppRevision(ctx, store.AppRevision{
		AppID: a.ID, Digest: config.Digest(files), Version: app.Metadata.Version, Files: files,
		CreatedAt: s.now(), CreatedBy: callerFrom(ctx).Name, Warnings: warningTexts(app.Warnings),
	})
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.PushAppRevisionResponse{App: appToProto(a), Revision: revisionToProto(rev, app), Created: created}
	// The changes are against the revision just before this one, read
	// after the insert so a concurrent push cannot slip in between.
	// A push of the latest revision's files again is its own previous.
	prevApp := app
	if created {
		prevApp = nil
	}
	if created && rev.Number > 1 {
		prev, err := s.store.GetAppRevision(ctx, a.ID, rev.Number-1)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		if old, err := load.Parse(prev.Files, storedOptions()); err == nil {
			out.Changes = changesToProto(diff.Apps(old, app))
			prevApp = old
		}
	}
	if req.Msg.NoDeploy {
		return connect.NewResponse(out), nil
	}
	if out.Installs, err = s.applyInstallFiles(ctx, a, app, prevApp); err != nil {
		return nil, s.err(ctx, err)
	}
	// Every install that runs the app follows it: an update workflow
	// deploys what the new revision (or a changed installs/*.toml)
	// changes for it. An install with nothing to change ends its
	// workflow at once.
	changed := map[string]bool{}
	for _, ia := range out.Installs {
		changed[ia.Name] = ia.Op == "changed"
	}
	installs, err := s.store.ListInstalls(ctx, a.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	for _, in := range installs {
		if in.State != store.InstallActive && in.State != store.InstallFailed {
			continue
		}
		if !created && !changed[in.Name] {
			continue
		}
		reason := fmt.Sprintf("app push: revision %d", rev.Number)
		if !created {
			reason = fmt.Sprintf("app push: %s changed", in.Settings.Source)
		}
		wf, err := s.queueWorkflow(ctx, in, workflow.Update, rev.Number, reason, app)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		out.Workflows = append(out.Workflows, s.workflowToProto(ctx, wf, nil))
	}
	return connect.NewResponse(out), nil
}

// applyInstallFiles creates or changes the installs of installs/*.toml.
// Installs the files no longer name are left alone.
//
// A file wins for what it names, as kubectl apply does: each input it
// sets, its parallelism and require_approval when it sets them, and its
// component overrides (only files set those). What it does not name is
// left as it is (inputs and settings set with byoc install update), except
// what the same install's file in the previous revision (prev, nil for
// none) named and this one no longer does: that is unset. An install is
// changed only when this changes something, and the answer says what.
func (s *Service) applyInstallFiles(ctx context.Context, a store.App, app, prev *config.App) ([]*imsv1.InstallApplied, error) {
	var out []*imsv1.InstallApplied
	sensitive, known := s.sensitiveInputs(ctx, a.ID)
	for _, f := range app.Installs {
		file := app.FileOf("install", f.Name)
		inputs := map[string]string{}
		for k, v := range f.Inputs {
			inputs[k] = config.InputText(v)
		}
		settings := store.InstallSettings{Parallelism: f.Parallelism, RequireApproval: f.RequireApproval, Source: file, Windows: f.Window}
		for name, o := range f.Components {
			if len(o.Config) > 0 {
				if settings.Overrides == nil {
					settings.Overrides = map[string]map[string]any{}
				}
				settings.Overrides[name] = o.Config
			}
		}
		ia := &imsv1.InstallApplied{Name: f.Name, File: file}
		in, err := s.store.GetInstall(ctx, f.Name)
		switch {
		case errs.Is(err, errs.NotFound):
			now := s.now()
			in = store.Install{ID: auth.NewID("ins_"), AppID: a.ID, Name: f.Name, Inputs: inputs, Labels: f.Labels, CreatedAt: now, Settings: settings}
			secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
			et := store.EnrollmentToken{Hash: hash, InstallID: in.ID, ExpiresAt: now.Add(DefaultEnrollTokenTTL), CreatedAt: now}
			if err := s.store.CreateInstall(ctx, in, et); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			in.State = store.InstallNew
			ia.Op = "created"
			ia.EnrollmentToken = &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)}
			s.hub.FleetChanged()
		case err != nil:
			return nil, err
		case in.AppID != a.ID:
			return nil, errs.E(errs.Conflict, "%s: install %q belongs to another app; rename the file or set name = \"...\"", file, f.Name)
		default:
			var before *config.InstallFile
			if prev != nil {
				before = installFile(prev, f.Name)
			}
			mergedInputs, mergedSettings := mergeInstallFile(in, before, inputs, settings)
			masked := func(name string) bool { return !known || sensitive[name] }
			ia.Changes = installChanges(in, mergedInputs, mergedSettings, masked)
			mergedLabels := mergeLabels(in.Labels, before, f.Labels)
			labelChanges := labelChanges(in.Labels, mergedLabels)
			ia.Changes = append(ia.Changes, labelChanges...)
			if len(ia.Changes) == 0 {
				ia.Op = "unchanged"
				break
			}
			if len(ia.Changes) > len(labelChanges) {
				if in, err = s.store.UpdateInstall(ctx, in.ID, mergedInputs, mergedSettings, s.now()); err != nil {
					return nil, fmt.Errorf("%s: %w", file, err)
				}
			}
			if len(labelChanges) > 0 {
				if in, err = s.store.SetInstallLabels(ctx, in.ID, mergedLabels, "token:"+callerFrom(ctx).Name, s.now()); err != nil {
					return nil, fmt.Errorf("%s: %w", file, err)
				}
			}
			ia.Op = "changed"
			s.hub.FleetChanged()
		}
		ia.Install = s.installToProto(ctx, in)
		out = append(out, ia)
	}
	return out, nil
}

// checkRelabels refuses a push whose installs/*.toml would change the
// labels of an install that exists (applyInstallFiles) unless the caller
// may manage it, as byoc install label needs: labels decide what
// selector grants cover, so deploying the app must not move its installs
// into another grant. It runs before anything is stored: a refused push
// changes nothing. A push's new installs take their labels as
// CreateInstall's do.
func (s *Service) checkRelabels(ctx context.Context, a store.App, app *config.App) error {
	if callerFrom(ctx).Everywhere(access.Manage) {
		return nil
	}
	// The revision the push will follow, as applyInstallFiles reads it.
	var prev *config.App
	latest, err := s.store.GetAppRevision(ctx, a.ID, 0)
	switch {
	case err == nil:
		if old, err := load.Parse(latest.Files, storedOptions()); err == nil {
			prev = old
		}
	case !errs.Is(err, errs.NotFound):
		return err
	}
	for _, f := range app.Installs {
		in, err := s.store.GetInstall(ctx, f.Name)
		if errs.Is(err, errs.NotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if in.AppID != a.ID {
			continue // refused by applyInstallFiles, naming the file
		}
		var before *config.InstallFile
		if prev != nil {
			before = installFile(prev, f.Name)
		}
		if len(labelChanges(in.Labels, mergeLabels(in.Labels, before, f.Labels))) == 0 {
			continue
		}
		if err := s.require(ctx, "change the labels (by "+app.FileOf("install", f.Name)+") of", access.Manage, in.Name); err != nil {
			return err
		}
	}
	return nil
}

// installFile returns app's installs/*.toml of install name, or nil.
func installFile(app *config.App, name string) *config.InstallFile {
	for _, f := range app.Installs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// unionKeys returns the keys of a and b, sorted, once each.
func unionKeys[V any](a, b map[string]V) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// mergeInstallFile is what an install becomes when its file (inputs and
// settings, as decoded) is applied over it; before is the same install's
// file in the previous revision, or nil.
func mergeInstallFile(in store.Install, before *config.InstallFile, inputs map[string]string, settings store.InstallSettings) (map[string]string, store.InstallSettings) {
	merged := maps.Clone(in.Inputs)
	if merged == nil {
		merged = map[string]string{}
	}
	if before != nil {
		for k := range before.Inputs {
			if _, still := inputs[k]; !still {
				delete(merged, k)
			}
		}
	}
	maps.Copy(merged, inputs)
	out := in.Settings
	out.Source = settings.Source
	out.Overrides = settings.Overrides
	switch {
	case settings.Parallelism != 0:
		out.Parallelism = settings.Parallelism
	case before != nil && before.Parallelism != 0:
		out.Parallelism = 0
	}
	switch {
	case settings.RequireApproval != nil:
		out.RequireApproval = settings.RequireApproval
	case before != nil && before.RequireApproval != nil:
		out.RequireApproval = nil
	}
	switch {
	case len(settings.Windows) > 0:
		out.Windows = settings.Windows
	case before != nil && len(before.Window) > 0:
		out.Windows = nil
	}
	return merged, out
}

// mergeLabels is an install's labels cur with its file's labels applied:
// the file wins for each label it names, a label the same install's file
// in the previous revision (before, nil for none) named and this one no
// longer does is removed, and labels set with byoc install label stay.
func mergeLabels(cur map[string]string, before *config.InstallFile, file map[string]string) map[string]string {
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	if before != nil {
		for k := range before.Labels {
			if _, still := file[k]; !still {
				delete(out, k)
			}
		}
	}
	maps.Copy(out, file)
	return out
}

// labelChanges describes the change from labels a to b, one line per
// label, in key order.
func labelChanges(a, b map[string]string) []string {
	var out []string
	for _, k := range unionKeys(a, b) {
		old, had := a[k]
		nw, has := b[k]
		switch {
		case had && has && old != nw:
			out = append(out, fmt.Sprintf("labels.%s: %q → %q", k, old, nw))
		case had && !has:
			out = append(out, fmt.Sprintf("labels.%s: %q → unset", k, old))
		case !had && has:
			out = append(out, fmt.Sprintf("labels.%s: unset → %q", k, nw))
		}
	}
	return out
}

// installChanges describes what changes from install in to inputs and
// settings, one line per input or setting, in a stable order; the values
// of inputs for which masked is true are not shown.
func installChanges(in store.Install, inputs map[string]string, settings store.InstallSettings, masked func(string) bool) []string {
	var out []string
	show := func(name, v string, set bool) string {
		switch {
		case !set:
			return "unset"
		case masked(name):
			return Masked
		}
		return strconv.Quote(v)
	}
	for _, k := range unionKeys(in.Inputs, inputs) {
		old, had := in.Inputs[k]
		nw, has := inputs[k]
		if had == has && old == nw {
			continue
		}
		if had && has && masked(k) {
			out = append(out, fmt.Sprintf("inputs.%s: changed", k))
			continue
		}
		out = append(out, fmt.Sprintf("inputs.%s: %s → %s", k, show(k, old, had), show(k, nw, has)))
	}
	p := func(n int) string {
		if n == 0 {
			return "the app's default"
		}
		return strconv.Itoa(n)
	}
	if in.Settings.Parallelism != settings.Parallelism {
		out = append(out, fmt.Sprintf("parallelism: %s → %s", p(in.Settings.Parallelism), p(settings.Parallelism)))
	}
	b := func(v *bool) string {
		if v == nil {
			return "the app's default"
		}
		return strconv.FormatBool(*v)
	}
	if b(in.Settings.RequireApproval) != b(settings.RequireApproval) {
		out = append(out, fmt.Sprintf("require_approval: %s → %s", b(in.Settings.RequireApproval), b(settings.RequireApproval)))
	}
	for _, c := range unionKeys(in.Settings.Overrides, settings.Overrides) {
		if !sameJSON(in.Settings.Overrides[c], settings.Overrides[c]) {
			out = append(out, fmt.Sprintf("components.%s.config: changed", c))
		}
	}
	if !slices.Equal(in.Settings.Windows, settings.Windows) {
		w := func(ws []string) string {
			if len(ws) == 0 {
				return "none"
			}
			return strconv.Quote(strings.Join(ws, "; "))
		}
		out = append(out, fmt.Sprintf("window: %s → %s", w(in.Settings.Windows), w(settings.Windows)))
	}
	if in.Settings.Source != settings.Source {
		from := in.Settings.Source
		if from == "" {
			from = "byoc"
		}
		out = append(out, fmt.Sprintf("managed from: %s → %s", from, settings.Source))
	}
	return out
}

// ListAppRevisions lists an app's revisions, newest first.
func (s *Service) ListAppRevisions(ctx context.Context, req *connect.Request[imsv1.ListAppRevisionsRequest]) (*connect.Response[imsv1.ListAppRevisionsResponse], error) {
	if req.Msg.App == "" {
		return nil, s.err(ctx, errs.Field("app", "is required"))
	}
	a, err := s.store.GetApp(ctx, req.Msg.App)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	revs, err := s.store.ListAppRevisions(ctx, a.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListAppRevisionsResponse{}
	for _, r := range revs {
		out.Revisions = append(out.Revisions, revisionToProto(r, nil))
	}
	return connect.NewResponse(out), nil
}

// DiffAppRevisions compares two revisions of an app.
func (s *Service) DiffAppRevisions(ctx context.Context, req *connect.Request[imsv1.DiffAppRevisionsRequest]) (*connect.Response[imsv1.DiffAppRevisionsResponse], error) {
	m := req.Msg
	switch {
	case m.App == "":
		return nil, s.err(ctx, errs.Field("app", "is required"))
	case m.From <= 0:
		return nil, s.err(ctx, errs.Field("from", "must be a revision number (1 or more)"))
	case m.To < 0:
		return nil, s.err(ctx, errs.Field("to", "must be a revision number, or 0 for the latest"))
	}
	a, err := s.store.GetApp(ctx, m.App)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	from, err := s.revision(ctx, a, m.From)
	if err != nil {
		return nil, err
	}
	to, err := s.revision(ctx, a, m.To)
	if err != nil {
		return nil, err
	}
	// Revisions were valid when pushed and are immutable, so parsing
	// them again only fails if the validator has grown stricter since.
	oldApp, err1 := load.Parse(from.Files, storedOptions())
	newApp, err2 := load.Parse(to.Files, storedOptions())
	if err := errors.Join(err1, err2); err != nil {
		return nil, s.err(ctx, fmt.Errorf("diff revisions %d and %d of app %s: a revision no longer passes validation; push a corrected config and diff against it: %w", from.Number, to.Number, a.Name, err))
	}
	out := &imsv1.DiffAppRevisionsResponse{Changes: changesToProto(diff.Apps(oldApp, newApp))}
	if m.Installs || m.Selector != "" {
		sel, err := parseSelector("selector", m.Selector)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		ins, err := s.store.ListInstalls(ctx, a.ID)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		for _, in := range matchInstalls(ins, sel) {
			if in.State == store.InstallDeprovisioned {
				continue
			}
			cs := diff.Install(oldApp, newApp, installSide(in, oldApp), installSide(in, newApp))
			if len(cs) == 0 {
				out.UnchangedInstalls++
				continue
			}
			out.Installs = append(out.Installs, &imsv1.InstallConfigDiff{Install: in.Name, Changes: changesToProto(cs)})
		}
	}
	return connect.NewResponse(out), nil
}

// installSide is what install in brings to revision app: for an install
// managed from installs/*.toml, its stored inputs with the revision's
// file's over them and the file's overrides (none if the revision has no
// file for it); for another, what is stored.
func installSide(in store.Install, app *config.App) diff.InstallSide {
	if in.Settings.Source == "" {
		return diff.InstallSide{Inputs: in.Inputs, Overrides: in.Settings.Overrides}
	}
	side := diff.InstallSide{Inputs: maps.Clone(in.Inputs)}
	f := installFile(app, in.Name)
	if f == nil {
		return side
	}
	if side.Inputs == nil {
		side.Inputs = map[string]string{}
	}
	for k, v := range f.Inputs {
		side.Inputs[k] = config.InputText(v)
	}
	for name, o := range f.Components {
		if len(o.Config) > 0 {
			if side.Overrides == nil {
				side.Overrides = map[string]map[string]any{}
			}
			side.Overrides[name] = o.Config
		}
	}
	return side
}

// revision reads revision n of app a (0: the latest); a missing one is
// named by the app's name, with where to find the ones that exist.
func (s *Service) revision(ctx context.Context, a store.App, n int64) (store.AppRevision, error) {
	r, err := s.store.GetAppRevision(ctx, a.ID, n)
	if errs.Is(err, errs.NotFound) {
		what := fmt.Sprintf("revision %d", n)
		if n == 0 {
			what = "any revision yet"
		}
		return r, s.err(ctx, errs.E(errs.NotFound, "app %q has no %s (byoc app revisions %s lists them; byoc app push creates one)", a.Name, what, a.Name))
	}
	if err != nil {
		return r, s.err(ctx, err)
	}
	return r, nil
}

// configError turns app config problems into an InvalidArgument error that
// lists them all and carries them as details.
func configError(err error) error {
	var cerr *diag.Error
	if !errors.As(err, &cerr) {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	ce := connect.NewError(connect.CodeInvalidArgument, cerr)
	d := &imsv1.ConfigDiagnostics{}
	for _, x := range cerr.Diagnostics {
		d.Diagnostics = append(d.Diagnostics, &imsv1.ConfigDiagnostic{File: x.File, Line: int32(x.Line), Key: x.Key, Message: x.Message, Hint: x.Hint})
	}
	if det, err := connect.NewErrorDetail(d); err == nil {
		ce.AddDetail(det)
	}
	return ce
}

func revisionToProto(r store.AppRevision, app *config.App) *imsv1.AppRevision {
	out := &imsv1.AppRevision{AppId: r.AppID, Number: r.Number, Digest: r.Digest, Version: r.Version,
		CreateTime: timestamppb.New(r.CreatedAt), CreatedBy: r.CreatedBy, Warnings: r.Warnings}
	if app != nil {
		out.Components = app.Graph().Order()
	}
	return out
}

func changesToProto(cs []diff.Change) []*imsv1.ConfigChange {
	out := make([]*imsv1.ConfigChange, len(cs))
	for i, c := range cs {
		out[i] = &imsv1.ConfigChange{Kind: c.Kind, Name: c.Name, Op: c.Op, Fields: c.Fields}
		for _, v := range c.Values {
			out[i].Values = append(out[i].Values, &imsv1.FieldChange{Field: v.Field, Old: jsonText(v.Old), New: jsonText(v.New)})
		}
	}
	return out
}

// jsonText is v as compact JSON (config values are JSON-shaped).
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	return string(b)
}

// sameJSON compares two values by their JSON, so numbers read from TOML and
// from the database compare equal.
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// warningTexts are a config's warnings as AppRevision.warnings states
// them ("file:line: key: message (hint)").
func warningTexts(ds []diag.Diagnostic) []string {
	var out []string
	for _, d := range ds {
		d.Severity = "" // the field says what it is
		out = append(out, d.String())
	}
	return out
}
