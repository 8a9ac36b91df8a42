package storetest

import (
	"errors"
	"strings"

	"github.com/rangecast/rangecast/internal/store"
)

// errorCases pin that a refused write says so with the store's sentinel,
// in the same words on every store, without the driver's text.
var errorCases = []testCase{
	{"ConflictWithoutDriverText", testConflictWithoutDriverText},
}

func testConflictWithoutDriverText(f *fixture) {
	b := f.draft("one", 0)
	_, _, err := f.s.CreateBroadcast(f.ctx, store.Broadcast{ID: b.ID, Name: "again", Content: content, CreatedAt: t0})
	if err == nil {
		f.t.Fatal("a second broadcast with the same id was created")
	}
	msg := strings.ToLower(err.Error())
	for _, driver := range []string{"sqlstate", "duplicate key", "unique constraint", "key (", "constraint failed"} {
		if strings.Contains(msg, driver) {
			f.t.Errorf("error %q carries the driver's text (%q)", err, driver)
		}
	}
	if !errors.Is(err, store.ErrConflict) {
		f.t.Errorf("error %v is not store.ErrConflict", err)
	}
}
