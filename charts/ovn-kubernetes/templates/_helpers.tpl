{{/*
The chart name, truncated to 63 characters (a Kubernetes label value).
*/}}
{{- define "ovn-kubernetes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: <release>-<chart> unless the release name already
contains the chart name; 45 characters at most, so "-cluster-manager" still fits a DNS label.
*/}}
{{- define "ovn-kubernetes.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels every resource carries.
*/}}
{{- define "ovn-kubernetes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "ovn-kubernetes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels a workload selects its pods by (immutable once installed), with the component ("node" or
"control-plane"): (dict "root" $ "component" "node").
*/}}
{{- define "ovn-kubernetes.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ovn-kubernetes.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The ServiceAccounts of the node pods and of the cluster manager.
*/}}
{{- define "ovn-kubernetes.nodeServiceAccountName" -}}
{{- default (printf "%s-node" (include "ovn-kubernetes.fullname" .)) .Values.serviceAccount.nodeName }}
{{- end }}

{{- define "ovn-kubernetes.clusterManagerServiceAccountName" -}}
{{- default (printf "%s-cluster-manager" (include "ovn-kubernetes.fullname" .)) .Values.serviceAccount.clusterManagerName }}
{{- end }}

{{/*
The image reference: repository@digest. A tag is accepted only when no digest is set (local
development); with neither, rendering fails rather than deploy an unpinned image.
*/}}
{{- define "ovn-kubernetes.image" -}}
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
The OVN databases' unix sockets (node-local: the zone's ovnkube, ovn-northd and the host's
ovn-controller use them) and files (hostPath /etc/ovn).
*/}}
{{- define "ovn-kubernetes.nbSocket" -}}/var/run/ovn/ovnnb_db.sock{{- end }}
{{- define "ovn-kubernetes.sbSocket" -}}/var/run/ovn/ovnsb_db.sock{{- end }}

{{/*
The API server ovnkube talks to, and its ServiceAccount credentials (arguments, one a line).
*/}}
{{- define "ovn-kubernetes.apiArgs" -}}
{{- if .Values.kubernetes.apiServer }}
- --k8s-apiserver={{ .Values.kubernetes.apiServer }}
{{- else }}
- --k8s-apiserver=https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)
{{- end }}
- --k8s-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token
- --k8s-cacert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt
- --ovn-config-namespace={{ .Release.Namespace }}
{{- end }}

{{/*
The network arguments the cluster manager and the node's ovnkube share.
*/}}
{{- define "ovn-kubernetes.networkArgs" -}}
- --enable-interconnect
- --cluster-subnets={{ join "," .Values.network.clusterSubnets }}
- --k8s-service-cidr={{ join "," .Values.network.serviceCIDRs }}
- --loglevel={{ .Values.logLevel }}
{{- end }}

{{/*
The downward-API environment of every ovnkube container: the node's name and IP.
*/}}
{{- define "ovn-kubernetes.nodeEnv" -}}
- name: K8S_NODE
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: K8S_NODE_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- end }}

{{/*
Checks the values the templates rely on; renders nothing.
*/}}
{{- define "ovn-kubernetes.validate" -}}
{{- $n := .Values.network }}
{{- if not (has $n.gatewayMode (list "shared" "local")) }}
{{- fail (printf "network.gatewayMode %q is not shared or local" (toString $n.gatewayMode)) }}
{{- end }}
{{- if not (has $n.encapType (list "geneve" "vxlan")) }}
{{- fail (printf "network.encapType %q is not geneve or vxlan" (toString $n.encapType)) }}
{{- end }}
{{- if not (kindIs "slice" $n.clusterSubnets) }}
{{- fail "network.clusterSubnets must be a list of CIDR/hostSubnetLength, e.g. [10.244.0.0/16/24]" }}
{{- end }}
{{- if not $n.clusterSubnets }}
{{- fail "network.clusterSubnets is empty: at least one CIDR/hostSubnetLength, e.g. 10.244.0.0/16/24" }}
{{- end }}
{{- range $n.clusterSubnets }}
{{- $entry := toString . }}
{{- $v4 := regexMatch "^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}/[0-9]{1,2}/[0-9]{1,2}$" $entry }}
{{- $v6 := regexMatch "^[0-9a-fA-F:]*:[0-9a-fA-F:]*/[0-9]{1,3}/[0-9]{1,3}$" $entry }}
{{- if not (or $v4 $v6) }}
{{- fail (printf "network.clusterSubnets entry %q is not CIDR/hostSubnetLength (e.g. 10.244.0.0/16/24)" $entry) }}
{{- end }}
{{- $parts := splitList "/" $entry }}
{{- $prefix := atoi (index $parts 1) }}
{{- $host := atoi (index $parts 2) }}
{{- $max := ternary 32 128 $v4 }}
{{- if or (gt $prefix $max) (le $host $prefix) (gt $host $max) }}
{{- fail (printf "network.clusterSubnets entry %q: the host subnet length must be longer than the prefix and at most %d" $entry $max) }}
{{- end }}
{{- end }}
{{- if not (kindIs "slice" $n.serviceCIDRs) }}
{{- fail "network.serviceCIDRs must be a list of CIDRs, e.g. [10.96.0.0/12]" }}
{{- end }}
{{- if not $n.serviceCIDRs }}
{{- fail "network.serviceCIDRs is empty: at least one CIDR, e.g. 10.96.0.0/12" }}
{{- end }}
{{- range $n.serviceCIDRs }}
{{- $cidr := toString . }}
{{- $v4 := regexMatch "^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}/([0-9]|[12][0-9]|3[0-2])$" $cidr }}
{{- $v6 := regexMatch "^[0-9a-fA-F:]*:[0-9a-fA-F:]*/([0-9]|[1-9][0-9]|1[01][0-9]|12[0-8])$" $cidr }}
{{- if not (or $v4 $v6) }}
{{- fail (printf "network.serviceCIDRs entry %q is not a CIDR (e.g. 10.96.0.0/12)" $cidr) }}
{{- end }}
{{- end }}
{{- if not (or (kindIs "int" $n.mtu) (kindIs "int64" $n.mtu) (kindIs "float64" $n.mtu)) }}
{{- fail (printf "network.mtu %q is not a number (576..9216)" (toString $n.mtu)) }}
{{- end }}
{{- if ne (float64 (int $n.mtu)) (float64 $n.mtu) }}
{{- fail (printf "network.mtu %v is not a whole number (576..9216)" $n.mtu) }}
{{- end }}
{{- if or (lt (int $n.mtu) 576) (gt (int $n.mtu) 9216) }}
{{- fail (printf "network.mtu %v is out of range 576..9216" $n.mtu) }}
{{- end }}
{{- if not (has (toString .Values.logLevel) (list "0" "1" "2" "3" "4" "5")) }}
{{- fail (printf "logLevel %v is not one of 0..5" .Values.logLevel) }}
{{- end }}
{{- if not (has .Values.ovnLogLevel (list "off" "emer" "err" "warn" "info" "dbg")) }}
{{- fail (printf "ovnLogLevel %q is not one of off, emer, err, warn, info, dbg" (toString .Values.ovnLogLevel)) }}
{{- end }}
{{- if not (has .Values.ovnkube.controllerInitFlag (list "init-network-controller-manager" "init-ovnkube-controller")) }}
{{- fail (printf "ovnkube.controllerInitFlag %q is not init-network-controller-manager or init-ovnkube-controller" (toString .Values.ovnkube.controllerInitFlag)) }}
{{- end }}
{{- with .Values.kubernetes.apiServer }}
{{- if not (regexMatch "^https?://[^/\\s]+$" .) }}
{{- fail (printf "kubernetes.apiServer %q is not an http(s)://host:port URL" .) }}
{{- end }}
{{- end }}
{{- if and $n.gatewayInterface (not (regexMatch "^[A-Za-z0-9_.:-]{1,15}$" $n.gatewayInterface)) }}
{{- fail (printf "network.gatewayInterface %q is not an interface name" $n.gatewayInterface) }}
{{- end }}
{{- range $key := list "port" "ovnPort" "clusterManagerPort" }}
{{- $port := index $.Values.metrics $key }}
{{- if or (lt (int $port) 1) (gt (int $port) 65535) }}
{{- fail (printf "metrics.%s %v is not a port (1..65535)" $key $port) }}
{{- end }}
{{- end }}
{{- end }}
