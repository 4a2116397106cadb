// Command veil-screenshot opens a page of veil serve in headless Chromium
// and saves a screenshot: the main job's last step. Glue over package
// serve/browser.
//
//	veil-screenshot --url http://127.0.0.1:7470/ --out out/people.png
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/veil-privacy/veil/serve/browser"
)

func main() {
	url := flag.String("url", "", "the page to open")
	out := flag.String("out", "screenshot.png", "the PNG file to write")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	if *url == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: veil-screenshot --url URL [--out FILE.png]")
		os.Exit(2)
	}
	if err := run(*url, *out, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "veil-screenshot: %v\n", err)
		os.Exit(1)
	}
}

func run(url, out string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bctx, stop, err := browser.Start(ctx, browser.Options{})
	if err != nil {
		return err
	}
	defer stop()
	t, err := browser.Navigate(bctx, url)
	if err != nil {
		return err
	}
	if err := browser.Screenshot(bctx, out); err != nil {
		return err
	}
	b, _ := json.Marshal(t)
	fmt.Printf("%s: %s\n", out, b)
	return nil
}
