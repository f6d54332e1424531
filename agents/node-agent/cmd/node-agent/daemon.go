package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"nvkr.dev/node-agent/internal/labels"
)

// shutdownTimeout bounds how long in-flight HTTP requests may delay exit.
const shutdownTimeout = 5 * time.Second

// runDaemon runs passes until ctx is cancelled: every cfg.interval, or just
// once with --listen alone. It prints the readiness line (and the details)
// only when they differ from the last ones printed, serves the state over
// HTTP with --listen, and returns exitReady when stopped by ctx, whatever the
// last pass said: a DaemonSet pod terminated by its kubelet did not fail.
func runDaemon(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	// The HTTP server may log from its own goroutines.
	stderr = &lockedWriter{w: stderr}
	st := newState()

	var srv *http.Server
	served := make(chan error, 1)
	if cfg.listen != "" {
		ln, err := net.Listen("tcp", cfg.listen)
		if err != nil {
			return notReady(stdout, stderr, &failure{
				reason:  reasonListen,
				fields:  []string{"listen=" + cfg.listen},
				details: []string{err.Error()},
			}, exitNotReady)
		}
		srv = &http.Server{
			Handler:           st.handler(),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          log.New(stderr, name+": http: ", 0),
		}
		fmt.Fprintf(stderr, "%s: listening on %s\n", name, ln.Addr())
		go func() { served <- srv.Serve(ln) }()
	}

	status := exitReady
	last := ""
	for {
		res := pass(ctx, cfg)
		if ctx.Err() != nil {
			// A pass cut short by the signal says nothing about the node.
			break
		}
		st.set(res)
		if r := res.report(); r != last {
			res.print(stdout, stderr)
			last = r
		}
		if err := wait(ctx, cfg.interval, served); err != nil {
			if errors.Is(err, errStopped) {
				break
			}
			srv = nil
			status = notReady(stdout, stderr, &failure{
				reason:  reasonListen,
				fields:  []string{"listen=" + cfg.listen},
				details: []string{"http server: " + err.Error()},
			}, exitNotReady)
			break
		}
	}

	if status == exitReady {
		fmt.Fprintf(stderr, "%s: stopping\n", name)
	}
	if srv != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			fmt.Fprintf(stderr, "%s: error: http server shutdown: %v\n", name, err)
		}
		<-served // http.ErrServerClosed
	}
	return status
}

// errStopped is wait's answer when ctx is done.
var errStopped = errors.New("stopped")

// wait returns nil after interval (never if interval is 0), errStopped when
// ctx is done, or the error the HTTP server stopped with.
func wait(ctx context.Context, interval time.Duration, served <-chan error) error {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTimer(interval)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-ctx.Done():
		return errStopped
	case err := <-served:
		return err
	case <-tick:
		return nil
	}
}

// state is what the HTTP endpoints serve: the last pass's result and the
// labels of the last pass that was ready.
type state struct {
	mu     sync.Mutex
	ready  bool
	report string     // readiness line and details of the last pass
	labels labels.Set // published by the last ready pass; nil before one
}

func newState() *state {
	return &state{report: (&failure{reason: reasonStarting}).line() + "\n"}
}

func (s *state) set(r result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready, s.report = r.ready, r.report()
	if r.ready {
		s.labels = r.labels
	}
}

// handler serves
//
//	GET /healthz  200 "ok" while the process runs
//	GET /readyz   200 and the readiness line if the last pass was ready,
//	              else 503 and the not-ready line with its error details
//	GET /labels   200 and the labels of the last ready pass as a JSON
//	              object (what the label file and Node carry), or 503
//	              and {} if no pass has been ready yet
func (s *state) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, "text/plain; charset=utf-8", []byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		ready, report := s.ready, s.report
		s.mu.Unlock()
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		reply(w, code, "text/plain; charset=utf-8", []byte(report))
	})
	mux.HandleFunc("GET /labels", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		set := s.labels
		s.mu.Unlock()
		if set == nil {
			reply(w, http.StatusServiceUnavailable, "application/json", []byte("{}\n"))
			return
		}
		reply(w, http.StatusOK, "application/json", set.JSON())
	})
	return mux
}

func reply(w http.ResponseWriter, code int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(body)
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
