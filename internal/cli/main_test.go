package cli

import (
	"os"
	"testing"
)

// TestMain runs the package's tests with VEIL_TEST_SETTINGS=1: they create
// libraries with cheap Argon2id costs and short passphrases, which init
// and rekey refuse otherwise. TestLibraryKeyPolicy unsets it to check the
// refusals.
func TestMain(m *testing.M) {
	os.Setenv(envTestSettings, "1")
	os.Exit(m.Run())
}
