package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
)

const telemetryUsage = `usage: agentd telemetry --state-dir DIR show
       agentd telemetry --state-dir DIR set off|metrics|metrics,logs [--redact-label NAME]... [--redact-field NAME]... [--drop-metric REGEX]... [--no-rules]

The customer's telemetry setting, kept in permissions.json (signed like
the permission modes; imsd cannot change it). It decides what of the
telemetry the vendor's app declares (telemetry.toml: metrics endpoints the
agent scrapes, log files it reads) the agent forwards to imsd:

  off            nothing (the default): no endpoint is scraped, no file read
  metrics        metric samples only
  metrics,logs   metric samples and log lines

Rules apply on the agent, before anything leaves: --redact-label removes
a metric label from every sample, --redact-field masks a log field's
value ([redacted]; a JSON line's key at any depth, or NAME=VALUE), and
--drop-metric never forwards the metrics whose names match (RE2, the
whole name). Each flag given replaces the rules of its kind; --no-rules
removes all. The running agent records every change in its journal
(telemetry.changed) and reports it to imsd, whose audit chain records it.
See docs/customer/telemetry.md.

flags:
`

// telemetryCmd runs "agentd telemetry ...".
func telemetryCmd(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("agentd telemetry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), telemetryUsage); fs.PrintDefaults() }
	stateDir := fs.String("state-dir", os.Getenv("BYOC_STATE_DIR"), "the agent's state `directory`; also $BYOC_STATE_DIR")
	var labels, fields, drops keyFiles
	fs.Var(&labels, "redact-label", "a metric label `NAME` removed from every sample; repeatable")
	fs.Var(&fields, "redact-field", "a log field `NAME` whose value is masked; repeatable")
	fs.Var(&drops, "drop-metric", "a `REGEX` of metric names never forwarded; repeatable")
	noRules := fs.Bool("no-rules", false, "remove every redaction and drop rule")
	words, code := parseWords(fs, args, stdout)
	if words == nil {
		return code
	}
	dir, code := stateDirArg("agentd telemetry", *stateDir, stderr)
	if code != 0 {
		return code
	}
	rules := len(labels) > 0 || len(fields) > 0 || len(drops) > 0 || *noRules
	var st permissions.State
	var err error
	switch {
	case words[0] == "show" && len(words) == 1 && !rules:
		if st, err = permissions.Load(dir); err != nil {
			fmt.Fprintf(stderr, "agentd telemetry show: %v\n", err)
			return 1
		}
	case words[0] == "set" && len(words) == 2:
		mode, err := permissions.ParseTelemetryMode(words[1])
		if err != nil {
			fmt.Fprintf(stderr, "agentd telemetry set: %v\n", err)
			return 2
		}
		cur, err := permissions.Load(dir)
		if err != nil {
			fmt.Fprintf(stderr, "agentd telemetry set: %v\n", err)
			return 1
		}
		t := cur.Telemetry
		t.Mode = mode
		if *noRules {
			t.RedactLabels, t.RedactFields, t.DropMetrics = nil, nil, nil
		}
		if len(labels) > 0 {
			t.RedactLabels = labels
		}
		if len(fields) > 0 {
			t.RedactFields = fields
		}
		if len(drops) > 0 {
			t.DropMetrics = drops
		}
		if err := t.Check(); err != nil {
			fmt.Fprintf(stderr, "agentd telemetry set: --%v\n", err)
			return 2
		}
		if st, err = permissions.Update(dir, now(), whoami(), func(s *permissions.State) { s.Telemetry = t }); err != nil {
			fmt.Fprintf(stderr, "agentd telemetry set: %v\n", err)
			return 1
		}
	default:
		fmt.Fprintf(stderr, "agentd telemetry: unknown command %q; want show, or set off|metrics|metrics,logs [rules]\n", strings.Join(words, " "))
		return 2
	}
	t := st.Telemetry
	fmt.Fprintf(stdout, "Telemetry of the agent in %s: %s\n", dir, t.ModeName())
	fmt.Fprintf(stdout, "  metric labels removed: %s\n", orNone(t.RedactLabels))
	fmt.Fprintf(stdout, "  log fields redacted:   %s\n", orNone(t.RedactFields))
	fmt.Fprintf(stdout, "  metrics dropped:       %s\n", orNone(t.DropMetrics))
	return 0
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}
