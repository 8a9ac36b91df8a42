package api

import "github.com/oklog/ulid/v2"

// Page sizes of list RPCs: every answer stays far below gRPC's 4 MiB
// whatever the table holds.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// listPage reads a list request's page size and token (the last id of the
// previous page).
func listPage(size int32, token string) (int, ulid.ULID, error) {
	switch {
	case size < 0 || size > maxPageSize:
		return 0, ulid.ULID{}, invalid("page_size %d: use 1 to %d, or 0 for %d", size, maxPageSize, defaultPageSize)
	case size == 0:
		size = defaultPageSize
	}
	if token == "" {
		return int(size), ulid.ULID{}, nil
	}
	id, err := ulid.ParseStrict(token)
	if err != nil {
		return 0, ulid.ULID{}, invalid("page_token %q is not one this server gave", token)
	}
	return int(size), id, nil
}
