package awsfake

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// KMS is a local fake of the AWS KMS calls a build agent's signing key
// makes (agentd/kmskey): GetPublicKey and Sign, in KMS's JSON 1.1
// protocol (X-Amz-Target TrentService.*), over TLS (an awskms://ENDPOINT
// URI is reached by https; give the client Server.Client()). It holds
// asymmetric keys by id and ARN and checks what a real KMS would refuse:
// an unknown key, a key whose usage is not SIGN_VERIFY, a signing
// algorithm the key's spec does not have, a message type other than RAW
// for an Ed25519 key, a message outside 1..4096 bytes, an unsigned call.
type KMS struct {
	Server *httptest.Server
	// Region and Account make the keys' ARNs.
	Region, Account string

	mu    sync.Mutex
	keys  map[string]*KMSKey
	calls []Call
}

// KMSKey is one key of the fake.
type KMSKey struct {
	ID, ARN string
	// Spec is the KeySpec (ECC_NIST_EDWARDS25519, ECC_NIST_P256, ...)
	// and Usage the KeyUsage (SIGN_VERIFY, ENCRYPT_DECRYPT).
	Spec, Usage string
	// Signer is the private key: ed25519 for ECC_NIST_EDWARDS25519,
	// ECDSA P-256 for any other spec (only its public key is used).
	Signer crypto.Signer
	// SignError, when set, is the error type every Sign call on the key
	// answers (as a disabled key answers DisabledException).
	SignError, SignErrorMessage string
}

// NewKMS starts the fake; its server closes with the test.
func NewKMS(tb testing.TB) *KMS {
	tb.Helper()
	k := &KMS{Region: "eu-west-1", Account: "111122223333", keys: map[string]*KMSKey{}}
	k.Server = httptest.NewTLSServer(http.HandlerFunc(k.serve))
	tb.Cleanup(k.Server.Close)
	return k
}

// Endpoint is the host:port of an awskms://ENDPOINT/KEY URI.
func (k *KMS) Endpoint() string { return strings.TrimPrefix(k.Server.URL, "https://") }

// AddKey creates a key of spec and usage.
func (k *KMS) AddKey(spec, usage string) *KMSKey {
	key := &KMSKey{ID: random(8) + "-" + random(4), Spec: spec, Usage: usage}
	key.ARN = fmt.Sprintf("arn:aws:kms:%s:%s:key/%s", k.Region, k.Account, key.ID)
	if spec == "ECC_NIST_EDWARDS25519" {
		_, key.Signer, _ = ed25519.GenerateKey(rand.Reader)
	} else {
		key.Signer, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys[key.ID], k.keys[key.ARN] = key, key
	return key
}

// FailSign makes every later Sign call on key answer error typ.
func (k *KMS) FailSign(key *KMSKey, typ, msg string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key.SignError, key.SignErrorMessage = typ, msg
}

// Calls are the calls the fake answered; Params["body"] is the JSON body.
func (k *KMS) Calls() []Call {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Call(nil), k.calls...)
}

func (k *KMS) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	target := r.Header.Get("X-Amz-Target")
	c := Call{Service: "kms", Action: strings.TrimPrefix(target, "TrentService."), AccessKeyID: caller(r), Params: url.Values{"body": {string(body)}}}
	answer := func(status int, v any) {
		c.Status = status
		k.mu.Lock()
		k.calls = append(k.calls, c)
		k.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v) //nolint:errcheck // test server
	}
	fail := func(typ, msg string) { answer(400, map[string]string{"__type": typ, "message": msg}) }
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		fail("SerializationException", "want a JSON 1.1 POST")
		return
	}
	if c.AccessKeyID == "" {
		fail("MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	var in struct {
		KeyId, MessageType, SigningAlgorithm string
		Message                              []byte
	}
	if err := json.Unmarshal(body, &in); err != nil || in.KeyId == "" {
		fail("ValidationException", "1 validation error detected: Value null at 'keyId' failed to satisfy constraint: Member must not be null")
		return
	}
	k.mu.Lock()
	key := k.keys[in.KeyId]
	k.mu.Unlock()
	if key == nil {
		fail("NotFoundException", fmt.Sprintf("Key '%s' does not exist", in.KeyId))
		return
	}
	algs := []string{"ECDSA_SHA_256"}
	if key.Spec == "ECC_NIST_EDWARDS25519" {
		algs = []string{"ED25519_SHA_512", "ED25519_PH_SHA_512"}
	}
	switch c.Action {
	case "GetPublicKey":
		der, _ := x509.MarshalPKIXPublicKey(key.Signer.Public())
		out := map[string]any{"KeyId": key.ARN, "PublicKey": der, "KeySpec": key.Spec, "KeyUsage": key.Usage}
		if key.Usage == "SIGN_VERIFY" {
			out["SigningAlgorithms"] = algs
		} else {
			out["EncryptionAlgorithms"] = []string{"SYMMETRIC_DEFAULT"}
		}
		answer(200, out)
	case "Sign":
		switch {
		case key.Usage != "SIGN_VERIFY":
			fail("InvalidKeyUsageException", fmt.Sprintf("%s key usage is %s which is not valid for Sign.", key.ARN, key.Usage))
		case in.SigningAlgorithm != algs[0] && in.SigningAlgorithm != algs[len(algs)-1]:
			fail("InvalidKeyUsageException", fmt.Sprintf("Signing algorithm %s is not compatible with key spec %s.", in.SigningAlgorithm, key.Spec))
		case key.Spec == "ECC_NIST_EDWARDS25519" && in.SigningAlgorithm == "ED25519_SHA_512" && in.MessageType != "RAW":
			fail("ValidationException", "ED25519_SHA_512 requires MessageType RAW")
		case len(in.Message) < 1 || len(in.Message) > 4096:
			fail("ValidationException", "1 validation error detected: Value at 'message' failed to satisfy constraint: Member must have length less than or equal to 4096")
		case key.SignError != "":
			fail(key.SignError, key.SignErrorMessage)
		case in.SigningAlgorithm != "ED25519_SHA_512":
			fail("UnsupportedOperationException", "the fake signs with ED25519_SHA_512 only")
		default:
			sig := ed25519.Sign(key.Signer.(ed25519.PrivateKey), in.Message)
			answer(200, map[string]any{"KeyId": key.ARN, "Signature": sig, "SigningAlgorithm": in.SigningAlgorithm})
		}
	default:
		fail("UnknownOperationException", "unknown operation "+target)
	}
}
