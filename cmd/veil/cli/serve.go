package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/serve"
	"github.com/veil-privacy/veil/tagging"
)

// serveHelp is veil serve's long help.
const serveHelp = `Serve unlocks the library once (--key-file, $VEIL_PASSPHRASE or a prompt) and
serves the tagging app and its REST API (/api/v1, described at
/api/v1/openapi.json) until Ctrl-C. Everything is served from this program:
no request goes to any other host. The key stays in memory only.

It listens on the loopback address 127.0.0.1:7470 by default, reachable from
this computer only. --addr with another interface needs --tls-cert and
--tls-key (PEM files) or --self-signed, and anyone who can reach the port and
open the page can use the library: prefer an SSH tunnel. --self-signed makes a
certificate and key (mode 0600) in the library's folder, or reuses the ones
made before, and prints the certificate's SHA-256 fingerprint: accept the
browser's warning only if it shows the same fingerprint.

A browser gets a session with its own CSRF token. Other programs call the API
with Authorization: Bearer TOKEN, where TOKEN (at least 16 characters) is read
from --token-file, else from $VEIL_SERVE_TOKEN; without either, the API
answers browsers only. There is no --token flag: a command line is visible to
every user of this computer (ps), a process's environment only to its user.

`

// serveFlags are veil serve's settings.
type serveFlags struct {
	lf                         libraryFlags
	o                          serve.ListenOptions
	models, ledgers, tokenFile string
	noFaces                    bool
}

func newServeCmd(e *env) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Tag your library in a browser: a local web app and REST API",
		Long:  serveHelp + exitStatusHelp,
		Example: `  veil serve --library ~/Pictures/veil
  veil serve --library lib --addr 127.0.0.1:8080 --token-file api.token
  VEIL_SERVE_TOKEN=$(cat api.token) veil serve --library lib
  veil serve --library lib --addr 192.168.1.10:7470 --self-signed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, e, &f) },
	}
	lf, o := &f.lf, &f.o
	lf.register(cmd)
	cmd.Flags().StringVar(&o.Addr, "addr", serve.DefaultAddr, "listen on this host:port (another interface than loopback needs --tls-cert and --tls-key)")
	cmd.Flags().StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	cmd.Flags().StringVar(&o.TLSKey, "tls-key", "", "the PEM private key of --tls-cert")
	cmd.Flags().BoolVar(&o.SelfSigned, "self-signed", false, "serve HTTPS with a self-signed certificate kept in the library's folder (made on first use; its fingerprint is printed)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file (mode 0600) holding a token of at least 16 characters that other programs send as Authorization: Bearer (else $"+serve.EnvToken+")")
	cmd.Flags().StringVar(&f.models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	cmd.Flags().StringVar(&f.ledgers, "ledger-dir", "", ledgerDirHelp+"; shown on the Privacy page, only read")
	cmd.Flags().BoolVar(&f.noFaces, "no-faces", false, "do not load the face networks: browse and tag only (no scans, search or drawn faces)")
	return cmd
}

// runServe unlocks the library, builds the server and serves until a
// signal.
func runServe(cmd *cobra.Command, e *env, f *serveFlags) error {
	o := &f.o
	loopback, err := o.Check()
	if err != nil {
		return err
	}
	token, _, err := serve.ReadToken(f.tokenFile, os.Getenv)
	if err != nil {
		return err
	}
	if f.ledgers == "" {
		if f.ledgers, err = dp.DefaultLedgerDir(); err != nil {
			f.ledgers = ""
		}
	}
	return withLibrary(e, &f.lf, func(l *tagging.Library) error {
		if o.SelfSigned {
			pair, err := serve.SelfSignedPair(l.Dir(), o.Addr)
			if err != nil {
				return err
			}
			made := "made earlier"
			if pair.Created {
				made = "made now"
			}
			fmt.Fprintf(e.stdout, "self-signed certificate %s (%s), SHA-256 fingerprint\n  %s\naccept the browser's warning only if it shows this fingerprint\n", pair.CertFile, made, pair.Fingerprint)
			o.TLSCert, o.TLSKey, o.SelfSigned = pair.CertFile, pair.KeyFile, false
		}
		opt := serve.Options{Library: l, Logger: e.log, Token: token, Hosts: serve.HostsFor(o.Addr),
			LedgerDir: f.ledgers, Secure: o.TLSCert != ""}
		if !f.noFaces {
			if opt.Pipeline, err = e.pipeline(tagging.PipelineOptions(f.models)); err != nil {
				return err
			}
		}
		s, err := serve.New(opt)
		if err != nil {
			return err
		}
		if !loopback {
			fmt.Fprintf(e.stderr, "warning: listening on %s, beyond this computer: anyone who reaches it and opens the page can see and change the library\n", o.Addr)
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		o.Ready = func(url string) { fmt.Fprintf(e.stdout, "serving the library at %s (Ctrl-C to stop)\n", url) }
		return s.ListenAndServe(ctx, *o)
	})
}
