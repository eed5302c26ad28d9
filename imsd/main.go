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
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/internal/buildinfo"
	"github.com/byoc-dev/byoc/internal/flaghelp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == "keys" {
		return keys(args[1:])
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
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log `level`: debug, info, warn, error")
	fs.StringVar(&cfg.DebugAddr, "debug-addr", "", "serve Go's /debug/pprof on this loopback `address` (off by default)")
	agentWire := fs.String("agentwire", "on", "`on`: serve plaintext agent streams with imsd's own small HTTP/2 server; off: with the standard stack, like every other request")
	showVersion := fs.Bool("version", false, "print the version, commit and build date, and exit")
	if code, done := flaghelp.Parse(fs, args, os.Stdout); done {
		return code
	}
	if *showVersion {
		fmt.Println(buildinfo.Get().String("imsd"))
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
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
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

// keys runs `imsd keys rotate`: a new job signing key, endorsed by the
// old one in the key chain beside it. Agents accept the new key through
// that endorsement, which every welcome carries.
func keys(args []string) int {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(os.Stderr, "usage: imsd keys rotate [--data-dir DIR | --signing-key FILE]")
		return 2
	}
	fs := flag.NewFlagSet("imsd keys rotate", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "imsd's data `directory` (its signing.key)")
	keyFile := fs.String("signing-key", "", "the job signing key `file` imsd is given with --signing-key")
	if code, done := flaghelp.Parse(fs, args[1:], os.Stdout); done {
		return code
	}
	if (*dataDir == "") == (*keyFile == "") {
		fmt.Fprintln(os.Stderr, "imsd keys rotate: give exactly one of --data-dir and --signing-key")
		return 2
	}
	path := server.SigningKeyPath(*dataDir, *keyFile)
	old, next, err := auth.RotateSigningKey(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imsd keys rotate: %v\n", err)
		return 1
	}
	fmt.Printf("rotated the job signing key %s: %s -> %s (endorsed in %s)\n", path, old.ID, next.ID, auth.ChainFile(path))
	fmt.Println("restart imsd (every replica, each given the new key file and its .chain) to sign with the new key; agents learn it at their next connection")
	return 0
}
