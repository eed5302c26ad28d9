package console

import (
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Access says where the caller's grants (WhoAmI's) allow each of the
// console's dangerous actions, so the console shows and binds the keys
// of the actions the caller may take on the row under the cursor only.
// imsd decides: this only hides keys that would be refused.
type Access struct {
	grants []accessGrant
}

type accessGrant struct {
	role imsv1.Role
	// kind is "" (everything), "install", "app" or "selector".
	kind, value string
	sel         labels.Selector
}

// actionRoles are the roles that allow each dangerous action
// (docs/operator/operators-and-roles.md): run an action (support: its
// break-glass actions only), cancel a job, request break-glass on an
// install, open a support shell there (SupportShell's rule: the
// break-glass permission on the install); releases need deploy on
// everything.
var actionRoles = map[Action][]imsv1.Role{
	ActRunAction:     {imsv1.Role_ROLE_OPERATOR, imsv1.Role_ROLE_SUPPORT, imsv1.Role_ROLE_ADMIN},
	ActCancelJob:     {imsv1.Role_ROLE_OPERATOR, imsv1.Role_ROLE_ADMIN},
	ActBreakGlass:    {imsv1.Role_ROLE_SUPPORT, imsv1.Role_ROLE_ADMIN},
	ActSupportShell:  {imsv1.Role_ROLE_SUPPORT, imsv1.Role_ROLE_ADMIN},
	ActPauseRelease:  {imsv1.Role_ROLE_OPERATOR, imsv1.Role_ROLE_ADMIN},
	ActResumeRelease: {imsv1.Role_ROLE_OPERATOR, imsv1.Role_ROLE_ADMIN},
	ActCancelRelease: {imsv1.Role_ROLE_OPERATOR, imsv1.Role_ROLE_ADMIN},
}

// fleetWide are the actions on the whole fleet (a release): only a
// grant on everything covers them.
var fleetWide = map[Action]bool{ActPauseRelease: true, ActResumeRelease: true, ActCancelRelease: true}

// NewAccess returns the access of grants. A grant whose scope it cannot
// read covers nothing (imsd still decides every call).
func NewAccess(grants []*imsv1.RoleGrant) *Access {
	a := &Access{}
	for _, g := range grants {
		ag := accessGrant{role: g.GetRole()}
		if s := g.GetScope(); s != "" && s != "*" {
			k, v, ok := strings.Cut(s, ":")
			if !ok {
				continue
			}
			ag.kind, ag.value = k, v
			if k == "selector" {
				sel, err := labels.Parse(v)
				if err != nil || sel.Empty() {
					continue
				}
				ag.sel = sel
			}
		}
		a.grants = append(a.grants, ag)
	}
	return a
}

// Allows reports whether some grant allows act on install (nil: on
// some install, when no row names one).
func (a *Access) Allows(act Action, install *imsv1.InstallStatus) bool {
	roles, ok := actionRoles[act]
	if !ok {
		return true
	}
	for _, g := range a.grants {
		if !slices.Contains(roles, g.role) {
			continue
		}
		if g.kind == "" {
			return true
		}
		if fleetWide[act] {
			continue
		}
		if install == nil || g.covers(install) {
			return true
		}
	}
	return false
}

func (g accessGrant) covers(s *imsv1.InstallStatus) bool {
	switch g.kind {
	case "install":
		return s.GetInstall().GetName() == g.value || s.GetInstall().GetId() == g.value
	case "app":
		return s.GetAppName() == g.value
	case "selector":
		return g.sel.Matches(s.GetInstall().GetLabels())
	}
	return false
}
