package route

// Header is one request or response header. Names are lower case (Envoy
// lower-cases request header names; the processor writes lower-case names).
type Header struct {
	Name  string
	Value string
}

// Headers is a header list in arrival order. A header sent several times
// appears several times; pseudo-headers (:method, :path, :authority, :scheme)
// are included.
type Headers []Header

// Get returns the first value of name, or "".
func (h Headers) Get(name string) string {
	v, _ := h.Lookup(name)
	return v
}

// Lookup returns the first value of name and whether it is present.
func (h Headers) Lookup(name string) (string, bool) {
	for i := range h {
		if h[i].Name == name {
			return h[i].Value, true
		}
	}
	return "", false
}

// Values returns every value of name in order.
func (h Headers) Values(name string) []string {
	var vs []string
	for i := range h {
		if h[i].Name == name {
			vs = append(vs, h[i].Value)
		}
	}
	return vs
}
