package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// A retried EnqueueJob or EnqueueJobs with the same idempotency key gets
// the jobs the first call stored, whatever protocol or codec it uses and
// across an imsd restart, and nothing is stored twice; the key with
// another request is refused naming idempotency_key.
func TestEnqueueIdempotencyKey(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testEnqueueIdempotencyKey(t, fast) })
	t.Run("postgres", func(t *testing.T) {
		skipShort(t)
		opts := fast
		opts.DatabaseURL = pgtest.Start(t)
		testEnqueueIdempotencyKey(t, opts)
	})
}

func testEnqueueIdempotencyKey(t *testing.T, opts cluster.Options) {
	ctx := context.Background()
	ims := cluster.StartIMS(t, opts)
	cluster.NewInstall(t, ims.Admin(), "shop", "alpha")
	cluster.NewInstall(t, ims.Admin(), "shop", "beta")
	clients := map[string]imsv1connect.OperatorServiceClient{}
	for name, o := range map[string][]connect.ClientOption{
		"proto": nil, "json": {connect.WithProtoJSON()}, "grpc": {connect.WithGRPC()},
	} {
		clients[name] = imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), ims.URL(),
			append(o, connect.WithInterceptors(cluster.Bearer(ims.AdminToken)))...)
	}
	one := func(key, install string) *imsv1.EnqueueJobRequest {
		return &imsv1.EnqueueJobRequest{Install: install, ComponentType: "action", Operation: "apply",
			Config: actionConfig(t, "echo hi"), IdempotencyKey: key}
	}
	batch := func(key string) *imsv1.EnqueueJobsRequest {
		return &imsv1.EnqueueJobsRequest{IdempotencyKey: key, Jobs: []*imsv1.EnqueueJobRequest{one("", "alpha"), one("", "beta"), one("", "alpha")}}
	}
	count := func() int {
		t.Helper()
		r, err := ims.Admin().ListJobs(ctx, connect.NewRequest(&imsv1.ListJobsRequest{PageSize: 1000}))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Msg.Jobs)
	}
	batchIDs := func(c imsv1connect.OperatorServiceClient, req *imsv1.EnqueueJobsRequest) string {
		t.Helper()
		r, err := c.EnqueueJobs(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range r.Msg.Jobs {
			ids = append(ids, j.Id)
		}
		return strings.Join(ids, ",")
	}

	r, err := clients["proto"].EnqueueJob(ctx, connect.NewRequest(one("k-one", "alpha")))
	if err != nil {
		t.Fatal(err)
	}
	first := r.Msg.Job.Id
	want := batchIDs(clients["proto"], batch("k-batch"))
	if count() != 4 {
		t.Fatalf("%d jobs stored, want 4", count())
	}
	retry := func(when string) {
		t.Helper()
		for name, c := range clients {
			r, err := c.EnqueueJob(ctx, connect.NewRequest(one("k-one", "alpha")))
			if err != nil {
				t.Fatalf("%s: EnqueueJob retry over %s: %v", when, name, err)
			}
			if r.Msg.Job.Id != first {
				t.Errorf("%s: EnqueueJob retry over %s answered job %s, want %s", when, name, r.Msg.Job.Id, first)
			}
			if got := batchIDs(c, batch("k-batch")); got != want {
				t.Errorf("%s: EnqueueJobs retry over %s answered %s, want %s", when, name, got, want)
			}
		}
		if n := count(); n != 4 {
			t.Fatalf("%s: %d jobs stored after the retries, want 4", when, n)
		}
	}
	retry("before restart")
	ims.Restart(t)
	retry("after restart")

	// The key with anything else is another request: refused, naming the
	// field, and nothing stored.
	other := batch("k-batch")
	other.Jobs[1].Install = "alpha"
	for what, call := range map[string]func() error{
		"another install": func() error {
			_, err := ims.Admin().EnqueueJob(ctx, connect.NewRequest(one("k-one", "beta")))
			return err
		},
		"another batch": func() error { _, err := ims.Admin().EnqueueJobs(ctx, connect.NewRequest(other)); return err },
		"another method": func() error {
			_, err := ims.Admin().EnqueueJobs(ctx, connect.NewRequest(&imsv1.EnqueueJobsRequest{IdempotencyKey: "k-one", Jobs: []*imsv1.EnqueueJobRequest{one("", "alpha")}}))
			return err
		},
	} {
		err := call()
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "idempotency_key") {
			t.Errorf("%s with a used key: %v, want FailedPrecondition naming idempotency_key", what, err)
		}
	}
	if n := count(); n != 4 {
		t.Fatalf("%d jobs stored after refused requests, want 4", n)
	}

	// Malformed keys are refused before anything is stored.
	for what, call := range map[string]func() error{
		"idempotency_key": func() error {
			_, err := ims.Admin().EnqueueJob(ctx, connect.NewRequest(one("has space", "alpha")))
			return err
		},
		"idempotency_key ": func() error {
			_, err := ims.Admin().EnqueueJobs(ctx, connect.NewRequest(batch(strings.Repeat("k", 256))))
			return err
		},
		"jobs[1].idempotency_key": func() error {
			b := batch("k-fresh")
			b.Jobs[1].IdempotencyKey = "k-inner"
			_, err := ims.Admin().EnqueueJobs(ctx, connect.NewRequest(b))
			return err
		},
	} {
		field := strings.TrimSpace(what)
		err := call()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), field+":") {
			t.Errorf("%q: %v, want InvalidArgument naming %s", what, err, field)
		}
	}
	if n := count(); n != 4 {
		t.Fatalf("%d jobs stored after malformed keys, want 4", n)
	}
}

// dropFirstReply is a reverse proxy to imsd that, for each RPC in drop,
// forwards the first call and lets imsd answer it, then cuts the client's
// connection instead of passing the answer on: the job is stored, and the
// client never learns it. It records the idempotency key of every enqueue
// call it forwards.
type dropFirstReply struct {
	t        *testing.T
	upstream string
	client   *http.Client
	mu       sync.Mutex
	drop     map[string]bool // procedure suffix -> still to drop
	keys     []string
}

func (p *dropFirstReply) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if strings.HasSuffix(r.URL.Path, "/EnqueueJob") || strings.HasSuffix(r.URL.Path, "/EnqueueJobs") {
		var m interface{ GetIdempotencyKey() string }
		one, many := &imsv1.EnqueueJobRequest{}, &imsv1.EnqueueJobsRequest{}
		m = one
		if strings.HasSuffix(r.URL.Path, "/EnqueueJobs") {
			m = many
		}
		if err := proto.Unmarshal(body, m.(proto.Message)); err != nil {
			p.t.Errorf("proxy: %s body is not protobuf: %v", r.URL.Path, err)
		}
		p.mu.Lock()
		p.keys = append(p.keys, m.GetIdempotencyKey())
		p.mu.Unlock()
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	p.mu.Lock()
	drop := false
	for suffix, left := range p.drop {
		if left && strings.HasSuffix(r.URL.Path, "/"+suffix) {
			drop, p.drop[suffix] = true, false
		}
	}
	p.mu.Unlock()
	if drop {
		// imsd has answered (the jobs are stored); the client gets its
		// connection cut with no response.
		panic(http.ErrAbortHandler)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(reply) //nolint:errcheck // the client's problem
}

func (p *dropFirstReply) sentKeys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.keys)
}

// The byoc CLI retries an enqueue whose answer was lost with the key it
// sent, and imsd answers the retry with the job it already stored: one
// job, the id the CLI prints. The same for a batch on several installs.
func TestCLIRetriedEnqueueStoresOneJob(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	cluster.NewInstall(t, ims.Admin(), "shop", "globex")
	proxy := &dropFirstReply{t: t, upstream: ims.URL(), client: agent.DefaultHTTPClient(),
		drop: map[string]bool{"EnqueueJob": true, "EnqueueJobs": true}}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), srv.URL, ims.AdminToken)
	jobIDs := func() []string {
		t.Helper()
		r, err := ims.Admin().ListJobs(context.Background(), connect.NewRequest(&imsv1.ListJobsRequest{PageSize: 1000}))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range r.Msg.Jobs {
			ids = append(ids, j.Id)
		}
		slices.Sort(ids)
		return ids
	}

	out, e, code := cli.Exec("action", "run", "acme", "--", "echo", "once")
	if code != 0 {
		t.Fatalf("action run exited %d\nstdout:\n%s\nstderr:\n%s", code, out, e)
	}
	if !strings.Contains(e, "retrying in") {
		t.Errorf("the CLI did not say it retried:\n%s", e)
	}
	keys := proxy.sentKeys()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("keys sent %q, want one key sent twice (the lost call and its retry)", keys)
	}
	if ids := jobIDs(); len(ids) != 1 || ids[0] != strings.TrimSpace(out) {
		t.Fatalf("stored jobs %v, want exactly the one the CLI printed (%q)", ids, strings.TrimSpace(out))
	}

	out, e, code = cli.Exec("action", "run", "acme", "globex", "--", "echo", "twice")
	if code != 0 {
		t.Fatalf("action run on two installs exited %d\nstdout:\n%s\nstderr:\n%s", code, out, e)
	}
	keys = proxy.sentKeys()[2:]
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("batch keys sent %q, want one key sent twice", keys)
	}
	if ids := jobIDs(); len(ids) != 3 {
		t.Fatalf("%d jobs stored after a retried batch of 2, want 3: %v", len(ids), ids)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		id := strings.Fields(line)[0]
		if !slices.Contains(jobIDs(), id) {
			t.Errorf("the CLI printed job %s, which is not stored", id)
		}
	}
}
