package validate

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
)

var telemetryNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// telemetry checks telemetry.toml: unique names, an http(s) URL per
// metrics source, an absolute glob per log source, intervals of 1s to 1h.
func (v *validator) telemetry() {
	const file = "telemetry.toml"
	t := v.a.Telemetry
	seen := map[string]string{}
	name := func(key, kind, n string) {
		switch {
		case !telemetryNameRE.MatchString(n):
			v.errf(file, key, "use lowercase letters, digits, _ and -, starting with a letter", "%q is not a valid %s source name", n, kind)
		case seen[n] != "":
			v.errf(file, key, "source names are unique across metrics and logs", "%q is also the name of %s", n, seen[n])
		default:
			seen[n] = key
		}
	}
	interval := func(key string, d time.Duration) {
		if d != 0 && (d < time.Second || d > time.Hour) {
			v.errf(file, key, "", "must be between 1s and 1h, got %s", d)
		}
	}
	for i, m := range t.Metrics {
		at := func(k string) string { return fmt.Sprintf("metrics[%d].%s", i, k) }
		name(at("name"), "metrics", m.Name)
		if u, err := url.Parse(m.URL); m.URL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			v.errf(file, at("url"), "such as http://api.internal:9090/metrics", "%q is not an http:// or https:// URL", m.URL)
		} else if err == nil && u.User != nil {
			v.errf(file, at("url"), "the agent scrapes without credentials", "%q carries a user name or password", m.URL)
		}
		interval(at("interval"), time.Duration(m.Interval))
	}
	for i, l := range t.Logs {
		at := func(k string) string { return fmt.Sprintf("logs[%d].%s", i, k) }
		name(at("name"), "logs", l.Name)
		switch {
		case l.Path == "":
		case !strings.HasPrefix(l.Path, "/"):
			v.errf(file, at("path"), "such as /var/log/app/*.log", "%q is not an absolute path", l.Path)
		case strings.Contains(l.Path, "**"):
			v.errf(file, at("path"), "name one folder level with *", "%q: ** is not supported", l.Path)
		default:
			if _, err := path.Match(l.Path, ""); err != nil {
				v.errf(file, at("path"), "", "%q is not a glob: %v", l.Path, err)
			}
		}
		interval(at("interval"), time.Duration(l.Interval))
	}
}
