package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestServeRefusals: veil serve refuses, with the reason and before
// listening, an address beyond loopback without TLS, half a TLS pair, a
// malformed address, a token file readable by others, --self-signed with a
// TLS pair, a short $VEIL_SERVE_TOKEN, and a wrong passphrase (exit 2).
func TestServeRefusals(t *testing.T) {
	dir := initTestLibrary(t)
	loose := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(loose, []byte("0123456789abcdef0123"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code int
		want string
		args []string
	}{
		{1, "--tls-cert and --tls-key", []string{"--addr", "0.0.0.0:7470"}},
		{1, "beyond this computer", []string{"--addr", "192.0.2.1:7470"}},
		{1, "want host:port", []string{"--addr", "7470"}},
		{1, "both --tls-cert and --tls-key", []string{"--tls-cert", "cert.pem"}},
		{1, "bad port", []string{"--addr", "127.0.0.1:http-ish"}},
		{1, "can be read by other users", []string{"--token-file", loose, "--no-faces"}},
		{1, "no library", []string{"--library", "", "--no-faces"}},
		{1, "--self-signed or --tls-cert and --tls-key, not both", []string{"--addr", "0.0.0.0:7470", "--self-signed", "--tls-cert", "c.pem", "--tls-key", "k.pem"}},
	} {
		args := append([]string{"serve", "--library", dir}, tc.args...)
		if tc.want == "no library" {
			args = append([]string{"serve"}, tc.args...)
		}
		mustExit(t, tc.code, tc.want, args...)
	}
	t.Setenv("VEIL_SERVE_TOKEN", "short")
	mustExit(t, 1, "$VEIL_SERVE_TOKEN has 5 characters", "serve", "--library", dir, "--no-faces", "--addr", "127.0.0.1:0")
	t.Setenv("VEIL_SERVE_TOKEN", "")
	t.Setenv(envPassphrase, "wrong")
	mustExit(t, 2, "wrong passphrase", "serve", "--library", dir, "--no-faces", "--addr", "127.0.0.1:0")
}
