package serve

import (
	"fmt"
	"strings"

	"github.com/veil-privacy/veil/tagging"
)

// EnvToken is the environment variable that gives the API token
// (Options.Token) when no token file is named. There is no flag with the
// token itself: a command line is visible to every local user (ps,
// /proc/PID/cmdline), a process's environment only to its own user and
// root.
const EnvToken = "VEIL_SERVE_TOKEN"

// ReadToken returns the API token: from file (mode 0600, as for a key
// file) when named, else from $VEIL_SERVE_TOKEN (getenv reads the
// environment), else "" (no token: the API answers browsers' sessions
// only). It also names where the token came from, for the log. A token
// shorter than 16 characters is refused.
func ReadToken(file string, getenv func(string) string) (token, from string, err error) {
	switch {
	case file != "":
		b, err := tagging.ReadKeyFile(file)
		if err != nil {
			return "", "", fmt.Errorf("--token-file: %w", err)
		}
		token, from = string(b), "--token-file"
	default:
		token, from = strings.TrimRight(getenv(EnvToken), "\r\n"), "$"+EnvToken
		if token == "" {
			return "", "", nil
		}
	}
	if len(token) < 16 {
		return "", "", fmt.Errorf("the API token from %s has %d characters: want at least 16", from, len(token))
	}
	return token, from, nil
}
