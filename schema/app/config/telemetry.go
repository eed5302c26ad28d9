package config

// Telemetry is telemetry.toml: the app's metrics and logs its vendor
// would like forwarded from each install. The agent forwards them only
// as the customer's telemetry setting on the agent allows (agentd
// telemetry set; off by default), with the customer's redaction rules
// applied before anything leaves. See docs/customer/telemetry.md.
type Telemetry struct {
	Metrics []MetricsSource `toml:"metrics" doc:"Prometheus text-format endpoints in the customer's environment that the agent scrapes."`
	Logs    []LogSource     `toml:"logs" doc:"Log files on the agent's machine whose new lines the agent reads."`
}

// MetricsSource is one metrics endpoint.
type MetricsSource struct {
	Name     string   `toml:"name" required:"true" doc:"The source's name (lowercase letters, digits, _ and -): every sample names it."`
	URL      string   `toml:"url" required:"true" doc:"The endpoint's http:// or https:// URL, as the agent reaches it (not through the agent's proxy), serving the Prometheus text format."`
	Interval Duration `toml:"interval" default:"30s" doc:"How often the agent scrapes it (at least 1s)."`
}

// LogSource is one set of log files.
type LogSource struct {
	Name     string   `toml:"name" required:"true" doc:"The source's name (lowercase letters, digits, _ and -): every line names it."`
	Path     string   `toml:"path" required:"true" doc:"An absolute path on the agent's machine, a glob (such as /var/log/app/*.log) of at most 64 files; the agent reads their new lines."`
	Interval Duration `toml:"interval" default:"10s" doc:"How often the agent reads new lines (at least 1s)."`
}

// The intervals a telemetry source gets when it declares none.
const (
	DefaultMetricsInterval = 30 * 1e9
	DefaultLogsInterval    = 10 * 1e9
)

// Every returns the source's interval, its default when unset.
func (m MetricsSource) Every() Duration {
	if m.Interval == 0 {
		return DefaultMetricsInterval
	}
	return m.Interval
}

// Every returns the source's interval, its default when unset.
func (l LogSource) Every() Duration {
	if l.Interval == 0 {
		return DefaultLogsInterval
	}
	return l.Interval
}
