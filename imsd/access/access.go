// Package access says what an operator may do to which install: the four
// roles, what each allows, and grants of a role on everything, on one
// app, on one install or on the installs a label selector picks. A
// principal (a named token or a signed-in person) holds one or more
// grants; a call is allowed when one grant's role allows the call's
// permission and the grant's scope covers the call's target.
package access

import (
	"fmt"

	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/labels"
)

// Role is a set of permissions.
type Role string

// The roles, from least to most.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
	Support  Role = "support"
	Admin    Role = "admin"
)

// Roles lists every role, least first.
var Roles = []Role{Viewer, Operator, Support, Admin}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(Roles, r) {
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q: use viewer, operator, support or admin", s)
}

// Perm is one kind of thing a call does.
type Perm string

// The permissions.
const (
	// Read sees installs, jobs, logs, workflows, audit and so on.
	Read Perm = "read"
	// Deploy changes an install: workflows, jobs, inputs, approvals,
	// cancellations, enrolment tokens, live plans, any action.
	Deploy Perm = "deploy"
	// Debug runs an install's debug actions: those whose mode is
	// break_glass.
	Debug Perm = "debug"
	// BreakGlass asks an install's customer for a break-glass grant.
	BreakGlass Perm = "break-glass"
	// Manage is everything vendor-wide: API tokens, plugin types, builds,
	// the build agent, new apps.
	Manage Perm = "manage"
)

// Perms lists every permission.
var Perms = []Perm{Read, Deploy, Debug, BreakGlass, Manage}

var allows = map[Role][]Perm{
	Viewer:   {Read},
	Operator: {Read, Deploy, Debug},
	Support:  {Read, Debug, BreakGlass},
	Admin:    {Read, Deploy, Debug, BreakGlass, Manage},
}

// Allows reports whether r allows p.
func (r Role) Allows(p Perm) bool { return slices.Contains(allows[r], p) }

// RolesAllowing lists the roles that allow p, least first.
func RolesAllowing(p Perm) []Role {
	var out []Role
	for _, r := range Roles {
		if r.Allows(p) {
			out = append(out, r)
		}
	}
	return out
}

// ScopeKind is what a grant covers.
type ScopeKind string

// The scope kinds.
const (
	All      ScopeKind = ""
	Install  ScopeKind = "install"
	App      ScopeKind = "app"
	Selector ScopeKind = "selector"
)

// Matcher matches a label set; a parsed label selector.
type Matcher interface {
	Matches(labels map[string]string) bool
	String() string
}

// ParseSelector parses a label selector, kubectl's syntax (env=prod,
// tier!=free, region in (eu,us), customer).
func ParseSelector(s string) (Matcher, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, fmt.Errorf("is empty: it would match every install; grant on everything instead")
	}
	return sel, nil
}

// Scope is what a grant covers: everything, one install or app by name,
// or the installs whose labels a selector matches.
type Scope struct {
	Kind  ScopeKind
	Value string
	sel   Matcher
}

// NewScope returns a checked scope.
func NewScope(kind ScopeKind, value string) (Scope, error) {
	switch kind {
	case All:
		if value != "" {
			return Scope{}, fmt.Errorf("scope: everything takes no value, got %q", value)
		}
		return Scope{}, nil
	case Install, App:
		if value == "" {
			return Scope{}, fmt.Errorf("scope: %s needs a name", kind)
		}
		return Scope{Kind: kind, Value: value}, nil
	case Selector:
		m, err := ParseSelector(value)
		if err != nil {
			return Scope{}, fmt.Errorf("scope: selector %q: %w", value, err)
		}
		return Scope{Kind: kind, Value: m.String(), sel: m}, nil
	}
	return Scope{}, fmt.Errorf("scope: unknown kind %q: use install, app or selector", kind)
}

// ParseScope parses the form String prints: "" or "*" (everything),
// install:NAME, app:NAME or selector:SELECTOR.
func ParseScope(s string) (Scope, error) {
	if s == "" || s == "*" {
		return Scope{}, nil
	}
	k, v, ok := strings.Cut(s, ":")
	if !ok {
		return Scope{}, fmt.Errorf("scope %q: want install:NAME, app:NAME or selector:SELECTOR", s)
	}
	return NewScope(ScopeKind(k), v)
}

// String is the stored form: "" for everything, else KIND:VALUE.
func (s Scope) String() string {
	if s.Kind == All {
		return ""
	}
	return string(s.Kind) + ":" + s.Value
}

// Describe says what the scope covers, for people.
func (s Scope) Describe() string {
	switch s.Kind {
	case All:
		return "every install"
	case Selector:
		return "installs with labels " + s.Value
	}
	return string(s.Kind) + " " + s.Value
}

// Target is what a call acts on: an install (with its app and labels), an
// app (Install empty), or nothing in particular (both empty: vendor-wide).
type Target struct {
	Install string
	App     string
	Labels  map[string]string
	// Vendor marks the vendor's build install (_vendor), which no label
	// selector covers: it has no labels, which a negative selector
	// (tier!=gold) would match, and it runs the vendor's builds.
	Vendor bool
}

// Describe names the target for people.
func (t Target) Describe() string {
	switch {
	case t.Install != "":
		return "install " + t.Install
	case t.App != "":
		return "app " + t.App
	}
	return "the whole vendor (every app and install)"
}

// Covers reports whether the scope covers t. Only an everything scope
// covers a vendor-wide target; an app scope covers the app and its
// installs; install and selector scopes cover installs only.
func (s Scope) Covers(t Target) bool {
	switch s.Kind {
	case All:
		return true
	case App:
		return t.App == s.Value
	case Install:
		return t.Install != "" && t.Install == s.Value
	case Selector:
		return t.Install != "" && !t.Vendor && s.sel != nil && s.sel.Matches(t.Labels)
	}
	return false
}

// Grant is a role on a scope, with where it came from (a token, or an
// identity provider group through imsd's config).
type Grant struct {
	Role   Role
	Scope  Scope
	Source string
}

// String is "ROLE on SCOPE (SOURCE)".
func (g Grant) String() string {
	s := string(g.Role) + " on " + g.Scope.Describe()
	if g.Source != "" {
		s += " (" + g.Source + ")"
	}
	return s
}

// Principal is who makes a call.
type Principal struct {
	// Kind is "token" or "user".
	Kind string
	// ID is the token's id or the user's subject at the identity provider.
	ID string
	// Name is the token's name or the user's email (else preferred name).
	Name string
	// Grants are what the principal may do.
	Grants []Grant
	// Expires is when the credential stops working (zero: never).
	Expires time.Time
}

// Actor is how audit events name the principal: token:NAME or user:NAME.
func (p Principal) Actor() string { return p.Kind + ":" + p.Name }

// Can returns the first grant allowing perm on t.
func (p Principal) Can(perm Perm, t Target) (Grant, bool) {
	for _, g := range p.Grants {
		if g.Role.Allows(perm) && g.Scope.Covers(t) {
			return g, true
		}
	}
	return Grant{}, false
}

// Everywhere reports whether the principal may do perm on everything.
func (p Principal) Everywhere(perm Perm) bool {
	_, ok := p.Can(perm, Target{})
	return ok
}

// Anywhere reports whether some grant allows perm somewhere.
func (p Principal) Anywhere(perm Perm) bool {
	for _, g := range p.Grants {
		if g.Role.Allows(perm) {
			return true
		}
	}
	return false
}

// Refusal explains why the principal may not do what (a verb phrase
// that takes the target as its object, such as "start workflows on") on
// t: who it is, the roles it holds and where, and the roles it needs.
func (p Principal) Refusal(what string, perm Perm, t Target) string {
	var held []string
	for _, g := range p.Grants {
		held = append(held, string(g.Role)+" on "+g.Scope.Describe())
	}
	h := "no role"
	if len(held) > 0 {
		h = "role " + strings.Join(held, ", ")
	}
	var need []string
	for _, r := range RolesAllowing(perm) {
		need = append(need, string(r))
	}
	msg := fmt.Sprintf("permission denied: %s %s holds %s, so may not %s", p.Kind, p.Name, h, what)
	where := "every install"
	if t.Install != "" || t.App != "" {
		msg += " " + t.Describe()
		where = t.Describe()
	}
	return msg + fmt.Sprintf(": that needs the %s permission, which role %s has, granted on %s", perm, strings.Join(need, " or "), where)
}
