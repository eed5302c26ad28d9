package operatorapi

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc agent update --withdraw takes back the install's standing offer
// (once), and asks for no release; --offer and --reason go with it only.
func TestWithdrawAgentUpdate(t *testing.T) {
	ctx := context.Background()
	s, st, _, t0 := bundleService(t)
	pub, _, _ := ed25519.GenerateKey(nil)
	if _, err := st.Enroll(ctx, "h", store.Agent{ID: "ag-1", PublicKey: pub, Hostname: "host", Version: "v1"}, t0); err != nil {
		t.Fatal(err)
	}
	call := func(m *imsv1.OfferAgentUpdateRequest) (*imsv1.OfferAgentUpdateResponse, error) {
		r, err := s.OfferAgentUpdate(ctx, connect.NewRequest(m))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	if _, err := call(&imsv1.OfferAgentUpdateRequest{Install: "acme", Withdraw: true}); err == nil || !strings.Contains(err.Error(), "no agent update offer standing") {
		t.Fatalf("nothing to withdraw: %v", err)
	}
	rel := "oci://reg.example/byoc/agent@sha256:" + strings.Repeat("ab", 32)
	offered, err := call(&imsv1.OfferAgentUpdateRequest{Install: "acme", Release: rel})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		req  *imsv1.OfferAgentUpdateRequest
		want string
	}{
		{&imsv1.OfferAgentUpdateRequest{Install: "acme", Withdraw: true, Release: rel}, "release"},
		{&imsv1.OfferAgentUpdateRequest{Install: "acme", Release: rel, Reason: "why"}, "offer_id"},
		{&imsv1.OfferAgentUpdateRequest{Install: "acme", Withdraw: true, OfferId: "uo_other"}, "no agent with offer uo_other"},
	} {
		if _, err := call(bad.req); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.req, err, bad.want)
		}
	}
	got, err := call(&imsv1.OfferAgentUpdateRequest{Install: "acme", Withdraw: true, Reason: "crashes on arm64"})
	if err != nil || got.GetOfferId() != offered.GetOfferId() || strings.Join(got.GetAgentIds(), ",") != "ag-1" {
		t.Fatalf("withdraw: %v %v", got, err)
	}
	a, err := st.GetAgent(ctx, "ag-1")
	if err != nil || !a.UpdateOffer.Withdrawn() || a.UpdateOffer.WithdrawReason != "crashes on arm64" || !a.UpdateOffer.WithdrawnAt.Equal(t0) {
		t.Fatalf("offer: %+v %v", a.UpdateOffer, err)
	}
	if _, err := call(&imsv1.OfferAgentUpdateRequest{Install: "acme", Withdraw: true}); err == nil {
		t.Fatal("withdrawn twice")
	}
}
