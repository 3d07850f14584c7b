package observability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// metricsList reads metrics.txt: one metric family a line, # comments.
func metricsList(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out[line] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("metrics.txt lists %d metrics: the file is broken", len(out))
	}
	return out
}

// prometheusMade are series Prometheus makes itself, not the processor.
var prometheusMade = map[string]bool{"up": true, "scrape_duration_seconds": true}

// family is the metric family a series name belongs to: a histogram's
// _bucket, _sum and _count series belong to its family.
func family(name string, known map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
			return base
		}
	}
	return name
}

// unknownMetrics parses a PromQL expression with Prometheus's parser and
// returns the metrics it names that the processor does not expose.
func unknownMetrics(expr string, known map[string]bool) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var unknown []string
	var named bool
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			unknown = append(unknown, "a selector without a metric name: "+vs.String())
			return nil
		}
		named = true
		if f := family(vs.Name, known); !known[f] && !prometheusMade[vs.Name] {
			unknown = append(unknown, vs.Name)
		}
		return nil
	})
	if !named {
		return nil, fmt.Errorf("%q names no metric", expr)
	}
	return unknown, nil
}

// The alert rules load with Prometheus's own rule loader (which parses and
// checks every expression), and name only metrics the processor exposes.
func TestAlertRulesLoadAndNameExistingMetrics(t *testing.T) {
	known := metricsList(t)
	groups, errs := rulefmt.ParseFile("alerts.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("alerts.yaml: %v", errs)
	}
	var rules int
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			unknown, err := unknownMetrics(r.Expr, known)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if len(unknown) > 0 {
				t.Errorf("alert %s names metrics the processor does not expose: %v", r.Alert, unknown)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
		}
	}
	if rules < 5 {
		t.Fatalf("alerts.yaml holds %d rules", rules)
	}
}

// grafanaVariables stand in for the dashboard's variables, as Grafana
// interpolates them before the query reaches Prometheus.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$binding", ".*", "$job", ".*")

// Every query of the dashboard parses and names only metrics the processor
// exposes.
func TestDashboardQueriesNameExistingMetrics(t *testing.T) {
	known := metricsList(t)
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var queries int
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			expr := grafanaVariables.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: %q uses a variable the dashboard does not define", p.Title, tg.Expr)
				continue
			}
			unknown, err := unknownMetrics(expr, known)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
			if len(unknown) > 0 {
				t.Errorf("panel %q names metrics the processor does not expose: %v", p.Title, unknown)
			}
		}
	}
	for _, v := range dash.Templating.List {
		q, _ := v.Query.(string)
		metric, ok := strings.CutPrefix(q, "label_values(")
		if v.Type != "query" || !ok {
			continue
		}
		metric, _, _ = strings.Cut(metric, ",")
		if !known[metric] {
			t.Errorf("variable %s reads %s, which the processor does not expose", v.Name, metric)
		}
	}
	if queries < 10 {
		t.Fatalf("the dashboard has %d queries", queries)
	}
}

// Every metric of metrics.txt is in the metrics reference, by its full name
// or as a suffix of a family named just before (`_pinned` after
// `kafka_ext_proc_reply_index_entries`).
func TestMetricsReferenceListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name := range metricsList(t) {
		if !strings.HasPrefix(name, "kafka_ext_proc_") || strings.Contains(doc, "`"+name+"`") {
			continue
		}
		found := false
		for i := len("kafka_ext_proc_"); i < len(name); i++ {
			if name[i] == '_' && strings.Contains(doc, "`"+name[:i]+"_") && strings.Contains(doc, "`"+name[i:]+"`") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("docs/configuration.md does not list %s", name)
		}
	}
}
