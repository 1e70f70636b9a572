"""Every rule the App Advisor runs, with its severity and what it reads: the one list
that `advisorRules`, exemptions and the README's table come from."""

from __future__ import annotations

from core.advisor.model import Family, Rule, Severity

F, C = Family.FAILURE, Family.CONFIGURATION
CRITICAL, WARNING, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO

CRASH_LOOP = Rule(
    "crash-loop",
    F,
    CRITICAL,
    "A container keeps crashing",
    "Pod containerStatuses (waiting CrashLoopBackOff, lastState.terminated reason and exit "
    "code), BackOff events",
)
OOM_KILLED = Rule(
    "oom-killed",
    F,
    CRITICAL,
    "A container was killed for using more memory than its limit",
    "Pod containerStatuses (state or lastState terminated OOMKilled), the container's memory limit",
)
IMAGE_PULL = Rule(
    "image-pull",
    F,
    CRITICAL,
    "An image cannot be pulled",
    "Pod containerStatuses (waiting ImagePullBackOff, ErrImagePull, InvalidImageName), the image",
)
CONTAINER_CONFIG = Rule(
    "container-config",
    F,
    CRITICAL,
    "A container cannot start: its configuration is missing",
    "Pod containerStatuses (waiting CreateContainerConfigError, CreateContainerError)",
)
UNSCHEDULABLE = Rule(
    "pod-unschedulable",
    F,
    WARNING,
    "Pods cannot be scheduled",
    "Pods Pending with condition PodScheduled False: the scheduler's reason and message",
)
CREATE_REFUSED = Rule(
    "create-refused",
    F,
    CRITICAL,
    "The controller cannot create pods",
    "FailedCreate events of ReplicaSets, StatefulSets, DaemonSets and Jobs (exceeded quota, "
    "forbidden) while the workload lacks pods",
)
WORKLOAD_UNAVAILABLE = Rule(
    "workload-unavailable",
    F,
    WARNING,
    "A workload has unavailable replicas",
    "Deployment status (unavailableReplicas, Available and Progressing conditions), "
    "StatefulSet readyReplicas, DaemonSet numberUnavailable; CRITICAL when none is available",
)
SERVICE_NO_PODS = Rule(
    "service-selects-nothing",
    F,
    WARNING,
    "A Service's selector matches no pod",
    "Services (spec.selector) and the pods of their namespace",
)
SERVICE_NO_ENDPOINTS = Rule(
    "service-no-ready-endpoints",
    F,
    WARNING,
    "A Service has no ready endpoints",
    "EndpointSlices of the Service (endpoints' conditions.ready); without any, its pods' Ready "
    "condition",
)
INGRESS_BACKEND = Rule(
    "ingress-backend-missing",
    F,
    CRITICAL,
    "An Ingress points at a missing Service or port",
    "Ingress rules and default backend, the Services of its namespace and their ports",
)
PVC_PENDING = Rule(
    "pvc-pending",
    F,
    WARNING,
    "A PersistentVolumeClaim is not bound",
    "PVC status.phase Pending, its warning events (ProvisioningFailed, FailedBinding), pods "
    "waiting for it",
)
HPA_TARGET = Rule(
    "hpa-target-missing",
    F,
    WARNING,
    "A HorizontalPodAutoscaler scales nothing",
    "HPA spec.scaleTargetRef and the Deployments, StatefulSets and ReplicaSets it may name",
)
HPA_METRICS = Rule(
    "hpa-no-metrics",
    F,
    WARNING,
    "A HorizontalPodAutoscaler cannot read its metrics",
    "HPA conditions ScalingActive and AbleToScale (False, with the reason and message)",
)
CRONJOB_FAILING = Rule(
    "cronjob-failing",
    F,
    WARNING,
    "A CronJob's last run failed",
    "The Jobs a CronJob made (condition Failed: reason and message) and their order",
)
FLUX_NOT_READY = Rule(
    "flux-not-ready",
    F,
    CRITICAL,
    "A Flux source or release is not Ready",
    "Kustomizations, HelmReleases, GitRepositories, HelmRepositories, OCIRepositories, "
    "HelmCharts and Buckets in the vCluster (Ready condition False, not suspended)",
)
REQUESTS_MISSING = Rule(
    "requests-missing",
    C,
    WARNING,
    "A container states no CPU or memory request",
    "Pod templates of Deployments, StatefulSets, DaemonSets, CronJobs and Jobs "
    "(resources.requests)",
)
LIMITS_MISSING = Rule(
    "limits-missing",
    C,
    WARNING,
    "A container states no CPU or memory limit",
    "Pod templates (resources.limits)",
)
READINESS_MISSING = Rule(
    "readiness-probe-missing",
    C,
    WARNING,
    "A serving container has no readiness probe",
    "Pod templates of long-running workloads: containers with ports and no readinessProbe",
)
LIVENESS_MISSING = Rule(
    "liveness-probe-missing",
    C,
    WARNING,
    "A serving container has no liveness probe",
    "Pod templates of long-running workloads: containers with ports and no livenessProbe",
)
IMAGE_TAG = Rule(
    "image-tag-latest",
    C,
    WARNING,
    "An image is not pinned: no tag, or `latest`",
    "Pod templates (image), the digests its pods run (containerStatuses imageID)",
)
RUN_AS_ROOT = Rule(
    "run-as-root",
    C,
    WARNING,
    "A container may run as root",
    "Pod and container securityContext (runAsNonRoot, runAsUser)",
)
PRIVILEGED = Rule(
    "privileged",
    C,
    CRITICAL,
    "A container runs privileged",
    "Container securityContext.privileged",
)
PRIVILEGE_ESCALATION = Rule(
    "privilege-escalation",
    C,
    WARNING,
    "A container may gain more privileges than it starts with",
    "Container securityContext.allowPrivilegeEscalation (unset counts as allowed)",
)
HOST_NETWORK = Rule(
    "host-network",
    C,
    WARNING,
    "Pods share the node's network, PID or IPC namespace",
    "Pod template hostNetwork, hostPID, hostIPC",
)
HOST_PORT = Rule(
    "host-port",
    C,
    WARNING,
    "A container binds a port on the node",
    "Container ports (hostPort)",
)
SINGLE_REPLICA = Rule(
    "single-replica",
    C,
    WARNING,
    "One replica and no PodDisruptionBudget",
    "Deployments and StatefulSets (spec.replicas), PodDisruptionBudgets selecting their pods, "
    "HPAs scaling them",
)
SURGE_HEADROOM = Rule(
    "surge-exceeds-headroom",
    C,
    WARNING,
    "A rollout's surge does not fit in the CloudSpace's quota",
    "Deployment strategy (maxSurge), its pods' requests, the CloudSpace's quota and what all "
    "its pods request",
)
REQUESTS_ABOVE_USAGE = Rule(
    "requests-above-usage",
    C,
    INFO,
    "Requests far above what the pods use",
    "Container requests and metrics.k8s.io PodMetrics (only when metrics-server answers)",
)

RULES: tuple[Rule, ...] = (
    CRASH_LOOP,
    OOM_KILLED,
    IMAGE_PULL,
    CONTAINER_CONFIG,
    UNSCHEDULABLE,
    CREATE_REFUSED,
    WORKLOAD_UNAVAILABLE,
    SERVICE_NO_PODS,
    SERVICE_NO_ENDPOINTS,
    INGRESS_BACKEND,
    PVC_PENDING,
    HPA_TARGET,
    HPA_METRICS,
    CRONJOB_FAILING,
    FLUX_NOT_READY,
    REQUESTS_MISSING,
    LIMITS_MISSING,
    READINESS_MISSING,
    LIVENESS_MISSING,
    IMAGE_TAG,
    RUN_AS_ROOT,
    PRIVILEGED,
    PRIVILEGE_ESCALATION,
    HOST_NETWORK,
    HOST_PORT,
    SINGLE_REPLICA,
    SURGE_HEADROOM,
    REQUESTS_ABOVE_USAGE,
)
BY_ID = {rule.id: rule for rule in RULES}
assert len(BY_ID) == len(RULES), "rule ids are unique"
