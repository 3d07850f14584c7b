package config

// The methods an HTTP condition accepts: one rule for the router, the 405
// answer's `allow` and the OpenAPI generator.
//
// A condition that names a method accepts that method (and a fetch route's
// GET also accepts HEAD). A condition without a method accepts what its
// capability maps: a fetch answers GET and HEAD; a produce writes for the
// methods that carry a request (GET, POST, PUT, PATCH, DELETE). OPTIONS, HEAD
// and TRACE are never writes unless a route names them: a browser's CORS
// preflight or a monitoring probe must not overwrite a record.

var (
	fetchMethods   = []string{"GET", "HEAD"}
	produceMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
)

// Methods lists the methods a condition of a route with this capability
// accepts, in a fixed order. The slice is shared: do not modify it.
func (c *Condition) Methods(capability Capability) []string {
	return MethodsOf(c.Method, capability)
}

// MethodsOf is Condition.Methods for a method as written ("" = none named),
// also for a route without `when`, which is a condition without a method.
func MethodsOf(method string, capability Capability) []string {
	switch {
	case capability == Fetch && (method == "" || method == "GET"):
		return fetchMethods
	case method != "":
		return []string{method}
	case capability == Produce:
		return produceMethods
	}
	return nil
}

// AcceptsMethod reports whether MethodsOf(method, capability) holds m,
// without allocating.
func AcceptsMethod(method string, capability Capability, m string) bool {
	switch {
	case method == m:
		return true
	case capability == Fetch && (method == "" || method == "GET"):
		return m == "GET" || m == "HEAD"
	case method != "":
		return false
	case capability == Produce:
		return m == "GET" || m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE"
	}
	return false
}
