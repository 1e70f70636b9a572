"""What createApp and updateApp ask for, checked: the target (a CloudSpace and its vCluster,
or an environment), the name, and the source with its credential. Every problem of one
call is reported together, each on its input field; nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass

from core.apps import sources
from core.apps.sources import GitCredential, GitSource, HelmSource, Source, SourceKind
from core.cloudspaces.vcluster_rules import REMOVAL_STEPS
from core.common.errors import Problems
from core.common.names import dns_label_problem
from core.common.rbac import Viewer
from core.common.services import Unit
from core.spaces.statuses import CloudSpacePhase
from db import apps as app_rows
from db import owned
from db import vclusters as vcluster_rows
from db.cloudspace_tables import CloudSpace
from db.tables import Environment, Space

DEFAULT_NAMESPACE = "default"
# Helm names a release like its HelmRelease; longer than this it would be shortened.
MAX_NAME = 53


@dataclass(frozen=True)
class TargetRequest:
    cloud_space_id: str | None = None
    vcluster: str | None = None
    environment_id: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class CredentialRequest:
    token: str | None = None
    username: str | None = None
    password: str | None = None
    ssh_private_key: str | None = None
    known_hosts: str | None = None


@dataclass(frozen=True)
class SourceRequest:
    git: GitSource | None = None
    helm: HelmSource | None = None
    credential: CredentialRequest | None = None
    # updateApp: drop the credential the app has (a credential left out is kept).
    remove_credential: bool = False


@dataclass(frozen=True)
class CreateRequest:
    name: str
    target: TargetRequest
    source: SourceRequest
    suspended: bool = False


@dataclass(frozen=True)
class Placement:
    """A checked target: where the app's rows point and its objects go."""

    target_key: str
    cloud_space_id: str | None
    vcluster: str | None
    environment_id: str | None
    namespace: str
    # An environment's space, which must run Flux (checked on the cluster when it is ACTIVE).
    space: Space | None = None


async def placement(
    unit: Unit, viewer: Viewer, problems: Problems, target: TargetRequest
) -> Placement | None:
    """The target of a new app, or None with its problems under ["target"]."""
    at = Problems(*problems.root, "target")
    chosen = [target.cloud_space_id is not None, target.environment_id is not None]
    if sum(chosen) != 1:
        problems.add(["target"], "give a cloudSpaceId or an environmentId (one of them)")
        return None
    if target.environment_id is not None:
        return await _environment_placement(unit, viewer, problems, at, target)
    cloud_space = await owned.by_id(
        unit.session, CloudSpace, viewer.org_id, target.cloud_space_id or ""
    )
    if cloud_space is None:
        at.add(["cloudSpaceId"], "no such CloudSpace", "NOT_FOUND")
    elif cloud_space.phase == CloudSpacePhase.DELETING:
        at.add(["cloudSpaceId"], "the CloudSpace is being deleted", "PRECONDITION_FAILED")
    namespace = target.namespace if target.namespace is not None else DEFAULT_NAMESPACE
    if (why := dns_label_problem(namespace)) is not None:
        at.add(["namespace"], f"namespace {why}")
    if cloud_space is None or at.errors:
        problems.errors += at.errors
        return None
    vcluster = target.vcluster if target.vcluster is not None else cloud_space.name
    # Matched here, not in SQL: the name is the caller's text, whatever it holds.
    vclusters = await vcluster_rows.of_cloud_space(unit.session, cloud_space.id)
    found = next((v for v in vclusters if v.name == vcluster), None)
    if found is None:
        problems.add(
            ["target", "vclusterName"],
            f"CloudSpace {cloud_space.name} has no vCluster {vcluster!r}",
            "NOT_FOUND",
        )
        return None
    if found.step in REMOVAL_STEPS:
        problems.add(
            ["target", "vclusterName"],
            f"vCluster {vcluster!r} of CloudSpace {cloud_space.name} is being removed",
            "PRECONDITION_FAILED",
        )
        return None
    return Placement(f"cs:{cloud_space.id}/{vcluster}", cloud_space.id, vcluster, None, namespace)


async def _environment_placement(
    unit: Unit, viewer: Viewer, problems: Problems, at: Problems, target: TargetRequest
) -> Placement | None:
    if target.cloud_space_id is not None or target.vcluster is not None:
        at.add(["vclusterName"], "a vCluster goes with a cloudSpaceId")
    if target.namespace is not None:
        at.add(
            ["namespace"],
            "an environment's apps go to the environment's namespace; leave namespace out",
        )
    environment = await owned.by_id(
        unit.session, Environment, viewer.org_id, target.environment_id or ""
    )
    space = None
    if environment is None:
        at.add(["environmentId"], "no such environment", "NOT_FOUND")
    else:
        space = await owned.by_id(unit.session, Space, viewer.org_id, environment.space_id)
        if space is None or space.deregistered_at is not None:
            at.add(
                ["environmentId"],
                "the environment's space is deregistered (Space deregistered); bind it to a registered space first",
                "PRECONDITION_FAILED",
            )
    problems.errors += at.errors
    if environment is None or at.errors:
        return None
    return Placement(
        f"env:{environment.id}", None, None, environment.id, environment.namespace, space
    )


async def check_name(
    unit: Unit, viewer: Viewer, problems: Problems, name: str, target_key: str | None
) -> None:
    if (why := dns_label_problem(name)) is not None:
        problems.add(["name"], f"name {why}")
    elif len(name) > MAX_NAME:
        problems.add(
            ["name"],
            f"name must be at most {MAX_NAME} characters (Helm names its release after it)",
        )
    elif target_key is not None and await app_rows.by_target_name(
        unit.session, viewer.org_id, target_key, name
    ):
        problems.add(["name"], f"an app named {name!r} already runs on this target", "CONFLICT")


def checked_source(
    problems: Problems, request: SourceRequest, kind: SourceKind | None = None
) -> tuple[Source | None, GitCredential | None]:
    """The source and credential asked for (None with problems under ["source"]); `kind`:
    the app's own, which an update keeps."""
    at = Problems(*problems.root, "source")
    chosen: Source | None = request.git if request.git is not None else request.helm
    if (request.git is None) == (request.helm is None):
        problems.add(["source"], "give git or helm (one of them)")
        return None, None
    assert chosen is not None
    if kind is not None and chosen.kind != kind:
        problems.add(
            ["source"],
            f"this app's source is {kind.value}; create another app for a {chosen.kind.value} source",
        )
        return None, None
    credential = None
    if isinstance(chosen, GitSource):
        git = Problems(*at.root, "git")
        sources.check_git(git, chosen)
        if request.credential is not None:
            given = request.credential
            problems_of_credential = Problems(*git.root, "credential")
            credential = sources.git_credential(
                problems_of_credential,
                chosen.url,
                token=given.token,
                username=given.username,
                password=given.password,
                ssh_private_key=given.ssh_private_key,
                known_hosts=given.known_hosts,
            )
            git.errors += problems_of_credential.errors
        at.errors += git.errors
    else:
        helm = Problems(*at.root, "helm")
        sources.check_helm(helm, chosen)
        if request.credential is not None:
            helm.add(["credential"], "a credential goes with a Git source")
        at.errors += helm.errors
    problems.errors += at.errors
    return (None, None) if at.errors else (chosen, credential)
