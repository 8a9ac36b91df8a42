package api

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// refuseNUL answers InvalidArgument, naming the field, for a request with a
// NUL byte in any string (nested messages, lists, maps and Struct values
// included). No field of this API takes one: a name, an address or a body
// with NUL cannot be stored (Postgres refuses it in text) nor sent (SMTP
// forbids it). Checked once here, such requests reached the stores, where
// a lookup by a name with NUL answered Unavailable, which tells a client to
// retry, or InvalidArgument quoting the driver (tester). Protobuf has
// already refused strings that are not UTF-8. Streams (the contact import)
// check their rows one by one, refusing the row, not the stream.
func refuseNUL(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if field, at, found := findNUL(m.ProtoReflect(), ""); found {
			return nil, status.Errorf(codes.InvalidArgument, "%s contains a NUL byte (at byte %d); no field takes one: remove it", field, at)
		}
	}
	return handler(ctx, req)
}

// findNUL returns the path of the first string field of m holding a NUL
// byte, and the byte's offset.
func findNUL(m protoreflect.Message, prefix string) (field string, at int, found bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				field, at, found = nulIn(fd, l.Get(i), fmt.Sprintf("%s[%d]", name, i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				key := k.String()
				if i := strings.IndexByte(key, 0); i >= 0 {
					field, at, found = name+" (a key)", i, true
					return false
				}
				field, at, found = nulIn(fd.MapValue(), mv, fmt.Sprintf("%s[%q]", name, key))
				return !found
			})
		default:
			field, at, found = nulIn(fd, v, name)
		}
		return !found
	})
	return field, at, found
}

// nulIn looks for a NUL in one value of field fd.
func nulIn(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) (string, int, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if i := strings.IndexByte(v.String(), 0); i >= 0 {
			return name, i, true
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return findNUL(v.Message(), name+".")
	}
	return "", 0, false
}
