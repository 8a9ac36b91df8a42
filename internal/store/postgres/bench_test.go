package postgres_test

import (
	"testing"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/storetest"
	"github.com/rangecast/rangecast/internal/testenv"
)

// BenchmarkClaimAndRecord walks a 120k audience on a fresh schema per
// iteration, so every walk starts on a fresh broadcast_sends table.
//
//	go test -run '^$' -bench ClaimAndRecord -benchtime 1x ./internal/store/postgres/
func BenchmarkClaimAndRecord(b *testing.B) {
	storetest.BenchClaimAndRecord(b, func(b *testing.B) store.Store { return testenv.Postgres(b) }, 120_000)
}
