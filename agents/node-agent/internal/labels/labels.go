// Package labels turns a GPU summary into Kubernetes node labels and writes
// them where kubelet picks them up.
//
// The agent runs before kubelet. A kubelet systemd drop-in reads the file
// written by WriteEnvFile as an EnvironmentFile and passes
// --node-labels=${NVKR_NODE_LABELS}, so the node registers with its GPU labels
// already set. The label keys follow NVIDIA GPU Feature Discovery where one
// exists (nvidia.com/gpu.*), so workloads can select nvkr nodes the same way.
package labels

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"nvkr.dev/node-agent/internal/gpu"
)

// Label keys.
const (
	KeyPresent    = "nvidia.com/gpu.present"
	KeyCount      = "nvidia.com/gpu.count"
	KeyProduct    = "nvidia.com/gpu.product"
	KeyGeneration = "nvkr.dev/gpu-generation"
)

// OwnedKeys returns the label keys the agent owns, sorted: every key
// FromSummary may return. When the agent writes labels to a Node it sets the
// ones in its Set and deletes the other owned keys (a node that lost its GPUs
// must not keep advertising a product), and touches no other label.
func OwnedKeys() []string {
	return []string{KeyCount, KeyPresent, KeyProduct, KeyGeneration}
}

// Missing returns the owned keys that are not in s, sorted.
func (s Set) Missing() []string {
	var missing []string
	for _, k := range OwnedKeys() {
		if _, ok := s[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

// EnvVar is the variable the label file sets.
const EnvVar = "NVKR_NODE_LABELS"

// Set is a set of node labels, key to value.
type Set map[string]string

// FromSummary returns the labels for a node with GPUs s: present and count
// always; product (as a label value, see Value) and generation only when the
// node has a GPU.
func FromSummary(s gpu.Summary) Set {
	set := Set{
		KeyPresent: strconv.FormatBool(s.Count > 0),
		KeyCount:   strconv.Itoa(s.Count),
	}
	if s.Count > 0 {
		set[KeyProduct] = Value(s.Product)
		set[KeyGeneration] = Value(string(s.Generation))
	}
	return set
}

// Keys returns the keys of s in sorted order.
func (s Set) Keys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String returns the labels as kubelet's --node-labels wants them:
// "k=v,k=v" with keys sorted.
func (s Set) String() string {
	pairs := make([]string, 0, len(s))
	for _, k := range s.Keys() {
		pairs = append(pairs, k+"="+s[k])
	}
	return strings.Join(pairs, ",")
}

// EnvFile returns the content of the label file: exactly one line,
// "NVKR_NODE_LABELS=k=v,k=v\n". Label keys and values never contain spaces,
// quotes, '$' or '\', so systemd reads the value verbatim without quoting.
func (s Set) EnvFile() []byte {
	return []byte(EnvVar + "=" + s.String() + "\n")
}

// JSON returns the labels as an indented JSON object with sorted keys and a
// trailing newline.
func (s Set) JSON() []byte {
	// A map[string]string always marshals; encoding/json sorts its keys.
	out, err := json.MarshalIndent(map[string]string(s), "", "  ")
	if err != nil {
		panic(err)
	}
	return append(out, '\n')
}

// maxValueLen is the longest valid Kubernetes label value.
const maxValueLen = 63

// Value turns s into a valid Kubernetes label value: every character outside
// [A-Za-z0-9._-] becomes '-' ("NVIDIA H100 80GB HBM3" becomes
// "NVIDIA-H100-80GB-HBM3"), the result is cut to 63 characters and trimmed
// until it starts and ends with a letter or digit. A string with no letter or
// digit becomes "unknown".
func Value(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	v := trimToAlnum(string(b))
	if len(v) > maxValueLen {
		v = trimToAlnum(v[:maxValueLen])
	}
	if v == "" {
		return gpu.UnknownProduct
	}
	return v
}

// ValidValue reports whether v is a valid non-empty Kubernetes label value.
func ValidValue(v string) bool {
	if v == "" || len(v) > maxValueLen || !isAlnum(v[0]) || !isAlnum(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func trimToAlnum(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return r > 0x7f || !isAlnum(byte(r)) })
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
