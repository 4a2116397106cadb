// Package browser drives headless Chromium over the DevTools protocol
// (chromedp) for veil serve's end-to-end tests, the main job's screenshot
// and the page timings: find the browser, start it, take a screenshot,
// read a page's Navigation Timing.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/chromedp/chromedp"
)

// EnvChromium names the Chromium executable to use instead of the one found
// in PATH.
const EnvChromium = "VEIL_CHROMIUM"

// candidates are the executables Find looks for in PATH, in order
// (Debian's chromium package installs /usr/bin/chromium).
var candidates = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// ErrNoBrowser is returned when no Chromium is installed.
var ErrNoBrowser = errors.New("no Chromium found: install Debian's chromium package (scripts/test.sh does: apt-get install chromium) or set " + EnvChromium)

// Find returns the Chromium executable: $VEIL_CHROMIUM, else the first of
// chromium, chromium-browser, google-chrome-stable, google-chrome in PATH.
func Find() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %w", EnvChromium, p, err)
		}
		return p, nil
	}
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Options configure Start.
type Options struct {
	// Exec is the browser executable (default: Find's).
	Exec string
	// Width and Height are the window's size in CSS pixels (default 1280×900).
	Width, Height int
}

// Start launches headless Chromium (a fresh profile in a temporary folder,
// no extensions, no network beyond what pages ask) and returns a context
// for chromedp actions in its first tab; cancel closes the browser.
func Start(ctx context.Context, o Options) (context.Context, context.CancelFunc, error) {
	if o.Exec == "" {
		p, err := Find()
		if err != nil {
			return nil, nil, err
		}
		o.Exec = p
	}
	if o.Width <= 0 || o.Height <= 0 {
		o.Width, o.Height = 1280, 900
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(o.Exec),
		chromedp.WindowSize(o.Width, o.Height),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox (CI runs as root).
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// Start the browser now, so that a missing library or a crash is
	// reported here.
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		return nil, nil, fmt.Errorf("starting %s: %w", o.Exec, err)
	}
	return bctx, func() { bcancel(); acancel() }, nil
}

// Screenshot saves a PNG of the whole page in the browser's tab.
func Screenshot(ctx context.Context, file string) error {
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (a lower quality gives JPEG)
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	return os.WriteFile(file, buf, 0o600)
}

// Timing is a page load's Navigation Timing, in milliseconds from the
// navigation's start.
type Timing struct {
	// Server is the server's own time for the page (its Server-Timing
	// header's first duration; 0 without one).
	Server float64 `json:"server_ms"`
	// ResponseStart is the first byte of the page's HTML.
	ResponseStart float64 `json:"response_start_ms"`
	// ResponseEnd is the last byte of the HTML.
	ResponseEnd float64 `json:"response_end_ms"`
	// FirstContentfulPaint is the first text or image painted (Paint
	// Timing; 0 when the browser reported none).
	FirstContentfulPaint float64 `json:"first_contentful_paint_ms"`
	// DOMContentLoaded is the end of the DOMContentLoaded event (scripts
	// run).
	DOMContentLoaded float64 `json:"dom_content_loaded_ms"`
	// Load is the end of the load event (the images in view loaded).
	Load float64 `json:"load_ms"`
}

// Navigate opens url, waits for the load event, and returns its timing.
func Navigate(ctx context.Context, url string) (Timing, error) {
	var t Timing
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return t, fmt.Errorf("opening %s: %w", url, err)
	}
	const js = `(() => { const n = performance.getEntriesByType("navigation")[0];
	  const p = performance.getEntriesByName("first-contentful-paint")[0];
	  const st = (n.serverTiming || [])[0];
	  return {server_ms: st ? st.duration : 0, response_start_ms: n.responseStart, response_end_ms: n.responseEnd,
	    first_contentful_paint_ms: p ? p.startTime : 0, dom_content_loaded_ms: n.domContentLoadedEventEnd,
	    load_ms: n.loadEventEnd}; })()`
	// The load event's end is recorded after the event: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	var loaded time.Time
	for {
		var err error
		if t, err = chromedp.Run(ctx, chromedp.Evaluate[Timing](js)); err != nil {
			return t, fmt.Errorf("reading the timing of %s: %w", url, err)
		}
		// The first paint is reported a frame after it happens: give it
		// up to a second after the load event.
		if t.Load > 0 && loaded.IsZero() {
			loaded = time.Now()
		}
		if (t.Load > 0 && (t.FirstContentfulPaint > 0 || time.Since(loaded) > time.Second)) || time.Now().After(deadline) {
			return t, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}
