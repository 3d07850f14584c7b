{{- define "kep.name" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kep.labels" -}}
app.kubernetes.io/name: kafka-ext-proc
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kep.selector" -}}
app.kubernetes.io/name: kafka-ext-proc
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kep.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ required "image.tag or image.digest is required" .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "kep.secretName" -}}
{{- .Values.credentials.existingSecret | default (printf "%s-kafka" (include "kep.name" .)) -}}
{{- end -}}

{{/* Seconds of a Go duration of whole seconds ("30s"). */}}
{{- define "kep.seconds" -}}
{{- if not (regexMatch "^[0-9]+s$" .) -}}
{{- fail (printf "drain durations are whole seconds like 30s, got %q" .) -}}
{{- end -}}
{{- trimSuffix "s" . -}}
{{- end -}}
