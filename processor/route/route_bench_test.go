package route

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// sizedTable is a binding of n fetch routes GET /resI/{id}, I = 0..n-1.
func sizedTable(b *testing.B, n int) *Binding {
	routes := make([]*config.Route, 0, n)
	for i := range n {
		routes = append(routes, &config.Route{
			When: []config.Condition{{Method: "GET", Path: path(b, fmt.Sprintf("/res%d/{id}", i))}},
			With: fetch("t"),
		})
	}
	return httpTable(b, routes...)
}

// BenchmarkMatchHTTPRoutes matches against tables of 1, 10, 100 and 1,000 routes:
// the first route, the last one (every route before it is tried) and no
// route (every route is tried). A match allocates its Match and parameter
// map; a miss allocates nothing. The parallel variants match the last route
// from every core at once: the table is immutable, so nothing is shared but
// the read-only routes.
func BenchmarkMatchHTTPRoutes(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 10, 100, 1000} {
		tbl := sizedTable(b, n)
		cases := []struct {
			name  string
			path  string
			route int // -1: no route
		}{
			{"first", "/res0/item-000042", 0},
			{"last", fmt.Sprintf("/res%d/item-000042", n-1), n - 1},
			{"miss", "/nothing/item-000042", -1},
		}
		for _, tc := range cases {
			req := &HTTPRequest{Method: "GET", Path: tc.path}
			m, err := tbl.MatchHTTP(ctx, req, nil)
			switch {
			case tc.route < 0 && !errors.Is(err, ErrNoRoute):
				b.Fatalf("%s: %v, %v; want no route", tc.path, m, err)
			case tc.route >= 0 && (err != nil || m.Route.Index != tc.route || m.Params["id"] != "item-000042"):
				b.Fatalf("%s: %+v, %v; want route %d", tc.path, m, err, tc.route)
			}
			name := "routes=" + strconv.Itoa(n) + "/" + tc.name
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _ = tbl.MatchHTTP(ctx, req, nil)
				}
			})
			if tc.name != "last" {
				continue
			}
			b.Run(name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = tbl.MatchHTTP(ctx, req, nil)
					}
				})
			})
		}
	}
}
