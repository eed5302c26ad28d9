package server

import (
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
)

// metrics implements agentapi.Observer with Prometheus collectors.
type metrics struct {
	pickup   prometheus.Histogram
	finished *prometheus.CounterVec
	conflict prometheus.Counter
}

// panics reports the panics contained to one connection on the agent-wire
// path.
func newMetrics(reg *prometheus.Registry, hub *dispatch.Hub, panics func() uint64) *metrics {
	m := &metrics{
		pickup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "byoc_job_pickup_seconds",
			Help:    "Time from enqueue to the agent acknowledging a job's first attempt.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "byoc_jobs_finished_total",
			Help: "Jobs finished by agents, by final state.",
		}, []string{"state"}),
		conflict: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "byoc_agent_identity_conflicts_total",
			Help: "Agent hellos refused because another process of the same agent identity held its stream (a copied state dir).",
		}),
	}
	reg.MustRegister(m.pickup, m.finished, m.conflict,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "byoc_agents_connected",
			Help: "Agent streams connected to this imsd.",
		}, func() float64 { return float64(hub.Count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "byoc_agentwire_panics_total",
			Help: "Panics contained to one connection on the path before authentication: the h2c listener's sniff, agentwire's connection goroutine and the agent stream's handler on it.",
		}, func() float64 { return float64(panics()) }),
		// The default Go metrics, and the soft memory limit imsd set
		// (--memory-limit): go_gc_gomemlimit_bytes.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/gomemlimit:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) Connected(int)                 {}
func (m *metrics) Picked(d time.Duration)        { m.pickup.Observe(d.Seconds()) }
func (m *metrics) Finished(state store.JobState) { m.finished.WithLabelValues(string(state)).Inc() }
func (m *metrics) IdentityConflict()             { m.conflict.Inc() }
