{{/* The metrics gateway's names (docs/multi-tenant-metrics.md, "Install"). */}}
{{- define "gpustack-operator.metricsGateway" -}}gpustack-operator-metrics-gateway{{- end }}

{{- define "gpustack-operator.metricsGatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpustack-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: metrics-gateway
{{- end }}

{{/* The gateway's serving-certificate Secret: multiTenantMetrics.tls.secretName, else the chart's. */}}
{{- define "gpustack-operator.metricsGatewayTLSSecret" -}}
{{- .Values.multiTenantMetrics.tls.secretName | default (printf "%s-generated-tls" (include "gpustack-operator.metricsGateway" .)) }}
{{- end }}

{{/*
The chart-issued CA and certificate for the gateway's Service, as JSON {"ca", "crt", "key"} (each
base64 PEM), as the worker's (gpustack-operator.generatedTLS): an existing Secret is reused
(lookup), so an upgrade keeps the CA tenants' datasources trust; remembered in .Values so the
Secret and every datasource carry the same CA in one render.
*/}}
{{- define "gpustack-operator.metricsGatewayGeneratedTLS" -}}
{{- if not (hasKey .Values "__gpustackMetricsGatewayTLS") }}
{{- $service := include "gpustack-operator.metricsGateway" . }}
{{- $found := lookup "v1" "Secret" .Release.Namespace (printf "%s-generated-tls" $service) }}
{{- $tls := dict }}
{{- if and $found $found.data (index $found.data "ca.crt") (index $found.data "tls.crt") (index $found.data "tls.key") }}
{{- $tls = dict "ca" (index $found.data "ca.crt") "crt" (index $found.data "tls.crt") "key" (index $found.data "tls.key") }}
{{- else }}
{{- $names := list (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) (printf "%s.%s" $service .Release.Namespace) }}
{{- $ca := genCA (printf "%s-ca" $service) 3650 }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service .Release.Namespace) nil $names 3650 $ca }}
{{- $tls = dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__gpustackMetricsGatewayTLS" $tls }}
{{- end }}
{{- index .Values "__gpustackMetricsGatewayTLS" | toJson }}
{{- end }}

{{/* The base64 PEM CA that verifies the gateway: tls.caBundle with a Secret of one's own, else the chart's. */}}
{{- define "gpustack-operator.metricsGatewayCABundle" -}}
{{- if .Values.multiTenantMetrics.tls.secretName }}
{{- .Values.multiTenantMetrics.tls.caBundle }}
{{- else }}
{{- (include "gpustack-operator.metricsGatewayGeneratedTLS" . | fromJson).ca }}
{{- end }}
{{- end }}
