// Command node-agent is the nvkr node agent. By default it runs once at boot
// on a GPU node, before kubelet, from a systemd unit whose stdout goes to the
// serial console.
//
// It finds the NVIDIA GPUs on the PCI bus (from sysfs), checks the staged
// files against the build's manifest, writes the node labels for kubelet's
// drop-in to read, and prints exactly one line to stdout:
//
//	nvkr-node-agent: ready gpus=8 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels=/etc/nvkr/node-labels.env
//
// or, on failure, "nvkr-node-agent: not-ready reason=<reason> ..." with the
// details on stderr and exit status 1. Usage errors exit 2.
//
// With --interval or --listen it runs as a daemon (a Kubernetes DaemonSet):
// it repeats the pass every interval, prints the readiness line whenever it
// changes, serves /healthz, /readyz and /labels, and exits 0 on SIGTERM or
// SIGINT. With --apply-node-labels every pass also patches the agent's labels
// onto its Node through the Kubernetes API (daemon.go). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"nvkr.dev/node-agent/internal/gpu"
	"nvkr.dev/node-agent/internal/kube"
	"nvkr.dev/node-agent/internal/labels"
	"nvkr.dev/node-agent/internal/manifest"
	"nvkr.dev/node-agent/internal/pci"
)

// version is set at build time with -ldflags "-X main.version=<version>".
var version = "dev"

// name prefixes every line the agent prints, so console logs can be grepped.
const name = "nvkr-node-agent"

// envNodeName names the Node to patch with --apply-node-labels; a DaemonSet
// sets it from the downward API (fieldRef spec.nodeName).
const envNodeName = "NODE_NAME"

// Exit statuses.
const (
	exitReady    = 0
	exitNotReady = 1
	exitUsage    = 2
)

// Reasons in the not-ready line. They are a stable interface for whoever
// reads the console: add new ones, do not rename these.
const (
	reasonUsage          = "usage"
	reasonPCIScan        = "pci-scan-failed"
	reasonManifestRead   = "manifest-unreadable"
	reasonManifestFormat = "manifest-malformed"
	reasonLabelsWrite    = "labels-write-failed"
	// A staged file that fails verification reports "file-" + its
	// manifest.Kind*: "file-mismatch", "file-missing", "file-unreadable".
	reasonFilePrefix = "file-"
	// The Node could not be patched (--apply-node-labels).
	reasonNodePatch = "node-patch-failed"
	// The HTTP server could not listen or stopped serving (--listen).
	reasonListen = "listen-failed"
	// No pass has finished yet: only ever served by /readyz.
	reasonStarting = "starting"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		// After the first signal, restore the default action so a
		// second one kills an agent stuck in shutdown.
		<-ctx.Done()
		stop()
	}()
	os.Exit(runContext(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

type config struct {
	sysfs           string
	labelsFile      string
	manifest        string
	root            string
	printLabels     bool
	version         bool
	interval        time.Duration
	listen          string
	applyNodeLabels bool
	kubeAPI         string
	kubeSADir       string

	// Set by parseFlags when applyNodeLabels (and not printLabels or
	// version): the Node to patch and the client to patch it with.
	nodeName string
	kube     *kube.Client
}

// daemon reports whether the agent keeps running after its first pass.
func (c config) daemon() bool {
	return c.interval > 0 || c.listen != ""
}

func parseFlags(args []string, stderr io.Writer, getenv func(string) string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\nflags:\n", name)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.sysfs, "sysfs", "/sys", "sysfs mount point to read PCI devices from")
	fs.StringVar(&cfg.labelsFile, "labels-file", "/etc/nvkr/node-labels.env", "where to write the kubelet EnvironmentFile with the node labels")
	fs.StringVar(&cfg.manifest, "manifest", "/etc/nvkr/manifest.json", "manifest of staged files to verify; empty disables verification")
	fs.StringVar(&cfg.root, "root", "/", "directory prefixed to every manifest path")
	fs.BoolVar(&cfg.printLabels, "print-labels", false, "print the labels as JSON to stdout and exit; writes nothing, skips the manifest")
	fs.BoolVar(&cfg.version, "version", false, "print the version and exit")
	fs.DurationVar(&cfg.interval, "interval", 0, "repeat the pass every `DURATION` until SIGTERM/SIGINT; 0 runs once")
	fs.StringVar(&cfg.listen, "listen", "", "serve /healthz, /readyz and /labels over HTTP on `ADDR` (e.g. :8080) until SIGTERM/SIGINT; empty disables")
	fs.BoolVar(&cfg.applyNodeLabels, "apply-node-labels", false, "also patch the labels onto the Node named by $"+envNodeName+" through the Kubernetes API")
	fs.StringVar(&cfg.kubeAPI, "kube-api", "", "Kubernetes API server `URL` for --apply-node-labels; empty means https://$"+kube.EnvServiceHost+":$"+kube.EnvServicePort)
	fs.StringVar(&cfg.kubeSADir, "kube-sa-dir", kube.DefaultSADir, "`DIR` holding the service-account token and ca.crt for --apply-node-labels")
	// Parse prints its own errors and the usage to stderr.
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	err := validate(&cfg, fs, getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
	}
	return cfg, err
}

// validate checks the flags together and, for --apply-node-labels, the
// environment, and builds the API client.
func validate(cfg *config, fs *flag.FlagSet, getenv func(string) string) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.labelsFile == "" && !cfg.printLabels:
		return errors.New("--labels-file must not be empty")
	case cfg.interval < 0:
		return fmt.Errorf("--interval must not be negative, got %v", cfg.interval)
	}
	if !cfg.applyNodeLabels || cfg.printLabels || cfg.version {
		return nil
	}
	cfg.nodeName = getenv(envNodeName)
	if cfg.nodeName == "" {
		return fmt.Errorf("--apply-node-labels: $%s is not set (set it from the downward API, fieldRef spec.nodeName)", envNodeName)
	}
	api := cfg.kubeAPI
	if api == "" {
		var err error
		if api, err = kube.InClusterAPI(getenv); err != nil {
			return fmt.Errorf("--apply-node-labels: %w; or set --kube-api", err)
		}
	}
	client, err := kube.New(api, cfg.kubeSADir, name+"/"+version)
	if err != nil {
		return fmt.Errorf("--apply-node-labels: %w", err)
	}
	cfg.kube = client
	return nil
}

// failure is why the node is not ready: reason and fields go to the one
// stdout line, details to stderr.
type failure struct {
	reason  string
	fields  []string // extra "key=value" tokens for the stdout line
	details []string
}

// line returns the not-ready line, without a newline.
func (f *failure) line() string {
	line := name + ": not-ready reason=" + f.reason
	if len(f.fields) > 0 {
		line += " " + strings.Join(f.fields, " ")
	}
	return line
}

// run is the whole agent, taking the command-line arguments (without the
// program name) and returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr, os.Getenv)
}

// runContext is run with a context whose cancellation (SIGTERM or SIGINT in
// main) stops the daemon, and the environment to read.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parseFlags(args, stderr, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return exitReady
	}
	if err != nil {
		// parseFlags has already explained the error on stderr.
		return notReady(stdout, stderr, &failure{reason: reasonUsage}, exitUsage)
	}
	if cfg.version {
		fmt.Fprintf(stdout, "%s %s\n", name, version)
		return exitReady
	}
	if cfg.printLabels {
		devs, err := pci.Scan(cfg.sysfs)
		if err != nil {
			printDetails(stderr, []string{err.Error()})
			return exitNotReady
		}
		stdout.Write(labels.FromSummary(gpu.Summarize(gpu.Detect(devs))).JSON())
		return exitReady
	}
	if cfg.daemon() {
		return runDaemon(ctx, cfg, stdout, stderr)
	}
	res := pass(ctx, cfg)
	res.print(stdout, stderr)
	if !res.ready {
		return exitNotReady
	}
	return exitReady
}

// result is the outcome of one pass.
type result struct {
	ready   bool
	line    string   // the readiness line, without a newline
	details []string // error details, one per stderr line
	labels  labels.Set
}

// print writes the details to stderr, then the readiness line to stdout.
func (r result) print(stdout, stderr io.Writer) {
	printDetails(stderr, r.details)
	fmt.Fprintln(stdout, r.line)
}

// report is the result as printed, for telling whether it changed and for
// /readyz.
func (r result) report() string {
	var b strings.Builder
	b.WriteString(r.line + "\n")
	for _, d := range r.details {
		fmt.Fprintf(&b, "%s: error: %s\n", name, d)
	}
	return b.String()
}

func failed(f *failure) result {
	return result{line: f.line(), details: f.details}
}

// pass is one run of the agent: scan the PCI bus, verify the manifest, write
// the label file and, with --apply-node-labels, patch the Node. Any failure
// stops the pass, so a node that fails verification publishes no labels.
func pass(ctx context.Context, cfg config) result {
	devs, err := pci.Scan(cfg.sysfs)
	if err != nil {
		return failed(&failure{reason: reasonPCIScan, details: []string{err.Error()}})
	}
	summary := gpu.Summarize(gpu.Detect(devs))
	set := labels.FromSummary(summary)

	manifestStatus := "disabled"
	if cfg.manifest != "" {
		n, f := verifyManifest(cfg.manifest, cfg.root)
		if f != nil {
			return failed(f)
		}
		manifestStatus = fmt.Sprintf("ok(%d %s)", n, plural(n, "file", "files"))
	}

	if err := labels.WriteEnvFile(cfg.labelsFile, set); err != nil {
		return failed(&failure{reason: reasonLabelsWrite, details: []string{err.Error()}})
	}

	if cfg.kube != nil {
		if err := cfg.kube.PatchNodeLabels(ctx, cfg.nodeName, set, set.Missing()); err != nil {
			f := &failure{reason: reasonNodePatch, fields: []string{"node=" + cfg.nodeName}, details: []string{err.Error()}}
			var apiErr *kube.APIError
			if errors.As(err, &apiErr) {
				f.fields = append(f.fields, fmt.Sprintf("http=%d", apiErr.StatusCode))
			}
			return failed(f)
		}
	}

	product, generation := "none", "none"
	if summary.Count > 0 {
		product, generation = set[labels.KeyProduct], set[labels.KeyGeneration]
	}
	line := fmt.Sprintf("%s: ready gpus=%d product=%s generation=%s manifest=%s labels=%s",
		name, summary.Count, product, generation, manifestStatus, cfg.labelsFile)
	if cfg.kube != nil {
		line += " node=" + cfg.nodeName
	}
	return result{ready: true, line: line, labels: set}
}

// verifyManifest loads the manifest and checks every file in it under root.
// It returns the number of files verified, or the failure.
func verifyManifest(path, root string) (int, *failure) {
	m, err := manifest.Load(path)
	if err != nil {
		reason := reasonManifestRead
		if errors.Is(err, manifest.ErrMalformed) {
			reason = reasonManifestFormat
		}
		return 0, &failure{reason: reason, fields: []string{"manifest=" + path}, details: []string{err.Error()}}
	}
	problems := manifest.Verify(m, root)
	if len(problems) == 0 {
		return len(m.Files), nil
	}
	f := &failure{
		reason: reasonFilePrefix + problems[0].Kind,
		fields: []string{"path=" + problems[0].Path, fmt.Sprintf("failed=%d/%d", len(problems), len(m.Files))},
	}
	for _, p := range problems {
		f.details = append(f.details, "manifest: "+p.String())
	}
	return 0, f
}

// notReady prints the not-ready line to stdout and the details to stderr, and
// returns status.
func notReady(stdout, stderr io.Writer, f *failure, status int) int {
	failed(f).print(stdout, stderr)
	return status
}

func printDetails(stderr io.Writer, details []string) {
	for _, d := range details {
		fmt.Fprintf(stderr, "%s: error: %s\n", name, d)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
