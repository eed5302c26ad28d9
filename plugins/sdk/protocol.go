package sdk

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ProtocolVersion is a plugin protocol version, major.minor. Plugins and
// hosts of the same major version work together whatever their minor
// versions: minor versions only add, and both sides use what the lower one
// has. A plugin of another major version is refused.
type ProtocolVersion struct {
	Major int
	Minor int
}

// Protocol is the protocol version this SDK speaks, as a plugin and as a
// host. See rpc/byoc/plugin/v1/plugin.proto for what each minor added.
var Protocol = ProtocolVersion{Major: 1, Minor: 4}

// ProtocolMajor is the major version of [Protocol]; it is go-plugin's
// handshake version.
const ProtocolMajor = 1

// String returns "major.minor".
func (v ProtocolVersion) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v ProtocolVersion) Less(w ProtocolVersion) bool {
	return v.Major < w.Major || (v.Major == w.Major && v.Minor < w.Minor)
}

// MarshalText writes "major.minor", so a version prints as a JSON string.
func (v ProtocolVersion) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads "major.minor" or "major".
func (v *ProtocolVersion) UnmarshalText(b []byte) error {
	p, err := ParseProtocolVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// ParseProtocolVersion reads "major.minor", or "major" meaning minor 0.
func ParseProtocolVersion(s string) (ProtocolVersion, error) {
	maj, min, hasMinor := strings.Cut(strings.TrimSpace(s), ".")
	var v ProtocolVersion
	var err error
	if v.Major, err = strconv.Atoi(maj); err != nil || v.Major < 0 {
		return v, fmt.Errorf("protocol version %q: want major.minor", s)
	}
	if hasMinor {
		if v.Minor, err = strconv.Atoi(min); err != nil || v.Minor < 0 {
			return v, fmt.Errorf("protocol version %q: want major.minor", s)
		}
	}
	return v, nil
}

// Capabilities a plugin may have beyond describe, validate, plan and apply.
const (
	CapDestroy       = "destroy"
	CapDrift         = "drift"
	CapOutputsSchema = "outputs_schema"
	// CapPolicy (1.3): the plugin evaluates the job's policies.
	CapPolicy = "policy"
	// CapPlanDestroy: the plugin plans destroys ([DestroyPlanner]).
	CapPlanDestroy = "plan_destroy"
	// CapImport (1.4): the plugin adopts existing resources ([Importer]).
	CapImport = "import"
)

// IncompatibleError says that a plugin and its host speak different major
// protocol versions. Its message names both versions.
type IncompatibleError struct {
	// Plugin is the plugin's version; Host the host's.
	Plugin, Host ProtocolVersion
	// Type is the plugin's component type, when known.
	Type string
	// PluginMinorUnknown is set when only the plugin's major version is
	// known (go-plugin refused it at the handshake).
	PluginMinorUnknown bool
}

func (e *IncompatibleError) Error() string {
	name := "plugin"
	if e.Type != "" {
		name = "plugin " + strconvQuote(e.Type)
	}
	pv := e.Plugin.String()
	if e.PluginMinorUnknown {
		pv = fmt.Sprintf("%d.x", e.Plugin.Major)
	}
	return fmt.Sprintf("%s speaks byoc plugin protocol %s, but this agent speaks %s: "+
		"incompatible major versions; use a build of the plugin for protocol %d.x",
		name, pv, e.Host, e.Host.Major)
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// negotiate returns the version both sides use, or an *IncompatibleError.
func negotiate(host, plugin ProtocolVersion, typ string) (ProtocolVersion, error) {
	if host.Major != plugin.Major {
		return ProtocolVersion{}, &IncompatibleError{Plugin: plugin, Host: host, Type: typ}
	}
	return ProtocolVersion{Major: host.Major, Minor: min(host.Minor, plugin.Minor)}, nil
}

// Description is what the host knows of a plugin after negotiating with it.
type Description struct {
	Type    string `json:"type"`
	Version string `json:"version"`
	// Protocol is the version the plugin was built for.
	Protocol ProtocolVersion `json:"protocol"`
	// ProtocolVersions are the versions the plugin can speak; with this
	// SDK, one per major, at its highest minor.
	ProtocolVersions []ProtocolVersion `json:"protocol_versions"`
	// Negotiated is the version used on this connection: the lower of the
	// host's and the plugin's. Not set by the describe command.
	Negotiated ProtocolVersion `json:"-"`
	// Capabilities names the optional operations the plugin implements
	// (CapDestroy, CapDrift, CapOutputsSchema, CapPolicy).
	Capabilities []string `json:"capabilities"`
	// ConfigSchema and OutputsSchema are JSON Schemas; empty if the plugin
	// declares none.
	ConfigSchema  string `json:"-"`
	OutputsSchema string `json:"-"`
}

// Has reports whether the plugin has capability c.
func (d *Description) Has(c string) bool { return slices.Contains(d.Capabilities, c) }
