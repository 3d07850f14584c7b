package models

import (
	"encoding/base64"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }
