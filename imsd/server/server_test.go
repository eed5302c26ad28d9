package server

import (
	"context"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/auth"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// startServer runs an imsd on SQLite in a temp dir; before, when set, can
// change it before it serves.
func startServer(t *testing.T, log *slog.Logger, before func(*Server)) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// A panic in the h2c listener's sniff ends that connection only: logged
// with its stack, counted in /metrics, and imsd goes on serving.
func TestSniffPanicContained(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	panicking := make(chan bool, 1)
	panicking <- true
	s := startServer(t, log, func(s *Server) {
		s.testHookSniff = func() {
			select {
			case <-panicking:
				panic("sniff test panic")
			default:
			}
		}
	})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	if n, err := c.Read(make([]byte, 100)); err == nil {
		t.Fatalf("read %d bytes from a connection whose sniff panicked; want it closed", n)
	}
	// imsd lives on, and says so in /metrics.
	r, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), "\nbyoc_agentwire_panics_total 1\n") {
		t.Errorf("/metrics lacks byoc_agentwire_panics_total 1:\n%s", grepLines(string(b), "panics"))
	}
	out := logs.String()
	for _, want := range []string{"panic contained to its connection", "sniff test panic", "server.(*h2cListener).sniff"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The largest hello an agent sends (capacity 1,000, every slot running a
// job, a 255-byte host name) fits in what agentwire reads before the
// agent is authenticated.
func TestLargestHelloFits(t *testing.T) {
	h := &agentv1.Hello{
		AgentId:   auth.NewID("agt_"),
		Signature: make([]byte, 64),
		Capacity:  1000,
		Version:   strings.Repeat("v", 64),
		Hostname:  strings.Repeat("h", 255),
	}
	for range 1000 {
		h.Running = append(h.Running, &agentv1.RunningJob{JobId: auth.NewSortableID("job_", time.Now()), FencingToken: 1<<63 - 1})
	}
	// It travels as the payload of the channel's first handshake message
	// (an ephemeral key, the agent's static key and two tags: 96 bytes),
	// which Noise bounds to 65535 bytes.
	payload := proto.Size(h)
	if payload+96 > 65535 {
		t.Fatalf("the largest hello is %d bytes: more than a Noise handshake message carries", payload)
	}
	n := proto.Size(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{
		AgentId: h.AgentId, Noise: make([]byte, payload+96)}}})
	t.Logf("largest hello: %d bytes; limit %d", n, agentHelloMax)
	if n > agentHelloMax*3/4 {
		t.Fatalf("the largest hello is %d bytes: too near the limit of %d", n, agentHelloMax)
	}
}

// The job signing key: created 0600 in the data dir at the first start
// and the same at the next; --signing-key must exist and is required
// with PostgreSQL and no data dir; a key file whose chain ends elsewhere
// is refused.
func TestSigningKeyConfig(t *testing.T) {
	dir := t.TempDir()
	k1, _, err := loadSigningKey(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SigningKeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	k2, _, err := loadSigningKey(Config{DataDir: dir})
	if err != nil || k2.ID != k1.ID {
		t.Fatalf("second start: key %s (%v), want %s", k2.ID, err, k1.ID)
	}
	c := Config{DatabaseURL: "postgres://nowhere/db"}
	if err := c.defaults(); err == nil || !strings.Contains(err.Error(), "--signing-key") {
		t.Fatalf("PostgreSQL without a data dir or key: %v", err)
	}
	if _, _, err := loadSigningKey(Config{SigningKeyFile: filepath.Join(dir, "missing.key")}); err == nil || !strings.Contains(err.Error(), "--signing-key") || !strings.Contains(err.Error(), "missing.key") {
		t.Fatalf("missing --signing-key file: %v", err)
	}
	// A rotated key given without its chain's last key: refused.
	path := filepath.Join(dir, SigningKeyFileName)
	if _, err := auth.RotateSigningKey(path, time.Now()); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if _, err := auth.LoadSigningKey(other, true); err != nil {
		t.Fatal(err)
	}
	chain, _ := os.ReadFile(auth.ChainFile(path))
	if err := os.WriteFile(auth.ChainFile(other), chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadSigningKey(Config{SigningKeyFile: other}); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Fatalf("a chain that does not end with the key: %v", err)
	}
	if err := os.Chmod(other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadSigningKey(Config{SigningKeyFile: other}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key file others can read: %v", err)
	}
}

// Bad health and alert settings are refused at start, naming the flag.
func TestAlertConfig(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.secret")
	good := filepath.Join(dir, "good.secret")
	slackBad := filepath.Join(dir, "slack.url")
	for f, b := range map[string]string{short: "tiny\n", good: "a secret of the vendor's\n", slackBad: "not a url\n"} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{AgentOfflineAfter: 40 * time.Second}, "--agent-offline-after 40s must be longer than a lease and two heartbeats (50s)"},
		{Config{AlertWebhookURL: "http://127.0.0.1:1/hook"}, "--alert-webhook and --alert-webhook-secret-file go together"},
		{Config{AlertWebhookURL: "ftp://x/hook", AlertWebhookSecretFile: good}, `--alert-webhook "ftp://x/hook"`},
		{Config{AlertWebhookURL: "http://127.0.0.1:1/hook", AlertWebhookSecretFile: short}, "the secret is 4 bytes; want at least 16"},
		{Config{AlertWebhookURL: "http://127.0.0.1:1/hook", AlertWebhookSecretFile: filepath.Join(dir, "none")}, "--alert-webhook-secret-file"},
		{Config{AlertSlackURLFile: slackBad}, "--alert-slack-webhook-file " + slackBad},
	} {
		tc.cfg.DataDir = dir
		err := tc.cfg.defaults()
		if err == nil {
			_, err = alertSinks(tc.cfg)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	c := Config{DataDir: dir, AlertWebhookURL: "https://hooks.example.com/byoc", AlertWebhookSecretFile: good}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if sinks, err := alertSinks(c); err != nil || len(sinks) != 1 || sinks[0].Name() != "webhook" {
		t.Fatalf("sinks = %v, %v", sinks, err)
	}
	if c.AgentOfflineAfter != 2*time.Minute || c.AlertDelay != time.Minute || c.AlertDedup != time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
}
