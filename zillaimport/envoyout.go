package zillaimport

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// listener is one Envoy listener: a port of a tcp server binding and the
// proxies it leads to.
type listener struct {
	name     string
	port     int
	codec    string // AUTO or HTTP2
	cors     *omap  // CorsPolicy, nil without access-control cross-origin
	routes   []envoyRoute
	comments []string
	// chain is the path of server bindings being followed from the tcp
	// server, to refuse an exit that leads back onto it.
	chain []string
}

type envoyRoute struct {
	prefix, path string
	grpc         bool
	binding      string
}

func (im *importer) tcpServer(name string, b *node) {
	im.used[name] = true
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "host", "port")
	var ports []int
	for _, p := range opts.get("port").strs() {
		lo, hi, isRange := strings.Cut(p, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if isRange {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a || z-a > 100 {
			im.errorf(opts.get("port"), "port %q: want a number or a range of at most 100 ports", p)
			continue
		}
		for port := a; port <= z; port++ {
			ports = append(ports, port)
		}
	}
	if len(ports) == 0 {
		im.errorf(b, "tcp server %s has no options.port", name)
	}
	for _, port := range ports {
		exit := b.get("exit")
		for _, r := range b.get("routes").list() {
			for _, c := range r.get("when").list() {
				if slices.Contains(c.get("port").strs(), strconv.Itoa(port)) || c.get("port") == nil {
					exit = cmpNode(exit, r.get("exit"))
				}
			}
			if r.get("when") == nil {
				exit = cmpNode(exit, r.get("exit"))
			}
		}
		if exit == nil {
			im.errorf(b, "tcp server %s: port %d leads nowhere", name, port)
			continue
		}
		l := &listener{name: fmt.Sprintf("%s_%d", name, port), port: port, codec: "AUTO"}
		l.comments = append(l.comments, fmt.Sprintf("zilla.yaml line %d: tcp server %s, port %d (host %s)", b.pos.Line, name, port, cmpOr(opts.get("host").str(), "0.0.0.0")))
		im.serverChain(l, exit)
		im.listeners = append(im.listeners, *l)
	}
}

// cmpNode keeps the first exit found.
func cmpNode(a, b *node) *node {
	if a != nil {
		return a
	}
	return b
}

// serverChain follows a tcp server's exit through tls, http and grpc server
// bindings to the proxies.
func (im *importer) serverChain(l *listener, exit *node) {
	name := exit.str()
	b := im.bindings[name]
	if b == nil {
		im.errorf(exit, "exit %s names no binding", name)
		return
	}
	if slices.Contains(l.chain, name) {
		im.errorf(exit, "exit %s leads back to a binding already on the way from the tcp server (%s): server bindings must lead on to an http-kafka or grpc-kafka proxy", name, strings.Join(append(l.chain, name), " → "))
		return
	}
	l.chain = append(l.chain, name)
	defer func() { l.chain = l.chain[:len(l.chain)-1] }()
	im.used[name] = true
	switch typ, kind := b.get("type").str(), b.get("kind").str(); {
	case typ == "tls" && kind == "server":
		l.comments = append(l.comments, fmt.Sprintf("tls server %s (line %d): Envoy terminates TLS; add a transport_socket (envoy.transport_sockets.tls) with the certificate of its vault to this listener", name, b.pos.Line))
		im.serverChain(l, cmpNode(b.get("exit"), firstExit(b)))
	case typ == "http" && kind == "server":
		im.httpServer(l, name, b)
	case typ == "grpc" && kind == "server":
		im.grpcServer(l, name, b)
	case typ == "sse" && kind == "server":
		im.sseServer(l, name, b)
	case typ == "http-filesystem" && kind == "proxy":
		// A static page beside the streams must not fail the whole file.
		im.httpFilesystem(l, name, b)
	case typ == "http-kafka" || typ == "grpc-kafka" || typ == "sse-kafka":
		im.proxyRoutes(l, name, b)
	default:
		im.errorf(exit, "exit %s is a %s %s binding, which cannot front the proxies", name, typ, kind)
	}
}

func firstExit(b *node) *node {
	for _, r := range b.get("routes").list() {
		if e := r.get("exit"); e != nil {
			return e
		}
	}
	return nil
}

func (im *importer) httpServer(l *listener, name string, b *node) {
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "versions", "access-control", "authorization", "requests")
	if rq := opts.get("requests"); rq != nil {
		im.errorf(rq, "%s", requestsRefusal(name))
	}
	if v := opts.get("versions"); v != nil {
		vs := v.strs()
		switch {
		case slices.Equal(vs, []string{"h2"}):
			l.codec = "HTTP2"
			l.comments = append(l.comments, fmt.Sprintf("http server %s versions [h2]: HTTP/2 only (h2c)", name))
		case slices.Equal(vs, []string{"http/1.1"}):
			l.comments = append(l.comments, fmt.Sprintf("http server %s versions [http/1.1]: AUTO, since gRPC clients need HTTP/2 (the checks refuse HTTP1)", name))
		default:
			l.comments = append(l.comments, fmt.Sprintf("http server %s versions %v: HTTP/1.1 and h2c", name, vs))
		}
	}
	if ac := opts.get("access-control"); ac != nil {
		im.known(ac, "access-control", "policy", "allow", "max-age", "expose")
		switch ac.get("policy").str() {
		case "cross-origin":
			l.cors = im.cors(ac)
			l.comments = append(l.comments, fmt.Sprintf("http server %s access-control (line %d): Envoy's CORS filter, before ext_proc (dev's emulator applies it too)", name, ac.pos.Line))
		case "same-origin", "":
			l.comments = append(l.comments, fmt.Sprintf("http server %s access-control same-origin: no CORS filter", name))
		default:
			im.errorf(ac.get("policy"), "access-control policy %q: want same-origin or cross-origin", ac.get("policy").str())
		}
	}
	if az := opts.get("authorization"); az != nil {
		for _, e := range az.mapEntries() {
			creds := e.val.get("credentials")
			auth := creds.get("headers").get("authorization").str()
			g := im.root.get("guards").get(e.key)
			sse := creds.get("query") != nil || creds.get("cookies") != nil // read by the sse-kafka bindings
			if g.get("type").str() != "jwt" || (auth != "Bearer {credentials}" && !sse) {
				im.errorf(e.val, "authorization %s: only a jwt guard reading `authorization: Bearer {credentials}`, or a query parameter or cookie holding {credentials} for sse-kafka routes, can be translated (the processor's jwt guards read that header)", e.key)
				continue
			}
			l.comments = append(l.comments, fmt.Sprintf("http server %s authorization %s: the processor's jwt guard reads the bearer token itself", name, e.key))
		}
	}
	if rs := b.get("routes"); rs != nil {
		l.comments = append(l.comments, fmt.Sprintf("http server %s routes (line %d): their conditions dropped; every request goes to the processor, whose routes decide", name, rs.pos.Line))
		for _, r := range rs.list() {
			im.serverChain(l, r.get("exit"))
		}
	}
	if e := b.get("exit"); e != nil {
		im.serverChain(l, e)
	}
}

func (im *importer) grpcServer(l *listener, name string, b *node) {
	for _, e := range b.get("catalog").mapEntries() {
		var subjects []string
		for _, s := range e.val.list() {
			subjects = append(subjects, s.get("subject").str())
		}
		l.comments = append(l.comments, fmt.Sprintf("grpc server %s catalog %s %v: not needed, the processor forwards messages as bytes without descriptors", name, e.key, subjects))
	}
	l.comments = append(l.comments, fmt.Sprintf("grpc server %s: methods the processor has no route for answer UNIMPLEMENTED", name))
	for _, r := range b.get("routes").list() {
		im.serverChain(l, r.get("exit"))
	}
	if e := b.get("exit"); e != nil {
		im.serverChain(l, e)
	}
}

// proxyRoutes adds the Envoy routes of a proxy's conditions.
func (im *importer) proxyRoutes(l *listener, name string, b *node) {
	grpc := b.get("type").str() == "grpc-kafka"
	add := func(r envoyRoute) {
		r.binding, r.grpc = name, grpc
		if !slices.Contains(l.routes, r) {
			l.routes = append(l.routes, r)
		}
	}
	for _, r := range b.get("routes").list() {
		when := r.get("when")
		if when == nil || len(when.list()) == 0 {
			add(envoyRoute{prefix: "/"})
		}
		for _, c := range when.list() {
			switch {
			case grpc && c.get("method") != nil:
				svc, m, _ := strings.Cut(c.get("method").str(), "/")
				if m == "*" {
					add(envoyRoute{prefix: "/" + svc + "/"})
				} else {
					add(envoyRoute{path: "/" + svc + "/" + m})
				}
			case !grpc && c.get("path") != nil:
				p := c.get("path").str()
				if i := strings.IndexAny(p, "{*"); i >= 0 {
					add(envoyRoute{prefix: p[:i]})
				} else {
					add(envoyRoute{path: p})
				}
			default:
				add(envoyRoute{prefix: "/"})
			}
		}
	}
}

func (im *importer) cors(ac *node) *omap {
	p := &omap{}
	allow := ac.get("allow")
	im.known(allow, "access-control.allow", "origins", "methods", "headers", "credentials")
	var origins []any
	for _, o := range allow.get("origins").strs() {
		m := &omap{}
		m.set("exact", o)
		origins = append(origins, m)
	}
	if origins == nil {
		re := &omap{}
		re.set("regex", ".*")
		m := &omap{}
		m.set("safe_regex", re)
		origins = []any{m}
	}
	p.set("allow_origin_string_match", origins)
	p.set("allow_methods", cmpOr(strings.Join(allow.get("methods").strs(), ","), "*"))
	p.set("allow_headers", cmpOr(strings.Join(allow.get("headers").strs(), ","), "*"))
	if exp := ac.get("expose").get("headers"); exp != nil {
		p.set("expose_headers", strings.Join(exp.strs(), ","))
	}
	if ma := ac.get("max-age"); ma != nil {
		p.set("max_age", ma.str())
	}
	if allow.get("credentials").str() == "true" {
		p.set("allow_credentials", true)
	}
	return p
}

// renderEnvoy writes the Envoy bootstrap: the contract of envoy/envoy.yaml,
// one listener per tcp server port.
func (im *importer) renderEnvoy() []byte {
	var b strings.Builder
	b.WriteString("# Envoy front for kafka-ext-proc, generated by `kafka-ext-proc import zilla --envoy`.\n")
	b.WriteString("# The contract it follows is described in the bundled envoy/envoy.yaml; check a changed copy\n")
	b.WriteString("# with `kafka-ext-proc validate --config CONFIG --envoy THIS-FILE`.\n")
	b.WriteString("admin:\n  address: { socket_address: { address: 127.0.0.1, port_value: 9901 } }\n\nstatic_resources:\n  listeners:\n")
	ls := im.listeners
	if len(ls) == 0 {
		// No tcp server binding: one listener with every proxy's routes.
		l := listener{name: "ingress", port: 8080, codec: "AUTO", comments: []string{"no tcp server binding: one listener on 8080 for every proxy"}}
		for _, name := range im.order {
			if t := im.bindings[name].get("type").str(); t == "http-kafka" || t == "grpc-kafka" {
				im.proxyRoutes(&l, name, im.bindings[name])
			}
		}
		ls = []listener{l}
	}
	for _, l := range ls {
		writeListener(&b, l)
	}
	b.WriteString(envoyClusters)
	return []byte(b.String())
}

func writeListener(b *strings.Builder, l listener) {
	writeComments(b, "  ", l.comments)
	fmt.Fprintf(b, "  - name: %s\n", l.name)
	fmt.Fprintf(b, "    address: { socket_address: { address: 0.0.0.0, port_value: %d } }\n", l.port)
	b.WriteString(`    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ` + l.name + `
          codec_type: ` + l.codec + `
          # Above the processor's limits.max-wait and limits.reply-timeout.
          stream_idle_timeout: 300s
          request_timeout: 0s
          http2_protocol_options:
            connection_keepalive: { interval: 30s, timeout: 10s }
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
`)
	if l.cors != nil {
		b.WriteString("              typed_per_filter_config:\n                envoy.filters.http.cors:\n")
		b.WriteString("                  \"@type\": type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy\n")
		var sub strings.Builder
		emit(&sub, l.cors, "                  ")
		b.WriteString(sub.String())
	}
	writeRoutes(b, l.routes, l.cors != nil)
	// Other paths go to the processor too: it answers them 404 (gRPC
	// UNIMPLEMENTED) with a problem detail saying no route matches.
	b.WriteString(`              # Any other path: the processor answers 404 / UNIMPLEMENTED, saying no route matches.
              - name: no_route
                match: { prefix: "/" }
                direct_response: { status: 504, body: { inline_string: "no answer from kafka-ext-proc\n" } }
          http_filters:
`)
	if l.cors != nil {
		b.WriteString(`          # Before ext_proc: Envoy answers CORS preflights itself.
          - name: envoy.filters.http.cors
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors
`)
	}
	b.WriteString(`          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: { cluster_name: kafka_ext_proc }
              processing_mode:
                request_header_mode: SEND
                request_body_mode: FULL_DUPLEX_STREAMED
                request_trailer_mode: SEND
                response_header_mode: SKIP
                response_body_mode: NONE
                response_trailer_mode: SKIP
              failure_mode_allow: false
              # A failed ext_proc stream may have written records: 504, outcome unknown.
              status_on_error: { code: 504 }
              metadata_options:
                forwarding_namespaces: { untyped: [envoy.filters.http.jwt_authn] }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`)
}

// writeRoutes writes the virtual host's routes, one per route of the
// processor's configuration that the listener serves. Envoy's CORS filter
// acts only on routes with a route action (CorsFilter::decodeHeaders), so
// with CORS every route gets one, on the placeholder cluster, and a gRPC
// route is followed by one for the same path without the gRPC match: a
// browser's preflight carries no gRPC content-type.
func writeRoutes(b *strings.Builder, routes []envoyRoute, cors bool) {
	b.WriteString("              routes:\n")
	for i, r := range routes {
		match := fmt.Sprintf("prefix: %s", scalar(r.prefix))
		if r.path != "" {
			match = fmt.Sprintf("path: %s", scalar(r.path))
		}
		fmt.Fprintf(b, "              - name: %s_%d\n", r.binding, i)
		switch {
		case r.grpc:
			fmt.Fprintf(b, "                match: { %s, grpc: {} }\n", match)
			b.WriteString("                route: { cluster: placeholder, timeout: 0s, idle_timeout: 3600s }\n")
		case cors:
			fmt.Fprintf(b, "                match: { %s }\n", match)
			b.WriteString("                # A route action, not direct_response: Envoy's CORS filter skips routes without one.\n")
			b.WriteString("                route: { cluster: placeholder, timeout: 0s }\n")
		default:
			fmt.Fprintf(b, "                match: { %s }\n", match)
			b.WriteString("                direct_response: { status: 504, body: { inline_string: \"no answer from kafka-ext-proc\\n\" } }\n")
		}
		writeBindingOverride(b, r.binding)
		if r.grpc && cors {
			fmt.Fprintf(b, "              # CORS preflights of %s (no gRPC content-type): Envoy's CORS filter answers them.\n", r.binding)
			fmt.Fprintf(b, "              - name: %s_%d_cors\n", r.binding, i)
			fmt.Fprintf(b, "                match: { %s }\n", match)
			b.WriteString("                route: { cluster: placeholder, timeout: 0s }\n")
			writeBindingOverride(b, r.binding)
		}
	}
}

// writeBindingOverride names the route's binding to the processor.
func writeBindingOverride(b *strings.Builder, binding string) {
	b.WriteString("                typed_per_filter_config:\n                  envoy.filters.http.ext_proc:\n")
	b.WriteString("                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute\n")
	fmt.Fprintf(b, "                    overrides: { grpc_initial_metadata: [{ key: x-kafka-ext-proc-binding, value: %s }] }\n", scalar(binding))
}

const envoyClusters = `
  clusters:
  # The processor (kafka-ext-proc serve, port 50051).
  - name: kafka_ext_proc
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    circuit_breakers:
      thresholds:
      - priority: DEFAULT
        max_connections: 100000
        max_pending_requests: 100000
        max_requests: 100000
    health_checks:
    - timeout: 1s
      interval: 5s
      no_traffic_interval: 5s
      unhealthy_threshold: 1
      healthy_threshold: 1
      grpc_health_check: {}
    load_assignment:
      cluster_name: kafka_ext_proc
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: kafka-ext-proc, port_value: 50051 } } }
  # Target of the gRPC routes; never reached while the processor answers.
  - name: placeholder
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
    load_assignment: { cluster_name: placeholder }
`

// requestsRefusal says why an http server's request contracts are not
// translated, and what a user keeps by moving them. Our models check what a
// topic holds, on every route that writes or reads it; a contract per HTTP
// path and method, and above all a check of responses, has no counterpart,
// and dropping it silently would let bodies through that Zilla refused.
func requestsRefusal(name string) string {
	return fmt.Sprintf("http server %s: options.requests (request contracts: a path and method whose bodies must match a schema) cannot be translated: "+
		"kafka-ext-proc checks bodies against the model of the topic they are written to (the kafka client's options.topics: 422 with every violation, before anything is written), not per HTTP route, and has no check of responses; "+
		"to keep the request check, name its schema as the value model of the route's topic (a Zilla cache binding's options.topics[].value, which the import carries over) "+
		"and check replies in the service that writes them; then remove options.requests and import again", name)
}
