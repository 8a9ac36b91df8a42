package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/storetest"
)

// BenchmarkClaimAndRecord walks a 20k audience on a new database file per
// iteration. Compare internal/store/postgres's benchmark of the same name.
//
//	go test -run '^$' -bench ClaimAndRecord -benchtime 3x ./internal/store/sqlite/
func BenchmarkClaimAndRecord(b *testing.B) {
	storetest.BenchClaimAndRecord(b, func(b *testing.B) store.Store {
		s, err := Open(b.Context(), filepath.Join(b.TempDir(), "rangecast.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return s
	}, 20_000)
}
