package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
// The lock is a session advisory lock on a connection of its own, outside
// the pool (whose few connections the stack's workers need); release
// closes that session, which drops the lock.
func (s *Store) HoldAlone(ctx context.Context) (release func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, mapErr("hold schema", err)
	}
	closeConn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(ctx) //nolint:errcheck // the lock ends with the session
	}
	var held bool
	var schema string
	err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext(current_schema())), current_schema()`, aloneLockClass).Scan(&held, &schema)
	if err != nil {
		closeConn()
		return nil, mapErr("hold schema", err)
	}
	if !held {
		closeConn()
		return nil, fmt.Errorf("%w (schema %s of database %s)", ErrNotAlone, schema, conn.Config().Database)
	}
	return closeConn, nil
}
