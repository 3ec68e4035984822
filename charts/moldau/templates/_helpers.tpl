{{/* The chart's name, or nameOverride. */}}
{{- define "moldau.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<name> (just <release> when it already holds the name), at most 63 characters. */}}
{{- define "moldau.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "moldau.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's objects: <fullname>-operator. */}}
{{- define "moldau.operatorName" -}}
{{- printf "%s-operator" (include "moldau.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "moldau.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object of the release carries. */}}
{{- define "moldau.labels" -}}
helm.sh/chart: {{ include "moldau.chart" . }}
app.kubernetes.io/name: {{ include "moldau.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: moldau
{{- end }}

{{/* What selects the operator's pods (stable across upgrades). */}}
{{- define "moldau.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "moldau.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "moldau.operatorLabels" -}}
{{ include "moldau.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "moldau.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "moldau.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "moldau.operatorImage" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) }}
{{- end }}

{{- define "moldau.brokerImage" -}}
{{- default (printf "localhost/moldau-broker:%s" .Chart.AppVersion) .Values.operator.brokerImage }}
{{- end }}

{{/* Labels of the monitoring objects: the release's and monitoring.labels. */}}
{{- define "moldau.monitoringLabels" -}}
{{ include "moldau.labels" . }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The operator's rights, least privilege (the contract with operator/). Split in two: what only
exists cluster-wide, and what lives in the namespaces it watches (a Role per namespace when
operator.watchNamespaces lists them, else part of the one ClusterRole).
*/}}
{{- define "moldau.clusterScopedRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
- apiGroups: [kopf.dev]
  resources: [clusterkopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}

{{- define "moldau.namespacedRules" -}}
- apiGroups: [moldau.io]
  resources: [kafkaclusters, kafkaclusters/status, topics, topics/status, kafkausers,
              kafkausers/status]
  verbs: [get, list, watch, patch, update]
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [configmaps, secrets, services, serviceaccounts, persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
{{- end }}
