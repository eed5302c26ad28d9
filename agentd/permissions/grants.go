package permissions

import (
	"fmt"
	"path/filepath"
	"time"
)

// GrantsFileName is the file of the break-glass grants the customer
// approved, inside the agent's state dir. Only agentd breakglass writes
// it; the agent lets break_glass jobs run only while one of them is live,
// by its own clock, so nothing imsd sends can make or extend a grant.
const GrantsFileName = "breakglass.json"

// MaxGrant is the longest a grant may last, checked on the customer's
// side whatever duration the vendor's server says a request asks for.
const MaxGrant = 24 * time.Hour

// Grant is a break-glass grant the customer approved on this agent.
type Grant struct {
	ID          string    `json:"id"`
	Role        string    `json:"role"`
	Reason      string    `json:"reason,omitempty"`
	RequestedBy string    `json:"requested_by"`
	ApprovedBy  string    `json:"approved_by"`
	ApprovedAt  time.Time `json:"approved_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// AllowSessions lets the grant's holder open interactive support
	// sessions (byoc support shell; agentd breakglass approve
	// --allow-sessions). Off by default.
	AllowSessions bool `json:"allow_sessions,omitempty"`
	// RevokedAt is set when the customer revoked the grant early.
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	RevokedBy    string    `json:"revoked_by,omitempty"`
	RevokeReason string    `json:"revoke_reason,omitempty"`
}

// LiveAt reports whether the grant allows break_glass jobs at now.
func (g Grant) LiveAt(now time.Time) bool {
	return g.RevokedAt.IsZero() && now.Before(g.ExpiresAt)
}

// Grants is the grants file's content.
type Grants struct {
	Grants []Grant `json:"grants"`
}

// Live returns the live grant that ends last at now, if any.
func (gs Grants) Live(now time.Time) (Grant, bool) {
	var best Grant
	ok := false
	for _, g := range gs.Grants {
		if g.LiveAt(now) && (!ok || g.ExpiresAt.After(best.ExpiresAt)) {
			best, ok = g, true
		}
	}
	return best, ok
}

// Find returns the grant with id id.
func (gs Grants) Find(id string) (*Grant, bool) {
	for i := range gs.Grants {
		if gs.Grants[i].ID == id {
			return &gs.Grants[i], true
		}
	}
	return nil, false
}

// Ended says why grant id no longer allows what was started under it
// ("" while it is live at now): gone from the file, revoked, or expired.
// A break_glass job or support session runs under one grant, the one
// live at its start, and ends with that grant, whatever other grants are
// live.
func (gs Grants) Ended(id string, now time.Time) string {
	g, ok := gs.Find(id)
	switch {
	case !ok:
		return "break-glass grant " + id + " is gone"
	case !g.RevokedAt.IsZero():
		return fmt.Sprintf("break-glass grant %s was revoked by %s", g.ID, g.RevokedBy)
	case !g.LiveAt(now):
		return fmt.Sprintf("break-glass grant %s expired at %s", g.ID, g.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return ""
}

// GrantsPath is the grants file of state dir dir.
func GrantsPath(dir string) string { return filepath.Join(dir, GrantsFileName) }

// LoadGrants reads the grants of state dir dir as the customer's
// commands do (see Load): none when the file does not exist and none was
// ever accepted. A file that cannot be read or is refused is an error.
func LoadGrants(dir string) (Grants, error) {
	gs, _, err := loadDir(dir, GrantsFileName, Grants{})
	return gs, err
}

// LoadGrantsWith is LoadWith for the grants file.
func LoadGrantsWith(dir string, k Key, accepted uint64) (Grants, uint64, error) {
	return loadSigned(k, GrantsPath(dir), accepted, Grants{})
}

var grantsFile = controlFile[Grants]{name: GrantsFileName, lock: ".breakglass.lock", def: func() Grants { return Grants{} }}

// UpdateGrants changes the grants of state dir dir with change, under a
// lock, and writes them signed, as the next generation, atomically
// (0600). A change that returns an error writes nothing.
func UpdateGrants(dir string, change func(*Grants) error) (Grants, error) {
	return grantsFile.update(dir, change)
}

// GrantsStampOf stats the grants file of state dir dir.
func GrantsStampOf(dir string) (Stamp, error) { return stampOf(GrantsPath(dir)) }

// RefusalAt is Refusal for a break_glass job, which also needs a live
// grant in grants at now; other modes are as Refusal says.
func (s State) RefusalAt(m string, grants Grants, now time.Time) string {
	why := s.Refusal(m)
	if why != "" || !isBreakGlass(m) {
		return why
	}
	if _, ok := grants.Live(now); ok {
		return ""
	}
	why = "refused: break_glass jobs need a live break-glass grant approved by the customer (agentd breakglass approve)"
	var last *Grant
	for i, g := range grants.Grants {
		if last == nil || g.ApprovedAt.After(last.ApprovedAt) {
			last = &grants.Grants[i]
		}
	}
	switch {
	case last == nil:
		return why + ", and this install has none"
	case !last.RevokedAt.IsZero():
		return fmt.Sprintf("%s: grant %s was revoked by %s at %s", why, last.ID, last.RevokedBy, last.RevokedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: grant %s expired at %s", why, last.ID, last.ExpiresAt.UTC().Format(time.RFC3339))
}

func isBreakGlass(m string) bool {
	mode, err := ParseMode(m)
	return err == nil && mode == BreakGlass
}

// LiveSessions returns the live grant that allows support sessions and
// ends last at now, if any.
func (gs Grants) LiveSessions(now time.Time) (Grant, bool) {
	var best Grant
	ok := false
	for _, g := range gs.Grants {
		if g.AllowSessions && g.LiveAt(now) && (!ok || g.ExpiresAt.After(best.ExpiresAt)) {
			best, ok = g, true
		}
	}
	return best, ok
}
