package operatorapi

import (
	"context"
	"slices"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/store"
)

// require checks the caller may do perm on the install with id or name
// idOrName; what names the call in the refusal.
func (s *Service) require(ctx context.Context, what string, perm access.Perm, idOrName string) error {
	return checkInstall(ctx, s.store, callerFrom(ctx), rule{perm: perm, verb: what}, idOrName)
}

// requireApp checks the caller may do perm on the app named app, or on
// everything when app is "".
func (s *Service) requireApp(ctx context.Context, what string, perm access.Perm, app string) error {
	p := callerFrom(ctx)
	t := access.Target{App: app}
	if _, ok := p.Can(perm, t); ok {
		return nil
	}
	return denied(p, what, perm, t)
}

// requireAppRead checks the caller may read the app with id or name
// idOrName, as GetApp's rule does: a list filtered by an app refuses an
// app the caller may not read and one that does not exist alike, so a
// scoped caller cannot tell which apps exist (a caller who may read
// everything is told when there is none).
func (s *Service) requireAppRead(ctx context.Context, idOrName string) error {
	return checkApp(ctx, s.store, callerFrom(ctx), rule{perm: access.Read, verb: "list the installs of"}, idOrName)
}

// view says which installs the caller may read: every one, or those in
// ids (by id) — what every list and the fleet view answer.
type view struct {
	all bool
	ids map[string]bool
}

// visible reports whether the install with id installID may be seen.
func (v view) visible(installID string) bool { return v.all || v.ids[installID] }

// maxQueryIDs is the most install ids a list puts into its store query
// (restrict); a caller who may see more (a broad selector grant over a
// large fleet) has its lists filtered after the page is read, so its
// pages may come back short, though every page token still leads on.
const maxQueryIDs = 5000

// restrict narrows selected (install ids a request's selector picked;
// nil: no selector) to the installs v shows, for a store query: nil
// when neither narrows (or v holds too many ids to put in a query), else
// the ids (empty: none).
func (v view) restrict(selected []string) []string {
	if v.all || len(v.ids) > maxQueryIDs {
		return selected
	}
	out := []string{}
	if selected == nil {
		for id := range v.ids {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	for _, id := range selected {
		if v.ids[id] {
			out = append(out, id)
		}
	}
	return out
}

// readView returns the installs the caller may read.
func (s *Service) readView(ctx context.Context) (view, error) {
	p := callerFrom(ctx)
	if p.Everywhere(access.Read) {
		return view{all: true}, nil
	}
	v := view{ids: map[string]bool{}}
	if !p.Anywhere(access.Read) {
		return v, nil
	}
	apps, err := s.store.ListApps(ctx)
	if err != nil {
		return v, err
	}
	names := make(map[string]string, len(apps))
	for _, a := range apps {
		names[a.ID] = a.Name
	}
	ins, err := s.store.ListInstalls(ctx, "")
	if err != nil {
		return v, err
	}
	for _, in := range ins {
		if _, ok := p.Can(access.Read, targetOf(in, names[in.AppID])); ok {
			v.ids[in.ID] = true
		}
	}
	return v, nil
}

// visibleApps returns the apps the caller may see: those a grant covers,
// and those with an install it may see.
func (s *Service) visibleApps(ctx context.Context, apps []store.App) ([]store.App, error) {
	p := callerFrom(ctx)
	if p.Everywhere(access.Read) {
		return apps, nil
	}
	v, err := s.readView(ctx)
	if err != nil {
		return nil, err
	}
	ins, err := s.store.ListInstalls(ctx, "")
	if err != nil {
		return nil, err
	}
	has := map[string]bool{}
	for _, in := range ins {
		if v.visible(in.ID) {
			has[in.AppID] = true
		}
	}
	var out []store.App
	for _, a := range apps {
		if _, ok := p.Can(access.Read, access.Target{App: a.Name}); ok || has[a.ID] {
			out = append(out, a)
		}
	}
	return out, nil
}
