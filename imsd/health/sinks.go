package health

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"
)

// Sink receives alerts.
type Sink interface {
	// Name names the sink in the outbox (webhook, slack).
	Name() string
	// Deliver sends one alert's body (AlertBody, JSON) at now; nil means
	// the receiver took it.
	Deliver(ctx context.Context, body []byte, now time.Time) error
}

// SignatureHeader carries a webhook alert's signature:
// "t=UNIX-SECONDS,v1=HEX", where HEX is HMAC-SHA256 under the shared
// secret of the seconds in decimal, a dot, and the body.
const SignatureHeader = "Byoc-Signature"

// AlertIDHeader carries the alert's id (as in the body).
const AlertIDHeader = "Byoc-Alert-Id"

// Webhook posts the alert's JSON, signed with a shared secret.
type Webhook struct {
	URL    string
	Secret []byte
	Client *http.Client
}

// Name implements Sink.
func (w *Webhook) Name() string { return "webhook" }

// Deliver implements Sink.
func (w *Webhook) Deliver(ctx context.Context, body []byte, now time.Time) error {
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &id)
	return post(ctx, w.Client, w.URL, body, map[string]string{
		SignatureHeader: Sign(w.Secret, body, now),
		AlertIDHeader:   id.ID,
	})
}

// Sign is the Byoc-Signature header of body sent at now.
func Sign(secret, body []byte, now time.Time) string {
	t := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(t))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "t=" + t + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a Byoc-Signature header against body at now: the MAC
// under secret, and a timestamp within tolerance of now (an older one is
// a replay). Receivers written in Go may use it.
func Verify(secret, body []byte, header string, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("signature header: no timestamp t=")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature timestamp is %s away from now (more than %s): a replay?", d.Round(time.Second), tolerance)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("signature does not match the body")
}

// Slack posts the alert as a Slack-compatible incoming webhook's text.
type Slack struct {
	URL    string
	Client *http.Client
}

// Name implements Sink.
func (s *Slack) Name() string { return "slack" }

// Deliver implements Sink.
func (s *Slack) Deliver(ctx context.Context, body []byte, _ time.Time) error {
	var a AlertBody
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("alert body: %w", err)
	}
	mark := ":red_circle:"
	switch {
	case a.Recovered:
		mark = ":large_green_circle:"
	case a.Health == "degraded":
		mark = ":large_yellow_circle:"
	}
	b, err := json.Marshal(map[string]string{"text": mark + " byoc: " + a.Description})
	if err != nil {
		return err
	}
	return post(ctx, s.Client, s.URL, b, nil)
}

func post(ctx context.Context, c *http.Client, url string, body []byte, headers map[string]string) error {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "byoc-imsd")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		// Not the url.Error: its text holds the whole URL.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %w", redactURL(url), err)
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s %s", redactURL(url), res.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// redactURL drops a URL's path and query (a Slack webhook's path is its
// secret) for errors.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
			return u[:i+3+j] + "/…"
		}
	}
	return u
}
