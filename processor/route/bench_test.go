package route

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// FuzzPathMatch checks the scanning matcher against the regular expression a
// template stands for, on any template the config loader accepts.
func FuzzPathMatch(f *testing.F) {
	f.Add("/items/{id}", "/items/42")
	f.Add("/items/{id};cid={correlationId}", "/items/4;cid=a-b")
	f.Add("/files/{name}.json", "/files/a.b.json")
	f.Add("/a/{x}/b/{y}", "/a/1/b/%41")
	f.Add("/{a}", "/")
	f.Fuzz(func(t *testing.T, tmpl, p string) {
		pt, err := config.ParsePathTemplate(tmpl)
		if err != nil {
			return
		}
		m, err := compilePath(pt)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("^")
		for _, part := range pt.Parts {
			if part.Param != "" {
				b.WriteString("([^/;?]+)")
			} else {
				b.WriteString(regexp.QuoteMeta(latin1(part.Literal)))
			}
		}
		b.WriteString("$")
		ref := regexp.MustCompile(b.String())
		// The reference works on the Latin-1 image of the path (byte-exact),
		// so its offsets are mapped back through lp.
		lp := latin1(p)
		idx := ref.FindStringSubmatchIndex(lp)
		for i := range idx {
			if idx[i] >= 0 {
				idx[i] = utf8.RuneCountInString(lp[:idx[i]])
			}
		}
		spans, ok := m.match(p, nil)
		if ok != (idx != nil) {
			t.Fatalf("template %q path %q: matched %v, reference %v", tmpl, p, ok, idx != nil)
		}
		if !ok {
			return
		}
		want := map[string]string{}
		for i, name := range pt.Params {
			want[name] = unescape(p[idx[2+2*i]:idx[3+2*i]])
		}
		got := m.params(p, spans)
		if len(pt.Params) == 0 {
			want = nil
		}
		if !maps.Equal(got, want) {
			t.Fatalf("template %q path %q: params %v, reference %v", tmpl, p, got, want)
		}
		for _, v := range got {
			if v == "" {
				t.Fatal("empty parameter")
			}
		}
	})
}

// benchTable is a realistic binding: 20 CRUD-like resources, 4 routes each.
func benchTable(b *testing.B) *Binding {
	var routes []*config.Route
	for i := range 20 {
		res := fmt.Sprintf("/res%d", i)
		routes = append(routes,
			&config.Route{When: []config.Condition{{Method: "POST", Path: path(b, res)}}, With: produce("t")},
			&config.Route{When: []config.Condition{{Method: "GET", Path: path(b, res)}}, With: fetch("t")},
			&config.Route{When: []config.Condition{{Method: "GET", Path: path(b, res+"/{id}")}}, With: fetch("t")},
			&config.Route{When: []config.Condition{
				{Method: "PUT", Path: path(b, res+"/{id}")},
				{Method: "GET", Path: path(b, res+"/{id};cid={correlationId}")},
			}, With: produce("t")},
		)
	}
	return httpTable(b, routes...)
}

func BenchmarkMatchHTTP(b *testing.B) {
	tbl := benchTable(b)
	ctx := context.Background()
	for _, bc := range []struct{ name, method, path string }{
		{"first", "POST", "/res0"},
		{"last-param", "GET", "/res19/abc123"},
		{"last-cid", "GET", "/res19/abc;cid=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-0123456789abcdef"},
		{"miss", "GET", "/nothing/here"},
	} {
		req := &HTTPRequest{Method: bc.method, Path: bc.path}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tbl.MatchHTTP(ctx, req, nil)
			}
		})
	}
}

func BenchmarkMatchHTTPGreedy(b *testing.B) {
	tbl := httpTable(b, &config.Route{When: []config.Condition{{Method: "GET", Path: path(b, "/files/{name}.json")}}, With: fetch("f")})
	req := &HTTPRequest{Method: "GET", Path: "/files/report.2026.json"}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = tbl.MatchHTTP(context.Background(), req, nil)
	}
}

func BenchmarkMatchGRPC(b *testing.B) {
	var routes []*config.Route
	for i := range 20 {
		routes = append(routes, &config.Route{When: []config.Condition{{GRPCMethod: fmt.Sprintf("pkg.Svc%d/*", i)}}, With: produce("t")})
	}
	routes = append(routes, &config.Route{When: []config.Condition{{Service: "pkg.Tenant", Metadata: []config.MetadataMatch{{Name: "tenant", Value: []byte("acme")}}}}, With: produce("t")})
	tbl := grpcTable(b, routes...)
	req := &GRPCRequest{Service: "pkg.Tenant", Method: "Call", Headers: Headers{{":path", "/pkg.Tenant/Call"}, {"content-type", "application/grpc"}, {"tenant", "acme"}}}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = tbl.MatchGRPC(context.Background(), req, nil)
	}
}
