package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is what protoc-gen-validate generates for every message.
type validator interface{ ValidateAll() error }

// Validate runs the protos' own validation rules (protoc-gen-validate, as
// Envoy applies them at load time) on the bootstrap and on every typed config
// inside it. The generated ValidateAll stops at google.protobuf.Any, so the
// tree is walked, each Any unpacked and validated, and the walk continues
// inside it (an HCM inside a listener holds the http filters, which hold
// ext_proc, ...). Each error names where it is: the field path with the names
// of listeners, filters and clusters on the way, and the Any's type URL.
func Validate(b *bootstrapv3.Bootstrap) error {
	var errs []error
	if err := b.ValidateAll(); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap: %w", err))
	}
	walkAnys(b.ProtoReflect(), "", &errs)
	if len(errs) > 0 {
		return fmt.Errorf("validating Envoy bootstrap: %w", errors.Join(errs...))
	}
	return nil
}

// walkAnys visits every set message field of m, in field order (map entries in
// key order) so that errors come out in a stable order.
func walkAnys(m protoreflect.Message, path string, errs *[]error) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		p := string(fd.Name())
		if path != "" {
			p = path + "." + p
		}
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			var keys []protoreflect.MapKey
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
				return strings.Compare(a.String(), b.String())
			})
			for _, k := range keys {
				visit(v.Map().Get(k).Message(), p+"["+strconv.Quote(k.String())+"]", errs)
			}
		case fd.IsList():
			if fd.Kind() != protoreflect.MessageKind {
				continue
			}
			l := v.List()
			for j := range l.Len() {
				e := l.Get(j).Message()
				visit(e, fmt.Sprintf("%s[%d]%s", p, j, nameOf(e)), errs)
			}
		case fd.Kind() == protoreflect.MessageKind:
			visit(v.Message(), p+nameOf(v.Message()), errs)
		}
	}
}

// visit validates m if it is an Any (after unpacking it) and walks into it.
func visit(m protoreflect.Message, path string, errs *[]error) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		walkAnys(m, path, errs)
		return
	}
	where := fmt.Sprintf("%s <%s>", path, a.GetTypeUrl())
	inner, err := a.UnmarshalNew()
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: unpacking typed config: %w", where, err))
		return
	}
	if v, ok := inner.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	walkAnys(inner.ProtoReflect(), where, errs)
}

// nameOf is ("name") for messages with a set string field called name
// (listeners, filters, clusters, routes), so that paths say which one.
func nameOf(m protoreflect.Message) string {
	fd := m.Descriptor().Fields().ByName("name")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || !m.Has(fd) {
		return ""
	}
	return "(" + strconv.Quote(m.Get(fd).String()) + ")"
}
