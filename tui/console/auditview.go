package console

import tea "charm.land/bubbletea/v2"

// auditView is the audit log's place in the console. imsd has no audit
// events yet (they arrive with the trust-contract issue), so it says so.
// It needs nothing but the five methods of a view.
type auditView struct{}

func newAuditView(*env) *auditView { return &auditView{} }

func (v *auditView) Init() tea.Cmd             { return nil }
func (v *auditView) Update(tea.Msg) tea.Cmd    { return nil }
func (v *auditView) SetSize(width, height int) {}
func (v *auditView) Title() string             { return "audit" }
func (v *auditView) View() string {
	return lines([]string{"", "  No audit events yet.", "",
		"  imsd does not record audit events yet: the hash-chained audit log",
		"  arrives with the trust-contract issue, and will be shown here.",
		"", "  :installs goes back to the fleet."})
}
