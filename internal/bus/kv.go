package bus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// GetJSON reads the JSON value at key into v and returns its revision, for
// a later compare-and-set. found is false, and v untouched, when the key
// does not exist.
func GetJSON(ctx context.Context, kv jetstream.KeyValue, key string, v any) (rev uint64, found bool, err error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if err := Decode(e.Value(), v); err != nil {
		return 0, false, err
	}
	return e.Revision(), true, nil
}

// PutAt writes data at key by compare-and-set on revision rev, creating the
// key when rev is 0. A write that lost the race reports IsConflict.
func PutAt(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		return kv.Create(ctx, key, data)
	}
	return kv.Update(ctx, key, data, rev)
}

// IsConflict reports whether a KV write lost a compare-and-set: the key was
// created (ErrKeyExists) or updated (ErrKeyRevisionMismatch, whichever
// code the server answered) by someone else since it was read.
func IsConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
