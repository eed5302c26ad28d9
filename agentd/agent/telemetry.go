package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/agentd/auditlog"

	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The app's telemetry (package telemetry) as the customer's setting
// allows: imsd sends the app's declaration (telemetry.toml) once the
// agent reports a setting that is not off (Permissions.telemetry); the
// collector reads the sources, redacts on the agent's side, and its
// batches go up the stream like any message, so the egress ledger
// records them (kind telemetry). A change of the setting is recorded in
// the agent's journal (telemetry.changed) and reported with the
// permissions, which imsd's chain records (agent.permissions_changed).

// KindTelemetryChanged is the journal record of a change of the
// customer's telemetry setting.
const KindTelemetryChanged = "telemetry.changed"

// telemetrySetting is the customer's setting as the agent enforces it:
// off while the permission file cannot be read or is refused.
func (a *Agent) telemetrySetting() (permissions.TelemetrySetting, error) {
	st, err := a.permissions()
	if err != nil {
		return permissions.TelemetrySetting{}, err
	}
	return st.Telemetry, nil
}

// noteTelemetry records a change of the setting in the journal. permMu
// is held.
func (a *Agent) noteTelemetry(old permissions.TelemetrySetting, st permissions.State, gen uint64) {
	t := st.Telemetry
	a.log.Info("customer changed the telemetry setting", "from", old.ModeName(), "to", t.String(), "by", st.ChangedBy)
	a.note(KindTelemetryChanged, "install:"+a.id.InstallID, map[string]string{
		"from": old.ModeName(), "mode": t.ModeName(), "redact_labels": strings.Join(t.RedactLabels, ","),
		"redact_fields": strings.Join(t.RedactFields, ","), "drop_metrics": strings.Join(t.DropMetrics, "\n"),
		"changed_by": st.ChangedBy, "generation": strconv.FormatUint(gen, 10)})
}

// journalledTelemetry is the setting the journal's last
// telemetry.changed record names (off when there is none).
func (a *Agent) journalledTelemetry() permissions.TelemetrySetting {
	if a.journal == nil {
		return permissions.TelemetrySetting{}
	}
	rs, err := auditlog.ReadFile(a.journal.Path())
	if err != nil {
		return permissions.TelemetrySetting{}
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Kind != KindTelemetryChanged {
			continue
		}
		var d map[string]string
		if json.Unmarshal([]byte(rs[i].Data), &d) != nil {
			break
		}
		t := permissions.TelemetrySetting{RedactLabels: split(d["redact_labels"], ","), RedactFields: split(d["redact_fields"], ","),
			DropMetrics: split(d["drop_metrics"], "\n")}
		if d["mode"] != permissions.TelemetryOff {
			t.Mode = d["mode"]
		}
		return t
	}
	return permissions.TelemetrySetting{}
}

func split(s, sep string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, sep)
}

func telemetryProto(t permissions.TelemetrySetting) *agentv1.TelemetrySetting {
	if t.Equal(permissions.TelemetrySetting{}) {
		return nil
	}
	return &agentv1.TelemetrySetting{Mode: t.ModeName(), RedactLabels: t.RedactLabels, RedactFields: t.RedactFields, DropMetrics: t.DropMetrics}
}

// telemetryHidden are the paths the collector never reads as logs: the
// agent's state directory, what the plugins' sandbox hides (its secrets
// file, policy directory, the stack's files, signing files), and the
// credentials the agent's machine holds for it (credentialPaths): the
// vendor's telemetry declaration names the files read, and imsd sends it.
func telemetryHidden(cfg Config) []string {
	var out []string
	if abs, err := filepath.Abs(cfg.StateDir); err == nil && cfg.StateDir != "" {
		out = append(out, abs)
	}
	kubeconfig := ""
	if r, ok := cfg.Runner.(*PluginRunner); ok {
		out = append(out, r.SandboxHidden...)
		kubeconfig = r.Kubeconfig
	}
	home, _ := os.UserHomeDir()
	return append(out, credentialPaths(kubeconfig, os.Getenv, home)...)
}

// credentialEnv name the files of credentials the cloud SDKs, kubectl
// and docker read from the environment.
var credentialEnv = []string{"KUBECONFIG", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_FEDERATED_TOKEN_FILE",
	"AZURE_CLIENT_CERTIFICATE_PATH", "DOCKER_CONFIG", "CLOUDSDK_CONFIG"}

// credentialPaths are the files and directories of credentials on the
// agent's machine: the kubeconfig of the helm type's cluster (agentd
// --kubeconfig), those its environment names (credentialEnv), the
// service account and workload identity tokens of a pod
// (/var/run/secrets), and the agent user's cloud, cluster, registry and
// SSH credentials under home. None is a log; each would give whoever
// reads it the agent's own access to the cloud or the cluster.
func credentialPaths(kubeconfig string, getenv func(string) string, home string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, abs)
		}
	}
	add(kubeconfig)
	for _, name := range credentialEnv {
		for _, p := range filepath.SplitList(getenv(name)) {
			add(p)
		}
	}
	add("/var/run/secrets")
	add("/run/secrets")
	if home != "" && home != "/" {
		for _, d := range []string{".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".ssh"} {
			add(filepath.Join(home, d))
		}
	}
	return out
}

// takeTelemetryConfig takes the app's telemetry declaration imsd sent.
func (a *Agent) takeTelemetryConfig(c *agentv1.TelemetryConfig) {
	old := a.telemetry.Config()
	a.telemetry.SetConfig(c)
	if old == nil || old.AppRevision != c.AppRevision {
		a.log.Info("the app's telemetry declaration", "app_revision", c.AppRevision, "metrics_sources", len(c.Metrics), "log_sources", len(c.Logs))
	}
}

// sendTelemetry sends a batch, with the counts of what the collector
// dropped so far.
func (a *Agent) sendTelemetry(st interface {
	Send(*agentv1.ConnectRequest) error
}, b *agentv1.TelemetryBatch) error {
	b.DroppedSamples, b.DroppedLines = a.telemetry.Dropped()
	return st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Telemetry{Telemetry: b}})
}
