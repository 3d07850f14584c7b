package models

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protopath"
	"google.golang.org/protobuf/reflect/protorange"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoCodec converts between JSON and protobuf binary for the messages of
// one .proto file.
type protoCodec struct {
	file   linker.File
	record protoreflect.MessageDescriptor
	idx    []int
}

// protoMainFile is the name the schema text is compiled under; references
// keep their own import paths.
const protoMainFile = "schema.proto"

func compileProtobuf(ctx context.Context, subject string, s Schema, record string) (codec, error) {
	srcs := map[string]string{protoMainFile: s.Text}
	for _, d := range s.Deps {
		srcs[d.Name] = d.Text
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(srcs),
		}),
		MaxParallelism: 1,
	}
	files, err := c.Compile(ctx, protoMainFile)
	if err != nil {
		se := &SchemaError{Subject: subject, Err: err}
		var pe reporter.ErrorWithPos
		if errors.As(err, &pe) {
			pos := pe.GetPosition()
			se.Line, se.Column, se.Err = pos.Line, pos.Col, pe.Unwrap()
			if pos.Filename != protoMainFile {
				se.Subject += " reference " + pos.Filename
			}
		}
		return nil, se
	}
	f := files[0]
	var md protoreflect.MessageDescriptor
	if record == "" {
		if f.Messages().Len() == 0 {
			return nil, &SchemaError{Subject: subject, Err: errors.New("no message in the file")}
		}
		md = f.Messages().Get(0)
	} else {
		d, ok := f.FindDescriptorByName(protoreflect.FullName(record)).(protoreflect.MessageDescriptor)
		if !ok {
			return nil, &SchemaError{Subject: subject, Err: fmt.Errorf("no message %s in the file", record)}
		}
		md = d
	}
	return &protoCodec{file: f, record: md, idx: messageIndex(md)}, nil
}

// messageIndex is a message's path of indexes from the file down, as the
// registry wire format writes it.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var idx []int
	for d := protoreflect.Descriptor(md); ; d = d.Parent() {
		if _, ok := d.(protoreflect.FileDescriptor); ok {
			break
		}
		idx = append(idx, d.Index())
	}
	for i, j := 0, len(idx)-1; i < j; i, j = i+1, j-1 {
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx
}

// message finds the message an index names (nil: the configured record).
func (c *protoCodec) message(index []int) (protoreflect.MessageDescriptor, error) {
	if index == nil {
		return c.record, nil
	}
	msgs := c.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, parseError("", "#", "the protobuf message index names no message of the schema", nil)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md == nil {
		return nil, parseError("", "#", "empty protobuf message index", nil)
	}
	return md, nil
}

func (c *protoCodec) unmarshal(payload []byte, index []int) (*dynamicpb.Message, error) {
	md, err := c.message(index)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, parseError("", "#", "not a protobuf "+string(md.FullName()), err)
	}
	// proto2 `required` fields are checked separately from parsing.
	if err := proto.CheckInitialized(m); err != nil {
		return nil, invalidError("", "#", strings.TrimPrefix(err.Error(), "proto: "), err)
	}
	if err := unknownFields(m); err != nil {
		return nil, err
	}
	return m, nil
}

// unknownFields refuses fields the schema does not declare, at any depth:
// the parser keeps them (and fields of the wrong wire type) as unknown
// rather than failing, which would let anything pass validation.
func unknownFields(m *dynamicpb.Message) error {
	var e *Error
	err := protorange.Range(m, func(v protopath.Values) error {
		msg, ok := v.Index(-1).Value.Interface().(protoreflect.Message)
		if !ok || len(msg.GetUnknown()) == 0 {
			return nil
		}
		if e == nil {
			e = &Error{Kind: KindInvalid}
		}
		e.addViolation(Violation{Pointer: "#" + protoPointer(v.Path), Detail: "fields not in the schema, or of the wrong wire type"})
		return nil
	})
	if err != nil {
		return invalidError("", "#", "cannot be walked", err)
	}
	if e != nil {
		return e
	}
	return nil
}

// protoPointer renders a protobuf path as a JSON pointer into the message's
// JSON form (JSON field names).
func protoPointer(p protopath.Path) string {
	var b strings.Builder
	for _, s := range p {
		switch s.Kind() {
		case protopath.FieldAccessStep:
			b.WriteString("/" + s.FieldDescriptor().JSONName())
		case protopath.ListIndexStep:
			fmt.Fprintf(&b, "/%d", s.ListIndex())
		case protopath.MapIndexStep:
			b.WriteString("/" + pointerEscaper.Replace(s.MapIndex().String()))
		}
	}
	return b.String()
}

func (c *protoCodec) validate(payload []byte, index []int) error {
	_, err := c.unmarshal(payload, index)
	return err
}

// protojsonPos picks the position and reason out of protojson's errors,
// whose text is the only place they are.
var protojsonPos = regexp.MustCompile(`^proto: (?:\(line (\d+):(\d+)\): )?(.*)$`)

func (c *protoCodec) fromJSON(dst, src []byte) ([]byte, error) {
	if !json.Valid(src) {
		_, err := parseJSON(src)
		return dst, err
	}
	m := dynamicpb.NewMessage(c.record)
	if err := protojson.Unmarshal(src, m); err != nil {
		detail := err.Error()
		if sm := protojsonPos.FindStringSubmatch(detail); sm != nil {
			// The reason comes before the value it quotes.
			reason, _, _ := strings.Cut(sm[3], ": ")
			detail = reason
			if sm[1] != "" {
				detail += fmt.Sprintf(" (line %s, column %s)", sm[1], sm[2])
			}
		}
		return dst, invalidError("", "#", detail, err)
	}
	if err := proto.CheckInitialized(m); err != nil {
		return dst, invalidError("", "#", strings.TrimPrefix(err.Error(), "proto: "), err)
	}
	// Deterministic: fields in number order, so one body is one record
	// value (dynamicpb otherwise ranges its fields in map order).
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
	if err != nil {
		return dst, invalidError("", "#", "cannot encode", err)
	}
	return out, nil
}

func (c *protoCodec) toJSON(dst, payload []byte, index []int) ([]byte, error) {
	m, err := c.unmarshal(payload, index)
	if err != nil {
		return dst, err
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return dst, parseError("", "#", "cannot render as JSON", err)
	}
	// protojson varies its whitespace on purpose (its output is not
	// stable); replicas must serve the same bytes for one record.
	var out bytes.Buffer
	out.Grow(len(b))
	if err := json.Compact(&out, b); err != nil {
		return dst, parseError("", "#", "cannot render as JSON", err)
	}
	return append(dst, out.Bytes()...), nil
}

func (c *protoCodec) index() []int { return c.idx }
