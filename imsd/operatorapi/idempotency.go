package operatorapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// IdempotencyKeyTTL is how long an enqueue's idempotency key is kept: a
// retry within it with the same key returns the jobs first stored. A day,
// as Stripe keeps its keys: far longer than any client retries.
const IdempotencyKeyTTL = 24 * time.Hour

// keyRE is what an idempotency key may be: a UUID, a ULID, a random
// token in base64url or hex all fit.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,255}$`)

func checkIdempotencyKey(field, k string) error {
	if !keyRE.MatchString(k) {
		return errs.Field(field, "must be 1 to 255 letters, digits, '.', '_', ':' or '-' (a UUID fits), got %d bytes", len(k))
	}
	return nil
}

// enqueueKey makes the store's record of an enqueue request's key: m is
// the request with its key cleared, method the RPC's name. The request's
// hash covers the method, the caller's token name and m's deterministic
// encoding, so the key reused by another method, another caller or with
// any other field changed is a different request.
func (s *Service) enqueueKey(method, caller, k string, m proto.Message) (*store.EnqueueKey, error) {
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("hash request: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", method, caller)
	h.Write(wire)
	now := s.now()
	return &store.EnqueueKey{Key: k, RequestHash: hex.EncodeToString(h.Sum(nil)), At: now, ExpiresAt: now.Add(IdempotencyKeyTTL)}, nil
}
