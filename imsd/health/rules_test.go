package health

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// rulesFile is the shipped Prometheus alerting rules.
var rulesFile = filepath.Join("..", "..", "docs", "operator", "agent-health-rules.yml")

// TestShippedAlertingRules parses the shipped rules as Prometheus reads a
// rule file (strictly: an unknown key is an error), and checks that each
// rule has a unique name, a duration Prometheus accepts, a severity and a
// summary, names only metrics imsd exports with the labels they have, and
// that its annotations use only labels its expression keeps. (promtool is
// not available here; this is the part of its check that matters.)
func TestShippedAlertingRules(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	// The metrics and labels imsd exports.
	exported := map[string][]string{}
	m := New(nil, Config{})
	ch := make(chan *prometheus.Desc, 10)
	m.Describe(ch)
	close(ch)
	descRe := regexp.MustCompile(`fqName: "([a-z_]+)".*variableLabels: \{([a-z_,]*)\}`)
	for d := range ch {
		sm := descRe.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot read %s", d)
		}
		exported[sm[1]] = append(strings.Split(sm[2], ","), "__name__")
	}
	if len(exported) != 2 {
		t.Fatalf("exported = %v", exported)
	}
	metricRe := regexp.MustCompile(`\bbyoc_[a-z_]+`)
	byRe := regexp.MustCompile(`by \(([a-z_, ]+)\)`)
	matcherRe := regexp.MustCompile(`\{([a-z_]+)=`)
	labelUse := regexp.MustCompile(`\$labels\.([a-zA-Z_]+)`)
	var names []string
	if len(f.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || !model.LabelValue(r.Alert).IsValid() || slices.Contains(names, r.Alert) {
				t.Errorf("rule %q: a unique alert name is required", r.Alert)
			}
			names = append(names, r.Alert)
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", r.Alert, err)
				}
			}
			if sev := r.Labels["severity"]; sev != "page" && sev != "warning" {
				t.Errorf("%s: severity %q, want page or warning", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: a summary and a description are required", r.Alert)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "[") != strings.Count(r.Expr, "]") {
				t.Errorf("%s: unbalanced expression %q", r.Alert, r.Expr)
			}
			metrics := metricRe.FindAllString(r.Expr, -1)
			if len(metrics) == 0 {
				t.Errorf("%s: names no byoc metric: %q", r.Alert, r.Expr)
			}
			var labels []string
			for _, name := range metrics {
				l, ok := exported[name]
				if !ok {
					t.Errorf("%s: imsd exports no metric %s", r.Alert, name)
				}
				labels = append(labels, l...)
			}
			for _, sm := range matcherRe.FindAllStringSubmatch(r.Expr, -1) {
				if !slices.Contains(labels, sm[1]) {
					t.Errorf("%s: matches on label %s, which its metric lacks", r.Alert, sm[1])
				}
			}
			kept := []string{}
			if sm := byRe.FindStringSubmatch(r.Expr); sm != nil {
				for l := range strings.SplitSeq(sm[1], ",") {
					l = strings.TrimSpace(l)
					if !slices.Contains(labels, l) {
						t.Errorf("%s: groups by label %s, which its metric lacks", r.Alert, l)
					}
					kept = append(kept, l)
				}
			}
			for _, a := range r.Annotations {
				for _, sm := range labelUse.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(kept, sm[1]) {
						t.Errorf("%s: an annotation uses $labels.%s, which the expression does not keep", r.Alert, sm[1])
					}
				}
			}
		}
	}
}
