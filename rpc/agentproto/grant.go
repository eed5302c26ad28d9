package agentproto

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Registry grant exchange. An agent exchanges the one-time grant of an
// assignment at imsd's registry token endpoint with basic credentials:
// the user is its agent id, the password GrantExchangePassword: the
// grant's id and secret, a time, and the agent's signature of its id, the
// grant's id and the time. A grant copied off the wire or out of a log is
// worthless without the agent's key, and the time bounds a replay of the
// whole password (which the grant's single use refuses anyway).

// grantExchangeContext binds the signature to its purpose.
const grantExchangeContext = "byoc registry grant exchange v1\x00"

// GrantExchangeMessage is the byte string the agent signs.
func GrantExchangeMessage(agentID, grantID string, at time.Time) []byte {
	b := []byte(grantExchangeContext)
	b = appendString(b, agentID)
	b = appendString(b, grantID)
	return strconv.AppendInt(b, at.UnixMilli(), 10)
}

// GrantExchangePassword is the basic password for exchanging grant
// grantID (with its secret) at time at.
func GrantExchangePassword(key ed25519.PrivateKey, agentID, grantID, secret string, at time.Time) string {
	sig := ed25519.Sign(key, GrantExchangeMessage(agentID, grantID, at))
	return grantID + "." + secret + "." + strconv.FormatInt(at.UnixMilli(), 10) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// GrantExchange is a parsed exchange password.
type GrantExchange struct {
	GrantID, Secret string
	At              time.Time
	Signature       []byte
}

// ErrGrantPassword marks a password that is not a grant exchange.
var ErrGrantPassword = errors.New("not a grant exchange password (want GRANT.SECRET.UNIXMS.SIGNATURE)")

// ParseGrantExchangePassword reads a password GrantExchangePassword wrote.
func ParseGrantExchangePassword(p string) (GrantExchange, error) {
	parts := strings.Split(p, ".")
	if len(p) > 1024 || len(parts) != 4 || parts[0] == "" || parts[1] == "" {
		return GrantExchange{}, ErrGrantPassword
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return GrantExchange{}, fmt.Errorf("%w: time: %v", ErrGrantPassword, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return GrantExchange{}, fmt.Errorf("%w: signature", ErrGrantPassword)
	}
	return GrantExchange{GrantID: parts[0], Secret: parts[1], At: time.UnixMilli(ms), Signature: sig}, nil
}

// Verify checks the exchange's signature by pub for agentID.
func (g GrantExchange) Verify(pub ed25519.PublicKey, agentID string) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, GrantExchangeMessage(agentID, g.GrantID, g.At), g.Signature)
}
