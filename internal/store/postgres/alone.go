package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// aloneLockClass is the first key of HoldAlone's lock ("RcDv"); the second
// is taken from the schema's name, so two stores on different schemas of
// one database do not exclude each other.
const aloneLockClass int32 = 0x52634476

// ErrNotAlone is HoldAlone's answer when another process holds the schema.
var ErrNotAlone = errors.New("another process holds this schema")

// HoldAlone takes a lock on the store's schema that one process at a time
// can hold, for as long as the returned release is not called (or the
// process lives). It is for `rangecast dev --postgres`, which runs its own
// NATS: a second one on the same schema would lead the same broadcasts
// from a second coordinator, doubling every rate limit and daily ceiling
// (claims keep messages single, not the governor's budget). A deployment's
// coordinators share one NATS, which elects one leader, and take no such
// lock: a stalled leader's session would hold it and block failover.
//
// The lock is a session advisory lock on a connection taken out of the pool
// for the purpose; release unlocks it and returns the connection, and must
// be called before Close, which waits for every connection.
func (s *Store) HoldAlone(ctx context.Context) (release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, mapErr("hold schema", err)
	}
	var held bool
	var schema string
	err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext(current_schema())), current_schema()`, aloneLockClass).Scan(&held, &schema)
	if err != nil {
		conn.Release()
		return nil, mapErr("hold schema", err)
	}
	if !held {
		database := conn.Conn().Config().Database
		conn.Release()
		return nil, fmt.Errorf("%w (schema %s of database %s)", ErrNotAlone, schema, database)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext(current_schema()))`, aloneLockClass); err != nil {
			// The session may be gone (and its lock with it); never hand a
			// connection that may still hold the lock back to the pool.
			conn.Conn().Close(ctx) //nolint:errcheck
		}
		conn.Release()
	}, nil
}
