package cluster

import (
	"io"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/byoc-dev/byoc/imsd/auth"
)

// StartReplicas starts one imsd process per database URL in dsns (one
// PostgreSQL database, possibly reached through different paths), all
// at once, as a deploy starts them: each with a data dir of its own and
// the same job signing key and admin token file, as every replica must
// share them. args are added to every command line; logs(i) is where
// replica i writes its output (nil: discarded). It returns when every
// replica is ready.
func StartReplicas(tb testing.TB, dsns []string, logs func(i int) io.Writer, args ...string) []*IMSProcess {
	tb.Helper()
	dir := tb.TempDir()
	key := filepath.Join(dir, "signing.key")
	if _, err := auth.LoadSigningKey(key, true); err != nil {
		tb.Fatal(err)
	}
	var ps []*IMSProcess
	for i, dsn := range dsns {
		var out io.Writer
		if logs != nil {
			out = logs(i)
		}
		a := append([]string{"--database-url", dsn, "--signing-key", key, "--admin-token-file", filepath.Join(dir, "admin.token")}, args...)
		ps = append(ps, newIMSProcess(tb, out, a...))
	}
	bin := filepath.Join(Binaries(tb), "imsd")
	dones := make([]chan struct{}, len(ps))
	for i, p := range ps {
		dones[i] = p.launch(bin)
	}
	for i, p := range ps {
		if !p.waitReady(dones[i]) {
			p.Start() // exited (a port taken meanwhile): once more, alone
		}
	}
	for _, p := range ps {
		p.readToken()
	}
	return ps
}

// WithApplicationName returns dsn with application_name set to name, as
// each replica names itself in pg_stat_activity.
func WithApplicationName(tb testing.TB, dsn, name string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
