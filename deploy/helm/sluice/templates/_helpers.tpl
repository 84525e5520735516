{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "sluice.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "sluice.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* sluice.yaml: the listeners, upstream and store from the values, then .Values.config. */}}
{{- define "sluice.config" -}}
listen: 0.0.0.0:{{ .Values.ports.traffic }}
admin_listen: 0.0.0.0:{{ .Values.ports.admin }}
decision_api:
  listen: 0.0.0.0:{{ .Values.ports.decision }}
{{- if .Values.envoyRLS.enabled }}
envoy_rls:
  listen: 0.0.0.0:{{ .Values.ports.envoyRLS }}
  config_dir: /etc/sluice-ratelimit
{{- end }}
{{- with .Values.upstream }}
upstream: {{ . | quote }}
{{- end }}
store:
{{- if .Values.redis.enabled }}
  type: redis
  redis:
    url: ${SLUICE_REDIS_URL}
  on_error: {{ .Values.redis.onError }}
  instances: {{ .Values.replicaCount }}
{{- else }}
  type: memory
{{- end }}
{{- with .Values.config }}
{{ toYaml . }}
{{- end }}
{{- end }}
