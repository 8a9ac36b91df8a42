package transactional_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func (e *env) putTemplate(t *pb.TransactionalTemplate) *pb.TransactionalTemplate {
	e.t.Helper()
	resp, err := e.client.PutTemplate(context.Background(), &pb.PutTemplateRequest{Template: t})
	if err != nil {
		e.t.Fatalf("PutTemplate: %v", err)
	}
	return resp.GetTemplate()
}

func templated(key, to, template string, data map[string]any) *pb.SendRequest {
	d, err := structpb.NewStruct(data)
	if err != nil {
		panic(err)
	}
	return &pb.SendRequest{IdempotencyKey: key, To: to, Template: template, Data: d}
}

// A stored template renders with the request's data; the message keeps
// what it rendered, a retry after the template changed is still a replay,
// and a new message gets the new version.
func TestStoredTemplate(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.consumer(nil)
	v1 := e.putTemplate(&pb.TransactionalTemplate{
		Name: "password-reset", FromAddress: "no-reply@rangecast.test", FromName: "Rangecast",
		Subject: "Reset your password, {{.name}}", Text: "Hi {{.name}}, use code {{.code}}.",
		Html: "<p>Hi {{.name}}, use code <b>{{.code}}</b>.</p>",
	})
	if v1.GetVersion() != 1 {
		t.Fatalf("first version = %d", v1.GetVersion())
	}
	req := templated("reset:ann:1", "ann@example.org", "password-reset", map[string]any{"name": "Ann <3", "code": "123456"})
	req.Wait = wait(10 * time.Second)
	m := e.send(req).GetMessage()
	if m.GetStatus() != statusSent || m.GetTemplate() != "password-reset" || m.GetTemplateVersion() != 1 || m.GetSubject() != "Reset your password, Ann <3" {
		t.Fatalf("message = %v; want sent from password-reset v1 with the rendered subject", m)
	}
	raw := string(e.sink.Messages()[0].Raw)
	for _, want := range []string{"use code 123456.", "<b>123456</b>", "Hi Ann &lt;3", "From: \"Rangecast\" <no-reply@rangecast.test>"} {
		if !strings.Contains(raw, want) {
			t.Fatalf("delivered message lacks %q:\n%s", want, raw)
		}
	}

	v2 := e.putTemplate(&pb.TransactionalTemplate{Name: "password-reset", FromAddress: "no-reply@rangecast.test", Subject: "New subject {{.name}}", Text: "v2 {{.code}}"})
	if v2.GetVersion() != 2 {
		t.Fatalf("replaced version = %d, want 2", v2.GetVersion())
	}
	replay := e.send(templated("reset:ann:1", "ann@example.org", "password-reset", map[string]any{"code": "123456", "name": "Ann <3"}))
	if !replay.GetReplayed() || replay.GetMessage().GetId() != m.GetId() || replay.GetMessage().GetSubject() != m.GetSubject() {
		t.Fatalf("retry after the template changed: replayed=%v %v; want the original message, unchanged", replay.GetReplayed(), replay.GetMessage())
	}
	// Even when the template now needs data the original call did not send.
	e.putTemplate(&pb.TransactionalTemplate{Name: "password-reset", FromAddress: "no-reply@rangecast.test", Subject: "{{.name}}", Text: "{{.code}} {{.expires}}"})
	replay = e.send(templated("reset:ann:1", "ann@example.org", "password-reset", map[string]any{"code": "123456", "name": "Ann <3"}))
	if !replay.GetReplayed() || replay.GetMessage().GetId() != m.GetId() {
		t.Fatalf("retry after the template gained a field: replayed=%v %v; want the original message", replay.GetReplayed(), replay.GetMessage())
	}
	e.putTemplate(&pb.TransactionalTemplate{Name: "password-reset", FromAddress: "no-reply@rangecast.test", Subject: "New subject {{.name}}", Text: "v2 {{.code}}"})
	_, err := e.client.Send(context.Background(), templated("reset:ann:1", "ann@example.org", "password-reset", map[string]any{"name": "Ann", "code": "999999"}))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "its data differs") {
		t.Fatalf("same key, other data: %v; want FailedPrecondition naming data", err)
	}
	next := templated("reset:ann:2", "ann@example.org", "password-reset", map[string]any{"name": "Ann", "code": "654321"})
	next.Wait = wait(10 * time.Second)
	if m2 := e.send(next).GetMessage(); m2.GetTemplateVersion() != 4 || m2.GetSubject() != "New subject Ann" {
		t.Fatalf("new message = %v; want version 4's subject", m2)
	}
	if e.sink.Count() != 2 {
		t.Fatalf("server received %d messages, want 2", e.sink.Count())
	}
}

func TestTemplateValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{sqlite: true})
	e.putTemplate(&pb.TransactionalTemplate{Name: "receipt", FromAddress: "shop@rangecast.test", Subject: "Order {{.order}}", Text: "Total {{.total}}"})
	cases := []struct {
		name string
		req  *pb.SendRequest
		code codes.Code
		want string
	}{
		{"missing data field", templated("k1", "a@example.org", "receipt", map[string]any{"order": "A1"}), codes.InvalidArgument, `data has no field "total"`},
		{"unknown template", templated("k2", "a@example.org", "nope", nil), codes.NotFound, `no template named "nope"`},
		{"template and subject", func() *pb.SendRequest {
			r := templated("k3", "a@example.org", "receipt", map[string]any{"order": 1, "total": 2})
			r.Subject = "x"
			return r
		}(), codes.InvalidArgument, "not both"},
		{"data without template", func() *pb.SendRequest {
			r := request("k4", "a@example.org")
			r.Data, _ = structpb.NewStruct(map[string]any{"a": 1})
			return r
		}(), codes.InvalidArgument, "only used with template"},
		{"newline from data into the subject", templated("k5", "a@example.org", "receipt", map[string]any{"order": "1\r\nBcc: x@example.org", "total": 2}), codes.InvalidArgument, "line break"},
	}
	for _, tc := range cases {
		_, err := e.client.Send(context.Background(), tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %s mentioning %q", tc.name, err, tc.code, tc.want)
		}
	}
	for name, tmpl := range map[string]*pb.TransactionalTemplate{
		"no name":         {Subject: "s", Text: "t"},
		"space in name":   {Name: "a b", Subject: "s", Text: "t"},
		"no subject":      {Name: "a", Text: "t"},
		"no body":         {Name: "a", Subject: "s"},
		"parse error":     {Name: "a", Subject: "s", Text: "{{.x"},
		"bad from":        {Name: "a", FromAddress: "nope", Subject: "s", Text: "t"},
		"newline subject": {Name: "a", Subject: "s\nBcc: x", Text: "t"},
	} {
		if _, err := e.client.PutTemplate(context.Background(), &pb.PutTemplateRequest{Template: tmpl}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("PutTemplate %s: %v; want InvalidArgument", name, err)
		}
	}
	if _, err := e.client.GetTemplate(context.Background(), &pb.GetTemplateRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetTemplate of an unknown name: %v; want NotFound", err)
	}
	got, err := e.client.GetTemplate(context.Background(), &pb.GetTemplateRequest{Name: "receipt"})
	if err != nil || got.GetTemplate().GetSubject() != "Order {{.order}}" || got.GetTemplate().GetVersion() != 1 {
		t.Errorf("GetTemplate = %v, %v", got, err)
	}
}

// Template bombs: PutTemplate refuses one that loops over a huge integer,
// and a template that is fine to store but explodes on its data (a loop
// over the data, nested) is stopped by the budget at Send: both
// InvalidArgument in well under a second, nothing sent.
func TestTemplateBudgets(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{sqlite: true})
	start := time.Now()
	_, err := e.client.PutTemplate(context.Background(), &pb.PutTemplateRequest{Template: &pb.TransactionalTemplate{
		Name: "bomb", FromAddress: "no-reply@rangecast.test", Subject: "s", Text: "{{range 100000000000}}{{end}}"}})
	if status.Code(err) != codes.InvalidArgument || time.Since(start) > time.Second {
		t.Fatalf("PutTemplate bomb: %v after %s; want InvalidArgument at once", err, time.Since(start))
	}
	e.putTemplate(&pb.TransactionalTemplate{Name: "rows", FromAddress: "no-reply@rangecast.test", Subject: "s",
		Html: "{{range .rows}}{{range $.rows}}{{range $.rows}}<td>{{.}}</td>{{end}}{{end}}{{end}}"})
	rows := make([]any, 300)
	for i := range rows {
		rows[i] = "r"
	}
	start = time.Now()
	_, err = e.client.Send(context.Background(), templated("bomb:1", "ann@example.org", "rows", map[string]any{"rows": rows}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "to render") || time.Since(start) > time.Second {
		t.Fatalf("Send with an exploding template: %v after %s; want InvalidArgument from the budget at once", err, time.Since(start))
	}
}
