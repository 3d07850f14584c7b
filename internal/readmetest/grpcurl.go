package readmetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// grpcurlCmd is a grpcurl command line: the flags READMEs use.
type grpcurlCmd struct {
	protos       []string
	importPaths  []string
	data         string
	hasData      bool
	headers      [][2]string
	format       string // json (default) or text
	maxTime      time.Duration
	emitDefaults bool
	addr         string
	service      string
	method       string
}

// parseGrpcurl reads `grpcurl -plaintext -proto FILE [-import-path DIR]
// [-format json|text] [-max-time SECONDS] [-H 'name: value']... [-d DATA]
// ADDRESS SERVICE/METHOD` (flags as Go's flag package takes them: one or
// two dashes, the value separate or after =).
func parseGrpcurl(words []string) (grpcurlCmd, error) {
	g := grpcurlCmd{format: "json"}
	plaintext := false
	var pos []string
	for i := 1; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || len(pos) > 0 {
			pos = append(pos, w)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		arg := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(words) {
				return "", fmt.Errorf("-%s needs an argument", name)
			}
			i++
			return words[i], nil
		}
		if name == "plaintext" {
			plaintext = true
			continue
		}
		if err := g.flag(name, w, arg); err != nil {
			return g, err
		}
	}
	if !plaintext {
		return g, fmt.Errorf("the front speaks h2c: -plaintext is needed")
	}
	if len(g.protos) == 0 {
		return g, fmt.Errorf("the processor serves no reflection: -proto is needed")
	}
	if len(pos) != 2 {
		return g, fmt.Errorf("want ADDRESS SERVICE/METHOD after the flags, got %q", pos)
	}
	g.addr = pos[0]
	sym := pos[1]
	i := strings.LastIndexAny(sym, "/.")
	if i <= 0 {
		return g, fmt.Errorf("method %q: want SERVICE/METHOD", sym)
	}
	g.service, g.method = sym[:i], sym[i+1:]
	return g, nil
}

// flag applies one flag other than -plaintext; arg reads its value.
func (g *grpcurlCmd) flag(name, word string, arg func() (string, error)) error {
	var err error
	var v string
	switch name {
	case "emit-defaults":
		g.emitDefaults = true
	case "proto":
		v, err = arg()
		g.protos = append(g.protos, v)
	case "import-path":
		v, err = arg()
		g.importPaths = append(g.importPaths, v)
	case "d":
		g.data, err = arg()
		g.hasData = true
	case "H", "rpc-header":
		v, err = arg()
		k, val, ok := strings.Cut(v, ":")
		if err == nil && !ok {
			err = fmt.Errorf("header %q has no ':'", v)
		}
		g.headers = append(g.headers, [2]string{strings.ToLower(strings.TrimSpace(k)), strings.TrimLeft(val, " ")})
	case "format":
		g.format, err = arg()
		if err == nil && g.format != "json" && g.format != "text" {
			err = fmt.Errorf("-format %q: json or text", g.format)
		}
	case "max-time":
		v, err = arg()
		if err == nil {
			var s float64
			s, err = strconv.ParseFloat(v, 64)
			g.maxTime = time.Duration(s * float64(time.Second))
		}
	default:
		return fmt.Errorf("grpcurl flag %s is not supported by the test", word)
	}
	return err
}

// method finds the method among the files compiled into the test binary
// (the generated Go packages it imports register them), checking that it
// is declared by one of the -proto files.
func (g grpcurlCmd) methodDescriptor(root string) (protoreflect.MethodDescriptor, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(g.service))
	if err != nil {
		return nil, fmt.Errorf("service %s is not registered in the test binary (import its generated package): %v", g.service, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", g.service)
	}
	md := sd.Methods().ByName(protoreflect.Name(g.method))
	if md == nil {
		return nil, fmt.Errorf("service %s has no method %s", g.service, g.method)
	}
	declared := sd.ParentFile().Path()
	found := false
	for _, p := range g.protos {
		full := p
		for _, ip := range g.importPaths {
			if _, err := os.Stat(filepath.Join(root, ip, p)); err == nil {
				full = filepath.Join(ip, p)
			}
		}
		if _, err := os.Stat(filepath.Join(root, full)); err != nil {
			return nil, fmt.Errorf("-proto %s: %v", p, err)
		}
		if filepath.ToSlash(full) == declared || strings.HasSuffix(filepath.ToSlash(full), "/"+declared) || declares(filepath.Join(root, full), sd, md) {
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("%s is declared in %s, which no -proto names", g.service, declared)
	}
	return md, nil
}

// declares reports whether the .proto file at path declares the service's
// package, the service and the method: a service whose generated package
// comes from another module is registered under that module's path, and
// its README names a description in this repository.
func declares(path string, sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, re := range []string{
		`(?m)^\s*package\s+` + regexp.QuoteMeta(string(sd.ParentFile().Package())) + `\s*;`,
		`(?m)^\s*service\s+` + regexp.QuoteMeta(string(sd.Name())) + `\s*\{`,
		`(?m)^\s*rpc\s+` + regexp.QuoteMeta(string(md.Name())) + `\s*\(`,
	} {
		if !regexp.MustCompile(re).Match(b) {
			return false
		}
	}
	return true
}

// grpcStatusBlock is what grpcurl prints (to stderr) when a call ends with
// a status other than OK.
func grpcStatusBlock(st *status.Status) string {
	return fmt.Sprintf("ERROR:\n  Code: %s\n  Message: %s\n", st.Code(), st.Message())
}

// grpcurl makes the call as grpcurl would: requests from -d (a stream of
// JSON values, or with -format text text-format messages), metadata from -H, -max-time as the call's deadline; it
// renders each response in grpcurl's format and then grpcurl's error
// block. A stream that outlives the step (a fetch stream never ends) is
// read until the output matches what the README shows, ending in the
// DeadlineExceeded block when the command has -max-time, as grpcurl's
// output does once that time has passed.
func (r *runner) grpcurl(ctx context.Context, g grpcurlCmd, s Step, vars Vars) (output, error) {
	md, err := g.methodDescriptor(r.env.Root)
	if err != nil {
		return output{}, err
	}
	if g.addr != r.front {
		return output{}, fmt.Errorf("address %s: the README's front is %s", g.addr, FrontAddr)
	}
	reqs, err := g.requests(md)
	if err != nil {
		return output{}, err
	}
	conn, err := r.grpcConn()
	if err != nil {
		return output{}, err
	}
	if g.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.maxTime)
		defer cancel()
	}
	for _, h := range g.headers {
		ctx = metadata.AppendToOutgoingContext(ctx, h[0], h[1])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var out strings.Builder
	finish := func(st *status.Status) output {
		if st.Code() != codes.OK {
			out.WriteString(grpcStatusBlock(st))
		}
		return output{text: out.String()}
	}
	full := "/" + g.service + "/" + g.method
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: g.method, ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, full)
	if err != nil {
		return finish(status.Convert(err)), nil
	}
	for _, m := range reqs {
		if err := st.SendMsg(m); err != nil {
			break // the status comes with RecvMsg
		}
	}
	if err := st.CloseSend(); err != nil {
		return finish(status.Convert(err)), nil
	}
	// Once -max-time passes with nothing more, grpcurl prints this.
	deadline := status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	expired := func() bool {
		return g.maxTime > 0 && s.HasOutput && Match(NormalizeSpace(s.Output), NormalizeSpace(out.String()+grpcStatusBlock(deadline)), maps.Clone(vars))
	}
	end, err := g.receive(st, md, &out, expired)
	if err != nil {
		return output{}, err
	}
	if end == nil {
		cancel()
		end = deadline
	}
	return finish(end), nil
}

// requests are the messages -d gives (one empty message for a method that
// takes one and -d gives none).
func (g grpcurlCmd) requests(md protoreflect.MethodDescriptor) ([]*dynamicpb.Message, error) {
	var reqs []*dynamicpb.Message
	switch {
	case g.hasData && g.format == "text":
		// grpcurl reads -d in the output's format: text-format messages
		// separated by ASCII record separators ('' is one empty message).
		for _, t := range strings.Split(g.data, "\x1e") {
			m := dynamicpb.NewMessage(md.Input())
			if err := prototext.Unmarshal([]byte(t), m); err != nil {
				return nil, fmt.Errorf("-d (text format, as -format text reads it): %v", err)
			}
			reqs = append(reqs, m)
		}
	case g.hasData:
		dec := json.NewDecoder(strings.NewReader(g.data))
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("-d: %v", err)
			}
			m := dynamicpb.NewMessage(md.Input())
			if err := protojson.Unmarshal(raw, m); err != nil {
				return nil, fmt.Errorf("-d: %v", err)
			}
			reqs = append(reqs, m)
		}
	}
	if len(reqs) == 0 && !md.IsStreamingClient() {
		reqs = append(reqs, dynamicpb.NewMessage(md.Input()))
	}
	if len(reqs) > 1 && !md.IsStreamingClient() {
		return nil, fmt.Errorf("-d has %d messages for a method that takes one", len(reqs))
	}
	return reqs, nil
}

// receive writes the responses to out as grpcurl prints them, until the
// call's status (returned), or nil once expired says the output is what
// the README shows when -max-time ends the call.
func (g grpcurlCmd) receive(st grpc.ClientStream, md protoreflect.MethodDescriptor, out *strings.Builder, expired func() bool) (*status.Status, error) {
	for n := 0; ; n++ {
		m := dynamicpb.NewMessage(md.Output())
		err := st.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			return status.New(codes.OK, ""), nil
		}
		if err != nil {
			return status.Convert(err), nil
		}
		text, err := g.render(m)
		if err != nil {
			return nil, err
		}
		if n > 0 && g.format == "text" {
			out.WriteByte('\x1e') // grpcurl's record separator
		}
		out.WriteString(text + "\n")
		if !md.IsStreamingServer() {
			return status.New(codes.OK, ""), nil
		}
		if expired() {
			return nil, nil
		}
	}
}

// render prints a response message in the command's format.
func (g grpcurlCmd) render(m protoreflect.Message) (string, error) {
	if g.format == "text" {
		return renderText(m), nil
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: g.emitDefaults}.Marshal(m.Interface())
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// renderText renders a message in the protobuf text format as grpcurl
// -format text prints it (github.com/jhump/protoreflect's dynamic message,
// indented): the known fields in field-number order, then the unknown
// fields by number, as `number: "bytes"` for length-delimited ones, which
// is how a grpcurl user sees a fetch stream's message id.
func renderText(m protoreflect.Message) string {
	var b strings.Builder
	writeText(&b, m, "")
	return strings.TrimSuffix(b.String(), "\n")
}

func writeText(b *strings.Builder, m protoreflect.Message, indent string) {
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	sort.Slice(fields, func(i, j int) bool { return fields[i].Number() < fields[j].Number() })
	for _, fd := range fields {
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				writeTextField(b, fd, l.Get(i), indent)
			}
		case fd.IsMap():
			keys := []protoreflect.MapKey{}
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
			for _, k := range keys {
				fmt.Fprintf(b, "%s%s: <\n", indent, fd.TextName())
				writeTextField(b, fd.MapKey(), k.Value(), indent+"  ")
				writeTextField(b, fd.MapValue(), v.Map().Get(k), indent+"  ")
				fmt.Fprintf(b, "%s>\n", indent)
			}
		default:
			writeTextField(b, fd, v, indent)
		}
	}
	type unknown struct {
		num  protowire.Number
		text string
	}
	var unk []unknown
	raw := m.GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			break
		}
		raw = raw[n:]
		var text string
		switch typ {
		case protowire.BytesType:
			v, n2 := protowire.ConsumeBytes(raw)
			n, text = n2, quoteText(v)
		case protowire.VarintType:
			v, n2 := protowire.ConsumeVarint(raw)
			n, text = n2, strconv.FormatUint(v, 10)
		case protowire.Fixed32Type:
			v, n2 := protowire.ConsumeFixed32(raw)
			n, text = n2, strconv.FormatUint(uint64(v), 10)
		case protowire.Fixed64Type:
			v, n2 := protowire.ConsumeFixed64(raw)
			n, text = n2, strconv.FormatUint(v, 10)
		default:
			n = protowire.ConsumeFieldValue(num, typ, raw)
			text = "{...}" // groups: not in any README
		}
		if n < 0 {
			break
		}
		raw = raw[n:]
		unk = append(unk, unknown{num, text})
	}
	sort.SliceStable(unk, func(i, j int) bool { return unk[i].num < unk[j].num })
	for _, u := range unk {
		fmt.Fprintf(b, "%s%d: %s\n", indent, u.num, u.text)
	}
}

func writeTextField(b *strings.Builder, fd protoreflect.FieldDescriptor, v protoreflect.Value, indent string) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		fmt.Fprintf(b, "%s%s: <\n", indent, fd.TextName())
		writeText(b, v.Message(), indent+"  ")
		fmt.Fprintf(b, "%s>\n", indent)
		return
	}
	fmt.Fprintf(b, "%s%s: ", indent, fd.TextName())
	switch fd.Kind() {
	case protoreflect.StringKind:
		b.WriteString(quoteText([]byte(v.String())))
	case protoreflect.BytesKind:
		b.WriteString(quoteText(v.Bytes()))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			b.WriteString(string(ev.Name()))
		} else {
			b.WriteString(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.FloatKind:
		b.WriteString(strconv.FormatFloat(v.Float(), 'g', -1, 32))
	case protoreflect.DoubleKind:
		b.WriteString(strconv.FormatFloat(v.Float(), 'g', -1, 64))
	default:
		b.WriteString(v.String())
	}
	b.WriteByte('\n')
}

// quoteText quotes bytes as the protobuf text format of jhump/protoreflect
// does: \n \r \t \" \\ escaped, other bytes outside printable ASCII as
// three-digit octal escapes.
func quoteText(s []byte) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch c {
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c >= 0x20 && c < 0x7f {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, `\%03o`, c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
