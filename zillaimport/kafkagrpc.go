package zillaimport

import (
	"fmt"
	"slices"
	"strings"
)

// Zilla's kafka-grpc binding reads the request records through its entry (a
// kafka cache client) and reaches the service through the client chain its
// routes exit to: grpc → http → (tls →) tcp. Ours reads through each route's
// exit, the kafka client, and dials with.authority itself, so the chain
// collapses into each route's with: its address from the tcp client, TLS
// when a tls client is on the way.

// kafkaGRPC translates a kafka-grpc binding and its client chain.
func (im *importer) kafkaGRPC(name string, b *node) {
	im.used[name] = true
	im.known(b, "binding "+name, "type", "kind", "entry", "options", "routes", "telemetry")
	if b.get("telemetry") != nil {
		im.note(b.get("telemetry"), "binding %s telemetry dropped: the kafka-grpc workers' calls are counted in /metrics by binding and result", name)
	}
	kafka, entry := "", b.get("entry")
	if entry != nil {
		kafka = im.kafkaExit(entry)
	} else {
		im.errorf(b, "binding %s has no entry: the kafka binding its request topics are read through", name)
	}
	out := &omap{}
	out.set("type", "kafka-grpc")
	out.set("kind", "remote_server")
	opts := &omap{}
	zo := b.get("options")
	im.known(zo, "binding "+name+".options", "acks", "idempotency", "correlation")
	if a := zo.get("acks"); a != nil {
		opts.set("acks", im.scalarOf(a, "acks"))
	}
	if m := zo.get("idempotency").get("metadata"); m != nil {
		im.note(m, "binding %s: options.idempotency.metadata (%s) dropped: the service gets the caller's metadata as it came, the idempotency key under the grpc-kafka binding's options.idempotency.metadata name", name, m.str())
	}
	opts.set("correlation", im.grpcCorrelation(zo))
	out.set("options", opts)
	var routes []any
	for _, r := range b.get("routes").list() {
		routes = append(routes, im.kafkaGRPCRoute(r, entry.str(), kafka))
	}
	if len(routes) == 0 {
		im.errorf(b, "binding %s has no routes", name)
	}
	out.set("routes", routes)
	im.procs.set(name, out, fmt.Sprintf("zilla.yaml line %d: kafka-grpc %s", b.pos.Line, name),
		"its workers run inside serve (and dev) beside the ext_proc server; Envoy has no part in it")
}

// kafkaGRPCRoute translates a route; its exit is kafka, the kafka client
// the binding's entry leads to.
func (im *importer) kafkaGRPCRoute(r *node, entry, kafka string) *omap {
	im.known(r, "route", "when", "exit", "with")
	route := &omap{}
	var when []any
	for _, c := range r.get("when").list() {
		im.known(c, "when", "topic", "reply-to", "method", "key", "headers")
		for _, f := range []string{"key", "headers"} {
			if v := c.get(f); v != nil {
				im.errorf(v, "when.%s cannot be translated: a kafka-grpc route here selects records by topic, reply-to and method only; give the calls another request topic instead", f)
			}
		}
		if c.get("method") == nil {
			im.errorf(c, "a kafka-grpc condition without method cannot be translated: a route here names the service it answers (pkg.Service/* for any of its methods)")
		}
		cond := &omap{}
		for _, f := range []string{"topic", "reply-to", "method"} {
			if v := c.get(f); v != nil {
				cond.set(f, im.scalarOf(v, "when."+f))
			}
		}
		when = append(when, cond)
	}
	if when == nil {
		im.errorf(r, "a kafka-grpc route without when cannot be translated: a route here names the topic, reply-to and method it answers")
	}
	route.set("when", when)
	route.set("exit", kafka, fmt.Sprintf("the kafka client the binding's entry (%s) leads to: the request and reply topics are read and written there", entry))
	w := r.get("with")
	if w == nil {
		im.errorf(r, "a kafka-grpc route without with cannot be translated: with names the service's scheme and authority")
		return route
	}
	im.known(w, "with", "scheme", "authority")
	exit := r.get("exit")
	if exit == nil {
		im.errorf(r, "a kafka-grpc route without exit cannot be translated: its grpc client chain says where the service is")
		return route
	}
	s := im.serviceChain(exit)
	if s == nil {
		return route
	}
	with := &omap{}
	scheme := "http"
	if s.tls {
		scheme = "https"
	}
	var comments []string
	if z := w.get("scheme").str(); z != scheme && s.tls {
		comments = append(comments, fmt.Sprintf("Zilla's scheme %s was only the :scheme it sent; here the scheme says whether to use TLS, and the chain has tls client %s", z, s.tlsName))
	} else if z != scheme {
		comments = append(comments, fmt.Sprintf("Zilla's scheme %s was only the :scheme it sent; here the scheme says whether to use TLS, and the chain has no tls client", z))
	}
	with.set("scheme", scheme, comments...)
	comments = []string{fmt.Sprintf("from tcp client %s (line %d): the worker dials it itself (grpc client %s and the clients after it dropped)", s.tcpName, s.tcpLine, exit.str())}
	if z := im.scalarOf(w.get("authority"), "with.authority"); z != s.authority {
		comments = append(comments, fmt.Sprintf("Zilla's authority %s was only the :authority it sent; here the :authority is the address dialled", z))
	}
	with.set("authority", s.authority, append(comments, s.notes...)...)
	route.set("with", with)
	return route
}

// service is where a kafka-grpc route's client chain leads.
type service struct {
	authority        string // host:port of the tcp client
	tcpName, tlsName string
	tcpLine          int
	tls              bool
	notes            []string
}

// serviceChain follows a route's exit through the grpc, http, tls and tcp
// client bindings, marking them used; nil, with an error at the binding
// that cannot be translated, when the chain is not that shape.
func (im *importer) serviceChain(exit *node) *service {
	s := &service{}
	name, at := exit.str(), exit
	for _, want := range []string{"grpc", "http", "tls", "tcp"} {
		b := im.bindings[name]
		if b == nil {
			im.errorf(at, "exit %s names no binding", name)
			return nil
		}
		typ, kind := b.get("type").str(), b.get("kind").str()
		if want == "tls" && typ == "tcp" {
			want = "tcp" // no tls client: plaintext
		}
		if typ != want || kind != "client" {
			im.errorf(at, "exit %s is a %s %s binding: a kafka-grpc route's chain must be a grpc client, an http client, optionally a tls client, then a tcp client; %s", name, typ, kind, kafkaGRPCAlternatives)
			return nil
		}
		im.used[name] = true
		next, ok := im.chainStep(name, b, s)
		if !ok {
			return nil
		}
		if want == "tcp" {
			return s
		}
		if next == nil {
			im.errorf(b, "%s client %s has no exit: the chain must end at a tcp client with the service's host and port", typ, name)
			return nil
		}
		name, at = next.str(), next
	}
	return s
}

// chainStep checks one client binding of a kafka-grpc route's chain and
// returns its exit.
func (im *importer) chainStep(name string, b *node, s *service) (*node, bool) {
	switch b.get("type").str() {
	case "grpc":
		im.known(b, "binding "+name, "type", "kind", "routes", "exit")
		exit := b.get("exit")
		for _, r := range b.get("routes").list() {
			e := r.get("exit")
			if exit != nil && e.str() != exit.str() {
				im.errorf(e, "grpc client %s routes methods to different bindings (%s, %s): here each kafka-grpc route names one service address; %s", name, exit.str(), e.str(), kafkaGRPCAlternatives)
				return nil, false
			}
			exit = e
		}
		return exit, true
	case "http":
		im.known(b, "binding "+name, "type", "kind", "options", "exit")
		im.known(b.get("options"), "binding "+name+".options", "versions")
		if v := b.get("options").get("versions"); v != nil && !slices.Contains(v.strs(), "h2") {
			im.errorf(v, "http client %s: versions %v: gRPC needs HTTP/2 (h2), which the worker always speaks", name, v.strs())
			return nil, false
		}
		return b.get("exit"), true
	case "tls":
		return b.get("exit"), im.serviceTLS(name, b, s)
	default: // tcp
		return nil, im.serviceAddress(name, b, s)
	}
}

// serviceTLS translates the tls client of a kafka-grpc route's chain: TLS
// with the system's roots. A vault's trust or key store cannot be: the
// route's with.tls names PEM files, which the loader reads, so they must
// exist before the output loads.
func (im *importer) serviceTLS(name string, b *node, s *service) bool {
	im.known(b, "binding "+name, "type", "kind", "options", "exit", "vault")
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "trust", "trustcacerts", "keys", "sni", "alpn")
	s.tls, s.tlsName = true, name
	for _, f := range []string{"trust", "keys"} {
		if v := opts.get(f); v != nil {
			store := cmpOr(im.root.get("vaults").get(b.get("vault").str()).get("options").get(f).get("store").str(), "STORE")
			what := map[string]string{"trust": "the CA (ca-file; from a PKCS#12 store: openssl pkcs12 -in " + store + " -nokeys -out ca.pem)",
				"keys": "the client certificate (cert-file and key-file; from a PKCS#12 store: openssl pkcs12 -in " + store + " -clcerts -nokeys -out client.pem, and -nocerts -nodes -out client-key.pem)"}[f]
			im.errorf(v, "tls client %s: options.%s from vault %s cannot be translated: a kafka-grpc route reads %s from PEM files when the configuration loads. Convert the store, remove options.%s (and the vault) from the tls client, import again, and add to the route's with: tls: {ca-file: …, cert-file: …, key-file: …} (docs/configuration.md#kafka-grpc-bindings)",
				name, f, b.get("vault").str(), what, f)
			return false
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("tls client %s: TLS 1.2 or later, the service's certificate checked against the system's roots", name))
	if sni := opts.get("sni").strs(); len(sni) > 0 {
		s.notes = append(s.notes, fmt.Sprintf("tls client %s: sni %v dropped: the worker sends the authority's host name", name, sni))
	}
	if alpn := opts.get("alpn").strs(); len(alpn) > 0 {
		s.notes = append(s.notes, fmt.Sprintf("tls client %s: alpn %v dropped: the worker offers h2", name, alpn))
	}
	return true
}

// serviceAddress reads the host and port of the tcp client that ends a
// kafka-grpc route's chain.
func (im *importer) serviceAddress(name string, b *node, s *service) bool {
	im.known(b, "binding "+name, "type", "kind", "options")
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "host", "port")
	host, ports := opts.get("host"), opts.get("port").strs()
	if host.str() == "" || len(ports) != 1 || strings.Contains(ports[0], "-") {
		im.errorf(b, "tcp client %s: a kafka-grpc route needs one host and one port to dial (options.host, options.port)", name)
		return false
	}
	h, p := im.scalarOf(host, "host"), im.env(opts.get("port"), ports[0])
	for _, v := range zillaEnvRe.FindAllStringSubmatch(host.str(), -1) {
		im.hostVars[v[1]] = "localhost"
	}
	for _, v := range zillaEnvRe.FindAllStringSubmatch(ports[0], -1) {
		im.hostVars[v[1]] = "50051"
	}
	s.authority, s.tcpName, s.tcpLine = h+":"+p, name, b.pos.Line
	return true
}
