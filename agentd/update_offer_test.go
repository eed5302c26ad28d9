package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The update report carries the policy and the latest decision; an offer
// that cannot be applied is recorded as refused with its offer id (so
// that imsd stops offering it), and journalled at once: failed, with its
// cause, since no policy refused it.
func TestUpdateReportAndOffer(t *testing.T) {
	state := t.TempDir()
	if r := updateReport(state); r.Mode != "manual" || r.Last != nil {
		t.Fatalf("fresh: %v", r)
	}
	var out bytes.Buffer
	if code := updateCmd(t.Context(), []string{"--state-dir", state, "policy", "--allow", ">=1.4 <2", "--window", "Sun 03:00-05:00"}, &out, &out, time.Now); code != 0 {
		t.Fatalf("policy: %s", out.String())
	}
	var noted []string
	note := func(kind, subject string, data map[string]string) { noted = append(noted, kind+" "+data["offer"]) }
	applyOffer(t.Context(), state, "uo_1", "oci://r.example/byoc/agent@sha256:"+strings.Repeat("0", 64), note, slog.New(slog.DiscardHandler))
	r := updateReport(state)
	if r.Mode != "allow" || r.Allow != ">=1.4 <2" || r.Window != "Sun 03:00-05:00 UTC" {
		t.Fatalf("policy report: %v", r)
	}
	if l := r.Last; l == nil || l.Kind != "failed" || l.Cause != "error" || l.OfferId != "uo_1" || !strings.Contains(l.Reason, "identity") {
		t.Fatalf("last: %v", r.Last)
	}
	if strings.Join(noted, ",") != "agent_update_failed uo_1" {
		t.Fatalf("journalled: %v", noted)
	}
	if ns, _ := takeUpdateNotes(state); len(ns) != 0 {
		t.Fatalf("notes left for the next start: %v", ns)
	}
}
