{{/*
Release-scoped names: every object, cluster-scoped ones included, is named from "fullname", so
two releases never collide. A release named ckpt-preempt (the plain files in deploy/ are that
release in namespace ckpt-preempt) gets "ckpt-preempt"; others get "<release>-ckpt-preempt".
Truncated to 40 characters so the longest suffix ("-reserved-toleration") still fits in 63.
*/}}
{{- define "ckpt-preempt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "ckpt-preempt.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ckpt-preempt.controller" -}}{{ include "ckpt-preempt.fullname" . }}-controller{{- end -}}
{{- define "ckpt-preempt.agent" -}}{{ include "ckpt-preempt.fullname" . }}-agent{{- end -}}
{{- define "ckpt-preempt.hwprobe" -}}{{ include "ckpt-preempt.fullname" . }}-hwprobe{{- end -}}
{{- define "ckpt-preempt.extender" -}}{{ include "ckpt-preempt.fullname" . }}-extender{{- end -}}

{{/* The controller's identity, as admission policies see it. */}}
{{- define "ckpt-preempt.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "ckpt-preempt.controller" . }}
{{- end -}}

{{- define "ckpt-preempt.labels" -}}
app.kubernetes.io/name: {{ include "ckpt-preempt.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Pod selector of one component: include "ckpt-preempt.selector" (list . "controller") */}}
{{- define "ckpt-preempt.selector" -}}
{{- $top := index . 0 -}}
app.kubernetes.io/name: {{ include "ckpt-preempt.name" $top }}
app.kubernetes.io/instance: {{ $top.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Pod Security "restricted" for every container (and the pod's seccomp default). */}}
{{- define "ckpt-preempt.containerSecurity" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "ckpt-preempt.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "ckpt-preempt.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
