package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nvkr.dev/node-agent/internal/kube/kubetest"
	"nvkr.dev/node-agent/internal/labels"
	"nvkr.dev/node-agent/internal/pci/pcitest"
)

// envMainForTest makes the test binary run main() instead of the tests, so a
// test can run the real agent as a child process and signal it.
const envMainForTest = "NVKR_NODE_AGENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMainForTest) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const (
	nodeName = "gpu-node-1"
	h100     = 0x2330
)

var h100Labels = map[string]string{
	"kubernetes.io/hostname":  nodeName,
	"nvidia.com/gpu.count":    "1",
	"nvidia.com/gpu.present":  "true",
	"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
	"nvkr.dev/gpu-generation": "hopper",
}

// syncBuffer is a bytes.Buffer safe to read while the agent writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines returns the complete lines written so far.
func (s *syncBuffer) lines() []string {
	text := s.String()
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		return strings.Split(text[:i], "\n")
	}
	return nil
}

// agent is a daemon started by startAgent.
type agent struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

// startAgent runs the agent with args and env in a goroutine until stop.
func startAgent(t *testing.T, args []string, env map[string]string) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		a.done <- runContext(ctx, args, a.stdout, a.stderr, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop within 10s")
		}
	})
	return a
}

// stop cancels the agent's context (as SIGTERM does) and returns its status.
func (a *agent) stop(t *testing.T) int {
	t.Helper()
	a.cancel()
	select {
	case status := <-a.done:
		a.done <- status // for the cleanup
		return status
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop within 10s")
		return -1
	}
}

// addr waits for the "listening on" line and returns the address.
func (a *agent) addr(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, "the listening line", func() bool {
		for _, l := range a.stderr.lines() {
			if rest, ok := strings.CutPrefix(l, name+": listening on "); ok {
				addr = rest
				return true
			}
		}
		return false
	})
	return addr
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// writeAtomic replaces a staged file in one rename, so a pass never sees it
// half-written.
func (n node) writeAtomic(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(n.root, filepath.FromSlash(p))
	tmp := full + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, full); err != nil {
		t.Fatal(err)
	}
}

func kubeArgs(srv *kubetest.Server) []string {
	return []string{"--apply-node-labels", "--kube-api", srv.URL, "--kube-sa-dir", srv.SADir}
}

var nodeEnv = map[string]string{envNodeName: nodeName}

func patches(srv *kubetest.Server) int {
	return len(srv.Requests())
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

// TestDaemonPrintsOnlyStateChanges drives the interval loop through hardware
// and manifest changes and checks that a line is printed per change, not per
// pass, and that every ready pass re-applies the labels.
func TestDaemonPrintsOnlyStateChanges(t *testing.T) {
	n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
	srv := kubetest.New(t, "tok", nodeName)
	a := startAgent(t, n.args(append([]string{"--interval", "5ms"}, kubeArgs(srv)...)...), nodeEnv)

	ready1 := "nvkr-node-agent: ready gpus=1 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels=" + n.labelsFile + " node=" + nodeName
	ready2 := strings.Replace(ready1, "gpus=1", "gpus=2", 1)
	mismatch := "nvkr-node-agent: not-ready reason=file-mismatch path=/usr/bin/node-agent failed=1/3"

	waitFor(t, "three patches", func() bool { return patches(srv) >= 3 })
	if got := a.stdout.lines(); !reflect.DeepEqual(got, []string{ready1}) {
		t.Fatalf("after 3 passes stdout = %q, want one line", got)
	}
	if got := srv.Labels(nodeName); !reflect.DeepEqual(got, h100Labels) {
		t.Errorf("node labels = %v, want %v", got, h100Labels)
	}

	// A second GPU appears (one symlink: atomic for the scan).
	pcitest.Add(t, n.sysfs, pcitest.Function{Address: "0000:20:00.0", Vendor: pcitest.VendorNVIDIA, Device: h100, Class: pcitest.Class3D})
	waitFor(t, "the gpus=2 line", func() bool { return len(a.stdout.lines()) >= 2 })
	waitFor(t, "the node count label", func() bool { return srv.Labels(nodeName)["nvidia.com/gpu.count"] == "2" })

	// The staged binary is tampered with: not ready, labels left as they were.
	n.writeAtomic(t, "/usr/bin/node-agent", "evil\n")
	waitFor(t, "the not-ready line", func() bool { return len(a.stdout.lines()) >= 3 })
	before := patches(srv)
	time.Sleep(50 * time.Millisecond) // about ten failing passes
	if after := patches(srv); after != before {
		t.Errorf("%d patches sent while not ready", after-before)
	}
	if c := strings.Count(a.stderr.String(), "mismatch: expected sha256"); c != 1 {
		t.Errorf("the mismatch detail was printed %d times, want once:\n%s", c, a.stderr.String())
	}

	// Repaired: ready again, printed again.
	n.writeAtomic(t, "/usr/bin/node-agent", agentBinary)
	waitFor(t, "the ready line again", func() bool { return len(a.stdout.lines()) >= 4 })

	if status := a.stop(t); status != 0 {
		t.Errorf("status = %d, want 0", status)
	}
	if got, want := a.stdout.lines(), []string{ready1, ready2, mismatch, ready2}; !reflect.DeepEqual(got, want) {
		t.Errorf("stdout =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasSuffix(a.stderr.String(), name+": stopping\n") {
		t.Errorf("stderr does not end with the stopping line:\n%s", a.stderr.String())
	}
	got, err := os.ReadFile(n.labelsFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "NVKR_NODE_LABELS=nvidia.com/gpu.count=2,nvidia.com/gpu.present=true,nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvkr.dev/gpu-generation=hopper\n"; string(got) != want {
		t.Errorf("label file = %q, want %q", got, want)
	}
}

// TestDaemonHTTP serves the endpoints on a real listener and follows a
// failure: /readyz turns 503 with the reason, /labels keeps the labels last
// published, the server stops with the agent.
func TestDaemonHTTP(t *testing.T) {
	n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
	a := startAgent(t, n.args("--interval", "5ms", "--listen", "127.0.0.1:0"), nil)
	base := "http://" + a.addr(t)
	ready := "nvkr-node-agent: ready gpus=1 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels=" + n.labelsFile + "\n"
	waitFor(t, "the ready line", func() bool { return a.stdout.String() != "" })

	tests := []struct {
		method, path string
		wantCode     int
		wantType     string
		wantBody     string
	}{
		{"GET", "/healthz", 200, "text/plain; charset=utf-8", "ok\n"},
		{"HEAD", "/healthz", 200, "text/plain; charset=utf-8", ""},
		{"GET", "/readyz", 200, "text/plain; charset=utf-8", ready},
		{"GET", "/labels", 200, "application/json", string(labels.Set{
			"nvidia.com/gpu.count":    "1",
			"nvidia.com/gpu.present":  "true",
			"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
			"nvkr.dev/gpu-generation": "hopper",
		}.JSON())},
		{"POST", "/readyz", 405, "", ""},
		{"GET", "/metrics", 404, "", ""},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantCode {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.wantCode)
		}
		if tt.wantCode != 200 {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != tt.wantType {
			t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, ct, tt.wantType)
		}
		if string(body) != tt.wantBody {
			t.Errorf("%s %s: body %q, want %q", tt.method, tt.path, body, tt.wantBody)
		}
	}

	// sysfs disappears: not ready, labels as last published.
	if err := os.Rename(filepath.Join(n.sysfs, "bus"), filepath.Join(n.sysfs, "bus.gone")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz to fail", func() bool { code, _, _ := get(t, base+"/readyz"); return code == 503 })
	_, _, body := get(t, base+"/readyz")
	if !strings.HasPrefix(body, "nvkr-node-agent: not-ready reason=pci-scan-failed\nnvkr-node-agent: error: read PCI devices") {
		t.Errorf("/readyz body = %q", body)
	}
	if code, _, body := get(t, base+"/labels"); code != 200 || !strings.Contains(body, `"nvidia.com/gpu.count": "1"`) {
		t.Errorf("/labels after the failure = %d %q, want the last published labels", code, body)
	}
	if code, _, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d while not ready, want 200", code)
	}

	if status := a.stop(t); status != 0 {
		t.Errorf("status = %d, want 0", status)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the server still answers after the agent stopped")
	}
}

// TestStateHandler checks the endpoints in each state, through the handler.
func TestStateHandler(t *testing.T) {
	set := labels.Set{"nvidia.com/gpu.count": "0", "nvidia.com/gpu.present": "false"}
	readyLine := "nvkr-node-agent: ready gpus=0 product=none generation=none manifest=disabled labels=/run/nvkr/node-labels.env"
	failure := failed(&failure{reason: reasonNodePatch, fields: []string{"node=n", "http=403"}, details: []string{"patch node n: forbidden"}})
	tests := []struct {
		name       string
		results    []result // fed to the state in order
		wantReadyz int
		wantReport string
		wantLabels int
		wantJSON   string
	}{
		{
			name:       "starting",
			wantReadyz: 503,
			wantReport: "nvkr-node-agent: not-ready reason=starting\n",
			wantLabels: 503,
			wantJSON:   "{}\n",
		},
		{
			name:       "ready",
			results:    []result{{ready: true, line: readyLine, labels: set}},
			wantReadyz: 200,
			wantReport: readyLine + "\n",
			wantLabels: 200,
			wantJSON:   string(set.JSON()),
		},
		{
			name:       "failing from the start",
			results:    []result{failure},
			wantReadyz: 503,
			wantReport: "nvkr-node-agent: not-ready reason=node-patch-failed node=n http=403\nnvkr-node-agent: error: patch node n: forbidden\n",
			wantLabels: 503,
			wantJSON:   "{}\n",
		},
		{
			name:       "failing after ready",
			results:    []result{{ready: true, line: readyLine, labels: set}, failure},
			wantReadyz: 503,
			wantReport: "nvkr-node-agent: not-ready reason=node-patch-failed node=n http=403\nnvkr-node-agent: error: patch node n: forbidden\n",
			wantLabels: 200,
			wantJSON:   string(set.JSON()),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState()
			for _, r := range tt.results {
				st.set(r)
			}
			h := st.handler()
			for _, c := range []struct {
				path       string
				code       int
				body, kind string
			}{
				{"/healthz", 200, "ok\n", "text/plain; charset=utf-8"},
				{"/readyz", tt.wantReadyz, tt.wantReport, "text/plain; charset=utf-8"},
				{"/labels", tt.wantLabels, tt.wantJSON, "application/json"},
			} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
				if rec.Code != c.code || rec.Body.String() != c.body || rec.Header().Get("Content-Type") != c.kind {
					t.Errorf("GET %s = %d %q %q, want %d %q %q", c.path,
						rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), c.code, c.kind, c.body)
				}
				if c.path == "/labels" && c.code == 200 {
					var got map[string]string
					if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || !reflect.DeepEqual(got, map[string]string(set)) {
						t.Errorf("/labels does not decode to the labels: %v %v", got, err)
					}
				}
			}
		})
	}
}

// TestDaemonPatchFailureAndRecovery: the API refuses, the agent reports it on
// stdout and /readyz, retries every interval, and recovers when allowed.
func TestDaemonPatchFailureAndRecovery(t *testing.T) {
	n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
	srv := kubetest.New(t, "tok", nodeName)
	srv.Fail(http.StatusForbidden, `nodes "gpu-node-1" is forbidden: User "system:serviceaccount:nvkr:node-agent" cannot patch resource "nodes"`)
	a := startAgent(t, n.args(append([]string{"--interval", "5ms", "--listen", "127.0.0.1:0"}, kubeArgs(srv)...)...), nodeEnv)
	base := "http://" + a.addr(t)

	notReadyLine := "nvkr-node-agent: not-ready reason=node-patch-failed node=gpu-node-1 http=403"
	waitFor(t, "three refused patches", func() bool { return patches(srv) >= 3 })
	if got := a.stdout.lines(); !reflect.DeepEqual(got, []string{notReadyLine}) {
		t.Errorf("stdout = %q, want the not-ready line once", got)
	}
	if c := strings.Count(a.stderr.String(), "cannot patch resource"); c != 1 {
		t.Errorf("the API error was printed %d times, want once:\n%s", c, a.stderr.String())
	}
	code, _, body := get(t, base+"/readyz")
	if code != 503 || !strings.HasPrefix(body, notReadyLine+"\n") || !strings.Contains(body, "API server answered 403 Forbidden") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, _, _ := get(t, base+"/labels"); code != 503 {
		t.Errorf("/labels = %d before any ready pass, want 503", code)
	}

	srv.Fail(0, "")
	waitFor(t, "/readyz to pass", func() bool { code, _, _ := get(t, base+"/readyz"); return code == 200 })
	if got := srv.Labels(nodeName); !reflect.DeepEqual(got, h100Labels) {
		t.Errorf("node labels = %v, want %v", got, h100Labels)
	}
	if status := a.stop(t); status != 0 {
		t.Errorf("status = %d, want 0", status)
	}
	want := []string{notReadyLine, "nvkr-node-agent: ready gpus=1 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels=" + n.labelsFile + " node=gpu-node-1"}
	if got := a.stdout.lines(); !reflect.DeepEqual(got, want) {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	for _, r := range srv.Requests() {
		if r.Authorization != "Bearer tok" || r.ContentType != "application/merge-patch+json" || r.Method != "PATCH" || r.Path != "/api/v1/nodes/gpu-node-1" {
			t.Errorf("request %+v", r)
		}
	}
}

// TestListenWithoutInterval: one pass, then the result is served until the
// agent is stopped.
func TestListenWithoutInterval(t *testing.T) {
	n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
	srv := kubetest.New(t, "tok", nodeName)
	a := startAgent(t, n.args(append([]string{"--listen", "127.0.0.1:0"}, kubeArgs(srv)...)...), nodeEnv)
	base := "http://" + a.addr(t)
	waitFor(t, "/readyz to pass", func() bool { code, _, _ := get(t, base+"/readyz"); return code == 200 })
	time.Sleep(30 * time.Millisecond)
	if got := patches(srv); got != 1 {
		t.Errorf("%d patches, want exactly 1 without --interval", got)
	}
	if status := a.stop(t); status != 0 {
		t.Errorf("status = %d, want 0", status)
	}
}

func TestListenFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	n := newNode(t)
	var stdout, stderr bytes.Buffer
	status := runContext(context.Background(), n.args("--listen", busy.Addr().String(), "--interval", "1h"), &stdout, &stderr, os.Getenv)
	if status != 1 {
		t.Errorf("status = %d, want 1", status)
	}
	if want := "nvkr-node-agent: not-ready reason=listen-failed listen=" + busy.Addr().String() + "\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	if !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("stderr = %q", stderr.String())
	}
	if _, err := os.Stat(n.labelsFile); err == nil {
		t.Error("label file written although the agent could not start")
	}
}

// TestRunOnceApplyNodeLabels: without --interval or --listen, one pass that
// also patches the Node; a failed patch is exit 1.
func TestRunOnceApplyNodeLabels(t *testing.T) {
	tests := []struct {
		name       string
		fns        []pcitest.Function
		setup      func(t *testing.T, srv *kubetest.Server)
		inCluster  bool // take the API from KUBERNETES_SERVICE_* instead of --kube-api
		nodeName   string
		wantStatus int
		wantStdout string // "{labels}" is replaced by the label file path
		wantStderr string
		wantBody   string // the one PATCH body
		wantLabels map[string]string
	}{
		{
			name:       "8 H100",
			fns:        pcitest.GPUs(8, pcitest.VendorNVIDIA, h100, pcitest.Class3D),
			nodeName:   nodeName,
			wantStdout: "nvkr-node-agent: ready gpus=8 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels={labels} node=gpu-node-1\n",
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"8","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantLabels: map[string]string{
				"kubernetes.io/hostname":  nodeName,
				"nvidia.com/gpu.count":    "8",
				"nvidia.com/gpu.present":  "true",
				"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
				"nvkr.dev/gpu-generation": "hopper",
			},
		},
		{
			name:       "in-cluster API from the environment",
			fns:        pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D),
			inCluster:  true,
			nodeName:   nodeName,
			wantStdout: "nvkr-node-agent: ready gpus=1 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels={labels} node=gpu-node-1\n",
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"1","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantLabels: h100Labels,
		},
		{
			name: "GPUs removed: stale labels deleted, foreign labels kept",
			fns:  []pcitest.Function{{Address: "0000:00:00.0", Vendor: pcitest.VendorIntel, Device: 0x1593, Class: pcitest.ClassNIC}},
			setup: func(t *testing.T, srv *kubetest.Server) {
				for k, v := range h100Labels {
					srv.SetLabel(nodeName, k, v)
				}
				srv.SetLabel(nodeName, "nvidia.com/mig.strategy", "single")
			},
			nodeName:   nodeName,
			wantStdout: "nvkr-node-agent: ready gpus=0 product=none generation=none manifest=ok(3 files) labels={labels} node=gpu-node-1\n",
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"0","nvidia.com/gpu.present":"false","nvidia.com/gpu.product":null,"nvkr.dev/gpu-generation":null}}}`,
			wantLabels: map[string]string{
				"kubernetes.io/hostname":  nodeName,
				"nvidia.com/gpu.count":    "0",
				"nvidia.com/gpu.present":  "false",
				"nvidia.com/mig.strategy": "single",
			},
		},
		{
			name:       "forbidden",
			fns:        pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D),
			setup:      func(t *testing.T, srv *kubetest.Server) { srv.Fail(403, "nodes is forbidden") },
			nodeName:   nodeName,
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=node-patch-failed node=gpu-node-1 http=403\n",
			wantStderr: "nvkr-node-agent: error: patch node gpu-node-1: API server answered 403 Forbidden: nodes is forbidden\n",
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"1","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantLabels: map[string]string{"kubernetes.io/hostname": nodeName},
		},
		{
			name:       "node unknown to the API",
			fns:        pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D),
			nodeName:   "other-node",
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=node-patch-failed node=other-node http=404\n",
			wantStderr: `nvkr-node-agent: error: patch node other-node: API server answered 404 Not Found: nodes "other-node" not found` + "\n",
			wantBody:   `{"metadata":{"labels":{"nvidia.com/gpu.count":"1","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3","nvkr.dev/gpu-generation":"hopper"}}}`,
			wantLabels: map[string]string{"kubernetes.io/hostname": nodeName},
		},
		{
			name: "token missing",
			fns:  pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D),
			setup: func(t *testing.T, srv *kubetest.Server) {
				if err := os.Remove(filepath.Join(srv.SADir, "token")); err != nil {
					t.Fatal(err)
				}
			},
			nodeName:   nodeName,
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=node-patch-failed node=gpu-node-1\n",
			wantStderr: "nvkr-node-agent: error: patch node gpu-node-1: read service-account token: open ",
			wantLabels: map[string]string{"kubernetes.io/hostname": nodeName},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.fns...)
			srv := kubetest.New(t, "tok", nodeName)
			if tt.setup != nil {
				tt.setup(t, srv)
			}
			env := map[string]string{envNodeName: tt.nodeName}
			args := n.args("--apply-node-labels", "--kube-sa-dir", srv.SADir)
			if tt.inCluster {
				host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
				if err != nil {
					t.Fatal(err)
				}
				env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = host, port
			} else {
				args = append(args, "--kube-api", srv.URL)
			}
			var stdout, stderr bytes.Buffer
			status := runContext(context.Background(), args, &stdout, &stderr, func(k string) string { return env[k] })
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d\nstderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			if want := strings.ReplaceAll(tt.wantStdout, "{labels}", n.labelsFile); stdout.String() != want {
				t.Errorf("stdout = %q, want %q", stdout.String(), want)
			}
			if !strings.HasPrefix(stderr.String(), tt.wantStderr) || (tt.wantStderr == "" && stderr.Len() > 0) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.wantStderr)
			}
			reqs := srv.Requests()
			switch {
			case tt.wantBody == "" && len(reqs) > 0:
				t.Errorf("requests sent: %+v", reqs)
			case tt.wantBody != "" && (len(reqs) != 1 || reqs[0].Body != tt.wantBody):
				t.Errorf("requests = %+v, want one with body %s", reqs, tt.wantBody)
			}
			if got := srv.Labels(nodeName); !reflect.DeepEqual(got, tt.wantLabels) {
				t.Errorf("node labels = %v, want %v", got, tt.wantLabels)
			}
		})
	}
}

func TestDaemonUsageErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantStderr string
	}{
		{"negative interval", []string{"--interval", "-1s"}, nil, "--interval must not be negative"},
		{"interval without unit", []string{"--interval", "60"}, nil, `invalid value "60" for flag -interval`},
		{"apply without NODE_NAME", []string{"--apply-node-labels", "--kube-api", "https://10.96.0.1"}, nil, "$NODE_NAME is not set"},
		{"apply outside a pod", []string{"--apply-node-labels"}, nodeEnv, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"},
		{"plain http API", []string{"--apply-node-labels", "--kube-api", "http://10.96.0.1"}, nodeEnv, "want https://"},
		{"empty SA dir", []string{"--apply-node-labels", "--kube-api", "https://10.96.0.1", "--kube-sa-dir", ""}, nodeEnv, "service-account directory must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			var stdout, stderr bytes.Buffer
			status := runContext(context.Background(), n.args(tt.args...), &stdout, &stderr, func(k string) string { return tt.env[k] })
			if status != 2 {
				t.Errorf("status = %d, want 2", status)
			}
			if stdout.String() != "nvkr-node-agent: not-ready reason=usage\n" {
				t.Errorf("stdout = %q", stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantStderr, stderr.String())
			}
		})
	}

	// --print-labels needs no cluster even with --apply-node-labels.
	n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
	var stdout, stderr bytes.Buffer
	if status := runContext(context.Background(), n.args("--apply-node-labels", "--print-labels"), &stdout, &stderr, func(string) string { return "" }); status != 0 {
		t.Errorf("--print-labels --apply-node-labels: status %d, stderr %q", status, stderr.String())
	}
}

// TestSignals runs the real binary (this test binary running main) as a
// DaemonSet would and stops it with SIGTERM or SIGINT: exit status 0.
func TestSignals(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			n := newNode(t, pcitest.GPUs(1, pcitest.VendorNVIDIA, h100, pcitest.Class3D)...)
			srv := kubetest.New(t, "tok", nodeName)
			cmd := exec.Command(exe, n.args(append([]string{"--interval", "10ms", "--listen", "127.0.0.1:0"}, kubeArgs(srv)...)...)...)
			cmd.Env = append(os.Environ(), envMainForTest+"=1", envNodeName+"="+nodeName)
			var stdout, stderr syncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			waitFor(t, "the ready line", func() bool { return strings.Contains(stdout.String(), "nvkr-node-agent: ready ") })
			waitFor(t, "two patches", func() bool { return patches(srv) >= 2 })
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Errorf("agent exited with %v, want status 0\nstderr:\n%s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("agent did not exit within 10s of the signal")
			}
			if got := len(stdout.lines()); got != 1 {
				t.Errorf("stdout has %d lines, want 1:\n%s", got, stdout.String())
			}
			if !strings.HasSuffix(stderr.String(), name+": stopping\n") {
				t.Errorf("stderr =\n%s", stderr.String())
			}
		})
	}
}
