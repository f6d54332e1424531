// Command node-agent is the nvkr node agent. It runs once at boot on a GPU
// node, before kubelet, from a systemd unit whose stdout goes to the serial
// console.
//
// It finds the NVIDIA GPUs on the PCI bus (from sysfs), checks the staged
// files against the build's manifest, writes the node labels for kubelet's
// drop-in to read, and prints exactly one line to stdout:
//
//	nvkr-node-agent: ready gpus=8 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels=/etc/nvkr/node-labels.env
//
// or, on failure, "nvkr-node-agent: not-ready reason=<reason> ..." with the
// details on stderr and exit status 1. Usage errors exit 2. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"nvkr.dev/node-agent/internal/gpu"
	"nvkr.dev/node-agent/internal/labels"
	"nvkr.dev/node-agent/internal/manifest"
	"nvkr.dev/node-agent/internal/pci"
)

// version is set at build time with -ldflags "-X main.version=<version>".
var version = "dev"

// name prefixes every line the agent prints, so console logs can be grepped.
const name = "nvkr-node-agent"

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
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	sysfs       string
	labelsFile  string
	manifest    string
	root        string
	printLabels bool
	version     bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
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
	// Parse prints its own errors and the usage to stderr.
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.labelsFile == "" && !cfg.printLabels:
		err = errors.New("--labels-file must not be empty")
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
	}
	return cfg, err
}

// failure is why the node is not ready: reason and fields go to the one
// stdout line, details to stderr.
type failure struct {
	reason  string
	fields  []string // extra "key=value" tokens for the stdout line
	details []string
}

// run is the whole agent, taking the command-line arguments (without the
// program name) and returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
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

	devs, err := pci.Scan(cfg.sysfs)
	if err != nil {
		f := &failure{reason: reasonPCIScan, details: []string{err.Error()}}
		if cfg.printLabels {
			printDetails(stderr, f)
			return exitNotReady
		}
		return notReady(stdout, stderr, f, exitNotReady)
	}
	summary := gpu.Summarize(gpu.Detect(devs))
	set := labels.FromSummary(summary)
	if cfg.printLabels {
		stdout.Write(set.JSON())
		return exitReady
	}

	manifestStatus := "disabled"
	if cfg.manifest != "" {
		n, f := verifyManifest(cfg.manifest, cfg.root)
		if f != nil {
			return notReady(stdout, stderr, f, exitNotReady)
		}
		manifestStatus = fmt.Sprintf("ok(%d %s)", n, plural(n, "file", "files"))
	}

	if err := labels.WriteEnvFile(cfg.labelsFile, set); err != nil {
		return notReady(stdout, stderr, &failure{reason: reasonLabelsWrite, details: []string{err.Error()}}, exitNotReady)
	}

	product, generation := "none", "none"
	if summary.Count > 0 {
		product, generation = set[labels.KeyProduct], set[labels.KeyGeneration]
	}
	fmt.Fprintf(stdout, "%s: ready gpus=%d product=%s generation=%s manifest=%s labels=%s\n",
		name, summary.Count, product, generation, manifestStatus, cfg.labelsFile)
	return exitReady
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
	printDetails(stderr, f)
	line := name + ": not-ready reason=" + f.reason
	if len(f.fields) > 0 {
		line += " " + strings.Join(f.fields, " ")
	}
	fmt.Fprintln(stdout, line)
	return status
}

func printDetails(stderr io.Writer, f *failure) {
	for _, d := range f.details {
		fmt.Fprintf(stderr, "%s: error: %s\n", name, d)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
