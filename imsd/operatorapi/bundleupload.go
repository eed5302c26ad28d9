package operatorapi

// byoc bundle import-results for a results file larger than one call
// (ImportBundleResults takes one message of at most 4 MiB): the file
// comes in parts on one client stream, staged in an unlinked file, and
// is checked and recorded as a whole only once every part arrived.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/errs"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// Limits of UploadBundleResults: everything the caller controls is
// bounded before it costs imsd anything.
const (
	// MaxResultsUpload bounds a results file sent in parts.
	MaxResultsUpload = 256 << 20
	// MinResultsPart and MaxResultsPart bound a part (every part but
	// the last is the upload's part_size): at most 4096 parts, each
	// well under the 4 MiB a message may carry.
	MinResultsPart = 64 << 10
	MaxResultsPart = 2 << 20
	// ResultsPartWait is how long imsd waits for the next part, and
	// ResultsUploadTime for the whole upload, before it refuses it.
	ResultsPartWait   = 2 * time.Minute
	ResultsUploadTime = time.Hour
	// MaxResultsUploadsPerCaller and MaxResultsUploads bound the
	// uploads in progress on one imsd, per caller and in all (each
	// stages up to MaxResultsUpload bytes on disk).
	MaxResultsUploadsPerCaller = 2
	MaxResultsUploads          = 4
)

// DefaultResultsPart is the part size byoc bundle import-results sends.
const DefaultResultsPart = 1 << 20

// uploadSlots counts the uploads in progress, per caller.
type uploadSlots struct {
	mu       sync.Mutex
	byCaller map[string]int
	total    int
}

// take reserves a slot for the caller p, or says why there is none.
func (u *uploadSlots) take(p access.Principal) (func(), error) {
	// By credential, not name: two tokens may share a name.
	caller := p.Kind + ":" + p.ID
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byCaller[caller] >= MaxResultsUploadsPerCaller {
		return nil, errs.E(errs.Unavailable, "%s has %d uploads of results files in progress on this imsd already (at most %d at a time): let one end, then send this one again",
			p.Actor(), u.byCaller[caller], MaxResultsUploadsPerCaller)
	}
	if u.total >= MaxResultsUploads {
		return nil, errs.E(errs.Unavailable, "this imsd has %d uploads of results files in progress already (at most %d at a time): try again in a few minutes", u.total, MaxResultsUploads)
	}
	if u.byCaller == nil {
		u.byCaller = map[string]int{}
	}
	u.byCaller[caller]++
	u.total++
	return sync.OnceFunc(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.total--
		if u.byCaller[caller]--; u.byCaller[caller] <= 0 {
			delete(u.byCaller, caller)
		}
	}), nil
}

// readDeadlineKey carries a call's read deadline setter (ReadDeadlines).
type readDeadlineKey struct{}

// ReadDeadlines lets UploadBundleResults bound the wait for each part:
// it gives the handler its request's read deadline (a part that does
// not come in time ends the read, and the call), which a Connect
// handler cannot reach. Wrap the operator API's handler with it.
func ReadDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == imsv1connect.OperatorServiceUploadBundleResultsProcedure {
			rc := http.NewResponseController(w)
			r = r.WithContext(context.WithValue(r.Context(), readDeadlineKey{}, rc.SetReadDeadline))
		}
		next.ServeHTTP(w, r)
	})
}

// UploadBundleResults implements byoc bundle import-results for a file
// sent in parts.
func (s *Service) UploadBundleResults(ctx context.Context, st *connect.ClientStream[imsv1.UploadBundleResultsRequest]) (*connect.Response[imsv1.UploadBundleResultsResponse], error) {
	out, err := s.uploadResults(ctx, st)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.UploadBundleResultsResponse{Result: out}), nil
}

// uploadHeader is an upload's first message, checked.
type uploadHeader struct {
	install  string
	size     int64
	sum      string
	partSize int64
	parts    []string
}

// checkUploadHeader checks an upload's first message, naming the field.
func checkUploadHeader(m *imsv1.UploadBundleResultsRequest) (uploadHeader, error) {
	h := uploadHeader{install: m.Install, size: m.Size, sum: m.Sha256, partSize: m.PartSize, parts: m.PartSha256}
	switch {
	case m.Install == "":
		return h, errs.Field("install", "is required on the first message")
	case m.Part != 0 || len(m.Data) > 0:
		return h, errs.Field("part", "the first message names the upload and carries no part")
	case m.Size <= 0:
		return h, errs.Field("size", "must be positive")
	case m.Size > MaxResultsUpload:
		return h, errs.Field("size", "the results file is %d bytes (%s), more than the %s imsd takes", m.Size, mib(m.Size), mib(MaxResultsUpload))
	case !isSHA256(m.Sha256):
		return h, errs.Field("sha256", "%q is not a lowercase hex SHA-256", m.Sha256)
	case m.PartSize < MinResultsPart || m.PartSize > MaxResultsPart:
		return h, errs.Field("part_size", "%d bytes: a part is %d to %d bytes", m.PartSize, MinResultsPart, MaxResultsPart)
	}
	if want := (m.Size + m.PartSize - 1) / m.PartSize; int64(len(m.PartSha256)) != want {
		return h, errs.Field("part_sha256", "%d digests, and a file of %d bytes in parts of %d has %d parts", len(m.PartSha256), m.Size, m.PartSize, want)
	}
	for i, d := range m.PartSha256 {
		if !isSHA256(d) {
			return h, errs.Field(fmt.Sprintf("part_sha256[%d]", i), "%q is not a lowercase hex SHA-256", d)
		}
	}
	return h, nil
}

func isSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && hex.EncodeToString(b) == s
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func (s *Service) uploadResults(ctx context.Context, st *connect.ClientStream[imsv1.UploadBundleResultsRequest]) (*imsv1.ImportBundleResultsResponse, error) {
	setDeadline, _ := ctx.Value(readDeadlineKey{}).(func(time.Time) error)
	// wait bounds the next read by the part wait and the upload's end:
	// the connection's deadlines, on the wall clock (not s.now's).
	partWait := cmp.Or(s.cfg.ResultsPartWait, ResultsPartWait)
	wallEnd := time.Now().Add(ResultsUploadTime)
	wait := func() {
		if setDeadline != nil {
			d := time.Now().Add(partWait)
			if d.After(wallEnd) {
				d = wallEnd
			}
			setDeadline(d)
		}
	}
	wait()
	if !st.Receive() {
		if err := st.Err(); err != nil {
			return nil, err
		}
		return nil, errs.Field("install", "the upload ended before its first message")
	}
	h, err := checkUploadHeader(st.Msg())
	if err != nil {
		return nil, err
	}
	// The header was checked against the caller's rights on the install
	// (rules.go, on the first message); the caller's uploads are
	// counted from here.
	release, err := s.uploads.take(callerFrom(ctx))
	if err != nil {
		return nil, err
	}
	defer release()
	refuse := func(format string, args ...any) error {
		return errs.E(errs.Invalid, "results upload refused, nothing was recorded: "+format, args...)
	}
	// Staged in an unlinked file: only this call can read it, and it
	// goes with the call, or with imsd if imsd stops.
	f, done, err := stagingFile()
	if err != nil {
		return nil, err
	}
	defer done()
	whole := sha256.New()
	var part hash.Hash = sha256.New()
	n := len(h.parts)
	for i := range n {
		wait()
		if !st.Receive() {
			err := st.Err()
			var ne interface{ Timeout() bool }
			switch {
			case err == nil:
				return nil, refuse("parts %d to %d of %d missing: the upload ended after part %d", i+1, n, n, i)
			case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded):
				if time.Now().After(wallEnd) {
					return nil, refuse("the upload was not done within %s (%d of %d parts came): abandoned", ResultsUploadTime, i, n)
				}
				return nil, refuse("no part for %s after part %d of %d: the upload was abandoned", partWait, i, n)
			default:
				s.log.InfoContext(ctx, "results upload broke", "install", h.install, "part", i+1, "parts", n, "err", err)
				return nil, refuse("the upload broke after part %d of %d", i, n)
			}
		}
		if err := uploadStillAllowed(ctx); err != nil {
			return nil, err
		}
		m := st.Msg()
		if m.Part != int32(i+1) {
			if m.Part > int32(i+1) {
				return nil, refuse("part %d of %d missing: part %d came after part %d", i+1, n, m.Part, i)
			}
			return nil, refuse("part %d of %d came after part %d: parts are sent once each, in order", m.Part, n, i)
		}
		if m.Install != "" || m.Size != 0 || m.Sha256 != "" || m.PartSize != 0 || len(m.PartSha256) > 0 {
			return nil, refuse("part %d of %d: only the first message names the upload", i+1, n)
		}
		want := h.partSize
		if i == n-1 {
			want = h.size - int64(n-1)*h.partSize
		}
		if int64(len(m.Data)) != want {
			return nil, refuse("part %d of %d: %d bytes, want %d", i+1, n, len(m.Data), want)
		}
		part.Reset()
		part.Write(m.Data)
		if got := hex.EncodeToString(part.Sum(nil)); got != h.parts[i] {
			return nil, refuse("part %d of %d (bytes %d to %d): sha256 %s, and the upload's first message said %s: changed on the way", i+1, n,
				int64(i)*h.partSize, int64(i)*h.partSize+want-1, got, h.parts[i])
		}
		whole.Write(m.Data)
		if _, err := f.Write(m.Data); err != nil {
			return nil, err
		}
	}
	wait()
	if st.Receive() {
		return nil, refuse("a message came after the last part (%d)", n)
	} else if err := st.Err(); err != nil {
		return nil, err
	}
	if setDeadline != nil {
		setDeadline(time.Time{})
	}
	var sum [sha256.Size]byte
	whole.Sum(sum[:0])
	if got := hex.EncodeToString(sum[:]); got != h.sum {
		return nil, refuse("the file's sha256 is %s, and the upload's first message said %s", got, h.sum)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := uploadStillAllowed(ctx); err != nil {
		return nil, err
	}
	return s.importResults(ctx, h.install, f, sum)
}

// uploadStillAllowed checks the caller of an upload again, as each part
// comes and before anything is recorded (stillAllowed: the rule checked
// the first message only, and an upload may last an hour): a token
// revoked or expired mid-upload, a single sign-on ID token expired, or
// a grant that no longer covers the install stops it, nothing recorded.
func uploadStillAllowed(ctx context.Context) error {
	err := stillAllowed(ctx)
	var ce *connect.Error
	if errors.As(err, &ce) {
		return connect.NewError(ce.Code(), fmt.Errorf("results upload refused, nothing was recorded: %s", ce.Message()))
	}
	return err
}

// unlinkedFile is a temporary file removed from its directory as soon
// as it is made (where the system refuses to remove an open file, when
// done closes it).
func unlinkedFile() (*os.File, func(), error) {
	f, err := os.CreateTemp("", "byoc-results-upload-")
	if err != nil {
		return nil, nil, err
	}
	if os.Remove(f.Name()) == nil {
		return f, func() { f.Close() }, nil
	}
	return f, func() {
		f.Close()
		os.Remove(f.Name())
	}, nil
}
