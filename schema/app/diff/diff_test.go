package diff

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

func TestDiff(t *testing.T) {
	old, err := load.Parse(load.ExampleFiles(), validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := maps.Clone(load.ExampleFiles())
	edit := func(p, from, to string) {
		s := string(files[p])
		if !strings.Contains(s, from) {
			t.Fatalf("%s has no %q", p, from)
		}
		files[p] = []byte(strings.Replace(s, from, to, 1))
	}
	edit("components/api.toml", `chart = "charts/api@sha256:`, `chart = "charts/api2@sha256:`)
	edit("components/db.toml", `type = "terraform"`, "type = \"terraform\"\ntimeout = \"1h\"")
	delete(files, "components/web.toml")
	files["components/worker.toml"] = []byte("type = \"image\"\n[config]\nimage = \"w:1\"\n")
	edit("scripts/migrate.sh", "migrating", "Migrating")
	edit("app.toml", `version = "0.1.0"`, `version = "0.2.0"`)
	edit("inputs.toml", "max = 3650", "max = 365")
	files["debug/logs.toml"] = []byte("script = \"echo\"\n")
	newApp, err := load.Parse(files, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range Apps(old, newApp) {
		got = append(got, c.String())
	}
	want := []string{
		"changed component api: config.chart",
		"changed component db: timeout",
		"removed component web",
		"added component worker",
		"added debug logs",
		"changed input retention_days: max",
		"changed app app: version",
		"changed file scripts/migrate.sh",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("diff:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if d := Apps(old, old); len(d) != 0 {
		t.Errorf("diff with itself: %v", d)
	}
}

// Each changed field carries its old and new values; a sensitive input's
// are masked, in its own definition and in an install's inputs (issue 33,
// item 13).
func TestDiffValues(t *testing.T) {
	old, err := load.Parse(load.ExampleFiles(), validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := maps.Clone(load.ExampleFiles())
	edit := func(p, from, to string) {
		s := string(files[p])
		if !strings.Contains(s, from) {
			t.Fatalf("%s has no %q", p, from)
		}
		files[p] = []byte(strings.Replace(s, from, to, 1))
	}
	edit("inputs.toml", "max = 3650", "max = 365")
	edit("inputs.toml", `default = "small"`, "required = true\nsensitive = true")
	edit("installs/demo.toml", `tier = "large" }`, `tier = "small" }`)
	newApp, err := load.Parse(files, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range Apps(old, newApp) {
		for _, v := range c.Values {
			got = append(got, fmt.Sprintf("%s %s %s: %v -> %v", c.Kind, c.Name, v.Field, v.Old, v.New))
		}
	}
	want := []string{
		"input retention_days max: 3650 -> 365",
		"input tier default: (sensitive) -> <nil>",
		"input tier required: false -> true",
		"input tier sensitive: false -> true",
		"install demo inputs.tier: (sensitive) -> (sensitive)",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("values:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
