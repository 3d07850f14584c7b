package config

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Describe prints what a configuration does: Kafka clusters, guards, the
// route table in matching order, and the limits. It is what
// `kafka-ext-proc validate` prints for a valid file. Secrets never appear:
// of a cluster only bootstrap.servers is shown, of a guard only its key count.
func Describe(cfg *Config, w io.Writer) {
	var kafka [][]string
	for _, name := range sortedKeys(cfg.Kafka) {
		k := cfg.Kafka[name]
		servers := k.Properties["bootstrap.servers"]
		if servers == "" {
			servers = k.Properties["metadata.broker.list"]
		}
		kafka = append(kafka, []string{name, servers})
	}
	table(w, []string{"KAFKA", "BOOTSTRAP SERVERS"}, kafka)

	if len(cfg.Guards) > 0 {
		var guards [][]string
		for _, name := range sortedKeys(cfg.Guards) {
			g := cfg.Guards[name]
			guards = append(guards, []string{name, g.Type, describeGuard(g)})
		}
		fmt.Fprintln(w)
		table(w, []string{"GUARD", "TYPE", "SETTINGS"}, guards)
	}

	var routes [][]string
	for _, b := range cfg.Bindings {
		name := b.Name + " (" + string(b.Type) + ")"
		if len(b.Routes) == 0 {
			routes = append(routes, []string{name, "-", "-", "(no routes)"})
			continue
		}
		for _, r := range b.Routes {
			// Conditions are ORed; a route without any matches everything.
			when := "*"
			if len(r.When) > 0 {
				cs := make([]string, len(r.When))
				for i, c := range r.When {
					cs[i] = describeCondition(c)
				}
				when = strings.Join(cs, " | ")
			}
			capability, topic, key, replyTo, details := "-", "-", "-", "-", "-"
			if r.With != nil {
				capability, topic, key, replyTo, details = describeWith(b.Type, r.With)
			}
			routes = append(routes, []string{name, fmt.Sprint(r.Index), r.ID, when, describeGuarded(r.Guarded), r.Exit,
				capability, topic, key, replyTo, details})
		}
	}
	fmt.Fprintln(w)
	table(w, []string{"BINDING", "ROUTE", "ID", "WHEN", "GUARDED", "EXIT", "CAPABILITY", "TOPIC", "KEY", "REPLY-TO", "DETAILS"}, routes)

	l := cfg.Limits
	fmt.Fprintln(w)
	fmt.Fprintf(w, "LIMITS  max-body=%s max-wait=%s reply-timeout=%s reply-retention=%s kafka-timeout=%s\n",
		FormatSize(l.MaxBody), l.MaxWait, l.ReplyTimeout, l.ReplyRetention, l.KafkaTimeout)
	fmt.Fprintf(w, "        max-view-bytes=%s reply-index-bytes=%s max-views=%d view-idle=%s stream-lag-budget=%d stream-send-interval=%s stream-send-rate=%d\n",
		FormatSize(l.MaxViewBytes), FormatSize(l.ReplyIndexBytes), l.MaxViews, l.ViewIdle, l.StreamLagBudget, l.StreamSendInterval, l.StreamSendRate)
	fmt.Fprintf(w, "        idempotency-window=%s idempotency-keys=%d sse-heartbeat=%s sse-retry=%s\n",
		l.IdempotencyWindow, l.IdempotencyKeys, l.SSEHeartbeat, l.SSERetry)
}

// table prints aligned columns. Every row has as many cells as the header:
// tabwriter aligns a column only over consecutive lines that all have it.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range append([][]string{header}, rows...) {
		cells := make([]string, len(header))
		copy(cells, row)
		fmt.Fprintln(tw, strings.TrimRight(strings.Join(cells, "\t"), "\t"))
	}
	_ = tw.Flush()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func describeGuard(g *Guard) string {
	j := g.JWT
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if g.Type == "envoy-jwt" {
		add("provider", j.Provider)
	} else {
		add("issuer", j.Issuer)
		add("audience", j.Audience)
		var doc struct {
			Keys []json.RawMessage `json:"keys"`
		}
		_ = json.Unmarshal(j.Keys, &doc) // checked at load
		add("keys", fmt.Sprint(len(doc.Keys)))
		add("algorithms", strings.Join(j.Algorithms, ","))
		add("skew", j.Skew.String())
	}
	add("roles-claim", j.RolesClaim)
	add("identity-claim", j.IdentityClaim)
	return strings.Join(parts, " ")
}

func describeCondition(c Condition) string {
	var s string
	switch {
	case c.GRPCMethod != "":
		s = c.GRPCMethod
	case c.Service != "":
		s = c.Service + "/*"
	case c.Path != nil || c.Method != "":
		method, path := c.Method, "*"
		if method == "" {
			method = "*"
		}
		if c.Path != nil {
			path = c.Path.Raw
		}
		s = method + " " + path
	default:
		s = "*"
	}
	if len(c.Metadata) > 0 {
		var md []string
		for _, m := range c.Metadata {
			if m.Binary {
				md = append(md, m.Name+"=base64:"+base64.StdEncoding.EncodeToString(m.Value))
			} else {
				md = append(md, m.Name+"="+string(m.Value))
			}
		}
		s += " [" + strings.Join(md, " ") + "]"
	}
	return s
}

func describeGuarded(gs []GuardRequirement) string {
	if len(gs) == 0 {
		return "-"
	}
	var out []string
	for _, g := range gs {
		out = append(out, g.Guard+"["+strings.Join(g.Roles, ",")+"]")
	}
	return strings.Join(out, " ")
}

func describeHeaders(hs []HeaderTemplate) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name+"="+h.Value.String())
	}
	return strings.Join(out, " ")
}

func describeWith(typ BindingType, w *With) (capability, topic, key, replyTo, details string) {
	capability, topic, key, replyTo = string(w.Capability), w.Topic.String(), "-", "-"
	var d []string
	if w.TopicPattern != "" {
		d = append(d, "topic-pattern="+w.TopicPattern)
	}
	switch w.Capability {
	case Fetch:
		var fs []string
		for _, f := range w.Filters {
			var parts []string
			if f.Key != nil {
				parts = append(parts, "key="+f.Key.String())
			}
			if len(f.Headers) > 0 {
				parts = append(parts, "headers{"+describeHeaders(f.Headers)+"}")
			}
			fs = append(fs, strings.Join(parts, " "))
		}
		if len(fs) > 0 {
			d = append(d, "filters: "+strings.Join(fs, " | "))
		}
		if w.Merge != nil {
			d = append(d, "merge: "+w.Merge.ContentType)
		}
		if typ == SSEKafka {
			d = append(d, "event.id="+w.EventID)
		}
	case Produce:
		switch {
		case w.Key != nil:
			key = w.Key.String()
		case typ == GRPCKafka:
			key = "(correlation id)"
		}
		if w.ReplyTo != "" {
			replyTo = w.ReplyTo
		} else {
			replyTo = "(oneway)"
		}
		d = append(d, "acks="+string(w.Acks))
		if len(w.Overrides) > 0 {
			d = append(d, "overrides{"+describeHeaders(w.Overrides)+"}")
		}
		if len(w.Async) > 0 {
			d = append(d, "async{"+describeHeaders(w.Async)+"}")
		}
	}
	details = strings.Join(d, "; ")
	if details == "" {
		details = "-"
	}
	return capability, topic, key, replyTo, details
}
