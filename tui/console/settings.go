package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"

	"charm.land/lipgloss/v2"
)

// Settings is the console's own config file, console.json, kept next to
// the CLI's config.json: key bindings and theme colours.
//
//	{"keys": {"run_action": ["R"]}, "theme": {"accent": "#5f87ff"}}
type Settings struct {
	Keys  map[string][]string `json:"keys"`
	Theme map[string]string   `json:"theme"`
}

// Theme is the console's colours.
type Theme struct {
	Accent, Muted, OK, Warn, Bad, Banner, Selected color.Color
}

var themeDefaults = map[string]string{
	"accent":   "#5f87ff",
	"muted":    "#808080",
	"ok":       "#5faf5f",
	"warn":     "#d7af00",
	"bad":      "#d75f5f",
	"banner":   "#d75f5f",
	"selected": "#303a5a",
}

var hexColor = regexp.MustCompile(`^#[0-9a-fA-F]{6}$|^[0-9]{1,3}$`)

// LoadSettings reads path. A missing file gives the defaults; a malformed
// one is an error naming the file, and the line or the field at fault.
func LoadSettings(path string) (Settings, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Settings{}, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("read console settings: %w", err)
	}
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return Settings{}, fmt.Errorf("%s:%d: %v", path, lineOf(b, se.Offset), err)
		case errors.As(err, &te):
			return Settings{}, fmt.Errorf("%s:%d: %s: a %s is needed here", path, lineOf(b, te.Offset), te.Field, te.Type)
		}
		return Settings{}, fmt.Errorf("%s: %v", path, err)
	}
	if _, err := s.theme(); err != nil {
		return Settings{}, fmt.Errorf("%s: %v", path, err)
	}
	if _, err := NewKeyMap(s.Keys, false); err != nil {
		return Settings{}, fmt.Errorf("%s: %v", path, err)
	}
	return s, nil
}

func lineOf(b []byte, off int64) int {
	return bytes.Count(b[:min(int(off), len(b))], []byte("\n")) + 1
}

func (s Settings) theme() (Theme, error) {
	var names []string
	for k := range themeDefaults {
		names = append(names, k)
	}
	sort.Strings(names)
	vals := map[string]color.Color{}
	for k, v := range themeDefaults {
		vals[k] = lipgloss.Color(v)
	}
	for k, v := range s.Theme {
		if _, ok := themeDefaults[k]; !ok {
			return Theme{}, fmt.Errorf("theme.%s: unknown colour; known: %s", k, strings.Join(names, ", "))
		}
		if !hexColor.MatchString(v) {
			return Theme{}, fmt.Errorf("theme.%s: %q is not a colour: use #rrggbb or an ANSI number 0-255", k, v)
		}
		vals[k] = lipgloss.Color(v)
	}
	return Theme{Accent: vals["accent"], Muted: vals["muted"], OK: vals["ok"], Warn: vals["warn"],
		Bad: vals["bad"], Banner: vals["banner"], Selected: vals["selected"]}, nil
}
