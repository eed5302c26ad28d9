package operatorapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// uploadClient serves s over HTTP as imsd does (4 MiB a message, each
// part's wait bounded), as caller ops, and returns a client of it. http1
// picks HTTP/1.1, else unencrypted HTTP/2.
func uploadClient(t *testing.T, s *Service, http1 bool) imsv1connect.OperatorServiceClient {
	t.Helper()
	return uploadClientAuth(t, s, http1, nil, "")
}

// uploadClientAuth is uploadClient with its calls through authn,
// presenting bearer (authn nil: the caller is ops, no check).
func uploadClientAuth(t *testing.T, s *Service, http1 bool, authn *Authenticator, bearer string) imsv1connect.OperatorServiceClient {
	t.Helper()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(callLimit)}
	if authn != nil {
		opts = append(opts, connect.WithInterceptors(authn))
	}
	_, h := imsv1connect.NewOperatorServiceHandler(s, opts...)
	srv := httptest.NewUnstartedServer(ReadDeadlines(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authn != nil {
			r.Header.Set("Authorization", "Bearer "+bearer)
			h.ServeHTTP(w, r)
			return
		}
		p := access.Principal{Kind: "token", ID: "tok-1", Name: "ops", Grants: []access.Grant{{Role: access.Admin}}}
		h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), p)))
	})))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if http1 {
		tr.Protocols.SetHTTP1(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return imsv1connect.NewOperatorServiceClient(&http.Client{Transport: tr}, srv.URL)
}

// uploadOf is file's upload in parts of partSize: its first message and
// its parts.
func uploadOf(file []byte, partSize int) (*imsv1.UploadBundleResultsRequest, []*imsv1.UploadBundleResultsRequest) {
	whole := sha256.Sum256(file)
	head := &imsv1.UploadBundleResultsRequest{Install: "acme", Size: int64(len(file)), Sha256: hex.EncodeToString(whole[:]), PartSize: int64(partSize)}
	var parts []*imsv1.UploadBundleResultsRequest
	for c := range slices.Chunk(file, partSize) {
		s := sha256.Sum256(c)
		head.PartSha256 = append(head.PartSha256, hex.EncodeToString(s[:]))
		parts = append(parts, &imsv1.UploadBundleResultsRequest{Part: int32(len(parts) + 1), Data: c})
	}
	return head, parts
}

// send sends msgs on a new upload and returns imsd's answer.
func send(c imsv1connect.OperatorServiceClient, msgs ...*imsv1.UploadBundleResultsRequest) (*imsv1.ImportBundleResultsResponse, error) {
	st := c.UploadBundleResults(context.Background())
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break
		}
	}
	res, err := st.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg.Result, nil
}

// A results file larger than one call (an agent whose journal outgrew 4
// MiB before its first results were imported) is refused in one call
// and imports in parts, over HTTP/2 and HTTP/1.1; sent again it changes
// nothing and says so.
func TestUploadResultsOverOneCall(t *testing.T) {
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a := auth.NewSortableID("bdl_", t0)
	files := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{pad: map[string]int{a: 100}, padBytes: 64 << 10}, a)
	file := files[a]
	if len(file) <= callLimit {
		t.Fatalf("the results file is %d bytes, want more than %d", len(file), callLimit)
	}
	c := uploadClient(t, s, false)
	_, err := c.ImportBundleResults(context.Background(), connect.NewRequest(&imsv1.ImportBundleResultsRequest{Install: "acme", File: file}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("the file in one call: %v, want it refused as too large", err)
	}
	head, parts := uploadOf(file, DefaultResultsPart)
	out, err := send(c, append([]*imsv1.UploadBundleResultsRequest{head}, parts...)...)
	if err != nil || out.AlreadyImported || out.JournalRecords != 102 || out.Jobs != 1 || out.WorkflowState != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("the file in %d parts: %v, %v", len(parts), out, err)
	}
	if _, _, err := st.GetWorkflow(context.Background(), out.WorkflowId); err != nil {
		t.Fatalf("the upload's workflow: %v", err)
	}
	out, err = send(uploadClient(t, s, true), append([]*imsv1.UploadBundleResultsRequest{head}, parts...)...)
	if err != nil || !out.AlreadyImported {
		t.Fatalf("the same file again, over HTTP/1.1: %v, %v", out, err)
	}
}

// An upload refused, naming the part or the limit, records nothing and
// leaves no staged file: a part changed, left out, sent twice or of the
// wrong size; the upload ended early or abandoned; a file over the
// limit; parts that match their digests but not the whole's; and a
// file whose parts all came but whose content is not what the agent
// signed. The caller's uploads in progress are bounded.
func TestUploadResultsRefused(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, st, key, t0 := bundleService(t)
	s.cfg.ResultsPartWait = 300 * time.Millisecond
	ag, agentKey := resultsAgent(t, s, st, t0)
	a := auth.NewSortableID("bdl_", t0)
	file := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{pad: map[string]int{a: 20}, padBytes: 64 << 10}, a)[a]
	c := uploadClient(t, s, false)
	const part = 256 << 10
	head, parts := uploadOf(file, part)
	n := len(parts)
	if n < 5 {
		t.Fatalf("%d parts, want 5 or more", n)
	}
	all := func(edit func(head *imsv1.UploadBundleResultsRequest, parts []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
		h := proto.Clone(head).(*imsv1.UploadBundleResultsRequest)
		ps := make([]*imsv1.UploadBundleResultsRequest, n)
		for i, p := range parts {
			ps[i] = &imsv1.UploadBundleResultsRequest{Part: p.Part, Data: slices.Clone(p.Data)}
		}
		return append([]*imsv1.UploadBundleResultsRequest{h}, edit(h, ps)...)
	}
	flipped := slices.Clone(file)
	flipped[len(flipped)/2] ^= 1
	fh, fparts := uploadOf(flipped, part)
	for _, tc := range []struct {
		name string
		msgs []*imsv1.UploadBundleResultsRequest
		want string
	}{
		{"part 3 changed", all(func(_ *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			ps[2].Data[10] ^= 1
			return ps
		}), "part 3 of " + strconv.Itoa(n) + " (bytes 524288 to 786431): sha256 "},
		{"part 3 left out", all(func(_ *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			return append(ps[:2], ps[3:]...)
		}), "part 3 of " + strconv.Itoa(n) + " missing: part 4 came after part 2"},
		{"part 2 twice", all(func(_ *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			return append(ps[:2], ps[1:]...)
		}), "part 2 of " + strconv.Itoa(n) + " came after part 2: parts are sent once each, in order"},
		{"part 1 short", all(func(_ *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			ps[0].Data = ps[0].Data[:100]
			return ps
		}), "part 1 of " + strconv.Itoa(n) + ": 100 bytes, want 262144"},
		{"ended after part 2", all(func(_ *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			return ps[:2]
		}), "parts 3 to " + strconv.Itoa(n) + " of " + strconv.Itoa(n) + " missing: the upload ended after part 2"},
		{"over the limit", all(func(h *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			h.Size = MaxResultsUpload + 1
			return ps
		}), "size: the results file is 268435457 bytes (256.0 MiB), more than the 256 MiB imsd takes"},
		{"parts too small", all(func(h *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			h.PartSize = 1024
			return ps
		}), "part_size: 1024 bytes: a part is 65536 to 2097152 bytes"},
		{"too few digests", all(func(h *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			h.PartSha256 = h.PartSha256[1:]
			return ps
		}), "part_sha256: " + strconv.Itoa(n-1) + " digests, and a file of "},
		{"the whole's digest not the parts'", all(func(h *imsv1.UploadBundleResultsRequest, ps []*imsv1.UploadBundleResultsRequest) []*imsv1.UploadBundleResultsRequest {
			h.Sha256 = strings.Repeat("0", 64)
			return ps
		}), "the file's sha256 is "},
		{"content not what the agent signed", append([]*imsv1.UploadBundleResultsRequest{fh}, fparts...), "results file refused, nothing was recorded: journal.jsonl: sha256 "},
	} {
		_, err := send(c, tc.msgs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if tc.name != "over the limit" && tc.name != "parts too small" && tc.name != "too few digests" && !strings.Contains(err.Error(), "nothing was recorded") {
			t.Errorf("%s: %v, want it to say nothing was recorded", tc.name, err)
		}
	}

	// Abandoned after part 1: refused once the part wait passed; nothing
	// was staged where anyone (or a restarted imsd) could find it, even
	// while the upload was in progress.
	up := c.UploadBundleResults(context.Background())
	if err := up.Send(head); err != nil {
		t.Fatal(err)
	}
	if err := up.Send(parts[0]); err != nil {
		t.Fatal(err)
	}
	waitUploads(t, s, 1)
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Fatalf("an upload in progress left %v in the temporary directory", ents)
	}
	time.Sleep(time.Second)
	_, err := up.CloseAndReceive()
	if err == nil || !strings.Contains(err.Error(), "no part for 300ms after part 1 of "+strconv.Itoa(n)+": the upload was abandoned") {
		t.Fatalf("abandoned upload: %v", err)
	}
	waitUploads(t, s, 0)

	// Two uploads of one caller at once, and a third is refused.
	s.cfg.ResultsPartWait = time.Minute
	var open []*connect.ClientStreamForClient[imsv1.UploadBundleResultsRequest, imsv1.UploadBundleResultsResponse]
	for range MaxResultsUploadsPerCaller {
		up := c.UploadBundleResults(context.Background())
		if err := up.Send(head); err != nil {
			t.Fatal(err)
		}
		open = append(open, up)
	}
	waitUploads(t, s, MaxResultsUploadsPerCaller)
	if _, err := send(c, head); err == nil || !strings.Contains(err.Error(), "token:ops has 2 uploads of results files in progress on this imsd already (at most 2 at a time)") {
		t.Fatalf("a third upload at once: %v", err)
	}
	for _, up := range open {
		up.CloseAndReceive()
	}
	waitUploads(t, s, 0)

	if _, _, err := st.GetWorkflow(context.Background(), "wf_"+strings.TrimPrefix(a, "bdl_")); !errs.Is(err, errs.NotFound) {
		t.Fatalf("a refused upload left a workflow: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Fatalf("refused uploads left %v in the temporary directory", ents)
	}
	// And the file itself imports.
	if out, err := send(c, append([]*imsv1.UploadBundleResultsRequest{head}, parts...)...); err != nil || out.AlreadyImported {
		t.Fatalf("the file after the refusals: %v, %v", out, err)
	}
}

// An upload whose token is revoked mid-upload stops at its next part,
// the caller told why, and records nothing: the rule checked only the
// first message, and an upload may last an hour.
func TestUploadResultsStopsWhenItsTokenIsRevoked(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a := auth.NewSortableID("bdl_", t0)
	file := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{pad: map[string]int{a: 20}, padBytes: 64 << 10}, a)[a]
	const secret = auth.APITokenPrefix + "uploader-secret"
	if err := st.CreateAPIToken(ctx, store.APIToken{ID: "tok-up", Name: "uploader", Role: store.RoleOperator, CreatedAt: t0, CreatedBy: "test"}, auth.Hash(secret)); err != nil {
		t.Fatal(err)
	}
	authn := NewAuthenticator(st, time.Now, nil, nil)
	c := uploadClientAuth(t, s, false, authn, secret)
	head, parts := uploadOf(file, 256<<10)
	up := c.UploadBundleResults(ctx)
	for _, m := range append([]*imsv1.UploadBundleResultsRequest{head}, parts[:2]...) {
		if err := up.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	waitUploads(t, s, 1)
	if _, err := st.RevokeAPIToken(ctx, "uploader", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	authn.Forget()
	for _, m := range parts[2:] {
		if up.Send(m) != nil {
			break
		}
	}
	_, err := up.CloseAndReceive()
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "nothing was recorded") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("upload after its token's revocation: %v", err)
	}
	if _, _, err := st.GetWorkflow(ctx, "wf_"+strings.TrimPrefix(a, "bdl_")); !errs.Is(err, errs.NotFound) {
		t.Fatalf("the upload left a workflow: %v", err)
	}
}

// waitUploads waits until n uploads are in progress on s.
func waitUploads(t *testing.T, s *Service, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.uploads.mu.Lock()
		got := s.uploads.total
		s.uploads.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d uploads in progress, want %d", got, n)
		}
	}
}
