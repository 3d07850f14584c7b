package route

import "strings"

// segmentIndex narrows the routes of an HTTP binding a request is tried
// against, without changing which one is taken: routes are still tried in
// order, and a route left out is one none of whose conditions can match.
//
// A condition whose path template begins with a literal that holds its whole
// first segment (`/items/{id}`, `/items`, `/a/b`) matches only paths of that
// first segment, byte for byte (literals compare with the path as sent). So
// routes are listed under each such segment; a route with a condition that
// does not fix one (no path, no `when`, `/items{x}`, a template starting
// with a parameter) is in every list, through anyRoute. With many routes of
// distinct prefixes a request tries the few of its segment rather than all
// of them in turn.
type segmentIndex struct {
	bySegment map[string][]int // route positions, ascending
	anyRoute  []int            // route positions, ascending
}

// newSegmentIndex lists routes by the first segments their conditions fix.
func newSegmentIndex(routes []*compiledRoute) *segmentIndex {
	x := &segmentIndex{bySegment: map[string][]int{}}
	for i, r := range routes {
		if len(r.conds) == 0 {
			x.anyRoute = append(x.anyRoute, i)
			continue
		}
		anyPath := false
		for _, c := range r.conds {
			seg, ok := c.path.firstSegment()
			if !ok {
				anyPath = true
				continue
			}
			if l := x.bySegment[seg]; len(l) == 0 || l[len(l)-1] != i {
				x.bySegment[seg] = append(l, i)
			}
		}
		if anyPath {
			x.anyRoute = append(x.anyRoute, i)
		}
	}
	return x
}

// firstSegment is the first segment every path the template matches has,
// when its leading literal fixes it: the literal starts with '/' and either
// holds a separator after it or is the whole template.
func (m *pathMatcher) firstSegment() (string, bool) {
	if m == nil || len(m.parts) == 0 || m.parts[0].Param != "" {
		return "", false
	}
	lit := m.parts[0].Literal
	if !strings.HasPrefix(lit, "/") {
		return "", false
	}
	if j := indexSeparator(lit[1:]); j >= 0 {
		return lit[1 : 1+j], true
	}
	if len(m.parts) == 1 {
		return lit[1:], true
	}
	return "", false
}

// pathSegment is a request path's first segment, and false for a path not
// starting with '/' (which no fixed segment matches).
func pathSegment(path string) (string, bool) {
	if !strings.HasPrefix(path, "/") {
		return "", false
	}
	rest := path[1:]
	if j := indexSeparator(rest); j >= 0 {
		return rest[:j], true
	}
	return rest, true
}

func indexSeparator(s string) int {
	for i := 0; i < len(s); i++ {
		if isSeparator(s[i]) {
			return i
		}
	}
	return -1
}

// candidates calls try with the position of every route that may match
// path, ascending, until try returns true.
func (x *segmentIndex) candidates(path string, try func(i int) bool) {
	var keyed []int
	if seg, ok := pathSegment(path); ok {
		keyed = x.bySegment[seg]
	}
	any := x.anyRoute
	for len(keyed) > 0 || len(any) > 0 {
		var i int
		switch {
		case len(any) == 0 || (len(keyed) > 0 && keyed[0] < any[0]):
			i, keyed = keyed[0], keyed[1:]
		case len(keyed) == 0 || any[0] < keyed[0]:
			i, any = any[0], any[1:]
		default: // the same route in both lists
			i, keyed, any = keyed[0], keyed[1:], any[1:]
		}
		if try(i) {
			return
		}
	}
}
