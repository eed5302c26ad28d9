// Command imsd is byoc's infrastructure management server: one per vendor.
// It serves the operator and agent APIs and keeps all fleet state, in SQLite
// by default or in PostgreSQL.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/operatorapi"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/flaghelp"
	"github.com/byoc-dev/byoc/internal/gomemlimit"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) > 0 && (args[0] == "key" || args[0] == "keys") {
		return keys(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "token" {
		return token(ctx, args[1:])
	}
	fs := flag.NewFlagSet("imsd", flag.ContinueOnError)
	var cfg server.Config
	var level slog.Level
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:7070", "listen `address` (host:port)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "`directory` for the SQLite database and the first admin token")
	fs.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("BYOC_DATABASE_URL"), "PostgreSQL `URL` (postgres://...) instead of SQLite; also $BYOC_DATABASE_URL")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "`file` the first start writes the admin token to (default DATA-DIR/admin.token)")
	fs.StringVar(&cfg.SigningKeyFile, "signing-key", "", "job signing key `file` (PKCS#8 PEM Ed25519, e.g. openssl genpkey -algorithm ed25519); default DATA-DIR/signing.key, created at the first start; required with PostgreSQL and no --data-dir, the same file for every replica")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", "", "TLS certificate `file`; serves HTTPS")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", "", "TLS key `file`")
	fs.DurationVar(&cfg.LeaseDuration, "lease", 0, "job lease `duration` (default 30s)")
	fs.DurationVar(&cfg.BreakGlassRequestTTL, "break-glass-request-ttl", 30*time.Minute, "how long a break-glass request waits for the customer's decision before it expires, `duration`")
	fs.DurationVar(&cfg.LeaseGrace, "lease-grace", 0, "how long after a lease ends a job may be handed out again, `duration` (default 5s + a tenth of the lease; at least 4s): the agent stops a job itself when its lease ends")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat", 0, "agent heartbeat `interval` (default 10s)")
	fs.IntVar(&cfg.MaxHellos, "max-hellos", 0, "agent hellos served at once; beyond, a stream is shed with a retry hint the agent honours (default 1024)")
	fs.DurationVar(&cfg.CronInterval, "cron-interval", 0, "how often action cron triggers are evaluated, `duration` (default 10s)")
	fs.StringVar(&cfg.RegistryURL, "registry-url", "", "the vendor registry `URL` as agents reach it (http://HOST:PORT): image and build jobs carry one-time grants for it, exchanged at /v2/token; imsd is its token server")
	fs.StringVar(&cfg.RegistryService, "registry-service", "", "the vendor registry's auth.token.service `name` (default byoc-registry)")
	fs.StringVar(&cfg.RegistryKeyDir, "registry-key-dir", "", "`directory` of the registry token key and certificate (registry-token.key, registry-token.crt: the registry's rootcertbundle), created at the first start; default DATA-DIR")
	fs.DurationVar(&cfg.AgentOfflineAfter, "agent-offline-after", 0, "an agent not heard for this `duration` is offline (default 2m; longer than a lease and two heartbeats)")
	fs.DurationVar(&cfg.AgentHealthGrace, "agent-health-grace", 0, "how long after its enrolment and after each reconnection (an update) an agent is not counted degraded, `duration` (default 2m)")
	fs.DurationVar(&cfg.AlertDelay, "alert-delay", 0, "how long an agent's health must hold before it is alerted, `duration` (default 1m)")
	fs.DurationVar(&cfg.AlertDedup, "alert-dedup", 0, "de-duplication window: after an alert of a problem, the same agent's same or lesser problem is alerted again only after this `duration` (default 1h)")
	fs.StringVar(&cfg.AlertWebhookURL, "alert-webhook", "", "`URL` that receives agent health alerts as JSON, signed (header Byoc-Signature, HMAC-SHA256) with --alert-webhook-secret-file's secret")
	fs.StringVar(&cfg.AlertWebhookSecretFile, "alert-webhook-secret-file", "", "`file` holding the webhook's shared secret (at least 16 bytes)")
	fs.StringVar(&cfg.AlertSlackURLFile, "alert-slack-webhook-file", "", "`file` holding a Slack-compatible incoming webhook URL that receives agent health alerts as text")
	fs.Int64Var(&cfg.JobLogMaxLines, "job-log-max-lines", 0, "keep at most this many `lines` of a job's log, its attempts together; past it lines are dropped and counted on one marker line, and the job runs on (default 100000)")
	fs.Int64Var(&cfg.JobLogMaxBytes, "job-log-max-bytes", 0, "keep at most this many `bytes` of a job's log, as --job-log-max-lines (default 67108864, 64 MiB)")
	fs.DurationVar(&cfg.JobLogRetention, "job-log-retention", 0, "remove the log lines of jobs that ended longer ago than this `duration` (e.g. 2160h, 90 days), leaving the jobs, their results and the audit chain; default 0: keep job logs")
	fs.DurationVar(&cfg.SupportSessionLostAfter, "support-session-lost-after", 0, "a support session whose agent imsd has not heard for this `duration` since, with no end recorded, is ended by imsd (support.session.ended saying the agent was lost); default 15m, longer than a lease and two heartbeats")
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log `level`: debug, info, warn, error")
	fs.StringVar(&cfg.SSOConfigFile, "sso-config", "", "single sign-on config `file` (TOML: issuer, client_id, scopes, groups_claim, [[group]] name/role/install/app/selector); see docs/operator/operators-and-roles.md")
	memLimit := fs.String("memory-limit", "auto", "Go's soft memory `limit`: auto (90% of the cgroup's memory limit when imsd runs under one, as in a container; GOMEMLIMIT, when set, wins), off, or a size as GOMEMLIMIT takes it (2GiB); near it the garbage collector works harder rather than the process outgrowing its container")
	fs.StringVar(&cfg.DebugAddr, "debug-addr", "", "serve Go's /debug/pprof on this loopback `address` (off by default)")
	agentWire := fs.String("agentwire", "on", "`on`: serve plaintext agent streams with imsd's own small HTTP/2 server; off: with the standard stack, like every other request")
	showVersion := fs.Bool("version", false, "print the version, commit and build date and the agentd versions this imsd serves (the version-skew window: its own minor version and the "+strconv.Itoa(agentproto.SkewMinors)+" before it; an agentd outside it is refused at its hello, in one line, and asks again only after a long back-off), and exit")
	if code, done := flaghelp.Parse(fs, args, os.Stdout); done {
		return code
	}
	if *showVersion {
		fmt.Printf("%s; serves agentd %s\n", buildinfo.Get().String("imsd"), server.ServedAgentVersions())
		return 0
	}
	switch *agentWire {
	case "on":
	case "off":
		cfg.AgentWireOff = true
	default:
		fmt.Fprintf(os.Stderr, "imsd: --agentwire: want on or off, got %q\n", *agentWire)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "imsd: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	memSetting, err := gomemlimit.Parse(*memLimit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd: %v\n", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	applied := gomemlimit.ApplySystem(memSetting, os.Getenv)
	cfg.Logger.Info("memory limit", "limit", applied.String())
	if applied.Note != "" {
		cfg.Logger.Warn("memory limit", "note", applied.Note)
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd: %v\n", err)
		return 1
	}
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "imsd: %v\n", err)
		return 1
	}
	return 0
}

// keys runs `imsd key rotate|retire|status` (also spelt `imsd keys`).
// rotate makes a new job signing key, endorsed by the old one in the key
// chain beside it: agents accept it through that endorsement, which
// every challenge carries. retire signs, with the current key, the
// retirement of every older one, once every agent has acknowledged the
// current key (or with --force, after the overlap's deadline): agents
// then refuse the old keys for good. Both are audited in the vendor's
// chain when imsd's database is reachable.
func keys(ctx context.Context, args []string) int {
	const usage = "usage: imsd key rotate|retire|status [--data-dir DIR | --signing-key FILE] [--database-url URL] [--force]"
	if len(args) == 0 || (args[0] != "rotate" && args[0] != "retire" && args[0] != "status") {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("imsd key "+verb, flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "imsd's data `directory` (its signing.key and SQLite database)")
	keyFile := fs.String("signing-key", "", "the job signing key `file` imsd is given with --signing-key")
	dbURL := fs.String("database-url", os.Getenv("BYOC_DATABASE_URL"), "imsd's PostgreSQL `URL`, for the audit event and (retire, status) the agents' acknowledgements; also $BYOC_DATABASE_URL")
	force := new(bool)
	if verb == "retire" {
		force = fs.Bool("force", false, "retire even though some agents have not acknowledged the current key (after the overlap's deadline: they learn the new key and the retirement at their next connection)")
	}
	if code, done := flaghelp.Parse(fs, args[1:], os.Stdout); done {
		return code
	}
	if (*dataDir == "") == (*keyFile == "") {
		fmt.Fprintf(os.Stderr, "imsd key %s: give exactly one of --data-dir and --signing-key\n", verb)
		return 2
	}
	path := server.SigningKeyPath(*dataDir, *keyFile)
	openStore := func() *store.Store {
		dsn := *dbURL
		if dsn == "" && *dataDir != "" {
			dsn = filepath.Join(*dataDir, "imsd.db")
			if _, err := os.Stat(dsn); err != nil {
				return nil
			}
		}
		if dsn == "" {
			return nil
		}
		st, err := store.Open(ctx, dsn)
		if err != nil {
			fmt.Fprintf(os.Stderr, "imsd key %s: open imsd's database: %v\n", verb, err)
			return nil
		}
		return st
	}
	audit := func(st *store.Store, kind string, data map[string]string) {
		if st == nil {
			fmt.Fprintf(os.Stderr, "imsd key %s: imsd's database is not reachable (give --data-dir or --database-url): this %s is not in the audit trail\n", verb, verb)
			return
		}
		if err := st.RecordAudit(ctx, store.AuditEvent{Chain: store.VendorChain, At: time.Now(), Kind: kind, Actor: "imsd key " + verb,
			Subject: "imsd-key:" + data["key"], Data: data}); err != nil {
			fmt.Fprintf(os.Stderr, "imsd key %s: record the audit event: %v\n", verb, err)
		}
	}
	switch verb {
	case "rotate":
		now := time.Now()
		r, err := auth.RotateSigningKey(path, now)
		if err != nil {
			fmt.Fprintf(os.Stderr, "imsd key rotate: %v\n", err)
			return 1
		}
		old, next := r.Old, r.Next
		data := map[string]string{"key": next.ID, "previous": old.ID}
		var pruned []string
		for _, k := range r.Pruned {
			pruned = append(pruned, k.ID)
		}
		if len(pruned) > 0 {
			data["pruned"] = strings.Join(pruned, ",")
		}
		st := openStore()
		audit(st, "imsd.key_rotated", data)
		if st != nil {
			st.Close()
		}
		fmt.Printf("rotated the job signing key %s: %s -> %s (endorsed in %s; the old key kept in %s, for offline results only, until %s)\n", path, old.ID, next.ID, auth.ChainFile(path), auth.PreviousFile(path),
			now.Add(auth.PreviousKeyUse).UTC().Format(time.RFC3339))
		for _, k := range r.Pruned {
			fmt.Printf("removed the previous key %s from %s: replaced %s, more than %d days ago (a bundle's longest validity and a margin to carry its results back); results of bundles it signed no longer import\n",
				k.ID, auth.PreviousFile(path), k.ReplacedAt.UTC().Format(time.RFC3339), int(auth.PreviousKeyUse/(24*time.Hour)))
		}
		fmt.Println("restart imsd (every replica, each given the new key file, its .chain and its .previous) to sign with the new key (until then it makes no offline bundle); agents learn it at their next connection and trust both until imsd key retire")
		return 0
	}
	key, err := auth.LoadSigningKey(path, false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd key %s: %v\n", verb, err)
		return 1
	}
	st := openStore()
	if st == nil {
		fmt.Fprintf(os.Stderr, "imsd key %s: cannot read imsd's database (give --data-dir with its imsd.db, or --database-url) to see which agents acknowledged key %s\n", verb, key.ID)
		return 1
	}
	defer st.Close()
	pending, err := st.AgentsNotAcking(ctx, key.ID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd key %s: %v\n", verb, err)
		return 1
	}
	for _, a := range pending {
		last := a.KeyID
		if last == "" {
			last = "none yet"
		}
		fmt.Printf("agent %s (install %s) has not acknowledged key %s (last acknowledged: %s)\n", a.AgentID, a.InstallName, key.ID, last)
	}
	if verb == "status" {
		fmt.Printf("job signing key %s; %d agent(s) yet to acknowledge it\n", key.ID, len(pending))
		return 0
	}
	if len(pending) > 0 && !*force {
		fmt.Fprintf(os.Stderr, "imsd key retire: %d agent(s) have not acknowledged key %s yet; wait for them, or after your deadline retire anyway with --force\n", len(pending), key.ID)
		return 1
	}
	_, retired, err := auth.RetireOldKeys(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd key retire: %v\n", err)
		return 1
	}
	if len(retired) == 0 {
		fmt.Printf("no older key to retire: %s is imsd's only job signing key\n", key.ID)
		return 0
	}
	ids := make([]string, len(retired))
	for i, k := range retired {
		ids[i] = agentproto.KeyID(k)
	}
	audit(st, "imsd.key_retired", map[string]string{"key": key.ID, "retired": strings.Join(ids, " "), "forced": strconv.FormatBool(len(pending) > 0)})
	fmt.Printf("retired %s, signed by %s (in %s)\n", strings.Join(ids, ", "), key.ID, auth.RetiredFile(path))
	fmt.Println("restart imsd (every replica, each given the key file, its .chain and its .retired) to send the retirement; agents refuse the retired keys from their next connection")
	return 0
}

// token runs `imsd token create --admin` on the server's host: it opens
// imsd's database directly (no API token needed) and mints an admin
// token, to recover a lost one or to make the first one on a replica that
// did not write it. The token is audited like any other, created by
// host:HOSTNAME.
func token(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(os.Stderr, "usage: imsd token create --admin [--name NAME] [--data-dir DIR | --database-url URL]")
		return 2
	}
	fs := flag.NewFlagSet("imsd token create", flag.ContinueOnError)
	admin := fs.Bool("admin", false, "create an admin token on everything (required: the only kind this command makes)")
	name := fs.String("name", "", "the token's `name` (default admin-recovery-YYYYMMDD-HHMMSS)")
	dataDir := fs.String("data-dir", "", "imsd's data `directory` (its SQLite database)")
	dbURL := fs.String("database-url", os.Getenv("BYOC_DATABASE_URL"), "PostgreSQL `URL` instead of SQLite; also $BYOC_DATABASE_URL")
	if code, done := flaghelp.Parse(fs, args[1:], os.Stdout); done {
		return code
	}
	if !*admin {
		fmt.Fprintln(os.Stderr, "imsd token create: pass --admin (other tokens are made with byoc token create)")
		return 2
	}
	if (*dataDir == "") == (*dbURL == "") {
		fmt.Fprintln(os.Stderr, "imsd token create: give exactly one of --data-dir and --database-url")
		return 2
	}
	now := time.Now()
	if *name == "" {
		*name = "admin-recovery-" + now.UTC().Format("20060102-150405")
	}
	dsn := *dbURL
	if dsn == "" {
		dsn = filepath.Join(*dataDir, "imsd.db")
		if _, err := os.Stat(dsn); err != nil {
			fmt.Fprintf(os.Stderr, "imsd token create: no imsd database in %s: %v\n", *dataDir, err)
			return 1
		}
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd token create: %v\n", err)
		return 1
	}
	defer st.Close()
	host, _ := os.Hostname()
	secret, tok, err := operatorapi.CreateToken(ctx, st, store.APIToken{Name: *name, Role: store.RoleAdmin, CreatedBy: "host:" + host}, now)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd token create: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "created admin token %s (%s); the secret below is shown once\n", tok.Name, tok.ID)
	fmt.Println(secret)
	return 0
}
