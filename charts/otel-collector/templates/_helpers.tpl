{{/*
The chart name, truncated to 63 characters (a Kubernetes label value).
*/}}
{{- define "otel-collector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: <release>-<chart> unless the release name already
contains the chart name; 55 characters at most, so "-cluster" still fits a DNS label.
*/}}
{{- define "otel-collector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels every resource carries.
*/}}
{{- define "otel-collector.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "otel-collector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels a workload selects its pods by (immutable once installed): "selectorLabels" with the
component ("node" or "cluster") in a dict: (dict "root" $ "component" "node").
*/}}
{{- define "otel-collector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otel-collector.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The ServiceAccount the pods run as.
*/}}
{{- define "otel-collector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "otel-collector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: repository@digest. A tag is accepted only when no digest is set (local
development); with neither, rendering fails rather than deploy an unpinned image.
*/}}
{{- define "otel-collector.image" -}}
{{- $repo := required "image.repository is required" .Values.image.repository }}
{{- if .Values.image.digest }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) }}
{{- fail (printf "image.digest %q is not sha256:<64 lower-case hex>" .Values.image.digest) }}
{{- end }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else if .Values.image.tag }}
{{- printf "%s:%s" $repo .Values.image.tag }}
{{- else }}
{{- fail "image.digest is required (nvkr sets it when it packages the chart; or set image.tag for development)" }}
{{- end }}
{{- end }}

{{/*
Checks the values every template relies on; renders nothing.
*/}}
{{- define "otel-collector.validate" -}}
{{- if not (has .Values.distribution (list "contrib" "k8s" "core")) }}
{{- fail (printf "distribution %q is not one of contrib, k8s, core" .Values.distribution) }}
{{- end }}
{{- if and (eq .Values.distribution "core") (or .Values.node.enabled .Values.cluster.enabled) }}
{{- fail "distribution core has no Kubernetes receivers (kubeletstats, filelog, k8s_cluster, k8sobjects, k8sattributes): use contrib or k8s, or turn node and cluster off" }}
{{- end }}
{{- if not (has .Values.otlp.protocol (list "grpc" "http")) }}
{{- fail (printf "otlp.protocol %q is not grpc or http" .Values.otlp.protocol) }}
{{- end }}
{{- $endpoint := required "otlp.endpoint is required: the OTLP endpoint logs, metrics and traces go to (host:port for grpc, an http(s):// URL for http)" .Values.otlp.endpoint }}
{{- if and (eq .Values.otlp.protocol "http") (not (regexMatch "^https?://" $endpoint)) }}
{{- fail (printf "otlp.endpoint %q: protocol http needs an http:// or https:// URL" $endpoint) }}
{{- end }}
{{- end }}

{{/*
The exporter and the processors both collectors share (YAML under the config's top level).
*/}}
{{- define "otel-collector.exporters" -}}
exporters:
  {{- if eq .Values.otlp.protocol "grpc" }}
  otlp:
  {{- else }}
  otlphttp:
  {{- end }}
    endpoint: {{ .Values.otlp.endpoint | quote }}
    compression: {{ .Values.otlp.compression }}
    tls:
      insecure: {{ .Values.otlp.insecure }}
    {{- with .Values.otlp.headers }}
    headers:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}

{{- define "otel-collector.exporterName" -}}
{{- if eq .Values.otlp.protocol "grpc" }}otlp{{ else }}otlphttp{{ end }}
{{- end }}
