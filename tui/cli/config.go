package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// configEnv names the environment variable that overrides the config path.
const configEnv = "BYOC_CONFIG"

// Config is the operator's config file: named contexts, each a server and a
// token, and which one is current. It holds secrets, so it is written with
// mode 0600 in a directory with mode 0700.
type Config struct {
	CurrentContext string          `json:"current_context,omitempty"`
	Contexts       []ConfigContext `json:"contexts"`
}

// ConfigContext is one named server and the token to present to it.
type ConfigContext struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	Token  string `json:"token"`
	// Session is a single sign-on session from byoc login, used when
	// Token is empty.
	Session *Session `json:"session,omitempty"`
}

// Session is what byoc login keeps: the ID token imsd verifies, and how
// to refresh it before it expires.
type Session struct {
	IDToken      string    `json:"idToken"`
	Expiry       time.Time `json:"expiry"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"clientId"`
	TokenURL     string    `json:"tokenUrl"`
	User         string    `json:"user,omitempty"`
}

// Context returns the context called name, or nil.
func (c *Config) Context(name string) *ConfigContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// Put adds ctx, replacing a context of the same name, and reports whether it
// replaced one.
func (c *Config) Put(ctx ConfigContext) (replaced bool) {
	if old := c.Context(ctx.Name); old != nil {
		*old = ctx
		return true
	}
	c.Contexts = append(c.Contexts, ctx)
	return false
}

// Remove deletes the context called name and reports whether it existed.
// Removing the current context leaves no context current.
func (c *Config) Remove(name string) bool {
	i := slices.IndexFunc(c.Contexts, func(x ConfigContext) bool { return x.Name == name })
	if i < 0 {
		return false
	}
	c.Contexts = slices.Delete(c.Contexts, i, i+1)
	if c.CurrentContext == name {
		c.CurrentContext = ""
	}
	return true
}

// Names returns the context names in file order.
func (c *Config) Names() []string {
	names := make([]string, len(c.Contexts))
	for i, x := range c.Contexts {
		names[i] = x.Name
	}
	return names
}

// configPath returns $BYOC_CONFIG, or config.json in the user's config
// directory ($XDG_CONFIG_HOME/byoc on Linux).
func configPath(getenv func(string) string) (string, error) {
	if p := getenv(configEnv); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find config directory (set %s): %w", configEnv, err)
	}
	return filepath.Join(dir, "byoc", "config.json"), nil
}

// loadConfig reads the config at path; a missing file is an empty config.
func loadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	return &c, nil
}

// saveConfig writes c to path atomically: a temporary file in the same
// directory, synced, then renamed over the old file, so that a crash never
// leaves a half-written config (and lost tokens).
func saveConfig(path string, c *Config) error {
	if c.Contexts == nil {
		c.Contexts = []ConfigContext{}
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	b = append(b, '\n')
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	return nil
}

// checkServerURL returns an error unless s is an absolute http or https URL.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("server %q must be an http:// or https:// URL, such as http://127.0.0.1:8080", s)
	}
	return nil
}
