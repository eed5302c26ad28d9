package cli

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// telemetryCommand reads the app telemetry an install's agent forwarded
// under its customer's telemetry setting.
func (a *app) telemetryCommand() *cobra.Command {
	metrics := &cobra.Command{
		Use:   "metrics INSTALL",
		Short: "Show the newest sample of each metric series an install's agent forwarded",
		Long: `Show the app metrics INSTALL's agent forwarded (telemetry.toml's metrics
sources), as the imsd the agent is connected to holds them: the newest
sample of each series, in the Prometheus text format (without types),
each with its source label. The customer decides what is forwarded
(agentd telemetry set): nothing unless they turned it on, without the
labels they remove. Needs read access to the install.`,
		Example: `  byoc telemetry metrics acme`,
		Args:    exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			res, err := c.GetTelemetry(cmd.Context(), connect.NewRequest(&imsv1.GetTelemetryRequest{Install: args[0]}))
			if err != nil {
				return c.wrap(err)
			}
			if a.jsonOutput() {
				return writeJSON(a.stdout, res.Msg)
			}
			m := res.Msg
			fmt.Fprintf(a.stdout, "# telemetry of %s: %s", args[0], termtext.Clean(m.GetSetting(), " "))
			if t := m.GetReceivedTime(); t != nil {
				fmt.Fprintf(a.stdout, "; last batch %s", t.AsTime().UTC().Format(time.RFC3339))
			}
			if m.GetDroppedSamples() > 0 {
				fmt.Fprintf(a.stdout, "; %d samples dropped at the bounds", m.GetDroppedSamples())
			}
			fmt.Fprintln(a.stdout)
			for _, s := range m.GetSamples() {
				fmt.Fprintf(a.stdout, "%s %s %d\n", promSeries(s.GetName(), s.GetSource(), s.GetLabels()),
					strconv.FormatFloat(s.GetValue(), 'g', -1, 64), s.GetTime().AsTime().UnixMilli())
			}
			return nil
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs INSTALL",
		Short: "Show the app log lines an install's agent forwarded",
		Long: `Show the app log lines INSTALL's agent forwarded (telemetry.toml's log
sources), the newest the imsd the agent is connected to holds, oldest
first. Lines are forwarded only when the customer set metrics,logs
(agentd telemetry set), with the fields they redact masked. With -f,
keep printing new lines until interrupted. Needs read access to the
install.`,
		Example: `  byoc telemetry logs acme -f`,
		Args:    exactArgs("INSTALL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// On a terminal, the text is cleaned of control sequences, as
			// a job's log is: a forwarded line is whatever the customer's
			// app logged, maybe an end user's input.
			clean := a.terminal(a.stdout)
			var after uint64
			for {
				res, err := c.GetTelemetry(ctx, connect.NewRequest(&imsv1.GetTelemetryRequest{Install: args[0], LogsAfter: after}))
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return c.wrap(err)
				}
				for _, l := range res.Msg.GetLines() {
					if a.jsonOutput() {
						if err := writeJSON(a.stdout, l); err != nil {
							return err
						}
					} else {
						text := l.GetText()
						if clean {
							text = termtext.Clean(text, "\t")
						}
						fmt.Fprintf(a.stdout, "%s %s %s\n", l.GetTime().AsTime().UTC().Format(time.RFC3339), termtext.Clean(l.GetSource(), " "), text)
					}
					after = l.GetSeq()
				}
				if !follow {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	return group("telemetry", "Read the app telemetry (metrics, logs) installs' customers let their agents forward", metrics, logs)
}

// promName matches the metric and label names the Prometheus text format
// writes bare; any other (a UTF-8 name) is quoted.
var promName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// promQuote quotes a name or value, escaping quotes, backslashes, newlines
// and every other control character: nothing the agent forwarded can end
// the series' line or start another.
func promQuote(s string) string { return strconv.Quote(s) }

// promSeries writes a series as the Prometheus text format does: name,
// then labels; a name that is not a legacy one goes quoted inside the
// braces, as Prometheus 3 writes UTF-8 names.
func promSeries(name, source string, labels map[string]string) string {
	ls := promLabels(source, labels)
	if promName.MatchString(name) {
		return name + ls
	}
	return "{" + promQuote(name) + "," + ls[1:]
}

// promLabels writes labels as the Prometheus text format does, with the
// source as a label of its own (source, or telemetry_source when the
// metric has a source label), sorted.
func promLabels(source string, labels map[string]string) string {
	all := maps.Clone(labels)
	if all == nil {
		all = map[string]string{}
	}
	key := "source"
	if _, ok := all[key]; ok {
		key = "telemetry_source"
	}
	all[key] = source
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		name := k
		if !promName.MatchString(k) {
			name = promQuote(k)
		}
		parts = append(parts, name+"="+promQuote(all[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
