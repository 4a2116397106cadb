// Package serve is Veil's local web app: the tagging library (package
// tagging) in a browser and a REST API under /api/v1, served by veil serve
// from one binary with every asset embedded.
//
// Security model: the server holds the unlocked library in memory and is
// meant for its owner's browser on the same machine (loopback by default).
// Every request must name an allowed host (against DNS rebinding); a
// browser gets a session cookie (HttpOnly, SameSite=Strict) with its own
// CSRF token, and every state-changing request must carry that token in the
// X-CSRF-Token header and pass Go's cross-origin protection (Sec-Fetch-Site
// and Origin); another program may instead send Authorization: Bearer with
// the token the server was started with. Pages are served with a strict
// Content Security Policy (nothing from another origin, no inline script),
// bodies are size-limited, uploads are decoded in memory under imaging's
// limits and never written to disk, thumbnails and photos are sent with
// Cache-Control: no-store, and errors are JSON with a message, never a stack.
package serve

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
)

// Defaults of Options.
const (
	// DefaultMaxJSON is the largest JSON request body accepted.
	DefaultMaxJSON = 1 << 20
	// DefaultPageSize and MaxPageSize bound the lists the API returns.
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// SessionCookie is the name of the browser session's cookie.
	SessionCookie = "veil_session"
	// CSRFHeader carries a session's CSRF token on state-changing requests.
	CSRFHeader = "X-CSRF-Token"
	// maxSessions bounds the sessions kept in memory (the oldest go first).
	maxSessions = 64
)

// ContentSecurityPolicy is the policy of every response: only this origin's
// scripts, styles, images and connections, no inline script, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Options configure a Server. Library is required; the others have defaults.
type Options struct {
	// Library is the unlocked library the server shows and edits. The
	// server does not close it.
	Library *tagging.Library
	// Pipeline finds and describes faces (tagging.PipelineOptions): scans,
	// manual faces, search, recognize, verify and detect need it; without
	// one those routes answer 503.
	Pipeline *face.Pipeline
	// Logger receives one line per failed request (never a name, a
	// descriptor or a path of the library); nil discards.
	Logger *slog.Logger
	// Token, when set, lets other programs call the API with
	// Authorization: Bearer TOKEN instead of a browser session. At least
	// 16 characters.
	Token string
	// Hosts are the Host header values accepted (host:port; "*" accepts
	// any, see HostsFor). Empty means loopback only: 127.0.0.1, [::1] and
	// localhost on any port.
	Hosts []string
	// Limits bound uploaded and displayed photos (zero:
	// imaging.DefaultLimits, as the commands use).
	Limits imaging.Limits
	// MaxJSON bounds JSON request bodies (0: DefaultMaxJSON).
	MaxJSON int64
	// LedgerDir is the privacy ledger folder the Privacy page shows
	// (empty: none shown). It is only read.
	LedgerDir string
	// ModelInfo describes the face model for the Privacy page.
	ModelInfo string
	// Secure marks cookies Secure (the server runs behind TLS).
	Secure bool
}

// Server is the web app's HTTP handler. Make one with New.
type Server struct {
	opt     Options
	lib     *tagging.Library
	log     *slog.Logger
	mux     *http.ServeMux
	cop     *http.CrossOriginProtection
	routes  []route
	scans   *scans
	pages   *pages
	mu      sync.Mutex
	session map[string]*session
	sugs    cached[suggestionSet]
	means   cached[map[int64][]float32]
	groups  cached[[]tagging.ClusterGroup]
}

type session struct {
	csrf    string
	created time.Time
}

// New checks the options and builds the server.
func New(o Options) (*Server, error) {
	if o.Library == nil {
		return nil, errors.New("serve: Options.Library is required")
	}
	if o.Token != "" && len(o.Token) < 16 {
		return nil, fmt.Errorf("serve: the token is %d characters: want at least 16", len(o.Token))
	}
	if o.Limits == (imaging.Limits{}) {
		o.Limits = imaging.DefaultLimits()
	}
	if err := o.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.MaxJSON < 0 {
		return nil, fmt.Errorf("serve: MaxJSON %d is negative", o.MaxJSON)
	}
	if o.MaxJSON == 0 {
		o.MaxJSON = DefaultMaxJSON
	}
	for _, h := range o.Hosts {
		if h == "*" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, fmt.Errorf("serve: allowed host %q: want host:port", h)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opt: o, lib: o.Library, log: o.Logger, mux: http.NewServeMux(),
		cop: http.NewCrossOriginProtection(), session: map[string]*session{}}
	s.scans = newScans(s)
	s.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	var err error
	if s.pages, err = newPages(); err != nil {
		return nil, err
	}
	s.routes = append(s.apiRoutes(), s.pageRoutes()...)
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.pattern, rt.handler)
	}
	return s, nil
}

// Close stops a running scan and waits for it.
func (s *Server) Close() { s.scans.stop() }

// ServeHTTP checks the host, authenticates the request, enforces CSRF on
// state-changing requests and dispatches it.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &timingWriter{ResponseWriter: rw, start: time.Now()}
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("serve: handler panicked", "method", r.Method, "route", r.Pattern, "panic", fmt.Sprint(v))
			writeError(w, http.StatusInternalServerError, "internal error")
		}
	}()
	if !s.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, "this server does not answer for host "+r.Host)
		return
	}
	bearer := s.bearerOK(r)
	sess := s.sessionOf(r)
	isAPI := strings.HasPrefix(r.URL.Path, "/api/")
	if isAPI && !bearer && sess == nil {
		if s.opt.Token != "" && r.Header.Get("Authorization") != "" {
			writeError(w, http.StatusUnauthorized, "wrong token")
			return
		}
		writeError(w, http.StatusUnauthorized, "no session: open the app's page first, or send Authorization: Bearer TOKEN (veil serve --token)")
		return
	}
	if !isAPI && sess == nil && r.Method == http.MethodGet {
		var sid string
		sess, sid = s.newSession()
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: sid, Path: "/", HttpOnly: true,
			Secure: s.opt.Secure, SameSite: http.SameSiteStrictMode})
	}
	if stateChanging(r.Method) && !bearer {
		if err := s.cop.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		got := r.Header.Get(CSRFHeader)
		if sess == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "missing or wrong CSRF token (header "+CSRFHeader+")")
			return
		}
	}
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
	next, pattern := s.mux.Handler(r)
	if pattern == "" && isAPI {
		// No route: the mux's own answer (404, or 405 with Allow) as JSON.
		rec := &statusRecorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		if a := rec.header.Get("Allow"); a != "" {
			w.Header().Set("Allow", a)
		}
		writeError(w, rec.status, fmt.Sprintf("no API route %s %s", r.Method, r.URL.Path))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// timingWriter adds a Server-Timing header ("app;dur=MS": the time from the
// request's arrival to its response's header), which the browser's
// Navigation Timing reports as serverTiming.
type timingWriter struct {
	http.ResponseWriter
	start time.Time
	wrote bool
}

func (t *timingWriter) WriteHeader(code int) {
	if !t.wrote {
		t.wrote = true
		t.Header().Set("Server-Timing", fmt.Sprintf("app;dur=%.1f", float64(time.Since(t.start).Microseconds())/1000))
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *timingWriter) Write(b []byte) (int, error) {
	if !t.wrote {
		t.WriteHeader(http.StatusOK)
	}
	return t.ResponseWriter.Write(b)
}

// Flush passes flushes through (server-sent events).
func (t *timingWriter) Flush() {
	if !t.wrote {
		t.WriteHeader(http.StatusOK)
	}
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (t *timingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// statusRecorder keeps the status and headers a handler writes and drops
// its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

type sessionKey struct{}

// csrfOf returns the CSRF token of the request's session ("" without one).
func csrfOf(r *http.Request) string {
	if s, _ := r.Context().Value(sessionKey{}).(*session); s != nil {
		return s.csrf
	}
	return ""
}

func stateChanging(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

func (s *Server) hostAllowed(host string) bool {
	if len(s.opt.Hosts) > 0 {
		for _, h := range s.opt.Hosts {
			if h == "*" || strings.EqualFold(h, host) {
				return true
			}
		}
		return false
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) bearerOK(r *http.Request) bool {
	if s.opt.Token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opt.Token)) == 1
}

func (s *Server) sessionOf(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session[c.Value]
}

func (s *Server) newSession() (*session, string) {
	ss := &session{csrf: randomToken(), created: time.Now()}
	id := randomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.session) >= maxSessions {
		var oldest string
		for k, v := range s.session {
			if oldest == "" || v.created.Before(s.session[oldest].created) {
				oldest = k
			}
		}
		delete(s.session, oldest)
	}
	s.session[id] = ss
	return ss, id
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
	// Status repeats the HTTP status.
	Status int `json:"status"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg, Status: status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error: encoding the response","status":500}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
