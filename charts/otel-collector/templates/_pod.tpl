{{/*
The pod spec both collectors share: (dict "root" $ "component" "node"|"cluster"
"resources" RESOURCES "ports" PORTS "mounts" MOUNTS "volumes" VOLUMES), where MOUNTS and VOLUMES
are YAML lists (strings) beyond the config's.
*/}}
{{- define "otel-collector.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "otel-collector.serviceAccountName" $root }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
containers:
  - name: otel-collector
    image: {{ include "otel-collector.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args: ["--config=/conf/config.yaml"]
    env:
      - name: K8S_NODE_NAME
        valueFrom:
          fieldRef:
            fieldPath: spec.nodeName
      - name: MY_POD_IP
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
      {{- with $root.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    ports:
      - name: health
        containerPort: 13133
        protocol: TCP
      {{- with .ports }}
      {{- . | nindent 6 }}
      {{- end }}
    livenessProbe:
      httpGet:
        path: /
        port: health
    readinessProbe:
      httpGet:
        path: /
        port: health
    resources:
      {{- toYaml .resources | nindent 6 }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    volumeMounts:
      - name: config
        mountPath: /conf
        readOnly: true
      {{- with .mounts }}
      {{- . | nindent 6 }}
      {{- end }}
volumes:
  - name: config
    configMap:
      name: {{ include "otel-collector.fullname" $root }}-{{ .component }}
      items:
        - key: config.yaml
          path: config.yaml
  {{- with .volumes }}
  {{- . | nindent 2 }}
  {{- end }}
{{- end }}
