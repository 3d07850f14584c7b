package models

import (
	"encoding/base64"
	"os"
)

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }
