// Package kubetest is a fake Kubernetes API server for tests of the node
// agent: an httptest TLS server that accepts PATCH /api/v1/nodes/<name> with a
// JSON merge patch of the node's labels, checks the bearer token and content
// type like the real one, records every request, and comes with a
// service-account directory (token and ca.crt) that trusts it.
package kubetest

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Request is one request the server received.
type Request struct {
	Method        string
	Path          string // unescaped
	ContentType   string
	Authorization string
	UserAgent     string
	Body          string
}

// Server is a fake API server. Its zero value is not usable; call New.
type Server struct {
	*httptest.Server
	// URL (from httptest.Server) is the API base, e.g. https://127.0.0.1:PORT.

	// SADir is a service-account directory: "token" and "ca.crt" (the
	// server's certificate, PEM).
	SADir string

	mu       sync.Mutex
	token    string
	nodes    map[string]map[string]string
	requests []Request
	failCode int
	failMsg  string
}

// New starts a server that knows the nodes named nodes, each with the label
// kubernetes.io/hostname=<name>, and accepts the bearer token token. The
// server is closed when the test ends.
func New(t testing.TB, token string, nodes ...string) *Server {
	t.Helper()
	s := &Server{token: token, nodes: map[string]map[string]string{}, SADir: t.TempDir()}
	for _, n := range nodes {
		s.nodes[n] = map[string]string{"kubernetes.io/hostname": n}
	}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(s.SADir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	s.SetToken(t, token)
	return s
}

// SetToken writes token to the service-account directory and makes it the
// only one the server accepts, as when kubelet rotates a projected token.
func (s *Server) SetToken(t testing.TB, token string) {
	t.Helper()
	s.mu.Lock()
	s.token = token
	s.mu.Unlock()
	if err := os.WriteFile(filepath.Join(s.SADir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Fail makes every following request fail with code and a Status object
// holding message; Fail(0, "") restores normal service.
func (s *Server) Fail(code int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCode, s.failMsg = code, message
}

// Requests returns a copy of the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Labels returns a copy of the labels of node, or nil if the node is unknown.
func (s *Server) Labels(node string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.nodes[node]; ok {
		return maps.Clone(l)
	}
	return nil
}

// SetLabel sets a label on node directly, as another controller would.
func (s *Server) SetLabel(node, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[node][key] = value
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{
		Method:        r.Method,
		Path:          r.URL.Path,
		ContentType:   r.Header.Get("Content-Type"),
		Authorization: r.Header.Get("Authorization"),
		UserAgent:     r.Header.Get("User-Agent"),
		Body:          string(body),
	})

	if r.Header.Get("Authorization") != "Bearer "+s.token {
		status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	if s.failCode != 0 {
		status(w, s.failCode, s.failMsg)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
	if !ok || name == "" || strings.Contains(name, "/") {
		status(w, http.StatusNotFound, "the server could not find the requested resource")
		return
	}
	labels, ok := s.nodes[name]
	if !ok {
		status(w, http.StatusNotFound, fmt.Sprintf("nodes %q not found", name))
		return
	}
	if r.Method != http.MethodPatch {
		status(w, http.StatusMethodNotAllowed, "only PATCH is faked")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
		status(w, http.StatusUnsupportedMediaType, fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got %q)", ct))
		return
	}
	var patch struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields() // the agent patches labels and nothing else
	if err := dec.Decode(&patch); err != nil {
		status(w, http.StatusBadRequest, "bad merge patch: "+err.Error())
		return
	}
	for k, v := range patch.Metadata.Labels {
		if v == nil {
			delete(labels, k)
		} else {
			labels[k] = *v
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata":   map[string]any{"name": name, "labels": labels},
	})
}

// status writes a Kubernetes Status object, as the API server does on errors.
func status(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "v1",
		"kind":       "Status",
		"status":     "Failure",
		"message":    message,
		"code":       code,
	})
}
