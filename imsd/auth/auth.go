// Package auth mints and checks the credentials imsd accepts: operator API
// tokens (bearer secrets with a role), single-use enrolment tokens, ids,
// and the nonces of agent challenges (the signature agents answer with is
// the protocol's, in rpc/agentproto). Secrets are stored only as SHA-256
// hashes.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// Token prefixes tell a leaked secret's kind at a glance (and let secret
// scanners find them).
const (
	APITokenPrefix    = "byoc_op_"
	EnrollTokenPrefix = "byoc_enr_"
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns prefix followed by 160 random bits, base32 encoded.
func NewSecret(prefix string) string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error()) // cannot happen on Linux
	}
	return prefix + strings.ToLower(b32.EncodeToString(b))
}

// NewID returns prefix followed by 80 random bits, base32 encoded. IDs are not
// secrets; they only have to be unique.
func NewID(prefix string) string {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(b32.EncodeToString(b))
}

// b32sort is base32 whose lower-case digits sort like the bytes they encode.
var b32sort = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewSortableID returns prefix followed by the millisecond of t (48 bits)
// and 80 random bits, base32 encoded so that IDs minted later sort later.
// Rows keyed by such IDs are appended to the end of their index rather
// than scattered over it: for jobs, fewer pages written per commit.
func NewSortableID(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(b32sort.EncodeToString(b[:]))
}

// Hash returns the hex SHA-256 of a secret, the form in which it is stored.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewNonce returns 32 random bytes for an agent challenge.
func NewNonce() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return b
}
