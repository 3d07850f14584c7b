{{/*
The processor's workload: a Deployment, or a StatefulSet when each replica
keeps its own view store across replacement (viewStore.volume statefulSet).
Refuses a view store it cannot make.
*/}}
{{- define "kep.workloadKind" -}}
{{- $vs := .Values.viewStore -}}
{{- if not (has $vs.volume (list "emptyDir" "persistentVolumeClaim" "statefulSet")) -}}
{{- fail (printf "viewStore.volume must be emptyDir, persistentVolumeClaim or statefulSet, got %q" (toString $vs.volume)) -}}
{{- end -}}
{{- if ne $vs.volume "emptyDir" -}}
{{- $size := toString ($vs.persistentVolumeClaim.size | default "") -}}
{{- if not $size -}}
{{- fail (printf "viewStore.volume %s makes a claim for each replica's view store: set viewStore.persistentVolumeClaim.size (e.g. 50Gi)" $vs.volume) -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $size) -}}
{{- fail (printf "viewStore.persistentVolumeClaim.size must be a quantity like 50Gi, got %q" $size) -}}
{{- end -}}
{{- end -}}
{{- if eq $vs.volume "statefulSet" -}}StatefulSet{{- else -}}Deployment{{- end -}}
{{- end -}}

{{/* The claim's spec, per pod (ephemeral) or per replica (StatefulSet). */}}
{{- define "kep.viewsClaimSpec" -}}
accessModes: [ReadWriteOnce]
{{- with .Values.viewStore.persistentVolumeClaim.storageClassName }}
storageClassName: {{ . }}
{{- end }}
resources:
  requests:
    storage: {{ .Values.viewStore.persistentVolumeClaim.size }}
{{- end -}}

{{/*
The pod template, one for both workload kinds, so that a StatefulSet runs
exactly what the Deployment runs; only where the views volume comes from
differs (the StatefulSet's volumeClaimTemplates add it to the pod).
*/}}
{{- define "kep.podTemplate" -}}
{{- $delay := include "kep.seconds" .Values.drain.drainDelay | int -}}
{{- $grace := include "kep.seconds" .Values.drain.grace | int -}}
metadata:
  labels:
    {{- include "kep.selector" . | nindent 4 }}
spec:
  # drain-delay + grace + margin: SIGTERM → NOT_SERVING → drain → exit (docs/deploy.md).
  terminationGracePeriodSeconds: {{ add $delay $grace .Values.drain.terminationMargin }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532 # the views volume is the processor's to write
    seccompProfile: { type: RuntimeDefault }
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "kep.selector" . | nindent 8 }}
  containers:
  - name: kafka-ext-proc
    image: {{ include "kep.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
    - serve
    - --config=/etc/kafka-ext-proc/config.yaml
    - --listen=0.0.0.0:{{ .Values.service.grpcPort }}
    - --admin=0.0.0.0:{{ .Values.service.adminPort }}
    - --drain-delay={{ .Values.drain.drainDelay }}
    - --grace={{ .Values.drain.grace }}
    ports:
    - { name: grpc, containerPort: {{ .Values.service.grpcPort }} }
    - { name: admin, containerPort: {{ .Values.service.adminPort }} }
    env:
    - name: GOMEMLIMIT
      value: {{ .Values.goMemLimit | quote }}
    - name: KAFKA_USERNAME
      valueFrom: { secretKeyRef: { name: {{ include "kep.secretName" . }}, key: username } }
    - name: KAFKA_PASSWORD
      valueFrom: { secretKeyRef: { name: {{ include "kep.secretName" . }}, key: password } }
    # Ready = every static view and reply index caught up (GET /readyz); until
    # then the startup probe holds liveness off.
    startupProbe:
      httpGet: { path: /readyz, port: admin }
      periodSeconds: {{ .Values.startupProbe.periodSeconds }}
      failureThreshold: {{ .Values.startupProbe.failureThreshold }}
    readinessProbe:
      httpGet: { path: /readyz, port: admin }
      periodSeconds: 5
      failureThreshold: 1
    livenessProbe:
      httpGet: { path: /healthz, port: admin }
      periodSeconds: 10
      failureThreshold: 3
    resources:
      {{- toYaml .Values.resources | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: { drop: [ALL] }
    volumeMounts:
    - { name: config, mountPath: /etc/kafka-ext-proc, readOnly: true }
    - { name: views, mountPath: {{ .Values.viewStore.mountPath }} }
  volumes:
  - name: config
    configMap:
      name: {{ include "kep.name" . }}
  {{- if eq .Values.viewStore.volume "emptyDir" }}
  - name: views
    emptyDir:
      sizeLimit: {{ .Values.viewStore.emptyDir.sizeLimit }}
  {{- else if eq .Values.viewStore.volume "persistentVolumeClaim" }}
  - name: views
    ephemeral:
      volumeClaimTemplate:
        spec:
          {{- include "kep.viewsClaimSpec" . | nindent 10 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
