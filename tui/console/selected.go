package console

import (
	"fmt"
)

// Selected is the install under the cursor.
func (v *fleetView) Selected() selection {
	if s := v.current(); s != nil {
		return selection{s, "install", s.Install.Name, s.Install.Id}
	}
	return selection{}
}

// Selected is the job under the cursor.
func (v *jobsView) Selected() selection {
	if j := v.current(); j != nil {
		return selection{j, "job", j.Id, j.Id}
	}
	return selection{}
}

// Selected is the job under the cursor, or the install when it has none.
func (v *installView) Selected() selection {
	if j := v.current(); j != nil {
		return selection{j, "job", j.Id, j.Id}
	}
	if s := v.fleet.byID[v.id]; s != nil {
		return selection{s, "install", s.Install.Name, s.Install.Id}
	}
	return selection{}
}

// Selected is the audit event under the cursor; its id is chain/seq.
func (v *auditView) Selected() selection {
	if v.pos >= 0 && v.pos < len(v.shown) {
		ev := v.shown[v.pos]
		return selection{ev, "audit event", v.chainName(ev.Chain) + fmt.Sprintf(" #%d", ev.Seq), auditID(ev.Chain, ev.Seq)}
	}
	return selection{}
}

// Selected is the record shown.
func (v *auditDetailView) Selected() selection {
	return selection{v.ev, "audit event", auditID(v.ev.Chain, v.ev.Seq), auditID(v.ev.Chain, v.ev.Seq)}
}

func auditID(chain string, seq int64) string {
	if chain == "" {
		chain = "vendor"
	}
	return fmt.Sprintf("%s/%d", chain, seq)
}

// Selected is the action under the cursor (none on the ad-hoc script row).
func (v *actionsView) Selected() selection {
	if v.pos >= 0 && v.pos < len(v.actions) {
		a := v.actions[v.pos]
		return selection{a, "action", a.Name, a.Name}
	}
	return selection{}
}

// Selected is the log's job.
func (v *logView) Selected() selection { return selection{v.job, "job", v.job.Id, v.job.Id} }
