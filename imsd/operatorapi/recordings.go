package operatorapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/asciicast"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// recordingTitle is the title the agent gives a recording (agentd/agent
// shell.go): the session and its operator.
var recordingTitle = regexp.MustCompile(`^byoc support session \S+ by (.+)$`)

// supportRecordingToProto describes a kept recording; its operator,
// start and end come from the recording itself (left empty when it
// cannot be read).
func supportRecordingToProto(r store.SessionRecording) *imsv1.SupportRecording {
	p := &imsv1.SupportRecording{SessionId: r.SessionID, InstallId: r.InstallID, AgentId: r.AgentID, Size: int64(len(r.Data)), Sha256: r.SHA256}
	h, evs, err := asciicast.Read(bytes.NewReader(r.Data))
	if err != nil {
		return p
	}
	if m := recordingTitle.FindStringSubmatch(h.Title); m != nil {
		p.Operator = m[1]
	}
	start := time.Unix(h.Timestamp, 0).UTC()
	p.StartTime = timestamppb.New(start)
	end := start
	if len(evs) > 0 {
		end = start.Add(time.Duration(evs[len(evs)-1].Time * float64(time.Second)))
	}
	p.EndTime = timestamppb.New(end)
	return p
}

// ListSupportRecordings lists the recordings kept of an install's
// support sessions.
func (s *Service) ListSupportRecordings(ctx context.Context, req *connect.Request[imsv1.ListSupportRecordingsRequest]) (*connect.Response[imsv1.ListSupportRecordingsResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	recs, err := s.store.ListSessionRecordings(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListSupportRecordingsResponse{}
	for _, r := range recs {
		// The SHA-256 listed is the one play checks (GetSupportRecording):
		// the audit chain's, with the bytes checked against it here, so
		// that the list says which recordings play would refuse.
		kept, err := s.store.SessionRecordingKeptSHA256(ctx, r.InstallID, r.SessionID)
		if err != nil && !errs.Is(err, errs.NotFound) {
			return nil, s.err(ctx, err)
		}
		p := supportRecordingToProto(r)
		sum := sha256.Sum256(r.Data)
		p.Sha256, p.Tampered = kept, kept == "" || hex.EncodeToString(sum[:]) != kept
		out.Recordings = append(out.Recordings, p)
	}
	return connect.NewResponse(out), nil
}

// KindRecordingRead is the audit kind of a read of a kept recording.
const KindRecordingRead = "support.session.recording_read"

// GetSupportRecording returns one kept recording with its stored
// SHA-256, which the caller checks before playing it. A recording is
// what the customer's terminal showed: each read is audited in the
// install's chain (who, which session, which bytes) before the bytes
// leave, and refused when the record cannot be written.
func (s *Service) GetSupportRecording(ctx context.Context, req *connect.Request[imsv1.GetSupportRecordingRequest]) (*connect.Response[imsv1.GetSupportRecordingResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	r, err := s.store.GetSessionRecording(ctx, req.Msg.Id)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	// The SHA-256 the caller checks is the one the install's audit chain
	// recorded when imsd kept the recording, not the row's own column:
	// whoever alters the row's bytes can alter its column in the same
	// write, but not the append-only, hash-chained record without
	// byoc audit verify (and the agent's copy of the chain) seeing it.
	kept, err := s.store.SessionRecordingKeptSHA256(ctx, r.InstallID, r.SessionID)
	if errs.Is(err, errs.NotFound) {
		err = errs.E(errs.Conflict, "recording of support session %s is tampered with: %v; not sent", r.SessionID, err)
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if err := s.store.RecordAudit(ctx, store.AuditEvent{Chain: r.InstallID, At: s.now(), Kind: KindRecordingRead,
		Actor: callerFrom(ctx).Actor(), Subject: r.SessionID,
		Data: map[string]string{"recording_sha256": r.SHA256, "size": strconv.Itoa(len(r.Data))}}); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("cannot write the audit record of this read, so the recording was not sent; try again"))
	}
	rec := supportRecordingToProto(r)
	rec.Sha256 = kept
	return connect.NewResponse(&imsv1.GetSupportRecordingResponse{Recording: rec, Data: r.Data}), nil
}
