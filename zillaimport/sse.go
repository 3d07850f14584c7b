package zillaimport

import (
	"fmt"
	"strings"
)

// sseKafka translates an sse-kafka proxy: its routes are http paths, its
// with a topic, filters and the event id.
func (im *importer) sseKafka(name string, b *node) {
	im.proxyCommon(name, b)
	out := &omap{}
	out.set("type", "sse-kafka")
	out.set("kind", "proxy")
	if opts := b.get("options"); opts != nil {
		im.errorf(opts, "binding %s: options of an sse-kafka binding are not something the importer knows", name)
	}
	if creds := im.sseCredentials(); creds != nil {
		o := &omap{}
		o.set("credentials", creds, "from the http server's authorization: EventSource cannot set an authorization header, so a guarded route reads its token here")
		out.set("options", o)
	}
	im.setProxy(b, name, "sse-kafka", out, im.sseRoute)
}

func (im *importer) sseRoute(r *node) *omap {
	im.known(r, "route", "guarded", "when", "exit", "with")
	route := &omap{}
	im.guarded(r, route)
	var when []any
	for _, c := range r.get("when").list() {
		im.known(c, "when", "path")
		cond := &omap{}
		if p := c.get("path"); p != nil {
			if strings.Contains(p.str(), "*") {
				im.errorf(p, "path %q: Zilla's * (any text) cannot be translated: paths here are literal parts and {name} segments", p.str())
			}
			cond.set("path", p.str())
		}
		when = append(when, cond)
	}
	if when != nil {
		route.set("when", when)
	}
	route.set("exit", im.kafkaExit(r.get("exit")))
	w := r.get("with")
	if w == nil {
		im.errorf(r, "a route without with cannot be translated: with says which topic to stream")
		return route
	}
	im.known(w, "with", "topic", "filters", "event")
	with := &omap{}
	im.topic(w, with)
	if f := w.get("filters"); f != nil {
		with.set("filters", im.filters(f))
	}
	if ev := w.get("event"); ev != nil {
		im.known(ev, "with.event", "id")
		if id := ev.get("id"); id != nil && id.str() != "${etag}" {
			im.errorf(id, "with.event.id %s cannot be translated: the event id here is ${etag}, the stream's position, which a reconnect's last-event-id resumes from (a tombstone's delete event carries its key as data)", id.str())
		}
	}
	route.set("with", with)
	return route
}

// sseCredentials are the query parameter and cookie the http server
// bindings read a jwt guard's token from ({credentials} in Zilla's
// authorization), for the sse-kafka bindings behind them; nil when none.
func (im *importer) sseCredentials() *omap {
	var query, cookie string
	for _, name := range im.order {
		b := im.bindings[name]
		if b.get("type").str() != "http" || b.get("kind").str() != "server" {
			continue
		}
		for _, e := range b.get("options").get("authorization").mapEntries() {
			creds := e.val.get("credentials")
			for _, q := range creds.get("query").mapEntries() {
				if q.val.str() == "{credentials}" {
					query = q.key
				}
			}
			for _, c := range creds.get("cookies").mapEntries() {
				if c.val.str() == "{credentials}" {
					cookie = c.key
				}
			}
		}
	}
	if query == "" && cookie == "" {
		return nil
	}
	out := &omap{}
	if query != "" {
		out.set("query", query)
	}
	if cookie != "" {
		out.set("cookie", cookie)
	}
	return out
}

// httpFilesystem notes a static-file proxy dropped from a listener: the
// processor serves no files, and one page must not fail the whole file.
func (im *importer) httpFilesystem(l *listener, name string, b *node) {
	l.comments = append(l.comments, fmt.Sprintf("http-filesystem %s (line %d) dropped: the processor serves no files; serve the page from a web server "+
		"or a CDN (Envoy can route its paths to one), or, for a small page, an Envoy direct_response route", name, b.pos.Line))
	for _, r := range b.get("routes").list() {
		if e := r.get("exit"); e != nil {
			im.used[e.str()] = true // the filesystem server goes with it
		}
	}
}

// sseServer notes an sse server binding on a listener and follows it to its
// proxies.
func (im *importer) sseServer(l *listener, name string, b *node) {
	im.known(b.get("options"), "binding "+name+".options", "retry")
	if r := b.get("options").get("retry"); r != nil {
		l.comments = append(l.comments, fmt.Sprintf("sse server %s retry %s: the processor's limits.sse-retry says it to browsers", name, r.str()))
	}
	l.comments = append(l.comments, fmt.Sprintf("sse server %s: the processor answers event streams itself", name))
	for _, r := range b.get("routes").list() {
		im.serverChain(l, r.get("exit"))
	}
	if e := b.get("exit"); e != nil {
		im.serverChain(l, e)
	}
}
