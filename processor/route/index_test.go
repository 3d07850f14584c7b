package route

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// linearMatch is the reference the segment index must agree with: every
// route tried in order.
func linearMatch(b *Binding, req *HTTPRequest) (route, cond int, params map[string]string, ok bool) {
	for _, r := range b.routes {
		ci, pm, spans, ok := r.matchHTTP(req, nil)
		if !ok {
			continue
		}
		if pm != nil {
			params = pm.params(req.Path, spans)
		}
		return r.cfg.Index, ci, params, true
	}
	return -1, 0, nil, false
}

// TestSegmentIndexTakesTheRouteALinearScanTakes mixes routes the index files
// under a first segment with routes it must try for every path (no `when`,
// no path, a parameter in the first segment, a literal that stops inside
// it), in an order where a later keyed route and an earlier catch-all both
// match, and checks that every request takes the route, condition and
// parameters a scan of every route in order takes, and the same 405 Allow.
func TestSegmentIndexTakesTheRouteALinearScanTakes(t *testing.T) {
	routes := []*config.Route{
		{When: []config.Condition{{Method: "GET", Path: path(t, "/a/{id}")}}, With: fetch("t")},
		{When: []config.Condition{{Method: "POST", Path: path(t, "/items{x}")}}, With: produce("t")},
		{When: []config.Condition{{Method: "GET", Path: path(t, "/b/{id}")}, {Method: "GET", Path: path(t, "/{first}/x")}}, With: fetch("t")},
		{When: []config.Condition{{Method: "DELETE"}}, With: produce("t")},
		{When: []config.Condition{{Method: "GET", Path: path(t, "/a/x")}}, With: fetch("t")},
		{When: []config.Condition{{Path: path(t, "/c")}}, With: fetch("t")},
		{When: []config.Condition{{Method: "PUT", Path: path(t, "/a/{id}")}, {Method: "PUT", Path: path(t, "/c;v/{id}")}}, With: produce("t")},
		{When: []config.Condition{{Path: path(t, "//{id}")}}, With: fetch("t")},
		{When: []config.Condition{{Path: path(t, "/files/{name}.json")}}, With: fetch("t")},
		{With: fetch("t")},
	}
	b := httpTable(t, routes...)
	paths := []string{
		"/a/1", "/a/x", "/a", "/a/", "/items1", "/items/1", "/b/1", "/b/x", "/q/x", "/c", "/c/", "/c;v/1",
		"//1", "/files/f.json", "/files/f.xml", "/", "", "nothing", "/%61/1", "/a;p/1", "/A/1",
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	ctx := context.Background()
	for _, p := range paths {
		for _, method := range methods {
			req := &HTTPRequest{Method: method, Path: p}
			wantRoute, wantCond, wantParams, wantOK := linearMatch(b, req)
			m, err := b.MatchHTTP(ctx, req, nil)
			switch {
			case wantOK && (err != nil || m.Route.Index != wantRoute || m.Condition != wantCond || !equalParams(m.Params, wantParams)):
				t.Errorf("%s %q: %+v, %v; want route %d, condition %d, params %v", method, p, m, err, wantRoute, wantCond, wantParams)
			case !wantOK && err == nil:
				t.Errorf("%s %q: route %d; want none", method, p, m.Route.Index)
			}
			if wantOK {
				continue
			}
			var me *MethodError
			linearAllow := linearAllowed(b, req)
			if errors.As(err, &me) != (len(linearAllow) > 0) || (me != nil && !slices.Equal(me.Allow, linearAllow)) {
				t.Errorf("%s %q: %v; want the Allow a scan of every route gives, %v", method, p, err, linearAllow)
			}
		}
	}
}

// linearAllowed is allowed over every route: the reference for the 405's
// Allow.
func linearAllowed(b *Binding, req *HTTPRequest) []string {
	all := &Binding{Config: b.Config, routes: b.routes, index: &segmentIndex{}}
	for i := range b.routes {
		all.index.anyRoute = append(all.index.anyRoute, i)
	}
	return all.allowed(req, nil)
}

func equalParams(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSegmentIndexFilesRoutesByTheSegmentTheirLiteralFixes pins which
// templates the index files under a segment and which it tries for every
// path: a wrong segment would hide a route.
func TestSegmentIndexFilesRoutesByTheSegmentTheirLiteralFixes(t *testing.T) {
	cases := []struct {
		template string
		seg      string
		fixed    bool
	}{
		{"/items/{id}", "items", true},
		{"/items", "items", true},
		{"/items/", "items", true},
		{"/a/b/c", "a", true},
		{"/c;v/{id}", "c", true},
		{"//{id}", "", true},
		{"/", "", true},
		{"/items{x}", "", false},
		{"/{id}", "", false},
		{"/{id}/x", "", false},
	}
	for _, tc := range cases {
		pm, err := compilePath(path(t, tc.template))
		if err != nil {
			t.Fatal(err)
		}
		seg, fixed := pm.firstSegment()
		if seg != tc.seg || fixed != tc.fixed {
			t.Errorf("%s: segment %q, fixed %v; want %q, %v", tc.template, seg, fixed, tc.seg, tc.fixed)
		}
	}
}
