package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/testenv"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestWorkersSignWithAKeyEveryCoordinatorHas: a key rotated onto the page
// workers first (listed first) before the coordinators have it signed links
// no coordinator verified, and a whole broadcast went out with one-click and
// body links that unsubscribed nobody (tester). The workers sign with the
// first of their keys every live coordinator publishes, and with none in
// common they sign nothing: their sends fail channel-wide, halting the
// broadcast with the reason.
func TestWorkersSignWithAKeyEveryCoordinatorHas(t *testing.T) {
	t.Parallel()
	_, js := testenv.NATS(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.VerifierBucket, TTL: bus.VerifierTTL})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	oldKey, newKey, otherKey := []byte(strings.Repeat("0123456789abcdef", 3)), []byte(strings.Repeat("fedcba9876543210", 3)), []byte(strings.Repeat("a1b2c3d4e5f6a7b8", 3))
	links, err := message.NewUnsubscribe("https://mail.example.com", newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &verifierFollower{kv: kv, links: links, log: log} // what followVerifiers runs every bus.VerifierBeat
	b, c := ulid.Make(), ulid.Make()
	signedBy := func() string {
		t.Helper()
		url := links.URL(b, c)
		token := url[strings.LastIndexByte(url, '/')+1:]
		for name, k := range map[string][]byte{"new": newKey, "old": oldKey} {
			if _, _, ok := message.VerifyUnsubscribeToken([][]byte{k}, token); ok {
				return name
			}
		}
		return "neither"
	}

	// No coordinator publishes (an older one, or none serves the public
	// HTTP): the first key signs, as before.
	f.follow(ctx)
	if got := signedBy(); got != "new" || links.Usable() != nil {
		t.Fatalf("with no coordinator published, links signed by %s (%v); want the first key", got, links.Usable())
	}

	// A coordinator that has only the old key: the workers sign with it.
	stopFirst := publishVerifier(ctx, kv, [][]byte{oldKey}, log)
	f.follow(ctx)
	if got := signedBy(); got != "old" {
		t.Fatalf("with a coordinator that has only the old key, links signed by %s; want old", got)
	}
	// Another coordinator already rolled (new first): still the old one,
	// which both have.
	second, stopSecond := context.WithCancel(ctx)
	defer stopSecond()
	publishVerifier(second, kv, [][]byte{newKey, oldKey}, log)
	f.follow(ctx)
	if got := signedBy(); got != "old" {
		t.Fatalf("with coordinators old and new+old, links signed by %s; want old", got)
	}
	// The first coordinator rolled too (it stops and its entry is gone
	// when stop returns, not after the bucket's TTL): new.
	stopFirst()
	if v, err := readVerifiers(ctx, kv); err != nil || len(v) != 1 {
		t.Fatalf("after a coordinator's stop returned, verifiers = %v, %v; want the other one only", v, err)
	}
	f.follow(ctx)
	if got := signedBy(); got != "new" {
		t.Fatalf("with every coordinator on new+old, links signed by %s; want new", got)
	}

	// No key in common: nothing signs, and a send fails channel-wide.
	third, stopThird := context.WithCancel(ctx)
	defer stopThird()
	publishVerifier(third, kv, [][]byte{otherKey}, log)
	f.follow(ctx)
	err = links.Usable()
	if !errors.Is(err, message.ErrNoAcceptedKey) || transport.Classify(err) != transport.Channel {
		t.Fatalf("with no key in common: Usable = %v (class %v); want ErrNoAcceptedKey, channel-wide", err, transport.Classify(err))
	}
	stopThird()
	testenv.Eventually(t, "the odd coordinator's entry removed", 5*time.Second, func() bool {
		v, err := readVerifiers(ctx, kv)
		return err == nil && len(v) == 1
	})
	f.follow(ctx)
	if err := links.Usable(); err != nil || signedBy() != "new" {
		t.Fatalf("after the odd coordinator left: %v, signed by %s; want new", err, signedBy())
	}

	// Every coordinator away (a restart, entries lost with NATS): the key
	// they last had in common still signs, not the first by default.
	fourth, stopFourth := context.WithCancel(ctx)
	publishVerifier(fourth, kv, [][]byte{oldKey}, log)
	f.follow(ctx)
	if got := signedBy(); got != "old" {
		t.Fatalf("with a coordinator on old only, links signed by %s; want old", got)
	}
	stopSecond()
	stopFourth()
	testenv.Eventually(t, "every coordinator's entry removed", 5*time.Second, func() bool {
		v, err := readVerifiers(ctx, kv)
		return err == nil && len(v) == 0
	})
	f.follow(ctx)
	if got := signedBy(); got != "old" || links.Usable() != nil {
		t.Fatalf("with every coordinator away, links signed by %s (%v); want old, as they last agreed", got, links.Usable())
	}
}
