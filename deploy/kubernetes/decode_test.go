package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istionetv1 "istio.io/client-go/pkg/apis/networking/v1"
	istionetv1a3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// kind is how one apiVersion/kind decodes: into a new Go object of its
// project's API, and, for Istio, its spec (a protobuf message) separately.
type kind struct {
	new  func() any
	spec func(any) proto.Message // nil: the object's JSON tags decode it all
}

var kinds = map[string]kind{
	"apps/v1/Deployment":            {new: func() any { return &appsv1.Deployment{} }},
	"apps/v1/StatefulSet":           {new: func() any { return &appsv1.StatefulSet{} }},
	"v1/Service":                    {new: func() any { return &corev1.Service{} }},
	"v1/ConfigMap":                  {new: func() any { return &corev1.ConfigMap{} }},
	"v1/Secret":                     {new: func() any { return &corev1.Secret{} }},
	"policy/v1/PodDisruptionBudget": {new: func() any { return &policyv1.PodDisruptionBudget{} }},

	"networking.istio.io/v1alpha3/EnvoyFilter": {
		new:  func() any { return &istionetv1a3.EnvoyFilter{} },
		spec: func(o any) proto.Message { return &o.(*istionetv1a3.EnvoyFilter).Spec },
	},
	"networking.istio.io/v1/Gateway": {
		new:  func() any { return &istionetv1.Gateway{} },
		spec: func(o any) proto.Message { return &o.(*istionetv1.Gateway).Spec },
	},
	"networking.istio.io/v1/VirtualService": {
		new:  func() any { return &istionetv1.VirtualService{} },
		spec: func(o any) proto.Message { return &o.(*istionetv1.VirtualService).Spec },
	},

	"gateway.networking.k8s.io/v1/Gateway":                {new: func() any { return &gwv1.Gateway{} }},
	"gateway.networking.k8s.io/v1/HTTPRoute":              {new: func() any { return &gwv1.HTTPRoute{} }},
	"gateway.envoyproxy.io/v1alpha1/EnvoyExtensionPolicy": {new: func() any { return &egv1a1.EnvoyExtensionPolicy{} }},
	"gateway.envoyproxy.io/v1alpha1/HTTPRouteFilter":      {new: func() any { return &egv1a1.HTTPRouteFilter{} }},
	"gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy":  {new: func() any { return &egv1a1.ClientTrafficPolicy{} }},
	"gateway.envoyproxy.io/v1alpha1/EnvoyProxy":           {new: func() any { return &egv1a1.EnvoyProxy{} }},
}

// documents splits a multi-document YAML stream, dropping empty documents.
func documents(data []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		js, err := yaml.YAMLToJSON(d)
		if err == nil && string(js) == "null" {
			continue
		}
		out = append(out, d)
	}
	return out
}

// decodeStrict decodes one manifest into its project's Go type, refusing
// unknown fields and duplicate keys at any depth: the Kubernetes objects'
// JSON tags through sigs.k8s.io/yaml's strict mode, Istio specs (protobuf
// messages, whose own JSON decoding ignores unknown fields) with protojson.
func decodeStrict(doc []byte) (any, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("reading apiVersion and kind: %w", err)
	}
	k, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("%s %s: no Go type registered for it", tm.APIVersion, tm.Kind)
	}
	obj := k.new()
	where := tm.APIVersion + " " + tm.Kind
	if k.spec == nil {
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return obj, nil
	}
	var shell struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       json.RawMessage   `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(doc, &shell); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	js, err := json.Marshal(struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}{shell.APIVersion, shell.Kind, shell.Metadata})
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(shell.Spec, k.spec(obj)); err != nil {
		return nil, fmt.Errorf("%s %q spec: %w", where, shell.Metadata.Name, err)
	}
	return obj, nil
}

// decodeAll decodes every document of a manifest file's content.
func decodeAll(data []byte) ([]any, error) {
	var out []any
	for i, d := range documents(data) {
		o, err := decodeStrict(d)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// all returns the objects of type T among objs.
func all[T any](objs []any) []T {
	var found []T
	for _, o := range objs {
		if t, ok := o.(T); ok {
			found = append(found, t)
		}
	}
	return found
}

// only returns the single object of type T among objs.
func only[T any](objs []any) (T, error) {
	found := all[T](objs)
	if len(found) != 1 {
		var zero T
		return zero, fmt.Errorf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0], nil
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// edited returns data with old replaced by new, failing the test unless old
// occurs exactly once: a broken copy must differ from the file it breaks.
func edited(t *testing.T, data []byte, pairs ...string) []byte {
	t.Helper()
	s := string(data)
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			t.Fatalf("%q occurs %d times, want 1", pairs[i], n)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return []byte(s)
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not contain %q:\n%v", s, err)
		}
	}
}

// Strict decoding refuses what a lenient decoder would drop, in Kubernetes,
// Istio and Envoy Gateway objects alike.
func TestDecodeStrictRefuses(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"unknown Deployment field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\nspec: { replica: 2 }\n", `unknown field "replica"`},
		{"duplicate key", "apiVersion: v1\nkind: Service\nmetadata: { name: x }\nmetadata: { name: y }\n", `key "metadata" already set`},
		{"unknown Istio spec field", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: { name: x }\nspec: { hosts: [a], htp: [] }\n", "htp"},
		{"unknown Envoy Gateway field", "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: EnvoyExtensionPolicy\nmetadata: { name: x }\nspec: { extProc: [{ failOpn: false }] }\n", "failOpn"},
		{"unregistered kind", "apiVersion: v1\nkind: Pod\nmetadata: { name: x }\n", "no Go type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeStrict([]byte(tc.doc))
			wantErr(t, err, tc.want)
		})
	}
}
