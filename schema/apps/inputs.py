"""Inputs of the app mutations. Secrets (a Git token, password or SSH key) are marked so the
audit log records them as "[redacted]"."""

from __future__ import annotations

import strawberry

from core.apps import sources
from core.apps.requests import CredentialRequest, SourceRequest, TargetRequest
from schema.common.inputs import SECRET


@strawberry.input(
    description="A Git credential: a token, a username and password (https), or an SSH key "
    "with known_hosts (ssh://). Sealed at rest and only ever written into a Secret in the target."
)
class GitCredentialInput:
    token: str | None = strawberry.field(
        default=None, description="A bearer token (Flux's bearerToken).", metadata=SECRET
    )
    username: str | None = strawberry.field(
        default=None, description="For basic auth, with password."
    )
    password: str | None = strawberry.field(
        default=None,
        description="For basic auth; a forge's access token goes here with its username.",
        metadata=SECRET,
    )
    ssh_private_key: str | None = strawberry.field(
        default=None,
        description="A private key (PEM or OpenSSH) for an ssh:// URL.",
        metadata=SECRET,
    )
    known_hosts: str | None = strawberry.field(
        default=None, description="The host keys of the Git server (ssh-keyscan), with an SSH key."
    )


@strawberry.input(description="A Git repository to apply: a GitRepository and a Kustomization.")
class GitSourceInput:
    url: str = strawberry.field(
        description="https://, http:// or ssh:// URL; no credentials in it."
    )
    branch: str | None = strawberry.field(
        default=None, description="The branch to follow; main when no ref is given."
    )
    tag: str | None = strawberry.field(default=None, description="A tag to check out.")
    semver: str | None = strawberry.field(
        default=None, description="The newest tag in this semver range (>=1.0.0 <2.0.0, 1.x)."
    )
    commit: str | None = strawberry.field(
        default=None, description="A full commit SHA (with or without a branch)."
    )
    path: str = strawberry.field(
        default=sources.DEFAULT_PATH,
        description="The directory to apply: plain YAML or a kustomization.yaml (default ./).",
    )
    interval: str = strawberry.field(
        default=sources.DEFAULT_INTERVAL,
        description="How often Flux fetches and applies (default 5m).",
    )
    credential: GitCredentialInput | None = strawberry.field(
        default=None,
        description="For a private repository; the audit log records it as [redacted].",
        metadata=SECRET,
    )

    def source(self) -> sources.GitSource:
        return sources.GitSource(
            self.url, self.branch, self.tag, self.semver, self.commit, self.path, self.interval
        )


@strawberry.input(description="A Helm chart to install: a HelmRepository and a HelmRelease.")
class HelmSourceInput:
    repository_url: str = strawberry.field(
        description="The chart repository (https://, http://) or OCI registry (oci://)."
    )
    chart: str = strawberry.field(description="The chart's name.")
    version: str = strawberry.field(
        default=sources.DEFAULT_VERSION,
        description="A version or a semver range (default *: the newest).",
    )
    values: str | None = strawberry.field(default=None, description="Values as YAML (a mapping).")
    interval: str = strawberry.field(
        default=sources.DEFAULT_INTERVAL,
        description="How often Flux checks the chart (default 5m).",
    )

    def source(self) -> sources.HelmSource:
        return sources.HelmSource(
            self.repository_url, self.chart, self.version, self.values, self.interval
        )


@strawberry.input(description="What an app delivers: give git or helm.")
class AppSourceInput:
    git: GitSourceInput | None = strawberry.field(default=None, description="A Git repository.")
    helm: HelmSourceInput | None = strawberry.field(default=None, description="A Helm chart.")

    def request(self, remove_credential: bool = False) -> SourceRequest:
        given = None if self.git is None else self.git.credential
        credential = None
        if given is not None:
            credential = CredentialRequest(
                given.token,
                given.username,
                given.password,
                given.ssh_private_key,
                given.known_hosts,
            )
        return SourceRequest(
            git=None if self.git is None else self.git.source(),
            helm=None if self.helm is None else self.helm.source(),
            credential=credential,
            remove_credential=remove_credential,
        )


@strawberry.input(
    description="Where an app runs: a CloudSpace (and its vCluster) or an environment (its "
    "space and namespace); give cloudSpaceId or environmentId."
)
class AppTargetInput:
    cloud_space_id: strawberry.ID | None = strawberry.field(
        default=None, description="A CloudSpace of the org."
    )
    vcluster_name: str | None = strawberry.field(
        default=None, description="The CloudSpace's vCluster (default: its first, named like it)."
    )
    environment_id: strawberry.ID | None = strawberry.field(
        default=None, description="An environment of the org; its space must run Flux."
    )
    namespace: str | None = strawberry.field(
        default=None,
        description="In a CloudSpace: the namespace for its Flux objects and workloads "
        "(default default). An environment's apps go to its namespace.",
    )

    def request(self) -> TargetRequest:
        return TargetRequest(
            self.cloud_space_id, self.vcluster_name, self.environment_id, self.namespace
        )


@strawberry.input(description="A new app; its first revision is QUEUED at once.")
class CreateAppInput:
    name: str = strawberry.field(
        description="A DNS-1123 label of at most 53 characters, unique per target."
    )
    target: AppTargetInput = strawberry.field(description="Where it runs.")
    source: AppSourceInput = strawberry.field(description="What it delivers.")
    suspended: bool = strawberry.field(default=False, description="Deliver it suspended.")


@strawberry.input(
    description="A new source for an app (its kind stays); a change makes a revision."
)
class UpdateAppInput:
    id: strawberry.ID = strawberry.field(description="The app.")
    source: AppSourceInput = strawberry.field(
        description="The whole source wanted; a Git credential left out is kept."
    )
    remove_credential: bool = strawberry.field(
        default=False, description="Drop the app's Git credential."
    )


@strawberry.input(description="An app to act on.")
class AppIdInput:
    id: strawberry.ID = strawberry.field(description="The app.")


@strawberry.input(
    description="Deletes an app: what it deployed is pruned, then its Flux objects go."
)
class DeleteAppInput:
    id: strawberry.ID = strawberry.field(description="The app.")
    confirm_name: str = strawberry.field(description="Must equal the app's name.")


@strawberry.input(description="A revision to act on.")
class AppRevisionIdInput:
    id: strawberry.ID = strawberry.field(description="The revision.")


@strawberry.input(description="Makes a new revision with an earlier revision's source.")
class RollbackAppInput:
    revision_id: strawberry.ID = strawberry.field(description="The earlier revision.")
