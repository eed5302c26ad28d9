package diff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

func parse(t *testing.T, files map[string]string) *config.App {
	t.Helper()
	b := map[string][]byte{}
	for k, v := range files {
		b[k] = []byte(v)
	}
	a, err := load.Parse(b, validate.Options{AnyType: true})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// What an install gets changes per component key and per input: the
// app's change shows where the install does not override it, its own
// override's change shows, and a sensitive input's values are masked.
func TestInstall(t *testing.T) {
	base := map[string]string{
		"app.toml":            "name = \"shop\"\n[install_defaults.inputs]\nsize = 2\n",
		"inputs.toml":         "[[input]]\nname = \"size\"\ntype = \"number\"\ndefault = 1\n[[input]]\nname = \"token\"\nsensitive = true\n[[input]]\nname = \"region\"\ndefault = \"eu\"\n",
		"components/api.toml": "type = \"helm\"\n[config]\nchart = \"c@1\"\n[config.values]\nreplicas = 2\nimage = \"api:1\"\n",
		"components/web.toml": "type = \"image\"\n[config]\nimage = \"web:1\"\n",
	}
	old := parse(t, base)
	next := map[string]string{}
	for k, v := range base {
		next[k] = v
	}
	next["components/api.toml"] = "type = \"helm\"\n[config]\nchart = \"c@1\"\n[config.values]\nreplicas = 3\nimage = \"api:2\"\n"
	delete(next, "components/web.toml")
	newApp := parse(t, next)

	// acme overrides replicas (5 before and after) and sets region; beta
	// has no overrides and its override of size goes away.
	acmeOld := InstallSide{Inputs: map[string]string{"region": "us", "token": "s1"}, Overrides: map[string]map[string]any{"api": {"values": map[string]any{"replicas": int64(5)}}}}
	acmeNew := InstallSide{Inputs: map[string]string{"region": "us", "token": "s2"}, Overrides: acmeOld.Overrides}
	betaOld := InstallSide{Inputs: map[string]string{"size": "7"}}
	betaNew := InstallSide{}
	show := func(cs []Change) string {
		var out []string
		for _, c := range cs {
			s := c.String()
			for _, v := range c.Values {
				s += fmt.Sprintf(" [%s: %v → %v]", v.Field, v.Old, v.New)
			}
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}
	if got, want := show(Install(old, newApp, acmeOld, acmeNew)), strings.Join([]string{
		"changed component api: values.image [values.image: api:1 → api:2]",
		"removed component web",
		"changed input token: value [value: (sensitive) → (sensitive)]",
	}, "\n"); got != want {
		t.Errorf("acme:\n%s\nwant:\n%s", got, want)
	}
	if got, want := show(Install(old, newApp, betaOld, betaNew)), strings.Join([]string{
		"changed component api: values.image, values.replicas [values.image: api:1 → api:2] [values.replicas: 2 → 3]",
		"removed component web",
		"changed input size: value [value: 7 → 2]",
	}, "\n"); got != want {
		t.Errorf("beta:\n%s\nwant:\n%s", got, want)
	}
	if d := Install(old, old, acmeOld, acmeOld); len(d) != 0 {
		t.Errorf("no change: %v", d)
	}
	if strings.Contains(show(Install(old, newApp, acmeOld, acmeNew)), "s1") {
		t.Error("a sensitive value shows")
	}
	if d := Install(old, old, betaOld, betaOld); len(d) != 0 {
		t.Errorf("no change: %v", d)
	}
}
