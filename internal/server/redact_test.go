package server

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A NATS or database URL's password never reaches an error.
func TestConnectErrorsRedactURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, _, err := ConnectBus(ctx, "nats://u:s3cret@127.0.0.1:1", 1)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("ConnectBus error %v; want one without the password", err)
	}
	_, err = OpenStore(ctx, "mysql://u:s3cret@db/x")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("OpenStore error %v; want one without the password", err)
	}
}
