{{/*
The chart name, truncated to 63 characters (a Kubernetes label value).
*/}}
{{- define "node-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: <release>-<chart> unless the release name already
contains the chart name; 63 characters at most (DNS label).
*/}}
{{- define "node-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
chart label: name-version, with '+' (SemVer build metadata) not allowed in label values.
*/}}
{{- define "node-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every resource carries.
*/}}
{{- define "node-agent.labels" -}}
helm.sh/chart: {{ include "node-agent.chart" . }}
{{ include "node-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels the DaemonSet selects its pods by (immutable once installed).
*/}}
{{- define "node-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "node-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the pods run as.
*/}}
{{- define "node-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "node-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: repository@digest. A tag is accepted only when no digest is set (local
development); with neither, rendering fails rather than deploy an unpinned image.
*/}}
{{- define "node-agent.image" -}}
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
