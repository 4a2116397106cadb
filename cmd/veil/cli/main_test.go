package cli

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the package's tests with VEIL_TEST_SETTINGS=1: they create
// libraries with cheap Argon2id costs and short passphrases, which init
// and rekey refuse otherwise. TestLibraryKeyPolicy unsets it to check the
// refusals. The default privacy ledger folder is a temporary one
// (testLedgers).
func TestMain(m *testing.M) {
	os.Setenv(envTestSettings, "1")
	cleanup, err := testLedgers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
