package zillaimport

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// saslMechanisms maps Zilla's SASL mechanisms to librdkafka's sasl.mechanisms.
var saslMechanisms = map[string]string{
	"plain":         "PLAIN",
	"scram-sha-256": "SCRAM-SHA-256",
	"scram-sha-512": "SCRAM-SHA-512",
}

// kafkaClient translates a kafka client binding (and the tls client after
// it) into librdkafka properties.
func (im *importer) kafkaClient(name string, b *node) {
	im.used[name] = true
	im.known(b, "binding "+name, "type", "kind", "options", "exit", "routes", "vault")
	props := &omap{}
	var comments []string
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "servers", "sasl", "authorization", "bootstrap", "topics")
	if !im.bootstrap(name, b, props) {
		return
	}
	if opts.get("bootstrap") != nil || opts.get("topics") != nil {
		comments = append(comments, "options.bootstrap and options.topics dropped: views read the topics of fetch routes from startup, and topics are read from their start")
	}

	sasl, saslLine := im.sasl(name, opts)
	tlsOn := false
	if exit := b.get("exit").str(); exit != "" {
		next := im.bindings[exit]
		switch {
		case next == nil:
			im.errorf(b.get("exit"), "exit %s names no binding", exit)
		case next.get("type").str() == "tls" && next.get("kind").str() == "client":
			im.used[exit] = true
			tlsOn = true
			comments = append(comments, im.tlsClient(exit, next, props)...)
			if te := next.get("exit").str(); te != "" && im.bindings[te].get("type").str() == "tcp" {
				im.used[te] = true
				comments = append(comments, fmt.Sprintf("tcp client %s dropped: librdkafka connects to the brokers itself", te))
			}
		case next.get("type").str() == "tcp" && next.get("kind").str() == "client":
			im.used[exit] = true
			comments = append(comments, fmt.Sprintf("tcp client %s dropped: librdkafka connects to the brokers itself", exit))
		default:
			im.errorf(b.get("exit"), "kafka client %s exits to %s, which is neither a tls nor a tcp client", name, exit)
		}
	}
	switch {
	case sasl != nil && tlsOn:
		props.set("security.protocol", "SASL_SSL")
	case sasl != nil:
		props.set("security.protocol", "SASL_PLAINTEXT")
	case tlsOn:
		props.set("security.protocol", "SSL")
	}
	if sasl != nil {
		for _, e := range sasl.entries {
			props.set(e.key, e.val, e.comment...)
		}
		props.comment("sasl.mechanisms", fmt.Sprintf("SASL from line %d, read from the same environment variables", saslLine))
	}
	out := &omap{}
	out.set("type", "kafka")
	out.set("kind", "client")
	out.set("options", props)
	im.kafka.set(name, out, append([]string{fmt.Sprintf("zilla.yaml line %d: kafka client %s", b.pos.Line, name)}, comments...)...)
}

// bootstrap sets bootstrap.servers from options.servers or, in Zilla's
// older shape (no servers), from the host and port of the tcp client the
// binding exits to, directly or through its tls client; false, with the
// error at the binding's line, when neither names a broker.
func (im *importer) bootstrap(name string, b *node, props *omap) bool {
	if servers := b.get("options").get("servers"); servers != nil {
		var list []string
		for _, s := range servers.strs() {
			list = append(list, im.env(servers, s))
		}
		if len(list) == 0 || slices.Contains(list, "") {
			im.errorf(servers, "kafka client %s: options.servers wants a list of \"host:port\" strings (in a flow list, quote each: [\"kafka:9092\"])", name)
			return false
		}
		props.set("bootstrap.servers", strings.Join(list, ","), fmt.Sprintf("from options.servers (line %d)", servers.pos.Line))
		return true
	}
	tcpName, tcp := "", (*node)(nil)
	for next, hops := b.get("exit").str(), 0; next != "" && hops < 2; hops++ {
		nb := im.bindings[next]
		if nb.get("type").str() == "tcp" && nb.get("kind").str() == "client" {
			tcpName, tcp = next, nb
			break
		}
		next = nb.get("exit").str()
	}
	host, ports := tcp.get("options").get("host"), tcp.get("options").get("port").strs()
	if host.str() == "" || len(ports) == 0 {
		im.errorf(b, "kafka client %s has no options.servers, and no tcp client it exits to names a host and port: the processor needs the brokers to bootstrap from (options.servers: [host:port])", name)
		return false
	}
	var list []string
	for _, p := range ports {
		list = append(list, im.env(host, host.str())+":"+im.env(host, p))
	}
	props.set("bootstrap.servers", strings.Join(list, ","), fmt.Sprintf("from the host and port of tcp client %s (line %d): Zilla's older shape gives the brokers there", tcpName, tcp.pos.Line))
	return true
}

// sasl reads options.sasl (older Zilla) or options.authorization with an
// inline guard's identity and credentials (newer Zilla).
func (im *importer) sasl(name string, opts *node) (*omap, int) {
	var mech, user, pass *node
	var identity, credentials string
	line := 0
	if s := opts.get("sasl"); s != nil {
		im.known(s, "binding "+name+".options.sasl", "mechanism", "username", "password")
		mech, user, pass, line = s.get("mechanism"), s.get("username"), s.get("password"), s.pos.Line
	}
	if a := opts.get("authorization"); a != nil {
		if len(a.mapEntries()) != 1 {
			im.errorf(a, "options.authorization: want exactly one guard")
			return nil, 0
		}
		g := a.mapEntries()[0]
		guard := im.root.get("guards").get(g.key)
		switch {
		case guard == nil:
			im.errorf(g.val, "options.authorization names guard %s, which is not defined", g.key)
			return nil, 0
		case guard.get("type").str() != "inline":
			im.errorf(g.val, "options.authorization: guard %s is of type %s; only inline guards hold SASL credentials the importer can translate", g.key, guard.get("type").str())
			return nil, 0
		}
		im.used["guard "+g.key] = true
		identity = im.scalarOf(guard.get("options").get("identity"), "identity")
		credentials = im.scalarOf(guard.get("options").get("credentials"), "credentials")
		c := g.val.get("credentials")
		if c == nil {
			im.errorf(g.val, "options.authorization.%s has no credentials: say the SASL mechanism, username and password", g.key)
			return nil, 0
		}
		im.known(c, "options.authorization."+g.key+".credentials", "mechanism", "username", "password", "token")
		if c.get("token") != nil {
			im.errorf(c.get("token"), "%s", oauthbearerRefusal)
			return nil, 0
		}
		mech, user, pass, line = c.get("mechanism"), c.get("username"), c.get("password"), c.pos.Line
	}
	if mech == nil {
		return nil, 0
	}
	m, ok := saslMechanisms[mech.str()]
	if !ok {
		im.errorf(mech, "SASL mechanism %q cannot be translated: librdkafka supports plain, scram-sha-256 and scram-sha-512", mech.str())
		return nil, 0
	}
	expand := func(n *node) string {
		s := im.scalarOf(n, "SASL "+n.str())
		s = strings.ReplaceAll(s, "{identity}", identity)
		return strings.ReplaceAll(s, "{credentials}", credentials)
	}
	out := &omap{}
	out.set("sasl.mechanisms", m)
	out.set("sasl.username", expand(user))
	out.set("sasl.password", expand(pass))
	return out, line
}

// tlsClient maps a tls client binding and its vault onto librdkafka's ssl.*
// properties; it returns the comments that explain the mapping.
func (im *importer) tlsClient(name string, b *node, props *omap) []string {
	opts := b.get("options")
	im.known(opts, "binding "+name+".options", "trust", "trustcacerts", "keys", "sni", "alpn")
	var comments []string
	var vault *node
	if v := b.get("vault").str(); v != "" {
		vault = im.root.get("vaults").get(v)
		if vault == nil {
			im.errorf(b.get("vault"), "vault %s is not defined", v)
			return nil
		}
		im.used["vault "+v] = true
		if t := vault.get("type").str(); t != "filesystem" {
			im.errorf(vault, "vault %s of type %s cannot be translated: only filesystem vaults (key and trust stores)", v, t)
			return nil
		}
	}
	vopts := vault.get("options")
	if trust := opts.get("trust"); trust != nil {
		if !im.tlsTrust(name, b, trust, vopts, props) {
			return nil
		}
	} else if opts.get("trustcacerts").str() == "true" {
		props.set("ssl.ca.location", "probe", fmt.Sprintf("tls client %s: trustcacerts; librdkafka probes the system's CA locations", name))
	}
	if keys := opts.get("keys"); keys != nil {
		more, ok := im.tlsKeys(name, keys, vopts, props)
		if !ok {
			return nil
		}
		comments = append(comments, more...)
	}
	if sni := opts.get("sni"); sni != nil {
		comments = append(comments, fmt.Sprintf("tls client %s: sni %v dropped: librdkafka sends each broker's host name", name, sni.strs()))
	}
	if alpn := opts.get("alpn"); alpn != nil {
		comments = append(comments, fmt.Sprintf("tls client %s: alpn %v dropped: the Kafka protocol does not negotiate ALPN", name, alpn.strs()))
	}
	if vopts.get("keys") != nil || vopts.get("trust") != nil {
		comments = append(comments, "the store passwords appear only in the conversion commands; a PEM CA file needs none")
	}
	return comments
}

// tlsTrust maps options.trust, the certificates of the vault's trust store
// a tls client binding trusts, onto ssl.ca.location; false when the vault
// has no trust store.
func (im *importer) tlsTrust(name string, b, trust, vopts *node, props *omap) bool {
	store := vopts.get("trust")
	if store == nil {
		im.errorf(trust, "options.trust names certificates, but the vault has no trust store")
		return false
	}
	file, typ := im.scalarOf(store.get("store"), "trust.store"), strings.ToLower(store.get("type").str())
	pass := shellEnv(im.scalarOf(store.get("password"), "trust.password"))
	pem := strings.TrimSuffix(file, path.Ext(file)) + ".pem"
	props.set("ssl.ca.location", pem)
	var how string
	switch typ {
	case "", "pkcs12", "p12":
		how = fmt.Sprintf("openssl pkcs12 -in %s -nokeys -passin pass:\"%s\" -out %s", file, pass, pem)
	case "jks":
		var cmds []string
		for i, alias := range trust.strs() {
			redirect := ">"
			if i > 0 {
				redirect = ">>"
			}
			cmds = append(cmds, fmt.Sprintf("keytool -exportcert -rfc -keystore %s -storepass \"%s\" -alias %s %s %s", file, pass, alias, redirect, pem))
		}
		how = strings.Join(cmds, "\n  ")
	default:
		im.errorf(store.get("type"), "trust store type %s cannot be translated: jks or pkcs12", typ)
	}
	props.comment("ssl.ca.location", fmt.Sprintf("tls client %s (line %d): librdkafka reads PEM, not the %s store %s; convert the certificates %v once:\n  %s", name, b.pos.Line, cmpOr(typ, "pkcs12"), file, trust.strs(), how))
	return true
}

// tlsKeys maps options.keys, the keys of the vault's key store a tls client
// binding presents, onto ssl.keystore.*; it returns the comments that
// explain the mapping, and false when the vault has no key store.
func (im *importer) tlsKeys(name string, keys, vopts *node, props *omap) ([]string, bool) {
	var comments []string
	store := vopts.get("keys")
	if store == nil {
		im.errorf(keys, "options.keys names keys, but the vault has no key store")
		return nil, false
	}
	file, typ := im.scalarOf(store.get("store"), "keys.store"), strings.ToLower(store.get("type").str())
	pass := im.scalarOf(store.get("password"), "keys.password")
	shellPass := shellEnv(pass)
	switch typ {
	case "", "pkcs12", "p12":
		props.set("ssl.keystore.location", file)
	case "jks":
		p12 := strings.TrimSuffix(file, path.Ext(file)) + ".p12"
		props.set("ssl.keystore.location", p12, fmt.Sprintf("tls client %s: librdkafka reads PKCS#12, not JKS; convert once:\n  keytool -importkeystore -srckeystore %s -srcstoretype JKS -srcstorepass \"%s\" -destkeystore %s -deststoretype PKCS12 -deststorepass \"%s\"", name, file, shellPass, p12, shellPass))
	default:
		im.errorf(store.get("type"), "key store type %s cannot be translated: jks or pkcs12", typ)
	}
	props.set("ssl.keystore.password", pass)
	if len(keys.strs()) > 1 {
		comments = append(comments, fmt.Sprintf("tls client %s: several keys %v; librdkafka presents the one key of the store", name, keys.strs()))
	}
	return comments, true
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// guard translates a Zilla guard. jwt guards map onto ours; inline guards
// are read where a kafka client's SASL names them.
func (im *importer) guard(name string, g *node) {
	switch t := g.get("type").str(); t {
	case "inline":
		return
	case "jwt":
	default:
		im.errorf(g, "guard %s of type %s cannot be translated: only jwt guards (and inline guards holding SASL credentials)", name, t)
		return
	}
	im.used["guard "+name] = true
	opts := g.get("options")
	im.known(opts, "guard "+name+".options", "issuer", "audience", "keys", "roles", "identity", "challenge", "attributes")
	out := &omap{}
	var comments []string
	if v := opts.get("issuer"); v != nil {
		out.set("issuer", im.scalarOf(v, "issuer"))
	}
	if v := opts.get("audience"); v != nil {
		out.set("audience", im.scalarOf(v, "audience"))
	}
	switch keys := opts.get("keys"); {
	case keys == nil:
		im.errorf(g, "guard %s has no keys: the processor verifies tokens against a JWKS", name)
	case keys.kind == scalarNode:
		im.errorf(keys, "guard %s: keys from a URL (%s) cannot be translated: the processor does not fetch JWKS; download it to a file and give it as keys-file, or verify tokens in Envoy (jwt_authn with remote_jwks) and use a guard of type envoy-jwt", name, keys.str())
	default:
		var list []any
		for _, k := range keys.list() {
			jwk := &omap{}
			for _, e := range k.mapEntries() {
				jwk.set(e.key, im.scalarOf(e.val, "keys."+e.key))
			}
			list = append(list, jwk)
		}
		out.set("keys", list)
	}
	if v := opts.get("roles"); v != nil {
		out.set("roles-claim", im.scalarOf(v, "roles"), "Zilla's roles: the claim holding the roles")
	}
	if v := opts.get("identity"); v != nil {
		out.set("identity-claim", im.scalarOf(v, "identity"), "Zilla's identity: the claim holding the identity")
	}
	if v := opts.get("challenge"); v != nil {
		comments = append(comments, fmt.Sprintf("challenge (%s s before expiry, for SSE re-authorization) dropped: no binding here streams over SSE", v.str()))
	}
	if v := opts.get("attributes"); v != nil {
		comments = append(comments, "attributes dropped: routes here can use ${guarded['g'].identity} but no attributes")
	}
	comments = append(comments, "tokens are checked with exp/nbf and a 30s skew, every asymmetric algorithm accepted (set options.algorithms to narrow)")
	gout := &omap{}
	gout.set("type", "jwt")
	gout.set("options", out)
	im.guards.set(name, gout, append([]string{fmt.Sprintf("zilla.yaml line %d: guard %s", g.pos.Line, name)}, comments...)...)
}

// shellEnv writes ${env:X} as $X for the shell commands in comments.
func shellEnv(s string) string {
	return ourEnvRe.ReplaceAllString(s, "$$$1")
}

var ourEnvRe = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)

// oauthbearerRefusal says why a static OAUTHBEARER token has no
// translation and what to write instead: the processor hands librdkafka no
// tokens (and a static one expires), while librdkafka fetches and refreshes
// its own from an identity provider with OIDC client credentials.
const oauthbearerRefusal = "SASL oauthbearer with a static token cannot be translated: the processor hands librdkafka no tokens, and a static token expires; " +
	"let librdkafka fetch and refresh them from your identity provider (OIDC client credentials) with these options of the kafka client: " +
	"security.protocol: SASL_SSL, sasl.mechanism: OAUTHBEARER, sasl.oauthbearer.method: oidc, " +
	"sasl.oauthbearer.token.endpoint.url: <the provider's token endpoint>, sasl.oauthbearer.client.id: <client id>, " +
	"sasl.oauthbearer.client.secret: ${env:KAFKA_OIDC_SECRET}, sasl.oauthbearer.scope: <scope, if the provider needs one> " +
	"(docs/kafka.md, OAUTHBEARER with OIDC)"
