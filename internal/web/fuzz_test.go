package web_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/web"
)

// checkParsed holds every parser to the same contract: an error is a
// *Rejection with a 4xx status; accepted events name their provider and an
// event id and carry a known type or none (not tracked).
func checkParsed(t *testing.T, provider string, evs []store.DeliveryEvent, err error) {
	t.Helper()
	if err != nil {
		var rej *web.Rejection
		if !errors.As(err, &rej) || rej.Status < 400 || rej.Status > 499 || rej.Reason == "" {
			t.Fatalf("error %v is not a 4xx *Rejection", err)
		}
		// Only a Mailgun token whose signature verified comes back with
		// an error: one untyped event, to be recorded as spent.
		if evs != nil && (provider != web.ProviderMailgun || len(evs) != 1 || evs[0].Type != "" || evs[0].EventID == "") {
			t.Fatalf("events returned with an error: %v", evs)
		}
		return
	}
	if len(evs) == 0 {
		t.Fatal("accepted with no events")
	}
	for _, ev := range evs {
		if ev.Provider != provider || ev.EventID == "" || (ev.Type != "" && !ev.Type.Valid()) || ev.OccurredAt.IsZero() {
			t.Fatalf("accepted a bad event %+v", ev)
		}
		if ev.Type != "" && ev.MessageID == "" {
			t.Fatalf("accepted a ledger event without a Message-ID: %+v", ev)
		}
	}
}

func FuzzParseGeneric(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	f.Add([]byte(`{"events":[{"id":"a","type":"delivered","message_id":"<x@y>","occurred_at":"2030-01-01T00:00:00Z"}]}`), "", int64(0))
	f.Add([]byte(`{"events":[{"id":"a","type":"bounced","message_id":"m","occurred_at":"2030-01-01T00:00:00.5+02:00","detail":"550"}]} `), "v1=00", int64(-299))
	f.Add([]byte(`{"events":null}`), "v1=zz,v1=", int64(301))
	f.Add([]byte(`[`), "", int64(0))
	f.Fuzz(func(t *testing.T, body []byte, sig string, skew int64) {
		secrets := [][]byte{genericKey}
		ts := now.Unix() + skew%1000
		h := http.Header{}
		h.Set(web.GenericTimestampHeader, strconv.FormatInt(ts, 10))
		good := web.GenericSignature(genericKey, ts, body)

		// A fuzzed signature is accepted only if it carries the real one.
		h.Set(web.GenericSignatureHeader, sig)
		evs, err := web.ParseGeneric(secrets, h, body, now, web.DefaultReplayWindow)
		checkParsed(t, web.ProviderGeneric, evs, err)
		if err == nil && !strings.Contains(sig, strings.TrimPrefix(good, "v1=")) {
			t.Fatalf("accepted signature %q; the real one is %q", sig, good)
		}

		// Correctly signed: parsed or refused as malformed/stale, never
		// as a bad signature.
		h.Set(web.GenericSignatureHeader, good)
		evs, err = web.ParseGeneric(secrets, h, body, now, web.DefaultReplayWindow)
		checkParsed(t, web.ProviderGeneric, evs, err)
		var rej *web.Rejection
		if errors.As(err, &rej) && rej.Reason == "bad_signature" {
			t.Fatalf("correct signature refused: %v", err)
		}
		if d := now.Sub(time.Unix(ts, 0)); (d > web.DefaultReplayWindow || d < -web.DefaultReplayWindow) && err == nil {
			t.Fatalf("stale timestamp %d accepted", ts)
		}
	})
}

func FuzzParseMailgun(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	seed := func(ts int64, event, severity string) []byte {
		tss := strconv.FormatInt(ts, 10)
		b, _ := json.Marshal(map[string]any{
			"signature":  map[string]string{"timestamp": tss, "token": "tok", "signature": web.MailgunSignature(mailgunKey, tss, "tok")},
			"event-data": map[string]any{"id": "e", "event": event, "severity": severity, "timestamp": 1.9e9, "message": map[string]any{"headers": map[string]string{"message-id": "a@b"}}},
		})
		return b
	}
	f.Add(seed(now.Unix(), "delivered", ""))
	f.Add(seed(now.Unix(), "failed", "permanent"))
	f.Add(seed(now.Unix()-3600, "failed", "temporary"))
	f.Add(seed(now.Unix(), "", ""))
	f.Add([]byte(`{"signature":{"timestamp":"1900000000","token":"t","signature":"zz"},"event-data":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := web.ParseMailgun([][]byte{mailgunKey}, body, now, web.DefaultReplayWindow)
		checkParsed(t, web.ProviderMailgun, evs, err)
		if err != nil {
			return
		}
		// Accepted: the body's signature really is the key's HMAC of its
		// timestamp and token.
		var req struct {
			Signature struct{ Timestamp, Token, Signature string } `json:"signature"`
		}
		if json.Unmarshal(body, &req) != nil {
			t.Fatalf("accepted a body that does not decode: %q", body)
		}
		s := req.Signature
		if !strings.EqualFold(s.Signature, web.MailgunSignature(mailgunKey, s.Timestamp, s.Token)) {
			t.Fatalf("accepted signature %q for %q+%q", s.Signature, s.Timestamp, s.Token)
		}
	})
}

func FuzzParseResend(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	f.Add("msg_1", int64(0), []byte(`{"type":"email.bounced","created_at":"2030-01-01T00:00:00Z","data":{"email_id":"x","headers":[{"name":"Message-ID","value":"<a@b>"}],"bounce":{"type":"Permanent"}}}`), "")
	f.Add("msg_2", int64(10), []byte(`{"type":"email.clicked","data":{"click":{"link":"https://x"}}}`), "v1,AAAA")
	f.Add("", int64(0), []byte(`{}`), "v1,")
	f.Add("msg_3", int64(-400), []byte(`{"type":"contact.created","data":null}`), "")
	f.Fuzz(func(t *testing.T, id string, skew int64, body []byte, sig string) {
		keys := [][]byte{svixKey}
		ts := now.Unix() + skew%1000
		h := http.Header{}
		h.Set("svix-id", id)
		h.Set("svix-timestamp", strconv.FormatInt(ts, 10))
		good := web.SvixSignature(svixKey, id, ts, body)

		h.Set("svix-signature", sig)
		evs, err := web.ParseResend(keys, h, body, now, web.DefaultReplayWindow)
		checkParsed(t, web.ProviderResend, evs, err)
		if err == nil && !strings.Contains(sig, strings.TrimPrefix(good, "v1,")) {
			t.Fatalf("accepted signature %q; the real one is %q", sig, good)
		}

		h.Set("svix-signature", good)
		evs, err = web.ParseResend(keys, h, body, now, web.DefaultReplayWindow)
		checkParsed(t, web.ProviderResend, evs, err)
		var rej *web.Rejection
		if errors.As(err, &rej) && rej.Reason == "bad_signature" && id != "" {
			t.Fatalf("correct signature refused: %v", err)
		}
	})
}
