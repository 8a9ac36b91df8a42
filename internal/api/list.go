package api

import (
	"strings"

	"github.com/oklog/ulid/v2"
)

// Page sizes of list RPCs: every answer stays far below gRPC's 4 MiB
// whatever the table holds.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// listPage reads a list request's page size and token: prefix (the list's
// own, so that a token given to another list is refused, not read as a
// place in this one) and the last id of the previous page, as pageToken
// writes it.
func listPage(size int32, token, prefix string) (int, ulid.ULID, error) {
	switch {
	case size < 0 || size > maxPageSize:
		return 0, ulid.ULID{}, invalid("page_size %d: use 1 to %d, or 0 for %d", size, maxPageSize, defaultPageSize)
	case size == 0:
		size = defaultPageSize
	}
	if token == "" {
		return int(size), ulid.ULID{}, nil
	}
	rest, ok := strings.CutPrefix(token, prefix)
	id, err := ulid.ParseStrict(rest)
	if !ok || err != nil {
		return 0, ulid.ULID{}, badToken(token)
	}
	return int(size), id, nil
}

// pageToken is the token of the page after the one ending at last.
func pageToken(prefix string, last ulid.ULID) string { return prefix + last.String() }
