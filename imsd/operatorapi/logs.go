package operatorapi

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// until the job has ended and every line it wrote has been sent.
func (s *Service) StreamJobLogs(ctx context.Context, req *connect.Request[imsv1.StreamJobLogsRequest], out *connect.ServerStream[imsv1.StreamJobLogsResponse]) error {
	m := req.Msg
	if m.JobId == "" {
		return s.err(ctx, errs.Field("job_id", "is required"))
	}
	if m.AfterAttempt < 0 || m.AfterSeq < 0 {
		return s.err(ctx, errs.Field("after_seq", "must not be negative"))
	}
	backwards := m.BeforeSeq != 0 || m.BeforeAttempt != 0
	switch {
	case m.BeforeAttempt < 0 || m.BeforeSeq < 0:
		return s.err(ctx, errs.Field("before_seq", "must not be negative"))
	case backwards && m.BeforeSeq == 0:
		return s.err(ctx, errs.Field("before_seq", "is required with before_attempt"))
	case backwards && m.Follow:
		return s.err(ctx, errs.Field("follow", "cannot be combined with before_seq"))
	case backwards && (m.AfterAttempt != 0 || m.AfterSeq != 0):
		return s.err(ctx, errs.Field("before_seq", "cannot be combined with after_seq"))
	case m.Tail < 0 || m.Tail > 10000:
		return s.err(ctx, errs.Field("tail", "must be between 0 and 10000"))
	case m.Tail > 0 && (backwards || m.AfterAttempt != 0 || m.AfterSeq != 0):
		return s.err(ctx, errs.Field("tail", "cannot be combined with after_seq or before_seq"))
	case m.Limit < 0 || m.Limit > 10000:
		return s.err(ctx, errs.Field("limit", "must be between 0 and 10000"))
	case m.Limit > 0 && m.Follow:
		return s.err(ctx, errs.Field("limit", "cannot be combined with follow"))
	}
	if _, err := s.store.GetJob(ctx, m.JobId); err != nil {
		return s.err(ctx, err)
	}
	attempt, seq := int(m.AfterAttempt), m.AfterSeq
	if backwards || m.Tail > 0 {
		limit := int(m.Limit)
		if m.Tail > 0 {
			limit = int(m.Tail)
		}
		lines, err := s.store.ListLogsBefore(ctx, m.JobId, int(m.BeforeAttempt), m.BeforeSeq, limit)
		if err != nil {
			return s.err(ctx, err)
		}
		for len(lines) > 0 {
			n := min(len(lines), logPage)
			if err := out.Send(&imsv1.StreamJobLogsResponse{Lines: linesToProto(lines[:n])}); err != nil {
				return err
			}
			last := lines[n-1]
			attempt, seq = last.Attempt, last.Seq
			lines = lines[n:]
		}
		if backwards {
			return nil
		}
		// A tail goes on like any stream, after its last line.
	}
	for first := true; ; first = false {
		// Take the signal before reading, so a line written between the
		// read and the wait still wakes us.
		signal := s.hub.LogSignal(m.JobId)
		if !first {
			// A revoked token, or the job's install relabelled out of
			// the caller's selector grant, ends the follow.
			if err := stillAllowed(ctx); err != nil {
				return err
			}
		}
		job, err := s.store.GetJob(ctx, m.JobId)
		if err != nil {
			return s.err(ctx, err)
		}
		left := int(m.Limit) // a forward page: at most this many lines
		for {
			page := logPage
			if m.Limit > 0 {
				if left == 0 {
					return nil
				}
				page = min(page, left)
			}
			lines, err := s.store.ListLogs(ctx, m.JobId, attempt, seq, page)
			if err != nil {
				return s.err(ctx, err)
			}
			if len(lines) == 0 {
				break
			}
			left -= len(lines)
			resp := &imsv1.StreamJobLogsResponse{Lines: linesToProto(lines)}
			if err := out.Send(resp); err != nil {
				return err
			}
			last := lines[len(lines)-1]
			attempt, seq = last.Attempt, last.Seq
			if len(lines) < page {
				break
			}
		}
		// The job was read before its lines: if it had ended then, every
		// line it will ever have has now been sent.
		if !m.Follow || job.State.Terminal() {
			if m.Follow {
				return out.Send(&imsv1.StreamJobLogsResponse{Job: s.jobToProto(ctx, job)})
			}
			return nil
		}
		t := time.NewTimer(s.cfg.FollowPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-signal:
		case <-t.C:
		}
		t.Stop()
	}
}

func linesToProto(lines []store.LogLine) []*imsv1.LogLine {
	out := make([]*imsv1.LogLine, len(lines))
	for i, l := range lines {
		out[i] = &imsv1.LogLine{Attempt: int32(l.Attempt), Seq: l.Seq, Time: timestamppb.New(l.Time), Stream: imsv1.LogStream(l.Stream), Text: l.Text}
	}
	return out
}

// WatchInstalls sends a snapshot of the fleet, then the installs that
// changed. It re-reads the fleet when the hub says something changed (at
// most every FleetCoalesce) and every FleetPoll, and sends only what differs
