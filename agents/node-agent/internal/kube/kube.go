// Package kube is the node agent's minimal Kubernetes API client: it patches
// the labels of one Node with a JSON merge patch, authenticating the way every
// in-cluster client does (the pod's service-account token and cluster CA).
//
// It is deliberately tiny (standard library only, one request type) so the
// agent stays free of client-go. The token and CA are re-read before every
// request: kubelet rotates projected service-account tokens while the pod
// runs, and a long-lived DaemonSet pod must not keep using an expired one.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultSADir is where Kubernetes mounts a pod's service-account credentials.
const DefaultSADir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Files in the service-account directory.
const (
	TokenFile = "token"
	CAFile    = "ca.crt"
)

// Environment variables Kubernetes sets in every pod for the API service.
const (
	EnvServiceHost = "KUBERNETES_SERVICE_HOST"
	EnvServicePort = "KUBERNETES_SERVICE_PORT"
)

// MergePatchType is the content type of a JSON merge patch (RFC 7386).
const MergePatchType = "application/merge-patch+json"

// DefaultTimeout bounds one request, including reading the response.
const DefaultTimeout = 10 * time.Second

// maxErrorBody is how much of an error response is read for its message.
const maxErrorBody = 64 << 10

// InClusterAPI returns the API server URL from the environment Kubernetes sets
// in every pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (an IPv6 host is bracketed).
func InClusterAPI(getenv func(string) string) (string, error) {
	host, port := getenv(EnvServiceHost), getenv(EnvServicePort)
	if host == "" || port == "" {
		return "", fmt.Errorf("%s and %s must be set (not running in a pod?)", EnvServiceHost, EnvServicePort)
	}
	return "https://" + net.JoinHostPort(host, port), nil
}

// Client talks to one API server with the credentials in one service-account
// directory. It is safe for concurrent use.
type Client struct {
	base      string // scheme, host and path prefix, no trailing slash
	saDir     string
	userAgent string
	timeout   time.Duration

	mu     sync.Mutex
	caPEM  []byte       // CA the cached transport trusts
	client *http.Client // rebuilt when ca.crt changes
}

// New returns a client for the API server at apiURL (https only: the request
// carries a bearer token) reading its credentials from saDir. userAgent is
// sent with every request.
func New(apiURL, saDir, userAgent string) (*Client, error) {
	u, err := url.Parse(apiURL)
	if err != nil {
		return nil, fmt.Errorf("API server URL %q: %w", apiURL, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("API server URL %q: want https://HOST[:PORT][/PATH]", apiURL)
	}
	if saDir == "" {
		return nil, errors.New("service-account directory must not be empty")
	}
	base := strings.TrimSuffix(u.String(), "/")
	return &Client{base: base, saDir: saDir, userAgent: userAgent, timeout: DefaultTimeout}, nil
}

// APIError is a response from the API server with a non-2xx status.
type APIError struct {
	StatusCode int
	// Message is the Status object's message if the body is one, else the
	// start of the body.
	Message string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("API server answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// LabelsPatch returns the merge-patch body that sets the labels in set and
// deletes those in remove (a merge patch deletes a key given as null):
// {"metadata":{"labels":{"k":"v","gone":null}}}, keys sorted. A key in both
// is set.
func LabelsPatch(set map[string]string, remove []string) []byte {
	labels := make(map[string]any, len(set)+len(remove))
	for _, k := range remove {
		labels[k] = nil
	}
	for k, v := range set {
		labels[k] = v
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		panic(err) // strings and nulls always marshal
	}
	return body
}

// PatchNodeLabels sets the labels in set and deletes the labels in remove on
// the Node named node, with one JSON merge patch (PATCH /api/v1/nodes/<node>).
// Labels not named in either are left alone. A non-2xx answer is an
// *APIError.
func (c *Client) PatchNodeLabels(ctx context.Context, node string, set map[string]string, remove []string) error {
	if node == "" {
		return errors.New("patch node: empty node name")
	}
	if err := c.patchNodeLabels(ctx, node, set, remove); err != nil {
		return fmt.Errorf("patch node %s: %w", node, err)
	}
	return nil
}

func (c *Client) patchNodeLabels(ctx context.Context, node string, set map[string]string, remove []string) error {
	hc, token, err := c.credentials()
	if err != nil {
		return err
	}
	endpoint := c.base + "/api/v1/nodes/" + url.PathEscape(node)

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, endpoint, bytes.NewReader(LabelsPatch(set, remove)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", MergePatchType)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return &APIError{StatusCode: resp.StatusCode, Message: statusMessage(body)}
}

// credentials reads the token and the CA, rebuilding the HTTP client if the CA
// changed since the last request.
func (c *Client) credentials() (*http.Client, string, error) {
	raw, err := os.ReadFile(filepath.Join(c.saDir, TokenFile))
	if err != nil {
		return nil, "", fmt.Errorf("read service-account token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return nil, "", fmt.Errorf("read service-account token: %s is empty", filepath.Join(c.saDir, TokenFile))
	}
	caPath := filepath.Join(c.saDir, CAFile)
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return nil, "", fmt.Errorf("read cluster CA: %w", err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil && bytes.Equal(caPEM, c.caPEM) {
		return c.client, token, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", fmt.Errorf("read cluster CA: %s holds no PEM certificate", caPath)
	}
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
	c.caPEM = caPEM
	c.client = &http.Client{
		Transport: &http.Transport{
			// The API service is reached directly, never via a proxy
			// from the environment.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 5 * time.Second,
			ForceAttemptHTTP2:   true,
			MaxIdleConns:        1,
			IdleConnTimeout:     90 * time.Second,
		},
		// Never follow a redirect with the token.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c.client, token, nil
}

// statusMessage extracts the message of a Kubernetes Status object, or
// returns the start of the body on one line.
func statusMessage(body []byte) string {
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &status) == nil && status.Message != "" {
		return status.Message
	}
	msg := strings.Join(strings.Fields(string(body)), " ")
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return msg
}
