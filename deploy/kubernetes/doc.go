// Package kubernetes is the Kubernetes deployment of kafka-ext-proc: a Helm
// chart for the processor (chart/) and the Envoy in front of it in three
// setups (standalone/, istio/, envoy-gateway/). It has no code of its own; its
// tests decode every manifest strictly into the owning project's Go types,
// render and lint the chart with Helm's SDK, and run the checks of
// `kafka-ext-proc validate --envoy` on every Envoy configuration the setups
// make. It is a module of its own so that the Kubernetes, Istio, Envoy
// Gateway and Helm modules stay out of the main module's build. No cluster
// runs these tests.
package kubernetes
