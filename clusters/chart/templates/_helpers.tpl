{{/*
Names are fixed rather than derived from the release: the APIService (cluster-scoped) names
the worker's Service, the docs and the Prometheus configuration name the Device Manager's, and
the daemons find each other by label. One release per cluster.
*/}}

{{- define "gpustack-operator.name" -}}gpustack-operator{{- end }}

{{- define "gpustack-operator.worker" -}}gpustack-operator-worker{{- end }}

{{- define "gpustack-operator.deviceManager" -}}gpustack-operator-device-manager{{- end }}

{{/*
Labels every object carries. Never app.kubernetes.io/part-of: on a Pod that label names the
Instance the Pod belongs to, and the daemons match Instance Pods by it.
*/}}
{{- define "gpustack-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpustack-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpustack-operator.workerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpustack-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end }}

{{- define "gpustack-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The manufacturers that get a Device Manager DaemonSet, sorted, as a JSON list: those enabled
under deviceManager.manufacturers plus those given a simulate.<m>.recording.
*/}}
{{- define "gpustack-operator.manufacturers" -}}
{{- $found := list }}
{{- range $name, $m := .Values.deviceManager.manufacturers }}
{{- if and $m $m.enabled }}{{ $found = append $found $name }}{{ end }}
{{- end }}
{{- range $name, $s := .Values.simulate }}
{{- if and $s $s.recording }}{{ $found = append $found $name }}{{ end }}
{{- end }}
{{- $found | uniq | sortAlpha | toJson }}
{{- end }}

{{/* The worker's serving-certificate Secret, or "" for the self-signed default. */}}
{{- define "gpustack-operator.workerTLSSecret" -}}
{{- if .Values.worker.tls.secretName }}
{{- .Values.worker.tls.secretName }}
{{- else if .Values.worker.tls.certManager.enabled }}
{{- include "gpustack-operator.worker" . }}-tls
{{- end }}
{{- end }}
