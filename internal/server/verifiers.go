package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/message"
)

// Unsubscribe keys rotate by listing the new key first. The coordinators
// verify links with every key they list, and page workers sign with the
// first of theirs. Rolled out to the workers before the coordinators, the
// new key signed links no coordinator could verify: every message of a
// broadcast went out with one-click and body links that unsubscribed
// nobody, and nothing said so (tester). So each coordinator serving the
// public HTTP publishes the ids of its keys (bus.VerifierBucket), and a
// worker signs with the first of its keys that every live coordinator
// has: during the roll-out, the old one. With no key in common it signs
// nothing, and its pages halt the broadcast saying why.

// publishVerifier keeps the ids of the keys this coordinator verifies
// links with in the verifier bucket until ctx ends or stop is called;
// stop removes them and returns once they are gone (a stopped
// coordinator's keys lingered for the bucket's TTL, and a resume right
// after a fix halted again, verifier).
func publishVerifier(ctx context.Context, kv jetstream.KeyValue, keys [][]byte, log *slog.Logger) (stop func()) {
	if kv == nil || len(keys) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	gone := make(chan struct{})
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = message.UnsubscribeKeyID(k)
	}
	name := verifierName()
	put := func() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := kv.Put(pctx, name, []byte(strings.Join(ids, ","))); err != nil && ctx.Err() == nil {
			log.Warn("cannot publish the unsubscribe keys this coordinator verifies with; workers keep the key they sign with", "err", err)
		}
	}
	put()
	go every(ctx, bus.VerifierBeat, put, func() {
		defer close(gone)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = kv.Delete(dctx, name)
	})
	return func() { cancel(); <-gone }
}

// every runs f every d until ctx ends, then done.
func every(ctx context.Context, d time.Duration, f, done func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			done()
			return
		case <-t.C:
			f()
		}
	}
}

// verifierName is this process's key in the verifier bucket.
func verifierName() string {
	b := make([]byte, 8)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
	return "c." + hex.EncodeToString(b)
}

// followVerifiers makes links sign with the first of its keys every live
// coordinator verifies with: once before it returns (so the first page
// signs right), then every bus.VerifierBeat until ctx ends.
func followVerifiers(ctx context.Context, kv jetstream.KeyValue, links *message.Unsubscribe, log *slog.Logger) {
	if kv == nil || links == nil {
		return
	}
	f := &verifierFollower{kv: kv, links: links, log: log}
	f.follow(ctx)
	go every(ctx, bus.VerifierBeat, func() { f.follow(ctx) }, func() {})
}

// verifierFollower is followVerifiers' state between reads.
type verifierFollower struct {
	kv    jetstream.KeyValue
	links *message.Unsubscribe
	log   *slog.Logger
	last  string // the key id signing after the last read; "none" for none
	seen  bool   // some coordinator has published since the start
}

func (f *verifierFollower) follow(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	verifiers, err := readVerifiers(rctx, f.kv)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("cannot read which unsubscribe keys the coordinators verify with; signing as before", "err", err)
		}
		return
	}
	if len(verifiers) == 0 && f.seen {
		// Every coordinator is away (restarting, NATS lost their
		// entries): the key they last had in common is still the best
		// guess; the first key could be one they lack.
		return
	}
	f.seen = f.seen || len(verifiers) > 0
	accepted := func(id string) bool {
		for _, ids := range verifiers {
			if !slices.Contains(ids, id) {
				return false
			}
		}
		return true
	}
	id, ok := f.links.Accept(accepted)
	if !ok {
		id = "none"
	}
	switch {
	case id == f.last:
	case ok:
		f.log.Info("unsubscribe links signed with a key every coordinator verifies with", "key_id", id, "coordinators", len(verifiers))
	default:
		f.log.Error("no unsubscribe key of this worker is one every coordinator verifies with: its links would unsubscribe nobody, so its pages send nothing and halt the broadcast; give the coordinators and the workers the same RANGECAST_UNSUBSCRIBE_KEYS",
			"worker_keys", strings.Join(f.links.KeyIDs(), ","), "coordinators", fmt.Sprint(verifiers))
	}
	f.last = id
}

// readVerifiers returns each live coordinator's key ids; none when no
// coordinator publishes (then every key is accepted: a coordinator older
// than the bucket, or none serving the public HTTP).
func readVerifiers(ctx context.Context, kv jetstream.KeyValue) (map[string][]string, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue // lapsed or removed between the listing and now
			}
			keys.Stop() //nolint:errcheck
			return nil, err
		}
		out[key] = strings.Split(string(e.Value()), ",")
	}
	return out, nil
}
