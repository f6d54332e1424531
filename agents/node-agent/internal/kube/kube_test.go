package kube_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"nvkr.dev/node-agent/internal/kube"
	"nvkr.dev/node-agent/internal/kube/kubetest"
)

const node = "gpu-node-1"

var h100 = map[string]string{
	"nvidia.com/gpu.count":    "8",
	"nvidia.com/gpu.present":  "true",
	"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
	"nvkr.dev/gpu-generation": "hopper",
}

func TestPatchNodeLabels(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, srv *kubetest.Server)
		set    map[string]string
		remove []string
		// wantBody is the exact patch; "" means no request may reach the
		// server (the client failed before sending).
		wantBody   string
		wantErr    string // substring; "" means success
		wantStatus int    // APIError status, if any
		wantLabels map[string]string
	}{
		{
			name:     "set the four labels",
			set:      h100,
			wantBody: `{"metadata":{"labels":{"nvidia.com/gpu.count":"8","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantLabels: map[string]string{
				"kubernetes.io/hostname":  node,
				"nvidia.com/gpu.count":    "8",
				"nvidia.com/gpu.present":  "true",
				"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
				"nvkr.dev/gpu-generation": "hopper",
			},
		},
		{
			name: "GPUs gone: stale product and generation deleted, other labels kept",
			setup: func(t *testing.T, srv *kubetest.Server) {
				for k, v := range h100 {
					srv.SetLabel(node, k, v)
				}
				srv.SetLabel(node, "team", "ml")
			},
			set:      map[string]string{"nvidia.com/gpu.count": "0", "nvidia.com/gpu.present": "false"},
			remove:   []string{"nvidia.com/gpu.product", "nvkr.dev/gpu-generation"},
			wantBody: `{"metadata":{"labels":{"nvidia.com/gpu.count":"0","nvidia.com/gpu.present":"false","nvidia.com/gpu.product":null,"nvkr.dev/gpu-generation":null}}}`,
			wantLabels: map[string]string{
				"kubernetes.io/hostname": node,
				"team":                   "ml",
				"nvidia.com/gpu.count":   "0",
				"nvidia.com/gpu.present": "false",
			},
		},
		{
			name: "forbidden",
			setup: func(t *testing.T, srv *kubetest.Server) {
				srv.Fail(http.StatusForbidden, `nodes "gpu-node-1" is forbidden: cannot patch resource "nodes"`)
			},
			set:        h100,
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"8","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantErr:    `patch node gpu-node-1: API server answered 403 Forbidden: nodes "gpu-node-1" is forbidden`,
			wantStatus: http.StatusForbidden,
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
		{
			name:       "server error without a Status body",
			setup:      func(t *testing.T, srv *kubetest.Server) { srv.Fail(http.StatusBadGateway, "") },
			set:        h100,
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"8","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantErr:    "API server answered 502 Bad Gateway",
			wantStatus: http.StatusBadGateway,
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
		{
			name: "token not mounted",
			setup: func(t *testing.T, srv *kubetest.Server) {
				if err := os.Remove(filepath.Join(srv.SADir, kube.TokenFile)); err != nil {
					t.Fatal(err)
				}
			},
			set:        h100,
			wantErr:    "read service-account token",
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
		{
			name: "empty token",
			setup: func(t *testing.T, srv *kubetest.Server) {
				if err := os.WriteFile(filepath.Join(srv.SADir, kube.TokenFile), []byte("\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			set:        h100,
			wantErr:    "is empty",
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
		{
			name: "CA not PEM",
			setup: func(t *testing.T, srv *kubetest.Server) {
				if err := os.WriteFile(filepath.Join(srv.SADir, kube.CAFile), []byte("junk"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			set:        h100,
			wantErr:    "holds no PEM certificate",
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
		{
			name: "server certificate not signed by the CA",
			setup: func(t *testing.T, srv *kubetest.Server) {
				// Every httptest server shares one certificate, so
				// make an unrelated CA.
				if err := os.WriteFile(filepath.Join(srv.SADir, kube.CAFile), otherCA(t), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			set:        h100,
			wantErr:    "certificate",
			wantLabels: map[string]string{"kubernetes.io/hostname": node},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := kubetest.New(t, "s3cret", node)
			if tt.setup != nil {
				tt.setup(t, srv)
			}
			c, err := kube.New(srv.URL, srv.SADir, "nvkr-node-agent/test")
			if err != nil {
				t.Fatal(err)
			}
			err = c.PatchNodeLabels(context.Background(), node, tt.set, tt.remove)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("PatchNodeLabels: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("PatchNodeLabels error = %v, want one containing %q", err, tt.wantErr)
			}
			var apiErr *kube.APIError
			if errors.As(err, &apiErr) != (tt.wantStatus != 0) || (apiErr != nil && apiErr.StatusCode != tt.wantStatus) {
				t.Errorf("error %v: want an APIError with status %d", err, tt.wantStatus)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error leaks the token: %v", err)
			}

			reqs := srv.Requests()
			if tt.wantBody == "" {
				if len(reqs) != 0 {
					t.Errorf("server got %d requests, want none: %+v", len(reqs), reqs)
				}
			} else {
				want := []kubetest.Request{{
					Method:        http.MethodPatch,
					Path:          "/api/v1/nodes/" + node,
					ContentType:   "application/merge-patch+json",
					Authorization: "Bearer s3cret",
					UserAgent:     "nvkr-node-agent/test",
					Body:          tt.wantBody,
				}}
				if !reflect.DeepEqual(reqs, want) {
					t.Errorf("requests =\n%+v\nwant\n%+v", reqs, want)
				}
			}
			if got := srv.Labels(node); !reflect.DeepEqual(got, tt.wantLabels) {
				t.Errorf("node labels = %v, want %v", got, tt.wantLabels)
			}
		})
	}
}

// otherCA returns a fresh self-signed CA certificate, PEM.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestPatchNodeLabelsRereadsRotatedToken(t *testing.T) {
	srv := kubetest.New(t, "first", node)
	c, err := kube.New(srv.URL+"/", srv.SADir, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.PatchNodeLabels(ctx, node, h100, nil); err != nil {
		t.Fatal(err)
	}
	srv.SetToken(t, "second")
	if err := c.PatchNodeLabels(ctx, node, h100, nil); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	var auth []string
	for _, r := range srv.Requests() {
		auth = append(auth, r.Authorization)
		if r.Path != "/api/v1/nodes/"+node {
			t.Errorf("path = %q (trailing slash of the API URL not trimmed?)", r.Path)
		}
	}
	if want := []string{"Bearer first", "Bearer second"}; !reflect.DeepEqual(auth, want) {
		t.Errorf("Authorization headers = %q, want %q", auth, want)
	}
}

func TestPatchNodeLabelsPathPrefixAndEscaping(t *testing.T) {
	srv := kubetest.New(t, "tok", node)
	c, err := kube.New(srv.URL+"/k8s", srv.SADir, "")
	if err != nil {
		t.Fatal(err)
	}
	// The fake serves no /k8s prefix: the 404 is expected, the path is what
	// is checked. A name is a DNS subdomain, but escape whatever comes.
	err = c.PatchNodeLabels(context.Background(), "a b", h100, nil)
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("error = %v, want a 404 APIError", err)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Path != "/k8s/api/v1/nodes/a b" {
		t.Errorf("requests = %+v", reqs)
	}
	if err := c.PatchNodeLabels(context.Background(), "", h100, nil); err == nil {
		t.Error("empty node name accepted")
	}
}

func TestPatchNodeLabelsHonoursContext(t *testing.T) {
	srv := kubetest.New(t, "tok", node)
	c, err := kube.New(srv.URL, srv.SADir, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.PatchNodeLabels(ctx, node, h100, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		api, saDir string
		wantErr    bool
	}{
		{"https://10.96.0.1:443", kube.DefaultSADir, false},
		{"https://[fd00::1]:6443/", kube.DefaultSADir, false},
		{"https://api.example.com/prefix", "/sa", false},
		{"http://10.96.0.1:443", kube.DefaultSADir, true},
		{"10.96.0.1:443", kube.DefaultSADir, true},
		{"https://", kube.DefaultSADir, true},
		{"https://user:pw@10.96.0.1", kube.DefaultSADir, true},
		{"https://10.96.0.1?x=1", kube.DefaultSADir, true},
		{"https://10.96.0.1", "", true},
		{"https://%zz", kube.DefaultSADir, true},
	}
	for _, tt := range tests {
		_, err := kube.New(tt.api, tt.saDir, "")
		if (err != nil) != tt.wantErr {
			t.Errorf("New(%q, %q) error = %v, want error %v", tt.api, tt.saDir, err, tt.wantErr)
		}
	}
}

func TestInClusterAPI(t *testing.T) {
	tests := []struct {
		host, port string
		want       string
		wantErr    bool
	}{
		{"10.96.0.1", "443", "https://10.96.0.1:443", false},
		{"fd00:10:96::1", "443", "https://[fd00:10:96::1]:443", false},
		{"", "443", "", true},
		{"10.96.0.1", "", "", true},
	}
	for _, tt := range tests {
		env := map[string]string{kube.EnvServiceHost: tt.host, kube.EnvServicePort: tt.port}
		got, err := kube.InClusterAPI(func(k string) string { return env[k] })
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("InClusterAPI(%q, %q) = %q, %v; want %q, error %v", tt.host, tt.port, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestLabelsPatch(t *testing.T) {
	got := string(kube.LabelsPatch(map[string]string{"b": "2", "a": "1"}, []string{"c", "a"}))
	// Keys sorted; a key both set and removed is set.
	if want := `{"metadata":{"labels":{"a":"1","b":"2","c":null}}}`; got != want {
		t.Errorf("LabelsPatch = %s, want %s", got, want)
	}
	if got, want := string(kube.LabelsPatch(nil, nil)), `{"metadata":{"labels":{}}}`; got != want {
		t.Errorf("LabelsPatch(nil, nil) = %s, want %s", got, want)
	}
}

func TestPatchNodeLabelsRereadsReplacedCA(t *testing.T) {
	srv := kubetest.New(t, "tok", node)
	caPath := filepath.Join(srv.SADir, kube.CAFile)
	good, err := os.ReadFile(caPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, otherCA(t), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(srv.URL, srv.SADir, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PatchNodeLabels(context.Background(), node, h100, nil); err == nil {
		t.Fatal("patch succeeded with a CA that did not sign the server certificate")
	}
	if err := os.WriteFile(caPath, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.PatchNodeLabels(context.Background(), node, h100, nil); err != nil {
		t.Fatalf("after the CA was replaced: %v", err)
	}
}
