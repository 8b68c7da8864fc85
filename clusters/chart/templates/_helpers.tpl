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

{{/*
The worker's serving-certificate Secret, or "" for the self-signed default. With the admission
webhook enabled and neither a Secret nor cert-manager given, the chart issues one itself
(gpustack-operator.generatedTLS): kube-apiserver calls webhooks only over a verified
certificate, so the per-start self-signed one cannot serve them.
*/}}
{{- define "gpustack-operator.workerTLSSecret" -}}
{{- if .Values.worker.tls.secretName }}
{{- .Values.worker.tls.secretName }}
{{- else if .Values.worker.tls.certManager.enabled }}
{{- include "gpustack-operator.worker" . }}-tls
{{- else if include "gpustack-operator.generatesTLS" . }}
{{- include "gpustack-operator.worker" . }}-generated-tls
{{- end }}
{{- end }}

{{/* Whether the chart issues the worker's certificate itself (see workerTLSSecret). */}}
{{- define "gpustack-operator.generatesTLS" -}}
{{- $tls := .Values.worker.tls }}
{{- if and .Values.worker.admissionWebhook.enabled (not $tls.secretName) (not $tls.caBundle) (not $tls.certManager.enabled) }}true{{ end }}
{{- end }}

{{/*
The chart-issued CA and serving certificate, as JSON {"ca", "crt", "key"} (each base64 PEM).
An existing Secret of that name is reused (lookup), so an upgrade keeps the certificate and
the caBundle that verifies it; without one (install, or `helm template`) a CA valid 10 years
is generated. Generated once per render and remembered in .Values, so the Secret, the webhook
configurations and the APIService carry the same CA whichever template renders first.
*/}}
{{- define "gpustack-operator.generatedTLS" -}}
{{- if not (hasKey .Values "__gpustackGeneratedTLS") }}
{{- $name := printf "%s-generated-tls" (include "gpustack-operator.worker" .) }}
{{- $found := lookup "v1" "Secret" .Release.Namespace $name }}
{{- $tls := dict }}
{{- if and $found $found.data (index $found.data "ca.crt") (index $found.data "tls.crt") (index $found.data "tls.key") }}
{{- $tls = dict "ca" (index $found.data "ca.crt") "crt" (index $found.data "tls.crt") "key" (index $found.data "tls.key") }}
{{- else }}
{{- $service := include "gpustack-operator.worker" . }}
{{- $names := list (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) (printf "%s.%s" $service .Release.Namespace) }}
{{- $ca := genCA (printf "%s-ca" $service) 3650 }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service .Release.Namespace) nil $names 3650 $ca }}
{{- $tls = dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__gpustackGeneratedTLS" $tls }}
{{- end }}
{{- index .Values "__gpustackGeneratedTLS" | toJson }}
{{- end }}

{{/* The base64 CA that verifies the worker's certificate, or "" when none is known. */}}
{{- define "gpustack-operator.workerCABundle" -}}
{{- if .Values.worker.tls.caBundle }}
{{- .Values.worker.tls.caBundle }}
{{- else if include "gpustack-operator.generatesTLS" . }}
{{- (include "gpustack-operator.generatedTLS" . | fromJson).ca }}
{{- end }}
{{- end }}

{{/*
resourceNames: the extended-resource base per manufacturer where ours must not be the default
(beside another device plugin serving it: docs/deploy.md, "Beside the NVIDIA GPU Operator").
Every component reads the same variables (gpustack_core.resourceconfig): each Device Manager,
the worker (Pod webhook, node capacity). A manufacturer the project does not know is refused
here; the name itself is checked by values.schema.json and again by each daemon at start.
*/}}
{{- define "gpustack-operator.resourceNameEnv" -}}
{{- $defaults := .Files.Get "admission/resource-bases.json" | fromJson }}
{{- range $mfr, $base := .Values.resourceNames }}
{{- if not (hasKey $defaults $mfr) }}
{{- fail (printf "resourceNames.%s: not a manufacturer the operator knows (%s)" $mfr (keys $defaults | sortAlpha | join ", ")) }}
{{- end }}
{{- if $base }}
- name: GPUSTACK_{{ upper $mfr }}_ACCELERATABLE_RESOURCE_NAME
  value: {{ $base | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Pod webhooks' matchConditions (admission/pod-match-conditions.json, generated by
gpustack_core.podmatch for the default bases) with resourceNames applied: every base appears
there only as the quoted literals '<base>', '<base>.sliced' and '<base>.partitioned', which are
replaced, through a placeholder first so that one override never rewrites another's result.
A chart test holds this equal to podmatch.match_conditions for the overridden names.
*/}}
{{- define "gpustack-operator.podMatchConditions" -}}
{{- $text := .Files.Get "admission/pod-match-conditions.json" }}
{{- $defaults := .Files.Get "admission/resource-bases.json" | fromJson }}
{{- $suffixes := list "" ".sliced" ".partitioned" }}
{{- range $mfr, $base := .Values.resourceNames }}
{{- if and $base (hasKey $defaults $mfr) }}
{{- range $suffixes }}
{{- $text = replace (printf "'%s%s'" (index $defaults $mfr) .) (printf "'@%s@%s'" $mfr .) $text }}
{{- end }}
{{- end }}
{{- end }}
{{- range $mfr, $base := .Values.resourceNames }}
{{- if and $base (hasKey $defaults $mfr) }}
{{- range $suffixes }}
{{- $text = replace (printf "'@%s@%s'" $mfr .) (printf "'%s%s'" $base .) $text }}
{{- end }}
{{- end }}
{{- end }}
{{- $text }}
{{- end }}
