{{/*
Expand the name of the chart.
*/}}
{{- define "relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name (63 characters at most: some Kubernetes name fields are limited to that).
If the release name contains the chart name it is used as the full name.
*/}}
{{- define "relay.fullname" -}}
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
Chart name and version, as used by the chart label.
*/}}
{{- define "relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "relay.labels" -}}
helm.sh/chart: {{ include "relay.chart" . }}
{{ include "relay.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels. Workloads add app.kubernetes.io/component (server | migrate) so that the
Services never select the migration Job's pod.
*/}}
{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Container image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "relay.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Name of the Secret the pods load with envFrom.
*/}}
{{- define "relay.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "relay.fullname" .) }}
{{- end }}

{{/*
Secret data (base64, sorted keys) of the chart-managed Secret. Its sha256 is the pods'
checksum/secret annotation, so changing a secret value rolls the Deployment.
*/}}
{{- define "relay.secretData" -}}
{{- $data := dict }}
{{- with .Values.secrets.databaseUrl }}{{ $_ := set $data "RELAY_DATABASE_URL" (b64enc .) }}{{ end }}
{{- with .Values.secrets.redisUrl }}{{ $_ := set $data "RELAY_REDIS_URL" (b64enc .) }}{{ end }}
{{- with .Values.secrets.masterKey }}{{ $_ := set $data "RELAY_MASTER_KEY" (b64enc .) }}{{ end }}
{{- with .Values.secrets.adminToken }}{{ $_ := set $data "RELAY_ADMIN_TOKEN" (b64enc .) }}{{ end }}
{{- toYaml $data }}
{{- end }}

{{/*
"true" when Relay runs against an external database (Postgres): either a database URL in
values or a user-managed Secret (which must then hold RELAY_DATABASE_URL). Empty otherwise
(embedded mode: SQLite in the pod).
*/}}
{{- define "relay.databaseConfigured" -}}
{{- if or .Values.secrets.databaseUrl .Values.secrets.existingSecret }}true{{ end }}
{{- end }}

{{/*
"true" when the pre-install/pre-upgrade migration Job is rendered.
*/}}
{{- define "relay.migrationJobEnabled" -}}
{{- if and .Values.migrations.enabled (include "relay.databaseConfigured" .) }}true{{ end }}
{{- end }}

{{/*
Name of the batch payload claim: the existing claim, or the one the chart creates.
*/}}
{{- define "relay.payloadClaimName" -}}
{{- .Values.payloads.persistentVolumeClaim.existingClaim | default (printf "%s-batch-payloads" (include "relay.fullname" .)) }}
{{- end }}

{{/*
Grace period: the preStop sleep, then Relay's own drain (RELAY_SHUTDOWN_GRACE_S), then a
margin for the process to exit. Always longer than RELAY_SHUTDOWN_GRACE_S.
*/}}
{{- define "relay.terminationGracePeriodSeconds" -}}
{{- add .Values.preStopSleepSeconds .Values.config.shutdownGraceS .Values.terminationGraceMarginSeconds }}
{{- end }}

{{/*
The most server pods that can run at once: autoscaling.maxReplicas with the autoscaler,
replicaCount otherwise.
*/}}
{{- define "relay.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas | int64 }}{{ else }}{{ .Values.replicaCount | int64 }}{{ end }}
{{- end }}

{{/*
Checks values.schema.json cannot express (they compare two values, or they concern the
autoscaler's maxReplicas): each fails the render with what to change.
*/}}
{{- define "relay.validateValues" -}}
{{- $max := include "relay.maxReplicas" . | int64 }}
{{- $payloads := .Values.payloads }}
{{- $pvc := $payloads.persistentVolumeClaim }}
{{- if le (int64 .Values.config.batchRescueAfterS) (int64 .Values.config.batchItemTimeoutS) }}
{{- fail "config.batchRescueAfterS must be greater than config.batchItemTimeoutS (SPEC §10.6)" }}
{{- end }}
{{- if gt $max 1 }}
{{- if not (include "relay.databaseConfigured" .) }}
{{- fail (printf "%d replicas need Postgres: set secrets.databaseUrl or secrets.existingSecret (SPEC §1)" $max) }}
{{- end }}
{{- if and (eq $payloads.store "files") (gt (int64 .Values.config.batchWorkers) 0) (eq $payloads.mode "emptyDir") }}
{{- fail (printf "%d replicas run batch items (config.batchWorkers=%d) but payloads are pod-local (payloads.store=files, payloads.mode=emptyDir): items would fail with \"load input:\" (SPEC §10.7). Set payloads.store=database (recommended), or payloads.mode=persistentVolumeClaim on a ReadWriteMany volume, or config.batchWorkers=0 with /v1/batches routed to one batch replica" $max (int64 .Values.config.batchWorkers)) }}
{{- end }}
{{- if and (eq $payloads.mode "persistentVolumeClaim") (not $pvc.existingClaim) (not (has "ReadWriteMany" $pvc.accessModes)) }}
{{- fail (printf "%d replicas cannot all mount a claim without ReadWriteMany (payloads.persistentVolumeClaim.accessModes: %s): add ReadWriteMany, or use payloads.store=database with payloads.mode=emptyDir" $max (join ", " $pvc.accessModes)) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int64 .Values.autoscaling.minReplicas) (int64 .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and (eq $payloads.mode "persistentVolumeClaim") (not $pvc.existingClaim) (not (has "ReadWriteMany" $pvc.accessModes)) (ne (get .Values.strategy "type" | default "RollingUpdate") "Recreate") }}
{{- fail "a payload claim without ReadWriteMany needs strategy.type=Recreate: during a rolling update the new pod cannot mount the claim the old one holds" }}
{{- end }}
{{- if and (include "relay.migrationJobEnabled" .) (ge (int64 .Values.migrations.activeDeadlineSeconds) (int64 .Values.migrations.helmTimeoutSeconds)) }}
{{- fail (printf "migrations.activeDeadlineSeconds (%d) must be below migrations.helmTimeoutSeconds (%d, the --timeout you give helm): Helm would give up on the hook while the Job still runs" (int64 .Values.migrations.activeDeadlineSeconds) (int64 .Values.migrations.helmTimeoutSeconds)) }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (not (kindIs "string" .minAvailable)) (not $.Values.autoscaling.enabled) (ge (int64 .minAvailable) (int64 $.Values.replicaCount)) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%d with replicaCount=%d blocks every node drain: use maxUnavailable, or a lower minAvailable" (int64 .minAvailable) (int64 $.Values.replicaCount)) }}
{{- end }}
{{- end }}
{{- end }}

