package permissions

import (
	"fmt"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/byoc-dev/byoc/internal/window"
)

// UpdatePolicy is the customer's policy for updates of the agent itself
// (agentd update policy), kept in permissions.json and so signed like
// the permission modes: imsd cannot change it, and the agent alone
// enforces it (agentd update apply).
type UpdatePolicy struct {
	// Pin, when set, is the only version the agent may run.
	Pin string `json:"pin,omitempty"`
	// Allow, when set, is the range of versions the agent may update to
	// (Masterminds/semver constraints, such as ">=1.4 <2").
	Allow string `json:"allow,omitempty"`
	// Window, when set, is when an update may be applied
	// (internal/window's syntax, such as "Sun 03:00-05:00 UTC").
	Window string `json:"window,omitempty"`
}

// Manual reports whether the policy is manual: no pin and no range, so
// the agent takes no update but one its admin applies by hand.
func (p UpdatePolicy) Manual() bool { return p.Pin == "" && p.Allow == "" }

// String is the policy as agentd update policy shows it.
func (p UpdatePolicy) String() string {
	var s string
	switch {
	case p.Pin != "":
		s = "pinned to " + p.Pin
	case p.Allow != "":
		s = "versions " + p.Allow
	default:
		s = "manual"
	}
	if p.Window != "" {
		s += ", in the window " + p.Window
	}
	return s
}

// ParseVersion reads a release's version (1.4.2 or v1.4.2).
func ParseVersion(v string) (*semver.Version, error) {
	sv, err := semver.StrictNewVersion(strings.TrimPrefix(v, "v"))
	if err != nil {
		return nil, fmt.Errorf("version %q: want a semantic version such as 1.4.2: %w", v, err)
	}
	return sv, nil
}

// NormalizeWindow reads an update window: DAYS HH:MM-HH:MM [ZONE], UTC
// when the zone is left out.
func NormalizeWindow(text string) (string, error) {
	if len(strings.Fields(text)) == 2 {
		text += " UTC"
	}
	w, err := window.Parse(text)
	if err != nil {
		return "", err
	}
	return w.String(), nil
}

// Check checks the policy's parts.
func (p UpdatePolicy) Check() error {
	if p.Pin != "" && p.Allow != "" {
		return fmt.Errorf("a policy has a pin or a range of versions, not both")
	}
	if p.Pin != "" {
		if _, err := ParseVersion(p.Pin); err != nil {
			return fmt.Errorf("--pin: %w", err)
		}
	}
	if p.Allow != "" {
		if _, err := semver.NewConstraint(p.Allow); err != nil {
			return fmt.Errorf("--allow %q: %w (want constraints such as \">=1.4 <2\")", p.Allow, err)
		}
	}
	if p.Window != "" {
		if _, err := window.Parse(p.Window); err != nil {
			return fmt.Errorf("--window: %w", err)
		}
	}
	return nil
}

// Refusal says why the policy forbids updating to version at now, or ""
// when it allows it. byHand is an update the customer's admin applies
// (agentd update apply): a manual policy allows any version then.
func (p UpdatePolicy) Refusal(version string, now time.Time, byHand bool) string {
	if err := p.Check(); err != nil {
		return "refused: the update policy is unreadable: " + err.Error()
	}
	v, err := ParseVersion(version)
	if err != nil {
		return "refused: " + err.Error()
	}
	switch {
	case p.Pin != "":
		pin, _ := ParseVersion(p.Pin)
		if !v.Equal(pin) {
			return fmt.Sprintf("refused: the update policy pins version %s; %s is not it (agentd update policy --pin)", p.Pin, version)
		}
	case p.Allow != "":
		c, _ := semver.NewConstraint(p.Allow)
		if !c.Check(v) {
			return fmt.Sprintf("refused: the update policy allows versions %s; %s is not one (agentd update policy --allow)", p.Allow, version)
		}
	case !byHand:
		return "refused: the update policy is manual: only agentd update apply, run by the customer, updates this agent"
	}
	if p.Window != "" {
		w, _ := window.Parse(p.Window)
		s, _ := window.ParseSchedule([]string{w.String()})
		if !s.Contains(now) {
			return fmt.Sprintf("refused: the update window %s is closed; it next opens %s", p.Window, s.NextOpening(now).UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// WindowShut reports whether the policy's window is shut at now, and
// when it next opens (zero: never, or no window).
func (p UpdatePolicy) WindowShut(now time.Time) (bool, time.Time) {
	if p.Window == "" {
		return false, time.Time{}
	}
	w, err := window.Parse(p.Window)
	if err != nil {
		return false, time.Time{}
	}
	s, err := window.ParseSchedule([]string{w.String()})
	if err != nil || s.Contains(now) {
		return false, time.Time{}
	}
	return true, s.NextOpening(now)
}
