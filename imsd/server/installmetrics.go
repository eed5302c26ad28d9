package server

import (
	"context"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/byoc-dev/byoc/imsd/store"
)

// installMetrics is a Prometheus collector of one series per install,
// read from the store at each scrape: byoc_install_info (1, with the
// install's name, app and labels as label_KEY, so other series join on
// install), and byoc_install_jobs by state (queued, active) and
// byoc_install_agent_online, labelled by install.
type installMetrics struct {
	store *store.Store
	log   *slog.Logger
	// online reports whether an agent of the install counts as connected.
	online func(store.Agent) bool
}

var (
	installJobsDesc = prometheus.NewDesc("byoc_install_jobs", "An install's jobs by state: queued, or active (assigned or running).",
		[]string{"install", "state"}, nil)
	installOnlineDesc = prometheus.NewDesc("byoc_install_agent_online", "1 when an agent of the install is connected (seen within three heartbeats).",
		[]string{"install"}, nil)
)

// Describe sends nothing: the info series' label names follow the
// installs' labels, so the collector is unchecked.
func (m *installMetrics) Describe(chan<- *prometheus.Desc) {}

var promLabelRE = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// promLabel is the Prometheus label name of an install label key, as
// kube-state-metrics names them: label_ then the key with every other
// character an underscore.
func promLabel(key string) string { return "label_" + promLabelRE.ReplaceAllString(key, "_") }

// Collect implements prometheus.Collector.
func (m *installMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := m.store.Fleet(ctx, "")
	if err != nil {
		m.log.Warn("install metrics: cannot read the fleet", "err", err)
		return
	}
	apps, err := m.store.ListApps(ctx)
	if err != nil {
		m.log.Warn("install metrics: cannot read the apps", "err", err)
		return
	}
	appNames := map[string]string{}
	for _, a := range apps {
		appNames[a.ID] = a.Name
	}
	// Every info series has every label name any install uses (empty
	// where an install lacks it): one metric family, one label set.
	keyOf := map[string]string{}
	for _, in := range fs.Installs {
		for k := range in.Labels {
			keyOf[promLabel(k)] = k
		}
	}
	names := make([]string, 0, len(keyOf))
	for n := range keyOf {
		names = append(names, n)
	}
	slices.Sort(names)
	info := prometheus.NewDesc("byoc_install_info", "An install: 1, with its app and its labels (label_KEY).",
		append([]string{"install", "app"}, names...), nil)
	for _, in := range fs.Installs {
		vals := []string{in.Name, appNames[in.AppID]}
		for _, n := range names {
			vals = append(vals, in.Labels[keyOf[n]])
		}
		ch <- prometheus.MustNewConstMetric(info, prometheus.GaugeValue, 1, vals...)
		ch <- prometheus.MustNewConstMetric(installJobsDesc, prometheus.GaugeValue, float64(fs.Queued[in.ID]), in.Name, "queued")
		ch <- prometheus.MustNewConstMetric(installJobsDesc, prometheus.GaugeValue, float64(fs.Active[in.ID]), in.Name, "active")
		online := 0.0
		if slices.ContainsFunc(fs.Agents[in.ID], m.online) {
			online = 1
		}
		ch <- prometheus.MustNewConstMetric(installOnlineDesc, prometheus.GaugeValue, online, in.Name)
	}
}
