package config

// LegalTopic reports whether name is a legal Kafka topic name (Kafka's
// Topic.validate): 1 to 249 characters of [a-zA-Z0-9._-], not "." or "..".
// The loader checks static topics with it, the bindings resolved ones.
func LegalTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
