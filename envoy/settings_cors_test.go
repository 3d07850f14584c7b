package envoy

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// corsYAML is the shipped file with its CORS blocks uncommented, with each
// pair of strings replaced (each must occur once).
func corsYAML(t *testing.T, pairs ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	s := string(uncommented(t, data, "cors-route", "cors-filter"))
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			t.Fatalf("%q occurs %d times, want 1", pairs[i], n)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return []byte(s)
}

func corsSettingsOf(t *testing.T, y []byte) (Settings, error) {
	t.Helper()
	b, err := Parse(y)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return SettingsFrom(b)
}

const vhLine = "            - name: all\n"

// The uncommented CORS route carries its policy; the other routes (and every
// route without the filter) carry none.
func TestCORSSettings(t *testing.T) {
	s, err := corsSettingsOf(t, corsYAML(t))
	if err != nil {
		t.Fatal(err)
	}
	want := &CORSPolicy{
		AllowOrigins:                 []StringMatch{{Exact: "https://app.example.com"}},
		AllowMethods:                 "GET, HEAD, POST, PUT, PATCH, DELETE",
		AllowHeaders:                 "content-type, idempotency-key, if-none-match, if-match, prefer, authorization",
		ExposeHeaders:                "etag, location, preference-applied, retry-after",
		MaxAge:                       "600",
		ForwardNotMatchingPreflights: true,
	}
	n := 0
	for _, r := range s.Routes {
		if r.Name == "http-cors" {
			n++
			if !reflect.DeepEqual(r.CORS, want) {
				t.Errorf("http-cors policy %+v, want %+v", r.CORS, want)
			}
		} else if r.CORS != nil {
			t.Errorf("route %q has a CORS policy %+v", r.Name, r.CORS)
		}
	}
	if n != 1 {
		t.Fatalf("%d http-cors routes, want 1", n)
	}

	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	s, err = corsSettingsOf(t, uncommented(t, data, "cors-route"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Routes {
		if r.CORS != nil {
			t.Errorf("without the CORS filter, route %q has a policy", r.Name)
		}
	}
}

// Each field comes from the most specific level that sets it: the route's
// max_age over the virtual host's, the virtual host's credentials and
// origins where the route sets none.
func TestCORSSettingsMerge(t *testing.T) {
	s, err := corsSettingsOf(t, corsYAML(t,
		vhLine, vhLine+`              typed_per_filter_config:
                envoy.filters.http.cors:
                  "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy
                  allow_origin_string_match: [{ suffix: ".example.org", ignore_case: true }]
                  allow_credentials: true
                  forward_not_matching_preflights: false
                  max_age: "60"
`,
		`allow_origin_string_match: [{ exact: "https://app.example.com" }]`, `max_age: "5"`,
		`max_age: "600"`, ``))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Routes {
		if r.Name != "http-cors" {
			continue
		}
		p := r.CORS
		if p == nil || p.MaxAge != "5" || !p.AllowCredentials || p.ForwardNotMatchingPreflights ||
			!reflect.DeepEqual(p.AllowOrigins, []StringMatch{{Suffix: ".example.org", IgnoreCase: true}}) ||
			p.AllowMethods != "GET, HEAD, POST, PUT, PATCH, DELETE" {
			t.Errorf("merged policy %+v", p)
		}
	}
}

// What the emulator cannot apply is refused with a message saying what.
func TestCORSSettingsRefuses(t *testing.T) {
	const corsFilter = "          - name: envoy.filters.http.cors\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors\n"
	const router = "          - name: envoy.filters.http.router\n"
	for name, tc := range map[string]struct {
		pairs []string
		want  []string
	}{
		"filter after ext_proc": {[]string{corsFilter, "", router, corsFilter + router}, []string{"CORS filter after ext_proc"}},
		"filter_enabled": {[]string{`max_age: "600"`, `max_age: "600"` + "\n                    filter_enabled: { default_value: { numerator: 50 } }"},
			[]string{`routes[`, `"http-cors"`, "filter_enabled"}},
		"deprecated field": {[]string{vhLine, vhLine + "              cors: { allow_methods: GET }\n"}, []string{"deprecated cors field"}},
		// Envoy unpacks the per-route config into the filter's own CorsPolicy
		// (cors/config.h, FactoryBase<Cors, cors::v3::CorsPolicy>): the route
		// API's CorsPolicy of the same name fails Envoy's load.
		"route API type": {[]string{"envoy.extensions.filters.http.cors.v3.CorsPolicy", "envoy.config.route.v3.CorsPolicy"},
			[]string{"envoy.config.route.v3.CorsPolicy", "want type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := corsSettingsOf(t, corsYAML(t, tc.pairs...))
			wantErr(t, "SettingsFrom", err, tc.want...)
		})
	}
}
