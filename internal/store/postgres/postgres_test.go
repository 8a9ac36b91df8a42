package postgres_test

import (
	"testing"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/store/storetest"
	"github.com/rangecast/rangecast/internal/testenv"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return testenv.Postgres(t) })
}
