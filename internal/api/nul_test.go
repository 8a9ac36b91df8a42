package api

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// A NUL byte anywhere in a request's strings is InvalidArgument naming the
// field, before any handler runs: a lookup by a name with NUL answered
// Unavailable from Postgres ("retry"), others quoted the driver (tester).
func TestRequestsWithNULRefused(t *testing.T) {
	t.Parallel()
	data, err := structpb.NewStruct(map[string]any{"order": map[string]any{"items": []any{"ok", "b\x00d"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req   any
		field string
	}{
		{&pb.GetTemplateRequest{Name: "t\x00"}, "name"},
		{&pb.AddSegmentMembersRequest{Segment: "s", Emails: []string{"a@example.org", "x\x00@example.org"}}, "emails[1]"},
		{&pb.SendRequest{IdempotencyKey: "k", To: "a@example.org", Text: "hi", Headers: []*pb.Header{{Name: "X-A", Value: "v\x00"}}}, "headers[0].value"},
		{&pb.SendRequest{IdempotencyKey: "k", To: "a@example.org", Template: "t", Data: data}, `data.fields["order"].struct_value.fields["items"].list_value.values[1].string_value`},
	} {
		called := false
		_, err := refuseNUL(context.Background(), tc.req, nil, func(context.Context, any) (any, error) {
			called = true
			return nil, nil
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field+" contains a NUL byte") || called {
			t.Errorf("%T: err %v (handler called: %v); want InvalidArgument naming %s", tc.req, err, called, tc.field)
		}
	}
	called := false
	if _, err := refuseNUL(context.Background(), &pb.SendRequest{IdempotencyKey: "k", To: "a@example.org", Data: data.GetFields()["order"].GetStructValue().GetFields()["items"].GetListValue().GetValues()[0].GetStructValue()},
		nil, func(context.Context, any) (any, error) { called = true; return nil, nil }); err != nil || !called {
		t.Errorf("a request without NUL: err %v, handler called %v", err, called)
	}
}
