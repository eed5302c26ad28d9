package telemetry

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// MaxScrapeBytes bounds one scrape's body; a larger one is an error.
const MaxScrapeBytes = 4 << 20

// ParseMetrics reads a scrape in the Prometheus text format and returns
// its samples, as source's, with r's rules applied: dropped metrics left
// out, redacted labels removed. A histogram or summary comes as its
// _bucket (or quantile), _sum and _count series; a sample without its
// own timestamp gets now. Samples are in name order.
func ParseMetrics(source string, in io.Reader, now time.Time, r *Rules) ([]*agentv1.MetricSample, error) {
	lr := &io.LimitedReader{R: in, N: MaxScrapeBytes + 1}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(lr)
	if lr.N <= 0 {
		return nil, fmt.Errorf("the scrape is larger than %d bytes", MaxScrapeBytes)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*agentv1.MetricSample
	for _, n := range names {
		if r.Dropped(n) {
			continue
		}
		f := fams[n]
		for _, m := range f.Metric {
			at := now
			if m.TimestampMs != nil {
				at = time.UnixMilli(m.GetTimestampMs())
			}
			add := func(name string, v float64, extra ...string) {
				if name != n && r.Dropped(name) {
					return
				}
				labels := map[string]string{}
				for _, l := range m.Label {
					labels[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(extra); i += 2 {
					labels[extra[i]] = extra[i+1]
				}
				out = append(out, &agentv1.MetricSample{Source: source, Name: name, Labels: r.Labels(labels), Value: v, Time: timestamppb.New(at)})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(n, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(n, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(n, m.GetUntyped().GetValue())
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.Quantile {
					add(n, q.GetValue(), "quantile", formatFloat(q.GetQuantile()))
				}
				add(n+"_sum", s.GetSampleSum())
				add(n+"_count", float64(s.GetSampleCount()))
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.Bucket {
					add(n+"_bucket", float64(b.GetCumulativeCount()), "le", formatFloat(b.GetUpperBound()))
				}
				add(n+"_sum", h.GetSampleSum())
				add(n+"_count", float64(h.GetSampleCount()))
			default:
				return nil, errors.New("metric " + n + ": unknown type " + f.GetType().String())
			}
		}
	}
	return out, nil
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
