package coordinator

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The simulation's stand-ins for JetStream. They keep the part of its
// contract the engine relies on (KV compare-and-set by revision, missing
// keys, work-queue dedupe) and can break it the ways real operation does:
// a write that fails, a write that is lost.

// fakeKV is an in-memory KV bucket. failNext makes the next write fail;
// loseNext makes it report success without storing (a write lost with a
// leader's connection).
type fakeKV struct {
	jetstream.KeyValue // not implemented: a call panics

	mu       sync.Mutex
	rev      uint64
	entries  map[string]fakeEntry
	failNext bool
	loseNext bool
	// failState makes the next write of a broadcast state key fail.
	failState bool
	// writes counts every write attempted, for the sim's report.
	writes int
}

type fakeEntry struct {
	key   string
	value []byte
	rev   uint64
}

func newFakeKV() *fakeKV { return &fakeKV{entries: map[string]fakeEntry{}} }

var errFakeKVDown = errors.New("nats: timeout")

func (e fakeEntry) Bucket() string                  { return "sim" }
func (e fakeEntry) Key() string                     { return e.key }
func (e fakeEntry) Value() []byte                   { return e.value }
func (e fakeEntry) Revision() uint64                { return e.rev }
func (e fakeEntry) Created() time.Time              { return time.Time{} }
func (e fakeEntry) Delta() uint64                   { return 0 }
func (e fakeEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func (kv *fakeKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	e, ok := kv.entries[key]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

// write applies a write unless a fault says otherwise; cas checks the
// revision (0: the key must not exist; -1: no check).
func (kv *fakeKV) write(key string, value []byte, cas int64) (uint64, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.writes++
	if kv.failNext || (kv.failState && strings.HasSuffix(key, ".state")) {
		if strings.HasSuffix(key, ".state") {
			kv.failState = false
		} else {
			kv.failNext = false
		}
		return 0, errFakeKVDown
	}
	cur, exists := kv.entries[key]
	switch {
	case cas == 0 && exists:
		return 0, jetstream.ErrKeyExists
	case cas > 0 && (!exists || cur.rev != uint64(cas)):
		return 0, jetstream.ErrKeyExists
	}
	kv.rev++
	if kv.loseNext {
		kv.loseNext = false
		return kv.rev, nil
	}
	kv.entries[key] = fakeEntry{key: key, value: append([]byte(nil), value...), rev: kv.rev}
	return kv.rev, nil
}

func (kv *fakeKV) Put(_ context.Context, key string, value []byte) (uint64, error) {
	return kv.write(key, value, -1)
}

func (kv *fakeKV) Create(_ context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return kv.write(key, value, 0)
}

func (kv *fakeKV) Update(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return kv.write(key, value, int64(rev))
}

func (kv *fakeKV) Delete(_ context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	delete(kv.entries, key)
	return nil
}

func (kv *fakeKV) ListKeys(_ context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	keys := make([]string, 0, len(kv.entries))
	for k := range kv.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ch := make(chan string, len(keys))
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	return fakeLister(ch), nil
}

type fakeLister chan string

func (l fakeLister) Keys() <-chan string { return l }
func (l fakeLister) Stop() error         { return nil }

// keysWithPrefix lists the bucket's keys starting with p, sorted.
func (kv *fakeKV) keysWithPrefix(p string) []string {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	var out []string
	for k := range kv.entries {
		if strings.HasPrefix(k, p) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
