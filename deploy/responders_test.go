package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

const respondersSvc = "responders"

// The responders service answers request-reply routes of the processor's
// configuration (`kafka-ext-proc responder`, from the same image): it mounts
// the same file, starts once the topics exist, and each --responder names a
// topic kafka-topics creates and a request-reply route of the kind's
// binding type writes (the command refuses anything else at start).
func TestResponders(t *testing.T) {
	s := loadStack(t)
	r := s.compose.Services[respondersSvc]
	if r == nil {
		t.Fatalf("docker-compose.yml has no service %q", respondersSvc)
	}
	if proc := s.compose.Services[processorSvc]; r.Build != nil || r.Image == "" || r.Image != proc.Image || r.PullPolicy != "never" {
		t.Errorf("%s: run the image the %s service builds (image %q, no build, pull_policy never), got image %q build %v pull_policy %q", respondersSvc, processorSvc, proc.Image, r.Image, r.Build, r.PullPolicy)
	}
	if len(r.Command) == 0 || r.Command[0] != "responder" {
		t.Fatalf("%s: command %q, want `responder ...`", respondersSvc, r.Command)
	}
	if cfg := hostFileFor(t, r, flagValue(t, r.Command, "--config")); filepath.Clean(cfg) != filepath.Clean(s.cfgHost) {
		t.Errorf("%s reads %s, the processor %s", respondersSvc, cfg, s.cfgHost)
	}
	if c := r.DependsOn[topicsSvc].Condition; c != "service_completed_successfully" {
		t.Errorf("%s depends_on %s: condition %q, want service_completed_successfully", respondersSvc, topicsSvc, c)
	}
	topics := s.compose.Services[topicsSvc]
	created := createdTopics(t, hostFileFor(t, topics, topics.Command[len(topics.Command)-1]))
	kinds := map[string]config.BindingType{"http-echo": config.HTTPKafka, "grpc-echo": config.GRPCKafka}
	n := 0
	for i, a := range r.Command {
		if a != "--responder" || i+1 >= len(r.Command) {
			continue
		}
		n++
		kind, topic, _ := strings.Cut(r.Command[i+1], ":")
		if _, ok := created[topic]; !ok {
			t.Errorf("--responder %s: kafka-topics does not create %s", r.Command[i+1], topic)
		}
		answered := false
		for _, b := range s.cfg.Bindings {
			for _, rt := range b.Routes {
				w := rt.With
				if b.Type == kinds[kind] && w != nil && w.Capability == config.Produce && w.Topic.Static() && w.Topic.Raw == topic && w.ReplyTo != "" {
					answered = true
				}
			}
		}
		if !answered {
			t.Errorf("--responder %s: no %s request-reply route of %s writes %s", r.Command[i+1], kinds[kind], s.cfgHost, topic)
		}
	}
	if n == 0 {
		t.Errorf("%s: no --responder in %q", respondersSvc, r.Command)
	}
}
